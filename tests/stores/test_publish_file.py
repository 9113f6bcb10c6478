"""FilePublishStore specifics: crash safety, torn tails, corruption, compaction, the CLI."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ampsclient.exceptions import CorruptStoreError, StoreError
from ampsclient.stores.publish import (
    FilePublishStore,
    MemoryPublishStore,
    PublishStore,
    StoredMessage,
    inspect_store,
)
from ampsclient.stores.publish.__main__ import main as cli_main
from ampsclient.stores.publish.file import SEGMENT_MAGIC, STATE_MAGIC

ROOT = Path(__file__).resolve().parents[2]


def payload_for(s: int) -> bytes:
    return b'{"c":"p","t":"orders","a":"persisted","s":%d}{"n":%d}' % (s, s % 1000)


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("seg-*.log"))


def replayed(store: PublishStore) -> list[StoredMessage]:
    out: list[StoredMessage] = []
    store.replay(out.append)
    return out


def snapshot(src: Path, dst: Path) -> Path:
    """Copy an open store's files: what a crash of the process at this moment leaves."""
    shutil.copytree(src, dst)
    return dst


def data_end(segment: Path) -> int:
    """Where a segment's data ends (a preallocated segment has a zero tail after it)."""
    return len(segment.read_bytes().rstrip(b"\0"))


def cut_data(segment: Path, n: int) -> None:
    """Lose the last ``n`` bytes of data: zeroed in a preallocated segment (as a write into
    the mapping that never happened), cut off in a trimmed one."""
    end = data_end(segment)
    if segment.stat().st_size > end:
        with segment.open("r+b") as f:
            f.seek(end - n)
            f.write(bytes(n))
    else:
        os.truncate(segment, end - n)


def write_after_data(segment: Path, data: bytes) -> None:
    with segment.open("r+b") as f:
        f.seek(data_end(segment))
        f.write(data)


# ---------------------------------------------------------------------------------- crash safety

CHILD = r"""
import sys
from ampsclient.stores.publish import FilePublishStore

directory, policy, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

def payload(i, s):
    # variable sizes: bin8, bin16 and (now and then) bin32 encodings
    size = (i * 37) % 700 + (70_000 if i % 97 == 13 else 0)
    return b"%d:%d:" % (s, i) + bytes([i % 251]) * size

store = FilePublishStore(directory, fsync=policy, segment_size=32 * 1024)
for i in range(count):
    s = store.store(lambda s, i=i: payload(i, s))
    sys.stdout.write("%d %d\n" % (s, i))
    sys.stdout.flush()
print("done", flush=True)
"""


def child_payload(i: int, s: int) -> bytes:
    size = (i * 37) % 700 + (70_000 if i % 97 == 13 else 0)
    return b"%d:%d:" % (s, i) + bytes([i % 251]) * size


