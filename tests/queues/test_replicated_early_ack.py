"""A queue acknowledgement that reaches an instance before the message does (issue #32).

In the 30-minute replicated soak (seed 20261128, f3d2b34) a consumer leased 20 messages
from B, the owner, failed over to A while A was still catching up after a ``kill -9`` and
sent its acknowledgements there: A did not hold the messages yet, so it kept the
acknowledgements in memory (deferred) and answered ``persisted`` without journaling
anything. B never heard of them and delivered the messages again 26 s later.

AMPS replicates the ``sow_delete`` commands that carry queue acknowledgements (User Guide,
Replicated Queues, https://docs.crankuptheamps.com/amps-user-guide/replication/queue_replication)
and keeps an acknowledgement that arrives before its message for ``DeferredAckExpiration``
(configuration reference, Queue). So a deferred acknowledgement is journaled like any other
(and replicated from there), and a restart rebuilds it from the journal.

Real server processes, a real partition of their replication link, ``kill -9``."""

from __future__ import annotations

from pathlib import Path

import pytest
from _queue_support import Consumer, bodies, publish
from _replicated_support import QUEUE, TOPIC, pair, stats, wait_stat

from ampsclient_server_stub.cluster import ClusterNode
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


def durable(node: ClusterNode) -> bool:
    journal = node.status()["journal"]
    return bool(journal["durable_index"] >= journal["last_index"])


def _ids(deliveries: list[tuple[dict[str, object], bytes]]) -> list[str]:
    return [str(doc["id"]) for doc in bodies(deliveries)]


@pytest.mark.parametrize("restart_a", ["", "kill", "stop"], ids=["live", "a-killed", "a-stopped"])
def test_ack_ahead_of_its_message_reaches_the_owner(tmp_path: Path, restart_a: str) -> None:
    """``a-killed``: the journal holds the acknowledgement; ``a-stopped``: a clean stop
    writes ``queues.ack``, which must not pass the record of an acknowledgement still
    waiting for its message."""
    cluster = pair(tmp_path)
    consumers: list[Consumer] = []
    try:
        a, b = cluster.node("A"), cluster.node("B")
        cluster.partition(a, b)
        leased = Consumer(b)  # type: ignore[arg-type]
        consumers.append(leased)
        leased.subscribe(QUEUE, o="max_backlog=5")
        publish(b, TOPIC, [{"id": "early"}])  # type: ignore[arg-type]
        got = leased.wait_deliveries(1)
        assert _ids(got) == ["early"]
        bookmark = str(got[0][0]["bm"])
        # the consumer's acknowledgement reaches A, which has not received the message
        on_a = Consumer(a)  # type: ignore[arg-type]
        consumers.append(on_a)
        ack = on_a.ack(QUEUE, bookmark, a="processed")
        assert ack is not None and ack.get("s", "success") == "success"
        assert stats(a)["deferred_ack_count"] == 1
        if restart_a:  # the acknowledgement survives a restart of A
            wait_for(lambda: durable(a), timeout=30, what="A's journal durable")
            if restart_a == "kill":
                a.kill()
            else:
                a.stop()
            a.start()
            assert stats(a)["deferred_ack_count"] == 1
        cluster.heal(a, b)
        cluster.wait_streaming(30)
        cluster.wait_caught_up(30)
        # B, the owner, applied A's acknowledgement: the lease is gone with the message
        wait_stat(b, "messages", 0, timeout=30)
        # A applied its deferred acknowledgement when the message arrived
        wait_stat(a, "deferred_ack_count", 0, timeout=30)
        assert stats(a)["messages"] == 0
        # message by message: the lessee leaves, a new consumer on B gets the next message
        # and never the acknowledged one
        leased.close()
        consumers.remove(leased)
        fresh = Consumer(b)  # type: ignore[arg-type]
        consumers.append(fresh)
        fresh.subscribe(QUEUE, o="max_backlog=5")
        publish(b, TOPIC, [{"id": "marker"}])  # type: ignore[arg-type]
        fresh.wait_deliveries(1)
        wait_for(lambda: len(fresh.sync()) == 0, timeout=10, what="nothing more for B's consumer")
        assert _ids(fresh.deliveries) == ["marker"]
    finally:
        for consumer in consumers:
            consumer.close()
        cluster.stop()
