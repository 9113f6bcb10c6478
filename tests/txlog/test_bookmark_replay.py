"""Bookmark subscriptions end to end, in process: every bookmark form of the seed's transaction-log
chapter, the options, and the replay-then-live cut-over, against a journaled ``ServerThread``.

The client is the project's own sync :class:`~ampsclient.Client` over real TCP sockets; the slow
subscriber test at the end runs the server as a separate process to measure its memory.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _txlog_support import Inbox, journal_bookmarks, txlog_xml, unique, wait_durable

import ampsclient_server_stub.engine.journal as journal_module
from ampsclient import Client, Command
from ampsclient.exceptions import CommandError, InvalidBookmarkError
from ampsclient.protocol.bookmarks import publisher_id_for, timestamp_bookmark
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.broker import Broker, BrokerHooks
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.txlog import TxLog
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import RawClient, ReceiveClock
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

Connect = Callable[..., Client]


# --------------------------------------------------------------------------- helpers


def publish(client: Client, topic: str, values: range | list[int], **extra: Any) -> None:
    for n in values:
        client.publish(topic, json.dumps({"n": n, **extra}))
    client.flush(10_000)


def bookmark_sub(
    client: Client,
    topic: str,
    bookmark: str,
    *,
    options: str | None = None,
    filter: str | None = None,
    sub_id: str | None = None,
    acks: tuple[str, ...] = ("completed",),
    inbox: Inbox | None = None,
) -> Inbox:
    """Place a bookmark subscription; its messages and acks go to the returned inbox."""
    box = inbox if inbox is not None else Inbox()
    cmd = Command("subscribe").set_topic(topic).set_bookmark(bookmark).set_timeout(10_000)
    cmd.set_filter(filter).set_options(options).set_sub_id(sub_id)
    for ack in acks:
        cmd.add_ack_type(ack)
    client.execute_async(cmd, box)
    return box


def ns(box: Inbox) -> list[int]:
    return [m.json()["n"] for m in box.messages]


@pytest.fixture
def history(txserver: ServerThread, connect: Connect) -> tuple[Client, str, list[str]]:
    """Ten durable messages ``n=0..9`` on a fresh topic; returns (publisher, topic, bookmarks)."""
    pub = connect("pub")
    topic = unique("orders")
    publish(pub, topic, range(10))
    wait_durable(txserver)
    bms = journal_bookmarks(txserver)[-10:]
    pid = publisher_id_for(pub.name)
    assert bms == [f"{pid}|{i}|" for i in range(1, 11)]
    return pub, topic, bms


def settle(server: ServerThread, *clients: Client) -> None:
    """Everything published is durable and pumped, and every client has read what was sent."""
    wait_durable(server)
    for client in clients:
        client.flush(10_000)


# --------------------------------------------------------------------------- the forms


@pytest.mark.integration
def test_epoch_replays_everything_then_completed_then_live(
    txserver: ServerThread, connect: Connect, history: tuple[Client, str, list[str]]
) -> None:
    pub, topic, bms = history
    sub = connect("sub")
    box = bookmark_sub(sub, topic, "0")
    box.wait_ack("completed")
    items = box.snapshot()
    assert [m.get_command() for m in items] == ["publish"] * 10 + ["ack"]
    assert [m.get_bookmark() for m in items[:10]] == bms
    assert ns(box) == list(range(10))
    completed = items[10]
    assert completed.get_sub_id() == items[0].get_sub_id()
    publish(pub, topic, range(10, 15))
    box.wait_messages(15)
    assert ns(box) == list(range(15))
    assert len(box.acks("completed")) == 1


@pytest.mark.integration
def test_now_skips_the_history(
    txserver: ServerThread, connect: Connect, history: tuple[Client, str, list[str]]
) -> None:
    pub, topic, _ = history
    sub = connect("sub")
    box = bookmark_sub(sub, topic, Client.Bookmarks.NOW)
    box.wait_ack("completed")
    assert box.messages == []
    publish(pub, topic, range(100, 103))
    box.wait_messages(3)
    assert ns(box) == [100, 101, 102]
    assert all(m.get_bookmark() for m in box.messages)


@pytest.mark.integration
def test_a_bookmark_starts_right_after_it(
    txserver: ServerThread, connect: Connect, history: tuple[Client, str, list[str]]
) -> None:
    _, topic, bms = history
    sub = connect("sub")
    box = bookmark_sub(sub, topic, bms[3])
    box.wait_ack("completed")
    assert ns(box) == [4, 5, 6, 7, 8, 9]
    # the last bookmark: nothing to replay
    box = bookmark_sub(sub, topic, bms[-1])
    box.wait_ack("completed")
    assert box.messages == []


@pytest.mark.integration
def test_a_bookmark_list_starts_at_the_oldest(txserver: ServerThread, connect: Connect) -> None:
    a, b = connect("pub-a"), connect("pub-b")
    topic = unique("mixed")
    for n in range(8):  # a0 b0 a1 b1 ... in log order
        publish(a, topic, [n], who="a")
        publish(b, topic, [n], who="b")
    wait_durable(txserver)
    log = journal_bookmarks(txserver)
    pa, pb = publisher_id_for(a.name), publisher_id_for(b.name)
    # a|6| is later in the log than b|2|: replay starts after b|2| (the oldest)
    box = bookmark_sub(connect("sub"), topic, f"{pa}|6|,{pb}|2|")
    box.wait_ack("completed")
    got = [m.get_bookmark() for m in box.messages]
    assert got == log[log.index(f"{pb}|2|") + 1 :]
    assert [(m.json()["who"], m.json()["n"]) for m in box.messages][:3] == [
        ("a", 2),
        ("b", 2),
        ("a", 3),
    ]
    # an unknown item in the list is ignored when another one is known
    box = bookmark_sub(connect("sub"), topic, f"{pa}|999|,{pb}|6|")
    box.wait_ack("completed")
    assert [m.get_bookmark() for m in box.messages] == log[log.index(f"{pb}|6|") + 1 :]


# --------------------------------------------------------------------------- timestamps


T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)


def ts(offset_s: float, *, z: bool = True) -> str:
    text = timestamp_bookmark(T0 + timedelta(seconds=offset_s))
    return text if z else text.rstrip("Z")


@pytest.fixture
def timed_history(
    txserver: ServerThread, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[str]]:
    """Three batches of 4 messages received at T0, T0+10 s and T0+20 s (+1 µs per message).

    ``n`` is 0-3, 10-13, 20-23; the first message of each batch is exactly on the second.
    """
    clock = ReceiveClock(step_us=1)
    monkeypatch.setattr(journal_module, "_time_ns", clock)
    pub = connect("pub")
    topic = unique("timed")
    for batch in range(3):
        clock.at(T0 + timedelta(seconds=10 * batch))
        for n in range(10 * batch, 10 * batch + 4):
            # one read per message: the server stamps a run of publishes that arrive together
            # with one time, and this history needs a clock tick per message
            publish(pub, topic, [n])
    wait_durable(txserver)
    return topic, journal_bookmarks(txserver)[-12:]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("bookmark", "expected"),
    [
        (ts(10), [10, 11, 12, 13, 20, 21, 22, 23]),  # inclusive: the message at T0+10 s
        (ts(5, z=False), [10, 11, 12, 13, 20, 21, 22, 23]),  # no Z: still UTC
        (ts(20.5), []),  # after the last message: nothing to replay
        (ts(-3600), [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]),  # before the log: EPOCH
    ],
)
def test_a_timestamp_starts_at_the_first_message_at_or_after_it(
    connect: Connect, timed_history: tuple[str, list[str]], bookmark: str, expected: list[int]
) -> None:
    topic, _ = timed_history
    box = bookmark_sub(connect("sub"), topic, bookmark)
    box.wait_ack("completed")
    assert ns(box) == expected


@pytest.mark.integration
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("[{a}:{b}]", [10, 11, 12, 13, 20]),
        ("({a}:{b})", [11, 12, 13]),
        ("[{a}:{b})", [10, 11, 12, 13]),
        ("({a}:{b}]", [11, 12, 13, 20]),
    ],
)
def test_timestamp_ranges(
    txserver: ServerThread,
    connect: Connect,
    timed_history: tuple[str, list[str]],
    spec: str,
    expected: list[int],
) -> None:
    topic, _ = timed_history
    sub = connect("sub")
    box = bookmark_sub(sub, topic, spec.format(a=ts(10), b=ts(20)))
    box.wait_ack("completed")
    assert ns(box) == expected
    # the range is over: later messages are not delivered and the subscription is gone
    publish(connect("late"), topic, [99])
    settle(txserver, sub)
    assert ns(box) == expected
    assert txserver.call(lambda: len(txserver.broker.connection_for(sub.name).subs)) == 0  # type: ignore[union-attr]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("[{a}:{b}]", [2, 3, 4, 5, 6]),
        ("({a}:{b})", [3, 4, 5]),
        ("[{a}:{b})", [2, 3, 4, 5]),
        ("({a}:{b}]", [3, 4, 5, 6]),
    ],
)
def test_bookmark_ranges(
    txserver: ServerThread,
    connect: Connect,
    history: tuple[Client, str, list[str]],
    spec: str,
    expected: list[int],
) -> None:
    pub, topic, bms = history
    sub = connect("sub")
    box = bookmark_sub(sub, topic, spec.format(a=bms[2], b=bms[6]))
    box.wait_ack("completed")
    items = box.snapshot()
    assert items[-1].get_command() == "ack"  # completed comes after the last message
    assert ns(box) == expected
    publish(pub, topic, [10, 11])
    settle(txserver, sub)
    assert ns(box) == expected


@pytest.mark.integration
def test_a_range_with_a_future_end_time_stops_at_that_time(
    txserver: ServerThread, connect: Connect
) -> None:
    pub, sub = connect("pub"), connect("sub")
    topic = unique("future")
    start = int(time.time()) - 1
    end = start + 3  # 1-3 s from now, whole seconds as in the seed
    box = bookmark_sub(sub, topic, f"[{timestamp_bookmark(start)}:{timestamp_bookmark(end)})")
    publish(pub, topic, range(3))  # inside the range: delivered as they arrive
    box.wait_messages(3)
    assert box.acks("completed") == []  # not at the catch-up: at the end of the range
    box.wait_ack("completed", timeout=10)
    assert time.time() >= end
    publish(pub, topic, [3, 4])
    settle(txserver, sub)
    assert ns(box) == [0, 1, 2]


# --------------------------------------------------------------------------- unknown / invalid


@pytest.mark.integration
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (None, []),  # the default: NOW (the seed: the subscriber failed over from elsewhere)
        ("bookmark_not_found=now", []),
        ("bookmark_not_found=epoch", list(range(10))),
    ],
)
def test_an_unknown_bookmark_starts_per_bookmark_not_found(
    txserver: ServerThread,
    connect: Connect,
    history: tuple[Client, str, list[str]],
    options: str | None,
    expected: list[int],
) -> None:
    pub, topic, bms = history
    pid = bms[0].split("|")[0]
    for unknown in ("12345|99|", f"{pid}|500|"):
        box = bookmark_sub(connect("sub"), topic, unknown, options=options)
        box.wait_ack("completed")
        assert ns(box) == expected
    publish(pub, topic, [10])
    box.wait_messages(len(expected) + 1)
    assert ns(box) == [*expected, 10]


@pytest.mark.integration
def test_an_unknown_bookmark_fails_with_bookmark_not_found_fail(
    connect: Connect, history: tuple[Client, str, list[str]]
) -> None:
    _, topic, _ = history
    with pytest.raises(InvalidBookmarkError) as info:
        bookmark_sub(connect("sub"), topic, "12345|99|", options="bookmark_not_found=fail")
    assert info.value.reason == "invalid bookmark"


@pytest.mark.integration
@pytest.mark.parametrize(
    "garbage", ["abc", "1|2", "20241301T000000Z", "[1|2|:", "0|1|,abc", "recent", "1|x|"]
)
def test_a_garbage_bookmark_is_an_invalid_bookmark(
    connect: Connect, history: tuple[Client, str, list[str]], garbage: str
) -> None:
    _, topic, _ = history
    sub = connect("sub")
    with pytest.raises(InvalidBookmarkError) as info:
        cmd = Command("subscribe").set_topic(topic).set_bookmark(garbage).set_timeout(5000)
        sub.execute_async(cmd, Inbox())
    assert info.value.reason == "invalid bookmark"


CONFIG = txlog_xml(
    "partial",
    """<JournalDirectory>journal</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>audit/.*</Name></Topic>""",
)


@pytest.mark.integration
def test_only_configured_topics_are_recorded(tmp_path: Path) -> None:
    config = parse_config(CONFIG, base_dir=tmp_path)
    with ServerThread(config, fsync="never") as server:
        uri = server.uri("tcp", "json")
        clients = []
        for prefix in ("pub", "sub"):
            client = Client(unique(prefix))
            client.connect(uri)
            client.logon(5000)
            clients.append(client)
        pub, sub = clients
        try:
            for topic in ("orders", "quotes", "audit/x"):
                publish(pub, topic, range(3))
            wait_durable(server)
            with pytest.raises(CommandError) as info:
                bookmark_sub(sub, "quotes", "0")
            assert info.value.reason == "invalid topic"
            # a plain subscription to an unrecorded topic is fine
            live = Inbox()
            sub.subscribe(live, "quotes", timeout=5000)
            # a regex bookmark subscription gets only recorded topics, in replay and live
            box = bookmark_sub(sub, "^(orders|quotes|audit/.*)$", "0")
            box.wait_ack("completed")
            assert [(m.get_topic(), m.json()["n"]) for m in box.messages] == [
                ("orders", 0),
                ("orders", 1),
                ("orders", 2),
                ("audit/x", 0),
                ("audit/x", 1),
                ("audit/x", 2),
            ]
            publish(pub, "quotes", [7])
            publish(pub, "orders", [8])
            box.wait_messages(7)
            live.wait_messages(1)
            settle(server, sub)
            assert [(m.get_topic(), m.json()["n"]) for m in box.messages][6:] == [("orders", 8)]
            assert live.messages[0].get_bookmark() is None  # not recorded: no bookmark
            assert server.call(lambda: server.server.journal.last_index) == 7  # type: ignore[union-attr]
        finally:
            for client in clients:
                client.close()


# --------------------------------------------------------------------------- filters, cut-over


@pytest.mark.integration
def test_content_filters_apply_during_replay_and_live(
    txserver: ServerThread, connect: Connect
) -> None:
    pub = connect("pub")
    topic = unique("filtered")
    publish(pub, topic, range(20))
    wait_durable(txserver)
    box = bookmark_sub(connect("sub"), topic, "0", filter="/n >= 15 OR /n < 2")
    box.wait_ack("completed")
    assert ns(box) == [0, 1, 15, 16, 17, 18, 19]
    publish(pub, topic, range(20, 25))
    publish(pub, topic, [1])
    box.wait_messages(13)
    assert ns(box) == [0, 1, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 1]


@pytest.mark.integration
def test_replay_then_live_has_no_gap_and_no_duplicate(
    txserver: ServerThread, connect: Connect
) -> None:
    """A large replay runs while another client keeps publishing: the subscriber sees the log
    exactly, message by message, across the cut-over."""
    old, new = 60_000, 20_000
    topic = unique("cutover")
    first = connect("pub-old")
    for n in range(old):
        first.publish(topic, b'{"who":"old","n":%d}' % n)
    first.flush(30_000)
    wait_durable(txserver)
    second = connect("pub-new")
    sub = connect("sub")
    started = threading.Event()

    def publish_more() -> None:
        started.wait(10)
        for n in range(new):
            second.publish(topic, b'{"who":"new","n":%d}' % n)
        second.flush(30_000)

    writer = threading.Thread(target=publish_more)
    writer.start()
    box = Inbox()
    started.set()
    bookmark_sub(sub, topic, "0", inbox=box)
    writer.join(60)
    box.wait_messages(old + new, timeout=60)
    box.wait_ack("completed")
    settle(txserver, sub)
    items = box.snapshot()
    got = [m.get_bookmark() for m in items if m.get_command() == "publish"]
    assert len(got) == old + new
    assert got == journal_bookmarks(txserver)  # the log order, no gap, no duplicate
    for who, count in (("old", old), ("new", new)):
        assert [m.json()["n"] for m in box.messages if m.json()["who"] == who] == list(range(count))
    completed = [i for i, m in enumerate(items) if m.get_command() == "ack"]
    assert len(completed) == 1 and completed[0] >= old


# --------------------------------------------------------------------------- pause / resume


@pytest.mark.integration
def test_paused_subscriptions_resumed_together_share_one_replay(
    txserver: ServerThread, connect: Connect
) -> None:
    pub, sub = connect("pub"), connect("sub")
    prefix = unique("pr")
    topics = [f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"]
    for n in range(10):
        for topic in topics:
            pub.publish(topic, json.dumps({"t": topic[-1], "n": n}))
    pub.flush(10_000)
    wait_durable(txserver)
    box = Inbox()
    for i, topic in enumerate(topics):
        bookmark_sub(sub, topic, "0", options="pause", sub_id=f"s{i}", inbox=box)
    bookmark_sub(sub, topics[0], "0", options="pause", sub_id="s3", inbox=box)  # a twin of s0
    settle(txserver, sub)
    assert box.snapshot() == []  # paused from the start: nothing, not even completed
    resume = Command("subscribe").set_sub_id("s0,s1,s2,s3").set_options("resume")
    sub.execute_async(resume.set_timeout(5000))
    box.wait(lambda b: len(b.acks("completed")) == 4)
    got = [(m.get_sub_id(), m.json()["t"], m.json()["n"]) for m in box.messages]
    expected = []
    for n in range(10):
        expected += [("s0", "a", n), ("s3", "a", n), ("s1", "b", n), ("s2", "c", n)]
    assert got == expected  # one replay: log order across the four subscriptions
    pub.publish(topics[1], json.dumps({"t": "b", "n": 10}))
    box.wait_messages(41)
    assert box.messages[-1].get_sub_id() == "s1"


class ThrottledSession(FakeSession):
    """Reports a full backlog once ``room`` deliveries were sent (the replay then waits)."""

    def __init__(self) -> None:
        super().__init__()
        self.room = 0

    def send(self, payload: bytes) -> None:
        super().send(payload)
        if payload.startswith(b'{"c":"p"'):
            self.room -= 1

    def backlog(self) -> int:
        return 0 if self.room > 0 else 1 << 40


def test_a_shared_replay_survives_its_members_leaving_and_pausing(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync="never")
    broker = Broker(None, txlog=TxLog(journal))  # group commit inline, no timers
    pub = broker.connect(FakeSession())
    broker.handle(pub, encode_header({"c": "logon", "cid": "1", "client_name": "pub"}))
    for n in range(3000):
        broker.handle(pub, b'{"c":"p","t":"t"}{"n":%d}' % n)
    session = ThrottledSession()
    conn = broker.connect(session)
    broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": "sub"}))
    for sid in ("a", "b", "c"):
        sub = {"c": "subscribe", "cid": sid, "sub_id": sid, "t": "t", "bm": "0", "o": "pause"}
        broker.handle(conn, encode_header(sub))
    session.room = 1000
    broker.handle(conn, encode_header({"c": "subscribe", "sub_id": "a,b,c", "o": "resume"}))
    assert session.deliveries()[0]["sids"] == "a,b,c"  # one frame for the three
    leader = conn.subs["a"].replay
    assert leader is not None
    broker.pump(leader)  # (no timers here: pump by hand) until the backlog is "full"
    assert 0 < len(session.deliveries()) < 3000
    broker.handle(conn, encode_header({"c": "unsubscribe", "sub_id": "a"}))  # the leader goes
    broker.handle(conn, encode_header({"c": "subscribe", "sub_id": "c", "o": "pause"}))
    session.room = 1 << 30

    def drain() -> None:
        for replay in list(broker.replays.replays):
            while not replay.done and replay.position <= journal.last_index:
                before = replay.position
                broker.pump(replay)
                if replay.position == before:
                    break

    drain()
    got: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    for payload in session.sent:
        hdr, end = decode_header(payload)
        if hdr.get("c") == "p":
            for sid in str(hdr["sids"]).split(","):
                got[sid].append(json.loads(payload[end:])["n"])
    assert got["b"] == list(range(3000))  # the heir carries on: no gap, no duplicate
    paused_at = len(got["c"])
    assert got["c"] == list(range(paused_at)) and paused_at < 3000
    assert got["a"] == list(range(len(got["a"])))
    broker.handle(conn, encode_header({"c": "subscribe", "sub_id": "c", "o": "resume"}))
    drain()
    got_c = [
        json.loads(p[e:])["n"]
        for p in session.sent
        for h, e in [decode_header(p)]
        if h.get("c") == "p" and "c" in str(h["sids"]).split(",")
    ]
    assert got_c == list(range(3000))  # resumed where it was paused
    journal.close()


@pytest.mark.serial
@pytest.mark.integration
def test_pausing_an_active_replay_holds_its_position(
    txserver: ServerThread, connect: Connect
) -> None:
    pub, sub = connect("pub"), connect("sub")
    topic = unique("hold")
    publish(pub, topic, range(300))
    wait_durable(txserver)
    box = bookmark_sub(sub, topic, "0", options="rate=1000", sub_id="slow")
    box.wait_messages(20)
    sub.execute_async(Command("subscribe").set_sub_id("slow").set_options("pause"))
    settle(txserver, sub)
    held = len(box.messages)
    assert held < 300

    def position() -> int:
        conn = txserver.broker.connection_for(sub.name)
        assert conn is not None
        replay = conn.subs["slow"].replay
        assert replay is not None
        return replay.position

    before = txserver.call(position)
    publish(pub, topic, [300])
    settle(txserver, sub)
    assert txserver.call(position) == before
    assert len(box.messages) == held
    resume = Command("subscribe").set_sub_id("slow").set_options("resume,rate=100000")
    sub.execute_async(resume)
    box.wait_messages(301)
    assert ns(box) == list(range(301))


# --------------------------------------------------------------------------- options


@pytest.mark.serial
@pytest.mark.integration
def test_rate_paces_the_replay(txserver: ServerThread, connect: Connect) -> None:
    pub = connect("pub")
    topic = unique("rated")
    publish(pub, topic, range(100))
    wait_durable(txserver)
    arrivals: list[float] = []
    box = Inbox()

    def handler(message: Any) -> None:
        if message.get_command() == "publish":
            arrivals.append(time.monotonic())
        box(message)

    sub = connect("sub")
    bookmark_sub(sub, topic, "0", options="rate=200", inbox=handler)  # type: ignore[arg-type]
    box.wait_ack("completed", timeout=10)
    assert ns(box) == list(range(100))
    elapsed = arrivals[-1] - arrivals[0]
    assert 0.4 <= elapsed < 5.0, elapsed  # 99 intervals at 200/s = 0.495 s


@pytest.mark.serial
@pytest.mark.integration
def test_rate_as_a_multiple_of_the_original_pace_with_a_max_gap(
    txserver: ServerThread, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rate=10X``: ten times the publish pace; ``rate_max_gap`` skips long idle stretches."""
    clock = ReceiveClock(step_us=1)
    monkeypatch.setattr(journal_module, "_time_ns", clock)
    pub = connect("pub")
    topic = unique("paced")
    for n, offset in enumerate([0, 1, 2, 3, 3603]):  # 1 s apart, then an hour of silence
        clock.at(T0 + timedelta(seconds=offset))
        publish(pub, topic, [n])
    wait_durable(txserver)
    arrivals: list[float] = []
    box = Inbox()

    def handler(message: Any) -> None:
        if message.get_command() == "publish":
            arrivals.append(time.monotonic())
        box(message)

    options = "rate=10X,rate_max_gap=300ms"
    bookmark_sub(connect("sub"), topic, "0", options=options, inbox=handler)  # type: ignore[arg-type]
    box.wait_ack("completed", timeout=10)
    assert ns(box) == [0, 1, 2, 3, 4]
    since = [t - arrivals[0] for t in arrivals]  # the schedule is absolute: compare to it
    for i, due in enumerate([0.1, 0.2, 0.3, 0.6]):  # 1 s at 10X = 0.1 s; 360 s capped at 0.3
        assert since[i + 1] >= due - 0.02, since
    assert since[4] < 4.0, since  # not the 360 s the hour of silence is worth at 10X


