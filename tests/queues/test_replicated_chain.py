"""A replicated queue over three real server processes in a chain, ``A - B - C`` (sync both
ways on each link, ``B`` passing each end's records through to the other): ``A`` and ``C``
have no link with each other, so a transfer request between them, and its grant, pass
through ``B``; acknowledgements made on one end reach the other two; a non-owner never
delivers."""

from __future__ import annotations

from pathlib import Path

import pytest
from _queue_support import Consumer, bodies, publish
from _replicated_support import QUEUE, TOPIC, queue_xml, stats, wait_stat

from ampsclient_server_stub.cluster import Cluster
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


def chain(base: Path) -> Cluster:
    """``A <-> B <-> C`` started, a queue on each, admin HTTP on each."""
    cluster = Cluster(base)
    for name in ("A", "B", "C"):
        port = free_port()
        node = cluster.add(
            name,
            extra_xml=queue_xml() + f"<Admin><InetAddr>127.0.0.1:{port}</InetAddr></Admin>",
        )
        node.admin_port = port  # type: ignore[attr-defined]
    a, b, c = (cluster.node(n) for n in ("A", "B", "C"))
    cluster.replicate(a, b)
    cluster.replicate(c, b)
    cluster.replicate(b, a, passthrough=["C"])
    cluster.replicate(b, c, passthrough=["A"])
    cluster.start()
    cluster.wait_streaming()
    return cluster


def test_transfer_and_acks_through_an_intermediate_instance(tmp_path: Path) -> None:
    cluster = chain(tmp_path)
    try:
        a, b, c = (cluster.node(n) for n in ("A", "B", "C"))
        publish(a, TOPIC, [{"id": f"a{i}"} for i in range(6)])  # type: ignore[arg-type]
        for node in (b, c):
            wait_stat(node, "messages", 6)  # C has them through B
        assert (stats(a)["owned"], stats(b)["owned"], stats(c)["owned"]) == (6, 0, 0)

        on_c = Consumer(c)  # type: ignore[arg-type]
        on_c.subscribe(QUEUE, o="max_backlog=10")
        # A (no subscriber) grants C's request, which B relayed; the grant reaches C via B
        got = on_c.wait_deliveries(6, timeout=30)
        assert sorted(d["id"] for d in bodies(got)) == [f"a{i}" for i in range(6)]
        assert stats(a)["transferred_out"] == 6
        wait_stat(c, "transferred_in", 6)
        wait_stat(b, "owned", 0)
        assert stats(c)["owned"] == 6 and stats(a)["owned"] == 0
        wait_for(lambda: stats(b)["transfer_relayed"] >= 1, timeout=10, what="B relayed")

        on_c.ack(QUEUE, ",".join(h["bm"] for h, _ in got[:4]))
        for node in (a, b, c):  # C's acknowledgements reach both other instances
            wait_stat(node, "messages", 2)

        # the other way: published on C, wanted on A
        on_a = Consumer(a)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=10")
        assert on_a.sync() == []  # the two left are C's (leased there): never delivered by A
        on_c.close()  # ... until C's consumer leaves: they return to C, which grants them
        publish(c, TOPIC, [{"id": f"c{i}"} for i in range(3)])  # type: ignore[arg-type]
        more = on_a.wait_deliveries(5, timeout=30)
        assert sorted(d["id"] for d in bodies(more)) == ["a4", "a5", "c0", "c1", "c2"]
        on_a.ack(QUEUE, ",".join(h["bm"] for h, _ in more))
        for node in (a, b, c):
            wait_stat(node, "messages", 0)
        on_b = Consumer(b)  # type: ignore[arg-type]
        on_b.subscribe(QUEUE, o="max_backlog=10")
        assert on_b.sync() == [] and on_a.sync() == []  # nothing left anywhere
        on_a.close()
        on_b.close()
    finally:
        cluster.stop()
