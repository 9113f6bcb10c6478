"""``TargetQueueDepth`` keeps the waiting messages in the transaction log, as AMPS does: the
server holds only their journal positions, so its memory does not grow with the bodies of
the waiting messages (a real server process, its resident set measured in ``/proc``), and
they are read back, whole and in order, when they become active."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _queue_support import QUEUE_XML, stats
from test_queue_target_depth import run

from ampsclient.protocol.framing import tcp_frame
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.queues.depth import Waiting
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

TARGET = 1000
WAITING = 6000
BODY = 8192  # bytes of padding per message: the waiting bodies total ~49 MB

XML = QUEUE_XML.replace(
    "<MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>",
    f"<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>"
    f"<TargetQueueDepth>{TARGET}</TargetQueueDepth>",
)


def rss(pid: int) -> int:
    """The resident set of process ``pid``, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def publish(port: int, first: int, count: int, topic: str = "orders") -> None:
    pad = "x" * BODY
    with RawClient(port) as raw:
        raw.logon(f"publisher-{first}")
        end = first + count
        for start in range(first, end, 500):
            raw.send_raw(
                b"".join(
                    tcp_frame(
                        encode_header({"c": "p", "t": topic, "s": n + 1, "a": "persisted"})
                        + json.dumps({"n": n, "pad": pad}).encode()
                    )
                    for n in range(start, min(start + 500, end))
                )
            )
        raw.recv_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= end, 60)


def test_waiting_bodies_stay_in_the_journal_not_in_memory(tmp_path: Path) -> None:
    config = tmp_path / "queues.xml"
    config.write_text(XML)
    server = ServerProcess(data_dir=tmp_path / "data", config=config, name="D")
    server.start()
    try:
        assert server.pid is not None
        publish(server.tcp_port, 0, TARGET)  # the active ones (held in memory, as in AMPS)
        publish(server.tcp_port, TARGET, 200)  # warm up the paths of waiting messages
        before = rss(server.pid)
        publish(server.tcp_port, TARGET + 200, WAITING)
        grown = rss(server.pid) - before
        payload = WAITING * BODY
        # kept whole, the bodies alone would add `payload` bytes; positions add ~1/40 of it
        assert grown < payload // 4, (grown, payload)

        # they are all there, and come back whole, in publication order, as slots free up
        with RawClient(server.tcp_port) as raw:
            raw.logon("consumer")
            raw.send({"c": "subscribe", "t": "work", "sub_id": "s", "o": "max_backlog=100"})
            seen: list[int] = []
            while len(seen) < TARGET + 200 + WAITING:
                hdr, body = raw.recv(30.0)
                if hdr.get("c") != "p":
                    continue
                doc = json.loads(body)
                assert len(doc["pad"]) == BODY
                seen.append(doc["n"])
                raw.send({"c": "sow_delete", "t": "work", "bm": hdr["bm"]})
            assert seen == list(range(TARGET + 200 + WAITING))
    finally:
        server.kill()


def test_a_waiting_message_is_held_as_its_journal_position(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        with RawClient(server.tcp_port) as raw:
            raw.logon("publisher")
            raw.send_raw(
                b"".join(
                    tcp_frame(
                        encode_header({"c": "p", "t": "work", "s": n, "a": "persisted"})
                        + json.dumps({"n": n, "x": "y" * 100}).encode()
                    )
                    for n in range(1, 1101)
                )
            )
            raw.recv_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= 1100, 30)
        assert stats(server)["inactive_message_count"] == 100
        held = server.call(lambda: list(server.broker.queues.inactive["work"].waiting.values()))  # type: ignore[union-attr]
        assert len(held) == 100
        assert not any(isinstance(h, Waiting) for h in held)  # no body kept
        assert all(isinstance(h, int) for h in held)
        assert held == sorted(held)  # journal order = publication order
    finally:
        server.stop()
