"""A bookmark subscription that fails over before the application discarded anything resumes
from the subscription's own starting point (NOW, an explicit bookmark), not from EPOCH.

Measured before the fix: after a ``kill -9`` of the server, the 100 messages published before a
subscription at NOW were delivered as new (the official client does the same). Here every
message is accounted for, one by one: nothing older than the subscription reaches the handler,
nothing is lost, nothing is delivered twice to it (redeliveries of messages the store already
logged go to the duplicate handler).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from ampsclient import Client, Message
from ampsclient.ha import FixedDelayStrategy
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


def bookmark_of(uri: str, n: int) -> str:
    """The journal bookmark of message ``n`` of topic ``events``."""
    with Client("bookmark-reader") as reader:
        reader.connect(uri)
        reader.logon(5000)
        stream = reader.bookmark_subscribe("events", "0", timeout=5000)
        stream.timeout(5000)
        for message in stream:
            assert message is not None, f"message {n} never arrived"
            if message.get_command() == "publish" and json.loads(message.get_data())["n"] == n:
                return message.get_bookmark()
    raise AssertionError("unreachable")


class Recorder:
    """Records each n; never discards (the application has not processed anything yet)."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.dups: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.seen.append(json.loads(message.get_data())["n"])

    def duplicate(self, message: Message) -> None:
        with self.lock:
            self.dups.append(json.loads(message.get_data())["n"])


@pytest.mark.parametrize("start", ["now", "bookmark"])
def test_failover_before_any_discard_resumes_from_the_start_point(
    tmp_path: Path, start: str
) -> None:
    with ServerProcess(data_dir=tmp_path / "server") as server:
        publish(server.uri(), 0, 100)
        # NOW: the subscription starts after message 99; a bookmark: right after message 49
        bookmark, first = (
            (HAClient.Bookmarks.NOW, 100)
            if start == "now"
            else (
                bookmark_of(server.uri(), 49),
                50,
            )
        )
        rec = Recorder()
        with HAClient("sub", reconnect_delay_strategy=FixedDelayStrategy(50)) as sub:
            sub.set_duplicate_message_handler(rec.duplicate)
            sub.get_server_chooser().add(server.uri())
            sub.connect_and_logon()
            sub.bookmark_subscribe(rec, "events", bookmark, sub_id="s1")
            publish(server.uri(), 100, 110)
            wait_for(lambda: rec.seen[-1:] == [109], timeout=15.0, what="message 109")
            server.kill()
            server.start()
            wait_for(lambda: sub.logged_on, timeout=15.0, what="the reconnect")
            publish(server.uri(), 110, 120)
            wait_for(lambda: rec.seen[-1:] == [119], timeout=15.0, what="message 119")
        assert rec.seen == list(range(first, 120)), "from the start point, once each, in order"
        # what the server redelivered after the failover was already logged: duplicates only
        assert set(rec.dups) <= set(range(first, 110))
