"""The transaction log (journal): an append-only, segmented, CRC-checked record store.

Pure storage: no sockets, no asyncio. The broker appends each recorded publish / delta_publish /
sow_delete, a writer thread calls :meth:`Journal.sync` (group commit: one fsync for everything
appended since the previous one) and releases persisted acks up to the returned index, and replays
read batches from any position, found by bookmark (:meth:`Journal.find_bookmark`) or by time
(:meth:`Journal.find_time`).

Layout of the journal directory (formats in :mod:`.journal_format` and ``docs/journal.md``;
``journal`` is the file prefix, the instance name when the server opens it)::

    journal-00000000000000000001.journal      a segment: records 1..N (name = first index)
    journal-00000000000000000001.index        its sidecar index, written when it is sealed
    journal-00000000000000001234.journal.gz   a compressed sealed segment (still readable)
    journal-00000000000000005678.journal      the active segment (no sidecar yet)
    journal.spare-1                           a preallocated file, the next segment to be
    journal.clients                           highest sequence per publisher, sealed segments
    journal.lock                              held (flock) by the process that has it open

Archived segments live in the archive directory under the same names (their sidecars stay).

The journal is split by concern: :mod:`.journal_types` (records, errors, constants),
:mod:`.journal_segments` (segments in memory, handles, the shared table),
:mod:`.journal_recovery` (finding and loading files), :mod:`.journal_reads` (blocks, time
lookups, cursors) and :mod:`.journal_maintenance` (remove, compress, archive). This module holds
:class:`Journal`: appending, group commit, sealing and lookups, and re-exports the public names.

Memory stays flat as the log grows: the active segment keeps a few ``array('Q')`` columns (8 bytes
per record per column); sealed segments keep only a handful of numbers each, and their sidecar
indexes are memory-mapped on demand (a bounded number at a time), never loaded into Python
objects.

Threading: :meth:`append`, :meth:`flush`, :meth:`read`, the ``find_*`` methods, :meth:`sync`,
:meth:`prune`, :meth:`compress` and :meth:`archive` may be called from different threads. One
internal lock guards the in-memory state and is held only for short, non-blocking work (never
across an fsync, the sealing of a segment or a compression), so appends go on while another
thread syncs.
"""

from __future__ import annotations

import logging
import os
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self
from zlib import crc32 as _crc32

import msgpack

from .. import accel
from .journal_append import journal_frames as _py_journal_frames, record_prefix
from .journal_format import (
    FIXED,
    FRAME,
    CorruptJournalError,
    decode_records,
    fsync_dir,
    verify_index_body,
)
from .journal_maintenance import (
    archive_segments,
    compress_segments,
    describe,
    remove_segments,
)
from .journal_open import JournalBase
from .journal_reads import JournalCursor, collect_blocks, locate_time
from .journal_segments import (
    DiskSegment,
    MemSegment,
    seek_seq,
)
from .journal_types import (
    COMMANDS,
    DEFAULT_JOURNAL_SIZE,
    DEFAULT_MAX_BYTES,
    FsyncPolicy,
    JournalClosedError,
    JournalError,
    JournalInUseError,
    JournalPin,
    JournalRecord,
    RawBlock,
    RecordRow,
    SegmentInfo,
    SequenceOrderError,
    make_record,
    retry_pruned,
)

try:  # POSIX advisory lock: one process owns a journal directory
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "COMMANDS",
    "DEFAULT_JOURNAL_SIZE",
    "CorruptJournalError",
    "FsyncPolicy",
    "Journal",
    "JournalClosedError",
    "JournalCursor",
    "JournalError",
    "JournalInUseError",
    "JournalPin",
    "JournalRecord",
    "RawBlock",
    "RecordRow",
    "SegmentInfo",
    "SequenceOrderError",
]

_log = logging.getLogger(__name__)

_UINT64: Final = 1 << 64
_WRITE_AT: Final = 256 * 1024  # write the append buffer to the OS once it holds this much

