"""The batched fast paths give the same bytes and outcomes as the one-by-one paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ampsclient.protocol.header import decode_header
from ampsclient_server_stub.engine.journal import Journal, SequenceOrderError
from ampsclient_server_stub.testing import RecordingSession


def _segment_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("journal-*.journal")))


def test_append_many_matches_append(tmp_path: Path) -> None:
    payloads = [b"x" * n for n in (0, 1, 60, 255, 256, 70_000)]
    one = Journal(tmp_path / "one", fsync="never", journal_size=100_000)
    many = Journal(tmp_path / "many", fsync="never", journal_size=100_000)
    first, ts = many.append_many(
        7, "p", [(seq, f"t{seq % 2}", p) for seq, p in enumerate(payloads, 1)], {"mt": "json"}
    )
    assert first == 1
    for seq, p in enumerate(payloads, 1):
        one.append(
            publisher_id=7,
            sequence=seq,
            topic=f"t{seq % 2}",
            command="p",
            payload=p,
            fields={"mt": "json"},
            timestamp=ts,
        )
    assert many.last_index == one.last_index == len(payloads)
    assert many.last_sequence(7) == len(payloads)
    rows_one = one.read_rows(1, max_records=100)
    rows_many = many.read_rows(1, max_records=100)
    assert rows_one == rows_many
    assert [s.records for s in one.segments()] == [s.records for s in many.segments()]
    one.close()
    many.close()
    assert _segment_bytes(tmp_path / "one") == _segment_bytes(tmp_path / "many")
    reopened = Journal(tmp_path / "many", fsync="never")
    assert reopened.read_rows(1, max_records=100) == rows_one
    assert reopened.find_bookmark(7, 3) == 3
    reopened.close()


def test_append_many_refuses_whole_batch(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", fsync="never")
    journal.append_many(1, "p", [(5, "t", b"a")])
    with pytest.raises(SequenceOrderError):
        journal.append_many(1, "p", [(6, "t", b"b"), (6, "t", b"c")])
    assert journal.last_index == 1
    assert journal.last_sequence(1) == 5
    journal.close()


def test_read_blocks_frames_equal_row_frames(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", fsync="never", journal_size=2_000)
    journal.append_many(1, "p", [(s, "orders", b'{"a":%d}' % s) for s in range(1, 60)])
    journal.append(publisher_id=2, sequence=1, topic="other", command="p", payload=b"{}")
    journal.append(
        publisher_id=2,
        sequence=2,
        topic="orders",
        command="p",
        payload=b"{}",
        fields={"mt": "json", "x": "corr"},
    )
    blocks = journal.read_blocks(1, max_records=1000)
    assert sum(b[3] for b in blocks) == 61
    assert len(blocks) > 1  # spans segments
    journal.close()


def _pub(seq: int, topic: str = "orders") -> bytes:
    """Our HAClient's header shape for odd sequences, the official HAClient's for even ones."""
    if seq % 2:
        return b'{"c":"p","s":%d,"a":"persisted","t":"%s"}{"n":%d}' % (seq, topic.encode(), seq)
    return b'{"c":"p","t":"%s","a":"persisted","s":%d}{"n":%d}' % (topic.encode(), seq, seq)


FLUSH = b'{"c":"flush","cid":"f","a":"processed"}'


def _run(
    tmp_path: Path, batched: bool, payloads: list[bytes] | None = None
) -> tuple[list[bytes], list[bytes], list[tuple[Any, ...]]]:
    from ampsclient_server_stub.engine.broker import Broker
    from ampsclient_server_stub.engine.txlog import TxLog

    journal = Journal(
        tmp_path / ("b" if batched else "s") / str(len(payloads or ())), fsync="never"
    )
    broker = Broker(txlog=TxLog(journal))
    pub_s, sub_s = RecordingSession(), RecordingSession()
    pub = broker.connect(pub_s)
    sub = broker.connect(sub_s)
    broker.handle(pub, b'{"c":"logon","cid":"1","client_name":"pub"}')
    broker.handle(sub, b'{"c":"logon","cid":"1","client_name":"sub"}')
    broker.handle(sub, b'{"c":"subscribe","cid":"s","t":"orders"}')
    broker.handle(sub, b'{"c":"subscribe","cid":"r","t":"orders","bm":"0"}')
    if payloads is None:
        payloads = [_pub(1), _pub(2), _pub(2), _pub(3, "other"), _pub(4), FLUSH, _pub(5), _pub(3)]
        payloads.append(_pub(6))
    if batched:
        broker.handle_many(pub, payloads)
    else:
        for p in payloads:
            broker.handle(pub, p)
    broker.on_durable(journal.sync())
    rows = [r[1:3] + r[4:8] for r in journal.read_rows(1, max_records=100)]
    journal.close()
    return pub_s.sent, sub_s.sent, rows


def test_handle_many_same_outcome_as_handle(tmp_path: Path) -> None:
    one = _run(tmp_path, batched=False)
    many = _run(tmp_path, batched=True)
    assert many[2] == one[2]
    assert [r[1] for r in many[2]] == [1, 2, 3, 4, 5, 6]
    for sid in (b'"sids":"s"', b'"sids":"r"'):  # each subscription: same frames, same order
        assert [f for f in many[1] if sid in f] == [f for f in one[1] if sid in f]
    assert len([f for f in many[1] if b'"sids":"r"' in f]) == 5
    acks = [p for p in many[0] if b'"persisted"' in p]
    assert acks and b'"s":6' in acks[-1]
    assert one[0][-1] == many[0][-1]


def test_both_client_header_shapes_take_the_batch_path() -> None:
    from ampsclient_server_stub.engine.wire import parse_seq_publish as parse

    for seq in (7, 8):  # ours, the official client's
        payload = _pub(seq, "a/b")
        assert parse(payload) == ("a/b", seq, payload.index(b"}") + 1)
    for other in (
        b'{"c":"p","t":"orders"}{"n":1}',  # no sequence
        b'{"c":"p","t":"or\\"ders","a":"persisted","s":9}{}',  # escaped quote in the topic
        b'{"c":"p","t":"orders","a":"persisted","s":9,"x":"corr"}{}',  # more fields
        b'{"c":"p","t":"orders","a":"persisted","s":9x}{}',
    ):
        assert parse(other) is None


FLUSH_ACK = b'{"c":"ack","cid":"f","a":"processed","status":"success"}'


def _plain(n: int, topic: str = "orders") -> bytes:
    return b'{"c":"p","t":"%s"}{"n":%d}' % (topic.encode(), n)


def test_plain_publish_runs_same_outcome_as_handle(tmp_path: Path) -> None:
    """Runs of plain publishes are journaled as one batch: the same records (client-name
    sequence numbers continuing across sequenced publishes), deliveries and acks."""
    payloads = [_plain(1), _plain(2), _plain(3, "other"), _plain(4)]
    payloads += [_pub(10), _pub(11), _plain(5), _plain(6), FLUSH, _plain(7)]
    payloads += [b'{"c":"p","t":"orders","x":"corr"}{"n":8}', _plain(9), _plain(10)]
    one = _run(tmp_path, batched=False, payloads=payloads)
    many = _run(tmp_path, batched=True, payloads=payloads)
    assert many[2] == one[2]
    assert [r[1] for r in many[2]] == [1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17]
    for sid in (b'"sids":"s"', b'"sids":"r"'):
        assert [f for f in many[1] if sid in f] == [f for f in one[1] if sid in f]
    assert len([f for f in many[1] if b'"sids":"s"' in f]) == 11  # "other" has no subscriber
    # acks: the same processed ack for the flush, and cumulative persisted acks that cover
    # both sequenced publishes (a batch is acknowledged once, so the counts differ; plain
    # publishes ask for no ack, and whether the last ack's s also counts the plain ones'
    # sequence numbers depends on when the group commit lands)
    for sent in (one[0], many[0]):
        assert [p for p in sent if b'"cid":"f"' in p] == [FLUSH_ACK]
        persisted = [decode_header(p)[0] for p in sent if b'"persisted"' in p]
        assert persisted and all(a["status"] == "success" for a in persisted)
        assert int(persisted[-1]["s"]) >= 11


def test_plain_publish_parse() -> None:
    from ampsclient_server_stub.engine.wire import parse_plain_publish as parse

    payload = _plain(1, "a/b")
    assert parse(payload) == ("a/b", None, payload.index(b"}") + 1)
    for other in (
        _pub(7),
        _pub(8),  # the official sequenced shape starts the same way
        b'{"c":"p","t":"or\\"ders"}{}',
        b'{"c":"p","t":"orders","x":"corr"}{}',
        b'{"c":"p","t":"\xff"}{}',
    ):
        assert parse(other) is None


def _time_replay(tmp_path: Path, bookmark: str, options: str, *, rows: bool) -> list[bytes]:
    """The frames a bookmark replay sends (by the block path, or with ``rows`` by the
    record-by-record reference path), with the replay's completed ack last."""
    from ampsclient_server_stub.engine import replay_scheduler
    from ampsclient_server_stub.engine.broker import Broker
    from ampsclient_server_stub.engine.txlog import TxLog

    journal = Journal(tmp_path / ("rows" if rows else "blocks"), fsync="never")
    base = 1_764_288_000_000_000  # 2025-11-28T00:00:00Z
    for seq in range(1, 41):  # two seconds, two publishers, an odd record in the middle
        fields: dict[str, str | int] = {"mt": "json"}
        if seq == 17:
            fields["x"] = "corr"
        journal.append(
            publisher_id=1 + seq % 2,
            sequence=seq,
            topic="other" if seq == 23 else "orders",
            command="p",
            payload=b'{"n":%d}' % seq,
            fields=fields,
            timestamp=base + seq * 50_000,
        )
    journal.sync()
    broker = Broker(txlog=TxLog(journal))
    session = RecordingSession()
    conn = broker.connect(session)
    broker.handle(conn, b'{"c":"logon","cid":"1","client_name":"sub"}')
    if rows:
        scheduler = replay_scheduler.ReplayScheduler
        original = scheduler._send_blocks
        scheduler._send_blocks = scheduler._send_rows  # type: ignore[method-assign]
    try:
        broker.handle(
            conn,
            b'{"c":"subscribe","cid":"r","sub_id":"r","t":"orders","bm":"%s","o":"%s",'
            b'"a":"completed"}' % (bookmark.encode(), options.encode()),
        )
    finally:
        if rows:
            scheduler._send_blocks = original  # type: ignore[method-assign]
    journal.close()
    return [f for f in session.sent if b'"sids":"r"' in f or b'"completed"' in f]


