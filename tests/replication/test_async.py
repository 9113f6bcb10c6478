"""Async acknowledgment: the documented difference from sync.

An instance acknowledges a publish as persisted once it is in its own transaction log, not
waiting for an async destination. So a message acknowledged by A can be missing on B if A
dies before replicating it, and a publisher failing over from A to B across an async link
does not republish it (its store already discarded it). Once the publisher's later messages
are on B, even A's resync cannot bring it there (B dedups by publisher and sequence): a gap
in B's log for good. That is why failover partners must use sync acknowledgment."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _replication_support import epoch_replay

from ampsclient.ha import FixedDelayStrategy
from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster

pytestmark = pytest.mark.integration


def ns(uri: str) -> list[int]:
    return [int(json.loads(data)["n"]) for _, data in epoch_replay(uri, "orders")]


@pytest.mark.serial
def test_async_ack_does_not_wait_and_a_failover_can_lose_a_message(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.add("A", group="GA")
    b = cluster.add("B", group="GB")
    cluster.replicate(a, b, sync=False)
    cluster.replicate(b, a, sync=False)
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        with HAClient("async-pub", reconnect_delay_strategy=FixedDelayStrategy(50)) as pub:
            pub.get_server_chooser().add(a.uri()).add(b.uri())
            pub.connect_and_logon()
            pub.publish_and_wait("orders", json.dumps({"n": 0}), timeout=10_000)
            cluster.wait_caught_up()
            assert ns(b.uri()) == [0]

            cluster.partition(a, b)  # B is unreachable from A
            started = time.monotonic()
            pub.publish_and_wait("orders", json.dumps({"n": 1}), timeout=10_000)
            assert time.monotonic() - started < 2.0, "acked without waiting for B"
            assert pub.get_unpersisted_count() == 0  # the store let go of n=1

            a.kill()  # A dies before n=1 ever reached B
            pub.publish_and_wait("orders", json.dumps({"n": 2}), timeout=20_000)
        assert ns(b.uri()) == [0, 2], "n=1 was acknowledged by A but is missing on B"

        # A comes back and resyncs, but n=1 stays missing on B for good: B already holds a
        # later sequence of that publisher (n=2), so by (publisher, sequence) dedup n=1 is
        # "already there". The two logs now differ: a gap in B's replay.
        a.start()
        cluster.heal(a, b)
        cluster.wait_streaming()
        cluster.wait_caught_up()
        assert ns(a.uri()) == [0, 1, 2]
        assert ns(b.uri()) == [0, 2]