def run_and_kill(
    directory: Path, policy: str, count: int, kill_after: int
) -> list[tuple[int, int]]:
    """Run the child, SIGKILL it once it has reported ``kill_after`` stores; return reports."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), policy, str(count)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    reported: list[tuple[int, int]] = []
    try:
        for line in proc.stdout:
            if line.startswith(b"done"):
                break
            s, i = line.split()
            reported.append((int(s), int(i)))
            if len(reported) == kill_after:
                proc.send_signal(signal.SIGKILL)
                break
        rest = proc.stdout.read()  # lines written before the kill landed were reported too
    finally:
        proc.kill()
        proc.wait()
    for line in rest.splitlines(keepends=True):
        if line.endswith(b"\n") and not line.startswith(b"done"):
            s, i = line.split()
            reported.append((int(s), int(i)))
    assert proc.returncode == -signal.SIGKILL
    return reported


@pytest.mark.parametrize(
    ("policy", "seed"),
    [
        *[("always", seed) for seed in range(1, 6)],
        ("interval", 6),  # a process crash loses nothing with any policy
        ("never", 7),
    ],
)
def test_sigkill_loses_no_returned_store(tmp_path: Path, policy: str, seed: int) -> None:
    rng = random.Random(seed)
    count = 400
    directory = tmp_path / "store"
    reported = run_and_kill(directory, policy, count, kill_after=rng.randint(1, count - 20))
    assert reported, "the child reported nothing"
    with FilePublishStore(directory, fsync="never") as store:
        messages = replayed(store)
        # every reported store is there, in order, byte for byte...
        assert [m.sequence for m in messages[: len(reported)]] == [s for s, _ in reported]
        for message, (s, i) in zip(messages, reported, strict=False):
            assert message.payload == child_payload(i, s), f"payload of {s} differs"
        # ...plus at most the one whose store() had written but not yet been reported
        extra = messages[len(reported) :]
        assert len(extra) <= 1
        for k, message in enumerate(extra, start=len(reported)):
            assert message == StoredMessage(reported[0][0] + k, child_payload(k, message.sequence))
        assert store.next_sequence() == messages[-1].sequence + 1


def test_sigkill_then_more_stores_then_another_kill(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    first = run_and_kill(directory, "always", 200, kill_after=50)
    second = run_and_kill(directory, "always", 200, kill_after=70)
    assert second[0][0] > first[-1][0]  # sequences continue across the crash
    with FilePublishStore(directory) as store:
        got = {m.sequence: m.payload for m in replayed(store)}
    for s, i in first + second:
        assert got[s] == child_payload(i, s)


# ---------------------------------------------------------------------------------- group commit


def test_always_fsyncs_each_store_and_batches_share_one(tmp_path: Path) -> None:
    with FilePublishStore(tmp_path / "s", fsync="always") as store:
        base = store.statistics()["fsyncs"]
        for _ in range(20):
            store.store(payload_for)
        assert store.statistics()["fsyncs"] - base == 20
        store.store_many([payload_for] * 100)
        assert store.statistics()["fsyncs"] - base == 21


def test_group_commit_shares_fsyncs_between_threads(tmp_path: Path) -> None:
    threads_n, per_thread = 8, 60
    with FilePublishStore(tmp_path / "s", fsync="always") as store:
        base = store.statistics()["fsyncs"]
        barrier = threading.Barrier(threads_n)

        def publisher() -> None:
            barrier.wait()
            for _ in range(per_thread):
                store.store(payload_for)

        threads = [threading.Thread(target=publisher) for _ in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fsyncs = store.statistics()["fsyncs"] - base
        assert store.unpersisted_count == threads_n * per_thread
    assert 0 < fsyncs < threads_n * per_thread


def test_never_does_not_fsync_and_interval_does(tmp_path: Path) -> None:
    with FilePublishStore(tmp_path / "n", fsync="never") as store:
        store.store_many([payload_for] * 10)
        store.store(payload_for)
        assert store.statistics()["fsyncs"] == 0
    with FilePublishStore(tmp_path / "i", fsync="interval", fsync_interval=0.001) as istore:
        istore.store(payload_for)
        deadline = time.monotonic() + 10
        while istore.statistics()["fsyncs"] == 0:  # the background thread's own pace
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert istore.fsync_policy == "interval"
    with FilePublishStore(tmp_path / "f", fsync="never") as fstore:
        fstore.store(payload_for)
        fstore.flush()  # explicit flush works under any policy
        assert fstore.statistics()["fsyncs"] == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="deferred on Linux only")
def test_interval_leaves_a_full_segments_fsync_to_the_background(tmp_path: Path) -> None:
    """With ``fsync="interval"`` rolling to a new segment does not fsync in the storing
    thread: the full segments wait for the next sync (flush, the background thread, close),
    which syncs them before the active one; nothing is lost across a reopen."""
    path = tmp_path / "i"
    with FilePublishStore(path, fsync="interval", fsync_interval=3600, segment_size=4096) as st:
        stored = [st.store(payload_for) for _ in range(300)]
        stats = st.statistics()
        rolls = stats["segments"] - 1 + stats["segments_deleted"]
        assert rolls >= 5
        assert stats["fsyncs"] == 0  # no roll synced (the interval thread sleeps an hour)
        assert len(st.segment_log.retired) == rolls
        st.flush()  # one sync: every retired segment, then the active one
        assert st.statistics()["fsyncs"] == rolls + 1
        assert st.segment_log.retired == []
        more = [st.store(payload_for) for _ in range(100)]
        assert st.segment_log.retired  # rolled again, not synced yet: close syncs them
    with FilePublishStore(path, fsync="interval", fsync_interval=3600) as again:
        assert [m.sequence for m in replayed(again)] == stored + more
    with FilePublishStore(tmp_path / "a", fsync="always", segment_size=4096) as always:
        for _ in range(300):
            always.store(payload_for)
        assert always.segment_log.retired == []  # "always" syncs at every store anyway


def test_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync"):
        FilePublishStore(tmp_path, fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fsync_interval"):
        FilePublishStore(tmp_path, fsync_interval=0)
    with pytest.raises(ValueError, match="segment_size"):
        FilePublishStore(tmp_path, segment_size=10)


def test_directory_is_locked_against_a_second_store(tmp_path: Path) -> None:
    with (
        FilePublishStore(tmp_path / "s", fsync="never"),
        pytest.raises(StoreError, match="in use"),
    ):
        FilePublishStore(tmp_path / "s", fsync="never")
    with FilePublishStore(tmp_path / "s", fsync="never"):  # released by close()
        pass


# ---------------------------------------------------------------------------------- recovery


@pytest.fixture(params=["preallocated", "trimmed"])
def crashed(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, list[int]]:
    """A store with 10 messages in one segment, as a crashed process leaves it (no state):
    with the active segment's zero tail, or trimmed (as a store that wrote with ``write()``
    left it)."""
    store = FilePublishStore(tmp_path / "live", fsync="never")
    stored = [store.store(payload_for) for _ in range(10)]
    copy = snapshot(tmp_path / "live", tmp_path / "crashed")
    store.close()
    assert not (copy / "state").exists()
    (segment,) = segments(copy)
    assert segment.stat().st_size == 16 * 1024 * 1024  # preallocated to segment_size
    if request.param == "trimmed":
        os.truncate(segment, data_end(segment))
    return copy, stored


def test_torn_tail_is_truncated(
    crashed: tuple[Path, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    path, stored = crashed
    (segment,) = segments(path)
    end = data_end(segment)
    cut_data(segment, 3)  # the last record lost its last 3 bytes
    before = segment.read_bytes()
    info = inspect_store(path)
    assert info.torn_tail is not None and info.torn_tail.path == segment
    assert info.torn_tail.offset + info.torn_tail.length == end - 3
    assert segment.read_bytes() == before  # inspecting changes nothing
    with caplog.at_level(logging.WARNING, logger="ampsclient.stores.publish"):
        store = FilePublishStore(path)
    assert "torn record" in caplog.text
    with store:
        assert data_end(segment) == info.torn_tail.offset  # cut where it tore
        assert [m.sequence for m in replayed(store)] == stored[:9]
        assert replayed(store)[-1].payload == payload_for(stored[8])
        assert store.statistics()["torn_tails_repaired"] == 1
        assert store.next_sequence() == stored[8] + 1  # the torn one was never reported
        assert store.store(payload_for) == stored[8] + 1
    with FilePublishStore(path) as store:  # a clean reopen: nothing more is dropped
        assert store.statistics()["torn_tails_repaired"] == 0
        assert store.unpersisted_count == 10


@pytest.mark.parametrize("cut", [1, 4, 8, 9, 20])
def test_torn_tail_of_any_length(crashed: tuple[Path, list[int]], cut: int) -> None:
    path, stored = crashed
    (segment,) = segments(path)
    cut_data(segment, cut)
    with FilePublishStore(path, fsync="never") as store:
        assert [m.sequence for m in replayed(store)] == stored[:9]


def test_bad_crc_on_the_last_record_is_a_torn_tail(crashed: tuple[Path, list[int]]) -> None:
    path, stored = crashed
    (segment,) = segments(path)
    data = bytearray(segment.read_bytes())
    data[data_end(segment) - 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    with FilePublishStore(path, fsync="never") as store:
        assert [m.sequence for m in replayed(store)] == stored[:9]


def test_zero_filled_tail_is_the_end_of_the_data(crashed: tuple[Path, list[int]]) -> None:
    path, stored = crashed
    (segment,) = segments(path)
    with segment.open("ab") as f:
        f.write(b"\0" * 4099)  # preallocated, or extended by the crash but never written
    info = inspect_store(path)
    assert info.torn_tail is None
    assert info.segments[0].size == data_end(segment)
    with FilePublishStore(path, fsync="never") as store:
        assert [m.sequence for m in replayed(store)] == stored
        assert store.statistics()["torn_tails_repaired"] == 0


@pytest.mark.parametrize("hole", [4, 12, 4096])
def test_zeros_before_an_intact_record_raise(crashed: tuple[Path, list[int]], hole: int) -> None:
    """A zero length is only the end of the data if nothing intact follows."""
    path, _ = crashed
    (segment,) = segments(path)
    data = segment.read_bytes()
    end = data_end(segment)
    last = len(SEGMENT_MAGIC)
    while last + 8 + int.from_bytes(data[last : last + 4], "big") < end:
        last += 8 + int.from_bytes(data[last : last + 4], "big")
    write_after_data(segment, bytes(hole) + data[last:end])  # a copy of the last record
    with pytest.raises(CorruptStoreError, match=rf"offset {end}\b.*followed by intact data"):
        FilePublishStore(path, fsync="never")


def test_garbage_tail_after_intact_records_is_kept_out(crashed: tuple[Path, list[int]]) -> None:
    path, stored = crashed
    (segment,) = segments(path)
    write_after_data(segment, b"\x00\x00\x00\x30garbage\x92 not a record")
    with FilePublishStore(path, fsync="never") as store:
        assert [m.sequence for m in replayed(store)] == stored


@pytest.mark.parametrize("where", ["payload", "length", "crc", "body"])
def test_corrupted_middle_record_raises(crashed: tuple[Path, list[int]], where: str) -> None:
    path, _ = crashed
    (segment,) = segments(path)
    data = bytearray(segment.read_bytes())
    offset = len(SEGMENT_MAGIC)
    for _ in range(4):  # skip to the 5th record
        offset += 8 + int.from_bytes(data[offset : offset + 4], "big")
    flip = {"length": offset + 2, "crc": offset + 5, "body": offset + 9, "payload": offset + 30}
    data[flip[where]] ^= 0x55
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError, match=rf"{re.escape(segment.name)}.*offset {offset}\b"):
        FilePublishStore(path, fsync="never")
    assert segment.read_bytes() == bytes(data)  # never repaired by throwing records away
    with pytest.raises(CorruptStoreError):
        inspect_store(path)
    assert cli_main([str(path)]) == 1


def test_damage_in_a_closed_segment_raises_even_at_its_end(tmp_path: Path) -> None:
    store = FilePublishStore(tmp_path / "s", fsync="never", segment_size=256)
    for _ in range(20):
        store.store(payload_for)
    copy = snapshot(tmp_path / "s", tmp_path / "c")
    store.close()
    oldest = segments(copy)[0]
    os.truncate(oldest, oldest.stat().st_size - 2)
    with pytest.raises(CorruptStoreError, match=re.escape(oldest.name)):
        FilePublishStore(copy, fsync="never")


def test_garbage_state_file_raises(tmp_path: Path) -> None:
    with FilePublishStore(tmp_path / "s", fsync="never") as store:
        store.store(payload_for)
    state = tmp_path / "s" / "state"
    good = state.read_bytes()
    assert good.startswith(STATE_MAGIC) and len(good) == 28
    for bad in [b"", b"garbage", good[:-1] + bytes([good[-1] ^ 1]), b"X" + good[1:]]:
        state.write_bytes(bad)
        with pytest.raises(CorruptStoreError, match="state"):
            FilePublishStore(tmp_path / "s", fsync="never")


def test_bad_segment_magic_raises(tmp_path: Path) -> None:
    with FilePublishStore(tmp_path / "s", fsync="never") as store:
        store.store(payload_for)
    (segment,) = segments(tmp_path / "s")
    segment.write_bytes(b"NOTASTORE" + segment.read_bytes()[9:])
    with pytest.raises(CorruptStoreError, match="magic"):
        FilePublishStore(tmp_path / "s", fsync="never")


@pytest.mark.parametrize("zeros", [0, 5, 4096])
def test_torn_segment_header_is_rewritten(tmp_path: Path, zeros: int) -> None:
    store = FilePublishStore(tmp_path / "s", fsync="never", segment_size=64)
    stored = [store.store(payload_for) for _ in range(3)]  # rolls after each store
    copy = snapshot(tmp_path / "s", tmp_path / "c")
    store.close()
    newest = segments(copy)[-1]
    newest.write_bytes(SEGMENT_MAGIC[:3] + bytes(zeros))  # crashed while creating it
    with FilePublishStore(copy, fsync="never") as reopened:
        assert [m.sequence for m in replayed(reopened)] == stored
        assert reopened.store(payload_for) == stored[-1] + 1
    assert newest.read_bytes().startswith(SEGMENT_MAGIC)


def test_state_temp_file_and_unknown_files(tmp_path: Path) -> None:
    with FilePublishStore(tmp_path / "s", fsync="never") as store:
        store.store(payload_for)
    (tmp_path / "s" / "state.tmp").write_bytes(b"half-written")
    (tmp_path / "s" / "notes.txt").write_text("mine")
    assert inspect_store(tmp_path / "s").unknown_files == ["notes.txt"]
    with FilePublishStore(tmp_path / "s", fsync="never") as store:
        assert store.unpersisted_count == 1
    assert not (tmp_path / "s" / "state.tmp").exists()  # (an open store keeps a block there)
    assert (tmp_path / "s" / "notes.txt").exists()


def test_lost_discard_record_is_inferred_from_a_sequence_jump(tmp_path: Path) -> None:
    """A jump in stored sequence numbers proves an ack covered everything below it."""
    store = FilePublishStore(tmp_path / "s", fsync="never")
    old = [store.store(payload_for) for _ in range(3)]
    store.discard_up_to(old[-1] + 100)
    new = store.store(payload_for)
    copy = snapshot(tmp_path / "s", tmp_path / "c")
    store.close()
    (segment,) = segments(copy)
    data = segment.read_bytes()
    record = b"\x92\xa1d\xcf" + (old[-1] + 100).to_bytes(8, "big")
    start = data.index(record) - 8
    segment.write_bytes(data[:start] + data[start + 20 :])  # the "d" record never hit the disk
    with FilePublishStore(copy, fsync="never") as reopened:
        assert [m.sequence for m in replayed(reopened)] == [new]
        assert reopened.last_persisted == new - 1


def test_other_msgpack_encodings_are_accepted(tmp_path: Path) -> None:
    """Readers follow the documented format (msgpack), not just this writer's byte layout."""
    import msgpack

    path = tmp_path / "s"
    path.mkdir()
    records = [
        msgpack.packb([1000, b"first"]),
        msgpack.packb([1001, b"second"]),
        msgpack.packb(["d", 1000]),
        msgpack.packb([1002, b"third"]),
        msgpack.packb(["x", 1002]),
        msgpack.packb([1003, b"fourth"]),
    ]
    data = SEGMENT_MAGIC + b"".join(
        len(r).to_bytes(4, "big") + zlib.crc32(r).to_bytes(4, "big") + r for r in records
    )
    (path / f"seg-{1000:020d}.log").write_bytes(data)
    with FilePublishStore(path, fsync="never") as store:
        assert replayed(store) == [StoredMessage(1001, b"second"), StoredMessage(1003, b"fourth")]
        assert store.last_persisted == 1000
        assert store.store(lambda s: b"fifth") == 1004