@pytest.mark.parametrize(
    ("bookmark", "options"),
    [
        ("[0:20251128T000001.000000Z)", "timestamp"),  # records 1-19 (seq 20 is at 1.0 s)
        ("[0:20251128T000001.000000Z]", "timestamp"),  # and seq 20
        ("[0:20251128T000001.000000Z)", ""),
        ("(20251128T000000.500000Z:20251128T000003.000000Z)", "timestamp"),
        ("[0:2|31|]", "timestamp"),
    ],
)
def test_timed_and_time_bounded_replays_take_the_block_path(
    tmp_path: Path, bookmark: str, options: str
) -> None:
    """The ``timestamp`` option and a range ending at a time are framed from the journal's
    bytes, the same frames and end as the record-by-record path."""
    from ampsclient_server_stub.engine.txlog import Replay

    calls = 0
    block_frames = Replay.block_frames

    def counting(self: Any, block: Any, out: list[bytes]) -> Any:
        nonlocal calls
        calls += 1
        return block_frames(self, block, out)

    Replay.block_frames = counting  # type: ignore[method-assign]
    try:
        fast = _time_replay(tmp_path, bookmark, options, rows=False)
    finally:
        Replay.block_frames = block_frames  # type: ignore[method-assign]
    slow = _time_replay(tmp_path, bookmark, options, rows=True)
    assert calls > 0
    assert fast == slow
    assert b'"completed"' in fast[-1]
    seqs = [int(decode_header(f)[0]["bm"].split("|")[1]) for f in fast[:-1]]
    assert 23 not in seqs and seqs == sorted(seqs)
    if options:
        stamps = [decode_header(f)[0]["ts"] for f in fast[:-1]]
        assert stamps[0] == f"20251128T000000.{seqs[0] * 50_000:06d}Z"
    if bookmark.endswith("000001.000000Z)"):
        assert seqs[-1] == 19
    elif bookmark.endswith("000001.000000Z]"):
        assert seqs[-1] == 20
    assert 17 in seqs or seqs[0] > 17  # the record with a correlation id (the row path)
