"""The official AMPS Python client (``amps-python-client``, a black-box test peer) against the
reference server over ``tcp://``.

Observed quirks of the official client (kept here so the tests explain themselves):

* ``sow_delete()`` returns the ``stats`` ack; the Python ``Message`` has no accessor for
  ``records_deleted``: use ``get_matches()``/``get_topic_matches()``. Those stats accessors
  return strings (``"2"``), not ints.
* ``MemoryBookmarkStore(SOWRecoveryPointAdapter(client, name, timeout_ms))`` waits the full
  ``timeout_ms`` (default 5000) on the client side before it even sends its SOW query, holding
  the GIL meanwhile (other official clients in the process stop answering heartbeats), and
  then reports ``get_most_recent() == "0"``. ``adapter.next()`` called directly reads the
  projected records correctly, so the server side is right.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import SowTopicConfig, default_config
from ampsclient_server_stub.testing import wait_for

AMPS: Any = pytest.importorskip("AMPS")

pytestmark = [pytest.mark.interop, pytest.mark.integration]


@pytest.fixture(scope="module")
def amps_server() -> Iterator[ServerThread]:
    config = default_config(tcp_port=0, ws_port=0)
    config = dataclasses.replace(
        config,
        sow_topics=(
            *config.sow_topics,
            SowTopicConfig("orders", "json", keys=("/id",)),
            SowTopicConfig("prices", "json", keys=("/sym",)),
        ),
    )
    with ServerThread(config) as thread:
        yield thread


_names = iter(range(1_000_000))


@pytest.fixture
def connect(amps_server: ServerThread) -> Iterator[Callable[..., Any]]:
    clients: list[Any] = []

    def factory(prefix: str = "interop", *, publish_store: bool = False) -> Any:
        client = AMPS.Client(f"{prefix}-{next(_names)}-{time.time_ns()}")
        if publish_store:
            client.set_publish_store(AMPS.MemoryPublishStore(1000))
        client.connect(amps_server.uri("tcp", "json"))
        client.logon()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        try:
            client.disconnect()
        except Exception:
            pass


def unique(name: str) -> str:
    return f"{name}-{time.time_ns()}"


def test_logon_and_server_version(connect: Callable[..., Any]) -> None:
    client = connect()
    assert client.get_server_version() == 5030500


def test_publish_subscribe_with_filter_handler_form(connect: Callable[..., Any]) -> None:
    topic = unique("ticks")
    got: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        with lock:
            got.append((message.get_command(), message.get_data(), message.get_sub_id()))

    subscriber = connect("sub")
    sub_id = subscriber.subscribe(on_message, topic, "/x > 1", timeout=5000)
    publisher = connect("pub")
    for x in range(5):
        publisher.publish(topic, json.dumps({"x": x}))
    publisher.flush()
    wait_for(lambda: len(got) >= 3, timeout=5.0)
    assert [json.loads(d)["x"] for _, d, _ in got] == [2, 3, 4]
    assert all(cmd == "publish" and sid == sub_id for cmd, _, sid in got)


def test_subscribe_stream_form(connect: Callable[..., Any]) -> None:
    topic = unique("stream")
    subscriber = connect("sub")
    stream = subscriber.subscribe(topic, "/x > 1", timeout=5000)
    stream.timeout(5000)
    publisher = connect("pub")
    publisher.publish(topic, '{"x":1}')
    publisher.publish(topic, '{"x":7}')
    message = next(iter(stream))
    assert message is not None and json.loads(message.get_data()) == {"x": 7}
    stream.close()


def test_sow_records_keys_and_counts(
    connect: Callable[..., Any], amps_server: ServerThread
) -> None:
    client = connect()
    client.sow_delete("orders", "1=1")
    for i in range(1, 6):
        client.publish("orders", json.dumps({"id": i, "x": i * 10}))
    client.flush()
    messages = list(client.sow("orders", "/x > 10", batch_size=2, timeout=5000))
    commands = [m.get_command() for m in messages]
    assert commands == ["group_begin", "sow", "sow", "sow", "sow", "group_end"]
    records = messages[1:-1]
    assert [json.loads(m.get_data())["id"] for m in records] == [2, 3, 4, 5]
    expected = amps_server.call(
        lambda: [
            amps_server.broker.sow_topic("orders").compute_key({"id": i}) for i in (2, 3, 4, 5)
        ]  # type: ignore[union-attr]
    )
    assert [m.get_sow_key() for m in records] == expected
    # counts from a stats ack
    command = AMPS.Command("sow").set_topic("orders").set_filter("/x > 10").set_top_n(3)
    command.add_ack_type("stats")
    results = list(client.execute(command))
    stats = [m for m in results if m.get_command() == "ack"]
    assert len([m for m in results if m.get_command() == "sow"]) == 3
    assert stats and stats[-1].get_ack_type() == "stats"
    # the official accessors return the counts as strings
    assert int(stats[-1].get_records_returned()) == 3
    assert int(stats[-1].get_matches()) == 4
    assert int(stats[-1].get_topic_matches()) == 5


def test_sow_and_subscribe_with_oof(connect: Callable[..., Any]) -> None:
    subscriber = connect("sub")
    publisher = connect("pub")
    publisher.sow_delete("prices", "1=1")
    publisher.publish("prices", '{"sym":"IBM","px":10}')
    publisher.publish("prices", '{"sym":"MSFT","px":20}')
    publisher.flush()
    got: list[tuple[str, str, str | None]] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        with lock:
            cmd = message.get_command()
            got.append((cmd, message.get_data(), message.get_reason() if cmd == "oof" else None))

    subscriber.sow_and_subscribe(
        on_message, "prices", "/px > 5", batch_size=10, oof_enabled=True, timeout=5000
    )
    wait_for(lambda: any(g[0] == "group_end" for g in got), timeout=5.0)
    publisher.publish("prices", '{"sym":"IBM","px":1}')  # leaves the filter
    publisher.publish("prices", '{"sym":"MSFT","px":25}')  # still matches
    publisher.flush()
    wait_for(lambda: len(got) >= 6, timeout=5.0)
    assert [g[0] for g in got] == ["group_begin", "sow", "sow", "group_end", "oof", "publish"]
    assert got[4][2] == "match" and json.loads(got[4][1]) == {"sym": "IBM", "px": 1}
    assert json.loads(got[5][1]) == {"sym": "MSFT", "px": 25}
    publisher.sow_delete("prices", "/sym = 'MSFT'")
    wait_for(lambda: len(got) >= 7, timeout=5.0)
    assert got[6][0] == "oof" and got[6][2] == "deleted"


def test_sow_delete_returns_stats(connect: Callable[..., Any]) -> None:
    client = connect()
    client.sow_delete("orders", "1=1")
    for i in range(1, 5):
        client.publish("orders", json.dumps({"id": i, "x": i}))
    client.flush()
    ack = client.sow_delete("orders", "/x >= 3")
    assert ack.get_command() == "ack" and ack.get_ack_type() == "stats"
    assert ack.get_status() == "success"
    assert int(ack.get_matches()) == 2 and int(ack.get_topic_matches()) == 4
    remaining = [m for m in client.sow("orders", timeout=5000) if m.get_command() == "sow"]
    assert sorted(json.loads(m.get_data())["id"] for m in remaining) == [1, 2]


def test_failure_reasons_raise_the_official_exceptions(connect: Callable[..., Any]) -> None:
    client = connect()
    with pytest.raises(AMPS.BadFilterException):
        client.subscribe(lambda m: None, "t", "/x = = 1", timeout=5000)
    with pytest.raises(AMPS.BadRegexTopicException):
        client.subscribe(lambda m: None, "t(", timeout=5000)
    with pytest.raises(AMPS.InvalidTopicException):
        list(client.sow("not-a-sow-topic", timeout=5000))
    with pytest.raises(AMPS.InvalidOrderByException):
        list(client.sow("orders", order_by="/x SIDEWAYS", timeout=5000))


@pytest.mark.serial
def test_heartbeat_keeps_idle_connection(
    connect: Callable[..., Any], amps_server: ServerThread
) -> None:
    client = connect("hb")
    start = amps_server.statistics()["heartbeats_sent"]
    client.set_heartbeat(1)
    # idle for > 3 s: the server sends heartbeats, the client answers, nobody is dropped
    wait_for(lambda: amps_server.statistics()["heartbeats_sent"] >= start + 4, timeout=8)
    topic = unique("after-heartbeats")
    stream = client.subscribe(topic, timeout=5000)
    stream.timeout(5000)
    client.publish(topic, '{"alive":true}')
    message = next(iter(stream))
    assert message is not None and message.get_data() == '{"alive":true}'
    stream.close()


def test_publish_flush_and_flush(connect: Callable[..., Any], amps_server: ServerThread) -> None:
    publisher = connect("ha-pub", publish_store=True)
    topic = unique("persisted")
    for i in range(50):
        publisher.publish(topic, json.dumps({"i": i}))
    publisher.publish_flush(5000)
    assert publisher.get_unpersisted_count() == 0
    name = publisher.get_name()
    assert amps_server.call(lambda: amps_server.broker.last_sequence(name)) > 0
    plain = connect("plain")
    plain.publish(topic, "{}")
    plain.flush()
    plain.publish_flush(5000)


def test_recovery_point_sow_query_with_select(connect: Callable[..., Any]) -> None:
    tracked = unique("tracked")
    client = connect("bm-writer")
    for sub_id, bookmark in (("bsub", "1|5|"), ("b2", "1|7|")):
        client.publish(
            "/ADMIN/bookmark_store",
            json.dumps({"clientName": tracked, "subId": sub_id, "bookmark": bookmark}),
        )
    client.publish(
        "/ADMIN/bookmark_store",
        json.dumps({"clientName": "someone-else", "subId": "x", "bookmark": "1|9|"}),
    )
    client.flush()
    command = (
        AMPS.Command("sow")
        .set_topic("/ADMIN/bookmark_store")
        .set_filter(f"/clientName='{tracked}'")
        .set_options("select=[-/,+/subId,+/bookmark]")
        .set_batch_size(10)
    )
    records = [m.get_data() for m in client.execute(command) if m.get_command() == "sow"]
    assert records == ['{"subId":"bsub","bookmark":"1|5|"}', '{"subId":"b2","bookmark":"1|7|"}']

    # the official adapter reads the projected records positionally
    store_client = connect("rp-store")
    adapter = AMPS.SOWRecoveryPointAdapter(store_client, tracked, 200)
    points = [adapter.next(), adapter.next()]  # never past the end: that crashes the client
    assert [(p.get_sub_id(), p.get_bookmark()) for p in points] == [
        ("bsub", "1|5|"),
        ("b2", "1|7|"),
    ]
    # and a MemoryBookmarkStore can be built on it against this server
    store = AMPS.MemoryBookmarkStore(AMPS.SOWRecoveryPointAdapter(connect("rp2"), tracked, 200))
    assert store is not None
