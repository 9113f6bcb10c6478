"""HAClient bookmark subscriptions with a bookmark store: resume after a server kill -9 and
after a subscriber restart, with exact accounting of every message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampsclient import Message
from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.recovery import FileRecoveryPointAdapter
from ampsclient.sync import HAClient
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import Inbox, wait_for

pytestmark = pytest.mark.integration


def publish(uri: str, start: int, stop: int) -> None:
    with HAClient(f"pub-{start}") as pub:
        pub.get_server_chooser().add(uri)
        pub.connect_and_logon()
        for n in range(start, stop):
            pub.publish("events", json.dumps({"n": n}))
        pub.publish_flush(10_000)


class Processor:
    """Processes messages: keeps each in an :class:`Inbox`, then discards it in the bookmark
    store; the duplicates the store diverts land in a second inbox."""

    def __init__(self) -> None:
        self.client: HAClient | None = None
        self.inbox = Inbox()
        self.duplicates = Inbox()

    def __call__(self, message: Message) -> None:
        self.inbox(message)
        assert self.client is not None
        self.client.discard(message)

    def wait_count(self, count: int, what: str) -> None:
        """Block until ``count`` messages were processed (15 s at most)."""
        try:
            self.inbox.wait(lambda box: len(box) >= count, timeout=15.0)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from None


def test_resume_after_server_kill_9(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "server")
    with server:
        publish(server.uri(), 0, 100)
        proc = Processor()
        with HAClient("sub", reconnect_delay_strategy=FixedDelayStrategy(50)) as sub:
            proc.client = sub
            sub.set_duplicate_message_handler(proc.duplicates)
            sub.get_server_chooser().add(server.uri())
            sub.connect_and_logon()
            sub.bookmark_subscribe(proc, "events", HAClient.Bookmarks.MOST_RECENT, sub_id="s1")
            proc.wait_count(100, "the first 100")
            server.kill()
            server.start()
            wait_for(lambda: sub.logged_on, timeout=15.0, what="the reconnect")
            publish(server.uri(), 100, 150)
            proc.wait_count(150, "the next 50")
        assert proc.inbox.ns() == list(range(150)), "every message exactly once, in order"


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
            first.wait_count(60, "60 messages")
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
            second.wait_count(30, "the 30 new messages")
        store2.close()
        assert first.inbox.ns() == list(range(60))
        assert second.inbox.ns() == list(range(60, 90))
