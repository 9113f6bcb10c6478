"""A ``live`` bookmark subscription resumes from the server's last persisted point (seed 004),
not from the last message the application discarded.

Two instances: A replicates to B (sync). The subscriber (``live``) and a plain publisher use A.
A batch (0-9) reaches B, so A sends the subscription a persisted ack for it. Then the link is
cut and a second batch (10-19) is delivered live and discarded, but never reaches B, so A's
persisted acks stay at message 9 (a persisted ack covers what every sync destination holds,
as for a publisher). A is killed (``kill -9``): the clients fail over to B, which lacks 10-19.
The publisher is a plain client: nothing republishes 10-19, and its next publishes on B get
the journal sequences 10-19 had, hence the same bookmarks. Resuming from the last discarded
bookmark would skip (or divert as duplicates) messages B persisted; resuming from the
persisted point delivers every one of them.

Checked message by message: after the failover the application sees exactly what B holds
after message 9, once, in order; nothing goes to the duplicate handler. Once with the HA
client in-process (memory store), once with a subscriber process that is itself killed and
restarted on a file bookmark store.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ampsclient import Client, Message
from ampsclient.ha import FixedDelayStrategy
from ampsclient.ha.client import AsyncHAClient
from ampsclient.stores.bookmark import MMapBookmarkStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster, ClusterNode
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

TOPIC = "live-events"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cluster, ClusterNode, ClusterNode]]:
    cluster = Cluster(tmp_path / "cluster")
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.replicate(a, b, sync=True)
    cluster.replicate(b, a, sync=False)  # the way back the connection-time validation asks
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        yield cluster, a, b


def publish(client: Client, start: int, stop: int) -> None:
    """Plain publishes; no ``flush`` (a flush command would force a group commit)."""
    for n in range(start, stop):
        client.publish(TOPIC, json.dumps({"n": n}))


def plain_publisher(uri: str) -> Client:
    pub = Client("live-publisher")  # the same name each time: the same publisher id
    pub.connect(uri)
    pub.logon(5000)
    return pub


def journal_contents(uri: str) -> list[tuple[int, str]]:
    """``(n, bookmark)`` of every message of the topic the server holds (replayed from EPOCH,
    up to a marker published afterwards)."""
    out: list[tuple[int, str]] = []
    with Client("live-reader") as reader, Client("live-marker") as marker:
        reader.connect(uri)
        reader.logon(5000)
        marker.connect(uri)
        marker.logon(5000)
        stream = reader.bookmark_subscribe(TOPIC, "0", timeout=5000)
        marker.publish(TOPIC, json.dumps({"n": -1}))
        stream.timeout(10_000)
        for message in stream:
            assert message is not None, "the marker never arrived"
            if message.get_command() != "publish":
                continue
            n = json.loads(message.get_data())["n"]
            if n == -1:
                return out
            out.append((n, str(message.get_bookmark())))
    raise AssertionError("unreachable")


class App:
    """Processes (records) and discards every message at once; records duplicates apart."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []
        self.dups: list[int] = []
        self.lock = threading.Lock()
        self.client: HAClient | None = None

    def __call__(self, message: Message) -> None:
        n = json.loads(message.get_data())["n"]
        if n >= 0:  # not a marker of journal_contents
            with self.lock:
                self.seen.append((n, str(message.get_bookmark())))
        assert self.client is not None
        self.client.discard(message)

    def duplicate(self, message: Message) -> None:
        with self.lock:
            self.dups.append(json.loads(message.get_data())["n"])

    def ns(self) -> list[int]:
        with self.lock:
            return [n for n, _ in self.seen]


