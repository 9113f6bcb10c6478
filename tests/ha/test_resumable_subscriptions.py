"""HAClient bookmark subscriptions with a bookmark store: resume after a server kill -9 and
after a subscriber restart, with exact accounting of every message."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from ampsclient import Message
from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.recovery import FileRecoveryPointAdapter
from ampsclient.sync import HAClient
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


def publish(uri: str, start: int, stop: int) -> None:
    with HAClient(f"pub-{start}") as pub:
        pub.get_server_chooser().add(uri)
        pub.connect_and_logon()
        for n in range(start, stop):
            pub.publish("events", json.dumps({"n": n}))
        pub.publish_flush(10_000)


class Processor:
    """Processes messages: records each n, discards it in the bookmark store."""

    def __init__(self) -> None:
        self.client: HAClient | None = None
        self.seen: list[int] = []
        self.dups: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.seen.append(json.loads(message.get_data())["n"])
        assert self.client is not None
        self.client.discard(message)

    def duplicate(self, message: Message) -> None:
        with self.lock:
            self.dups.append(json.loads(message.get_data())["n"])


def test_resume_after_server_kill_9(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "server")
    with server:
        publish(server.uri(), 0, 100)
        proc = Processor()
        with HAClient("sub", reconnect_delay_strategy=FixedDelayStrategy(50)) as sub:
            proc.client = sub
            sub.set_duplicate_message_handler(proc.duplicate)
            sub.get_server_chooser().add(server.uri())
            sub.connect_and_logon()
            sub.bookmark_subscribe(proc, "events", HAClient.Bookmarks.MOST_RECENT, sub_id="s1")
            wait_for(lambda: len(proc.seen) == 100, timeout=15.0, what="the first 100")
            server.kill()
            server.start()
            wait_for(lambda: sub.logged_on, timeout=15.0, what="the reconnect")
            publish(server.uri(), 100, 150)
            wait_for(lambda: len(proc.seen) >= 150, timeout=15.0, what="the next 50")
        assert proc.seen == list(range(150)), "every message exactly once, in order"


def test_resume_after_subscriber_restart_with_file_adapter(tmp_path: Path) -> None:
    points = tmp_path / "points.jsonl"
    with ServerProcess(data_dir=tmp_path / "server") as server:
        publish(server.uri(), 0, 60)
        first = Processor()
        store = MemoryBookmarkStore(FileRecoveryPointAdapter(points))
        with HAClient("worker", bookmark_store=store) as sub:
            first.client = sub
            sub.get_server_chooser().add(server.uri())
            sub.connect_and_logon()
            sub.bookmark_subscribe(first, "events", HAClient.Bookmarks.MOST_RECENT, sub_id="w")
            wait_for(lambda: len(first.seen) == 60, timeout=15.0, what="60 messages")
        store.close()
        publish(server.uri(), 60, 90)
        second = Processor()
        store2 = MemoryBookmarkStore(FileRecoveryPointAdapter(points))
        assert store2.get_most_recent("w") != "0"
        with HAClient("worker", bookmark_store=store2) as sub:
            second.client = sub
            sub.get_server_chooser().add(server.uri())
            sub.connect_and_logon()
            sub.bookmark_subscribe(second, "events", HAClient.Bookmarks.MOST_RECENT, sub_id="w")
            wait_for(lambda: len(second.seen) >= 30, timeout=15.0, what="the 30 new messages")
        store2.close()
        assert first.seen == list(range(60))
        assert second.seen == list(range(60, 90))