def test_unknown_record_raises(tmp_path: Path) -> None:
    import msgpack

    path = tmp_path / "s"
    path.mkdir()
    body = msgpack.packb(["z", 1])
    record = len(body).to_bytes(4, "big") + zlib.crc32(body).to_bytes(4, "big") + body
    (path / f"seg-{1:020d}.log").write_bytes(SEGMENT_MAGIC + record)
    with pytest.raises(CorruptStoreError, match="unknown record"):
        FilePublishStore(path, fsync="never")


# ---------------------------------------------------------------------------------- compaction


def test_directory_stays_bounded_over_200k_messages(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with FilePublishStore(path, fsync="never", segment_size=64 * 1024) as store:
        most = 0
        for i in range(200_000):
            s = store.store(payload_for)
            store.discard_up_to(s)
            if i % 5000 == 0:  # (files of discarded segments go on the store's own thread)
                most = max(most, len(store.segment_files()))
        stats = store.statistics()
        assert stats["segments_deleted"] > 100
        assert stats["segments"] <= 2
        assert store.unpersisted_count == 0
    assert most <= 2
    assert len(segments(path)) <= 2
    assert sum(p.stat().st_size for p in path.iterdir()) < 3 * 64 * 1024
    with FilePublishStore(path, fsync="never") as store:
        assert store.next_sequence() == s + 1
        assert store.unpersisted_count == 0


def test_segments_with_unacked_messages_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with FilePublishStore(path, fsync="never", segment_size=1024) as store:
        first = store.store(payload_for)
        for _ in range(300):  # acks lag 50 messages behind, the very first is never acked...
            s = store.store(payload_for)
            if s - 50 > first:
                store.discard(s - 50)  # ...(single discards only, the first stays)
        assert len(segments(path)) > 10  # the oldest segment pins every later one
        store.discard(first)
        for _ in range(40):  # a roll happens, and compaction catches up
            store.store(payload_for)
        low = store.lowest_unpersisted
        assert low == s - 49
        kept = store.segment_files()  # (their files go behind, on the store's own thread)
        firsts = [int(p.name[4:24]) for p in kept]
        # no fully discarded segment is left at the front
        assert firsts[0] <= low < firsts[1]
        assert len(firsts) < 15
    assert segments(path) == kept  # the others' files are gone once it is closed
    with FilePublishStore(path, fsync="never") as store:
        assert store.lowest_unpersisted == s - 49


def test_active_segment_is_preallocated_and_trimmed_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = FilePublishStore(path, fsync="never", segment_size=4096)
    stored = [store.store(payload_for) for _ in range(3)]
    (active,) = segments(path)
    assert active.stat().st_size == 4096  # mapped; the data ends with a zero tail
    # a record that does not fit starts the next segment, which grows for it, then rolls
    big = store.store(lambda s: b"x" * 10_000)
    first, grown, newest = segments(path)
    assert first.stat().st_size == data_end(first) < 4096  # a closed segment is trimmed
    assert grown.stat().st_size == data_end(grown) > 10_000
    assert newest.stat().st_size == 4096
    after = store.store(payload_for)
    closed = first.stat().st_size + grown.stat().st_size
    assert store.statistics()["disk_bytes"] == closed + data_end(newest)
    store.close()
    assert newest.stat().st_size == data_end(newest)  # trimmed on close
    with FilePublishStore(path, fsync="never", segment_size=4096) as reopened:
        assert [m.sequence for m in replayed(reopened)] == [*stored, big, after]
        assert newest.stat().st_size == 4096  # preallocated again
        assert reopened.store(payload_for) == after + 1


def test_reopen_deletes_segments_acked_before_a_crash(tmp_path: Path) -> None:
    store = FilePublishStore(tmp_path / "s", fsync="never", segment_size=256)
    stored = [store.store(payload_for) for _ in range(30)]
    store.discard_up_to(stored[-2])
    copy = snapshot(tmp_path / "s", tmp_path / "c")
    store.close()
    assert len(segments(copy)) > 3
    with FilePublishStore(copy, fsync="never") as reopened:
        assert [m.sequence for m in replayed(reopened)] == [stored[-1]]
        assert reopened.statistics()["segments"] <= 2
    assert len(segments(copy)) <= 2


# ---------------------------------------------------------------------------------- property test

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("store"), st.integers(0, 300)),
        st.tuples(st.just("many"), st.integers(0, 4)),
        st.tuples(st.just("ack"), st.integers(-12, 6)),
        st.tuples(st.just("discard"), st.integers(0, 10)),
        st.tuples(st.just("reopen"), st.just(0)),
    ),
    max_size=60,
)


