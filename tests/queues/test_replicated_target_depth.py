"""``TargetQueueDepth`` on a replicated queue (a hot-hot pair of real server processes):
each instance keeps its own active set; a waiting message gets its owner when it becomes
active; an acknowledgement made on the other instance removes a message whether it is active
or still waiting there; every message is processed once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _queue_support import Consumer, bodies, publish
from _replicated_support import QUEUE, TOPIC, pair, queue_xml, stats, wait_stat

pytestmark = pytest.mark.integration

TOTAL = 1100


def xml() -> str:
    return queue_xml(backlog=100).replace(
        "<MaxPerSubscriptionBacklog>",
        "<TargetQueueDepth>1000</TargetQueueDepth><MaxPerSubscriptionBacklog>",
    )


def test_each_instance_keeps_its_active_set_and_acks_reach_the_waiting(tmp_path: Path) -> None:
    cluster = pair(tmp_path, xml())
    try:
        a, b = cluster.node("A"), cluster.node("B")
        publish(a, TOPIC, [{"n": n} for n in range(TOTAL)])  # type: ignore[arg-type]
        for node in (a, b):
            wait_stat(node, "messages", 1000)
            s = stats(node)
            assert (s["inactive_message_count"], s["target_queue_depth"]) == (TOTAL - 1000, 1000)
        assert stats(a)["owned"] == 1000 and stats(b)["owned"] == 0

        # an ack made on B of a message waiting on both (its bookmark from a replay) takes it
        # out on A too: it is never delivered
        replay = Consumer(b)  # type: ignore[arg-type]
        replay.subscribe(TOPIC, sub_id="r", bm="0")
        replay.sync()
        marks = {json.loads(body)["n"]: h["bm"] for h, body in replay.deliveries}
        assert len(marks) == TOTAL
        replay.close()
        on_b = Consumer(b)  # type: ignore[arg-type]
        on_b.ack(QUEUE, marks[TOTAL - 1], a="processed")
        wait_stat(a, "inactive_message_count", TOTAL - 1000 - 1)
        assert stats(b)["inactive_message_count"] == TOTAL - 1000 - 1

        # A's consumer takes 150 and acks them: on B those acks remove 150 active messages,
        # and the 100 waiting ones become active there (owned by A, the instance published to)
        on_a = Consumer(a)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=100")
        first = on_a.wait_deliveries(100)
        on_a.ack(QUEUE, ",".join(h["bm"] for h, _ in first))
        second = on_a.wait_deliveries(150)[100:]
        on_a.ack(QUEUE, ",".join(h["bm"] for h, _ in second[:50]))
        # (the first batch alone empties B's waiting ones: wait for the second batch too)
        wait_stat(b, "messages", TOTAL - 151)
        assert stats(b)["inactive_message_count"] == 0
        assert stats(b)["owned"] == 0  # the newly active ones are A's too
        on_a.close()  # 50 leased come back on A

        # B's consumer: A has none now, so B asks for them (ownership transfer) and gets the
        # rest, in order, each once; acks made on B empty A, active and waiting alike
        on_b.subscribe(QUEUE, o="max_backlog=100")
        got: list[int] = []
        while len(got) < TOTAL - 151:
            batch = on_b.wait_deliveries(len(got) + 1, timeout=30)[len(got) :]
            got += [d["n"] for d in bodies(batch)]
            on_b.ack(QUEUE, ",".join(h["bm"] for h, _ in batch))
        assert sorted(got) == list(range(150, TOTAL - 1))  # the one acked early: never
        assert len(set(got)) == len(got)
        for node in (a, b):
            wait_stat(node, "messages", 0)
            wait_stat(node, "inactive_message_count", 0)
        assert stats(b)["transferred_in"] == TOTAL - 151
        assert on_b.sync() == []
        on_b.close()
    finally:
        cluster.stop()