_packb = msgpack.Packer(use_bin_type=True).pack
_time_ns = time.time_ns
_frame_pack = FRAME.pack
_fixed_pack = FIXED.pack
_journal_frames: Final = accel.journal_frames or _py_journal_frames
_EMPTY_MAP: Final = _packb({})
_PREFIXES: Final = {command: record_prefix(command) for command in COMMANDS}


def _check_command(command: str, publisher_id: int) -> None:
    if command not in COMMANDS:
        raise ValueError(f"cannot journal command {command!r}; expected one of {sorted(COMMANDS)}")
    if not 0 <= publisher_id < _UINT64:
        raise ValueError(f"publisher_id must be unsigned 64-bit: {publisher_id!r}")


class Journal(JournalBase):
    """A segmented transaction log in one directory.

    Args:
        directory: where the segment files live (created if missing).
        journal_size: rotate (seal) the active segment once it reaches this many bytes.
        fsync: durability policy. ``"always"`` and ``"interval"`` make :meth:`sync` fsync
            (they differ only in how often the caller syncs: after every batch, or on a timer);
            ``"never"`` never fsyncs (data reaches the OS on :meth:`flush`/:meth:`sync` and
            survives a process crash, not a power loss).
        preallocated_files: how many journal files exist ahead (AMPS
            ``PreallocatedJournalFiles``): besides the active file, ``preallocated_files - 1``
            empty spare files wait to become the next segments (a rotation renames one instead
            of creating a file; the sync thread tops them up). Their disk space is not reserved:
            a reservation of ``JournalSize`` (1 GB by default) per file is more than a test or
            development machine should give away. ``0``: no spares.
        name: the prefix of every file (the instance name, seed 000); files with another
            prefix in the same directory are another instance's and are left alone. Default:
            ``"journal"``, or the one prefix the directory's journal files have (tools
            opening a server's journal).
        archive_directory: where :meth:`archive` moves sealed files (AMPS
            ``JournalArchiveDirectory``); archived files found there at opening are part of
            the log.
        read_only: open without the directory lock and without repairing anything (no torn-tail
            truncation, no sidecar rebuilds written, no new files); appends are refused. For
            inspection tools.

    Opening recovers: each sealed segment's sidecar header is checked (a missing or damaged
    sidecar is rebuilt by scanning, which verifies every record); the newest segment is scanned
    record by record, CRCs verified, and a torn tail (a partial or garbled last write) is
    truncated with a warning. Damage anywhere else raises :class:`CorruptJournalError`.

    Raises:
        CorruptJournalError: damage other than a torn tail, or a gap between segments.
        JournalInUseError: another process holds the directory.
        ValueError: a bad option (including an archive directory equal to ``directory``).
    """

    # ---------------------------------------------------------------- properties

    @property
    def directory(self) -> Path:
        """The journal directory."""
        return self._dir

    @property
    def archive_directory(self) -> Path | None:
        """Where :meth:`archive` moves sealed files (``None``: not configured)."""
        return self._archive

    @property
    def name(self) -> str:
        """The prefix of this journal's files (the instance name)."""
        return self._names.prefix

    @property
    def fsync_policy(self) -> FsyncPolicy:
        """The durability policy given at opening."""
        return self._policy

    @property
    def last_index(self) -> int:
        """Index of the newest record (0 when nothing was ever appended)."""
        return self._last_index

    @property
    def first_index(self) -> int:
        """Index of the oldest retained record.

        When the journal holds no record this is ``last_index + 1`` (so 1 for a new journal):
        ``first_index <= i <= last_index`` is always the retained range.
        """
        with self._lock:
            return self._segments[0].first_index

    @property
    def durable_index(self) -> int:
        """The highest index known durable under the fsync policy (as of the last sync)."""
        return self._durable_index

    def last_sequence(self, publisher_id: int) -> int:
        """The highest sequence stored for ``publisher_id`` (0 if none).

        Survives restarts and pruning (kept in ``<name>.clients`` for sealed segments).
        """
        return self._last_seq.get(publisher_id, 0)

    def last_sequences(self) -> dict[int, int]:
        """A copy of the highest stored sequence of every publisher seen."""
        with self._lock:
            return dict(self._last_seq)

    # ---------------------------------------------------------------- appending

    def append(
        self,
        *,
        publisher_id: int,
        sequence: int,
        topic: str,
        command: str,
        payload: bytes,
        fields: Mapping[str, str | int] | None = None,
        timestamp: int | None = None,
    ) -> JournalRecord:
        """Append one record and return it with its index.

        The record goes to an in-process buffer (written to the OS when the buffer fills, and
        by :meth:`flush`/:meth:`sync`): it is *not* durable until a :meth:`sync` returns an
        index at or above it.

        Args:
            publisher_id: unsigned 64-bit publisher id.
            sequence: the publisher's sequence; must be above :meth:`last_sequence`.
            topic: the topic.
            command: one of :data:`COMMANDS`.
            payload: the message body.
            fields: extra header fields (str or int values) to restore on replay.
            timestamp: receive time in microseconds since the epoch; default now. A value
                below the previous record's is raised to it (the log's times never go back).

        Raises:
            SequenceOrderError: ``sequence`` is not above the publisher's last one.
            ValueError: a bad command, publisher id or sequence.
            JournalClosedError: the journal is closed (or read-only).
        """
        _check_command(command, publisher_id)
        if not 0 < sequence < _UINT64:
            raise ValueError(f"sequence must be unsigned 64-bit and >= 1: {sequence!r}")
        if type(payload) is not bytes:
            payload = bytes(payload)
        fdict: dict[str, str | int] = dict(fields) if fields else {}
        tail = _packb([command, topic, payload, fdict])
        with self._lock:
            self._check_appendable()
            last_seq = self._last_seq
            if sequence <= last_seq.get(publisher_id, 0):
                raise SequenceOrderError(
                    f"publisher {publisher_id}: sequence {sequence} is not above the last stored "
                    f"{last_seq.get(publisher_id, 0)}"
                )
            ts = _time_ns() // 1000 if timestamp is None else timestamp
            if ts < self._last_ts:
                ts = self._last_ts
            index = self._last_index + 1
            body = _fixed_pack(index, ts, publisher_id, sequence) + tail
            buf = self._buf
            buf += _frame_pack(len(body), _crc32(body))
            buf += body
            seg = self._active
            seg.offsets.append(seg.size)
            seg.timestamps.append(ts)
            pub = seg.pubs.get(publisher_id)
            if pub is None:
                pub = seg.pubs[publisher_id] = (array("Q"), array("Q"))
            pub[0].append(sequence)
            pub[1].append(index)
            seg.size += len(body) + 8
            last_seq[publisher_id] = sequence
            self._last_index = index
            self._last_ts = ts
            if len(buf) >= _WRITE_AT:
                self._write_out()
            rotated = seg.size >= self._journal_size and self._rotate()
        if rotated:  # the sync thread is not keeping up with sealing: do it here (bounds memory)
            self._complete_seals()
        return make_record(index, publisher_id, sequence, ts, command, topic, payload, fdict)

    def append_many(
        self,
        publisher_id: int,
        command: str,
        records: Sequence[tuple[int, str, bytes]],
        fields: Mapping[str, str | int] | None = None,
    ) -> tuple[int, int]:
        """Append several records of one publisher at once (the broker's publish batches).

        Same on-disk bytes and checks as one :meth:`append` per record, but one lock round,
        one timestamp for the whole batch, precomputed msgpack pieces and no
        :class:`JournalRecord` objects. Every record is validated before anything is
        appended: on an error nothing of the batch is stored.

        Args:
            publisher_id: unsigned 64-bit publisher id.
            command: one of :data:`COMMANDS`, shared by every record.
            records: ``(sequence, topic, payload)`` per record, sequences strictly increasing
                and above :meth:`last_sequence`.
            fields: extra header fields shared by every record.

        Returns:
            ``(first index, timestamp)``: the records got consecutive indexes from the first.

        Raises:
            SequenceOrderError: a sequence is not above the previous one.
            ValueError: a bad command, publisher id or sequence.
            JournalClosedError: the journal is closed (or read-only).
        """
        _check_command(command, publisher_id)
        if not records:
            return self._last_index + 1, self._last_ts
        prefix = _PREFIXES[command]
        fields_b = _packb(dict(fields)) if fields else _EMPTY_MAP
        with self._lock:
            self._check_appendable()
            prev = self._last_seq.get(publisher_id, 0)
            ts = _time_ns() // 1000
            if ts < self._last_ts:
                ts = self._last_ts
            first = self._last_index + 1
            rotated = self._append_batch(publisher_id, records, prefix, fields_b, ts, prev)
        if rotated:  # the sync thread is not keeping up with sealing: do it here (bounds memory)
            self._complete_seals()
        return first, ts

    def _append_batch(
        self,
        publisher_id: int,
        records: Sequence[tuple[int, str, bytes]],
        prefix: bytes,
        fields: bytes,
        ts: int,
        prev: int,
    ) -> bool:
        """Check, frame and buffer a batch (lock held): ``journal_frames`` builds the records
        up to each rotation point; True if sealing fell behind."""
        buf = self._buf
        index = self._last_index + 1
        pos = 0
        n = len(records)
        rotated = False
        while pos < n:
            seg = self._active
            nxt, size, offsets, seqs, indexes = _journal_frames(
                buf,
                records,
                pos,
                publisher_id,
                index,
                ts,
                prefix,
                fields,
                seg.size,
                self._journal_size,
                prev,
            )
            if nxt < 0:  # nothing of the batch was appended (the first call checks them all)
                bad = -1 - nxt
                seq = records[bad][0]
                before = records[bad - 1][0] if bad > pos else prev
                if isinstance(seq, int) and seq > before:
                    raise ValueError(f"sequence must be unsigned 64-bit: {seq!r}")
                raise SequenceOrderError(
                    f"publisher {publisher_id}: sequence {seq} is not above the last stored "
                    f"{before}"
                )
            seg.add_run(publisher_id, offsets, seqs, indexes, ts, size)
            index += nxt - pos
            pos = nxt
            prev = records[nxt - 1][0]
            self._last_seq[publisher_id] = prev
            self._last_index = index - 1
            self._last_ts = ts
            if size >= self._journal_size:  # rotate inside the batch, exactly where append() would
                rotated = self._rotate() or rotated
        if len(buf) >= _WRITE_AT:
            self._write_out()
        return rotated

    def flush(self) -> None:
        """Write buffered records to the OS: a kill -9 of this process then loses nothing.

        Not a durability point against power loss (see :meth:`sync`).
        """
        with self._lock:
            self._check_open()
            self._write_out()

    def sync(self) -> int:
        """Flush and (unless the policy is ``"never"``) fsync: a group commit.

        One fsync covers every record appended before the call. Call it from a worker thread:
        appends continue on other threads while it waits for the disk. Also finishes sealing
        rotated segments (sidecar index, ``<name>.clients``) and tops up the preallocated files.

        Returns:
            :attr:`durable_index`, now at least the :attr:`last_index` seen at the call.
        """
        with self._sync_lock:
            with self._lock:
                self._check_open()
                self._write_out()
                target = self._last_index
                pending = bool(self._pending)
                fd = -1
                if self._durable_io and target > self._durable_index and not self._read_only:
                    fd = os.dup(self._active.wfd)
                self._stats["syncs"] += 1
            if pending:
                self._complete_seals()
            if self._prealloc > 1 and not self._read_only:
                self._top_up_spares()  # cheap when none is missing
            if fd >= 0:
                self._fsync(fd)
            with self._lock:
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            if dir_dirty and self._durable_io and not self._read_only:
                fsync_dir(self._dir)
            with self._lock:
                if target > self._durable_index:
                    self._durable_index = target
                return self._durable_index

    def write_through(self) -> int | None:
        """The commit of the ``never`` policy without a thread, when that is all it needs:
        write the append buffer to the file and return :attr:`durable_index` (now the last
        index). ``None`` when the commit has more to do (an fsync policy, segments to seal,
        preallocated files to make), a :meth:`sync` is running, the journal is closed or the
        write failed: call :meth:`sync` then (which reports the failure)."""
        if not self._sync_lock.acquire(blocking=False):
            return None
        try:
            with self._lock:
                if (
                    self._closed
                    or self._durable_io
                    or self._read_only
                    or self._pending
                    or len(self._spares) < self._prealloc - 1
                ):
                    return None
                try:
                    self._write_out()
                except OSError:
                    return None
                self._stats["syncs"] += 1
                if self._last_index > self._durable_index:
                    self._durable_index = self._last_index
                return self._durable_index
        finally:
            self._sync_lock.release()

    # ---------------------------------------------------------------- lookups

    def find_bookmark(self, publisher_id: int, sequence: int) -> int | None:
        """The index of the record with exactly this bookmark, or ``None``.

        Sealed segments: a per-publisher directory (its last sequence in each sealed segment,
        increasing) is bisected to pick the one segment that can hold the bookmark, then that
        segment's memory-mapped sidecar is bisected. The active segment (and any awaiting its
        seal) is searched in memory. O(log segments + log n). ``None`` also for bookmarks of
        records already pruned.
        """
        with self._lock:
            self._check_open()
            if sequence > self._last_seq.get(publisher_id, 0) or sequence <= 0:
                return None
            mems = [*self._pending, self._active]
            candidate: DiskSegment | None = None
            first = self._table.pubdir.candidate(publisher_id, sequence)
            if first is not None:
                pos = bisect_left(self._firsts, first)
                if pos < len(self._segments):
                    seg = self._segments[pos]
                    if seg.first_index == first and isinstance(seg, DiskSegment):
                        candidate = seg
        if candidate is not None:
            try:
                view = self._handles.view(candidate)
            except FileNotFoundError:  # pruned since we looked: so is the bookmark
                return None
            lo = bisect_left(view.pids, publisher_id)
            hi = bisect_right(view.pids, publisher_id, lo)
            found = seek_seq(view.seqs, view.indexes, lo, hi, sequence)
            if found > 0:
                return found
        for mem in mems:
            found = mem.find_seq(publisher_id, sequence)
            if found > 0:
                return found
        return None

    def find_time(self, timestamp_us: int) -> int:
        """Index of the first record with ``timestamp >= timestamp_us``.

        ``last_index + 1`` if there is none; :attr:`first_index` for a time before the oldest
        retained record. O(log segments + log n).
        """
        return retry_pruned(self._find_time, timestamp_us)

    def _find_time(self, timestamp_us: int) -> int:
        with self._lock:
            self._check_open()
            segments = list(self._segments)
            last_index = self._last_index
        return locate_time(self._handles, segments, last_index, timestamp_us)

    # ---------------------------------------------------------------- reading

    def read(
        self,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[JournalRecord]:
        """Read a batch of consecutive records starting at ``from_index``.

        ``from_index`` below :attr:`first_index` starts at the oldest retained record. The batch
        stops after ``max_records`` records, or before the record that would take the total
        size on disk (frames included) above ``max_bytes`` (at least one record is returned when
        any is available), or at :attr:`last_index` (records not yet durable are included: cap
        the batch yourself to deliver only durable ones). Reads span segments, compressed and
        archived ones included; every record's CRC is verified.

        Raises:
            CorruptJournalError: a damaged record.
        """
        return [
            make_record(idx, pid, seq, ts, cmd, topic, payload, fields)
            for idx, pid, seq, ts, cmd, topic, payload, fields, _size in self.read_rows(
                from_index, max_records=max_records, max_bytes=max_bytes
            )
        ]

    def read_rows(
        self,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[RecordRow]:
        """:meth:`read` for hot loops: the same records (same checks) as plain tuples
        ``(index, publisher_id, sequence, timestamp, command, topic, payload, fields, size)``,
        without building :class:`JournalRecord` objects (bookmark replays use it)."""
        out: list[RecordRow] = []
        for data, begin, first, n, path in self.read_blocks(
            from_index, max_records=max_records, max_bytes=max_bytes
        ):
            out.extend(decode_records(data, begin, first, n, path))
        return out

    def read_blocks(
        self,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[RawBlock]:
        """The bytes of the records :meth:`read` would return, undecoded, for hot loops that
        decode (and verify: use :func:`.journal_format.decode_records` or the same checks)
        themselves: ``(data, offset in the segment, first index, record count, segment path)``
        per segment touched, in log order."""
        return retry_pruned(self._read_blocks, from_index, max_records, max_bytes)

    def _read_blocks(self, from_index: int, max_records: int, max_bytes: int) -> list[RawBlock]:
        """Raw blocks from ``from_index`` (see :meth:`read_blocks`)."""
        if max_records <= 0:
            return []
        with self._lock:
            self._check_open()
            start = max(from_index, self._segments[0].first_index)
            last = self._last_index
            if start > last:
                return []
            if self._buf:
                self._write_out()
            pos = bisect_right(self._firsts, start) - 1
            segments = self._segments[pos:]
            active = self._active
            active_size = active.size
        return collect_blocks(
            self._handles, segments, active, active_size, start, last, max_records, max_bytes
        )

    def cursor(
        self,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> JournalCursor:
        """A cursor reading batches from ``from_index``; it pins the files it still needs."""
        return JournalCursor(self, from_index, max_records=max_records, max_bytes=max_bytes)

    def pin(self, index: int) -> JournalPin:
        """Keep every segment holding records ``>= index`` from being removed until unpinned."""
        token = JournalPin(index)
        with self._lock:
            self._pins.add(token)
        return token

    def unpin(self, token: object) -> None:
        """Release a pin (unknown or already released tokens are ignored)."""
        with self._lock:
            if isinstance(token, JournalPin):
                self._pins.discard(token)

    # ---------------------------------------------------------------- management

    def segments(self) -> list[SegmentInfo]:
        """Describe every segment, oldest first."""
        return describe(self._table)

    @staticmethod
    def _cutoff(older_than_seconds: float, now: float | None) -> int:
        return int(((time.time() if now is None else now) - older_than_seconds) * 1_000_000)

    def prune(self, older_than_seconds: float, *, now: float | None = None) -> list[Path]:
        """Remove the oldest sealed segments whose newest record is older than the cutoff
        (``amps-action-do-remove-journal``).

        Removal is strictly from the oldest end (a gap would break recovery). A segment still
        needed by a pin (a replay, a cursor, a replication destination that has not
        acknowledged it) stops the removal there, with a log message. The active segment and
        segments not yet sealed are never removed. The per-publisher last sequences stay known
        (``<name>.clients``). Archived segments are removed from the archive directory.

        Args:
            older_than_seconds: age threshold.
            now: the current time in seconds since the epoch (default: the clock).

        Returns:
            The removed segment files.
        """
        cutoff = self._cutoff(older_than_seconds, now)
        with self._maint_lock:
            self._check_writable()
            return remove_segments(self._table, cutoff, durable=self._durable_io)

    def compress(self, older_than_seconds: float, *, now: float | None = None) -> list[Path]:
        """Compress sealed segments whose newest record is older than the cutoff
        (``amps-action-do-compress-journal``).

        Each becomes ``<name>.journal.gz`` (gzip members of whole records; ``zcat`` restores
        the original bytes) where it is (archived ones in the archive directory) and stays
        readable and searchable. Pins do not prevent compression.

        Returns:
            The new compressed files.
        """
        cutoff = self._cutoff(older_than_seconds, now)
        with self._maint_lock:
            self._check_writable()
            return compress_segments(self._table, cutoff, durable=self._durable_io)

    def archive(self, older_than_seconds: float, *, now: float | None = None) -> list[Path]:
        """Move sealed segments whose newest record is older than the cutoff to the archive
        directory (``amps-action-do-archive-journal``).

        Archived files stay part of the log (replays, lookups and recovery read them there);
        their sidecar indexes stay in the journal directory. Pins do not prevent archiving.

        Returns:
            The files now in the archive directory.

        Raises:
            JournalError: no archive directory was configured.
        """
        archive = self._archive
        if archive is None:
            raise JournalError(
                f"journal {self._dir} has no archive directory (JournalArchiveDirectory)"
            )
        cutoff = self._cutoff(older_than_seconds, now)
        with self._maint_lock:
            self._check_writable()
            return archive_segments(self._table, cutoff, archive, durable=self._durable_io)

    def verify(self) -> int:
        """Read and check every retained record and every sidecar; return the record count.

        Raises:
            CorruptJournalError: the first damage found.
        """
        with self._lock:
            self._check_open()
            segments = list(self._segments)
        for seg in segments:
            if isinstance(seg, DiskSegment) and not verify_index_body(seg.index_path, seg.header):
                raise CorruptJournalError(seg.index_path, -1, "sidecar CRC mismatch")
        count = 0
        index = self.first_index
        while True:
            batch = self.read(index, max_records=10_000)
            if not batch:
                return count
            count += len(batch)
            index = batch[-1].index + 1

    def counters(self) -> dict[str, int]:
        """The cheap counters (no file system access): appends since opening, syncs, fsyncs,
        writes, rotations, seals, and the first/last/durable indexes."""
        with self._lock:
            stats = dict(self._stats)
            stats.update(
                appends=self._last_index - self._opened_at_index,
                first_index=self._segments[0].first_index,
                last_index=self._last_index,
                durable_index=self._durable_index,
            )
        return stats

    def statistics(self) -> dict[str, int]:
        """Counters and sizes: records, bytes, segments, fsyncs, appends, ..."""
        infos = self.segments()
        stats = self.counters()
        with self._lock:
            stats.update(
                publishers=len(self._last_seq),
                pins=len(self._pins),
                pending_seals=len(self._pending),
                buffered_bytes=len(self._buf),
                spare_files=len(self._spares),
            )
        stats["records"] = sum(i.records for i in infos)
        stats["bytes"] = sum(i.file_bytes for i in infos)
        stats["data_bytes"] = sum(i.data_bytes for i in infos)
        stats["segments"] = len(infos)
        stats["compressed_segments"] = sum(1 for i in infos if i.state == "compressed")
        stats["archived_segments"] = sum(1 for i in infos if i.archived)
        return stats

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Sync (per policy), finish sealing, release files and the directory lock. Idempotent."""
        if self._closed:
            return
        if not self._read_only:
            self.sync()
        with self._maint_lock, self._lock:  # after a running remove/compress/archive
            self._closed = True
            for seg in self._segments:
                if isinstance(seg, MemSegment) and seg.wfd >= 0:
                    os.close(seg.wfd)
                    seg.wfd = -1
        self._handles.close()
        self._release_lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Journal {str(self._dir)!r} records {self._segments[0].first_index}.."
            f"{self._last_index} durable {self._durable_index}"
            f"{' closed' if self._closed else ''}>"
        )
