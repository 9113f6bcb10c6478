"""``sow_and_subscribe`` on a queue topic (``queues.sow_subscribe``): the available messages
as a read-only view first (``sow`` frames, no ``lp``, nothing leased), then a queue
subscription that leases as a ``subscribe`` with the same backlog and filter would. Frame
order, leases and the refusals are checked frame by frame; absence is proved with a marker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _queue_support import Consumer, bodies, publish, stats

from ampsclient.protocol.header import decode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.queues.engine import NEVER
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def work_backlog() -> int:
    """The conftest ``server``'s queue ``work`` with a backlog of 5."""
    return 5


def records(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    out = []
    pos = 0
    while pos < len(body):
        hdr, end = decode_header(body[pos:])
        out.append((hdr, body[pos + end : pos + end + int(hdr["l"])]))
        pos += end + int(hdr["l"])
    return out


def test_available_messages_first_then_leases(server: ServerThread) -> None:
    other = Consumer(server)
    other.subscribe("work")  # takes n=0 (backlog 1)
    publish(server, "work", [{"n": i, "even": i % 2 == 0} for i in range(6)])
    assert bodies(other.sync()) == [{"n": 0, "even": True}]
    q = Consumer(server)
    q.raw.send(
        {
            "c": "sow_and_subscribe",
            "t": "work",
            "cid": "sas",
            "sub_id": "s",
            "bs": 2,
            "filter": "/even = true",
            "o": "max_backlog=2",
            "a": "processed,completed,stats",
        }
    )
    frames: list[tuple[dict[str, Any], bytes]] = []
    while len([f for f in frames if f[0].get("c") == "p"]) < 2:
        frames.append(q.raw.recv(10.0))
    kinds = [h["c"] if h["c"] != "ack" else "ack:" + h["a"] for h, _ in frames]
    assert kinds == [
        "ack:processed",
        "group_begin",
        "sow",
        "group_end",
        "ack:completed",
        "ack:stats",
        "p",
        "p",
    ]
    processed = frames[0][0]
    assert (processed["o"], processed["sub_id"], processed["query_id"]) == (
        "max_backlog=2",
        "s",
        "sas",
    )
    # the view: the available even messages (n=0 is leased to the other consumer), no lp
    shown = records(frames[2][1])
    assert [json.loads(d)["n"] for _, d in shown] == [2, 4]
    assert all("lp" not in h and h["bm"] == h["k"] for h, _ in shown)
    stats_ack = frames[5][0]
    assert (stats_ack["records_returned"], stats_ack["sub_id"]) == (2, "s")
    # then the subscription leases them, as a subscribe with max_backlog=2 would
    leased = frames[6:]
    assert bodies(leased) == [{"n": 2, "even": True}, {"n": 4, "even": True}]
    assert all(h["lp"] == NEVER and h["sids"] == "s" for h, _ in leased)
    assert [h["bm"] for h, _ in leased] == [h["bm"] for h, _ in shown]
    assert q.sync() == []  # its backlog is full: nothing more
    s = stats(server)
    assert (s["backlog"], s["queue_depth"]) == (3, 3)  # 3 leased, 3 waiting
    # an ack frees a slot: the next even message comes, leased
    q.ack("work", leased[0][0]["bm"])
    publish(server, "work", [{"n": 6, "even": True}])
    more = q.sync()
    assert bodies(more) == [{"n": 6, "even": True}] and more[0][0]["lp"] == NEVER


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"bm": "0"}, "invalid options"),
        ({"o": "max_backlog=0"}, "invalid options"),
        ({"orderby": "/n SIDEWAYS"}, "invalid order by"),  # as on a SOW topic (#27)
        ({"o": "skip_n=-1"}, "invalid options"),
    ],
)
def test_refusals_place_nothing(server: ServerThread, fields: dict[str, Any], reason: str) -> None:
    publish(server, "work", [{"n": 0}])
    q = Consumer(server)
    q.raw.send(
        {"c": "sow_and_subscribe", "t": "work", "cid": "x", "sub_id": "x", "a": "processed"}
        | fields
    )
    hdr, _ = q.raw.recv(10.0)
    assert (hdr["c"], hdr["status"], hdr["reason"]) == ("ack", "failure", reason)
    assert q.sync() == []  # no view, no lease
    assert stats(server)["backlog"] == 0
    q.subscribe("work")  # the connection is kept
    assert bodies(q.sync()) == [{"n": 0}]


def _client(kind: str) -> Any:
    if kind == "official":
        amps = pytest.importorskip("AMPS")
        return amps.Client("official-sas")
    import ampsclient

    return ampsclient.Client("ours-sas")


