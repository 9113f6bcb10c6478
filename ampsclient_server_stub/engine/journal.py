"""The transaction log (journal): an append-only, segmented, CRC-checked record store.

Pure storage: no sockets, no asyncio. The broker appends each recorded publish / delta_publish /
sow_delete, a writer thread calls :meth:`Journal.sync` (group commit: one fsync for everything
appended since the previous one) and releases persisted acks up to the returned index, and replays
read batches from any position, found by bookmark (:meth:`Journal.find_bookmark`) or by time
(:meth:`Journal.find_time`).

Layout of the journal directory (formats in :mod:`.journal_format` and ``docs/journal.md``)::

    journal-00000000000000000001.journal      a segment: records 1..N (name = first index)
    journal-00000000000000000001.index        its sidecar index, written when it is sealed
    journal-00000000000000001234.journal.gz   a compressed sealed segment (still readable)
    journal-00000000000000005678.journal      the active segment (no sidecar yet)
    journal.clients                           highest sequence per publisher, sealed segments
    journal.lock                              held (flock) by the process that has it open

Memory stays flat as the log grows: the active segment keeps a few ``array('Q')`` columns (8 bytes
per record per column); sealed segments keep only a handful of numbers each, and their sidecar
indexes are memory-mapped on demand (a bounded number at a time), never loaded into Python
objects.

Threading: :meth:`append`, :meth:`flush`, :meth:`read`, the ``find_*`` methods, :meth:`sync`,
:meth:`prune` and :meth:`compress` may be called from different threads. One internal lock guards
the in-memory state and is held only for short, non-blocking work (never across an fsync, the
sealing of a segment or a compression), so appends go on while another thread syncs.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeAlias, TypeVar
from zlib import crc32 as _crc32

import msgpack

from ..errors import StorageError
from .journal_format import (
    FIXED,
    FRAME,
    CorruptJournalError,
    FileSource,
    GzipSource,
    IndexHeader,
    IndexView,
    ScanResult,
    Source,
    decode_clients,
    decode_records,
    encode_clients,
    encode_index,
    fsync_dir,
    gzip_segment,
    index_with_blocks,
    read_index,
    scan_gzip,
    scan_records,
    verify_index_body,
    write_atomic,
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

FsyncPolicy: TypeAlias = Literal["always", "interval", "never"]
RecordRow: TypeAlias = tuple[int, int, int, int, str, str, bytes, dict[str, str | int], int]
"""A record as :meth:`Journal.read_rows` returns it: ``(index, publisher_id, sequence,
timestamp, command, topic, payload, fields, size on disk)``."""

RawBlock: TypeAlias = tuple[bytes, int, int, int, Path]
"""Undecoded records as :meth:`Journal.read_blocks` returns them: ``(data, offset in the
segment, first index, record count, segment path)``."""

DEFAULT_JOURNAL_SIZE: Final = 64 * 1024 * 1024
COMMANDS: Final = frozenset({"p", "delta_publish", "sow_delete"})
"""The commands a journal records."""

_UINT64: Final = 1 << 64
_WRITE_AT: Final = 256 * 1024  # write the append buffer to the OS once it holds this much
_MAX_OPEN: Final = 32  # sealed segments with a mapped sidecar / open fd at a time
_MAX_PENDING_SEALS: Final = 1  # more than this and append() seals inline (bounds memory)
_DEFAULT_MAX_BYTES: Final = 4 * 1024 * 1024

_SEGMENT_RE: Final = re.compile(r"journal-(\d{20})\.journal(\.gz)?")
_INDEX_RE: Final = re.compile(r"journal-(\d{20})\.index")
CLIENTS_FILE: Final = "journal.clients"
LOCK_FILE: Final = "journal.lock"

_packb = msgpack.Packer(use_bin_type=True).pack
_time_ns = time.time_ns
_frame_pack = FRAME.pack
_fixed_pack = FIXED.pack
_BIN8: Final = tuple(b"\xc4" + bytes((n,)) for n in range(256))
"""msgpack ``bin 8`` headers by length (payloads under 256 bytes, the usual case)."""


_T = TypeVar("_T")


def _retry_pruned(read: Callable[..., _T], *args: Any) -> _T:
    """``read(*args)``, again (up to three more times) when a segment it looked up was pruned,
    compressed or renamed before it was opened (``FileNotFoundError``)."""
    for _attempt in range(3):
        try:
            return read(*args)
        except FileNotFoundError:
            continue
    return read(*args)


class JournalError(StorageError):
    """Base class of the journal's own errors."""


class JournalClosedError(JournalError, ValueError):
    """The journal was used after :meth:`Journal.close`."""


class JournalInUseError(JournalError, OSError):
    """Another process has the journal directory open for writing."""


class SequenceOrderError(JournalError, ValueError):
    """An append whose sequence is not above the publisher's last stored sequence.

    Duplicates are the broker's business (it must not journal them); the journal refuses them so
    that each publisher's sequences stay strictly increasing, which bookmark lookups rely on.
    """


