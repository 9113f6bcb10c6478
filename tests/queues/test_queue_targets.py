"""A queue over several underlying topics (a regular expression ``UnderlyingTopic``) and its
``DefaultPublishTarget`` (where a publish to the queue's own name goes), over real sockets:
delivery, the re-routed publish seen by plain subscribers of the target topic, recovery
after a restart, a bookmark replay of the queue, and the configuration checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, bodies, publish, queue_config

from ampsclient.protocol.framing import tcp_frame
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

ORDERS = QueueConfig(
    name="orders_q",
    message_type="json",
    underlying=("^orders/(eu|us|direct)$",),
    default_publish_target="orders/direct",
    max_per_subscription_backlog=10,
)


def run(tmp_path: Path) -> ServerThread:
    return ServerThread(queue_config(tmp_path, ORDERS), fsync="never").start()


def stats(server: ServerThread) -> dict[str, Any]:
    return server.call(lambda: server.broker.queues.statistics()["orders_q"])  # type: ignore[union-attr]


def test_a_regex_queue_takes_every_matching_topic_and_its_name_publishes_to_the_target(
    tmp_path: Path,
) -> None:
    server = run(tmp_path)
    try:
        plain = Consumer(server)  # a plain subscriber of the target topic
        plain.subscribe("orders/direct", sub_id="plain")
        publish(server, "orders/eu", [{"n": 1}])
        publish(server, "orders/asia", [{"n": 2}])  # not matched: not queued
        publish(server, "orders/us", [{"n": 3}])
        publish(server, "orders_q", [{"n": 4}])  # the queue's name: goes to orders/direct
        assert stats(server)["queue_depth"] == 3
        consumer = Consumer(server)
        consumer.subscribe("orders_q", o="max_backlog=10")
        got = consumer.sync()
        assert [d["n"] for d in bodies(got)] == [1, 3, 4]
        assert all(hdr["t"] == "orders_q" and "lp" in hdr for hdr, _ in got)
        (direct,) = plain.sync()  # the re-routed publish, on the target topic
        assert direct[0]["t"] == "orders/direct" and json.loads(direct[1]) == {"n": 4}
        for hdr, _body in got:
            consumer.ack("orders_q", hdr["bm"])
        consumer.sync()
        assert stats(server)["queue_depth"] == 0
    finally:
        server.stop()


def test_regex_queue_recovers_after_a_restart_and_replays_by_bookmark(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        publish(server, "orders/eu", [{"n": 1}, {"n": 2}])
        publish(server, "orders/other", [{"n": 0}])
        publish(server, "orders_q", [{"n": 3}])
        consumer = Consumer(server)
        consumer.subscribe("orders_q", o="max_backlog=1")
        ((hdr, body),) = consumer.sync()
        assert json.loads(body) == {"n": 1}
        consumer.ack("orders_q", hdr["bm"], a="processed")
    finally:
        server.stop()
    server = run(tmp_path)  # the same journal and ack point
    try:
        assert stats(server)["queue_depth"] == 2
        consumer = Consumer(server)
        consumer.subscribe("orders_q", o="max_backlog=10")
        assert [d["n"] for d in bodies(consumer.sync())] == [2, 3]
        replay = Consumer(server)  # a bookmark subscription: a replay of the topics
        replay.subscribe("orders_q", sub_id="r", bm="0")
        assert sorted(d["n"] for d in bodies(replay.sync())) == [1, 2, 3]
    finally:
        server.stop()


def test_a_publish_run_to_the_queue_name_is_rerouted(tmp_path: Path) -> None:
    """Many publishes in one read (the ingest's run path) are re-routed too."""
    server = run(tmp_path)
    try:
        with RawClient(server.tcp_port) as raw:
            raw.logon("runner")
            frames = [
                ({"c": "p", "t": "orders_q", "s": n, "a": "persisted"}, json.dumps({"n": n}))
                for n in range(1, 51)
            ]
            raw.send_raw(b"".join(tcp_frame(encode_header(h) + b.encode()) for h, b in frames))
            raw.recv_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= 50)
        assert stats(server)["queue_depth"] == 50
        replay = Consumer(server)
        replay.subscribe("orders/direct", sub_id="r", bm="0")
        assert [d["n"] for d in bodies(replay.sync())] == list(range(1, 51))
    finally:
        server.stop()


CONFIG = """<AMPSConfig><Name>t</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>^orders/.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Queue><Name>q</Name><MessageType>json</MessageType>{body}</Queue></SOW></AMPSConfig>"""


def test_the_xml_configuration_is_read(tmp_path: Path) -> None:
    body = (
        "<UnderlyingTopic>^orders/(eu|us|direct)$</UnderlyingTopic>"
        "<DefaultPublishTarget>orders/direct</DefaultPublishTarget>"
    )
    (queue,) = parse_config(CONFIG.format(body=body), base_dir=tmp_path).queues
    assert queue.underlying == ("^orders/(eu|us|direct)$",)
    assert queue.default_publish_target == "orders/direct"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<UnderlyingTopic>^orders/.*</UnderlyingTopic>", "needs <DefaultPublishTarget>"),
        (
            "<UnderlyingTopic>^orders/eu$</UnderlyingTopic>"
            "<DefaultPublishTarget>orders/us</DefaultPublishTarget>",
            "'orders/us' is not one of the queue's underlying topics",
        ),
        (
            "<UnderlyingTopic>^orders/.*</UnderlyingTopic>"
            "<DefaultPublishTarget>orders/.*</DefaultPublishTarget>",
            "must be a topic name, not a regex",
        ),
        (
            "<UnderlyingTopic>^orders/(eu</UnderlyingTopic>"
            "<DefaultPublishTarget>orders/eu</DefaultPublishTarget>",
            "bad regex topic",
        ),
        ("<DefaultPublishTarget>orders/eu</DefaultPublishTarget>", "not one of the queue's"),
    ],
)
def test_bad_targets_are_refused(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(CONFIG.format(body=body), base_dir=tmp_path)


def test_the_target_must_be_journaled(tmp_path: Path) -> None:
    xml = CONFIG.format(
        body="<UnderlyingTopic>^(orders/eu|other)$</UnderlyingTopic>"
        "<DefaultPublishTarget>other</DefaultPublishTarget>"
    )
    cfg = parse_config(xml, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"'other' .* is not recorded in the transaction log"):
        ServerThread(cfg, fsync="never").start()
