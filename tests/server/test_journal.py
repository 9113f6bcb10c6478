"""Tests for the journal storage engine (ampsclient_server_stub.engine.journal) on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub.engine.journal import (
    Journal,
    JournalClosedError,
    JournalInUseError,
    JournalRecord,
    SequenceOrderError,
)
from ampsclient_server_stub.journal_tool import (
    compress_journal,
    dump_records,
    journal_info,
    prune_journal,
)

REPO = Path(__file__).resolve().parents[2]
PUBS = [publisher_id_for(name) for name in ("alpha", "beta", "gamma")]
T0 = 1_700_000_000_000_000  # microseconds
COMMANDS = ("p", "delta_publish", "sow_delete")


def spec(index: int) -> dict[str, Any]:
    """Deterministic append arguments for the record that will get ``index``."""
    fields: dict[str, str | int] = {"k": f"key{index % 5}", "n": index}
    if index % 3 == 2:
        fields["filter"] = f"/id = {index}"
    return {
        "publisher_id": PUBS[index % 3],
        "sequence": index,
        "topic": f"orders{index % 4}",
        "command": COMMANDS[index % 3],
        "payload": (f'{{"id":{index}}}' + "x" * (index * 7 % 90)).encode(),
        "fields": fields,
        "timestamp": T0 + index * 1000,
    }


def check(record: JournalRecord) -> None:
    want = spec(record.index)
    assert record.publisher_id == want["publisher_id"]
    assert record.sequence == want["sequence"]
    assert record.topic == want["topic"]
    assert record.command == want["command"]
    assert record.payload == want["payload"]
    assert dict(record.fields) == want["fields"]
    assert record.timestamp == want["timestamp"]
    assert record.bookmark == f"{want['publisher_id']}|{want['sequence']}|"


def fill(journal: Journal, upto: int) -> None:
    for index in range(journal.last_index + 1, upto + 1):
        record = journal.append(**spec(index))
        assert record.index == index


def read_all(journal: Journal, start: int = 1, **kw: Any) -> list[JournalRecord]:
    out: list[JournalRecord] = []
    index = start
    while True:
        batch = journal.read(index, **kw)
        if not batch:
            return out
        out.extend(batch)
        index = batch[-1].index + 1


# --------------------------------------------------------------------------------------------
# append / read


def test_round_trip_across_rotations(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=2048) as journal:
        assert (journal.first_index, journal.last_index, journal.durable_index) == (1, 0, 0)
        fill(journal, 600)
        assert journal.durable_index == 0  # nothing synced yet
        records = read_all(journal)  # readable before flush/sync
        assert [r.index for r in records] == list(range(1, 601))
        for record in records:
            check(record)
        assert journal.sync() == 600
        assert journal.durable_index == 600
        stats = journal.statistics()
        assert stats["segments"] > 10
        assert stats["records"] == 600
        assert stats["rotations"] == stats["segments"] - 1
        assert stats["pending_seals"] == 0
        assert (journal.first_index, journal.last_index) == (1, 600)
    names = sorted(p.name for p in tmp_path.iterdir())
    segments = [n for n in names if n.endswith(".journal")]
    assert segments == sorted(segments)  # names sort by first index
    assert segments[0] == "journal-00000000000000000001.journal"
    assert len([n for n in names if n.endswith(".index")]) == len(segments) - 1


def test_read_bounds(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=4096) as journal:
        fill(journal, 200)
        assert [r.index for r in journal.read(10, max_records=5)] == [10, 11, 12, 13, 14]
        assert journal.read(10, max_records=0) == []
        assert journal.read(201) == []
        assert [r.index for r in journal.read(-5, max_records=2)] == [1, 2]
        # max_bytes: frames of a batch never exceed it, but at least one record comes back
        assert len(journal.read(1, max_bytes=1)) == 1
        for limit in (100, 500, 3000, 10_000):
            batch = journal.read(7, max_records=1000, max_bytes=limit)
            size = sum(40 + len(r.payload) + 60 for r in batch)  # rough; exact check below
            assert batch and batch[0].index == 7
            assert size > 0
        # exact: the on-disk size of a batch (sum of frame sizes) stays within max_bytes
        infos = journal.segments()
        total = sum(i.data_bytes for i in infos)
        everything = journal.read(1, max_records=10_000, max_bytes=total)
        assert len(everything) == 200
        fewer = journal.read(1, max_records=10_000, max_bytes=total - 1)
        assert len(fewer) == 199
        # batches chained by index cover everything exactly once, across segments
        chained = read_all(journal, max_records=7, max_bytes=900)
        assert [r.index for r in chained] == list(range(1, 201))


def test_reopen_continues_indexes_and_sequences(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=3000) as journal:
        fill(journal, 150)
        sequences = journal.last_sequences()
    assert sequences == {PUBS[0]: 150, PUBS[1]: 148, PUBS[2]: 149}
    with Journal(tmp_path, journal_size=3000) as journal:
        assert (journal.first_index, journal.last_index) == (1, 150)
        assert journal.durable_index == 150
        assert journal.last_sequences() == sequences
        assert journal.last_sequence(PUBS[1]) == 148
        assert journal.last_sequence(12345) == 0
        with pytest.raises(SequenceOrderError):
            journal.append(**spec(148))  # PUBS[1], sequence 148 already stored
        fill(journal, 160)
        assert journal.last_index == 160
    with Journal(tmp_path, journal_size=3000) as journal:
        for record in read_all(journal):
            check(record)
        assert journal.last_index == 160


def test_timestamps_never_go_back_and_default_to_now(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        a = journal.append(publisher_id=1, sequence=1, topic="t", command="p", payload=b"a")
        b = journal.append(
            publisher_id=1, sequence=2, topic="t", command="p", payload=b"b", timestamp=5
        )
        assert a.timestamp > 1_600_000_000_000_000
        assert b.timestamp == a.timestamp  # raised to the previous record's
        assert b.fields == {}


def test_append_validation_and_closed(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    with pytest.raises(ValueError, match="command"):
        journal.append(publisher_id=1, sequence=1, topic="t", command="sow", payload=b"")
    with pytest.raises(ValueError):
        journal.append(publisher_id=-1, sequence=1, topic="t", command="p", payload=b"")
    with pytest.raises(ValueError):
        journal.append(publisher_id=2**64, sequence=1, topic="t", command="p", payload=b"")
    journal.append(
        publisher_id=1,
        sequence=5,
        topic="t",
        command="p",
        payload=bytearray(b"x"),  # type: ignore[arg-type]
    )
    with pytest.raises(SequenceOrderError):
        journal.append(publisher_id=1, sequence=5, topic="t", command="p", payload=b"")
    assert journal.read(1)[0].payload == b"x"
    journal.close()
    journal.close()  # idempotent
    assert journal.closed
    with pytest.raises(JournalClosedError):
        journal.append(publisher_id=1, sequence=6, topic="t", command="p", payload=b"")
    with pytest.raises(JournalClosedError):
        journal.read(1)


def test_second_writer_is_refused(tmp_path: Path) -> None:
    with Journal(tmp_path):
        with pytest.raises(JournalInUseError):
            Journal(tmp_path)
        with Journal(tmp_path, read_only=True) as reader:  # inspection is allowed
            assert reader.last_index == 0
    Journal(tmp_path).close()  # the lock is released on close


def test_sync_policies_and_fsync_counts(tmp_path: Path) -> None:
    with Journal(tmp_path / "never", fsync="never", journal_size=1024) as journal:
        fill(journal, 100)
        assert journal.sync() == 100
        assert journal.statistics()["fsyncs"] == 0
    with Journal(tmp_path / "always", fsync="always") as journal:
        fill(journal, 100)
        journal.flush()
        assert journal.durable_index == 0  # flushed to the OS, not fsynced
        assert journal.sync() == 100
        assert journal.sync() == 100  # nothing new: no fsync
        assert journal.statistics()["fsyncs"] == 1
    with pytest.raises(ValueError):
        Journal(tmp_path / "bad", fsync="sometimes")  # type: ignore[arg-type]


def test_write_through_is_the_never_policys_commit_without_a_thread(tmp_path: Path) -> None:
    """``write_through`` writes the buffer out and makes the last index durable under the
    ``never`` policy; it declines (``None``) what only ``sync`` does: an fsync policy,
    segments awaiting their seal, a closed journal."""
    with Journal(tmp_path / "never", fsync="never", journal_size=64 * 1024) as journal:
        fill(journal, 50)
        size = journal.statistics()["syncs"]
        assert journal.write_through() == 50 == journal.durable_index
        assert journal.statistics()["syncs"] == size + 1
        # on disk: another reader of the directory sees every record
        with Journal(tmp_path / "never", read_only=True) as reader:
            assert [r.index for r in read_all(reader)] == list(range(1, 51))
    with Journal(tmp_path / "seals", fsync="never", journal_size=1024) as journal:
        fill(journal, 10)  # one rotation: its seal is left to sync
        assert journal.statistics()["pending_seals"] == 1
        assert journal.write_through() is None
        assert journal.sync() == 10
        fill(journal, 11)
        assert journal.statistics()["pending_seals"] == 0
        assert journal.write_through() == 11
    assert journal.write_through() is None  # closed
    with Journal(tmp_path / "always", fsync="always") as journal:
        fill(journal, 10)
        assert journal.write_through() is None
        assert journal.durable_index == 0


def test_group_commit_from_a_worker_thread(tmp_path: Path) -> None:
    """Appends go on while another thread syncs; every sync covers all appends before it."""
    journal = Journal(tmp_path, fsync="always", journal_size=64 * 1024)
    stop = threading.Event()
    reported: list[tuple[int, int]] = []  # (last_index seen before sync, durable returned)
    errors: list[BaseException] = []

    def syncer() -> None:
        try:
            while not stop.is_set():
                before = journal.last_index
                reported.append((before, journal.sync()))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=syncer)
    thread.start()
    try:
        fill(journal, 3000)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert journal.sync() == 3000
    durables = [d for _, d in reported]
    assert durables == sorted(durables)
    assert all(d >= before for before, d in reported)
    stats = journal.statistics()
    assert stats["fsyncs"] < 3000  # grouped
    journal.close()
    with Journal(tmp_path) as again:
        assert [r.index for r in read_all(again)] == list(range(1, 3001))


# --------------------------------------------------------------------------------------------
# find_bookmark / find_time: property test against a brute-force scan

LONG_RUN: list[tuple[Any, ...]] = [
    ("append", i % 4, 1 + i % 3, (i // 3) % 3, b"x" * (i % 50)) for i in range(300)
]
LONG_RUN[60:60] = [("reopen",)]
LONG_RUN[150:150] = [("compress",)]
LONG_RUN[200:200] = [("reopen",)]
LONG_RUN[250:250] = [("prune",)]

_op = st.one_of(
    st.tuples(
        st.just("append"),
        st.integers(0, 3),  # publisher
        st.integers(1, 3),  # sequence step
        st.integers(0, 2),  # timestamp step (0: same microsecond)
        st.binary(max_size=60),
    ),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("compress")),
    st.tuples(st.just("prune")),
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(_op, min_size=1, max_size=120), size=st.sampled_from([150, 400, 100_000]))
@example(ops=LONG_RUN, size=150)
@example(ops=LONG_RUN, size=1000)
def test_find_matches_brute_force(ops: list[tuple[Any, ...]], size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(tmp, journal_size=size, fsync="never")
        rows: list[tuple[int, int, int, int]] = []  # index, publisher, sequence, timestamp
        last_seq = [0, 0, 0, 0]
        ts = T0
        try:
            for op in ops:
                if op[0] == "append":
                    _, pub, step, ts_step, payload = op
                    last_seq[pub] += step
                    ts += ts_step
                    record = journal.append(
                        publisher_id=PUBS[pub % 3] + pub // 3,
                        sequence=last_seq[pub],
                        topic="t",
                        command="p",
                        payload=payload,
                        timestamp=ts,
                    )
                    rows.append((record.index, PUBS[pub % 3] + pub // 3, last_seq[pub], ts))
                elif op[0] == "reopen":
                    journal.close()
                    journal = Journal(tmp, journal_size=size, fsync="never")
                elif op[0] == "compress":
                    journal.sync()  # seal what rotated, then compress every sealed segment
                    journal.compress(0, now=ts / 1e6 + 10)
                else:
                    journal.sync()  # seal what rotated, then remove every sealed segment
                    journal.prune(0, now=ts / 1e6 + 10)
            assert journal.last_index == len(rows)
            first = journal.first_index
            rows_all, rows = rows, [row for row in rows if row[0] >= first]
            assert len(rows_all) - len(rows) == first - 1
            by_bookmark = {(pid, seq): index for index, pid, seq, _ in rows}
            pids = {pid for _, pid, _, _ in rows_all} | {PUBS[0] + 7}
            for pid in pids:
                seqs = sorted(seq for _, p, seq, _ in rows_all if p == pid)
                probes = set(seqs) | {0, 1, 2} | {s + 1 for s in seqs} | {s - 1 for s in seqs}
                for seq in probes:
                    assert journal.find_bookmark(pid, seq) == by_bookmark.get((pid, seq)), (
                        pid,
                        seq,
                    )
            times = {t for *_, t in rows} | {T0 - 1, ts + 1}
            times |= {t + 1 for t in list(times)}
            for t in times:
                expected = next((i for i, *_, rt in rows if rt >= t), len(rows_all) + 1)
                assert journal.find_time(t) == expected, t
            assert [r.index for r in read_all(journal)] == [i for i, *_ in rows]
        finally:
            journal.close()


# --------------------------------------------------------------------------------------------
# pins, prune, compress


def _aged_journal(path: Path, records: int = 400) -> Journal:
    journal = Journal(path, journal_size=2048, fsync="never")
    fill(journal, records)
    journal.sync()
    return journal


def _now_after(index: int) -> float:
    """A ``now`` (seconds) at which records up to ``index`` are more than 1 s old."""
    return (T0 + index * 1000) / 1e6 + 1.0005


def test_prune_removes_old_sealed_segments_only(tmp_path: Path) -> None:
    journal = _aged_journal(tmp_path)
    infos = journal.segments()
    assert infos[-1].state == "active"
    cut = infos[3].last_index  # segments 0..3 are older than 1 s at this "now"
    removed = journal.prune(1.0, now=_now_after(cut))
    assert removed == [i.path for i in infos[:4]]
    assert not any(p.exists() for p in removed)
    assert not any(p.with_suffix(".index").exists() for p in removed)
    assert journal.first_index == cut + 1
    assert journal.read(1)[0].index == cut + 1  # clamped
    assert journal.find_bookmark(PUBS[1], 1) is None  # pruned
    assert journal.find_time(0) == cut + 1
    assert journal.last_sequence(PUBS[1]) == 400  # survives pruning...
    # everything older than now: every sealed segment goes, never the active one
    journal.prune(0, now=_now_after(10_000))
    assert [i.state for i in journal.segments()] == ["active"]
    assert journal.first_index == infos[-1].first_index
    journal.close()
    with Journal(tmp_path) as again:  # ...and restarts
        assert again.last_sequences() == {PUBS[0]: 399, PUBS[1]: 400, PUBS[2]: 398}
        assert again.first_index == infos[-1].first_index
        assert again.last_index == 400


def test_pins_and_cursors_keep_segments(tmp_path: Path) -> None:
    journal = _aged_journal(tmp_path)
    infos = journal.segments()
    now = _now_after(10_000)
    token = journal.pin(infos[2].first_index + 1)  # needs segment 2 onwards
    removed = journal.prune(0, now=now)
    assert removed == [infos[0].path, infos[1].path]
    journal.unpin(token)
    journal.unpin(token)  # unknown tokens are ignored
    cursor = journal.cursor(1, max_records=10)
    assert cursor.position == 1
    first = cursor.read_batch()
    assert first[0].index == infos[2].first_index  # clamped to the oldest retained
    assert journal.prune(0, now=now) == []  # the cursor pins segment 2
    for _ in range(10):
        cursor.read_batch()
    assert cursor.position > infos[3].last_index + 1
    behind = [i.path for i in infos[2:-1] if i.last_index < cursor.position]
    assert journal.prune(0, now=now) == behind  # only what the cursor has read past
    assert journal.first_index <= cursor.position
    rest = list(cursor)
    assert rest[-1].index == 400
    with cursor:
        pass  # closing releases the pin
    with pytest.raises(JournalClosedError):
        cursor.read_batch()
    assert journal.statistics()["pins"] == 0
    journal.close()


def test_compressed_segments_stay_readable_and_seekable(tmp_path: Path) -> None:
    journal = _aged_journal(tmp_path, records=600)
    infos = journal.segments()
    cut = infos[5].last_index
    made = journal.compress(1.0, now=_now_after(cut))
    assert [p.name for p in made] == [i.path.name + ".gz" for i in infos[:6]]
    assert all(p.exists() for p in made) and not infos[0].path.exists()
    states = [i.state for i in journal.segments()]
    assert states[:6] == ["compressed"] * 6 and states[6] == "sealed"
    assert journal.statistics()["compressed_segments"] == 6

    def probe(j: Journal) -> None:
        assert [r.index for r in read_all(j, max_records=13)] == list(range(1, 601))
        for record in j.read(37, max_records=3) + j.read(cut - 1, max_records=4):
            check(record)
        assert j.find_bookmark(PUBS[2], 38) == 38
        assert j.find_bookmark(PUBS[2], 39) is None
        assert j.find_time(T0 + 77 * 1000) == 77
        assert j.find_time(T0 + 77 * 1000 - 1) == 77
        assert j.verify() == 600

    probe(journal)
    journal.close()
    # zcat gives back the original bytes: a compressed segment is plain multi-member gzip
    import gzip

    raw = gzip.decompress(made[0].read_bytes())
    assert len(raw) == infos[0].data_bytes
    with Journal(tmp_path, fsync="never") as again:
        probe(again)
        assert again.compress(1.0, now=_now_after(cut)) == []  # already done
        removed = again.prune(0, now=_now_after(10_000))
        assert removed[:6] == made


def test_sidecar_and_clients_files_are_rebuilt(tmp_path: Path, caplog: Any) -> None:
    journal = _aged_journal(tmp_path)
    infos = journal.segments()
    journal.compress(0, now=_now_after(infos[1].last_index))
    journal.close()
    index_files = sorted(tmp_path.glob("*.index"))
    index_files[0].unlink()  # a compressed segment's sidecar
    index_files[3].write_bytes(b"garbage")
    (tmp_path / "journal.clients").write_bytes(b"junk")
    with Journal(tmp_path) as again:
        assert again.last_sequences() == {PUBS[0]: 399, PUBS[1]: 400, PUBS[2]: 398}
        assert again.find_bookmark(PUBS[1], 4) == 4
        assert again.find_bookmark(PUBS[1], 4 + 3 * 40) == 124
        assert again.verify() == 400
    assert "rebuilding" in caplog.text


def test_read_only_open_changes_nothing(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=1024) as journal:
        fill(journal, 50)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with open(sorted(tmp_path.glob("*.journal"))[-1], "ab") as fh:
        fh.write(b"\x05\x00\x00")  # a torn tail
    with Journal(tmp_path, read_only=True) as reader:
        assert reader.last_index == 50
        assert len(read_all(reader)) == 50
        with pytest.raises(JournalClosedError):
            reader.append(**spec(51))
        with pytest.raises(JournalClosedError):
            reader.prune(0)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after.keys() == before.keys()
    assert after != before  # only our torn tail differs: the reader did not truncate it


# --------------------------------------------------------------------------------------------
# journal_tool: importable functions and the command line


def test_tool_functions(tmp_path: Path) -> None:
    journal = _aged_journal(tmp_path, records=300)
    infos = journal.segments()
    info = journal_info(journal, verify=True)
    assert info["records"] == 300 and info["verified"] == 300
    assert len(info["segments"]) == len(infos)
    made = compress_journal(journal, 1.0)  # real clock: all records are from 2023
    assert len(made) == len(infos) - 1
    removed = prune_journal(journal, 1.0)
    assert len(removed) == len(infos) - 1
    journal.close()

    class Out:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def write(self, text: str) -> int:
            self.lines.append(text)
            return len(text)

    out = Out()
    count = dump_records(tmp_path, out, as_json=True)  # type: ignore[arg-type]
    assert count == infos[-1].records
    assert json.loads(out.lines[-1])["index"] == 300


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "ampsclient_server_stub.journal_tool", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_cli(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=2048) as journal:
        fill(journal, 300)
        segments = len(journal.segments())
    info = _tool("info", str(tmp_path), "--verify")
    assert info.returncode == 0, info.stderr
    assert "records    300 (indexes 1..300)" in info.stdout
    assert "verified   300 records" in info.stdout
    assert info.stdout.count("journal-0") == segments

    dump = _tool("dump", str(tmp_path), "--from", "299")
    assert dump.returncode == 0, dump.stderr
    lines = dump.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"299 {PUBS[2]}|299| 20231114T")
    as_json = _tool("dump", str(tmp_path), "--limit", "2", "--json")
    assert [json.loads(line)["index"] for line in as_json.stdout.splitlines()] == [1, 2]

    compress = _tool("compress", str(tmp_path), "--older-than", "1d")
    assert compress.returncode == 0, compress.stderr
    assert f"compressed {segments - 1} segment(s)" in compress.stdout
    prune = _tool("prune", str(tmp_path))  # default --older-than 1d
    assert prune.returncode == 0, prune.stderr
    assert f"pruned {segments - 1} segment(s)" in prune.stdout
    assert "removed journal-00000000000000000001.journal.gz" in prune.stdout

    info = _tool("info", str(tmp_path), "--json")
    assert json.loads(info.stdout)["segments"][0]["state"] == "active"

    with Journal(tmp_path):  # a running server holds the lock: management refuses
        busy = _tool("prune", str(tmp_path), "--older-than", "0s")
        assert busy.returncode == 1 and "open in another process" in busy.stderr
    assert _tool("prune", str(tmp_path), "--older-than", "soon").returncode == 2
    assert _tool("info", str(tmp_path / "missing")).returncode == 1


def test_concurrent_append_sync_read_prune_compress(tmp_path: Path) -> None:
    """Writer, syncer, reader and maintenance threads together: no errors, no gaps."""
    journal = Journal(tmp_path, journal_size=4096, fsync="never")
    total = 4000
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def guarded(fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                done.set()

        return run

    @guarded
    def writer() -> None:
        fill(journal, total)
        journal.sync()
        done.set()

    @guarded
    def syncer() -> None:
        while not done.is_set():
            journal.sync()

    @guarded
    def reader() -> None:
        with journal.cursor(1, max_records=97) as cursor:
            while True:
                batch = cursor.read_batch()
                for record in batch:
                    check(record)
                    seen.append(record.index)
                if not batch and done.is_set() and cursor.position > journal.last_index:
                    return

    @guarded
    def maintainer() -> None:
        while not done.is_set():
            journal.compress(0, now=2e9)
            journal.prune(0, now=2e9)  # only what the reader has passed
            journal.find_bookmark(PUBS[1], 4)
            journal.find_time(T0 + 500_000)

    threads = [threading.Thread(target=f) for f in (writer, syncer, reader, maintainer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert seen == list(range(1, total + 1))  # the pinned reader never lost a record
    assert journal.statistics()["pruned_segments"] > 0
    journal.close()
    with Journal(tmp_path) as again:
        assert again.last_index == total
        assert again.verify() == total - again.first_index + 1
