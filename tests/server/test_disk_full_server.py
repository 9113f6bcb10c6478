"""Issue #32, a full disk under the server's own files, with a real server process and a real
size-limited tmpfs the test mounts (skipped with the reason where it may not): the SOW file,
the queues' metadata files. What cannot be stored is refused (no persisted ack) and never
delivered, the condition is reported once in the log and in the admin tree
(``/amps/instance/storage``), nothing is corrupted, and work resumes by itself when space
returns; every message acknowledged before, during and after is delivered exactly once.
(The transaction log on a full disk: ``tests/txlog/test_journal_disk_full.py``.)"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, HAClient
from ampsclient.protocol.message import Message
from ampsclient_server_stub.harness import ServerProcess, free_port
from ampsclient_server_stub.testing import wait_for
from tests.admin._support import get_json
from tests.stores.test_disk_full import fill, small_filesystem

pytestmark = pytest.mark.integration

PAD = "x" * 1000


class Inbox:
    """The ``i`` of every message delivered, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[int] = []

    def __call__(self, message: Any) -> None:
        with self.lock:
            self.seen.append(json.loads(message.get_data())["i"])


class Publisher:
    """An ``HAClient`` publishing ``{"id", "i", "pad"}``; the failed-write handler records
    the messages the server refused."""

    def __init__(self, uri: str, topic: str) -> None:
        self.topic = topic
        self.refused: list[int] = []
        self.reasons: set[str] = set()
        self.client = HAClient("disk-full-pub")
        self.client.get_server_chooser().add(uri)
        self.client.set_failed_write_handler(self._refused)
        self.client.connect_and_logon()

    def _refused(self, message: Message, reason: str) -> None:
        self.refused.append(json.loads(message.get_data())["i"])
        self.reasons.add(reason)

    def publish(self, numbers: range) -> None:
        for i in numbers:
            self.client.publish(self.topic, json.dumps({"id": i, "i": i, "pad": PAD}))
        self.client.publish_flush(30_000)  # every message acked or refused

    def close(self) -> None:
        self.client.close()


def server_config(tmp: Path, admin: int, sow_extra: str = "") -> Path:
    conf = tmp / "amps.xml"
    conf.write_text(f"""<AMPSConfig><Name>disk-full</Name>
  <Admin><InetAddr>127.0.0.1:{admin}</InetAddr></Admin>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    </Transport></Transports>
  <TransactionLog><JournalDirectory>{tmp / "journal"}</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>{sow_extra}</SOW></AMPSConfig>""")
    return conf


def lines(server: ServerProcess, text: str) -> int:
    return sum(text in line for line in list(server.stderr_lines))


def storage(admin: int) -> dict[str, Any]:
    """``/amps/instance/storage``, its conditions keyed by store."""
    tree: dict[str, Any] = get_json(admin, "/amps/instance/storage")
    found = tree["conditions"]
    if isinstance(found, list):  # AMPS' form: entries with an id
        tree["conditions"] = {c["id"]: c for c in found}
    return tree


def conditions(admin: int) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = storage(admin)["conditions"]
    return found


def replay(uri: str, topic: str) -> list[int]:
    """The ``i`` of every record of ``topic`` in the transaction log (an EPOCH replay)."""
    inbox = Inbox()
    with Client("disk-full-replay") as client:
        client.connect(uri)
        client.logon(5000)
        marker_seen = threading.Event()

        def handler(message: Any) -> None:
            if message.get_command() == "oof" or not message.get_data():
                return
            doc = json.loads(message.get_data())
            if doc.get("marker"):
                marker_seen.set()
            else:
                inbox(message)

        client.bookmark_subscribe(handler, topic, "0")
        client.publish(topic, json.dumps({"id": -1, "i": -1, "marker": True}))
        assert marker_seen.wait(30), "the replay did not reach the marker"
    return inbox.seen


def sow_ids(uri: str, topic: str) -> list[int]:
    with Client("disk-full-sow") as client:
        client.connect(uri)
        client.logon(5000)
        found = client.sow(topic, timeout=10_000)
        docs = [json.loads(m.get_data()) for m in found if m.get_command() == "sow"]
    return sorted(d["i"] for d in docs if d.get("i", -1) >= 0)


def test_a_full_sow_disk_refuses_sow_publishes_reports_once_and_resumes(tmp_path: Path) -> None:
    """The SOW file's filesystem fills while a publisher goes on: each publish that cannot be
    stored is refused (``sow store failed``, no persisted ack) and journaled nowhere; the log
    says it once, ``/amps/instance/storage`` shows the condition while it lasts; once space
    returns publishing goes on. Every acknowledged message reached the live subscriber, the
    transaction log and the SOW exactly once; the refused ones none of them; SQLite's
    integrity check passes and a restart finds the same SOW."""
    admin = free_port()
    with small_filesystem(tmp_path / "sowfs", "16m") as fs:
        conf = server_config(
            tmp_path,
            admin,
            f"""<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
              <FileName>{fs / "orders.sow"}</FileName></Topic>""",
        )
        server = ServerProcess(data_dir=tmp_path / "data", config=conf).start()
        try:
            live = Inbox()
            with Client("disk-full-sub") as sub:
                sub.connect(server.uri())
                sub.logon(5000)
                sub.subscribe(live, "orders")
                pub = Publisher(server.uri(), "orders")
                try:
                    pub.publish(range(300))  # before
                    assert pub.refused == []
                    filler = fill(fs)
                    pub.publish(range(300, 900))  # during
                    assert pub.refused, "nothing was refused: the disk did not fill"
                    assert pub.reasons == {"sow store failed"}
                    during = conditions(admin)
                    assert during["sow/orders/json"]["disk_full"] is True, during
                    assert during["sow/orders/json"]["failed_writes"] >= len(pub.refused)
                    filler.unlink()  # space returns
                    pub.publish(range(900, 1200))  # after
                finally:
                    pub.close()
                acked = [i for i in range(1200) if i not in set(pub.refused)]
                assert all(i in acked for i in range(900, 1200))  # it resumed by itself
                wait_for(lambda: len(live.seen) >= len(acked), what="the live deliveries")
                marker = Inbox()
                sub.subscribe(marker, "orders", filter="/i = -2")
                sub.publish("orders", json.dumps({"id": -2, "i": -2}))
                wait_for(lambda: marker.seen == [-2], what="the marker")
                assert live.seen[: len(acked)] == acked  # once each, in order, none refused
                assert live.seen[len(acked) :] == [-2]
            assert replay(server.uri(), "orders") == [*acked, -2]
            assert sow_ids(server.uri(), "orders") == acked
            after = storage(admin)
            assert after["conditions"] == {} and after["conditions_ended"] >= 1
            ended = after["conditions_ended"]
            wait_for(
                lambda: lines(server, "storage: sow/orders/json is written again") == ended,
                what="a line for every condition that ended",
            )
            assert lines(server, "storage: sow/orders/json cannot be written") == ended
            assert lines(server, "Traceback") == 0
            server.stop()
            with contextlib.closing(sqlite3.connect(fs / "orders.sow")) as db:
                assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            try:
                server.start()
            except Exception:
                print("".join(server.stderr_lines[-40:]))
                raise
            assert sow_ids(server.uri(), "orders") == acked
        finally:
            server.stop()
