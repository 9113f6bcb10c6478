"""The file publish store's segment files: creation, mapping, growth, roll-over, deletion,
the state file, and the group commit that syncs them.

A :class:`SegmentLog` owns the files of one store directory. Its callers hold the store's
lock around every method except :meth:`SegmentLog.sync_to` (the group commit, which runs
outside it). The active segment is preallocated to ``segment_size`` and memory-mapped;
records are copied into the mapping (no ``write()`` syscall), so a segment may end in a run
of zero bytes. Closed segments are trimmed to their data. A record that does not fit in
what is left starts the next segment. Once the active segment is half full (or at the first
roll), a :class:`~.spare.SpareMaker` thread makes the next segment ahead and unmaps full
ones behind, so a roll-over costs the publisher a rename and a swap of mappings.

The C speedups' ``PublishLane`` writes records into the mapping through the public slots
``broken``, ``mm``, ``active_size``, ``map_size``, ``segment_size`` and ``write_gen``
(read with :attr:`~ampsclient.stores.publish.FilePublishStore.segment_log`): keep
``ampsclient/_speedups_src/publish_lane.c`` in step with :meth:`SegmentLog.write_stores`.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

from ... import _accel
from ...exceptions import StoreError
from .record import SEGMENT_MAGIC, encode_state, record_size, store_records, write_record_fast
from .scan import STATE_NAME, STATE_TMP, SegmentInfo, segment_name
from .spare import Spare, SpareMaker, fsync_dir, preallocate, unmap

__all__ = ["MiB", "Segment", "SegmentLog", "fsync_dir", "preallocate", "write_state"]

logger = logging.getLogger("ampsclient.stores.publish")

MiB: Final = 1024 * 1024
_fdatasync = getattr(os, "fdatasync", os.fsync)
_LINUX: Final = sys.platform.startswith("linux")
_PAGE: Final = mmap.PAGESIZE


_STATE_RESERVE: Final = 4096
"""Bytes kept for the state file's next write (one block; the state is far smaller)."""


def write_state(directory: Path, last_persisted: int, last_sequence: int, sync: bool) -> None:
    """Replace ``<dir>/state`` atomically (write a temp file, fsync it, rename, fsync the dir).

    The temp file is kept between writes, preallocated (:func:`reserve_state_block`): the
    ``O_TRUNC`` that starts a write frees its block, so the state can be written on a full
    disk, and it must be, before segments are deleted to make room (:meth:`SegmentLog.roll`).
    """
    tmp = directory / STATE_TMP
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_state(last_persisted, last_sequence))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / STATE_NAME)
    if sync:
        fsync_dir(directory)
    reserve_state_block(directory)


