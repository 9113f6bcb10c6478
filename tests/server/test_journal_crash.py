"""Crash safety of the journal: SIGKILLed writers, torn tails, corruption, interrupted steps."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub.engine.journal import CorruptJournalError, Journal, JournalRecord

REPO = Path(__file__).resolve().parents[2]

# The content of record ``index`` is a pure function of the index, shared with the child.
SPEC_SOURCE = """
def spec(index):
    pubs = (11, 22, 33)
    return {
        "publisher_id": pubs[index % 3],
        "sequence": index,
        "topic": "topic%d" % (index % 4),
        "command": ("p", "delta_publish", "sow_delete")[index % 3],
        "payload": ("message %d " % index).encode() + b"z" * (index * 37 % 700),
        "fields": {"k": "key%d" % (index % 7), "n": index},
        "timestamp": 1_700_000_000_000_000 + index * 10,
    }
"""
namespace: dict[str, Any] = {}
exec(SPEC_SOURCE, namespace)
spec = namespace["spec"]

CHILD = f"""
import random, sys
from ampsclient_server_stub.engine.journal import Journal
{SPEC_SOURCE}
directory, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
journal = Journal(directory, journal_size=24 * 1024, fsync="always")
index = journal.last_index
print("opened", index, flush=True)
while True:
    for _ in range(rng.randint(1, 60)):
        index += 1
        journal.append(**spec(index))
    print("durable", journal.sync(), flush=True)
