"""FilePublishStore: unacknowledged publishes in an append-only log with group commit.

Layout of the store directory (the format is documented byte by byte in
``docs/publish-stores.md``)::

    <dir>/lock                          flock()ed while a store has the directory open
    <dir>/state                         last persisted + last used sequence (written atomically)
    <dir>/seg-<first sequence:020d>.log one or more segments; the newest is appended to

The store is five modules: :mod:`.record` (the byte format), :mod:`.scan` (reading and
verifying a directory), :mod:`.segments` (the files, their mapping, roll-over and group
commit), :mod:`.spare` (the next segment made ahead, and what a roll leaves behind, on the
store's own thread), :mod:`.sync` (the fsync policies and the interval thread); this one is
the store API on top of them.

Unpersisted payloads are also kept in memory (as in :class:`MemoryPublishStore`), so replay
and lookups never touch the disk; the file is only read when the store is opened.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...exceptions import StoreError
from .base import (
    Build,
    IndexedPublishStore,
    StorableMessage,
    as_build,
    initial_sequence,
    join_seq_fast,
)
from .record import SEGMENT_MAGIC, STATE_MAGIC, control_record, record_size, write_record
from .scan import (
    LOCK_NAME,
    SPARE_NAME,
    STATE_TMP,
    SegmentInfo,
    StoreInspection,
    TornTail,
    inspect_store,
    scan,
)
from .segments import MiB, SegmentLog
from .sync import FsyncPolicy, IntervalSync, check_policy

if sys.platform != "win32":
    import fcntl

__all__ = [
    "SEGMENT_MAGIC",
    "STATE_MAGIC",
    "FilePublishStore",
    "FsyncPolicy",
    "MiB",
    "ResizeHandler",
    "SegmentInfo",
    "StoreInspection",
    "TornTail",
    "inspect_store",
    "write_record",
]

logger = logging.getLogger("ampsclient.stores.publish")

ResizeHandler = Callable[[Any, int], Any]
"""``handler(store, size) -> bool``: may the store's files grow to ``size`` bytes?"""