def test_live_subscription_resumes_from_the_persisted_point_after_a_failover(
    pair: tuple[Cluster, ClusterNode, ClusterNode],
) -> None:
    cluster, a, b = pair
    app = App()
    with HAClient("live-sub", reconnect_delay_strategy=FixedDelayStrategy(50)) as sub:
        app.client = sub
        sub.set_duplicate_message_handler(app.duplicate)
        sub.get_server_chooser().add(a.uri()).add(b.uri())
        sub.connect_and_logon()
        sub.bookmark_subscribe(app, TOPIC, "0", sub_id="s1", options="live")
        with plain_publisher(a.uri()) as pub:
            publish(pub, 0, 10)  # reaches B: persisted
            wait_for(lambda: app.ns() == list(range(10)), timeout=15.0, what="messages 0-9")
            persisted = app.seen[9][1]
            # the server's persisted ack reaches the store: it becomes the resume point
            wait_for(lambda: sub.get_most_recent("s1") == persisted, timeout=15.0, what="ack")
            cluster.partition(a, b)
            publish(pub, 10, 20)  # delivered live; B never gets them
            wait_for(lambda: app.ns() == list(range(20)), timeout=15.0, what="messages 10-19")
            # discarded up to 19, but persisted (everywhere) only up to 9
            assert sub.get_most_recent("s1") == persisted
            a.kill()
        with plain_publisher(b.uri()) as pub:
            publish(pub, 20, 40)  # 20-29 get the bookmarks 10-19 had
        held = journal_contents(b.uri())
        assert [n for n, _ in held] == list(range(10)) + list(range(20, 40))
        assert [bm for _, bm in held[10:20]] == [bm for _, bm in app.seen[10:20]], (
            "20-29 carry the bookmarks 10-19 had"
        )
        wait_for(lambda: app.ns()[-1:] == [39], timeout=20.0, what="message 39")
        assert app.ns() == list(range(40)), "every persisted message, once, in order"
        assert app.dups == []
        assert app.seen[20:] == held[10:], "after the failover: exactly what B holds"
        assert str(b.tcp_port) in str(sub.get_uri())


