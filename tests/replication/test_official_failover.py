"""Interop: the official AMPS HAClient (black-box peer) publishing with a file publish store
and bookmark-subscribing with a memory bookmark store across a kill -9 failover of a
hot-hot pair of reference servers."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from _replication_support import epoch_replay, wait_for

from ampsclient_server_stub.cluster import Cluster, DowngradePolicy

AMPS = pytest.importorskip("AMPS")
pytestmark = [pytest.mark.interop, pytest.mark.integration]

N = 1500
KILL_AT = 500


def test_official_haclient_across_failover(tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path / "cluster", downgrade=DowngradePolicy(age=1.0, upgrade_age=0.5, every=0.2)
    )
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.hot_hot(a, b)
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        seen: list[int] = []
        lock = threading.Lock()
        sub: Any = AMPS.HAClient("official-sub")
        sub.set_bookmark_store(AMPS.MemoryBookmarkStore())
        chooser = AMPS.DefaultServerChooser()
        chooser.add(a.uri())
        chooser.add(b.uri())
        sub.set_server_chooser(chooser)

        def on_message(message: Any) -> None:
            n = int(json.loads(message.get_data())["n"])
            with lock:
                seen.append(n)
            sub.discard(message)

        pub: Any = AMPS.HAClient("official-pub", str(tmp_path / "official-pub.store"))
        pub_chooser = AMPS.DefaultServerChooser()
        pub_chooser.add(a.uri())
        pub_chooser.add(b.uri())
        pub.set_server_chooser(pub_chooser)
        try:
            sub.connect_and_logon()
            sub.bookmark_subscribe(
                on_message,
                "orders",
                AMPS.Client.Bookmarks.MOST_RECENT,
                sub_id="s1",
                options="fully_durable",
            )
            pub.connect_and_logon()
            for n in range(N):
                pub.publish("orders", json.dumps({"n": n}))
                if n == KILL_AT:
                    a.kill()
            pub.publish_flush(60_000)
            assert pub.get_unpersisted_count() == 0

            def complete() -> bool:
                with lock:
                    return len(set(seen)) >= N

            wait_for(complete, 60, "every message at the official subscriber")
            with lock:
                assert seen == list(range(N)), "exactly once, in order, across the failover"
        finally:
            pub.close()
            sub.close()
        on_b = [int(json.loads(data)["n"]) for _, data in epoch_replay(b.uri(), "orders")]
        assert on_b == list(range(N))