"""


def check(record: JournalRecord) -> None:
    want = spec(record.index)
    got = {
        "publisher_id": record.publisher_id,
        "sequence": record.sequence,
        "topic": record.topic,
        "command": record.command,
        "payload": record.payload,
        "fields": dict(record.fields),
        "timestamp": record.timestamp,
    }
    assert got == want, record.index


def fill(journal: Journal, upto: int) -> None:
    for index in range(journal.last_index + 1, upto + 1):
        journal.append(**spec(index))


def run_and_kill(directory: Path, seed: int, lines: int) -> tuple[int, int]:
    """Start a writer child, SIGKILL it after ``lines`` durable reports.

    Returns:
        (the index the child started from, the highest index it reported durable).
    """
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        opened = proc.stdout.readline().split()
        assert opened and opened[0] == b"opened", proc.stderr.read().decode()
        durable = 0
        for _ in range(lines):
            line = proc.stdout.readline()
            assert line.startswith(b"durable "), (line, proc.stderr.read().decode())
            durable = max(durable, int(line.split()[1]))
        proc.send_signal(signal.SIGKILL)  # mid-append or mid-sync: wherever it is now
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # pragma: no cover - only if an assertion fired
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    for line in rest.splitlines():  # reports written before the kill count too
        durable = max(durable, int(line.split()[1]))
    return int(opened[1]), durable


def test_sigkill_loses_nothing_reported_durable(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    reported = 0
    for run in range(5):
        started, durable = run_and_kill(tmp_path, seed=run, lines=rng.randint(3, 40))
        assert started >= reported  # the previous run's durable records are all still there
        reported = max(reported, durable)
        with Journal(tmp_path, journal_size=24 * 1024) as journal:
            assert journal.last_index >= reported
            count = 0
            index = 1
            while batch := journal.read(index, max_records=500):
                for record in batch:
                    assert record.index == index
                    check(record)  # message by message, durable or not: nothing torn, no gap
                    index += 1
                count += len(batch)
            assert count == journal.last_index
            assert journal.verify() == count
            seqs = journal.last_sequences()
            assert max(seqs.values()) == journal.last_index
            # the files hold exactly the records: any torn tail was cut off on reopen
            assert sum(i.data_bytes for i in journal.segments()) == sum(
                i.file_bytes for i in journal.segments()
            )
    assert reported > 0


def _active_file(directory: Path) -> Path:
    return sorted(directory.glob("*.journal"))[-1]


def test_torn_tail_is_truncated(tmp_path: Path, caplog: Any) -> None:
    with Journal(tmp_path, journal_size=8192) as journal:
        fill(journal, 40)
        sizes = [i.data_bytes for i in journal.segments()]
    active = _active_file(tmp_path)
    full = active.stat().st_size
    assert full == sizes[-1]
    # cut the last record in the middle of its body
    with Journal(tmp_path, read_only=True) as reader:
        last = reader.read(40)[0]
    size = _size_of(last)
    os.truncate(active, full - size // 2)
    caplog.set_level(logging.WARNING)
    with Journal(tmp_path, journal_size=8192) as journal:
        assert journal.last_index == 39
        torn = size - size // 2
        assert f"truncating a torn tail of {torn} bytes at offset {full - size}" in caplog.text
        fill(journal, 45)  # appends continue after the cut
    with Journal(tmp_path) as journal:
        for record in journal.read(1, max_records=100):
            check(record)
        assert journal.last_index == 45


def _size_of(record: JournalRecord) -> int:
    import msgpack

    body = msgpack.packb([record.command, record.topic, record.payload, dict(record.fields)])
    return 40 + len(body)


@pytest.mark.parametrize(
    "garbage",
    [b"\x00" * 4096, b"\x07", b"\xff" * 12, b"\x30\x00\x00\x00" + b"\x00" * 40],
    ids=["zeros", "one-byte", "ones", "bad-crc-record"],
)
def test_garbage_tail_is_truncated(tmp_path: Path, garbage: bytes) -> None:
    with Journal(tmp_path) as journal:
        fill(journal, 10)
    active = _active_file(tmp_path)
    size = active.stat().st_size
    with open(active, "ab") as fh:
        fh.write(garbage)
    with Journal(tmp_path) as journal:
        assert journal.last_index == 10
        assert journal.statistics()["truncated_bytes"] == len(garbage)
    assert active.stat().st_size == size


def _record_offset(directory: Path, index: int) -> tuple[Path, int, int]:
    with Journal(directory, read_only=True) as reader:
        for info in reader.segments():
            if info.first_index <= index <= info.last_index:
                offset = 0
                for record in reader.read(info.first_index, max_records=index - info.first_index):
                    offset += _size_of(record)
                return info.path, offset, _size_of(reader.read(index)[0])
    raise AssertionError(index)


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x5A]))


@pytest.mark.parametrize("where", ["body", "length", "crc"])
def test_flipped_byte_in_active_segment_is_corruption(tmp_path: Path, where: str) -> None:
    with Journal(tmp_path) as journal:
        fill(journal, 30)
    path, offset, size = _record_offset(tmp_path, 12)
    delta = {"body": size // 2 + 10, "length": 1, "crc": 5}[where]
    _flip(path, offset + delta)
    with pytest.raises(CorruptJournalError) as info:
        Journal(tmp_path)
    assert info.value.path == path
    assert info.value.offset == offset
    assert str(path) in str(info.value) and f"offset {offset}" in str(info.value)


def test_flipped_byte_in_sealed_segment_is_found_on_read(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=4096) as journal:
        fill(journal, 60)
    path, offset, size = _record_offset(tmp_path, 3)
    _flip(path, offset + size - 2)
    # sealed segments are trusted at open (sidecar checked, not every record)...
    with Journal(tmp_path, journal_size=4096) as journal:
        assert journal.read(4)[0].index == 4  # records after it still read
        with pytest.raises(CorruptJournalError) as info:
            journal.read(1)
        assert (info.value.path, info.value.offset) == (path, offset)
        with pytest.raises(CorruptJournalError):  # ...and verify() finds it
            journal.verify()


def test_gap_between_segments_is_corruption(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=2048) as journal:
        fill(journal, 100)
        infos = journal.segments()
    infos[1].path.unlink()  # removing a middle file leaves a gap
    with pytest.raises(CorruptJournalError, match="gap"):
        Journal(tmp_path)


def test_crash_before_a_seal_is_finished(tmp_path: Path) -> None:
    """A rotated segment whose sidecar was never written is sealed at the next open."""
    with Journal(tmp_path, journal_size=2048, fsync="never") as journal:
        fill(journal, 100)
    for sidecar in sorted(tmp_path.glob("*.index"))[-2:]:
        sidecar.unlink()
    (tmp_path / "journal.clients").unlink()
    (tmp_path / "journal.clients.tmp").write_bytes(b"partial")
    with Journal(tmp_path, journal_size=2048) as journal:
        assert [r.index for r in journal.read(1, max_records=1000)] == list(range(1, 101))
        assert journal.last_sequences() == {11: 99, 22: 100, 33: 98}
        assert journal.find_bookmark(22, 88) == 88
        assert journal.statistics()["pending_seals"] == 0
    assert not (tmp_path / "journal.clients.tmp").exists()
    assert len(list(tmp_path.glob("*.index"))) == len(list(tmp_path.glob("*.journal"))) - 1


def test_crash_during_compression_keeps_the_original(tmp_path: Path) -> None:
    with Journal(tmp_path, journal_size=2048, fsync="never") as journal:
        fill(journal, 100)
        first = journal.segments()[0].path
    # a .gz that was renamed into place but the original not yet removed
    first.with_name(first.name + ".gz").write_bytes(b"\x1f\x8b partial")
    with Journal(tmp_path, journal_size=2048) as journal:
        assert journal.verify() == 100
        assert not first.with_name(first.name + ".gz").exists()
        assert journal.compress(0, now=2e9)  # and it can be compressed again
        assert journal.verify() == 100
