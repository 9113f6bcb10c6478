"""Event topics: ``/AMPS/ClientStatus`` and ``/AMPS/SOWStats`` (AMPS User Guide, "Event
Topics"). A broker with a manual clock (exact events, no sockets), then a real server over TCP
with the project's client and the official ``AMPS`` client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.broker import Broker, Connection
from ampsclient_server_stub.testing import Inbox, ManualTime
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession


def xml(extra: str = "") -> str:
    return f"""<AMPSConfig>
  <Name>events</Name>
  {extra}
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/sym</Key></Topic>
  </SOW>
</AMPSConfig>"""


@pytest.fixture
def manual() -> ManualTime:
    return ManualTime()


@pytest.fixture
def broker(manual: ManualTime, tmp_path: Path) -> Iterator[Broker]:
    config = parse_config(xml("<SOWStatsInterval>200ms</SOWStatsInterval>"), base_dir=tmp_path)
    broker = Broker(config, call_later=manual.call_later, clock=manual.clock)
    yield broker
    broker.close()


def logon(broker: Broker, name: str, **extra: Any) -> tuple[Connection, FakeSession]:
    session = FakeSession()
    conn = broker.connect(session)
    fields = {"c": "logon", "cid": "l", "client_name": name, **extra}
    broker.handle(conn, encode_header(fields))
    return conn, session


def command(broker: Broker, conn: Connection, body: bytes = b"", **fields: Any) -> None:
    broker.handle(conn, encode_header(fields) + body)


def statuses(session: FakeSession, topic: str = "/AMPS/ClientStatus") -> list[dict[str, Any]]:
    return [json.loads(b)["ClientStatus"] for h, b in session.frames() if h["t"] == topic]


def test_logon_subscribe_unsubscribe_and_disconnect_are_published(broker: Broker) -> None:
    watcher, session = logon(broker, "watcher")
    command(broker, watcher, c="subscribe", cid="w", t="/AMPS/ClientStatus", sub_id="w")
    app, _ = logon(broker, "app", user_id="alice")
    command(broker, app, c="subscribe", cid="s", t="orders", sub_id="s1", filter="/x > 1", o="oof")
    command(broker, app, c="unsubscribe", cid="u", sub_id="s1")
    command(broker, app, c="subscribe", cid="s", t="quotes", sub_id="s2")
    broker.disconnect(app)
    events = [e for e in statuses(session) if e["client_name"] != "watcher"]
    assert [(e["event"], e.get("sub_id")) for e in events] == [
        ("logon", None),
        ("subscribe", "s1"),
        ("unsubscribe", "s1"),
        ("subscribe", "s2"),
        ("unsubscribe", "s2"),  # one for each subscription it had, then the disconnect
        ("disconnect", None),
    ]
    assert {e["client_name"] for e in events} == {"app"}
    assert {e["auth_id"] for e in events} == {"alice"}
    assert events[1]["topic"] == "orders" and events[1]["filter"] == "/x > 1"
    assert events[1]["options"] == "oof"
    assert events[0]["connection_name"] == f"events-tcp-{app.id}"
    assert all(e["timestamp"].endswith("Z") for e in events)


def test_a_sow_query_is_published_with_its_query(broker: Broker) -> None:
    watcher, session = logon(broker, "watcher")
    command(broker, watcher, c="subscribe", cid="w", t="/AMPS/ClientStatus", sub_id="w")
    app, _ = logon(broker, "app", x="logon-1")
    command(broker, app, c="sow", cid="q", t="orders", query_id="q1", filter="/id > 0", o="")
    events = [e for e in statuses(session) if e["client_name"] == "app"]
    assert [e["event"] for e in events] == ["logon", "sow"]
    assert events[0]["correlation_id"] == "logon-1"
    sow = events[1]
    assert (sow["topic"], sow["filter"], sow["query_id"]) == ("orders", "/id > 0", "q1")


def test_a_kick_gives_its_reason_and_filters_apply(broker: Broker) -> None:
    watcher, session = logon(broker, "watcher")
    command(
        broker,
        watcher,
        c="subscribe",
        cid="w",
        t="/AMPS/ClientStatus",
        sub_id="w",
        filter="/ClientStatus/event = 'disconnect'",
    )
    app, _ = logon(broker, "app")
    broker.kick(app, "slow client")
    assert [(e["event"], e["reason"]) for e in statuses(session)] == [("disconnect", "slow client")]


def test_only_subscriptions_that_name_the_event_topics_receive_them(broker: Broker) -> None:
    watcher, session = logon(broker, "watcher")
    command(broker, watcher, c="subscribe", cid="a", t=".*", sub_id="all")
    command(broker, watcher, c="subscribe", cid="b", t="^/AMPS/.*", sub_id="amps")
    logon(broker, "app")
    # the "amps" subscription hears of itself and of the logon; ".*" of neither
    assert [h["sids"] for h, _ in session.frames()] == ["amps", "amps"]
    assert [e["event"] for e in statuses(session)] == ["subscribe", "logon"]


def test_sow_stats_every_interval_one_message_per_sow_topic(
    broker: Broker, manual: ManualTime
) -> None:
    watcher, session = logon(broker, "watcher")
    command(broker, watcher, c="subscribe", cid="w", t="/AMPS/SOWStats", sub_id="w")
    for n in range(3):
        command(broker, watcher, json.dumps({"id": n}).encode(), c="p", t="orders")
    assert session.frames() == []
    manual.advance(0.2)
    stats = [json.loads(b)["SOWStats"] for _, b in session.frames()]
    assert [(s["topic"], s["message_type"], s["record_count"]) for s in stats] == [
        ("orders", "json", 3),
        ("quotes", "json", 0),
    ]
    manual.advance(0.2)
    assert len(session.frames()) == 4


def test_a_bad_sow_stats_interval_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SOWStatsInterval"):
        parse_config(xml("<SOWStatsInterval>often</SOWStatsInterval>"), base_dir=tmp_path)


def test_without_sow_stats_interval_nothing_is_published(
    manual: ManualTime, tmp_path: Path
) -> None:
    broker = Broker(parse_config(xml(), base_dir=tmp_path), call_later=manual.call_later)
    try:
        watcher, session = logon(broker, "watcher")
        command(broker, watcher, c="subscribe", cid="w", t="/AMPS/SOWStats", sub_id="w")
        manual.advance(10.0)
        assert session.frames() == []
    finally:
        broker.close()


# --------------------------------------------------------------------------- real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("events")
    config = parse_config(xml("<SOWStatsInterval>200ms</SOWStatsInterval>"), base_dir=base)
    with ServerThread(config) as thread:
        yield thread


def test_client_status_over_tcp(server: ServerThread) -> None:
    name = f"app-{time.time_ns()}"
    watcher = Client(f"watcher-{time.time_ns()}")
    watcher.connect(server.uri("tcp", "json"))
    watcher.logon(5000)
    inbox = Inbox(keep=lambda m: m.get_command() == "publish")
    try:
        watcher.subscribe(
            inbox, "/AMPS/ClientStatus", f"/ClientStatus/client_name = '{name}'", timeout=5000
        )
        app = Client(name)
        app.connect(server.uri("tcp", "json"))
        app.logon(5000)
        app.subscribe(lambda _m: None, "orders", timeout=5000)
        app.close()
        inbox.wait_messages(4, 10.0)
        events = [json.loads(m.get_data())["ClientStatus"]["event"] for m in inbox.messages]
        assert events == ["logon", "subscribe", "unsubscribe", "disconnect"]
    finally:
        watcher.close()


def test_the_official_client_receives_sow_stats(server: ServerThread) -> None:
    amps: Any = pytest.importorskip("AMPS")
    client = amps.Client(f"official-{time.time_ns()}")
    client.connect(server.uri("tcp", "json"))
    client.logon()
    try:
        client.publish("orders", json.dumps({"id": "stats-1"}))
        client.publish_flush(5000)
        inbox = Inbox()

        def keep(message: Any) -> None:  # copies: the official client reuses its Message
            if message.get_command() == "publish":
                inbox(json.loads(message.get_data())["SOWStats"])

        client.subscribe(keep, "/AMPS/SOWStats", "/SOWStats/topic = 'orders'", timeout=5000)
        inbox.wait(lambda box: any(s["record_count"] >= 1 for s in box.snapshot()), 5.0)
        assert {s["topic"] for s in inbox.snapshot()} == {"orders"}
    finally:
        client.disconnect()
