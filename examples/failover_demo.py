"""Hot-hot failover, end to end: two reference servers replicating sync both ways, a
publisher and a bookmark subscriber on instance A, ``kill -9`` of A in the middle of the
stream, both clients failing over to B, then A restarting and resyncing from B.

What it shows (and checks, exit status 1 if not):

* every published message is delivered to the subscriber exactly once, in order (a few
  redeliveries after the failover are recognised by the bookmark store and diverted to the
  duplicate handler);
* B's transaction log holds each message once;
* after A restarts, its log holds the same messages under the same bookmarks as B's.

Usage::

    python examples/failover_demo.py [--messages 5000] [--kill-at 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from ampsclient import Client, Command, Message
from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.publish import FilePublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster, DowngradePolicy


class Subscriber:
    """Processes each message once (records it, discards it in the bookmark store)."""

    def __init__(self) -> None:
        self.client: HAClient | None = None
        self.seen: list[int] = []
        self.duplicates = 0
        self.first_after_kill: float | None = None
        self.killed_at: float | None = None
        self.lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        n = int(json.loads(message.get_data())["n"])
        with self.lock:
            self.seen.append(n)
            if self.killed_at is not None and self.first_after_kill is None:
                self.first_after_kill = time.monotonic()
        assert self.client is not None
        self.client.discard(message)

    def duplicate(self, message: Message) -> None:
        with self.lock:
            self.duplicates += 1


def log_of(uri: str) -> list[tuple[str, bytes]]:
    """(bookmark, payload) of every message of 'orders' in an instance's log (EPOCH replay)."""
    items: list[tuple[str, bytes]] = []
    done = threading.Event()

    def on(message: Message) -> None:
        if message.get_command() == "ack":
            done.set()
        else:
            items.append((message.get_bookmark() or "", bytes(message.get_data_raw())))

    with Client(f"log-reader-{time.time_ns()}") as client:
        client.connect(uri)
        client.logon(5000)
        cmd = Command("subscribe").set_topic("orders").set_bookmark("0").add_ack_type("completed")
        client.execute_async(cmd, on)
        if not done.wait(30):
            raise RuntimeError(f"EPOCH replay of {uri} did not complete")
    return items


def wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def run(workdir: Path, messages: int, kill_at: int) -> bool:
    cluster = Cluster(workdir, downgrade=DowngradePolicy(age=1.0, upgrade_age=0.5, every=0.2))
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.hot_hot(a, b)
    print(f"cluster in {workdir}: A {a.uri()}  B {b.uri()}")
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        print("A and B up, replicating sync both ways")
        sub = Subscriber()
        with (
            HAClient(
                "demo-sub",
                bookmark_store=MemoryBookmarkStore(),
                reconnect_delay_strategy=FixedDelayStrategy(50),
            ) as sub_client,
            HAClient(
                "demo-pub",
                FilePublishStore(str(workdir / "pub.store")),
                reconnect_delay_strategy=FixedDelayStrategy(50),
            ) as pub,
        ):
            sub.client = sub_client
            sub_client.set_duplicate_message_handler(sub.duplicate)
            for client in (sub_client, pub):
                client.get_server_chooser().add(a.uri()).add(b.uri())
                client.connect_and_logon()
            sub_client.bookmark_subscribe(
                sub,
                "orders",
                HAClient.Bookmarks.MOST_RECENT,
                sub_id="demo",
                options="fully_durable",
            )
            started = time.monotonic()
            for n in range(messages):
                pub.publish("orders", json.dumps({"n": n}))
                if n == kill_at:
                    a.kill()
                    sub.killed_at = time.monotonic()
                    print(f"kill -9 A after message {n}")
            pub.publish_flush(120_000)
            wait(lambda: len(sub.seen) >= messages, 120, "every message at the subscriber")
            elapsed = time.monotonic() - started
            print(f"publisher failed over to {pub.get_uri()}")
            print(f"subscriber failed over to {sub_client.get_uri()}")
        on_b = log_of(b.uri())
        print("restarting A; it resyncs from B")
        a.start()
        cluster.wait_streaming()
        cluster.wait_caught_up()
        on_a = log_of(a.uri())

    exactly_once = sub.seen == list(range(messages))
    b_once = sorted(json.loads(p)["n"] for _, p in on_b) == list(range(messages))
    same_logs = sorted(on_a) == sorted(on_b)
    failover_ms = (
        (sub.first_after_kill - sub.killed_at) * 1000
        if sub.first_after_kill is not None and sub.killed_at is not None
        else float("nan")
    )
    print()
    print("summary")
    print(f"  published                 {messages}")
    print(f"  delivered                 {len(sub.seen)} ({len(set(sub.seen))} distinct)")
    print(f"  duplicates diverted       {sub.duplicates}")
    print(f"  exactly once, in order    {'yes' if exactly_once else 'NO'}")
    print(f"  B's log, each once        {'yes' if b_once else 'NO'} ({len(on_b)} records)")
    print(f"  A's log equals B's        {'yes' if same_logs else 'NO'} ({len(on_a)} records)")
    print(f"  kill -9 to next delivery  {failover_ms:.0f} ms")
    print(f"  wall time                 {elapsed:.2f} s")
    return exactly_once and b_once and same_logs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--kill-at", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the cluster files here")
    args = parser.parse_args()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return 0 if run(args.workdir, args.messages, args.kill_at) else 1
    with tempfile.TemporaryDirectory(prefix="failover-demo-") as tmp:
        return 0 if run(Path(tmp), args.messages, args.kill_at) else 1


if __name__ == "__main__":
    sys.exit(main())
