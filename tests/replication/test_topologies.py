"""Three instances with passthrough: the seed's regional layout in miniature, and a full mesh
where every instance passes everything through. Every message reaches every instance
exactly once, and never comes back to an instance it already visited."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from _replication_support import wait_for

from ampsclient.ha import FixedDelayStrategy
from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster, ClusterNode, DowngradePolicy

pytestmark = pytest.mark.integration


def publish(node_uris: list[str], name: str, count: int) -> None:
    with HAClient(name, reconnect_delay_strategy=FixedDelayStrategy(50)) as pub:
        for uri in node_uris:
            pub.get_server_chooser().add(uri)
        pub.connect_and_logon()
        for n in range(count):
            pub.publish("orders", json.dumps({"p": name, "n": n}))
        pub.publish_flush(30_000)


def journal_counts(node: ClusterNode) -> Counter[tuple[str, int]]:
    counts: Counter[tuple[str, int]] = Counter()
    for record in node.journal_records():
        doc = json.loads(record.payload)
        counts[(doc["p"], doc["n"])] += 1
    return counts


def loops_refused(node: ClusterNode) -> int:
    return sum(i["loops_refused"] for i in node.status()["inbound"])


def test_regional_layout_with_passthrough_and_destination_failover(tmp_path: Path) -> None:
    """EU: E1 and E2, a sync pair passing through what comes from US; US: U1, replicating
    async to EU through the failover list [E1, E2]; E1 and E2 replicate async to US."""
    cluster = Cluster(tmp_path, downgrade=DowngradePolicy(age=1.0, upgrade_age=0.5, every=0.2))
    e1 = cluster.add("E1", group="EU")
    e2 = cluster.add("E2", group="EU")
    u1 = cluster.add("U1", group="US")
    cluster.replicate(e1, e2, sync=True, passthrough=["^US"])
    cluster.replicate(e2, e1, sync=True, passthrough=["^US"])
    cluster.replicate(e1, u1, sync=False)
    cluster.replicate(e2, u1, sync=False)
    cluster.replicate(u1, [e1, e2], name="EU", sync=False)
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        publish([e1.uri(), e2.uri()], "eu-pub", 200)
        publish([u1.uri()], "us-pub", 200)
        expected = {(p, n) for p in ("eu-pub", "us-pub") for n in range(200)}
        cluster.wait_caught_up()
        for node in (e1, e2, u1):
            wait_for(
                lambda node=node: len(journal_counts(node)) == len(expected),
                20,
                f"every message on {node.name}",
            )
            counts = journal_counts(node)
            assert set(counts) == expected and set(counts.values()) == {1}, node.name

        # U1's destination fails over to E2 when E1 dies; E2 passes to E1 once it is back
        e1.kill()
        cluster.wait_until(
            lambda: u1.destination_status("EU")["peer"] == "E2", 20, "U1 fails over to E2"
        )
        publish([u1.uri()], "us-pub-2", 100)
        e1.start()
        cluster.wait_streaming()
        cluster.wait_caught_up()
        expected |= {("us-pub-2", n) for n in range(100)}
        for node in (e1, e2, u1):
            wait_for(
                lambda node=node: len(journal_counts(node)) == len(expected),
                20,
                f"every message on {node.name}",
            )
            counts = journal_counts(node)
            assert set(counts) == expected and set(counts.values()) == {1}, node.name
            assert loops_refused(node) == 0
        # E2 passed U1's messages to E1 (passthrough ^US) and nothing went back to US
        e1_from = {i["from"]: i for i in e1.status()["inbound"]}
        assert e1_from["E2"]["applied"] >= 100
        u1_in = u1.status()["inbound"]
        assert sum(i["applied"] for i in u1_in) == 200  # only EU's own publishes
        assert sum(i["received"] for i in u1_in) == 200  # E2 did not pass E1's on to US


def test_full_mesh_passthrough_everything_has_no_loops(tmp_path: Path) -> None:
    """Three groups, each instance replicating to both others and passing everything
    through: each message is stored once everywhere, and never returns where it was."""
    cluster = Cluster(tmp_path)
    nodes = [cluster.add(name, group=f"G{name}") for name in ("X", "Y", "Z")]
    for src in nodes:
        for dst in nodes:
            if src is not dst:
                cluster.replicate(src, dst, sync=False, passthrough=[".*"])
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        for node in nodes:
            publish([node.uri()], f"pub-{node.name}", 150)
        cluster.wait_caught_up()
        expected = {(f"pub-{n.name}", i) for n in nodes for i in range(150)}
        for node in nodes:
            wait_for(
                lambda node=node: len(journal_counts(node)) == len(expected),
                20,
                f"every message on {node.name}",
            )
            counts = journal_counts(node)
            assert set(counts) == expected and set(counts.values()) == {1}, node.name
            assert loops_refused(node) == 0
            # a message reaches an instance at most twice (from its origin, and passed
            # through by the third instance): never a third time, never back to the origin
            received = sum(i["received"] for i in node.status()["inbound"])
            assert received <= 2 * 2 * 150, node.name