# CorruptJournalError lives in journal_format (the scanners raise it) and is re-exported here.


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One journaled message.

    Attributes:
        index: this instance's log position: 1-based, +1 per record, never reused.
        publisher_id: unsigned 64-bit hash of the publisher's client name
            (:func:`ampsclient.protocol.bookmarks.publisher_id_for`).
        sequence: the publisher's sequence number (strictly increasing per publisher).
        timestamp: server receive time, integer microseconds since the epoch (UTC);
            non-decreasing along the log.
        command: ``"p"``, ``"delta_publish"`` or ``"sow_delete"``.
        topic: the topic.
        payload: the message body as delivered to subscribers.
        fields: extra header fields to restore on replay (``k``, ``x``, ``e``, ``mt``,
            ``client_name``, ``filter``/``sow_keys`` of a sow_delete, ...).
    """

    index: int
    publisher_id: int
    sequence: int
    timestamp: int
    command: str
    topic: str
    payload: bytes
    fields: Mapping[str, str | int]

    @property
    def bookmark(self) -> str:
        """The AMPS bookmark of this record, ``"<publisher_id>|<sequence>|"``."""
        return f"{self.publisher_id}|{self.sequence}|"


_new_object = object.__new__
(_set_index, _set_pid, _set_seq, _set_ts, _set_cmd, _set_topic, _set_payload, _set_fields) = (
    getattr(JournalRecord, name).__set__
    for name in (
        "index",
        "publisher_id",
        "sequence",
        "timestamp",
        "command",
        "topic",
        "payload",
        "fields",
    )
)


def _make_record(
    index: int,
    publisher_id: int,
    sequence: int,
    timestamp: int,
    command: str,
    topic: str,
    payload: bytes,
    fields: Mapping[str, str | int],
) -> JournalRecord:
    """``JournalRecord(...)`` at half the cost (the frozen dataclass __init__ is slow).

    Sets the slots through their descriptors, which a frozen dataclass's ``__setattr__`` does
    not intercept. Used on the append and read hot paths only.
    """
    record: JournalRecord = _new_object(JournalRecord)
    _set_index(record, index)
    _set_pid(record, publisher_id)
    _set_seq(record, sequence)
    _set_ts(record, timestamp)
    _set_cmd(record, command)
    _set_topic(record, topic)
    _set_payload(record, payload)
    _set_fields(record, fields)
    return record


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A description of one segment, for tools and the admin interface.

    Attributes:
        path: the data file (``.journal`` or ``.journal.gz``).
        state: ``"active"`` (being written), ``"sealing"`` (full, sidecar not yet written),
            ``"sealed"`` or ``"compressed"``.
        first_index, last_index: the records it holds (``last_index = first_index - 1`` when
            empty).
        records: ``last_index - first_index + 1``.
        data_bytes: uncompressed size of its records.
        file_bytes: size on disk of the data file.
        first_timestamp, last_timestamp: microseconds since the epoch (0 when empty).
    """

    path: Path
    state: str
    first_index: int
    last_index: int
    records: int
    data_bytes: int
    file_bytes: int
    first_timestamp: int
    last_timestamp: int


class JournalPin:
    """A pin: the journal keeps every segment holding records at or after :attr:`index`.

    Returned by :meth:`Journal.pin`; a :class:`JournalCursor` moves its pin forward as it reads.
    """

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"JournalPin({self.index})"


# --------------------------------------------------------------------------------------------
# segments

_NOT_HERE: Final = -1  # find_seq: look in older segments
_ABSENT: Final = 0  # find_seq: the bookmark is not in the journal


def _segment_name(first_index: int) -> str:
    return f"journal-{first_index:020d}.journal"


def _index_name(first_index: int) -> str:
    return f"journal-{first_index:020d}.index"


def _seek_seq(seqs: Sequence[int], idxs: Sequence[int], lo: int, hi: int, sequence: int) -> int:
    """Look for ``sequence`` among ``seqs[lo:hi]`` (one publisher's, increasing)."""
    if lo >= hi or seqs[lo] > sequence:
        return _NOT_HERE
    if seqs[hi - 1] < sequence:
        return _ABSENT
    k = bisect_left(seqs, sequence, lo, hi)
    return int(idxs[k]) if seqs[k] == sequence else _ABSENT


class _MemSegment:
    """The active segment (or one awaiting its seal): columns held in memory."""

    __slots__ = (
        "first_index",
        "offsets",
        "path",
        "pubs",
        "sealing",
        "size",
        "src",
        "timestamps",
        "wfd",
    )

    def __init__(self, path: Path, first_index: int, scan: ScanResult | None, wfd: int) -> None:
        self.path = path
        self.first_index = first_index
        self.wfd = wfd  # write descriptor (-1 when read-only)
        self.sealing = False
        self.src: FileSource | None = None
        if scan is None:
            scan = ScanResult()
        self.offsets: array[int] = scan.offsets
        self.timestamps: array[int] = scan.timestamps
        self.pubs: dict[int, tuple[array[int], array[int]]] = scan.pubs
        self.size = scan.size  # bytes of records, written or still buffered

    @property
    def count(self) -> int:
        return len(self.offsets)

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.offsets) - 1

    def source(self) -> Source:
        if self.src is None:
            self.src = FileSource(self.path)
        return self.src

    def find_seq(self, publisher_id: int, sequence: int) -> int:
        pub = self.pubs.get(publisher_id)
        if pub is None:
            return _NOT_HERE
        seqs, idxs = pub
        return _seek_seq(seqs, idxs, 0, len(seqs), sequence)


class _DiskSegment:
    """A sealed segment: a few numbers in memory; columns in its memory-mapped sidecar."""

    __slots__ = ("compressed", "header", "index_path", "path", "src", "view")

    def __init__(self, path: Path, index_path: Path, header: IndexHeader, compressed: bool) -> None:
        self.path = path
        self.index_path = index_path
        self.header = header
        self.compressed = compressed
        self.view: IndexView | None = None
        self.src: Source | None = None

    @property
    def first_index(self) -> int:
        return self.header.first_index

    @property
    def count(self) -> int:
        return self.header.count

    @property
    def last_index(self) -> int:
        return self.header.first_index + self.header.count - 1

    def drop_handles(self) -> None:
        # Not closed explicitly: a reader may still hold them; they close when released.
        self.view = None
        self.src = None


_Segment: TypeAlias = _MemSegment | _DiskSegment


# --------------------------------------------------------------------------------------------
# the journal


