"""The official AMPS Python client (a black-box peer) with the queue elements built last: it
publishes to a regex queue's name (re-routed to the DefaultPublishTarget) and to a matching
topic, consumes the queue with auto-ack, and queries a view over the queue."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import wait_for

AMPS: Any = pytest.importorskip("AMPS")

pytestmark = [pytest.mark.interop, pytest.mark.integration]

CONFIG = """<AMPSConfig><Name>o</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>^orders/</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>
  <Queue><Name>orders_q</Name><MessageType>json</MessageType>
    <UnderlyingTopic>^orders/(eu|us|direct)$</UnderlyingTopic>
    <DefaultPublishTarget>orders/direct</DefaultPublishTarget>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <View><Name>orders_by_region</Name><MessageType>json</MessageType>
    <UnderlyingTopic>orders_q</UnderlyingTopic>
    <Projection><Field>/region</Field><Field>COUNT(/n) AS /waiting</Field></Projection>
    <Grouping><Field>/region</Field></Grouping></View>
</SOW></AMPSConfig>"""


def client(uri: str, name: str) -> Any:
    c = AMPS.Client(name)
    c.connect(uri)
    c.logon()
    return c


def test_official_client_publishes_to_the_queue_name_queries_the_view_and_consumes(
    tmp_path: Path,
) -> None:
    server = ServerThread(parse_config(CONFIG, base_dir=tmp_path), fsync="never").start()
    uri = server.uri("tcp", "json")
    publisher = client(uri, "official-pub")
    consumer = client(uri, "official-consumer")
    try:
        publisher.publish("orders/eu", json.dumps({"n": 1, "region": "eu"}))
        publisher.publish("orders_q", json.dumps({"n": 2, "region": "direct"}))  # re-routed
        publisher.publish("orders/asia", json.dumps({"n": 3, "region": "asia"}))  # not queued
        publisher.publish_flush()
        regions = {}
        for message in publisher.sow("orders_by_region"):
            if message.get_command() == "sow":
                record = json.loads(message.get_data())
                regions[record["region"]] = record["waiting"]
        assert regions == {"eu": 1, "direct": 1}  # nothing leased by the query

        seen: list[tuple[int, str]] = []
        lock = threading.Lock()

        def on_message(message: Any) -> None:
            if message.get_command() in ("p", "publish"):
                with lock:
                    seen.append((json.loads(message.get_data())["n"], message.get_topic()))

        consumer.set_auto_ack(True)
        command = AMPS.Command("subscribe").set_topic("orders_q").set_options("max_backlog=10")
        consumer.execute_async(command, on_message)

        def acked() -> bool:
            stats = server.call(lambda: server.broker.queues.statistics()["orders_q"])  # type: ignore[union-attr]
            return bool(stats["acked"] == 2 and stats["queue_depth"] == 0)

        wait_for(acked, 20, "both messages delivered and auto-acked")
        with lock:
            assert sorted(seen) == [(1, "orders_q"), (2, "orders_q")]
    finally:
        consumer.disconnect()
        publisher.disconnect()
        server.stop()
