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
:mod:`.journal_recovery` (finding and loading files), :mod:`.journal_open` (the files and their
state: :class:`~.journal_open.JournalFiles`), :mod:`.journal_reads` (blocks, time lookups,
cursors) and :mod:`.journal_maintenance` (remove, compress, archive). This module holds
:class:`Journal`, which owns one ``JournalFiles`` (composition, not a base class): appending,
group commit, lookups, reads and management, and re-exports the public names.

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
from operator import itemgetter
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
from .journal_open import JournalFiles
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
    "MAX_SEGMENT_TOPICS",
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

MAX_SEGMENT_TOPICS: Final = 1024
"""A journal file written to more topics than this forgets them (its topics are then
unknown: every replay reads it), so the sets stay small whatever the topics' number."""
_topic_of: Final = itemgetter(1)
"""The topic of an ``append_many`` record ``(sequence, topic, payload)``."""
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


class Journal:
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

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        journal_size: int = DEFAULT_JOURNAL_SIZE,
        fsync: FsyncPolicy = "always",
        preallocated_files: int = 0,
        name: str | None = None,
        archive_directory: str | os.PathLike[str] | None = None,
        read_only: bool = False,
    ) -> None:
        self._files = JournalFiles(
            directory,
            journal_size=journal_size,
            fsync=fsync,
            preallocated_files=preallocated_files,
            name=name,
            archive_directory=archive_directory,
            read_only=read_only,
        )

    # ---------------------------------------------------------------- properties

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._files.closed

    @property
    def directory(self) -> Path:
        """The journal directory."""
        return self._files.directory

    @property
    def archive_directory(self) -> Path | None:
        """Where :meth:`archive` moves sealed files (``None``: not configured)."""
        return self._files.archive_directory

    @property
    def name(self) -> str:
        """The prefix of this journal's files (the instance name)."""
        return self._files.names.prefix

    @property
    def fsync_policy(self) -> FsyncPolicy:
        """The durability policy given at opening."""
        return self._files.fsync_policy

    @property
    def last_index(self) -> int:
        """Index of the newest record (0 when nothing was ever appended)."""
        return self._files.last_index

    @property
    def first_index(self) -> int:
        """Index of the oldest retained record.

        When the journal holds no record this is ``last_index + 1`` (so 1 for a new journal):
        ``first_index <= i <= last_index`` is always the retained range.
        """
        f = self._files
        with f.lock:
            return f.segments[0].first_index

    @property
    def durable_index(self) -> int:
        """The highest index known durable under the fsync policy (as of the last sync)."""
        return self._files.durable_index

    def last_sequence(self, publisher_id: int) -> int:
        """The highest sequence stored for ``publisher_id`` (0 if none).

        Survives restarts and pruning (kept in ``<name>.clients`` for sealed segments).
        """
        return self._files.last_seq.get(publisher_id, 0)

    def last_sequences(self) -> dict[int, int]:
        """A copy of the highest stored sequence of every publisher seen."""
        f = self._files
        with f.lock:
            return dict(f.last_seq)

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

        The record goes to an in-process buffer (written to the OS by the next append once the
        buffer is full, and by :meth:`flush`/:meth:`sync`): it is *not* durable until a
        :meth:`sync` returns an index at or above it. A write that fails (a full disk) raises
        ``OSError`` before anything of the record is stored: a record is never both refused
        and in the log.

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
        f = self._files
        _check_command(command, publisher_id)
        if not 0 < sequence < _UINT64:
            raise ValueError(f"sequence must be unsigned 64-bit and >= 1: {sequence!r}")
        if type(payload) is not bytes:
            payload = bytes(payload)
        fdict: dict[str, str | int] = dict(fields) if fields else {}
        tail = _packb([command, topic, payload, fdict])
        with f.lock:
            f.check_appendable()
            last_seq = f.last_seq
            if sequence <= last_seq.get(publisher_id, 0):
                raise SequenceOrderError(
                    f"publisher {publisher_id}: sequence {sequence} is not above the last stored "
                    f"{last_seq.get(publisher_id, 0)}"
                )
            if len(f.buf) >= _WRITE_AT:  # before the record: a write that fails (a full
                f.write_out()  # disk) refuses it with nothing appended
            ts = _time_ns() // 1000 if timestamp is None else timestamp
            if ts < f.last_ts:
                ts = f.last_ts
            index = f.last_index + 1
            body = _fixed_pack(index, ts, publisher_id, sequence) + tail
            buf = f.buf
            buf += _frame_pack(len(body), _crc32(body))
            buf += body
            seg = f.active
            seg.offsets.append(seg.size)
            seg.timestamps.append(ts)
            pub = seg.pubs.get(publisher_id)
            if pub is None:
                pub = seg.pubs[publisher_id] = (array("Q"), array("Q"))
            pub[0].append(sequence)
            pub[1].append(index)
            seg.size += len(body) + 8
            topics = f.table.topics.get(seg.first_index)
            if topics is not None:
                topics.add(topic)
                if len(topics) > MAX_SEGMENT_TOPICS:  # too many to keep: read it whole
                    del f.table.topics[seg.first_index]
            last_seq[publisher_id] = sequence
            f.last_index = index
            f.last_ts = ts
            rotated = seg.size >= f.journal_size and f.rotate()
        if rotated:  # the sync thread is not keeping up with sealing: do it here (bounds memory)
            f.complete_seals()
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
        f = self._files
        _check_command(command, publisher_id)
        if not records:
            return f.last_index + 1, f.last_ts
        prefix = _PREFIXES[command]
        fields_b = _packb(dict(fields)) if fields else _EMPTY_MAP
        with f.lock:
            f.check_appendable()
            if len(f.buf) >= _WRITE_AT:  # before the batch: see append()
                f.write_out()
            prev = f.last_seq.get(publisher_id, 0)
            ts = _time_ns() // 1000
            if ts < f.last_ts:
                ts = f.last_ts
            first = f.last_index + 1
            rotated = self._append_batch(publisher_id, records, prefix, fields_b, ts, prev)
        if rotated:  # the sync thread is not keeping up with sealing: do it here (bounds memory)
            f.complete_seals()
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
        f = self._files
        buf = f.buf
        index = f.last_index + 1
        pos = 0
        n = len(records)
        rotated = False
        while pos < n:
            seg = f.active
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
                f.journal_size,
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
            topics = f.table.topics.get(seg.first_index)
            if topics is not None:
                topics.update(map(_topic_of, records[pos:nxt]))
                if len(topics) > MAX_SEGMENT_TOPICS:  # too many to keep: read it whole
                    del f.table.topics[seg.first_index]
            index += nxt - pos
            pos = nxt
            prev = records[nxt - 1][0]
            f.last_seq[publisher_id] = prev
            f.last_index = index - 1
            f.last_ts = ts
            if size >= f.journal_size:  # rotate inside the batch, exactly where append() would
                rotated = f.rotate() or rotated
        return rotated

    def make_room(self) -> None:
        """Write the append buffer out when the next append would (it holds ``_WRITE_AT``
        bytes): a caller that must change state only if its record can be appended calls
        it first, and a full disk raises ``OSError`` here, before anything changed."""
        f = self._files
        with f.lock:
            if len(f.buf) >= _WRITE_AT:
                f.write_out()

    def flush(self) -> None:
        """Write buffered records to the OS: a kill -9 of this process then loses nothing.

        Not a durability point against power loss (see :meth:`sync`).
        """
        f = self._files
        with f.lock:
            f.check_open()
            f.write_out()

    def sync(self) -> int:
        """Flush and (unless the policy is ``"never"``) fsync: a group commit.

        One fsync covers every record appended before the call. Call it from a worker thread:
        appends continue on other threads while it waits for the disk. Also finishes sealing
        rotated segments (sidecar index, ``<name>.clients``) and tops up the preallocated files.

        Returns:
            :attr:`durable_index`, now at least the :attr:`last_index` seen at the call.
        """
        f = self._files
        with f.sync_lock:
            with f.lock:
                f.check_open()
                f.write_out()
                target = f.last_index
                pending = bool(f.pending)
                fd = -1
                if f.durable_io and target > f.durable_index and not f.read_only:
                    fd = os.dup(f.active.wfd)
                f.stats["syncs"] += 1
            if pending:
                f.complete_seals()
            if f.prealloc > 1 and not f.read_only:
                f.top_up_spares()  # cheap when none is missing
            if fd >= 0:
                f.fsync(fd)
            with f.lock:
                dir_dirty, f.dir_dirty = f.dir_dirty, False
            if dir_dirty and f.durable_io and not f.read_only:
                fsync_dir(f.directory)
            with f.lock:
                if target > f.durable_index:
                    f.durable_index = target
                return f.durable_index

    def write_through(self) -> int | None:
        """The commit of the ``never`` policy without a thread, when that is all it needs:
        write the append buffer to the file and return :attr:`durable_index` (now the last
        index). ``None`` when the commit has more to do (an fsync policy, segments to seal,
        preallocated files to make), a :meth:`sync` is running, the journal is closed or the
        write failed: call :meth:`sync` then (which reports the failure)."""
        f = self._files
        if not f.sync_lock.acquire(blocking=False):
            return None
        try:
            with f.lock:
                if (
                    f.closed
                    or f.durable_io
                    or f.read_only
                    or f.pending
                    or len(f.spares) < f.prealloc - 1
                ):
                    return None
                try:
                    f.write_out()
                except OSError:
                    return None
                f.stats["syncs"] += 1
                if f.last_index > f.durable_index:
                    f.durable_index = f.last_index
                return f.durable_index
        finally:
            f.sync_lock.release()

    # ---------------------------------------------------------------- lookups

    def find_bookmark(self, publisher_id: int, sequence: int) -> int | None:
        """The index of the record with exactly this bookmark, or ``None``.

        Sealed segments: a per-publisher directory (its last sequence in each sealed segment,
        increasing) is bisected to pick the one segment that can hold the bookmark, then that
        segment's memory-mapped sidecar is bisected. The active segment (and any awaiting its
        seal) is searched in memory. O(log segments + log n). ``None`` also for bookmarks of
        records already pruned.
        """
        f = self._files
        with f.lock:
            f.check_open()
            if sequence > f.last_seq.get(publisher_id, 0) or sequence <= 0:
                return None
            mems = [*f.pending, f.active]
            candidate: DiskSegment | None = None
            first = f.table.pubdir.candidate(publisher_id, sequence)
            if first is not None:
                pos = bisect_left(f.firsts, first)
                if pos < len(f.segments):
                    seg = f.segments[pos]
                    if seg.first_index == first and isinstance(seg, DiskSegment):
                        candidate = seg
        if candidate is not None:
            try:
                view = f.handles.view(candidate)
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

    def next_for_topic(self, from_index: int, topic: str) -> int:
        """The first index at or after ``from_index`` that may hold a record of ``topic``:
        segments known to hold none of it (every segment started since opening records the
        topics appended to it; one recovered from disk is read as before) are passed, up to
        :attr:`last_index` ``+ 1``. O(segments passed); counted (``skipped_segments``)."""
        f = self._files
        with f.lock:
            pos = bisect_right(f.firsts, from_index) - 1
            if pos < 0:
                return from_index
            topics = f.table.topics
            segments = f.segments
            for k in range(pos, len(segments)):
                known = topics.get(segments[k].first_index)
                if known is None or topic in known:
                    if k > pos:
                        f.stats["skipped_segments"] += k - pos
                        return segments[k].first_index
                    return from_index
            f.stats["skipped_segments"] += len(segments) - pos
            return max(from_index, f.last_index + 1)

    def find_time(self, timestamp_us: int) -> int:
        """Index of the first record with ``timestamp >= timestamp_us``.

        ``last_index + 1`` if there is none; :attr:`first_index` for a time before the oldest
        retained record. O(log segments + log n).
        """
        return retry_pruned(self._find_time, timestamp_us)

    def _find_time(self, timestamp_us: int) -> int:
        f = self._files
        with f.lock:
            f.check_open()
            segments = list(f.segments)
            last_index = f.last_index
        return locate_time(f.handles, segments, last_index, timestamp_us)

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
        blocks = retry_pruned(self._read_blocks, from_index, max_records, max_bytes)
        if blocks:  # counted: what replays read (tests of the segments they pass)
            f = self._files
            with f.lock:
                f.stats["read_bytes"] += sum(len(block[0]) for block in blocks)
        return blocks

    def _read_blocks(self, from_index: int, max_records: int, max_bytes: int) -> list[RawBlock]:
        """Raw blocks from ``from_index`` (see :meth:`read_blocks`)."""
        f = self._files
        if max_records <= 0:
            return []
        with f.lock:
            f.check_open()
            start = max(from_index, f.segments[0].first_index)
            last = f.last_index
            if start > last:
                return []
            active = f.active
            active_size = active.size
            if f.buf:
                try:
                    f.write_out()
                except OSError:
                    # a full disk: the group commit reports the condition (once); a reader
                    # gets what the files hold, the buffered rest once it could be written
                    last, active_size = f.written_through()
                    if start > last:
                        return []
            pos = bisect_right(f.firsts, start) - 1
            segments = f.segments[pos:]
        return collect_blocks(
            f.handles, segments, active, active_size, start, last, max_records, max_bytes
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
        f = self._files
        token = JournalPin(index)
        with f.lock:
            f.pins.add(token)
        return token

    def unpin(self, token: object) -> None:
        """Release a pin (unknown or already released tokens are ignored)."""
        f = self._files
        with f.lock:
            if isinstance(token, JournalPin):
                f.pins.discard(token)

    # ---------------------------------------------------------------- management

    def segments(self) -> list[SegmentInfo]:
        """Describe every segment, oldest first."""
        return describe(self._files.table)

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
        f = self._files
        cutoff = self._cutoff(older_than_seconds, now)
        with f.maint_lock:
            f.check_writable()
            return remove_segments(f.table, cutoff, durable=f.durable_io)

    def compress(self, older_than_seconds: float, *, now: float | None = None) -> list[Path]:
        """Compress sealed segments whose newest record is older than the cutoff
        (``amps-action-do-compress-journal``).

        Each becomes ``<name>.journal.gz`` (gzip members of whole records; ``zcat`` restores
        the original bytes) where it is (archived ones in the archive directory) and stays
        readable and searchable. Pins do not prevent compression.

        Returns:
            The new compressed files.
        """
        f = self._files
        cutoff = self._cutoff(older_than_seconds, now)
        with f.maint_lock:
            f.check_writable()
            return compress_segments(f.table, cutoff, durable=f.durable_io)

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
        f = self._files
        archive = f.archive_directory
        if archive is None:
            raise JournalError(
                f"journal {f.directory} has no archive directory (JournalArchiveDirectory)"
            )
        cutoff = self._cutoff(older_than_seconds, now)
        with f.maint_lock:
            f.check_writable()
            return archive_segments(f.table, cutoff, archive, durable=f.durable_io)

    def verify(self) -> int:
        """Read and check every retained record and every sidecar; return the record count.

        Raises:
            CorruptJournalError: the first damage found.
        """
        f = self._files
        with f.lock:
            f.check_open()
            segments = list(f.segments)
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
        f = self._files
        with f.lock:
            stats = dict(f.stats)
            stats.update(
                appends=f.last_index - f.opened_at_index,
                first_index=f.segments[0].first_index,
                last_index=f.last_index,
                durable_index=f.durable_index,
            )
        return stats

    def statistics(self) -> dict[str, int]:
        """Counters and sizes: records, bytes, segments, fsyncs, appends, ..."""
        f = self._files
        infos = self.segments()
        stats = self.counters()
        with f.lock:
            stats.update(
                publishers=len(f.last_seq),
                pins=len(f.pins),
                pending_seals=len(f.pending),
                buffered_bytes=len(f.buf),
                spare_files=len(f.spares),
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
        f = self._files
        if f.closed:
            return
        if not f.read_only:
            self.sync()
        with f.maint_lock, f.lock:  # after a running remove/compress/archive
            f.closed = True
            for seg in f.segments:
                if isinstance(seg, MemSegment) and seg.wfd >= 0:
                    os.close(seg.wfd)
                    seg.wfd = -1
        f.handles.close()
        f.release_lock()

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
        f = self._files
        return (
            f"<Journal {str(f.directory)!r} records {f.segments[0].first_index}.."
            f"{f.last_index} durable {f.durable_index}"
            f"{' closed' if f.closed else ''}>"
        )
