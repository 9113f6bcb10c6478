"""The file publish store's spare segment (``ampsclient/stores/publish/spare.py``): the next
segment is made ahead on the store's own thread, a roll-over renames it into place, the
thread and the spare go with ``close()``, a leftover spare is never read, and a failure to
make one is logged once and leaves the store rolling as before."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

import pytest

from ampsclient.stores.publish import FilePublishStore, StoredMessage, inspect_store
from ampsclient.stores.publish.scan import SPARE_NAME, _read_segments
from ampsclient.stores.publish.spare import make_spare, populate
from ampsclient_server_stub.testing import wait_for

SEGMENT = 64 * 1024
BODY = b"x" * 200


def payload_for(s: int) -> bytes:
    return b'{"c":"p","s":%d}' % s + BODY


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("seg-*.log"))


def spare_threads(path: Path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"publish-store-spare {path}"]


def replayed(store: FilePublishStore) -> list[StoredMessage]:
    out: list[StoredMessage] = []
    store.replay(out.append)
    return out


def fill_past_half(store: FilePublishStore) -> list[int]:
    """Store until the active segment is more than half full, acking as the server would."""
    stored = []
    while store.segment_log.active_size * 2 <= SEGMENT:
        stored.append(store.store(payload_for))
    store.discard_up_to(stored[0])  # an ack: the log's own writes start the maker
    return stored


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_a_roll_renames_the_spare_made_ahead(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "s"
    spare = path / SPARE_NAME
    store = FilePublishStore(path, fsync=policy, segment_size=SEGMENT)  # type: ignore[arg-type]
    try:
        stored = fill_past_half(store)
        assert len(segments(path)) == 1
        wait_for(spare.exists, what="the spare segment")
        wait_for(lambda: store.segment_log.spares is not None and store.segment_log.spares.ready)
        inode = spare.stat().st_ino
        while len(segments(path)) == 1:
            stored.append(store.store(payload_for))
        newest = segments(path)[-1]
        assert newest.stat().st_ino == inode  # the spare, renamed
        assert newest.stat().st_size == SEGMENT  # (still preallocated: being appended to)
        wait_for(spare.exists, what="the next spare")
        assert spare.stat().st_ino != inode
        assert len(spare_threads(path)) == 1
    finally:
        store.close()
    assert not spare.exists()  # close() deletes an unused spare...
    assert spare_threads(path) == []  # ...and stops the thread
    with FilePublishStore(path, fsync="never") as again:
        assert [m.sequence for m in replayed(again)] == stored[1:]


def test_persisted_segments_are_deleted_behind_the_roll(tmp_path: Path) -> None:
    """Once the maker runs, a roll leaves the segments whose messages are all persisted
    to its thread: they leave the store's list at once, their files go after the state
    file that covers them is written; a reopened store continues the sequence."""
    path = tmp_path / "s"
    with FilePublishStore(path, fsync="interval", segment_size=SEGMENT) as store:
        fill_past_half(store)
        wait_for(lambda: store.segment_log.spares is not None and store.segment_log.spares.ready)
        for _ in range(4 * SEGMENT // len(BODY)):  # several rolls, every message acked
            store.discard_up_to(store.store(payload_for))
        stats = store.statistics()
        assert stats["segments_deleted"] >= 3 and stats["segments"] <= 2
        kept = store.segment_files()
        wait_for(lambda: segments(path) == kept, what="the deleted segments' files gone")
        last = store.next_sequence() - 1
    with FilePublishStore(path, fsync="never") as again:
        assert again.next_sequence() == last + 1
        assert again.unpersisted_count == 0


def test_a_leftover_spare_is_deleted_on_open_and_never_read(tmp_path: Path) -> None:
    """A crash leaves ``spare.tmp`` (before or after the roll that would have used it): it
    holds no record of the store, whatever it holds."""
    path = tmp_path / "s"
    with FilePublishStore(path, fsync="never", segment_size=SEGMENT) as store:
        stored = [store.store(payload_for) for _ in range(5)]
    (path / SPARE_NAME).write_bytes(b"AMPSPUB1 and then anything at all" + bytes(100))
    with FilePublishStore(path, fsync="never", segment_size=SEGMENT) as store:
        assert not (path / SPARE_NAME).exists()
        assert [m.sequence for m in replayed(store)] == stored


def test_no_spare_while_a_resize_handler_is_set(tmp_path: Path) -> None:
    """A spare is disk space the handler was not asked for: none is made (a running maker
    stops and deletes its spare when a handler is set)."""
    path = tmp_path / "s"
    with FilePublishStore(path, fsync="never", segment_size=SEGMENT) as store:
        fill_past_half(store)
        wait_for((path / SPARE_NAME).exists, what="the spare segment")
        asked: list[int] = []

        def handler(_store: object, size: int) -> bool:
            asked.append(size)
            return True

        store.set_resize_handler(handler)
        assert not (path / SPARE_NAME).exists()
        assert spare_threads(path) == []
        for _ in range(3 * SEGMENT // len(BODY)):  # several rolls
            store.store(payload_for)
        assert len(asked) >= 2
        assert store.segment_log.spares is None
        assert not (path / SPARE_NAME).exists()


def test_a_spare_that_cannot_be_made_is_logged_once_and_rolls_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Something else holds the spare's name (a directory): the maker fails, says so once
    (INFO: nothing is lost, the rolls make their segments themselves), and stops trying."""
    path = tmp_path / "s"
    with (
        caplog.at_level(logging.INFO, "ampsclient.stores.publish"),
        FilePublishStore(path, fsync="never", segment_size=SEGMENT) as store,
    ):
        (path / SPARE_NAME).mkdir()
        stored = fill_past_half(store)
        spares = store.segment_log.spares
        assert spares is not None
        wait_for(lambda: spares.failed is not None, what="the maker's failure")
        for _ in range(5 * SEGMENT // len(BODY)):  # several rolls, each making its segment
            stored.append(store.store(payload_for))
        assert len(segments(path)) >= 5
        assert [m.sequence for m in replayed(store)] == stored[1:]
    lines = [r.getMessage() for r in caplog.records if "spare" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "no spare segment ahead from now on" in lines[0]
    assert spare_threads(path) == []


def test_make_spare_writes_a_valid_empty_segment(tmp_path: Path) -> None:
    spare = make_spare(tmp_path, SEGMENT)
    try:
        assert spare.path == tmp_path / SPARE_NAME
        assert os.fstat(spare.fd).st_size == SEGMENT
        assert spare.mm[:8] == b"AMPSPUB1" and spare.mm[8:] == bytes(SEGMENT - 8)
        populate(spare.mm)  # again: harmless (False where the kernel lacks it)
        assert spare.mm[8:16] == bytes(8)
    finally:
        spare.discard()
    assert not (tmp_path / SPARE_NAME).exists()
    with pytest.raises(FileExistsError):  # never over an existing file
        (tmp_path / SPARE_NAME).write_bytes(b"other")
        make_spare(tmp_path, SEGMENT)
    assert (tmp_path / SPARE_NAME).read_bytes() == b"other"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="retiring needs Linux fsync")
def test_a_roll_does_not_wait_for_a_running_sync(tmp_path: Path) -> None:
    """Under ``"interval"`` a sync of the full segments can take hundreds of ms (seconds on
    a busy disk); a roll, or a growth, used to wait for it on the publisher's thread. A
    sync that never ends stands for it here: the stores go on, rolling several times."""
    store = FilePublishStore(
        tmp_path / "s", fsync="interval", fsync_interval=3600, segment_size=SEGMENT
    )
    log = store.segment_log
    store.store(payload_for)
    with log.sync_cond:
        log.syncing = True  # as the interval thread while it fsyncs
    done = threading.Event()

    def publish() -> None:
        for _ in range(3 * SEGMENT // len(BODY)):
            store.store(payload_for)
        done.set()

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    try:
        assert done.wait(30), "a roll waited for the running sync"
        assert len(store.segment_files()) >= 3
    finally:
        with log.sync_cond:
            log.syncing = False
            log.sync_cond.notify_all()
        publisher.join(30)
        store.close()


def test_the_inspector_beside_a_store_deleting_behind_it(tmp_path: Path) -> None:
    """``inspect_store`` reads a live store's directory while its thread deletes persisted
    segments: a segment listed and gone before it is read is left out (it used to raise
    ``FileNotFoundError``), and everything the inspector reports is what the store holds
    (here nothing unacked: every message is acked at once)."""
    path = tmp_path / "s"
    store = FilePublishStore(path, fsync="never", segment_size=16 * 1024)
    done = threading.Event()
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            for _ in range(10_000):
                store.discard_up_to(store.store(payload_for))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    inspections = 0
    try:
        while not done.is_set() or inspections == 0:
            found = inspect_store(path)
            assert len(found.messages) <= 1  # at most the one stored and not yet acked
            inspections += 1
    finally:
        publisher.join(30)
        store.close()
    assert errors == []
    assert inspections > 0
    assert store.statistics()["segments_deleted"] > 50


def test_a_segment_gone_before_it_is_read_is_left_out(tmp_path: Path) -> None:
    """The mechanism of the test above, deterministically: the newest readable segment is
    the last one."""
    kept = tmp_path / "seg-00000000000000000001.log"
    kept.write_bytes(b"AMPSPUB1")
    gone = tmp_path / "seg-00000000000000000002.log"
    assert list(_read_segments([(1, kept), (2, gone)])) == [(1, kept, b"AMPSPUB1", True)]
