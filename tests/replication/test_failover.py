"""Failover end to end: a hot-hot pair replicating sync both ways, kill -9 of the instance
the clients use, failover of a publisher (file publish store) and of a bookmark subscriber
(memory bookmark store) to the survivor, resync of the restarted instance."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from _replication_support import Processor, epoch_replay, wait_for

from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.publish import FilePublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster, DowngradePolicy

pytestmark = pytest.mark.integration

N_MAIN = 3000
"""Messages of the publisher that fails over (connected to A, then B)."""
KILL_AT = 1000
"""A is killed right after the main publisher published this many."""
N_SIDE = 600
"""Messages of a second publisher connected to B all along."""


def _keys(replay: list[tuple[str, bytes]]) -> list[tuple[str, str, int]]:
    out = []
    for bm, data in replay:
        doc = json.loads(data)
        out.append((bm, str(doc["p"]), int(doc["n"])))
    return out


def test_hot_hot_failover_exactly_once_and_resync(tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path / "cluster", downgrade=DowngradePolicy(age=1.0, upgrade_age=0.5, every=0.2)
    )
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.hot_hot(a, b)
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        proc = Processor()
        delay = FixedDelayStrategy(50)
        with (
            HAClient(
                "ha-sub", bookmark_store=MemoryBookmarkStore(), reconnect_delay_strategy=delay
            ) as sub,
            HAClient(
                "main-pub",
                FilePublishStore(str(tmp_path / "main.store")),
                reconnect_delay_strategy=FixedDelayStrategy(50),
            ) as pub,
            HAClient("side-pub", reconnect_delay_strategy=FixedDelayStrategy(50)) as side,
        ):
            proc.client = sub
            sub.set_duplicate_message_handler(proc.duplicates)
            sub.get_server_chooser().add(a.uri()).add(b.uri())
            sub.connect_and_logon()
            sub.bookmark_subscribe(
                proc,
                "orders",
                HAClient.Bookmarks.MOST_RECENT,
                sub_id="s1",
                options="fully_durable",
            )
            pub.get_server_chooser().add(a.uri()).add(b.uri())
            pub.connect_and_logon()
            side.get_server_chooser().add(b.uri())
            side.connect_and_logon()

            side_n = 0
            for n in range(N_MAIN):
                pub.publish("orders", json.dumps({"p": "main-pub", "n": n}))
                if n % 5 == 0 and side_n < N_SIDE:
                    side.publish("orders", json.dumps({"p": "side-pub", "n": side_n}))
                    side_n += 1
                if n == KILL_AT:
                    a.kill()  # in the middle of the stream: the rest goes to the store first
            while side_n < N_SIDE:
                side.publish("orders", json.dumps({"p": "side-pub", "n": side_n}))
                side_n += 1
            pub.publish_flush(60_000)
            side.publish_flush(60_000)
            assert pub.get_unpersisted_count() == 0

            wait_for(lambda: proc.count() >= N_MAIN + N_SIDE, 60, "every message delivered")
            got = proc.by_publisher()
            # exactly once (after the store's duplicate detection), in publisher order
            assert got["main-pub"] == list(range(N_MAIN))
            assert got["side-pub"] == list(range(N_SIDE))
            assert proc.count() == N_MAIN + N_SIDE
            assert sub.get_uri() is not None and str(b.tcp_port) in sub.get_uri()

        # B holds each message exactly once
        on_b = _keys(epoch_replay(b.uri(), "orders"))
        counts = Counter((p, n) for _, p, n in on_b)
        assert len(on_b) == N_MAIN + N_SIDE
        assert set(counts.values()) == {1}
        # B downgraded A (dead) so that its publishers got their acks
        assert b.status()["counters"]["downgrades"] >= 1

        # A comes back, resyncs, and its log equals B's
        a.start()
        cluster.wait_streaming()
        cluster.wait_caught_up()
        on_a = _keys(epoch_replay(a.uri(), "orders"))
        assert sorted(on_a) == sorted(on_b), "same messages under the same bookmarks"
        for publisher in ("main-pub", "side-pub"):
            assert [n for _, p, n in on_a if p == publisher] == [
                n for _, p, n in on_b if p == publisher
            ], f"same per-publisher order ({publisher})"
        # once caught up, B upgrades A back to sync acknowledgment
        cluster.wait_until(
            lambda: b.destination_status("A")["effective"] == "sync", 10, "B upgrades A"
        )
