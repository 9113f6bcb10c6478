"""A deferred queue acknowledgement (one that arrived before its message) is kept for
``DeferredAckExpiration`` (AMPS configuration reference, Queue: "how long to remember an ack for
a message that is not (yet) in the queue"), then forgotten: a message that comes later is
delivered. A restart rebuilds a deferred acknowledgement from its journal record, with the
expiration counted from that record; real server processes, ``kill -9``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from _queue_support import QUEUE_XML

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

EXPIRATION = 0.5
"""``DeferredAckExpiration`` of the queue, in seconds."""

CONFIG = QUEUE_XML.replace(
    "<MaxPerSubscriptionBacklog>",
    f"<DeferredAckExpiration>{int(EXPIRATION * 1000)}ms</DeferredAckExpiration>"
    "<MaxPerSubscriptionBacklog>",
)


class Consumer:
    """A queue consumer on a raw connection (no acknowledgement of what it receives)."""

    def __init__(self, server: ServerProcess) -> None:
        self.raw = RawClient(server.tcp_port)
        self.raw.logon("w")
        self.got: list[int] = []

    def subscribe(self) -> None:
        self.raw.send(
            {
                "c": "subscribe",
                "t": "work",
                "sub_id": "s",
                "cid": "s",
                "a": "processed",
                "o": "max_backlog=10",
            }
        )
        self.raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "s")

    def take_header(self) -> dict[str, Any]:
        """The header of the next delivery (also counted in :attr:`got`)."""
        while True:
            hdr, body = self.raw.recv(10.0)
            if hdr.get("c") == "p":
                self.got.append(json.loads(body)["n"])
                return hdr

    def take(self, count: int) -> list[int]:
        """The ``n`` of the first ``count`` deliveries."""
        while len(self.got) < count:
            hdr, body = self.raw.recv(10.0)
            if hdr.get("c") == "p":
                self.got.append(json.loads(body)["n"])
        return self.got[:count]

    def ack_early(self, bookmark: str) -> float:
        """Acknowledge ``bookmark`` (not published yet) durably; when it was acknowledged."""
        sent = time.time()
        self.raw.send(
            {"c": "sow_delete", "t": "work", "cid": "a", "bookmark": bookmark, "a": "persisted",
             "s": 1}
        )  # fmt: skip
        self.raw.recv_until(lambda h: h.get("a") == "persisted")
        return sent

    def close(self) -> None:
        self.raw.close()


def _publish(server: ServerProcess, seq: int, n: int) -> None:
    """``{"n": n}`` as sequence ``seq`` of publisher ``pub``, persisted."""
    with RawClient(server.tcp_port) as raw:
        raw.logon("pub")
        raw.send(
            {"c": "p", "t": "orders", "a": "persisted", "s": seq}, json.dumps({"n": n}).encode()
        )
        raw.recv_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= seq)


def _past(moment: float) -> None:
    """Wait until the wall clock is past ``moment`` (an expiration, not a synchronisation)."""
    while time.time() <= moment:
        time.sleep(0.05)


def _server(tmp_path: Path) -> ServerProcess:
    config = tmp_path / "queues.xml"
    config.write_text(CONFIG)
    return ServerProcess(data_dir=tmp_path / "data", config=config, name="Q")


EARLY = f"{publisher_id_for('pub')}|1|"
"""The bookmark the first publish of ``pub`` will have."""


def test_deferred_ack_expired_before_its_message_came_then_kill_9(tmp_path: Path) -> None:
    """The message comes after the acknowledgement expired: it is delivered, and after a
    ``kill -9`` the replay (ack record, then message record past its expiration) delivers it
    again, not acknowledged. Before: the expired acknowledgement took the message out, live
    and at recovery (the consumer saw the markers only)."""
    server = _server(tmp_path)
    server.start()
    try:
        c = Consumer(server)
        c.subscribe()
        acked = c.ack_early(EARLY)  # journaled: deferred until acked + EXPIRATION
        _past(acked + EXPIRATION + 0.2)
        _publish(server, 1, 0)  # the message: after the acknowledgement expired
        _publish(server, 2, 1)  # two markers
        _publish(server, 3, 2)
        assert c.take(2) == [0, 1]  # (before: [1, 2])
        server.kill()  # kill -9
        c.close()

        server.start()
        c = Consumer(server)
        c.subscribe()
        assert c.take(3) == [0, 1, 2]  # none was acknowledged
        c.close()
    finally:
        server.kill()


def test_deferred_ack_past_its_expiration_at_restart_is_forgotten(tmp_path: Path) -> None:
    """The message never came before a ``kill -9``; at restart the acknowledgement rebuilt
    from its record is past its expiration: forgotten, so the message published after the
    restart is delivered. Before: the recovery kept it with an expiration in the past, and
    nothing expired it (no timer was due), so it took the message out."""
    server = _server(tmp_path)
    server.start()
    try:
        c = Consumer(server)
        acked = c.ack_early(EARLY)
        c.close()
        server.kill()  # kill -9: the acknowledgement's record is in the journal

        _past(acked + EXPIRATION + 0.2)
        server.start()
        c = Consumer(server)
        c.subscribe()
        _publish(server, 1, 0)  # the message, long after its acknowledgement expired
        _publish(server, 2, 1)  # two markers
        _publish(server, 3, 2)
        assert c.take(2) == [0, 1]  # (before: [1, 2])
        c.close()
    finally:
        server.kill()


def _ack_point(path: Path) -> int:
    try:
        return int(json.loads(path.read_text()).get("json/work", 0))
    except (OSError, ValueError):
        return 0


def test_deferred_ack_past_its_expiration_does_not_hold_the_ack_point(tmp_path: Path) -> None:
    """Its message never comes: a deferred acknowledgement rebuilt past its expiration is
    dropped by the recovery, so ``queues.ack`` moves past its record (journal record 1) once
    the queue's other messages are acknowledged. Before: kept with an expiration in the past
    until a timer happened to sweep it, it held the point (and the journal file) at record 1."""
    server = _server(tmp_path)
    ack_file = tmp_path / "data" / "journal" / "Q.queues.ack"
    server.start()
    try:
        c = Consumer(server)
        acked = c.ack_early(EARLY)  # record 1; 'pub' never publishes
        c.close()
        server.kill()  # kill -9

        _past(acked + EXPIRATION + 0.2)
        server.start()
        with RawClient(server.tcp_port) as raw:  # record 2: another publisher's message
            raw.logon("other")
            raw.send({"c": "p", "t": "orders", "a": "persisted", "s": 1}, b'{"n": 5}')
            raw.recv_until(lambda h: h.get("a") == "persisted")
        c = Consumer(server)
        c.subscribe()
        hdr = c.take_header()
        c.raw.send(
            {"c": "sow_delete", "t": "work", "cid": "b", "bookmark": hdr["bm"], "a": "persisted",
             "s": 2}
        )  # fmt: skip
        c.raw.recv_until(lambda h: h.get("a") == "persisted")  # record 3: the queue is empty
        deadline = time.monotonic() + 20.0
        while _ack_point(ack_file) <= 1:  # written at most once a second
            assert time.monotonic() < deadline, f"queues.ack held at {_ack_point(ack_file)}"
            time.sleep(0.05)
        c.close()
    finally:
        server.kill()