@pytest.mark.integration
def test_timestamp_option_adds_ts(
    txserver: ServerThread, connect: Connect, history: tuple[Client, str, list[str]]
) -> None:
    pub, topic, _ = history
    plain = bookmark_sub(connect("sub"), topic, "0")
    stamped = bookmark_sub(connect("sub"), topic, "0", options="timestamp")
    publish(pub, topic, [10])
    plain.wait_messages(11)
    stamped.wait_messages(11)
    assert all(m.get_timestamp() is None for m in plain.messages)
    stamps = [m.get_timestamp() for m in stamped.messages]
    assert all(re.fullmatch(r"\d{8}T\d{6}\.\d{6}Z", str(s)) for s in stamps), stamps
    assert stamps == sorted(stamps)


def test_live_option_delivers_before_the_record_is_durable(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync="never")
    # no group commit
    broker = Broker(None, txlog=TxLog(journal), hooks=BrokerHooks(request_sync=lambda: None))
    sessions = {}
    for name in ("pub", "durable", "live"):
        session = sessions[name] = FakeSession()
        conn = broker.connect(session)
        broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": name}))
        if name != "pub":
            options = "live" if name == "live" else None
            broker.handle(
                conn,
                encode_header(
                    {
                        "c": "subscribe",
                        "cid": "2",
                        "t": "t",
                        "bm": "0",
                        "o": options,
                        "a": "processed",
                    }
                ),
            )
        else:
            pub = conn
    broker.handle(pub, b'{"c":"p","t":"t"}{"n":1}')
    assert len(sessions["live"].deliveries()) == 1  # written, not yet durable: live gets it
    assert sessions["durable"].deliveries() == []
    broker.on_durable(journal.sync())
    assert len(sessions["durable"].deliveries()) == 1
    assert len(sessions["live"].deliveries()) == 1  # not twice
    journal.close()


