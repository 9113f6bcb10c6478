"""``TargetQueueDepth`` over real sockets: only that many messages are active (delivered,
shown by a ``sow`` query, counted in ``queue_depth``); the others wait in publication order
(``inactive_message_count``) and become active as active ones are acknowledged; an
acknowledgement of a waiting message takes it out before it is ever delivered; a restart
keeps all of it; values below the documented minimum (1000) are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _queue_support import Consumer, bodies, queue_config, stats

from ampsclient.protocol.framing import tcp_frame
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

TOTAL = 1200
WORK = QueueConfig(
    name="work", message_type="json", target_queue_depth=1000, max_per_subscription_backlog=100
)


def run(tmp_path: Path) -> ServerThread:
    return ServerThread(queue_config(tmp_path, WORK), fsync="never").start()


def publish_all(server: ServerThread) -> None:
    with RawClient(server.tcp_port) as raw:
        raw.logon("publisher")
        raw.send_raw(
            b"".join(
                tcp_frame(
                    encode_header({"c": "p", "t": "work", "s": n, "a": "persisted"})
                    + json.dumps({"n": n}).encode()
                )
                for n in range(1, TOTAL + 1)
            )
        )
        raw.recv_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= TOTAL, 30)


def sow_count(server: ServerThread) -> int:
    with RawClient(server.tcp_port) as raw:
        raw.logon("query")
        raw.send({"c": "sow", "t": "work", "query_id": "q", "a": "completed"})
        count = 0
        while True:
            hdr, _ = raw.recv(10.0)
            if hdr.get("c") == "sow":
                count += int(hdr.get("bs", 1))
            if hdr.get("c") == "group_end":
                return count


def test_only_the_target_depth_is_active_and_the_rest_follows_in_order(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        publish_all(server)
        s = stats(server)
        assert (s["queue_depth"], s["inactive_message_count"]) == (1000, TOTAL - 1000)
        assert s["target_queue_depth"] == 1000
        assert sow_count(server) == 1000  # waiting messages are not shown
        replay = Consumer(server)  # the bookmarks of all, from a replay of the topic
        replay.subscribe("work", sub_id="r", bm="0")
        marks = {json.loads(b)["n"]: h["bm"] for h, b in replay.sync()}
        assert len(marks) == TOTAL
        consumer = Consumer(server)
        consumer.ack("work", marks[TOTAL], a="processed")  # waiting: out before delivery
        assert stats(server)["inactive_message_count"] == TOTAL - 1000 - 1
        consumer.subscribe("work", o="max_backlog=100")
        delivered: list[int] = []
        while True:
            consumer.sync()
            got = consumer.deliveries[len(delivered) :]  # (some came in with the ack's reply)
            if not got:
                break
            delivered += [d["n"] for d in bodies(got)]
            consumer.ack("work", ",".join(h["bm"] for h, _ in got), a="processed")
            if len(delivered) == 100:
                s = stats(server)  # 100 acked: 100 moved up, 100 leased again, 1000 active
                active = s["queue_depth"] + s["backlog"]  # available + leased
                assert (active, s["backlog"], s["inactive_message_count"]) == (1000, 100, 99)
        assert delivered == list(range(1, TOTAL))  # publication order, the waiting one never
    finally:
        server.stop()


def test_waiting_messages_survive_a_restart(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        publish_all(server)
    finally:
        server.stop()
    server = run(tmp_path)
    try:
        s = stats(server)
        assert (s["queue_depth"], s["inactive_message_count"]) == (1000, TOTAL - 1000)
        consumer = Consumer(server)
        consumer.subscribe("work", o="max_backlog=1")
        ((_hdr, body),) = consumer.sync()
        assert json.loads(body) == {"n": 1}
    finally:
        server.stop()


@pytest.mark.parametrize("value", ["999", "0", "ten"])
def test_below_the_minimum_is_refused(tmp_path: Path, value: str) -> None:
    xml = f"""<AMPSConfig><Name>t</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory></TransactionLog>
<SOW><Queue><Name>q</Name><MessageType>json</MessageType>
  <TargetQueueDepth>{value}</TargetQueueDepth></Queue></SOW></AMPSConfig>"""
    with pytest.raises(ConfigError, match="<TargetQueueDepth> must be an integer >= 1000"):
        parse_config(xml, base_dir=tmp_path)