@pytest.mark.parametrize("kind", ["file", "memory"])
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_matches_a_simple_model(kind: str, ops: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:

        def open_store() -> PublishStore:
            if kind == "memory":
                return MemoryPublishStore()
            return FilePublishStore(tmp, fsync="never", segment_size=200)

        store = open_store()
        live: dict[int, bytes] = {}
        nxt = store.next_sequence()
        last_persisted = 0
        try:
            for op, arg in ops:
                if op == "store":
                    payload = bytes([arg % 256]) * arg

                    def build(s: int, p: bytes = payload) -> bytes:
                        return p

                    assert store.store(build) == nxt
                    live[nxt] = payload
                    nxt += 1
                elif op == "many":
                    got = store.store_many([lambda s: b"%d" % s] * arg)
                    assert got == list(range(nxt, nxt + arg))
                    live.update((s, b"%d" % s) for s in got)
                    nxt += arg
                elif op == "ack":
                    target = nxt - 1 + arg
                    expected = 0
                    if target > last_persisted:
                        doomed = [s for s in live if s <= target]
                        expected = len(doomed)
                        for s in doomed:
                            del live[s]
                        last_persisted = target
                        nxt = max(nxt, target + 1)
                    assert store.discard_up_to(target) == expected
                elif op == "discard":
                    target = nxt - 1 - arg
                    assert store.discard(target) == (target in live)
                    live.pop(target, None)
                elif kind == "file":
                    store.close()
                    store = open_store()
                assert replayed(store) == [StoredMessage(s, p) for s, p in sorted(live.items())]
                assert store.unpersisted_count == len(live)
                assert store.lowest_unpersisted == (min(live) if live else None)
                assert store.last_persisted == last_persisted
                assert store.next_sequence() == nxt
        finally:
            store.close()


# ---------------------------------------------------------------------------------- the inspector


@pytest.fixture
def populated(tmp_path: Path) -> tuple[Path, list[int]]:
    path = tmp_path / "s"
    with FilePublishStore(path, fsync="never", segment_size=300) as store:
        stored = [store.store(payload_for) for _ in range(12)]
        store.discard_up_to(stored[3])
        store.discard(stored[6])
    return path, stored


def test_cli_summary(populated: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]) -> None:
    path, stored = populated
    assert cli_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "unpersisted:     7" in out
    assert f"sequence range:  {stored[4]} .. {stored[11]}" in out
    assert f"last persisted:  {stored[3]}" in out
    assert f"next sequence:   {stored[11] + 1}" in out
    assert "holes:           1" in out
    for segment in segments(path):
        assert segment.name in out
    assert repr(payload_for(stored[4])) not in out


