"""Queue delivery over real sockets against the reference server (``shared/queues.md`` §3-§6):
the subscribe ack's effective backlog, ``bm``/``lp`` on deliveries, one subscriber per
message, backlog limits, acknowledgement forms, cancel/expire, returns on disconnect,
unsubscribe and lease expiry, MaxCancels/MaxDeliveries, at-most-once, fairness, strict
leasing, the queue Filter. Absence is proved with a marker (a flush ack read after the fact)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, bodies, publish, start, stats

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.queues.engine import NEVER
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

Make = Callable[..., ServerThread]
"""``make(**QueueConfig fields)``: a started server with the queue ``work``."""


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    servers: list[ServerThread] = []

    def factory(**kwargs: object) -> ServerThread:
        cfg = QueueConfig(name="work", message_type="json", **kwargs)  # type: ignore[arg-type]
        server = start(tmp_path / str(len(servers)), cfg)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.stop()


def test_backlog_ack_headers_and_one_subscriber_per_message(make: Make) -> None:
    server = make(max_per_subscription_backlog=4)
    a, b = Consumer(server), Consumer(server)
    # min(requested, MaxPerSubscriptionBacklog), reported in the processed ack's "o"
    assert a.subscribe("work", o="max_backlog=3")["o"] == "max_backlog=3"
    assert b.subscribe("work", o="max_backlog=10")["o"] == "max_backlog=4"
    publish(server, "work", [{"n": i} for i in range(10)])
    got_a, got_b = a.sync(), b.sync()
    assert (len(got_a), len(got_b)) == (3, 4)  # each holds exactly its backlog
    for hdr, _ in got_a + got_b:
        assert hdr["t"] == "work" and hdr["sids"] == "s1"
        assert hdr["bm"].count("|") == 2 and hdr["lp"] == NEVER
    ns = sorted(d["n"] for d in bodies(got_a + got_b))
    assert ns == list(range(7))  # oldest first, no message twice
    assert stats(server)["backlog"] == 7 and stats(server)["queue_depth"] == 3
    # an ack frees a slot: the next oldest message goes to the subscription that acked
    a.ack("work", got_a[0][0]["bm"])
    assert bodies(a.sync()) == [{"n": 7}]
    assert b.sync() == []


def test_default_backlog_is_one_and_ack_forms(make: Make) -> None:
    server = make(max_per_subscription_backlog=10)
    c = Consumer(server)
    assert c.subscribe("work")["o"] == "max_backlog=1"
    publish(server, "work", [{"n": i} for i in range(6)])
    first = c.sync()
    assert bodies(first) == [{"n": 0}]
    # short header name "bm", processed ack requested: records_deleted in stats
    c.raw.send(
        {
            "c": "sow_delete",
            "t": "work",
            "cid": "k1",
            "bm": first[0][0]["bm"],
            "a": "processed,stats",
        }
    )
    assert c.wait_ack("k1")["status"] == "success"
    assert c.wait_ack("k1", "stats")["records_deleted"] == 1
    c.sync()
    second = c.deliveries[1:]  # the freed slot was filled before the acks went out
    assert bodies(second) == [{"n": 1}]
    # replace with a larger backlog; a comma list acks several at once
    c.subscribe("work", o="replace,max_backlog=4")
    more = c.sync()
    assert bodies(more) == [{"n": 2}, {"n": 3}, {"n": 4}]
    held = [second[0][0]["bm"]] + [h["bm"] for h, _ in more]
    c.ack("work", ",".join(held))
    assert bodies(c.sync()) == [{"n": 5}]
    assert stats(server)["acked"] == 5


@pytest.mark.parametrize(
    "spelling",
    ["{0},{1},{2}", " {0} , {1},{2}\n", "{0},{1},{2}\n", ",{0},,{1},{2},", "{0},{1}\t,{2}"],
    ids=["plain", "spaces-and-newline", "trailing-newline", "empty-items", "tab"],
)
def test_a_bookmark_list_acks_each_named_message_whatever_its_spacing(
    make: Make, spelling: str
) -> None:
    server = make(max_per_subscription_backlog=10)
    c = Consumer(server)
    c.subscribe("work", o="max_backlog=3")
    publish(server, "work", [{"n": i} for i in range(4)])
    held = c.sync()
    assert bodies(held) == [{"n": 0}, {"n": 1}, {"n": 2}]
    ack = c.ack("work", spelling.format(*(h["bm"] for h, _ in held)), a="processed,stats")
    assert ack is not None and ack["status"] == "success"
    assert c.wait_ack(str(ack["cid"]), "stats")["records_deleted"] == 3
    c.sync()
    assert bodies(c.deliveries[3:]) == [{"n": 3}]  # the freed slots took the last one
    assert stats(server)["acked"] == 3


def test_cancel_returns_and_max_cancels_expires(make: Make) -> None:
    server = make(max_cancels=2)
    c = Consumer(server)
    c.subscribe("work")
    publish(server, "work", [{"n": 0}, {"n": 1}])
    ((hdr, body),) = c.sync()
    assert json.loads(body) == {"n": 0}
    c.ack("work", hdr["bm"], o="cancel")
    again = c.sync()
    assert bodies(again) == [{"n": 0}] and again[0][0]["bm"] == hdr["bm"]  # redelivered, same bm
    c.ack("work", hdr["bm"], o="cancel")  # 2nd cancel reaches MaxCancels: expired
    assert bodies(c.sync()) == [{"n": 1}]
    assert stats(server)["expired"] == 1


def test_expire_option(make: Make) -> None:
    server = make()
    c = Consumer(server)
    c.subscribe("work")
    publish(server, "work", [{"n": 0}, {"n": 1}])
    ((hdr, _),) = c.sync()
    c.ack("work", hdr["bm"], o="expire")
    assert bodies(c.sync()) == [{"n": 1}]
    s = stats(server)
    assert s["expired"] == 1 and s["acked"] == 0


def test_disconnect_and_unsubscribe_return_leases(make: Make) -> None:
    server = make(max_per_subscription_backlog=5)
    a = Consumer(server)
    a.subscribe("work", o="max_backlog=2")
    publish(server, "work", [{"n": i} for i in range(3)])
    assert bodies(a.sync()) == [{"n": 0}, {"n": 1}]
    b = Consumer(server)
    b.subscribe("work", o="max_backlog=5")
    assert bodies(b.sync()) == [{"n": 2}]
    a.close()  # its two leases come back, oldest first
    assert bodies(b.wait_deliveries(3)[1:]) == [{"n": 0}, {"n": 1}]
    b.raw.send({"c": "unsubscribe", "sub_id": "s1", "cid": "u", "a": "processed"})
    b.wait_ack("u")
    c = Consumer(server)
    c.subscribe("work", o="max_backlog=5")
    assert sorted(d["n"] for d in bodies(c.sync())) == [0, 1, 2]


def test_lease_expiry_returns_and_max_deliveries(make: Make) -> None:
    server = make(lease_period=0.2, max_deliveries=2)
    c = Consumer(server)
    c.subscribe("work")
    publish(server, "work", [{"n": 0}, {"n": 1}])
    first = c.sync()
    assert bodies(first) == [{"n": 0}] and first[0][0]["lp"] != NEVER
    # not acknowledged: the lease runs out and the same message comes again
    again = c.wait_deliveries(2)[1]
    assert json.loads(again[1]) == {"n": 0} and again[0]["bm"] == first[0][0]["bm"]
    # second lease runs out too: MaxDeliveries=2 expires it, the next message follows
    third = c.wait_deliveries(3)[2]
    assert json.loads(third[1]) == {"n": 1}
    wait_for(lambda: stats(server)["expired_leases"] >= 2, 10, "two expired leases")
    assert stats(server)["expired"] == 1


def test_at_most_once_removes_on_send(make: Make) -> None:
    server = make(semantics="at-most-once", max_per_subscription_backlog=2)
    a = Consumer(server)
    a.subscribe("work", o="max_backlog=2")
    publish(server, "work", [{"n": i} for i in range(4)])
    got = a.sync()
    assert bodies(got) == [{"n": 0}, {"n": 1}]
    a.ack("work", got[0][0]["bm"], o="cancel")  # no effect but the freed slot
    assert bodies(a.sync()) == [{"n": 2}]
    a.close()  # what it held is not returned
    b = Consumer(server)
    b.subscribe("work", o="max_backlog=2")
    assert bodies(b.sync()) == [{"n": 3}]


@pytest.mark.parametrize(
    ("fairness", "expected"),
    [("round-robin", [2, 1, 1]), ("fast", [3, 1, 0]), ("proportional", [2, 1, 1])],
)
def test_fairness_spread(make: Make, fairness: str, expected: list[int]) -> None:
    server = make(fairness=fairness, max_per_subscription_backlog=3)
    consumers = [Consumer(server) for _ in range(3)]
    for c in consumers:
        c.subscribe("work", o="max_backlog=3")
    publish(server, "work", [{"n": i} for i in range(4)])
    assert [len(c.sync()) for c in consumers] == expected


def test_proportional_picks_lowest_fill_ratio(make: Make) -> None:
    server = make(max_per_subscription_backlog=10)
    small, large = Consumer(server), Consumer(server)
    small.subscribe("work", o="max_backlog=2")
    large.subscribe("work", o="max_backlog=10")
    publish(server, "work", [{"n": i} for i in range(6)])
    # ratios: small 0/2 first (tie to the first found), then large 0/10, large 1/10 < small 1/2 ...
    assert len(small.sync()) == 1 and len(large.sync()) == 5


def test_strict_leasing_ignores_other_clients_acks(make: Make) -> None:
    server = make(leasing="strict")
    a, b = Consumer(server), Consumer(server)
    a.subscribe("work")
    publish(server, "work", [{"n": 0}, {"n": 1}])
    ((hdr, _),) = a.sync()
    b.ack("work", hdr["bm"])  # not b's lease: nothing happens
    assert a.sync() == [] and stats(server)["acked"] == 0
    a.ack("work", hdr["bm"])
    assert bodies(a.sync()) == [{"n": 1}]


def test_queue_filter_and_subscription_filter(make: Make) -> None:
    server = make(filter="/kind = 'job'", max_per_subscription_backlog=10)
    c = Consumer(server)
    c.subscribe("work", o="max_backlog=10", filter="/n > 1")
    publish(
        server,
        "work",
        [
            {"kind": "job", "n": 1},
            {"kind": "noise", "n": 5},
            {"kind": "job", "n": 2},
            {"kind": "job", "n": 3},
        ],
    )
    assert bodies(c.sync()) == [{"kind": "job", "n": 2}, {"kind": "job", "n": 3}]
    assert stats(server)["enqueued"] == 3  # the noise never entered the queue


def test_filter_form_acks_matching_messages(make: Make) -> None:
    server = make(max_per_subscription_backlog=10)
    publish(server, "work", [{"n": i} for i in range(4)])
    c = Consumer(server)
    c.raw.send(
        {"c": "sow_delete", "t": "work", "cid": "d", "filter": "/n >= 2", "a": "processed,stats"}
    )
    assert c.wait_ack("d", "stats")["records_deleted"] == 2
    c.subscribe("work", o="max_backlog=10")
    assert bodies(c.sync()) == [{"n": 0}, {"n": 1}]


def test_plain_subscriber_of_underlying_topic_unaffected(make: Make, tmp_path: Path) -> None:
    server = make(underlying=("orders",))
    plain = Consumer(server)
    plain.subscribe("orders")
    queue = Consumer(server)
    queue.subscribe("work")
    publish(server, "orders", [{"n": 0}, {"n": 1}])
    assert bodies(plain.sync()) == [{"n": 0}, {"n": 1}]
    got = queue.sync()
    assert bodies(got) == [{"n": 0}] and got[0][0]["t"] == "work"


def test_priority_highest_first_ties_in_order(make: Make) -> None:
    server = make(priority="/p * 10", max_per_subscription_backlog=10)
    publish(
        server,
        "work",
        [
            {"n": 0, "p": 1},
            {"n": 1, "p": 5},
            {"n": 2},
            {"n": 3, "p": 5},
            {"n": 4, "p": "x"},
            {"n": 5, "p": 3},
            {"n": 6, "p": -2},
        ],
    )
    c = Consumer(server)
    c.subscribe("work")  # backlog 1: one at a time, each acked before the next is chosen
    order = []
    for _ in range(7):
        ((hdr, body),) = c.sync()  # exactly one: the ack before it freed the only slot
        order.append(json.loads(body)["n"])
        c.ack("work", hdr["bm"])
    # 50, 50 (publication order), 30, 10, then NULL/non-numeric/negative (lowest) in order
    assert order == [1, 3, 5, 0, 2, 4, 6]


def test_barrier_waits_for_earlier_acks_then_goes_to_everyone(make: Make) -> None:
    server = make(barrier="/kind = 'barrier'", max_per_subscription_backlog=5)
    a, b = Consumer(server), Consumer(server)
    a.subscribe("work", o="max_backlog=1")
    b.subscribe("work", o="max_backlog=1")
    publish(server, "work", [{"n": 0}, {"n": 1}, {"n": 2, "kind": "barrier"}, {"n": 3}])
    (ha, _), (hb, _) = a.sync()[0], b.sync()[0]
    assert sorted(d["n"] for d in bodies(a.deliveries + b.deliveries)) == [0, 1]
    a.ack("work", ha["bm"])
    assert a.sync() == []  # n=1 is not acknowledged: the barrier, and n=3 behind it, wait
    b.ack("work", hb["bm"])
    got_b = b.sync()
    got_a = a.sync()
    barrier_a = [h for h, body in a.deliveries if json.loads(body).get("kind") == "barrier"]
    barrier_b = [h for h, body in b.deliveries if json.loads(body).get("kind") == "barrier"]
    assert len(barrier_a) == len(barrier_b) == 1  # to every subscription, backlogs ignored
    assert "lp" not in barrier_a[0] and barrier_a[0]["bm"] == barrier_b[0]["bm"]
    assert sorted(d["n"] for d in bodies(got_a + got_b)) == [2, 2, 3]  # then n=3 goes on
    assert stats(server)["barriers"] == 1 and stats(server)["queue_depth"] == 0


def _sow_records(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    from ampsclient.protocol.header import decode_header

    out = []
    pos = 0
    while pos < len(body):
        hdr, end = decode_header(body[pos:])
        data = body[pos + end : pos + end + int(hdr["l"])]
        out.append((hdr, data))
        pos += end + int(hdr["l"])
    return out


def test_sow_query_shows_available_messages_and_leases_nothing(make: Make) -> None:
    server = make(max_per_subscription_backlog=5)
    c = Consumer(server)
    c.subscribe("work")  # takes n=0 (backlog 1)
    publish(server, "work", [{"n": i, "even": i % 2 == 0} for i in range(5)])
    c.sync()
    q = Consumer(server)
    q.raw.send(
        {
            "c": "sow",
            "t": "work",
            "cid": "q",
            "query_id": "q",
            "bs": 2,
            "filter": "/even = true",
            "a": "processed,stats",
        }
    )
    records: list[tuple[dict[str, Any], bytes]] = []
    while True:
        hdr, body = q.raw.recv(10.0)
        if hdr.get("c") == "sow":
            records += _sow_records(body)
        if hdr.get("c") == "ack" and hdr.get("a") == "stats":
            stats_ack = hdr
            break
    # n=0 is leased (not shown); of 1..4 the even ones, oldest first, in batches of 2 at most
    assert [json.loads(d)["n"] for _, d in records] == [2, 4]
    assert all(h["bm"] == h["k"] for h, _ in records)
    assert (stats_ack["records_returned"], stats_ack["matches"], stats_ack["topic_matches"]) == (
        2,
        2,
        5,
    )
    assert stats(server)["backlog"] == 1 and stats(server)["queue_depth"] == 4  # nothing leased


def test_bookmark_subscription_to_a_queue_replays_the_underlying_topic(make: Make) -> None:
    server = make(underlying=("orders",))
    publish(server, "orders", [{"n": i} for i in range(3)])
    c = Consumer(server)
    c.raw.send(
        {"c": "subscribe", "t": "work", "sub_id": "r", "cid": "r", "bm": "0", "a": "processed"}
    )
    c.wait_ack("r")
    replayed = c.wait_deliveries(3)
    assert bodies(replayed) == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert all(h["t"] == "orders" and "lp" not in h for h, _ in replayed)  # no queue semantics
    s = stats(server)
    assert (s["queue_depth"], s["backlog"], s["subscriptions"]) == (3, 0, 0)  # nothing leased