class Journal:
    """A segmented transaction log in one directory.

    Args:
        directory: where the segment files live (created if missing).
        journal_size: rotate (seal) the active segment once it reaches this many bytes.
        fsync: durability policy. ``"always"`` and ``"interval"`` make :meth:`sync` fsync
            (they differ only in how often the caller syncs: after every batch, or on a timer);
            ``"never"`` never fsyncs (data reaches the OS on :meth:`flush`/:meth:`sync` and
            survives a process crash, not a power loss).
        preallocated_files: accepted for configuration compatibility; segments are not
            preallocated (files grow as records are appended).
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
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        journal_size: int = DEFAULT_JOURNAL_SIZE,
        fsync: FsyncPolicy = "always",
        preallocated_files: int = 0,
        read_only: bool = False,
    ) -> None:
        if fsync not in ("always", "interval", "never"):
            raise ValueError(f"fsync must be 'always', 'interval' or 'never', not {fsync!r}")
        if journal_size <= 0:
            raise ValueError(f"journal_size must be positive, not {journal_size!r}")
        if preallocated_files < 0:
            raise ValueError(f"preallocated_files must be >= 0, not {preallocated_files!r}")
        self._dir = Path(directory)
        self._journal_size = int(journal_size)
        self._policy: FsyncPolicy = fsync
        self._durable_io = fsync != "never"
        self._read_only = read_only
        self._lock = threading.Lock()  # in-memory state; never held across blocking I/O
        self._sync_lock = threading.Lock()  # one sync at a time (group commit)
        self._seal_lock = threading.Lock()  # one sealer at a time
        self._maint_lock = threading.Lock()  # prune / compress
        self._lru_lock = threading.Lock()
        self._open: OrderedDict[int, _DiskSegment] = OrderedDict()
        self._segments: list[_Segment] = []
        self._firsts: list[int] = []
        self._pending: list[_MemSegment] = []
        # per publisher: first indexes of the sealed segments holding it, and its last sequence
        # in each (increasing): find_bookmark bisects this to pick the one segment to search
        self._pubdir: dict[int, tuple[list[int], list[int]]] = {}
        self._pins: set[JournalPin] = set()
        self._buf = bytearray()
        self._last_seq: dict[int, int] = {}
        self._sealed_seq: dict[int, int] = {}  # over sealed segments (what journal.clients holds)
        self._clients_through = 0
        self._last_index = 0
        self._last_ts = 0
        self._durable_index = 0
        self._dir_dirty = False
        self._closed = False
        self._lock_fd = -1
        self._active: _MemSegment  # the last of _segments, set by _recover
        self._opened_at_index = 0
        self._stats = {
            "writes": 0,
            "syncs": 0,
            "fsyncs": 0,
            "rotations": 0,
            "seals": 0,
            "truncated_bytes": 0,
            "pruned_segments": 0,
            "compressed_segments_made": 0,
            "fsync_ns": 0,  # time spent in the group commits' fsync calls (admin statistics)
            "fsync_last_ns": 0,
        }
        if preallocated_files:
            _log.debug(
                "journal: preallocated_files=%d accepted; files are not preallocated",
                preallocated_files,
            )
        if not read_only:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._take_lock()
        elif not self._dir.is_dir():
            raise FileNotFoundError(f"no journal directory {self._dir}")
        try:
            self._recover()
        except BaseException:
            for seg in self._segments:
                if isinstance(seg, _MemSegment) and seg.wfd >= 0:
                    os.close(seg.wfd)
            self._release_lock()
            raise
        if self._dir_dirty and self._durable_io and not read_only:
            fsync_dir(self._dir)
            self._dir_dirty = False
        self._durable_index = self._last_index  # what survived recovery is on disk
        self._opened_at_index = self._last_index

    # ---------------------------------------------------------------- opening / recovery

    def _take_lock(self) -> None:
        path = self._dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                raise JournalInUseError(
                    f"journal {self._dir} is open in another process (lock {path})"
                ) from exc
        self._lock_fd = fd

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, -1
        if fd >= 0:
            os.close(fd)  # releases the flock

    def _recover(self) -> None:
        plain: dict[int, Path] = {}
        gz: dict[int, Path] = {}
        indexes: dict[int, Path] = {}
        for entry in os.scandir(self._dir):
            name = entry.name
            if name.endswith(".tmp"):
                if not self._read_only:
                    _log.info("journal: removing leftover %s", entry.path)
                    os.unlink(entry.path)
                continue
            m = _SEGMENT_RE.fullmatch(name)
            if m:
                (gz if m.group(2) else plain)[int(m.group(1))] = Path(entry.path)
                continue
            m = _INDEX_RE.fullmatch(name)
            if m:
                indexes[int(m.group(1))] = Path(entry.path)
        for first in sorted(set(plain) & set(gz)):
            # compression finished writing the .gz but did not remove the original: keep the
            # original (the .gz may be incomplete if the rename was not durable yet)
            if not self._read_only:
                _log.warning("journal: removing %s (an interrupted compression)", gz[first])
                os.unlink(gz[first])
            del gz[first]
        firsts = sorted(set(plain) | set(gz))
        for first in sorted(set(indexes) - set(firsts)):
            if not self._read_only:
                _log.info("journal: removing orphan sidecar %s", indexes[first])
                os.unlink(indexes[first])

        clients = self._read_clients()
        if clients is not None:
            self._clients_through, self._sealed_seq = clients[0], dict(clients[1])
        expected: int | None = None
        for pos, first in enumerate(firsts):
            is_last = pos == len(firsts) - 1
            compressed = first in gz
            path = gz[first] if compressed else plain[first]
            if expected is not None and first != expected:
                raise CorruptJournalError(
                    path, -1, f"gap in the journal: expected a segment starting at {expected}"
                )
            seg = self._load_segment(path, first, compressed, is_last)
            self._segments.append(seg)
            self._firsts.append(first)
            expected = first + seg.count

        if not self._segments or isinstance(self._segments[-1], _DiskSegment):
            start = expected if expected is not None else self._clients_through + 1
            self._new_active(start)
        else:
            last = self._segments[-1]
            assert isinstance(last, _MemSegment)
            self._active = last
            if not self._read_only:
                last.wfd = self._open_write(last.path)
                if self._durable_io and last.count:
                    # what a killed process left in the page cache becomes durable_index below
                    os.fsync(last.wfd)
                    self._dir_dirty = True

        # every sealed-but-unsealed (no sidecar) segment except the active one gets its seal now
        self._pending = [s for s in self._segments[:-1] if isinstance(s, _MemSegment)]
        for seg in self._pending:
            seg.sealing = True

        # per-publisher table: journal.clients + sealed segments it does not cover + the rest
        stale = False
        for seg in self._segments:
            if not isinstance(seg, _DiskSegment):
                continue
            view = self._view(seg)
            self._register_pubs(seg.first_index, view.pub_pids, view.pub_seqs)
            if seg.last_index > self._clients_through:
                for pid, seq in zip(view.pub_pids, view.pub_seqs, strict=True):
                    if seq > self._sealed_seq.get(pid, 0):
                        self._sealed_seq[pid] = seq
                self._clients_through = seg.last_index
                stale = True
        if clients is None and self._segments and self._segments[0].first_index > 1:
            _log.warning(
                "journal: %s missing or damaged and records before %d were removed: the last "
                "sequence of publishers seen only in removed files is unknown",
                self._dir / CLIENTS_FILE,
                self._segments[0].first_index,
            )
        self._last_seq = dict(self._sealed_seq)
        for seg in self._segments:
            if isinstance(seg, _MemSegment):
                for pid, (seqs, _) in seg.pubs.items():
                    if seqs[-1] > self._last_seq.get(pid, 0):
                        self._last_seq[pid] = seqs[-1]
        if stale and not self._read_only:
            self._write_clients()

        active = self._active
        self._last_index = active.first_index + active.count - 1
        for seg in reversed(self._segments):
            if seg.count:
                self._last_ts = self._last_timestamp(seg)
                break
        if not self._read_only and self._pending:
            self._complete_seals()
        _log.info(
            "journal: opened %s: records %d..%d in %d segment(s)",
            self._dir,
            self.first_index,
            self._last_index,
            len(self._segments),
        )

    def _read_clients(self) -> tuple[int, dict[int, int]] | None:
        path = self._dir / CLIENTS_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        parsed = decode_clients(raw)
        if parsed is None:
            _log.warning("journal: %s is damaged; rebuilding it from the sidecars", path)
        return parsed

    def _load_segment(self, path: Path, first: int, compressed: bool, is_last: bool) -> _Segment:
        index_path = self._dir / _index_name(first)
        header = read_index(index_path)
        if header is not None and header.first_index == first and header.count > 0:
            try:
                size = path.stat().st_size
            except OSError:
                size = -1
            if compressed:
                if header.nblocks:
                    seg = _DiskSegment(path, index_path, header, True)
                    view = IndexView(index_path, header)
                    if view.block_coffs[header.nblocks] == size:
                        return seg
            elif size == header.data_size:
                return _DiskSegment(path, index_path, header, False)
            _log.warning("journal: sidecar %s does not match %s; rebuilding it", index_path, path)
        if compressed:
            res, uoffs, coffs = scan_gzip(path, first)
            if self._read_only:
                raise CorruptJournalError(
                    path, -1, "compressed segment without a valid sidecar; open read-write once"
                )
            data = encode_index(
                first_index=first,
                data_size=res.size,
                offsets=res.offsets,
                timestamps=res.timestamps,
                pubs=res.pubs,
                blocks=(uoffs, coffs),
            )
            write_atomic(index_path, data, durable=self._durable_io)
            new_header = read_index(index_path)
            assert new_header is not None
            return _DiskSegment(path, index_path, new_header, True)
        res = scan_records(path, first, tolerate_tail=is_last)
        if res.torn:
            if self._read_only:
                _log.warning(
                    "journal: %s ends with %d torn bytes (ignored, read-only)", path, res.torn
                )
            else:
                _log.warning(
                    "journal: %s: truncating a torn tail of %d bytes at offset %d",
                    path,
                    res.torn,
                    res.size,
                )
                os.truncate(path, res.size)
                self._stats["truncated_bytes"] += res.torn
        return _MemSegment(path, first, res, -1)

    def _open_write(self, path: Path) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        return os.open(path, flags, 0o644)

    def _new_active(self, first_index: int) -> _MemSegment:
        path = self._dir / _segment_name(first_index)
        wfd = -1 if self._read_only else self._open_write(path)
        seg = _MemSegment(path, first_index, None, wfd)
        self._active = seg
        self._segments.append(seg)
        self._firsts.append(first_index)
        self._dir_dirty = True
        return seg

    # ---------------------------------------------------------------- properties

    @property
    def directory(self) -> Path:
        """The journal directory."""
        return self._dir

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

        Survives restarts and pruning (kept in ``journal.clients`` for sealed segments).
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
        if command not in COMMANDS:
            raise ValueError(
                f"cannot journal command {command!r}; expected one of {sorted(COMMANDS)}"
            )
        if not (0 <= publisher_id < _UINT64 and 0 < sequence < _UINT64):
            raise ValueError(
                f"publisher_id and sequence must be unsigned 64-bit (sequence >= 1): "
                f"{publisher_id!r}, {sequence!r}"
            )
        if type(payload) is not bytes:
            payload = bytes(payload)
        fdict: dict[str, str | int] = dict(fields) if fields else {}
        tail = _packb([command, topic, payload, fdict])
        rotated = False
        with self._lock:
            if self._closed or self._read_only:
                raise JournalClosedError(
                    "journal is closed" if self._closed else "journal is open read-only"
                )
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
            if seg.size >= self._journal_size:
                self._rotate()
                rotated = len(self._pending) > _MAX_PENDING_SEALS
        if rotated:  # the sync thread is not keeping up with sealing: do it here (bounds memory)
            self._complete_seals()
        return _make_record(index, publisher_id, sequence, ts, command, topic, payload, fdict)

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
        if command not in COMMANDS:
            raise ValueError(
                f"cannot journal command {command!r}; expected one of {sorted(COMMANDS)}"
            )
        if not 0 <= publisher_id < _UINT64:
            raise ValueError(f"publisher_id must be unsigned 64-bit: {publisher_id!r}")
        if not records:
            return self._last_index + 1, self._last_ts
        # the msgpack array [command, topic, payload, fields] is built from precomputed pieces:
        # b"\x94" + str(command) + str(topic) + bin header + payload + map(fields)
        fields_b = _packb(dict(fields) if fields else {})
        cmd_b = b"\x94" + _packb(command)
        prefixes: dict[str, bytes] = {}
        tails: list[bytes] = []
        add_tail = tails.append
        join = b"".join
        bin8 = _BIN8
        for _seq, topic, payload in records:
            prefix = prefixes.get(topic)
            if prefix is None:
                prefix = prefixes[topic] = cmd_b + _packb(topic)
            n = len(payload)
            if n < 256:
                add_tail(join((prefix, bin8[n], payload, fields_b)))
            else:
                add_tail(join((prefix, _packb(bytes(payload)), fields_b)))
        rotated = False
        with self._lock:
            if self._closed or self._read_only:
                raise JournalClosedError(
                    "journal is closed" if self._closed else "journal is open read-only"
                )
            last_seq = self._last_seq
            prev = last_seq.get(publisher_id, 0)
            for seq, _topic, _payload in records:
                if seq <= prev:
                    raise SequenceOrderError(
                        f"publisher {publisher_id}: sequence {seq} is not above the last stored "
                        f"{prev}"
                    )
                prev = seq
            if prev >= _UINT64:
                raise ValueError(f"sequence must be unsigned 64-bit: {prev!r}")
            ts = _time_ns() // 1000
            if ts < self._last_ts:
                ts = self._last_ts
            first = index = self._last_index + 1
            buf = self._buf
            seg = self._active
            size = seg.size
            limit = self._journal_size
            offsets: list[int] = []
            seqs: list[int] = []
            seg_first = index
            fixed_pack = _fixed_pack
            frame_pack = _frame_pack
            crc32 = _crc32
            for (seq, _topic, _payload), tail in zip(records, tails, strict=True):
                head = fixed_pack(index, ts, publisher_id, seq)
                body_len = len(head) + len(tail)
                buf += frame_pack(body_len, crc32(tail, crc32(head)))
                buf += head
                buf += tail
                offsets.append(size)
                seqs.append(seq)
                size += body_len + 8
                index += 1
                if size >= limit:  # rotate inside the batch, exactly where append() would
                    self._columns_add(seg, publisher_id, offsets, seqs, seg_first, ts, size)
                    last_seq[publisher_id] = seq
                    self._last_index = index - 1
                    self._last_ts = ts
                    self._rotate()
                    rotated = rotated or len(self._pending) > _MAX_PENDING_SEALS
                    seg = self._active
                    size = seg.size
                    offsets = []
                    seqs = []
                    seg_first = index
            if offsets:
                self._columns_add(seg, publisher_id, offsets, seqs, seg_first, ts, size)
            last_seq[publisher_id] = prev
            self._last_index = index - 1
            self._last_ts = ts
            if len(buf) >= _WRITE_AT:
                self._write_out()
        if rotated:  # the sync thread is not keeping up with sealing: do it here (bounds memory)
            self._complete_seals()
        return first, ts

    @staticmethod
    def _columns_add(
        seg: _MemSegment,
        publisher_id: int,
        offsets: list[int],
        seqs: list[int],
        first_index: int,
        ts: int,
        size: int,
    ) -> None:
        """Add a run of one publisher's records to the active segment's columns (lock held)."""
        n = len(offsets)
        seg.offsets.extend(offsets)
        seg.timestamps.extend(array("Q", (ts,)) * n)
        pub = seg.pubs.get(publisher_id)
        if pub is None:
            pub = seg.pubs[publisher_id] = (array("Q"), array("Q"))
        pub[0].extend(seqs)
        pub[1].extend(range(first_index, first_index + n))
        seg.size = size

    def _write_out(self) -> None:
        """Write the append buffer to the active segment file (lock held)."""
        buf = self._buf
        if not buf:
            return
        seg = self._active
        written = 0
        view = memoryview(buf)
        try:
            while written < len(view):
                written += os.write(seg.wfd, view[written:])
        finally:
            view.release()
            del buf[:written]
        self._stats["writes"] += 1

    def _rotate(self) -> None:
        """Seal the active segment (lock held): the heavy work is left to the next sync."""
        self._write_out()
        old = self._active
        old.sealing = True
        self._pending.append(old)
        self._new_active(self._last_index + 1)
        self._stats["rotations"] += 1

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
        rotated segments (sidecar index, ``journal.clients``).

        Returns:
            :attr:`durable_index`, now at least the :attr:`last_index` seen at the call.
        """
        with self._sync_lock:
            with self._lock:
                self._check_open()
                self._write_out()
                target = self._last_index
                pending = bool(self._pending)
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                fd = -1
                if self._durable_io and target > self._durable_index and not self._read_only:
                    fd = os.dup(self._active.wfd)
                self._stats["syncs"] += 1
            if pending:
                self._complete_seals()
            if fd >= 0:
                began = time.perf_counter_ns()
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                took = time.perf_counter_ns() - began
                with self._lock:
                    self._stats["fsyncs"] += 1
                    self._stats["fsync_ns"] += took
                    self._stats["fsync_last_ns"] = took
            if dir_dirty and self._durable_io and not self._read_only:
                fsync_dir(self._dir)
            with self._lock:
                if target > self._durable_index:
                    self._durable_index = target
                return self._durable_index

    # ---------------------------------------------------------------- sealing

    def _complete_seals(self) -> None:
        """Seal every pending segment (sidecar, clients table); never holds the main lock long."""
        with self._seal_lock:
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    seg = self._pending[0]
                self._seal(seg)

    def _seal(self, seg: _MemSegment) -> None:
        durable = self._durable_io
        if seg.wfd >= 0:
            if durable:
                os.fsync(seg.wfd)
                with self._lock:
                    self._stats["fsyncs"] += 1
            os.close(seg.wfd)
            seg.wfd = -1
        index_path = self._dir / _index_name(seg.first_index)
        data = encode_index(
            first_index=seg.first_index,
            data_size=seg.size,
            offsets=seg.offsets,
            timestamps=seg.timestamps,
            pubs=seg.pubs,
        )
        write_atomic(index_path, data, durable=durable)
        header = read_index(index_path)
        if header is None:  # pragma: no cover - we just wrote it
            raise CorruptJournalError(index_path, -1, "sidecar unreadable right after writing")
        for pid, (seqs, _) in seg.pubs.items():
            if seqs[-1] > self._sealed_seq.get(pid, 0):
                self._sealed_seq[pid] = seqs[-1]
        self._clients_through = max(self._clients_through, seg.last_index)
        self._write_clients()
        if durable:
            fsync_dir(self._dir)
        disk = _DiskSegment(seg.path, index_path, header, False)
        pids = sorted(seg.pubs)
        last_seqs = [seg.pubs[pid][0][-1] for pid in pids]
        with self._lock:
            pos = bisect_left(self._firsts, seg.first_index)
            self._segments[pos] = disk
            self._pending.remove(seg)
            self._register_pubs(seg.first_index, pids, last_seqs)
            self._stats["seals"] += 1
        _log.debug("journal: sealed %s (%d records)", seg.path, header.count)

    def _register_pubs(
        self, first_index: int, pids: Sequence[int], last_seqs: Sequence[int]
    ) -> None:
        """Add a sealed segment to the publisher directory (kept sorted by first index)."""
        for pid, seq in zip(pids, last_seqs, strict=True):
            entry = self._pubdir.get(pid)
            if entry is None:
                entry = self._pubdir[pid] = ([], [])
            firsts, seqs = entry
            if not firsts or first_index > firsts[-1]:
                firsts.append(first_index)
                seqs.append(int(seq))
            else:  # only when recovery seals an older segment late
                at = bisect_left(firsts, first_index)
                firsts.insert(at, first_index)
                seqs.insert(at, int(seq))

    def _unregister_before(self, first_index: int) -> None:
        """Drop publisher-directory entries of segments before ``first_index`` (pruned)."""
        for pid in list(self._pubdir):
            firsts, seqs = self._pubdir[pid]
            cut = bisect_left(firsts, first_index)
            if cut == len(firsts):
                del self._pubdir[pid]
            elif cut:
                del firsts[:cut], seqs[:cut]

    def _write_clients(self) -> None:
        write_atomic(
            self._dir / CLIENTS_FILE,
            encode_clients(self._clients_through, self._sealed_seq),
            durable=self._durable_io,
        )

    # ---------------------------------------------------------------- handles

    def _view(self, seg: _DiskSegment) -> IndexView:
        with self._lru_lock:
            view = seg.view
            if view is None:
                view = seg.view = IndexView(seg.index_path, seg.header)
            self._touch(seg)
            return view

    def _source(self, seg: _Segment) -> Source:
        if isinstance(seg, _MemSegment):
            return seg.source()
        with self._lru_lock:
            src = seg.src
            if src is None:
                if seg.compressed:
                    view = seg.view
                    if view is None:
                        view = seg.view = IndexView(seg.index_path, seg.header)
                    src = GzipSource(seg.path, view.block_uoffs, view.block_coffs)
                else:
                    src = FileSource(seg.path)
                seg.src = src
            self._touch(seg)
            return src

    def _touch(self, seg: _DiskSegment) -> None:
        key = seg.first_index
        current = self._open.get(key)
        if current is not None and current is not seg:
            current.drop_handles()
        self._open[key] = seg
        self._open.move_to_end(key)
        while len(self._open) > _MAX_OPEN:
            _, old = self._open.popitem(last=False)
            old.drop_handles()

    def _forget(self, seg: _DiskSegment) -> None:
        with self._lru_lock:
            if self._open.get(seg.first_index) is seg:
                del self._open[seg.first_index]
            seg.drop_handles()

    def _columns(self, seg: _Segment) -> tuple[Sequence[int], Sequence[int]]:
        if isinstance(seg, _MemSegment):
            return seg.offsets, seg.timestamps
        view = self._view(seg)
        return view.offsets, view.timestamps

    def _last_timestamp(self, seg: _Segment) -> int:
        if isinstance(seg, _MemSegment):
            return int(seg.timestamps[-1])
        return seg.header.last_ts

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
            candidate: _DiskSegment | None = None
            entry = self._pubdir.get(publisher_id)
            if entry is not None:
                k = bisect_left(entry[1], sequence)
                if k < len(entry[1]):
                    first = entry[0][k]
                    pos = bisect_left(self._firsts, first)
                    if pos < len(self._segments):
                        seg = self._segments[pos]
                        if seg.first_index == first and isinstance(seg, _DiskSegment):
                            candidate = seg
        if candidate is not None:
            try:
                view = self._view(candidate)
            except FileNotFoundError:  # pruned since we looked: so is the bookmark
                return None
            lo = bisect_left(view.pids, publisher_id)
            hi = bisect_right(view.pids, publisher_id, lo)
            found = _seek_seq(view.seqs, view.indexes, lo, hi, sequence)
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
        return _retry_pruned(self._find_time, timestamp_us)

    def _find_time(self, timestamp_us: int) -> int:
        with self._lock:
            self._check_open()
            segments = list(self._segments)
            last_index = self._last_index
        # bisect over segments by their newest timestamp (empty active segment: +infinity)
        lo, hi = 0, len(segments)
        while lo < hi:
            mid = (lo + hi) // 2
            seg = segments[mid]
            if seg.count and self._last_timestamp(seg) < timestamp_us:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(segments) or segments[lo].count == 0:
            return last_index + 1
        seg = segments[lo]
        _, timestamps = self._columns(seg)
        return seg.first_index + bisect_left(timestamps, timestamp_us, 0, seg.count)

    # ---------------------------------------------------------------- reading

    def read(
        self,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = _DEFAULT_MAX_BYTES,
    ) -> list[JournalRecord]:
        """Read a batch of consecutive records starting at ``from_index``.

        ``from_index`` below :attr:`first_index` starts at the oldest retained record. The batch
        stops after ``max_records`` records, or before the record that would take the total
        size on disk (frames included) above ``max_bytes`` (at least one record is returned when
        any is available), or at :attr:`last_index` (records not yet durable are included: cap
        the batch yourself to deliver only durable ones). Reads span segments, compressed ones
        included; every record's CRC is verified.

        Raises:
            CorruptJournalError: a damaged record.
        """
        return [
            _make_record(idx, pid, seq, ts, cmd, topic, payload, fields)
            for idx, pid, seq, ts, cmd, topic, payload, fields, _size in self.read_rows(
                from_index, max_records=max_records, max_bytes=max_bytes
            )
        ]

    def read_rows(
        self,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = _DEFAULT_MAX_BYTES,
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
        max_bytes: int = _DEFAULT_MAX_BYTES,
    ) -> list[RawBlock]:
        """The bytes of the records :meth:`read` would return, undecoded, for hot loops that
        decode (and verify: use :func:`.journal_format.decode_records` or the same checks)
        themselves: ``(data, offset in the segment, first index, record count, segment path)``
        per segment touched, in log order."""
        return _retry_pruned(self._read_blocks, from_index, max_records, max_bytes)

    def _read_blocks(
        self,
        from_index: int,
        max_records: int,
        max_bytes: int,
    ) -> list[RawBlock]:
        """Raw blocks from ``from_index`` (see :meth:`read_blocks`)."""
        blocks: list[RawBlock] = []
        if max_records <= 0:
            return blocks
        with self._lock:
            self._check_open()
            start = max(from_index, self._segments[0].first_index)
            last = self._last_index
            if start > last:
                return blocks
            if self._buf:
                self._write_out()
            pos = bisect_right(self._firsts, start) - 1
            segments = self._segments[pos:]
            active = self._active
            active_size = active.size
        budget = max_bytes
        index = start
        got = 0
        for seg in segments:
            if index > last or got >= max_records or budget <= 0:
                break
            if seg is active:
                total = last - seg.first_index + 1
                data_end = active_size
            else:
                total = seg.count
                data_end = seg.size if isinstance(seg, _MemSegment) else seg.header.data_size
            p = index - seg.first_index
            if p >= total:
                continue
            offsets, _ = self._columns(seg)
            n = min(max_records - got, total - p)
            begin = offsets[p]
            end = offsets[p + n] if p + n < total else data_end
            limit = begin + budget
            if end > limit:
                # records p..p+k-1 fit when the start of record p+k is <= limit
                k = bisect_right(offsets, limit, p + 1, p + n) - p - 1
                n = max(k, 0 if got else 1)
                if n == 0:
                    break
                end = offsets[p + n] if p + n < total else data_end
            data = self._source(seg).read(begin, end)
            blocks.append((data, begin, seg.first_index + p, n, seg.path))
            got += n
            budget -= end - begin
            index += n
            if p + n < total:  # stopped inside this segment: by max_records or max_bytes
                break
        return blocks

    def cursor(
        self,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = _DEFAULT_MAX_BYTES,
    ) -> JournalCursor:
        """A cursor reading batches from ``from_index``; it pins the files it still needs."""
        return JournalCursor(self, from_index, max_records=max_records, max_bytes=max_bytes)

    def pin(self, index: int) -> JournalPin:
        """Keep every segment holding records ``>= index`` from being pruned until unpinned."""
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
        with self._lock:
            segments = list(self._segments)
            active = segments[-1]
        out = []
        for seg in segments:
            try:
                file_bytes = seg.path.stat().st_size
            except OSError:
                file_bytes = 0
            if isinstance(seg, _MemSegment):
                state = "active" if seg is active else "sealing"
                data_bytes = seg.size
                first_ts = int(seg.timestamps[0]) if seg.count else 0
                last_ts = int(seg.timestamps[-1]) if seg.count else 0
            else:
                state = "compressed" if seg.compressed else "sealed"
                data_bytes = seg.header.data_size
                first_ts, last_ts = seg.header.first_ts, seg.header.last_ts
            out.append(
                SegmentInfo(
                    path=seg.path,
                    state=state,
                    first_index=seg.first_index,
                    last_index=seg.first_index + seg.count - 1,
                    records=seg.count,
                    data_bytes=data_bytes,
                    file_bytes=file_bytes,
                    first_timestamp=first_ts,
                    last_timestamp=last_ts,
                )
            )
        return out

    def prune(self, older_than_seconds: float, *, now: float | None = None) -> list[Path]:
        """Remove the oldest sealed segments whose newest record is older than the cutoff.

        Removal is strictly from the oldest end (a gap would break recovery). A segment still
        needed by a pin (a replay or cursor) stops the pruning there, with a log message. The
        active segment and segments not yet sealed are never removed. The per-publisher last
        sequences stay known (``journal.clients``).

        Args:
            older_than_seconds: age threshold.
            now: the current time in seconds since the epoch (default: the clock).

        Returns:
            The removed segment files.
        """
        cutoff = int(((time.time() if now is None else now) - older_than_seconds) * 1_000_000)
        removed: list[Path] = []
        with self._maint_lock:
            self._check_writable()
            while True:
                with self._lock:
                    seg = self._segments[0]
                    if not isinstance(seg, _DiskSegment) or seg.header.last_ts >= cutoff:
                        break
                    if self._pins:
                        lowest = min(p.index for p in self._pins)
                        if lowest <= seg.last_index:
                            _log.info(
                                "journal: not pruning %s (records %d..%d): pinned from index %d",
                                seg.path,
                                seg.first_index,
                                seg.last_index,
                                lowest,
                            )
                            break
                    del self._segments[0]
                    del self._firsts[0]
                self._forget(seg)
                os.unlink(seg.path)
                try:
                    os.unlink(seg.index_path)
                except FileNotFoundError:  # pragma: no cover
                    pass
                removed.append(seg.path)
                with self._lock:
                    self._stats["pruned_segments"] += 1
                _log.info(
                    "journal: pruned %s (records %d..%d)", seg.path, seg.first_index, seg.last_index
                )
            if removed:
                with self._lock:
                    self._unregister_before(self._firsts[0])
                if self._durable_io:
                    fsync_dir(self._dir)
        return removed

    def compress(self, older_than_seconds: float, *, now: float | None = None) -> list[Path]:
        """Compress sealed segments whose newest record is older than the cutoff.

        Each becomes ``<name>.journal.gz`` (gzip members of whole records; ``zcat`` restores
        the original bytes) and stays readable and searchable. Pins do not prevent compression.

        Returns:
            The new compressed files.
        """
        cutoff = int(((time.time() if now is None else now) - older_than_seconds) * 1_000_000)
        made: list[Path] = []
        with self._maint_lock:
            self._check_writable()
            with self._lock:
                todo = [
                    s
                    for s in self._segments
                    if isinstance(s, _DiskSegment)
                    and not s.compressed
                    and s.header.last_ts < cutoff
                ]
            for seg in todo:
                made.append(self._compress_one(seg))
        return made

    def _compress_one(self, seg: _DiskSegment) -> Path:
        durable = self._durable_io
        gz_path = seg.path.with_name(seg.path.name + ".gz")
        gz_tmp = gz_path.with_name(gz_path.name + ".tmp")
        view = self._view(seg)
        source = self._source(seg)
        uoffs, coffs = gzip_segment(
            source, view.offsets, seg.header.data_size, gz_tmp, durable=durable
        )
        header, data = index_with_blocks(seg.index_path, seg.header, uoffs, coffs)
        write_atomic(seg.index_path.with_name(seg.index_path.name + ".new"), data, durable=durable)
        os.replace(gz_tmp, gz_path)
        os.replace(seg.index_path.with_name(seg.index_path.name + ".new"), seg.index_path)
        if durable:
            fsync_dir(self._dir)
        new = _DiskSegment(gz_path, seg.index_path, header, True)
        with self._lock:
            pos = bisect_left(self._firsts, seg.first_index)
            if pos < len(self._segments) and self._segments[pos] is seg:
                self._segments[pos] = new
            self._stats["compressed_segments_made"] += 1
        self._forget(seg)
        os.unlink(seg.path)
        if durable:
            fsync_dir(self._dir)
        _log.info(
            "journal: compressed %s -> %s (%d -> %d bytes)",
            seg.path.name,
            gz_path.name,
            seg.header.data_size,
            coffs[-1],
        )
        return gz_path

    def verify(self) -> int:
        """Read and check every retained record and every sidecar; return the record count.

        Raises:
            CorruptJournalError: the first damage found.
        """
        with self._lock:
            self._check_open()
            segments = list(self._segments)
        for seg in segments:
            if isinstance(seg, _DiskSegment) and not verify_index_body(seg.index_path, seg.header):
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
        with self._lock:
            stats = dict(self._stats)
            stats.update(
                appends=self._last_index - self._opened_at_index,
                first_index=self._segments[0].first_index,
                last_index=self._last_index,
                durable_index=self._durable_index,
                publishers=len(self._last_seq),
                pins=len(self._pins),
                pending_seals=len(self._pending),
                buffered_bytes=len(self._buf),
            )
        stats["records"] = sum(i.records for i in infos)
        stats["bytes"] = sum(i.file_bytes for i in infos)
        stats["data_bytes"] = sum(i.data_bytes for i in infos)
        stats["segments"] = len(infos)
        stats["compressed_segments"] = sum(1 for i in infos if i.state == "compressed")
        return stats

    # ---------------------------------------------------------------- lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError("journal is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._read_only:
            raise JournalClosedError("journal is open read-only")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Sync (per policy), finish sealing, release files and the directory lock. Idempotent."""
        if self._closed:
            return
        if not self._read_only:
            self.sync()
        with self._lock:
            self._closed = True
            for seg in self._segments:
                if isinstance(seg, _MemSegment) and seg.wfd >= 0:
                    os.close(seg.wfd)
                    seg.wfd = -1
        with self._lru_lock:
            for seg in self._open.values():
                seg.drop_handles()
            self._open.clear()
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


class JournalCursor:
    """Reads a journal in batches from a position, pinning what it has still to read.

    Iterating yields records up to the end of the log as it is when each batch is read;
    :meth:`read_batch` can be called again later to continue. Close it (or use ``with``) to
    release the pin.
    """

    def __init__(
        self,
        journal: Journal,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = _DEFAULT_MAX_BYTES,
    ) -> None:
        self._journal = journal
        self._max_records = max_records
        self._max_bytes = max_bytes
        self.position = max(from_index, 1)
        """The index of the next record to read."""
        self._pin: JournalPin | None = journal.pin(self.position)

    def read_batch(self) -> list[JournalRecord]:
        """The next batch (empty at the end of the log) and advance past it."""
        if self._pin is None:
            raise JournalClosedError("cursor is closed")
        batch = self._journal.read(
            self.position, max_records=self._max_records, max_bytes=self._max_bytes
        )
        if batch:
            self.position = batch[-1].index + 1
            self._pin.index = self.position
        return batch

    def __iter__(self) -> Iterator[JournalRecord]:
        while True:
            batch = self.read_batch()
            if not batch:
                return
            yield from batch

    def close(self) -> None:
        """Release the pin. Idempotent."""
        if self._pin is not None:
            self._journal.unpin(self._pin)
            self._pin = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
