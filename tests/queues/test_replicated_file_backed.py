"""``FileBackedMetadata`` on a replicated queue (a hot-hot pair of real server processes):
after a restart from the ``.queue.cache`` file, ownership transferred before the file was
written stands (the file keeps each message's owner), acknowledgements replicated before it
stand, and the restarted instance never delivers a message it no longer owns."""

from __future__ import annotations

from pathlib import Path

import pytest
from _queue_support import Consumer, bodies, publish
from _replicated_support import QUEUE, TOPIC, pair, queue_xml, stats, wait_stat

pytestmark = pytest.mark.integration

FILE_BACKED = queue_xml().replace(
    "<MaxPerSubscriptionBacklog>",
    "<FileBackedMetadata>enabled</FileBackedMetadata><MaxPerSubscriptionBacklog>",
)


def test_owners_and_acks_come_back_from_the_file(tmp_path: Path) -> None:
    cluster = pair(tmp_path, FILE_BACKED)
    try:
        a, b = cluster.node("A"), cluster.node("B")
        publish(a, TOPIC, [{"id": f"a{i}"} for i in range(6)])  # type: ignore[arg-type]
        wait_stat(b, "messages", 6)
        on_b = Consumer(b)  # type: ignore[arg-type]
        on_b.subscribe(QUEUE, o="max_backlog=10")
        got = on_b.wait_deliveries(6, timeout=20)  # owner A has no subscriber: transferred
        assert sorted(d["id"] for d in bodies(got)) == [f"a{i}" for i in range(6)]
        wait_stat(b, "transferred_in", 6)
        on_b.ack(QUEUE, ",".join(h["bm"] for h, _ in got[:4]))
        wait_stat(a, "messages", 2)
        a.stop()  # graceful: A's file is written with the owners (B) of the two left
        cache = a.journal_dir / "A.work.json.queue.cache"
        assert cache.exists()
        a.start()
        cluster.wait_streaming()
        assert any("from A.work.json.queue.cache" in line for line in a.log_lines())
        after = stats(a)
        assert (after["messages"], after["owned"]) == (2, 0)
        on_a = Consumer(a)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=10")
        assert on_a.sync() == []  # B owns them: A never delivers them
        on_b.ack(QUEUE, ",".join(h["bm"] for h, _ in got[4:]))
        wait_stat(a, "messages", 0)
        assert on_a.sync() == [] and on_b.sync() == []
        on_a.close()
        on_b.close()
    finally:
        cluster.stop()
