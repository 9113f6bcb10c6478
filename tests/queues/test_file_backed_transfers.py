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
has no pending transfers and is therefore ignored on a replicated queue.

Then, in process, a transfer that arrives before its message has reached the instance at
all (see that test's docstring for why in process)."""

from __future__ import annotations

import dataclasses
import json
import logging
import struct
import zlib
from pathlib import Path

import pytest
from _queue_support import Consumer, publish
from _replicated_support import QUEUE, TOPIC, http, pair, queue_xml, stats, wait_stat

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.config_model import ReplicationConfig
from ampsclient_server_stub.engine.broker import Broker
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.txlog import TxLog
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.queues.plug import start_queues
from ampsclient_server_stub.replication.apply import ReplicatedRecord, apply_replicated
from ampsclient_server_stub.replication.rules import PATH_FIELD, encode_path
from ampsclient_server_stub.testing import RecordingSession

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


class Instance:
    """Instance ``A`` in process: a :class:`Broker` on a real journal in ``data_dir``, with
    replication configured (so ``work`` is a replicated queue) and a queue subscriber. The
    records of the other instances are applied the way the replication link applies them
    (:func:`apply_replicated`)."""

    def __init__(self, data_dir: Path, *, deferred_ack_expiration: float = 86400.0) -> None:
        config = dataclasses.replace(
            default_config(tcp_port=0, ws_port=0, data_dir=data_dir, name="A"),
            queues=(
                QueueConfig(
                    name=QUEUE,
                    message_type="json",
                    underlying=(TOPIC,),
                    max_per_subscription_backlog=10,
                    file_backed_metadata=True,
                    deferred_ack_expiration=deferred_ack_expiration,
                ),
            ),
            replication=ReplicationConfig(),
        )
        self.journal = Journal(data_dir / "journal", name="A", fsync="never")
        self.broker = Broker(config, txlog=TxLog(self.journal), queues=start_queues)
        assert self.broker.queues is not None
        self.queue = self.broker.queues.queues[("json", QUEUE)]
        self.session = RecordingSession()
        conn = self.broker.connect(self.session)
        self.broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": "w"}))
        self.broker.handle(
            conn,
            encode_header({"c": "subscribe", "t": QUEUE, "sub_id": "s", "o": "max_backlog=10"}),
        )

    def publish(self, client: str, sequence: int, doc: dict[str, int]) -> None:
        """A client's publish received here."""
        conn = self.broker.connect(RecordingSession())
        self.broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": client}))
        header = encode_header({"c": "p", "t": TOPIC, "s": sequence})
        self.broker.handle(conn, header + json.dumps(doc).encode())

    def owned(self) -> int:
        assert self.broker.queues is not None
        owned: int = self.broker.queues.statistics()[QUEUE]["owned"]
        return owned

    def close(self) -> None:
        self.broker.close()  # the queue's file is written (when it changed)
        self.journal.close()


@pytest.mark.parametrize(
    "restart",
    [
        "none",
        "from the file",
        "without it",
    ],
)
def test_a_transfer_that_arrives_before_its_message(
    tmp_path: Path, restart: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The other half of "not in the queue yet": the message has not reached this instance.

    In process (``Broker`` objects on a real journal): across processes the transfer reaches
    an instance ahead of its message only when the two travel different paths, whose timing a
    test cannot force. The story: publisher ``pub`` publishes M to ``C`` (its owner), ``C``
    grants M to ``B``; the transfer reaches ``A``, M does not (yet); ``pub`` fails over to
    ``A`` and replays M there, so on ``A`` M's own origin is ``A``. The transfer applies to
    M when it enters, whether ``A`` restarted in between (from the file written while the
    transfer was pending) or not: ``B`` owns M and ``A``'s subscriber never gets it. Without
    the file (rebuilt from the transaction log) too: the queue is empty, but its
    ``queues.ack`` point, where that rebuild starts, stays at the pending transfer's record."""
    bookmark = f"{publisher_id_for('pub')}|1|"
    a = Instance(tmp_path)
    transfer = _transfer(bookmark)
    assert apply_replicated(a.broker, transfer).record is not None
    assert bookmark not in a.queue.messages
    if restart != "none":
        a.close()  # the file was written after the transfer was applied: P is past it
        cache = tmp_path / "journal" / "A.work.json.queue.cache"
        assert cache.exists()
        if restart == "without it":
            cache.unlink()
        with caplog.at_level(logging.INFO, logger="ampsclient_server_stub.queues.metadata_file"):
            a = Instance(tmp_path)
    a.publish("pub", 1, {"n": 1})  # M, replayed to A by its publisher after a failover
    try:
        assert bookmark in a.queue.messages
        assert a.queue.messages[bookmark].owner == "B"
        assert a.owned() == 0
        assert a.session.frames("p") == []  # handled to the end: A delivered nothing
        a.publish("pub", 2, {"n": 2})  # a message of A's own: delivered (the marker)
        assert [json.loads(body)["n"] for _h, body in a.session.frames("p")] == [2]
    finally:
        a.close()
    if restart == "from the file":  # how the restart rebuilt the queue
        assert "0 message(s) from A.work.json.queue.cache" in caplog.text
        assert "1 transfer(s) pending" in caplog.text
    elif restart == "without it":
        assert "rebuilt from the transaction log" in caplog.text


def _transfer(bookmark: str) -> ReplicatedRecord:
    """Instance ``C``'s transfer of ``bookmark`` to ``B``, as it reaches ``A``."""
    return ReplicatedRecord(
        publisher_id_for("C/queues"),
        1,
        "sow_delete",
        QUEUE,
        b"",
        {
            "mt": "json",
            "bm": bookmark,
            "qown": "B",
            "qfrom": "C",
            PATH_FIELD: encode_path([("C", "C"), ("A", "A")]),
        },
    )


def test_a_pending_transfer_pins_the_ack_point_until_deferred_ack_expiration(
    tmp_path: Path,
) -> None:
    """The ``queues.ack`` point stays at a pending transfer's record for
    ``DeferredAckExpiration`` (a transfer whose message never comes does not pin the
    transaction log for ever); after that the transfer itself still waits for its message."""
    bookmark = f"{publisher_id_for('pub')}|1|"
    for expiration, pinned in ((86400.0, True), (0.0, False)):
        base = tmp_path / str(expiration)
        a = Instance(base, deferred_ack_expiration=expiration)
        try:
            record = apply_replicated(a.broker, _transfer(bookmark)).record
            assert record is not None
            replica = a.broker.queues.replica if a.broker.queues is not None else None
            assert replica is not None
            assert replica.oldest_pending_index(a.queue) == (record.index if pinned else None)
            assert replica.pending(a.queue) == {bookmark: "B"}
            a.publish("pub", 1, {"n": 1})
            assert a.queue.messages[bookmark].owner == "B"
            assert replica.oldest_pending_index(a.queue) is None and not replica.pending(a.queue)
        finally:
            a.close()