class FilePublishStore(IndexedPublishStore):
    """A publish store that survives restarts: an append-only, segmented log on disk.

    Every :meth:`store` copies one record into the newest segment's memory mapping before it
    returns. What happens next depends on ``fsync``:

    ``"always"`` (default)
        :meth:`store` returns only after an ``fdatasync`` covering its record. Concurrent
        stores share fsyncs (group commit); a single publisher thread pays one fsync per
        message, so :meth:`store_many` records a batch with one copy and one fsync. Nothing
        a returned :meth:`store` recorded is lost, even if the machine crashes. (A sync is
        ``msync`` + ``fdatasync`` of the mapped segment; on Linux just ``fdatasync``, which is
        the same operation there and runs without the GIL.)
    ``"interval"``
        A background thread fsyncs every ``fsync_interval`` seconds when there is unsynced
        data. A crash of the process (``kill -9``) loses nothing, because the mapped pages
        written to are the file's pages in the OS page cache; a crash of the machine
        (power, kernel) can lose the stores of the last ``fsync_interval`` (plus the
        fsync's duration). When a segment fills up, the background thread also syncs it
        (on Linux): the publisher that rolls to a new segment does not wait for an fsync of
        the full one (up to ``segment_size`` of dirty pages, tens to hundreds of ms).
    ``"never"``
        No fsync at all (also not of the state file). A process crash loses nothing; a
        machine crash can lose whatever the OS had not yet written back.

    Discards (persisted acks) are appended as small records but never force an fsync: losing
    one only means replaying messages the server already has, which it ignores as duplicates.

    The newest segment rolls over once it reaches ``segment_size`` bytes or the next record
    does not fit; then every older segment whose messages are all discarded is deleted
    (after the state file records the last persisted and last used sequence numbers), so a
    long-running publisher's directory stays bounded by its window of unacknowledged
    messages plus one segment and a spare. The next segment is made ahead (``spare.tmp``)
    and the deletions happen on the store's own thread, started when the active segment is
    half full and stopped by :meth:`close` (``docs/publish-stores.md``, "Roll-over").

    Opening a directory scans every segment and verifies every record's CRC. A torn tail (an
    incomplete or damaged record at the end of the newest segment, with nothing intact after
    it) is truncated with a logged warning; every intact record is kept. Damage anywhere else
    raises :class:`~ampsclient.exceptions.CorruptStoreError` naming the file and offset.

    A directory is used by one store at a time (an ``flock`` on ``<dir>/lock``).

    Args:
        path: the store directory (created if missing).
        fsync: ``"always"``, ``"interval"`` or ``"never"`` (see above).
        fsync_interval: seconds between background fsyncs for ``"interval"``.
        segment_size: the size of a segment file (a record larger than that gets a longer
            one of its own).
        error_on_publish_gap: see :meth:`PublishStore.discard_up_to`.

    Raises:
        CorruptStoreError: see above.
        StoreError: the directory is in use by another store, or cannot be written.
    """

    __slots__ = (
        "_always",
        "_dir",
        "_lock_fd",
        "_policy",
        "_resize_handler",
        "_syncer",
        "_torn_tails_repaired",
        "_truncate_on_close",
    )
    index_log: SegmentLog  # (a file store's is always its segment files)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "always",
        fsync_interval: float = 0.005,
        segment_size: int = 16 * MiB,
        error_on_publish_gap: bool = False,
    ) -> None:
        check_policy(fsync, fsync_interval)
        if segment_size < 64:
            raise ValueError("segment_size must be at least 64 bytes")
        super().__init__(error_on_publish_gap=error_on_publish_gap, next_sequence=0)
        self._dir = Path(path)
        """The store directory."""
        self._policy: FsyncPolicy = fsync
        self._always = fsync == "always"
        self.index_log = SegmentLog(
            self._dir, segment_size=segment_size, sync_files=fsync != "never"
        )
        # "interval": a full segment is synced by the background thread, not by the publisher
        self.index_log.defer_roll_sync = fsync == "interval"
        self._torn_tails_repaired = 0
        self._truncate_on_close = False
        self._resize_handler: ResizeHandler | None = None
        self._syncer: IntervalSync | None = None
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create publish store directory {self._dir}: {exc}") from exc
        self._lock_fd = self._acquire_directory()
        try:
            self._load()
        except BaseException as exc:
            self.index_log.release_active(trim=False)
            os.close(self._lock_fd)
            if isinstance(exc, OSError):
                raise StoreError(f"cannot open publish store {self._dir}: {exc}") from exc
            raise
        if fsync == "interval":
            self._syncer = IntervalSync(
                self.index_log, fsync_interval, name=f"publish-store-fsync {self._dir}"
            )

    # ------------------------------------------------------------------ opening

    def _acquire_directory(self) -> int:
        fd = os.open(self._dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        if sys.platform != "win32":
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                raise StoreError(
                    f"publish store {self._dir} is in use by another store or process"
                ) from exc
        return fd

    def _repair(self, inspection: StoreInspection) -> None:
        """Cut a torn tail off and rewrite a torn segment header, as a scan found them."""
        for leftover in (STATE_TMP, SPARE_NAME):  # never part of the store's data
            try:
                (self._dir / leftover).unlink()
            except FileNotFoundError:
                pass
        torn = inspection.torn_tail
        if torn is not None:
            logger.warning(
                "publish store %s: dropping a torn record at offset %d of %s (%d bytes)",
                self._dir,
                torn.offset,
                torn.path.name,
                torn.length,
            )
            fd = os.open(torn.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, torn.offset)  # re-extended with zeros when it is mapped
                if self.index_log.sync_files:
                    os.fsync(fd)
            finally:
                os.close(fd)
            self._torn_tails_repaired += 1
        if inspection.header_torn:
            path = inspection.segments[-1].path
            logger.warning("publish store %s: rewriting the torn header of %s", self._dir, path)
            path.write_bytes(SEGMENT_MAGIC)
            inspection.segments[-1].size = len(SEGMENT_MAGIC)

    def _load(self) -> None:
        found = scan(self._dir)
        inspection, live, singles = found.inspection, found.live, found.singles
        self._repair(inspection)
        next_sequence = inspection.next_sequence
        self.index_next = initial_sequence() if next_sequence is None else next_sequence
        self._last_persisted = inspection.last_persisted
        if live:
            self.index_first = live[0][0]
            self.index_buf = [None if s in singles else p for s, p in live]
            self.index_count = len(inspection.messages)
            self._holes = len(inspection.holes)
            self.index_pad = self.index_next - (self.index_first + len(self.index_buf))
        self.index_log.open(inspection.segments, self.index_next)
        logger.debug(
            "publish store %s opened: %d unpersisted, next sequence %d, %d segment(s)",
            self._dir,
            self.index_count,
            self.index_next,
            len(self.index_log.segments),
        )
        self.index_log.compact(self._low(), self._last_persisted, self.index_next - 1)

    # ------------------------------------------------------------------ writing (lock held)

    def _low(self) -> int | None:
        """The lowest unpersisted sequence number, ``None`` when there is none."""
        return self.index_first if self.index_count else None

    def _check_writable(self) -> None:
        self._check_open()
        if self.index_log.broken is not None:
            raise StoreError(f"publish store {self._dir} is unusable: {self.index_log.broken}")

    def _write(self, first: int, payloads: list[bytes]) -> int:
        """Record and index ``payloads`` (sequences from ``first``); returns the write
        generation to sync to. The one write path of :meth:`store`, :meth:`store_parts`
        and :meth:`store_many`."""
        log = self.index_log
        if log.roll_blocked is not None and log.active_size >= log.segment_size:
            # the last roll found the disk full: try again before growing the full segment
            # (the roll first reclaims segments whose messages were persisted meanwhile)
            log.roll(first, self._low(), self._last_persisted)
        elif (
            log.active_size
            + (
                record_size(len(payloads[0]))
                if len(payloads) == 1
                else sum(record_size(len(p)) for p in payloads)
            )
            > log.segment_size
            and first > log.active_first
        ):
            # what does not fit starts the next segment (growing the full one for it would
            # cost a second mapping and an unmap of the whole segment)
            log.roll(first, self._low(), self._last_persisted)
        log.write_stores(first, payloads)
        self._index_extend(first, payloads)
        if log.active_size >= log.segment_size:
            log.roll(self.index_next, self._low(), self._last_persisted)
        return log.write_gen

    def store(self, build: Build | StorableMessage) -> int:
        """Assign the next sequence number, build the payload, append it; returns the number.

        With ``fsync="always"`` the record is on stable storage when this returns.

        Raises:
            StoreError: the store is closed, or the write or the fsync failed (after a failed
                fsync the message is kept, but its durability is unknown).
        """
        make = as_build(build)
        with self.index_lock:
            if self.index_closed or self.index_log.broken is not None:
                self._check_writable()
            s = self.index_next
            generation = self._write(s, [make(s)])
        if self._always:
            self.index_log.sync_to(generation)
        return s

    def store_parts(self, head: bytes, tail: bytes) -> tuple[int, bytes]:
        """:meth:`store` of ``head + b"<sequence>" + tail`` (the HA client's hot path)."""
        with self.index_lock:
            if self.index_closed or self.index_log.broken is not None:
                self._check_writable()
            s = self.index_next
            payload = join_seq_fast(head, s, tail)
            generation = self._write(s, [payload])
        if self._always:
            self.index_log.sync_to(generation)
        return s, payload

    def store_many(self, builds: Iterable[Build]) -> list[int]:
        """Store a batch with one copy into the segment and (for ``"always"``) one fsync.

        All or none of the batch is recorded.
        """
        with self.index_lock:
            self._check_writable()
            s = self.index_next
            payloads: list[bytes] = []
            for build in builds:
                payloads.append(build(s + len(payloads)))
            if not payloads:
                return []
            generation = self._write(s, payloads)
        if self._always:
            self.index_log.sync_to(generation)
        return list(range(s, s + len(payloads)))

    def _record_discard(self, kind: bytes, sequence: int) -> None:
        """Record a discard (no fsync); an I/O error is logged, not raised (it only costs a
        duplicate replay after a restart)."""
        if self.index_log.broken is not None:
            return
        try:
            self.index_log.append(control_record(kind, sequence))
        except StoreError:
            logger.exception("publish store %s: could not record a discard", self._dir)

    def flush(self) -> None:
        """Force everything written so far to stable storage now (any policy)."""
        self.index_log.sync_to(self.index_log.write_gen)

    def close(self) -> None:
        """Sync (unless ``"never"``), write the state file and release the directory.

        Idempotent. Threads blocked in :meth:`wait_for` wake up and raise ``StoreError``.
        """
        with self.index_lock:
            if self.index_closed:
                return
            self.index_closed = True
            self._cond.notify_all()
        if self._syncer is not None:
            self._syncer.stop()
        with self.index_lock:
            try:
                self.index_log.close(self._low(), self._last_persisted, self.index_next - 1)
                if (
                    self._truncate_on_close
                    and not self.index_count
                    and self.index_log.broken is None
                ):
                    self.index_log.remove_all()  # the state file keeps the sequence numbers
            except OSError as exc:
                raise StoreError(f"publish store {self._dir}: close failed: {exc}") from exc
            finally:
                os.close(self._lock_fd)
        logger.debug("publish store %s closed", self._dir)

    # ------------------------------------------------------------------ official options

    def truncate_on_close(self) -> None:
        """Official: when the store is empty at :meth:`close`, delete its segment files (the
        state file stays, so sequence numbers keep rising); otherwise close as usual."""
        self._truncate_on_close = True

    def set_resize_handler(self, handler: ResizeHandler | None) -> None:
        """Official: ``handler(store, size) -> bool`` is asked before the store's files grow
        (a new segment, or a segment extended for a large record) with the total bytes they
        would take. ``False`` refuses: a refused new segment means appending to the current
        one, a refused extension makes that :meth:`store` raise ``StoreError`` (nothing
        stored). ``None`` removes the handler."""
        with self.index_lock:
            self._resize_handler = handler
            self.index_log.resize_check = None if handler is None else self._ask_resize
            if handler is not None:  # a spare segment is disk space it was not asked for
                self.index_log.stop_spares()

    def _ask_resize(self, size: int) -> bool:
        handler = self._resize_handler
        return handler is None or bool(handler(self, size))

    # ------------------------------------------------------------------ introspection

    @property
    def path(self) -> Path:
        """The store directory."""
        return self._dir

    @property
    def fsync_policy(self) -> FsyncPolicy:
        """``"always"``, ``"interval"`` or ``"never"``."""
        return self._policy

    @property
    def segment_log(self) -> SegmentLog:
        """The segment files (the C speedups' ``PublishLane`` writes records through it)."""
        return self.index_log

    def segment_files(self) -> list[Path]:
        """The segment files, oldest first (the last one is being appended to)."""
        with self.index_lock:
            return [s.path for s in self.index_log.segments]

    def statistics(self) -> dict[str, int]:
        """The base counters plus ``fsyncs``, ``segments``, ``segments_deleted``,
        ``disk_bytes`` (segment bytes) and ``torn_tails_repaired``."""
        stats = super().statistics()
        with self.index_lock:
            log = self.index_log
            stats.update(
                fsyncs=log.fsyncs,
                segments=len(log.segments),
                segments_deleted=log.segments_deleted,
                disk_bytes=log.disk_bytes(),
                torn_tails_repaired=self._torn_tails_repaired,
            )
        return stats

    def __repr__(self) -> str:
        return (
            f"FilePublishStore({str(self._dir)!r}, fsync={self._policy!r}, "
            f"unpersisted={self.index_count}, next={self.index_next})"
        )