def test_cli_dump(populated: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]) -> None:
    path, stored = populated
    assert cli_main([str(path), "--dump"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = [f"{s} {payload_for(s)!r}" for s in stored[4:] if s != stored[6]]
    assert lines[-len(expected) :] == expected


def test_cli_json(populated: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]) -> None:
    path, stored = populated
    assert cli_main([str(path), "--json", "--dump"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["count"] == 7
    assert data["first_sequence"] == stored[4] and data["last_sequence"] == stored[11]
    assert data["last_persisted"] == stored[3]
    assert data["next_sequence"] == stored[11] + 1
    assert data["holes"] == [stored[6]]
    assert [s["file"] for s in data["segments"]] == [p.name for p in segments(path)]
    assert data["torn_tail"] is None
    import base64

    assert [base64.b64decode(m["payload_base64"]) for m in data["messages"]] == [
        payload_for(s) for s in stored[4:] if s != stored[6]
    ]


def test_cli_reports_a_torn_tail_without_repairing(
    crashed: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = crashed
    (segment,) = segments(path)
    cut_data(segment, 5)
    before = segment.read_bytes()
    assert cli_main([str(path)]) == 0
    assert "torn tail:" in capsys.readouterr().out
    assert segment.read_bytes() == before


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main([str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "state").write_bytes(b"junk")
    assert cli_main([str(tmp_path), "--json"]) == 1
    captured = capsys.readouterr()
    assert "corrupt" in captured.err
    assert "error" in json.loads(captured.out)


def test_cli_as_a_module_on_an_open_store(tmp_path: Path) -> None:
    with FilePublishStore(tmp_path / "s", fsync="never") as store:
        store.store(payload_for)
        result = subprocess.run(
            [sys.executable, "-m", "ampsclient.stores.publish", str(tmp_path / "s"), "--json"],
            capture_output=True,
            check=True,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
    assert json.loads(result.stdout)["count"] == 1


# ---------------------------------------------------------------------------------- the docs


def test_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "publish-stores.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "docs/publish-stores.md", "exec"), {"__name__": "__docs__"})
