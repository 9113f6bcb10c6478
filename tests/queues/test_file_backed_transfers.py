"""``FileBackedMetadata`` on a replicated queue: an ownership transfer that is still pending
when the ``.queue.cache`` file is written (its message is not in the queue yet) holds after a
restart from that file.

A hot-hot pair of real server processes. ``A`` has ``TargetQueueDepth`` 1000, ``B`` none.
1001 messages are published on ``A`` (so ``A`` owns them all): on ``A`` the last one waits
beyond the target depth, outside the queue. ``A`` stops; ``B`` takes every message over by
proxied transfer (one transfer record naming all 1001) and its consumer leases them all. ``A``
comes back with no clients and receives the transfer: the 1000 active messages change owner
at once, the waiting one's transfer stays pending until it becomes active. ``A`` stops
(graceful: the file is written, with that transfer pending, at a journal position past the
transfer record) and starts again from the file: its scan starts after the transfer record,
so only the file can tell that ``B`` owns the waiting message. Then ``B`` acknowledges the
first message, the waiting one becomes active on ``A``: its owner must be ``B`` (``A`` owns
nothing), and ``A``'s consumer must never get it (``B``'s consumer holds it; without the
transfer ``A`` would deliver it a second time, a duplicate AMPS does not produce).

The same run with the file deleted before the last start (rebuilt from the transaction log)
ends with the same owners; so does one with the file rewritten in the first format, which
has no pending transfers and is therefore ignored on a replicated queue."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from _queue_support import Consumer, publish
from _replicated_support import QUEUE, TOPIC, http, pair, queue_xml, stats, wait_stat

pytestmark = pytest.mark.integration

TOTAL = 1001
"""One more than ``A``'s ``TargetQueueDepth``: the last message waits on ``A``."""

LAST = TOTAL - 1


def _xml(*, depth: bool) -> str:
    target = "<TargetQueueDepth>1000</TargetQueueDepth>" if depth else ""
    return queue_xml(backlog=2000).replace(
        "<MaxPerSubscriptionBacklog>",
        f"<FileBackedMetadata>enabled</FileBackedMetadata>{target}<MaxPerSubscriptionBacklog>",
    )


def first_format(path: Path) -> None:
    """Rewrite a metadata file in the first format (``AQC1``: magic, P, entry count, the
    entries, CRC-32), dropping its pending transfers."""
    body = path.read_bytes()[:-4]
    magic, position, count, _pending = struct.unpack_from(">4sQII", body)
    assert magic == b"AQC2"
    offset = struct.calcsize(">4sQII")
    start = offset
    for _ in range(count):
        _index, size = struct.unpack_from(">QH", body, offset)
        offset += struct.calcsize(">QH") + size
    old = struct.pack(">4sQI", b"AQC1", position, count) + body[start:offset]
    path.write_bytes(old + struct.pack(">I", zlib.crc32(old)))


@pytest.mark.parametrize("restart", ["from the file", "without it", "first format"])
def test_a_transfer_pending_when_the_file_is_written_holds_after_a_restart(
    tmp_path: Path, restart: str
) -> None:
    cluster = pair(tmp_path, _xml(depth=True), b_queue=_xml(depth=False))
    try:
        a, b = cluster.node("A"), cluster.node("B")
        publish(a, TOPIC, [{"n": n} for n in range(TOTAL)])  # type: ignore[arg-type]
        wait_stat(b, "messages", TOTAL)
        s = stats(a)
        assert (s["messages"], s["inactive_message_count"], s["owned"]) == (1000, 1, 1000)

        a.stop()
        assert http(b, f"/amps/administrator/queues/{QUEUE}/enable_proxied_transfer")["result"]
        wait_stat(b, "owned", TOTAL)  # taken over: one transfer record for all of them
        on_b = Consumer(b)  # type: ignore[arg-type]
        on_b.subscribe(QUEUE, o=f"max_backlog={TOTAL}")
        held = on_b.wait_deliveries(TOTAL, timeout=30)
        marks = {json.loads(body)["n"]: hdr["bm"] for hdr, body in held}
        assert sorted(marks) == list(range(TOTAL))

        a.start()  # no clients: it receives the transfer record from B
        cluster.wait_streaming()
        wait_stat(a, "owned", 0)  # the 1000 active ones are B's now; the waiting one pending
        assert stats(a)["inactive_message_count"] == 1
        assert http(b, f"/amps/administrator/queues/{QUEUE}/disable_proxied_transfer")["result"]
        a.stop()  # graceful: the file is written past the transfer record
        cache = a.journal_dir / "A.work.json.queue.cache"
        assert cache.exists()
        if restart == "without it":
            cache.unlink()
        elif restart == "first format":
            first_format(cache)
        a.start()
        cluster.wait_streaming()
        s = stats(a)
        assert (s["messages"], s["inactive_message_count"], s["owned"]) == (1000, 1, 0)

        on_a = Consumer(a)  # type: ignore[arg-type]
        on_a.subscribe(QUEUE, o="max_backlog=10")
        on_b.ack(QUEUE, marks[0])  # the first leaves the queue: the waiting one becomes active
        wait_stat(a, "inactive_message_count", 0)
        assert on_a.sync() == []  # A delivers none of B's (B's consumer holds them all)
        s = stats(a)
        assert (s["messages"], s["owned"]) == (1000, 0)  # B owns the newly active one

        on_b.ack(QUEUE, ",".join(marks[n] for n in range(1, TOTAL)))
        wait_stat(a, "messages", 0)
        assert on_a.sync() == []  # never: the message became B's before it entered A's queue
        assert on_b.sync() == []
        on_a.close()
        on_b.close()
        log = "\n".join(a.log_lines())  # how the last start rebuilt the queue
        if restart == "from the file":  # the transfer came back from the file
            assert "from A.work.json.queue.cache (journal index" in log
            assert "1 transfer(s) pending" in log
        elif restart == "without it":
            assert "no A.work.json.queue.cache: rebuilt from the transaction log" in log
        else:
            assert "has the first format" in log and "rebuilt from the transaction log" in log
    finally:
        cluster.stop()
