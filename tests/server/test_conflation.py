"""Conflated subscriptions (options ``conflation=<interval>``, ``conflation_key=[/f,...]``).

Three layers: the option parsing and the hold bookkeeping (pure), the broker with a manual
clock and timer list (exact timelines, no sockets), and a real server over TCP with the
project's sync client (message by message; waits are conditions with deadlines).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ampsclient import Client, Command, Message
from ampsclient.exceptions import InvalidOptionsError
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import SowTopicConfig, default_config
from ampsclient_server_stub.engine.broker import Broker, Connection
from ampsclient_server_stub.engine.conflation import (
    ConflationError,
    ConflationSpec,
    Holds,
    parse_conflation,
)
from ampsclient_server_stub.engine.sow import SowTopic
from ampsclient_server_stub.testing import Inbox, ManualTime, wait_for
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, None),
        ({"conflation_key": "/a"}, None),  # a key alone conflates nothing
        ({"conflation": "1s"}, ConflationSpec(1.0, None)),
        ({"conflation": "100ms"}, ConflationSpec(0.1, None)),
        ({"conflation": "250"}, ConflationSpec(0.25, None)),  # bare number: milliseconds
        ({"conflation": "2s", "conflation_key": "[/a,/b/c]"}, ConflationSpec(2.0, ("/a", "/b/c"))),
        ({"conflation": "2s", "conflation_key": "/a"}, ConflationSpec(2.0, ("/a",))),
    ],
)
def test_parse_conflation(options: dict[str, str], expected: ConflationSpec | None) -> None:
    assert parse_conflation(options, has_sow_key=True) == expected


@pytest.mark.parametrize(
    "options",
    [
        {"conflation": "soon"},
        {"conflation": "0s"},
        {"conflation": "-1s"},
        {"conflation": "1s", "conflation_key": "[]"},
        {"conflation": "1s", "conflation_key": "a"},
        {"conflation": "1s", "conflation_key": "[/a//b]"},
    ],
)
def test_parse_conflation_refuses_garbage(options: dict[str, str]) -> None:
    with pytest.raises(ConflationError) as info:
        parse_conflation(options, has_sow_key=True)
    assert info.value.reason == "invalid options"


def test_without_a_sow_key_conflation_needs_a_conflation_key() -> None:
    with pytest.raises(ConflationError, match="conflation_key"):
        parse_conflation({"conflation": "1s"}, has_sow_key=False)
    spec = parse_conflation({"conflation": "1s", "conflation_key": "/k"}, has_sow_key=False)
    assert spec == ConflationSpec(1.0, ("/k",))


def test_holds_keep_one_value_per_key_and_release_in_hold_order() -> None:
    holds: Holds[str] = Holds()
    assert holds.hold("a", "a1", 10.0) is True
    assert holds.hold("b", "b1", 12.0) is True
    assert holds.hold("a", "a2", 99.0) is False  # replaced; the deadline stays 10
    assert len(holds) == 2 and holds.get("a") == "a2" and holds.first() == "a2"
    assert holds.release(9.9) == []
    assert holds.release(10.0) == ["a2"]
    assert holds.next_deadline() == 12.0
    assert holds.hold("a", "a3", 20.0) is True  # a new hold for a
    assert holds.release_all() == ["b1", "a3"]
    assert not holds and holds.next_deadline() is None


def test_a_dropped_key_held_again_keeps_its_new_deadline() -> None:
    holds: Holds[str] = Holds()
    holds.hold("a", "a1", 10.0)
    assert holds.pop("a") == "a1"
    holds.hold("a", "a2", 15.0)
    assert holds.release(12.0) == []  # the old deadline of "a" is forgotten
    assert holds.release(15.0) == ["a2"]


# --------------------------------------------------------------------------- broker, manual time


@pytest.fixture
def manual() -> ManualTime:
    return ManualTime()


@pytest.fixture
def broker(manual: ManualTime) -> Iterator[Broker]:
    sow = SowTopic("quotes", keys=("/sym",))
    broker = Broker(
        None,
        sow_topics=[sow],
        call_later=manual.call_later,
        clock=manual.clock,
        monotonic=manual.clock,
    )
    yield broker
    broker.close()
    sow.close()


def logon(broker: Broker, name: str) -> tuple[Connection, FakeSession]:
    session = FakeSession()
    conn = broker.connect(session)
    broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": name}))
    return conn, session


def subscribe(broker: Broker, conn: Connection, topic: str, options: str, **extra: Any) -> None:
    fields = {"c": "subscribe", "cid": "s", "t": topic, "sub_id": "s1", "o": options, **extra}
    broker.handle(conn, encode_header(fields))


def pub(broker: Broker, conn: Connection, topic: str, body: dict[str, Any]) -> None:
    broker.handle(conn, encode_header({"c": "p", "t": topic}) + json.dumps(body).encode())


def test_the_latest_message_per_key_is_delivered_at_the_end_of_its_own_hold(
    broker: Broker, manual: ManualTime
) -> None:
    sub, sub_session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    subscribe(broker, sub, "quotes", "conflation=1s")
    pub(broker, publisher, "quotes", {"sym": "A", "px": 1})  # t=0: A's hold until 1.0
    manual.advance(0.4)
    pub(broker, publisher, "quotes", {"sym": "B", "px": 10})  # t=0.4: B's hold until 1.4
    pub(broker, publisher, "quotes", {"sym": "A", "px": 2})  # replaces A
    manual.advance(0.5)
    pub(broker, publisher, "quotes", {"sym": "A", "px": 3})  # t=0.9: replaces A again
    assert sub_session.bodies() == []
    manual.advance(0.1)  # t=1.0
    assert sub_session.bodies() == [{"sym": "A", "px": 3}]
    pub(broker, publisher, "quotes", {"sym": "A", "px": 4})  # t=1.0: a new hold for A
    pub(broker, publisher, "quotes", {"sym": "B", "px": 11})
    manual.advance(0.399)
    assert len(sub_session.bodies()) == 1
    manual.advance(0.001)  # t=1.4: B's hold ends
    assert sub_session.bodies()[1:] == [{"sym": "B", "px": 11}]
    manual.advance(0.6)  # t=2.0: A's second hold ends
    assert sub_session.bodies()[2:] == [{"sym": "A", "px": 4}]
    hdr, _ = sub_session.frames()[0]
    assert hdr["sids"] == "s1" and hdr["t"] == "quotes" and hdr["k"]
    assert manual.pending == []  # nothing held: no timer either


def test_conflation_key_groups_by_the_given_fields(broker: Broker, manual: ManualTime) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    subscribe(broker, sub, "ticks", "conflation=1s,conflation_key=[/venue,/sym]")
    for venue, sym, n in [("x", "A", 1), ("y", "A", 2), ("x", "A", 3), ("x", "B", 4)]:
        pub(broker, publisher, "ticks", {"venue": venue, "sym": sym, "n": n})
    manual.advance(1.0)
    assert [b["n"] for b in session.bodies()] == [3, 2, 4]  # in the order the holds started


def test_a_topic_without_a_sow_key_needs_a_conflation_key(broker: Broker) -> None:
    sub, session = logon(broker, "sub")
    subscribe(broker, sub, "ticks", "conflation=1s", a="processed")
    ack = session.frames("ack")[-1][0]
    assert ack["status"] == "failure" and ack["reason"] == "invalid options"
    assert "s1" not in sub.subs


def test_a_delta_subscription_gets_the_whole_change_of_the_interval(
    broker: Broker, manual: ManualTime
) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    pub(broker, publisher, "quotes", {"sym": "A", "bid": 1, "ask": 2, "note": "x"})
    broker.handle(
        sub,
        encode_header(
            {"c": "delta_subscribe", "cid": "s", "t": "quotes", "sub_id": "d", "o": "conflation=1s"}
        ),
    )
    pub(broker, publisher, "quotes", {"sym": "A", "bid": 5, "ask": 2, "note": "x"})
    pub(broker, publisher, "quotes", {"sym": "A", "bid": 5, "ask": 7, "note": "x"})
    manual.advance(1.0)
    # one delta covering both changes (from the state before the hold), plus the key
    assert session.bodies() == [{"sym": "A", "bid": 5, "ask": 7}]


def test_an_update_that_leaves_the_filter_drops_what_is_held(
    broker: Broker, manual: ManualTime
) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    pub(broker, publisher, "quotes", {"sym": "A", "px": 1})
    subscribe(broker, sub, "quotes", "oof,conflation=1s", filter="/px < 10")
    pub(broker, publisher, "quotes", {"sym": "A", "px": 2})  # held
    pub(broker, publisher, "quotes", {"sym": "A", "px": 50})  # leaves the filter: oof now
    assert [h["reason"] for h, _ in session.frames("oof")] == ["match"]
    manual.advance(2.0)
    assert session.bodies() == []  # the held px=2 is stale: never delivered


def test_unsubscribe_and_disconnect_drop_the_holds_and_cancel_the_timer(
    broker: Broker, manual: ManualTime
) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    subscribe(broker, sub, "quotes", "conflation=1s")
    pub(broker, publisher, "quotes", {"sym": "A", "px": 1})
    state = sub.subs["s1"].conflation
    assert state is not None and len(state.holds) == 1 and len(manual.pending) == 1
    broker.handle(sub, encode_header({"c": "unsubscribe", "cid": "u", "sub_id": "s1"}))
    assert len(state.holds) == 0 and manual.pending == []
    manual.advance(5.0)
    assert session.bodies() == []

    subscribe(broker, sub, "quotes", "conflation=1s")
    pub(broker, publisher, "quotes", {"sym": "A", "px": 2})
    state = sub.subs["s1"].conflation
    assert state is not None and len(manual.pending) == 1
    broker.disconnect(sub)
    assert len(state.holds) == 0 and manual.pending == []


def test_memory_is_one_held_message_per_key(broker: Broker, manual: ManualTime) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    subscribe(broker, sub, "quotes", "conflation=1s")
    for n in range(5000):
        pub(broker, publisher, "quotes", {"sym": f"S{n % 10}", "n": n})
    state = sub.subs["s1"].conflation
    assert state is not None and len(state.holds) == 10 and len(manual.pending) == 1
    manual.advance(1.0)
    assert sorted(b["n"] for b in session.bodies()) == list(range(4990, 5000))


def test_a_conflated_plain_subscription_cannot_be_paused(
    broker: Broker, manual: ManualTime
) -> None:
    """Pausing is for bookmark subscriptions (issue #28): a conflated plain subscription is
    refused with ``invalid options`` and its holds keep being released."""
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    subscribe(broker, sub, "quotes", "conflation=1s")
    pub(broker, publisher, "quotes", {"sym": "A", "px": 1})
    pause = {"c": "subscribe", "sub_id": "s1", "o": "pause", "cid": "p", "a": "processed"}
    broker.handle(sub, encode_header(pause))
    (ack,) = [h for h in session.headers("ack") if h.get("cid") == "p"]
    assert (ack["status"], ack["reason"]) == ("failure", "invalid options")
    pub(broker, publisher, "quotes", {"sym": "A", "px": 2})
    manual.advance(1.0)
    assert session.bodies() == [{"sym": "A", "px": 2}]


# --------------------------------------------------------------------------- real server


@pytest.fixture(scope="module")
def quote_server() -> Iterator[ServerThread]:
    config = default_config(tcp_port=0, ws_port=0)
    config = dataclasses.replace(
        config, sow_topics=(*config.sow_topics, SowTopicConfig("quotes", "json", keys=("/sym",)))
    )
    with ServerThread(config, record_all_topics=False) as thread:
        yield thread


_seq = iter(range(1_000_000))


@pytest.fixture
def connect(quote_server: ServerThread) -> Iterator[Callable[[str], Client]]:
    clients: list[Client] = []

    def factory(prefix: str) -> Client:
        client = Client(f"{prefix}-{next(_seq)}-{time.time_ns()}")
        client.connect(quote_server.uri("tcp", "json"))
        client.logon(5000)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.close()


def arrivals(inbox: Inbox, count: int) -> list[tuple[float, Message]]:
    """Wait for ``count`` deliveries; every one so far with its arrival time."""
    inbox.wait_messages(count)
    return inbox.arrivals()


def conflated(client: Client, topic: str, options: str, sub_id: str) -> Inbox:
    inbox = Inbox(keep=lambda m: m.get_command() == "publish")
    cmd = Command("subscribe").set_topic(topic).set_options(options).set_sub_id(sub_id)
    client.execute_async(cmd.add_ack_type("processed").set_timeout(5000), inbox)
    return inbox


def send(client: Client, topic: str, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        client.publish(topic, json.dumps(body))
    client.flush(5000)


@pytest.mark.integration
def test_a_sow_topic_conflates_on_its_key_over_tcp(connect: Callable[[str], Client]) -> None:
    sub, publisher = connect("sub"), connect("pub")
    inbox = conflated(sub, "quotes", "conflation=1s", "q")
    started = time.monotonic()
    send(publisher, "quotes", {"sym": "A", "px": 1}, {"sym": "B", "px": 10})
    send(publisher, "quotes", {"sym": "A", "px": 2}, {"sym": "A", "px": 3}, {"sym": "B", "px": 11})
    first = arrivals(inbox, 2)
    assert [m.json() for _, m in first] == [{"sym": "A", "px": 3}, {"sym": "B", "px": 11}]
    assert first[0][0] - started >= 1.0  # held for the interval
    assert all(m.get_sow_key() for _, m in first)
    # the key is free again: the next message starts a new hold, then a sentinel key; anything
    # still held for A or B would have arrived before the sentinel's hold ended
    again = time.monotonic()
    send(publisher, "quotes", {"sym": "A", "px": 4}, {"sym": "Z", "px": 0})
    later = arrivals(inbox, 4)
    assert [m.json() for _, m in later[2:]] == [{"sym": "A", "px": 4}, {"sym": "Z", "px": 0}]
    assert later[2][0] - again >= 1.0
    assert inbox.payloads() == [m.json() for _, m in later]


@pytest.mark.integration
def test_a_plain_topic_conflates_on_conflation_key_over_tcp(
    connect: Callable[[str], Client],
) -> None:
    sub, publisher = connect("sub"), connect("pub")
    topic = f"ticks-{time.time_ns()}"
    inbox = conflated(sub, topic, "conflation=1s,conflation_key=[/sym]", "t")
    send(publisher, topic, *({"sym": "A" if n % 2 else "B", "n": n} for n in range(10)))
    got = arrivals(inbox, 2)
    assert [m.json() for _, m in got] == [{"sym": "B", "n": 8}, {"sym": "A", "n": 9}]
    assert all(m.get_sub_id() == "t" for _, m in got)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("topic", "options"),
    [
        ("plain-topic", "conflation=1s"),  # no SOW key to default to
        ("quotes", "conflation=never"),
        ("quotes", "conflation=0ms"),
        ("quotes", "conflation=1s,conflation_key=sym"),
    ],
)
def test_unusable_conflation_options_are_refused_over_tcp(
    connect: Callable[[str], Client], topic: str, options: str
) -> None:
    with pytest.raises(InvalidOptionsError) as info:
        conflated(connect("sub"), topic, options, "bad")
    assert info.value.reason == "invalid options"


@pytest.mark.integration
def test_unsubscribe_cancels_what_is_held_over_tcp(connect: Callable[[str], Client]) -> None:
    sub, publisher = connect("sub"), connect("pub")
    short = conflated(sub, "quotes", "conflation=1s", "short")
    long = conflated(sub, "quotes", "conflation=2s", "long")
    send(publisher, "quotes", {"sym": "U", "px": 1})
    sub.unsubscribe("short")
    # "short" would have released its hold a second before "long" on the same connection
    assert [m.json() for _, m in arrivals(long, 1)] == [{"sym": "U", "px": 1}]
    assert short.payloads() == []


@pytest.mark.integration
def test_disconnect_cancels_what_is_held_over_tcp(
    quote_server: ServerThread, connect: Callable[[str], Client]
) -> None:
    sub, publisher = connect("sub"), connect("pub")
    conflated(sub, "quotes", "conflation=5s", "gone")
    send(publisher, "quotes", {"sym": "D", "px": 1})
    name = sub.name
    broker = quote_server.broker

    def state() -> Any:
        conn = broker.connection_for(name)
        return None if conn is None else conn.subs["gone"].conflation

    held = quote_server.call(state)
    assert held is not None

    def status() -> tuple[int, bool]:
        return len(held.holds), held.timer is None

    assert quote_server.call(status) == (1, False)
    sub.close()
    wait_for(
        lambda: quote_server.call(lambda: broker.connection_for(name)) is None,
        what="the server to notice the disconnect",
    )
    assert quote_server.call(status) == (0, True)


def test_a_wall_clock_step_back_does_not_hold_a_conflated_message(manual: ManualTime) -> None:
    """Issue #32, clock steps: conflation intervals are measured on the monotonic clock. The
    wall clock steps an hour back during a hold; the hold still ends after its second."""
    wall = [5_000.0]
    sow = SowTopic("quotes", keys=("/sym",))
    broker = Broker(
        None,
        sow_topics=[sow],
        call_later=manual.call_later,
        clock=lambda: wall[0],
        monotonic=manual.clock,
    )
    try:
        sub, session = logon(broker, "sub")
        publisher, _ = logon(broker, "pub")
        subscribe(broker, sub, "quotes", "conflation=1s")
        pub(broker, publisher, "quotes", {"sym": "A", "px": 1})
        wall[0] -= 3600.0  # the wall clock steps an hour back
        manual.advance(1.0)
        assert session.bodies() == [{"sym": "A", "px": 1}]
    finally:
        broker.close()
        sow.close()
