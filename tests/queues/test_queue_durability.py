"""Queue state across server restarts, with real server processes (``kill -9``): everything
acknowledged stays acknowledged, everything else is delivered again, in order, once. The
acks ask for a ``persisted`` ack (as the official HAClient's do), which the server sends only
once the journaled acknowledgement is durable."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from _queue_support import QUEUE_XML, publish_durably

from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration


class RawConsumer:
    """A queue consumer on a raw connection; acks ask for persisted acks (``s`` numbered)."""

    def __init__(self, server: ServerProcess, name: str) -> None:
        self.raw = RawClient(server.tcp_port)
        self.raw.logon(name)
        self.seq = 0
        self.got: list[tuple[str, int]] = []

    def subscribe(self, backlog: int) -> None:
        self.raw.send(
            {
                "c": "subscribe",
                "t": "work",
                "sub_id": "s",
                "cid": "s",
                "a": "processed",
                "o": f"max_backlog={backlog}",
            }
        )
        self.read_until(lambda h: h.get("c") == "ack" and h.get("cid") == "s")

    def read_until(self, pred: Any) -> dict[str, Any]:
        while True:
            hdr, body = self.raw.recv(10.0)
            if hdr.get("c") == "p":
                self.got.append((hdr["bm"], json.loads(body)["n"]))
            if pred(hdr):
                return hdr

    def take(self, count: int) -> list[tuple[str, int]]:
        """Read until ``count`` deliveries in all."""
        while len(self.got) < count:
            self.read_until(lambda h: h.get("c") == "p")
        return self.got[:count]

    def ack_durably(self, bookmarks: list[str]) -> None:
        """Ack one by one, then wait for the persisted ack covering the last one."""
        for bm in bookmarks:
            self.seq += 1
            self.raw.send(
                {
                    "c": "sow_delete",
                    "t": "work",
                    "cid": f"a{self.seq}",
                    "bookmark": bm,
                    "a": "persisted",
                    "s": self.seq,
                }
            )
        last = self.seq
        self.read_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= last)

    def close(self) -> None:
        self.raw.close()


def test_kill_9_twice_acknowledged_stays_acknowledged(tmp_path: Path) -> None:
    config = tmp_path / "queues.xml"
    config.write_text(QUEUE_XML)
    server = ServerProcess(data_dir=tmp_path / "data", config=config, name="Q")
    server.start()
    try:
        publish_durably(server, 0, 50)
        c = RawConsumer(server, "worker")
        c.subscribe(10)
        held = c.take(10)
        assert [n for _, n in held] == list(range(10))
        c.ack_durably([bm for bm, _ in held[:7]])  # 0..6 done; 7, 8, 9 leased, not acked
        c.take(17)  # the freed slots were filled with 10..16
        server.kill()  # kill -9
        c.close()

        server.start()
        c = RawConsumer(server, "worker")
        c.subscribe(10)
        again = c.take(10)
        # the unacknowledged leases come back first, oldest first; nothing acked comes back
        assert [n for _, n in again] == list(range(7, 17))
        c.ack_durably([bm for bm, _ in again])
        more = c.take(20)[10:]
        assert [n for _, n in more] == list(range(17, 27))
        c.ack_durably([bm for bm, _ in more[:5]])  # 17..21 done
        server.kill()
        c.close()

        server.start()
        c = RawConsumer(server, "worker")
        c.subscribe(10)
        rest: list[int] = []
        while len(rest) < 50 - 22:  # one at a time, each acked as it comes
            bm, n = c.take(len(rest) + 1)[len(rest)]
            rest.append(n)
            c.ack_durably([bm])
        assert rest == list(range(22, 50))  # each remaining message exactly once, in order
        c.close()
    finally:
        server.kill()
    # the ack point file names the queue
    saved = json.loads((tmp_path / "data" / "journal" / "Q.queues.ack").read_text())
    assert set(saved) == {"json/work"}


def test_graceful_restart_and_lost_ack_point(tmp_path: Path) -> None:
    config = tmp_path / "queues.xml"
    config.write_text(QUEUE_XML)
    server = ServerProcess(data_dir=tmp_path / "data", config=config, name="Q")
    server.start()
    try:
        publish_durably(server, 0, 12)
        c = RawConsumer(server, "w")
        c.subscribe(4)
        held = c.take(4)
        c.ack_durably([bm for bm, _ in held])
        c.close()
        assert server.stop() == 0
        ack_file = tmp_path / "data" / "journal" / "Q.queues.ack"
        point = json.loads(ack_file.read_text())["json/work"]
        assert point > 4  # past the four acknowledged messages
        for lost in (False, True):
            if lost:
                ack_file.unlink()  # recovery scans the whole journal instead
            server.start()
            c = RawConsumer(server, "w")
            c.subscribe(10)
            assert [n for _, n in c.take(8)] == list(range(4, 12))
            c.close()
            server.kill()
    finally:
        server.kill()


def _publish(server: ServerProcess, name: str, seq: int, n: int) -> None:
    """Publish ``{"n": n}`` as sequence ``seq`` of client ``name``; wait for its persisted ack."""
    with RawClient(server.tcp_port) as raw:
        raw.logon(name)
        raw.send(
            {"c": "p", "t": "orders", "a": "persisted", "s": seq}, json.dumps({"n": n}).encode()
        )
        raw.recv_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= seq)


def _ack_point(path: Path) -> int:
    try:
        return int(json.loads(path.read_text()).get("json/work", 0))
    except (OSError, ValueError):
        return 0


def test_kill_9_after_an_early_ack_was_applied(tmp_path: Path) -> None:
    """An ack that came before its message (a consumer's replayed ack after a restart, its
    message republished later) is applied when the message arrives; the ack point written
    between the two records must not let a restart re-enqueue the message (30-minute soak:
    10 messages redelivered after their acks were persisted in a 2-second server life)."""
    config = tmp_path / "queues.xml"
    config.write_text(QUEUE_XML)
    server = ServerProcess(data_dir=tmp_path / "data", config=config, name="Q")
    ack_file = tmp_path / "data" / "journal" / "Q.queues.ack"
    server.start()
    try:
        _publish(server, "pub", 1, 0)  # record 1
        c = RawConsumer(server, "w")
        c.subscribe(10)
        [(bm0, _)] = c.take(1)
        pid, seq, *rest = bm0.split("|")
        assert seq == "1"
        early = "|".join([pid, "2", *rest])  # the bookmark sequence 2 of 'pub' will have
        c.ack_durably([early])  # record 2: deferred, its message not journaled yet
        c.ack_durably([bm0])  # record 3: the queue is empty now
        deadline = time.monotonic() + 30.0
        while _ack_point(ack_file) < 2:  # written at most once a second
            assert time.monotonic() < deadline, "queues.ack not written"
            time.sleep(0.05)
        _publish(server, "pub", 2, 1)  # record 4: acknowledged already, never delivered
        _publish(server, "pub", 3, 2)  # the marker
        assert c.take(2)[1][1] == 2
        server.kill()  # kill -9
        c.close()

        server.start()
        c = RawConsumer(server, "w")
        c.subscribe(10)
        assert [n for _, n in c.take(1)] == [2]  # the marker only: message 1 stays acked
        c.close()
    finally:
        server.kill()