async def await_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """``wait_for`` for a test running on the client's event loop (never blocks it)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_async_live_stream_resumes_from_the_persisted_point_after_a_failover(
    pair: tuple[Cluster, ClusterNode, ClusterNode],
) -> None:
    """The same with :class:`AsyncHAClient` and the stream form of ``bookmark_subscribe``."""
    cluster, a, b = pair
    seen: list[tuple[int, str]] = []
    dups: list[Message] = []
    async with AsyncHAClient("live-async", reconnect_delay_strategy=FixedDelayStrategy(50)) as sub:
        sub.set_duplicate_message_handler(dups.append)
        sub.get_server_chooser().add(a.uri()).add(b.uri())
        await sub.connect_and_logon()
        stream = await sub.bookmark_subscribe(TOPIC, "0", sub_id="s1", options="live")

        async def consume() -> None:
            async for message in stream:
                if message.get_command() != "publish":
                    continue
                n = json.loads(message.get_data())["n"]
                if n >= 0:  # not a marker of journal_contents
                    seen.append((n, str(message.get_bookmark())))
                sub.discard(message)

        consumer = asyncio.create_task(consume())
        try:
            with plain_publisher(a.uri()) as pub:
                publish(pub, 0, 10)
                await await_for(lambda: len(seen) == 10, "messages 0-9")
                persisted = seen[9][1]
                await await_for(lambda: sub.get_most_recent("s1") == persisted, "the ack")
                cluster.partition(a, b)
                publish(pub, 10, 20)
                await await_for(lambda: len(seen) == 20, "messages 10-19")
                assert sub.get_most_recent("s1") == persisted
                a.kill()
            with plain_publisher(b.uri()) as pub:
                publish(pub, 20, 40)
            held = journal_contents(b.uri())
            assert [n for n, _ in held] == list(range(10)) + list(range(20, 40))
            await await_for(lambda: [n for n, _ in seen[-1:]] == [39], "message 39")
            assert [n for n, _ in seen] == list(range(40))
            assert seen[20:] == held[10:], "after the failover: exactly what B holds"
            assert dups == []
        finally:
            consumer.cancel()


SUBSCRIBER = textwrap.dedent(
    """
    import json, sys, threading
    from ampsclient.ha import FixedDelayStrategy
    from ampsclient.sync import HAClient

    uri, store_path, TOPIC = sys.argv[1], sys.argv[2], sys.argv[3]
    client = HAClient("live-proc", bookmark_store=store_path,
                      reconnect_delay_strategy=FixedDelayStrategy(50))

    def on_message(message):
        n = json.loads(message.get_data())["n"]
        print("msg", n, message.get_bookmark(), flush=True)
        client.discard(message)

    def on_duplicate(message):
        print("dup", json.loads(message.get_data())["n"], flush=True)

    client.set_duplicate_message_handler(on_duplicate)
    for one in uri.split(","):
        client.get_server_chooser().add(one)
    client.connect_and_logon()
    client.bookmark_subscribe(on_message, TOPIC, client.Bookmarks.MOST_RECENT,
                              sub_id="proc1", options="live")
    print("subscribed", flush=True)
    threading.Event().wait()
    """
)


class Subscriber:
    """The subscriber process: its stdout lines, read by a thread."""

    def __init__(self, uri: str, store: Path) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SUBSCRIBER, uri, str(store), TOPIC],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line.strip())

    def messages(self) -> list[tuple[int, str]]:
        with self.lock:
            parts = [x.split() for x in self.lines]
            # (markers of journal_contents are n = -1)
            return [(int(p[1]), p[2]) for p in parts if p[0] == "msg" and int(p[1]) >= 0]

    def dups(self) -> list[str]:
        with self.lock:
            return [x for x in self.lines if x.startswith("dup")]

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL
        self.proc.wait(10)
        self.reader.join(10)


def test_live_subscriber_restarted_with_a_file_store_resumes_from_the_persisted_point(
    pair: tuple[Cluster, ClusterNode, ClusterNode], tmp_path: Path
) -> None:
    cluster, a, b = pair
    store = tmp_path / "bookmarks.mmap"
    uris = f"{a.uri()},{b.uri()}"
    first = Subscriber(uris, store)
    try:
        wait_for(lambda: "subscribed" in first.lines, timeout=20.0, what="the subscription")
        with plain_publisher(a.uri()) as pub:
            publish(pub, 0, 10)
            wait_for(lambda: len(first.messages()) == 10, timeout=15.0, what="0-9")
            persisted = first.messages()[9][1]
            # the subscriber's store file records the persisted point
            wait_for(
                lambda: persisted in store.read_text(errors="replace"),
                timeout=15.0,
                what="the persisted point in the store file",
            )
            cluster.partition(a, b)
            publish(pub, 10, 20)  # live; never reaches B
            wait_for(lambda: len(first.messages()) == 20, timeout=15.0, what="10-19")
    finally:
        first.kill()  # kill -9 of the subscriber ...
    a.kill()  # ... and of the instance it used
    assert [n for n, _ in first.messages()] == list(range(20))
    # the recovery point written last is the persisted point, not the last discard
    recovered = MMapBookmarkStore(store)
    try:
        assert recovered.get_most_recent("proc1") == persisted
    finally:
        recovered.close()
    with plain_publisher(b.uri()) as pub:
        publish(pub, 20, 30)  # the bookmarks 10-19 had
    second = Subscriber(uris, store)
    try:
        wait_for(lambda: "subscribed" in second.lines, timeout=20.0, what="the resubscription")
        with plain_publisher(b.uri()) as pub:
            publish(pub, 30, 40)
        wait_for(
            lambda: [n for n, _ in second.messages()[-1:]] == [39],
            timeout=20.0,
            what="message 39",
        )
        held = journal_contents(b.uri())
        assert [n for n, _ in held] == list(range(10)) + list(range(20, 40))
        assert second.messages() == held[10:], "every message persisted after 9, once"
        assert second.dups() == []
    finally:
        second.kill()


def test_the_bookmark_stores_page_example_runs() -> None:
    """docs/bookmark-stores.md's ``live`` example (tests/test_docs.py runs only the examples
    that start a ``ServerThread()``)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "bookmark-stores.md").read_text()
    section = page[page.index("### `live` subscriptions") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    assert "store.rewind_live" in code
    exec(compile(code, "bookmark-stores.md", "exec"), {"__name__": "docs_example"})