def reserve_state_block(directory: Path) -> None:
    """Keep ``<dir>/state.tmp`` as a preallocated block for the next :func:`write_state`
    (best effort: on a disk already full it is simply not there)."""
    try:
        fd = os.open(directory / STATE_TMP, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        preallocate(fd, _STATE_RESERVE)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(slots=True)
class Segment:
    """One segment file of an open store."""

    path: Path
    size: int
    high: int
    """Highest sequence number used when the segment was closed (meaningless while active)."""


class SegmentLog(_accel.SegmentLogFields):
    """The segment files of one store directory, the active one mapped.

    Built on ``ampsclient._accel.SegmentLogFields`` (the C speedups' own type when built,
    else its twin): ``broken``, ``mm``, ``active_size``, ``map_size``, ``segment_size`` and
    ``write_gen`` are that type's public fields (documented below), which the HA publish
    lane reads and writes through its own struct; the others are this class's own slots.

    Args:
        directory: the store directory.
        segment_size: roll to a new segment past this many bytes.
        sync_files: fsync new files, the state file and the directory (not ``"never"``).
    """

    __slots__ = (
        "active_first",
        "defer_roll_sync",
        "dir_dirty",
        "directory",
        "fd",
        "fsyncs",
        "resize_check",
        "retired",
        "roll_blocked",
        "segments",
        "segments_deleted",
        "spares",
        "state_lock",
        "sync_cond",
        "sync_files",
        "synced_gen",
        "syncing",
    )

    def __init__(self, directory: Path, *, segment_size: int, sync_files: bool) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.sync_files = sync_files
        self.segments: list[Segment] = []
        """Oldest first; the last one is the active segment."""
        self.fd = -1
        self.mm: mmap.mmap | None = None
        """The active segment's mapping (``map_size`` bytes, the file is at least that long)."""
        self.map_size = 0
        self.active_size = 0
        """Bytes of data in the active segment (the next record goes there)."""
        self.broken: str | None = None
        """Why the store refuses writes after an I/O error it could not undo."""
        # Group commit: writes bump write_gen (under the store's lock); a sync covers every
        # write whose generation it read before starting (under sync_cond).
        self.write_gen = 0
        self.synced_gen = 0
        self.syncing = False
        self.sync_cond = threading.Condition(threading.Lock())
        self.fsyncs = 0
        self.segments_deleted = 0
        self.resize_check: Callable[[int], bool] | None = None
        """Asked ``resize_check(new_total_bytes)`` before the files grow (a new segment or a
        longer one); ``False`` refuses the growth."""
        self.defer_roll_sync = False
        """Leave the fsync of a full segment to the next :meth:`sync_to` (``fsync="interval"``
        on Linux, where an fsync of the file covers the pages written through the unmapped
        mapping): a roll then costs the storing thread no fsync of up to a whole segment."""
        self.roll_blocked: str | None = None
        """Why the last :meth:`roll` could not start a new segment (logged once, when it
        starts to fail; ``None`` when rolling works)."""
        self.retired: list[int] = []
        """Descriptors of full segments written since the last sync: :meth:`sync_to` and
        :meth:`close` fsync and close them."""
        self.active_first = 0
        """The sequence number in the active segment's name (a roll names the next segment
        after a larger one)."""
        self.spares: SpareMaker | None = None
        """Makes the next segment ahead and releases full ones behind (started when the
        active segment is half full or by the first roll; ``None`` before, and while a
        resize handler is set: a spare is disk space the handler was not asked for)."""
        self.dir_dirty = False
        """A roll renamed a spare into place since the last sync: the next :meth:`sync_to`
        fsyncs the directory too (``"interval"``; the other policies do it in the roll)."""
        self.state_lock = threading.Lock()
        """Held around writing the state file and deleting the segments it covers (the
        spare maker's thread deletes segments behind a roll)."""

    # ------------------------------------------------------------------ opening

    def open(self, found: list[SegmentInfo], next_sequence: int) -> None:
        """Adopt the segments a scan found (mapping the newest), or create the first one."""
        reserve_state_block(self.directory)
        self.segments = [Segment(s.path, s.size, s.high) for s in found]
        if not self.segments:
            fd, mm, segment = self._new_segment_file(next_sequence)
            self.fd = fd
            self.mm, self.map_size = mm, len(mm)
            self.active_size = segment.size
            self.active_first = next_sequence
            self.segments.append(segment)
        else:
            active = self.segments[-1]
            self.active_first = found[-1].first_sequence
            self.fd = os.open(active.path, os.O_RDWR)
            self.active_size = active.size
            self.mm, self.map_size = self._map(self.fd, active.size)

    def _map(self, fd: int, used: int) -> tuple[mmap.mmap, int]:
        """Preallocate the segment to ``segment_size`` (or more) and map all of it."""
        size = max(self.segment_size, used, os.fstat(fd).st_size)
        preallocate(fd, size)
        return mmap.mmap(fd, size), size

    def _new_segment_file(self, next_sequence: int) -> tuple[int, mmap.mmap, Segment]:
        """Create ``seg-<next>.log``: the magic, then zeros up to ``segment_size``, mapped
        (synced unless ``"never"``)."""
        path = self.directory / segment_name(next_sequence)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, SEGMENT_MAGIC)
            mm, _ = self._map(fd, len(SEGMENT_MAGIC))
            try:
                if self.sync_files:
                    _fdatasync(fd)
                    fsync_dir(self.directory)
            except BaseException:
                mm.close()
                raise
        except BaseException:
            os.close(fd)
            try:
                path.unlink()
            except OSError:
                pass
            raise
        return fd, mm, Segment(path, len(SEGMENT_MAGIC), 0)

    def _unmap_active(self) -> None:
        """Drop the active segment's mapping (on the spare maker's thread when there is one:
        unmapping a full segment costs about 1 ms holding the GIL)."""
        mm, self.mm = self.mm, None
        if mm is None:
            return
        if self.spares is not None:
            self.spares.release(mm)
        else:
            unmap(mm)

    def release_active(self, *, trim: bool) -> None:
        """Unmap and close the active segment; with ``trim``, cut its zero tail off first
        (best effort: a zero tail is valid, it only costs disk space)."""
        self._unmap_active()
        if self.fd < 0:
            return
        if trim:
            try:
                os.ftruncate(self.fd, self.active_size)
            except OSError as exc:
                logger.warning(
                    "publish store %s: could not trim a segment: %s", self.directory, exc
                )
        os.close(self.fd)
        self.fd = -1

    def _retire_active(self) -> None:
        """Unmap the active segment and cut its zero tail, keeping its descriptor in
        :attr:`retired` for the next sync."""
        self._unmap_active()
        if self.fd < 0:
            return
        try:
            os.ftruncate(self.fd, self.active_size)
        except OSError as exc:
            logger.warning("publish store %s: could not trim a segment: %s", self.directory, exc)
        self.retired.append(self.fd)
        self.fd = -1

    def _sync_retired(self, fds: list[int]) -> None:
        """fsync and close the descriptors of full segments (see :attr:`retired`); the first
        ``OSError`` is raised once every one is closed."""
        error: OSError | None = None
        for fd in fds:
            try:
                _fdatasync(fd)
                self.fsyncs += 1
            except OSError as exc:
                error = error or exc
            finally:
                os.close(fd)
        if error is not None:
            raise error

    # ------------------------------------------------------------------ writing

    def write_stores(self, first: int, payloads: list[bytes]) -> None:
        """Write the records of ``payloads`` (sequences from ``first``) at the end of the
        active segment: the one write path of every store method.

        The only failure (growing the segment for an oversized record) happens before
        anything is copied, so a partial record never stays in the middle of the log.
        """
        start = self.active_size
        if len(payloads) == 1:  # written in place (in C when the speedups are built)
            end = start + record_size(len(payloads[0]))
            if end > self.map_size:
                self._grow(end)
            write_record_fast(self.mm, start, first, payloads[0])
            self.active_size = end
            self.write_gen += 1
        else:
            self.append(store_records(first, payloads))

    def append(self, record: bytes) -> None:
        """Copy one record (or a batch) into the active segment's mapping."""
        start = self.active_size
        end = start + len(record)
        if end > self.map_size:
            self._grow(end)
        assert self.mm is not None
        self.mm[start:end] = record
        self.active_size = end
        self.write_gen += 1
        if self.spares is None and end * 2 > self.segment_size:
            self.start_spares()

    def _grow(self, end: int) -> None:
        """Extend the active segment and its mapping to hold ``end`` bytes (a record that
        crosses ``segment_size``); ``StoreError`` (nothing written) if the disk is full."""
        size = -(-end // _PAGE) * _PAGE
        if not self._may_grow(size - self.map_size):
            raise StoreError(
                f"publish store {self.directory}: the resize handler refused to grow the store"
            )
        try:
            preallocate(self.fd, size)
            mm = mmap.mmap(self.fd, size)
        except OSError as exc:
            raise StoreError(f"publish store {self.directory}: write failed: {exc}") from exc
        with self.sync_cond:
            if not _LINUX:  # a sync there msyncs the mapping (on Linux it fsyncs the fd)
                self._wait_no_sync()
            assert self.mm is not None
            self.mm.close()
            self.mm, self.map_size = mm, size

    def _may_grow(self, more: int) -> bool:
        """Whether the resize check (if any) lets the files grow by ``more`` bytes."""
        check = self.resize_check
        if check is None:
            return True
        total = sum(s.size for s in self.segments[:-1]) + self.map_size + more
        return bool(check(total))

    def remove_all(self) -> None:
        """Delete every segment file (after :meth:`close`, for an empty store)."""
        for segment in self.segments:
            try:
                segment.path.unlink()
            except FileNotFoundError:
                pass
        self.segments_deleted += len(self.segments)
        self.segments.clear()
        if self.sync_files:
            fsync_dir(self.directory)

    def _wait_no_sync(self) -> None:
        """Wait until no sync runs (``sync_cond`` held)."""
        while self.syncing:
            self.sync_cond.wait()

    def roll(self, next_sequence: int, low: int | None, last_persisted: int) -> None:
        """Close the full active segment, start a new one, and delete discarded segments.

        The new segment is the spare made ahead (:mod:`.spare`), renamed, when one is ready;
        else it is made here. Called after a record filled the segment, or before one that
        does not fit: it does not raise for problems that leave the records safe: if the
        new segment cannot be created, it logs a warning and the store keeps appending to
        the old one (and tries again after the next store).

        Args:
            next_sequence: the next sequence number (names the new segment).
            low: the lowest unpersisted sequence number, ``None`` if there is none.
            last_persisted: the store's last persisted sequence number.
        """
        active = self.segments[-1]
        if not self._may_grow(self.segment_size):
            logger.warning(
                "publish store %s: the resize handler refused a new segment; still appending to %s",
                self.directory,
                active.path.name,
            )
            return
        made = self._take_spare(next_sequence)
        renamed = made is not None
        try:
            if made is None:
                made = self._new_segment_file(next_sequence)
        except OSError:
            # A full disk: the segments whose messages were all persisted meanwhile may be
            # what fills it. Delete them, then try once more.
            try:
                self.compact(low, last_persisted, next_sequence - 1)
                made = self._new_segment_file(next_sequence)
            except OSError as exc:
                if self.roll_blocked is None:
                    logger.warning(
                        "publish store %s: cannot start a new segment (%s); still appending "
                        "to %s (said once until a new segment can be made)",
                        self.directory,
                        exc,
                        active.path.name,
                    )
                self.roll_blocked = str(exc)
                return
        fd, mm, segment = made
        if self.roll_blocked is not None:
            logger.warning("publish store %s: new segments can be made again", self.directory)
            self.roll_blocked = None
        with self.sync_cond:
            retire = self.defer_roll_sync and _LINUX and self.write_gen > self.synced_gen
            if not retire:  # (a running sync keeps a retired descriptor open: no wait)
                self._wait_no_sync()
            try:
                if self.sync_files and not retire:
                    self.sync_active(self.fd)
                    self.fsyncs += 1
                    if renamed:
                        fsync_dir(self.directory)
            except OSError as exc:
                mm.close()
                os.close(fd)
                segment.path.unlink()
                self.broken = f"fsync of {active.path.name} failed ({exc})"
                raise StoreError(f"publish store {self.directory}: {self.broken}") from exc
            if retire:  # the next sync_to covers it (synced_gen stays behind until then)
                self._retire_active()
            else:
                self.release_active(trim=True)
            active.size = self.active_size
            active.high = next_sequence - 1
            self.fd = fd
            self.mm, self.map_size = mm, len(mm)
            self.active_size = segment.size
            self.active_first = next_sequence
            self.segments.append(segment)
            if not retire:
                self.synced_gen = self.write_gen
            elif renamed and self.sync_files:
                self.dir_dirty = True  # the next sync makes the new name durable
        self._compact_behind(low, last_persisted, next_sequence - 1)
        if self.spares is not None:
            self.spares.kick()

    def _compact_behind(self, low: int | None, last_persisted: int, last_sequence: int) -> None:
        """:meth:`compact` after a roll: on the spare maker's thread when there is one (the
        segments leave :attr:`segments` now; their files go once the state file covering
        them is written there, two fsyncs the publisher does not wait for)."""
        if self.spares is None:
            try:
                self.compact(low, last_persisted, last_sequence)
            except OSError as exc:
                logger.warning(
                    "publish store %s: could not delete old segments: %s", self.directory, exc
                )
            return
        doomed = self._doomed(low)
        if not doomed:
            return
        paths = [segment.path for segment in self.segments[:doomed]]
        del self.segments[:doomed]
        self.segments_deleted += doomed
        self.spares.submit(partial(self._delete, paths, last_persisted, last_sequence))

    def _delete(self, paths: list[Path], last_persisted: int, last_sequence: int) -> None:
        """Record the state, then delete ``paths`` (segments no longer in :attr:`segments`);
        a failure is logged (the files stay until the next open deletes them)."""
        try:
            with self.state_lock:
                write_state(self.directory, last_persisted, last_sequence, self.sync_files)
                for path in paths:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    logger.debug("publish store %s: deleted %s", self.directory, path.name)
            if self.sync_files:
                fsync_dir(self.directory)
        except OSError as exc:
            logger.warning(
                "publish store %s: could not delete old segments: %s", self.directory, exc
            )

    def _doomed(self, low: int | None) -> int:
        """How many of the oldest closed segments hold only discarded messages (``low``: the
        lowest unpersisted sequence number, ``None`` if none)."""
        doomed = 0
        for segment in self.segments[:-1]:
            if low is not None and segment.high >= low:
                break
            doomed += 1
        return doomed

    def _take_spare(self, next_sequence: int) -> tuple[int, mmap.mmap, Segment] | None:
        """The spare segment renamed to ``seg-<next_sequence>.log``, if one is ready (the
        first call starts the :class:`~.spare.SpareMaker`; none while a resize handler is
        set)."""
        if self.spares is None:
            self.start_spares()
            return None
        spare: Spare | None = self.spares.take(self.directory / segment_name(next_sequence))
        if spare is None:
            return None
        return spare.fd, spare.mm, Segment(spare.path, len(SEGMENT_MAGIC), 0)

    def start_spares(self) -> None:
        """Start the :class:`~.spare.SpareMaker` (not while a resize handler is set: a spare
        is disk space the handler was not asked for)."""
        if self.spares is None and self.resize_check is None and self.fd >= 0:
            self.spares = SpareMaker(
                self.directory,
                self.segment_size,
                name=f"publish-store-spare {self.directory}",
            )

    def stop_spares(self) -> None:
        """Stop making spare segments and delete an unused one (a resize handler is set, or
        the store closes)."""
        spares, self.spares = self.spares, None
        if spares is not None:
            spares.stop()

    def compact(self, low: int | None, last_persisted: int, last_sequence: int) -> None:
        """Delete the oldest closed segments whose messages are all discarded (``low``: the
        lowest unpersisted sequence number, ``None`` if none), after recording the state
        (once the deletions behind earlier rolls are done)."""
        if self.spares is not None:
            self.spares.drain()
        doomed = self._doomed(low)
        if not doomed:
            return
        with self.state_lock:
            write_state(self.directory, last_persisted, last_sequence, self.sync_files)
            for segment in self.segments[:doomed]:
                try:
                    segment.path.unlink()
                except FileNotFoundError:
                    pass
                logger.debug("publish store %s: deleted %s", self.directory, segment.path.name)
        del self.segments[:doomed]
        self.segments_deleted += doomed
        if self.sync_files:
            fsync_dir(self.directory)

    # ------------------------------------------------------------------ group commit

    def sync_to(self, generation: int) -> None:
        """Return once an fsync that started after write ``generation`` has completed."""
        cond = self.sync_cond
        with cond:
            while True:
                if self.synced_gen >= generation or self.fd < 0:
                    return
                if not self.syncing:
                    break
                cond.wait()
            self.syncing = True
            target = self.write_gen
            fd = self.fd  # a roll meanwhile retires it: closed by the next sync, not before
            retired, self.retired = self.retired, []
            dir_dirty, self.dir_dirty = self.dir_dirty, False
        error: OSError | None = None
        try:
            self._sync_retired(retired)  # full segments first: they hold the older writes
            if dir_dirty:
                fsync_dir(self.directory)  # a renamed spare's name
            self.sync_active(fd)
        except OSError as exc:
            error = exc
        with cond:
            self.syncing = False
            if error is None:
                self.fsyncs += 1
                if target > self.synced_gen:
                    self.synced_gen = target
            elif dir_dirty:
                self.dir_dirty = True
            cond.notify_all()
        if error is not None:
            raise StoreError(f"publish store {self.directory}: fsync failed: {error}") from error

    def sync_active(self, fd: int) -> None:
        """msync + fdatasync of the active segment, whose descriptor is ``fd`` (without
        holding the GIL on Linux).

        On Linux ``msync(MS_SYNC)`` of a shared file mapping is ``vfs_fsync_range`` on the
        file, i.e. what ``fdatasync`` does, and ``fdatasync`` runs without the GIL (CPython's
        ``mmap.flush`` keeps it), so only ``fdatasync`` is called there.
        """
        if not _LINUX and self.mm is not None:
            self.mm.flush()
        _fdatasync(fd)

    def close(self, low: int | None, last_persisted: int, last_sequence: int) -> None:
        """Sync (unless ``"never"``), compact, write the state file (unless broken) and
        release the active segment; ``OSError`` after the segment was released."""
        try:
            self.stop_spares()
            with self.sync_cond:
                self._wait_no_sync()
                retired, self.retired = self.retired, []
                self._sync_retired(retired)
                if self.sync_files and self.write_gen > self.synced_gen:
                    self.sync_active(self.fd)
                    self.fsyncs += 1
                if self.dir_dirty:
                    fsync_dir(self.directory)
                    self.dir_dirty = False
                self.synced_gen = self.write_gen
            if self.broken is None:
                self.compact(low, last_persisted, last_sequence)
                write_state(self.directory, last_persisted, last_sequence, self.sync_files)
            with contextlib.suppress(FileNotFoundError):  # the reserved block: not needed now
                (self.directory / STATE_TMP).unlink()
        finally:
            with self.sync_cond:
                self.release_active(trim=True)
                self.sync_cond.notify_all()

    def disk_bytes(self) -> int:
        """Bytes of data in the segments."""
        return sum(s.size for s in self.segments[:-1]) + self.active_size