def test_a_flush_asking_for_a_persisted_ack_waits_for_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync="never")
    # no group commit
    broker = Broker(None, txlog=TxLog(journal), hooks=BrokerHooks(request_sync=lambda: None))
    session = FakeSession()
    conn = broker.connect(session)
    broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": "plain"}))
    broker.handle(conn, b'{"c":"p","t":"t"}{"n":1}')  # a plain publish: no sequence
    broker.handle(conn, encode_header({"c": "flush", "cid": "f", "a": "processed,persisted"}))
    acks = [h for h, _ in (decode_header(p) for p in session.sent) if h.get("cid") == "f"]
    assert acks == []  # the record is written, not yet durable
    broker.on_durable(journal.sync())
    acks = [h for h, _ in (decode_header(p) for p in session.sent) if h.get("cid") == "f"]
    assert [a["a"] for a in acks] == ["processed", "persisted"]
    # a flush asking only for processed is answered at once
    broker.handle(conn, b'{"c":"p","t":"t"}{"n":2}')
    broker.handle(conn, encode_header({"c": "flush", "cid": "g", "a": "processed"}))
    assert any(h.get("cid") == "g" for h, _ in (decode_header(p) for p in session.sent))
    journal.close()


@pytest.mark.integration
def test_persisted_acks_carry_a_journal_bookmark_at_or_after_everything_delivered(
    txserver: ServerThread, connect: Connect, history: tuple[Client, str, list[str]]
) -> None:
    pub, topic, _ = history
    sub = connect("sub")
    box = Inbox()
    sub.set_last_chance_message_handler(box)  # a plain Client has no bookmark store
    bookmark_sub(sub, topic, "0", acks=("completed", "persisted"), sub_id="bsub", inbox=box)
    box.wait_ack("completed")
    publish(pub, unique("other"), [0])  # a commit on another topic: the position moves too
    publish(pub, topic, [10])
    box.wait_messages(11)
    box.wait(lambda b: len(b.acks("persisted")) >= 1)
    settle(txserver, sub)
    log = journal_bookmarks(txserver)
    last_delivered = -1
    for item in box.snapshot():
        if item.get_command() == "publish":
            last_delivered = log.index(item.get_bookmark())
        elif item.get_ack_type() == "persisted":
            assert item.get_sub_id() == "bsub" and item.get_status() == "success"
            assert item.get_bookmark() in log  # a real journal position...
            assert log.index(item.get_bookmark()) >= last_delivered  # ...not behind the stream