@pytest.mark.parametrize("kind", ["ours", pytest.param("official", marks=pytest.mark.interop)])
def test_auto_ack_client_acks_the_leased_deliveries_only(server: ServerThread, kind: str) -> None:
    """With auto-ack, a client's ``sow_and_subscribe`` on a queue: the view's records (no
    ``lp``) are not acknowledged, the leased deliveries are; the queue is emptied."""
    import threading

    publish(server, "work", [{"n": i} for i in range(3)])
    seen: list[tuple[str, int, bool]] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        command = message.get_command()
        if command in ("sow", "p", "publish"):
            with lock:
                n = json.loads(message.get_data())["n"]
                seen.append((command, n, bool(message.get_lease_period())))

    client = _client(kind)
    client.connect(server.uri("tcp", "json"))
    client.logon()
    try:
        client.set_auto_ack(True)
        client.set_ack_batch_size(2)
        client.sow_and_subscribe(on_message, "work", options="max_backlog=5")
        wait_for(lambda: stats(server)["acked"] == 3, 20, "the three leased messages acked")
    finally:
        if kind == "official":
            client.disconnect()
        else:
            client.close()
    with lock:
        view = [(n, lp) for c, n, lp in seen if c == "sow"]
        leased = [(n, lp) for c, n, lp in seen if c != "sow"]
        order = [c == "sow" for c, _, _ in seen]
    assert view == [(0, False), (1, False), (2, False)]
    assert leased == [(0, True), (1, True), (2, True)]
    assert order == [True] * 3 + [False] * 3  # the view first
    s = stats(server)
    assert (s["acked"], s["backlog"], s["queue_depth"]) == (3, 0, 0)


def _query(q: Consumer, fields: dict[str, Any]) -> list[tuple[dict[str, Any], bytes]]:
    """A ``sow`` of ``work`` with ``fields``: its frames up to the processed ack's failure or
    the completed ack."""
    q.raw.send({"c": "sow", "t": "work", "cid": "q", "a": "processed,completed"} | fields)
    frames = [q.raw.recv(10.0)]
    while frames[-1][0].get("c") != "ack" or frames[-1][0].get("a") == "processed":
        if frames[-1][0].get("status") == "failure":
            break
        frames.append(q.raw.recv(10.0))
    return frames


def test_a_queue_query_reads_orderby_as_a_sow_topic_does(server: ServerThread) -> None:
    """A bad ``orderby`` on a queue ``sow`` is refused with ``invalid order by``, as on a SOW
    topic (it used to be accepted and ignored); a good one orders the view, with ``skip_n``,
    ``top_n`` and ``select`` applied after it (AMPS User Guide, "Managing Result Sets")."""
    publish(server, "work", [{"n": n, "x": n % 3, "pad": "p"} for n in range(6)])
    q = Consumer(server)
    for bad in ("/n SIDEWAYS", "n DESC", "/n,,/x"):
        frames = _query(q, {"orderby": bad})
        assert len(frames) == 1
        hdr = frames[0][0]
        assert (hdr["a"], hdr["status"], hdr["reason"]) == (
            "processed",
            "failure",
            "invalid order by",
        )
    frames = _query(q, {"orderby": "/x DESC, /n", "o": "skip_n=1,top_n=3,select=[-/pad]"})
    kinds = [h["c"] if h["c"] != "ack" else "ack:" + h["a"] for h, _ in frames]
    assert kinds == [
        "ack:processed",
        "group_begin",
        "sow",
        "sow",
        "sow",
        "group_end",
        "ack:completed",
    ]
    shown = [json.loads(d) for h, b in frames if h["c"] == "sow" for _, d in records(b)]
    # x desc, then n: (2,2) (5,2) (1,1) (4,1) (0,0) (3,0); skip 1, keep 3
    assert shown == [{"n": 5, "x": 2}, {"n": 1, "x": 1}, {"n": 4, "x": 1}]
    assert stats(server)["backlog"] == 0  # a query leases nothing


def test_completed_comes_before_stats_whatever_the_order_asked(server: ServerThread) -> None:
    """``completed`` then ``stats``, on a SOW topic and on a queue, even asked as
    ``stats,completed`` (AMPS Command Reference, Ack Messages: stats "is typically produced
    after the command has fully completed")."""
    publish(server, "work", [{"n": 0}])
    publish(server, "/ADMIN/bookmark_store", [{"clientName": "c", "subId": "s"}])
    q = Consumer(server)
    for topic in ("work", "/ADMIN/bookmark_store"):
        q.raw.send({"c": "sow", "t": topic, "cid": topic, "a": "stats,completed"})
        frames = [q.raw.recv(10.0)]
        while frames[-1][0].get("a") != "stats":
            frames.append(q.raw.recv(10.0))
        kinds = [h["c"] if h["c"] != "ack" else "ack:" + h["a"] for h, _ in frames]
        assert kinds == ["group_begin", "sow", "group_end", "ack:completed", "ack:stats"]
        assert frames[-1][0]["records_returned"] == 1
