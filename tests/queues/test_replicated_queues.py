"""Replicated queues on a real pair of server processes (``queues/replicated.py``): the
owner delivers, a non-owner never does, acknowledgements replicate, ownership transfers to an
instance whose subscriber has room when the owner has none, and a restart agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _queue_support import Consumer, bodies, publish
from _replicated_support import QUEUE, TOPIC, pair, queue_xml, stats, wait_stat

from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


def _docs(tag: str, n: int) -> list[dict[str, object]]:
    return [{"id": f"{tag}{i}"} for i in range(n)]


def test_non_owner_never_delivers_and_acks_replicate(tmp_path: Path) -> None:
    cluster = pair(tmp_path)
    try:
        a, b = cluster.node("A"), cluster.node("B")
        on_a, on_b = Consumer(a), Consumer(b)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=10")
        on_b.subscribe(QUEUE, o="max_backlog=10")
        publish(a, TOPIC, _docs("a", 5))  # type: ignore[arg-type]
        got = on_a.wait_deliveries(5)
        assert sorted(d["id"] for d in bodies(got)) == [f"a{i}" for i in range(5)]
        wait_stat(b, "messages", 5)  # B has them all (replicated), owns none
        assert stats(b)["owned"] == 0 and stats(a)["owned"] == 5
        # B asks for them (its subscriber has room); A refuses: they are leased there
        wait_for(lambda: stats(a)["transfer_refused"] >= 5, timeout=20, what="refusals")
        assert on_b.sync() == []  # the marker: B delivered nothing
        on_a.ack(QUEUE, ",".join(h["bm"] for h, _ in got))
        wait_stat(b, "messages", 0)  # the acknowledgement replicated
        wait_stat(a, "messages", 0)
        assert on_b.sync() == [] and on_a.sync() == []
        assert stats(a)["transferred_out"] == 0 and stats(b)["transferred_in"] == 0
        on_a.close()
        on_b.close()
    finally:
        cluster.stop()


def test_idle_owner_transfers_and_restart_agrees(tmp_path: Path) -> None:
    cluster = pair(tmp_path)
    try:
        a, b = cluster.node("A"), cluster.node("B")
        publish(a, TOPIC, _docs("a", 6))  # type: ignore[arg-type]
        wait_stat(b, "messages", 6)
        on_b = Consumer(b)  # type: ignore[arg-type]
        on_b.subscribe(QUEUE, o="max_backlog=10")
        got = on_b.wait_deliveries(6, timeout=20)  # owner A has no subscriber: transferred
        assert sorted(d["id"] for d in bodies(got)) == [f"a{i}" for i in range(6)]
        assert stats(a)["transferred_out"] == 6
        wait_stat(b, "transferred_in", 6)
        assert stats(b)["owned"] == 6 and stats(a)["owned"] == 0
        on_b.ack(QUEUE, ",".join(h["bm"] for h, _ in got[:4]))
        wait_stat(a, "messages", 2)  # B's acks replicated to A
        a.kill()
        a.start()
        cluster.wait_streaming()
        after = stats(a)  # recovered from A's journal: the transfers and the acks stand
        assert (after["messages"], after["owned"]) == (2, 0)
        on_a = Consumer(a)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=10")
        assert on_a.sync() == []  # A no longer owns them: never delivers them
        on_b.ack(QUEUE, ",".join(h["bm"] for h, _ in got[4:]))
        wait_stat(a, "messages", 0)
        assert on_a.sync() == [] and on_b.sync() == []
        on_a.close()
        on_b.close()
    finally:
        cluster.stop()


def test_group_local_queue_initial_owner(tmp_path: Path) -> None:
    xml = queue_xml("GroupLocalQueue", initial_owner="A")
    cluster = pair(tmp_path, xml)
    try:
        a, b = cluster.node("A"), cluster.node("B")
        on_a = Consumer(a)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=10")
        publish(b, TOPIC, _docs("b", 4))  # type: ignore[arg-type]
        got = on_a.wait_deliveries(4)  # published on B, owned (and delivered) by A
        assert sorted(json.loads(body)["id"] for _h, body in got) == [f"b{i}" for i in range(4)]
        wait_stat(b, "messages", 4)
        assert stats(b)["owned"] == 0
        on_a.close()
    finally:
        cluster.stop()


def test_barrier_released_by_each_instance(tmp_path: Path) -> None:
    xml = queue_xml().replace(
        "<MaxPerSubscriptionBacklog>",
        "<BarrierExpression>/barrier = 1</BarrierExpression><MaxPerSubscriptionBacklog>",
    )
    cluster = pair(tmp_path, xml)
    try:
        a, b = cluster.node("A"), cluster.node("B")
        on_a, on_b = Consumer(a), Consumer(b)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=10")
        on_b.subscribe(QUEUE, o="max_backlog=10")
        publish(a, TOPIC, [{"id": "m1"}, {"id": "bar", "barrier": 1}])  # type: ignore[arg-type]
        first = on_a.wait_deliveries(1)
        assert bodies(first) == [{"id": "m1"}]
        wait_stat(b, "messages", 2)
        assert on_a.sync() == [] and on_b.sync() == []  # the barrier waits on both
        on_a.ack(QUEUE, first[0][0]["bm"])
        # each instance releases it to its own subscribers once m1 is acknowledged there
        assert bodies(on_a.wait_deliveries(2))[1] == {"id": "bar", "barrier": 1}
        assert bodies(on_b.wait_deliveries(1, timeout=20)) == [{"id": "bar", "barrier": 1}]
        wait_stat(a, "messages", 0)
        wait_stat(b, "messages", 0)
        assert on_a.sync() == [] and on_b.sync() == []
        on_a.close()
        on_b.close()
    finally:
        cluster.stop()


def test_transfer_wait_is_the_measured_ack_time() -> None:
    from ampsclient_server_stub.queues.config import QueueConfig
    from ampsclient_server_stub.queues.model import Queue, QueueSub
    from ampsclient_server_stub.queues.replicated import MAX_WAIT, TRANSFER_WAIT, transfer_wait

    queue = Queue(QueueConfig(name=QUEUE, message_type="json"), decode=json.loads)
    sub = QueueSub("s", "conn", 1, None)
    queue.add(sub)
    queue.measure_acks = True  # as the replicated layer sets it
    assert transfer_wait(queue) == TRANSFER_WAIT  # nothing measured yet
    for n, ack_after in enumerate([0.2] * 40):
        queue.enqueue(f"1|{n + 1}|", b"{}", None, float(n))
        [(_s, msg)] = queue.offer(float(n))
        queue.ack([msg.bookmark], option=None, owner="conn", now=n + ack_after, known=bool)
    assert transfer_wait(queue) == pytest.approx(0.2)
    queue.enqueue("1|99|", b"{}", None, 100.0)
    [(_s, msg)] = queue.offer(100.0)
    queue.ack([msg.bookmark], option="cancel", owner="conn", now=200.0, known=bool)
    assert transfer_wait(queue) == pytest.approx(0.2)  # a cancel is no acknowledgement
    queue.ack([msg.bookmark], option=None, owner="conn", now=10_000.0, known=bool)
    assert transfer_wait(queue) == pytest.approx(0.2)  # not leased: nothing to measure
    for n in range(200):  # consumers that take a minute: capped
        queue.enqueue(f"2|{n + 1}|", b"{}", None, 0.0)
        [(_s, msg)] = queue.offer(0.0)
        queue.ack([msg.bookmark], option=None, owner="conn", now=60.0, known=bool)
    assert transfer_wait(queue) == MAX_WAIT