# --------------------------------------------------------------------------- slow subscriber


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.integration
@pytest.mark.slow
def test_a_slow_subscriber_replaying_200k_messages_keeps_server_memory_bounded(
    tmp_path: Path,
) -> None:
    total = 200_000
    filler = "x" * 400
    with ServerProcess(data_dir=tmp_path, extra_args=["--fsync", "never"]) as server:
        assert server.pid is not None
        pub = Client(unique("pub"))
        pub.connect(server.uri())
        pub.logon(5000)
        try:
            for n in range(total):
                pub.publish("big", b'{"n":%d,"f":"%s"}' % (n, filler.encode()))
            pub.flush(60_000)
        finally:
            pub.close()
        baseline = _rss_kib(server.pid)
        peak = baseline
        reader = RawClient(server.tcp_port, rcvbuf=64 * 1024, timeout=10)
        reader.send({"c": "logon", "cid": "l", "client_name": unique("slow"), "a": "processed"})
        reader.send({"c": "subscribe", "cid": "s", "t": "big", "bm": "0", "a": "processed"})
        expected = 0
        deadline = time.monotonic() + 60
        gulps = 0
        while expected < total:
            assert time.monotonic() < deadline, f"only {expected} of {total} received"
            for hdr, body in reader.read_some(32 * 1024, timeout=10):
                if hdr.get("c") == "p":
                    n = int(body[5 : body.index(b",")])
                    assert n == expected, (n, expected)
                    assert hdr["bm"].endswith(f"|{n + 1}|")
                    expected += 1
            gulps += 1
            if gulps % 16 == 0:
                peak = max(peak, _rss_kib(server.pid))
            time.sleep(0.001)  # a slow consumer (~20 MB/s): the server must wait, not buffer
        reader.close()
        peak = max(peak, _rss_kib(server.pid))
    growth_mib = (peak - baseline) / 1024
    # 200k x ~430 B = ~86 MB would be buffered by a server that did not pace the replay
    assert growth_mib < 40, f"server RSS grew {growth_mib:.1f} MiB during the replay"
