"""Conflated topics (``<SOW>/<ConflatedTopic>``, AMPS User Guide "Conflated Topics").

Three layers: the configuration (errors name the element), the broker with a manual clock
(exact intervals, no sockets), and a real server over TCP with the project's client and the
official ``AMPS`` client (message by message; waits are conditions with deadlines).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient.exceptions import InvalidTopicException
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.broker import Broker, Connection
from ampsclient_server_stub.testing import Inbox, ManualTime, wait_for
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

INTERVAL = 0.2


def xml(conflated: str, *, interval: str = "200ms") -> str:
    body = conflated.replace("{interval}", interval)
    return f"""<AMPSConfig>
  <Name>conflated</Name>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>
    <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/sym</Key></Topic>
    {body}
  </SOW>
</AMPSConfig>"""


PLAIN = """<ConflatedTopic><Name>quotes-C</Name><UnderlyingTopic>quotes</UnderlyingTopic>
      <MessageType>json</MessageType><Interval>{interval}</Interval></ConflatedTopic>"""
FILTERED = """<ConflatedTopic><Name>quotes-F</Name><UnderlyingTopic>quotes</UnderlyingTopic>
      <MessageType>json</MessageType><Interval>{interval}</Interval>
      <Filter>/px &lt; 100</Filter></ConflatedTopic>"""

# --------------------------------------------------------------------------- configuration


def test_a_conflated_topic_is_read_with_its_documented_defaults(tmp_path: Path) -> None:
    legacy = """<ReplicaDefinition><Topic>old</Topic><UnderlyingTopic>quotes</UnderlyingTopic>
      <MessageType>JSON</MessageType></ReplicaDefinition>"""
    cfg = parse_config(xml(PLAIN + FILTERED + legacy), base_dir=tmp_path)
    by_name = {t.name: t for t in cfg.conflated_topics}
    assert by_name["quotes-C"].interval == INTERVAL and by_name["quotes-C"].filter is None
    assert by_name["quotes-F"].filter == "/px < 100"
    assert by_name["old"].interval == 5.0  # AMPS: default 5s
    assert by_name["old"].message_type == "json" and by_name["old"].underlying == "quotes"


@pytest.mark.parametrize(
    ("element", "message"),
    [
        (
            "<ConflatedTopic><Name>c</Name><MessageType>json</MessageType></ConflatedTopic>",
            "conflated topic 'c': <UnderlyingTopic> is required",
        ),
        (
            "<ConflatedTopic><Name>c</Name><UnderlyingTopic>nope</UnderlyingTopic>"
            "<MessageType>json</MessageType></ConflatedTopic>",
            "conflated topic 'c': <UnderlyingTopic> 'nope' is not a SOW topic",
        ),
        (
            "<ConflatedTopic><Name>c</Name><UnderlyingTopic>quotes</UnderlyingTopic>"
            "<MessageType>xml</MessageType></ConflatedTopic>",
            "conflated topic 'c': <MessageType> 'xml' is not the message type of "
            "<UnderlyingTopic> 'quotes' (json)",
        ),
        (
            "<ConflatedTopic><Name>c</Name><UnderlyingTopic>quotes</UnderlyingTopic>"
            "<MessageType>json</MessageType><Interval>99ms</Interval></ConflatedTopic>",
            "conflated topic 'c': <Interval> '99ms' is under the minimum of 100ms",
        ),
        (
            "<ConflatedTopic><Name>c</Name><UnderlyingTopic>quotes</UnderlyingTopic>"
            "<MessageType>json</MessageType><HashIndex></HashIndex>"
            "</ConflatedTopic>",
            "conflated topic 'c': <HashIndex> has no <Key>",
        ),
        (
            "<ConflatedTopic><Name>c</Name><UnderlyingTopic>quotes</UnderlyingTopic>"
            "<MessageType>json</MessageType><Filter>/px = = 1</Filter></ConflatedTopic>",
            "conflated topic 'c': bad <Filter> '/px = = 1'",
        ),
        (
            "<ConflatedTopic><Name>quotes</Name><UnderlyingTopic>quotes</UnderlyingTopic>"
            "<MessageType>json</MessageType></ConflatedTopic>",
            "conflated topic 'quotes' has the name of a SOW topic",
        ),
        (
            "<ConflatedTopic><Name>c</Name><UnderlyingTopic>quotes</UnderlyingTopic>"
            "<MessageType>json</MessageType><Colour>red</Colour></ConflatedTopic>",
            "<Colour> is not a conflated topic element",
        ),
    ],
)
def test_bad_conflated_topics_are_refused_naming_the_element(
    tmp_path: Path, element: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(xml(element), base_dir=tmp_path)
    assert message in str(info.value)
    assert str(info.value).startswith("line ")


# --------------------------------------------------------------------------- broker, manual time


@pytest.fixture
def manual() -> ManualTime:
    return ManualTime()


@pytest.fixture
def broker(manual: ManualTime, tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(
        parse_config(xml(PLAIN + FILTERED), base_dir=tmp_path),
        call_later=manual.call_later,
        clock=manual.clock,
        monotonic=manual.clock,
    )
    yield broker
    broker.close()


def logon(broker: Broker, name: str) -> tuple[Connection, FakeSession]:
    session = FakeSession()
    conn = broker.connect(session)
    broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": name}))
    return conn, session


def command(broker: Broker, conn: Connection, body: bytes = b"", **fields: Any) -> None:
    broker.handle(conn, encode_header(fields) + body)


def pub(broker: Broker, conn: Connection, topic: str, **doc: Any) -> None:
    command(broker, conn, json.dumps(doc).encode(), c="p", t=topic)


def test_a_burst_within_one_interval_gives_one_message_per_key_with_the_latest_value(
    broker: Broker, manual: ManualTime
) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    command(broker, sub, c="subscribe", cid="s", t="quotes-C", sub_id="s1")
    keys, rounds = "ABCDE", 40
    for n in range(rounds):
        for sym in keys:
            pub(broker, publisher, "quotes", sym=sym, n=n)
    assert session.bodies() == []  # nothing before the interval ends
    manual.advance(INTERVAL)
    assert session.bodies() == [{"sym": s, "n": rounds - 1} for s in keys]
    # the next interval copies only what changed in it, at its latest value
    pub(broker, publisher, "quotes", sym="B", n=100)
    pub(broker, publisher, "quotes", sym="D", n=101)
    pub(broker, publisher, "quotes", sym="B", n=102)
    manual.advance(INTERVAL / 2)
    assert len(session.bodies()) == len(keys)
    manual.advance(INTERVAL / 2)
    # in the order of the underlying topic's latest writes
    assert session.bodies()[len(keys) :] == [{"sym": "D", "n": 101}, {"sym": "B", "n": 102}]
    manual.advance(INTERVAL * 3)  # unchanged: nothing more
    assert len(session.bodies()) == len(keys) + 2
    hdr, _ = session.frames()[0]
    assert hdr["t"] == "quotes-C" and hdr["sids"] == "s1" and hdr["k"]


def test_the_conflated_sow_holds_the_state_of_the_last_interval(
    broker: Broker, manual: ManualTime
) -> None:
    publisher, _ = logon(broker, "pub")
    conflated = broker.sow_topic("quotes-C")
    assert conflated is not None

    def state() -> list[Any]:
        records, _matches = conflated.query()
        return [json.loads(r.data) for r in records]

    pub(broker, publisher, "quotes", sym="A", n=1)
    manual.advance(INTERVAL)
    pub(broker, publisher, "quotes", sym="A", n=2)  # not copied yet
    assert state() == [{"sym": "A", "n": 1}]
    manual.advance(INTERVAL)
    assert state() == [{"sym": "A", "n": 2}]


def test_deletes_expiry_and_leaving_the_filter_remove_the_record_with_an_oof(
    broker: Broker, manual: ManualTime
) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    command(broker, sub, c="subscribe", cid="s", t="quotes-F", sub_id="f", o="oof")
    command(broker, sub, c="subscribe", cid="s2", t="quotes-C", sub_id="c", o="oof")
    pub(broker, publisher, "quotes", sym="A", px=1)
    pub(broker, publisher, "quotes", sym="B", px=2)
    command(broker, publisher, json.dumps({"sym": "E", "px": 3}).encode(), c="p", t="quotes", e=1)
    manual.advance(INTERVAL)
    assert len(session.frames("p")) == 6  # three records on each conflated topic
    pub(broker, publisher, "quotes", sym="A", px=500)  # leaves quotes-F's filter
    command(broker, publisher, c="sow_delete", cid="d", t="quotes", filter="/sym = 'B'")
    manual.advance(1.0)
    broker.expire(manual.clock())  # E expires in the underlying topic
    manual.advance(INTERVAL)
    oofs = [
        (h["t"], h["sids"], json.loads(b)["sym"], h["reason"]) for h, b in session.frames("oof")
    ]
    assert sorted(oofs) == [
        ("quotes-C", "c", "B", "deleted"),
        ("quotes-C", "c", "E", "deleted"),
        ("quotes-F", "f", "A", "deleted"),
        ("quotes-F", "f", "B", "deleted"),
        ("quotes-F", "f", "E", "deleted"),
    ]
    assert session.bodies("p")[6:] == [{"sym": "A", "px": 500}]  # on quotes-C
    conflated = broker.sow_topic("quotes-C")
    filtered = broker.sow_topic("quotes-F")
    assert conflated is not None and filtered is not None
    assert len(conflated) == 1 and len(filtered) == 0


def test_a_delta_subscription_gets_the_change_of_the_interval(
    broker: Broker, manual: ManualTime
) -> None:
    sub, session = logon(broker, "sub")
    publisher, _ = logon(broker, "pub")
    pub(broker, publisher, "quotes", sym="A", px=1, qty=5, venue="X")
    manual.advance(INTERVAL)
    command(broker, sub, c="delta_subscribe", cid="s", t="quotes-C", sub_id="d")
    pub(broker, publisher, "quotes", sym="A", px=2, qty=5, venue="X")
    pub(broker, publisher, "quotes", sym="A", px=3, qty=5, venue="X")
    manual.advance(INTERVAL)
    assert session.bodies() == [{"sym": "A", "px": 3}]


def test_clients_cannot_write_to_a_conflated_topic(broker: Broker, manual: ManualTime) -> None:
    client, session = logon(broker, "writer")
    command(broker, client, b'{"sym":"A","n":1}', c="p", t="quotes-C", cid="p1", a="processed")
    command(broker, client, c="sow_delete", t="quotes-C", cid="d1", filter="1=1", a="processed")
    acks = {h["cid"]: h for h in session.headers("ack", "processed")}
    for cid in ("p1", "d1"):
        assert acks[cid]["status"] == "failure"
        assert acks[cid]["reason"] == "invalid topic"
    manual.advance(INTERVAL)
    conflated = broker.sow_topic("quotes-C")
    assert conflated is not None and len(conflated) == 0


# --------------------------------------------------------------------------- real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("conflated")
    with ServerThread(parse_config(xml(PLAIN + FILTERED), base_dir=base)) as thread:
        yield thread


_seq = iter(range(1_000_000))


@pytest.fixture
def connect(server: ServerThread) -> Iterator[Callable[[str], Client]]:
    clients: list[Client] = []

    def factory(prefix: str) -> Client:
        client = Client(f"{prefix}-{next(_seq)}-{time.time_ns()}")
        client.connect(server.uri("tcp", "json"))
        client.logon(5000)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.close()


def _latest(inbox: Inbox, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for message in inbox.messages:
        doc = json.loads(message.get_data())
        if doc["sym"].startswith(prefix):
            out[doc["sym"]] = doc["n"]
    return out


@pytest.mark.integration
def test_a_burst_over_tcp_gives_each_key_at_most_once_per_interval_at_its_latest_value(
    connect: Callable[[str], Client],
) -> None:
    sub, publisher = connect("sub"), connect("pub")
    inbox = Inbox(keep=lambda m: m.get_command() == "publish")
    sub.subscribe(inbox, "quotes-C", "/sym LIKE '^burst'", timeout=5000)
    keys = [f"burst-{i}" for i in range(5)]
    rounds = 200
    for n in range(rounds):
        for sym in keys:
            publisher.publish("quotes", json.dumps({"sym": sym, "n": n}))
    publisher.flush(5000)
    inbox.wait(lambda _box: _latest(inbox, "burst") == dict.fromkeys(keys, rounds - 1), 10.0)
    per_key: dict[str, list[tuple[float, int]]] = {}
    for at, message in inbox.arrivals():
        doc = json.loads(message.get_data())
        per_key.setdefault(doc["sym"], []).append((at, doc["n"]))
    for sym, seen in per_key.items():
        values = [n for _, n in seen]
        assert values == sorted(set(values)), (sym, values)  # no duplicate, never older
        assert values[-1] == rounds - 1
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(seen)]
        assert all(gap > INTERVAL / 2 for gap in gaps), (sym, gaps)  # one per interval
    assert len(inbox.messages) < rounds * len(keys)


@pytest.mark.integration
def test_sow_and_delete_over_tcp(connect: Callable[[str], Client]) -> None:
    client = connect("sow")
    inbox = Inbox(keep=lambda m: m.get_command() == "oof")
    sub = client.execute_async(
        Command("subscribe").set_topic("quotes-C").set_filter("/sym = 'sow-A'").set_options("oof"),
        inbox,
    )
    client.publish("quotes", json.dumps({"sym": "sow-A", "n": 1}))
    client.publish("quotes", json.dumps({"sym": "sow-A", "n": 2}))
    client.flush(5000)

    def conflated_state() -> list[Any]:
        found = client.sow("quotes-C", "/sym = 'sow-A'", timeout=5000)
        return [json.loads(m.get_data()) for m in found if m.get_command() == "sow"]

    wait_for(lambda: conflated_state() == [{"sym": "sow-A", "n": 2}], 5.0, "the copy")
    client.sow_delete("quotes", "/sym = 'sow-A'", timeout=5000)
    inbox.wait_for_count(1, 5.0)
    assert [json.loads(m.get_data())["sym"] for m in inbox.snapshot()] == ["sow-A"]
    assert inbox.snapshot()[0].get_reason() == "deleted"
    assert conflated_state() == []
    client.unsubscribe(sub)


@pytest.mark.integration
def test_a_publish_to_a_conflated_topic_fails_over_tcp(connect: Callable[[str], Client]) -> None:
    client = connect("writer")
    cmd = Command("publish").set_topic("quotes-C").set_data('{"sym":"w","n":1}')
    with pytest.raises(InvalidTopicException, match="invalid topic"):
        client.execute_async(cmd.add_ack_type("processed").set_timeout(5000), lambda _m: None)
    with pytest.raises(InvalidTopicException):
        client.sow_delete("quotes-C", "1=1", timeout=5000)


@pytest.mark.integration
def test_the_official_client_reads_a_conflated_topic(server: ServerThread) -> None:
    amps: Any = pytest.importorskip("AMPS")
    client = amps.Client(f"official-{time.time_ns()}")
    client.connect(server.uri("tcp", "json"))
    client.logon()
    try:
        inbox = Inbox()  # keeps copies: the official client reuses its Message object

        def keep(message: Any) -> None:
            if message.get_command() == "publish":
                inbox(json.loads(message.get_data()))

        client.sow_and_subscribe(keep, "quotes-C", "/sym = 'off-A'", timeout=5000)
        client.publish("quotes", json.dumps({"sym": "off-A", "n": 1}))
        client.publish("quotes", json.dumps({"sym": "off-A", "n": 2}))
        client.publish_flush(5000)
        inbox.wait(lambda box: {"sym": "off-A", "n": 2} in box.snapshot(), 5.0)
        docs = inbox.snapshot()
        assert docs[-1] == {"sym": "off-A", "n": 2} and docs in (
            [docs[-1]],
            [{**docs[-1], "n": 1}, docs[-1]],
        )
    finally:
        client.disconnect()
