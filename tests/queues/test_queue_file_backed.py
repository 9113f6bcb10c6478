"""``FileBackedMetadata`` with real server processes: the queue's live set is kept in a
``.queue.cache`` file in the journal directory and its message bodies in the journal, not in
memory. Acknowledged stays acknowledged and the rest comes back once, in order, across a
graceful restart and ``kill -9``, with the file, without it (deleted: rebuilt from the
transaction log at the ``queues.ack`` point), with a damaged one and with one of the first
format; the server's resident memory does not grow with the bodies of the queued messages."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
import test_queue_target_depth as depth
from _queue_support import QUEUE_XML, Consumer, publish_durably, queue_config, stats
from test_file_backed_transfers import first_format
from test_queue_durability import RawConsumer
from test_queue_target_depth_memory import publish, rss

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

XML = QUEUE_XML.replace(
    "<MaxPerSubscriptionBacklog>",
    "<FileBackedMetadata>enabled</FileBackedMetadata><MaxPerSubscriptionBacklog>",
)
CACHE = "Q.work.json.queue.cache"


def server_at(tmp_path: Path, xml: str = XML, name: str = "Q") -> ServerProcess:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / f"{name}.xml"
    config.write_text(xml)
    return ServerProcess(data_dir=tmp_path / "data", config=config, name=name, log_level="INFO")


def consume_rest(server: ServerProcess, expected: list[int]) -> None:
    """The queue delivers exactly ``expected``, in order, each acked as it comes."""
    c = RawConsumer(server, "worker-rest")
    c.subscribe(10)
    rest: list[int] = []
    while len(rest) < len(expected):
        bm, n = c.take(len(rest) + 1)[len(rest)]
        rest.append(n)
        c.ack_durably([bm])
    assert rest == expected
    c.raw.send({"c": "flush", "cid": "end", "a": "processed"})  # the marker: nothing more
    c.read_until(lambda h: h.get("c") == "ack" and h.get("cid") == "end")
    assert len(c.got) == len(expected)
    c.close()


def test_restart_with_the_file_and_after_kill_9(tmp_path: Path) -> None:
    server = server_at(tmp_path)
    cache = tmp_path / "data" / "journal" / CACHE
    server.start()
    try:
        publish_durably(server, 0, 50)
        c = RawConsumer(server, "worker")
        c.subscribe(10)
        held = c.take(10)
        c.ack_durably([bm for bm, _ in held[:7]])  # 0..6 done; 7, 8, 9 leased, not acked
        c.close()
        wait_for(cache.exists, timeout=10, what="the queue.cache file")
        server.stop()  # graceful: the file is written with the final state
        server.start()
        assert any(f"from {CACHE}" in line for line in server.stderr_lines)
        c = RawConsumer(server, "worker")
        c.subscribe(10)
        again = c.take(10)
        assert [n for _, n in again] == list(range(7, 17))
        c.ack_durably([bm for bm, _ in again[:5]])  # 7..11 done
        server.kill()  # kill -9: the file may be older than the last acks; the journal has them
        c.close()
        server.start()
        consume_rest(server, list(range(12, 50)))
    finally:
        server.kill()


def test_deleted_or_damaged_file_is_rebuilt_from_the_journal(tmp_path: Path) -> None:
    server = server_at(tmp_path)
    cache = tmp_path / "data" / "journal" / CACHE
    server.start()
    try:
        publish_durably(server, 0, 30)
        c = RawConsumer(server, "worker")
        c.subscribe(10)
        c.ack_durably([bm for bm, _ in c.take(10)[:4]])  # 0..3 done
        c.close()
        server.stop()
        assert cache.exists()
        cache.unlink()
        server.start()
        assert any("rebuilt from the transaction log" in line for line in server.stderr_lines)
        server.stop()
        assert cache.exists()  # written again (at the latest by the graceful stop)
        cache.write_bytes(cache.read_bytes()[:-1] + b"\0")  # damaged: CRC mismatch
        server.start()
        assert any("damaged" in line for line in server.stderr_lines)
        consume_rest(server, list(range(4, 30)))
    finally:
        server.kill()


def test_a_file_of_the_first_format_is_still_read(tmp_path: Path) -> None:
    """A queue that is not replicated has no ownership transfers: a file written before
    they were kept (``AQC1``) says all there is, and a restart uses it."""
    server = server_at(tmp_path)
    cache = tmp_path / "data" / "journal" / CACHE
    server.start()
    try:
        publish_durably(server, 0, 20)
        c = RawConsumer(server, "worker")
        c.subscribe(10)
        c.ack_durably([bm for bm, _ in c.take(10)[:6]])  # 0..5 done
        c.close()
        server.stop()
        first_format(cache)
        server.start()
        assert any(f"14 message(s) from {CACHE}" in line for line in server.stderr_lines)
        consume_rest(server, list(range(6, 20)))
    finally:
        server.kill()


def test_queued_bodies_stay_in_the_journal_not_in_memory(tmp_path: Path) -> None:
    count, body = 6000, 8192
    grown: dict[str, int] = {}
    for name, xml in (("plain", QUEUE_XML), ("filed", XML)):
        server = server_at(
            tmp_path / name,
            xml.replace("<MaxPerSubscriptionBacklog>10<", "<MaxPerSubscriptionBacklog>100<"),
            name,
        )
        server.start()
        try:
            assert server.pid is not None
            publish(server.tcp_port, 0, 200)  # warm up
            before = rss(server.pid)
            publish(server.tcp_port, 200, count)
            grown[name] = rss(server.pid) - before
            if name == "filed":  # all there, read back whole, in order
                with RawClient(server.tcp_port) as raw:
                    raw.logon("consumer")
                    raw.send({"c": "subscribe", "t": "work", "sub_id": "s", "o": "max_backlog=100"})
                    seen: list[int] = []
                    while len(seen) < 200 + count:
                        hdr, data = raw.recv(30.0)
                        if hdr.get("c") != "p":
                            continue
                        doc = json.loads(data)
                        assert len(doc["pad"]) == body
                        seen.append(doc["n"])
                        raw.send({"c": "sow_delete", "t": "work", "bm": hdr["bm"]})
                    assert seen == list(range(200 + count))
        finally:
            server.kill()
    payload = count * body
    assert grown["plain"] > payload // 2, grown  # in memory: at least the bodies' half
    assert grown["filed"] < payload // 4, grown  # file-backed: positions only


def test_waiting_messages_of_a_target_depth_queue_are_in_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    work = dataclasses.replace(depth.WORK, file_backed_metadata=True)

    def run() -> ServerThread:
        return ServerThread(queue_config(tmp_path, work), fsync="never").start()

    server = run()
    try:
        depth.publish_all(server)  # 1200: 1000 active, 200 waiting
    finally:
        server.stop()
    files = list((tmp_path / "journal").glob("*.queue.cache"))
    assert len(files) == 1
    with caplog.at_level(logging.INFO, logger="ampsclient_server_stub.queues.metadata_file"):
        server = run()
    try:
        assert f"{depth.TOTAL} message(s) from {files[0].name}" in caplog.text
        s = stats(server)
        assert (s["queue_depth"], s["inactive_message_count"]) == (1000, depth.TOTAL - 1000)
        consumer = Consumer(server)
        consumer.subscribe("work", o="max_backlog=100")
        seen: list[int] = []
        while len(seen) < depth.TOTAL:
            got = consumer.wait_deliveries(len(seen) + 1)[len(seen) :]
            seen += [json.loads(body)["n"] for _h, body in got]
            consumer.ack("work", ",".join(h["bm"] for h, _ in got))
        assert seen == list(range(1, depth.TOTAL + 1))
        assert consumer.sync() == []
    finally:
        server.stop()
