"""FilePublishStore: unacknowledged publishes in an append-only log with group commit.

Layout of the store directory (the format is documented byte by byte in
``docs/publish-stores.md``)::

    <dir>/lock                          flock()ed while a store has the directory open
    <dir>/state                         last persisted + last used sequence (written atomically)
    <dir>/seg-<first sequence:020d>.log one or more segments; the newest is appended to

A segment is the 8-byte magic ``AMPSPUB1`` followed by records
``[u32 length][u32 crc32(body)][body]`` (big-endian), where ``body`` is msgpack:
``[sequence, payload]`` for a stored message, ``["d", sequence]`` for a
:meth:`~FilePublishStore.discard_up_to` and ``["x", sequence]`` for a single
:meth:`~FilePublishStore.discard`. The active segment is preallocated to ``segment_size`` and
memory-mapped; records are copied into the mapping (no ``write()`` syscall, the GIL is kept),
so a segment may end in a run of zero bytes: a zero length where a record would start ends
the data. Closed segments are trimmed to their data.

Unpersisted payloads are also kept in memory (as in :class:`MemoryPublishStore`), so replay
and lookups never touch the disk; the file is only read when the store is opened.
"""

from __future__ import annotations

import errno
import itertools
import logging
import mmap
import os
import re
import struct
import sys
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, get_args

import msgpack

from ... import _accel
from ...exceptions import CorruptStoreError, StoreError
from .base import Build, IndexedPublishStore, StoredMessage, _join_seq, initial_sequence

if sys.platform != "win32":
    import fcntl

__all__ = [
    "SEGMENT_MAGIC",
    "STATE_MAGIC",
    "FilePublishStore",
    "FsyncPolicy",
    "MiB",
    "SegmentInfo",
    "StoreInspection",
    "TornTail",
    "inspect_store",
]

logger = logging.getLogger("ampsclient.stores.publish")

MiB: Final = 1024 * 1024
FsyncPolicy = Literal["always", "interval", "never"]
"""When a :class:`FilePublishStore` forces its writes to stable storage (see the class)."""

SEGMENT_MAGIC: Final = b"AMPSPUB1"
"""The first 8 bytes of every segment file (the trailing ``1`` is the format version)."""
STATE_MAGIC: Final = b"AMPSPST1"
"""The first 8 bytes of the state file."""

_SEGMENT_RE: Final = re.compile(r"^seg-(\d{20})\.log$")
_STATE_NAME: Final = "state"
_STATE_TMP: Final = "state.tmp"
_LOCK_NAME: Final = "lock"

_REC = struct.Struct(">II")  # body length, crc32(body)
_REC_SIZE: Final = _REC.size
_HEAD8 = struct.Struct(">BBQBB")  # msgpack: fixarray(2), uint64 sequence, bin8 length
_REC_HEAD8 = struct.Struct(">IIBBQBB")  # _REC then _HEAD8, packed at once
_crc32 = zlib.crc32
_HEAD16 = struct.Struct(">BBQBH")  # ... bin16
_HEAD32 = struct.Struct(">BBQBI")  # ... bin32
_CONTROL = struct.Struct(">BBcBQ")  # msgpack: fixarray(2), fixstr(1) "d"/"x", uint64
_STATE = struct.Struct(">8sQQ")  # magic, last persisted, last used sequence
_STATE_SIZE: Final = _STATE.size + 4  # + crc32 of the above
_U64_MAX: Final = (1 << 64) - 1

_POLICIES: Final = frozenset(get_args(FsyncPolicy))

_fdatasync = getattr(os, "fdatasync", os.fsync)
_LINUX: Final = sys.platform.startswith("linux")
_PAGE: Final = mmap.PAGESIZE
_ZERO4: Final = bytes(4)


def _preallocate(fd: int, size: int) -> None:
    """Make the file at least ``size`` bytes long, with its blocks allocated if possible.

    ``posix_fallocate`` reserves the disk blocks, so storing into the mapping cannot hit
    ``ENOSPC`` (which a memory-mapped write would turn into ``SIGBUS``); where it is missing
    or unsupported the file is extended sparsely with ``ftruncate``.
    """
    if os.fstat(fd).st_size >= size:
        return
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, 0, size)
            return
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
    os.ftruncate(fd, size)


def _all_zero(data: bytes, start: int) -> bool:
    """Whether ``data[start:]`` is empty or all zero bytes."""
    return start >= len(data) or data.count(0, start) == len(data) - start


# ---------------------------------------------------------------------------------- encoding


def _store_record(sequence: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 0x100:
        head = _HEAD8.pack(0x92, 0xCF, sequence, 0xC4, n)
    elif n < 0x10000:
        head = _HEAD16.pack(0x92, 0xCF, sequence, 0xC5, n)
    else:
        head = _HEAD32.pack(0x92, 0xCF, sequence, 0xC6, n)
    return _REC.pack(len(head) + n, zlib.crc32(payload, zlib.crc32(head))) + head + payload


def write_record(buffer: Any, start: int, sequence: int, payload: bytes) -> int:
    """Write :func:`_store_record` into ``buffer`` at ``start``; return its end.

    ``ampsclient/_speedups.c`` has the same function in C (:mod:`ampsclient._accel`).
    """
    record = _store_record(sequence, payload)
    end = start + len(record)
    if start < 0 or end > len(buffer):
        raise ValueError("write_record(): no room in the buffer")
    buffer[start:end] = record
    return end


_write_record: Final = _accel.write_record or write_record


def _control_record(kind: bytes, sequence: int) -> bytes:
    body = _CONTROL.pack(0x92, 0xA1, kind, 0xCF, sequence)
    return _REC.pack(len(body), zlib.crc32(body)) + body


def _encode_state(last_persisted: int, last_sequence: int) -> bytes:
    head = _STATE.pack(STATE_MAGIC, last_persisted, last_sequence)
    return head + zlib.crc32(head).to_bytes(4, "big")


def _segment_name(first_sequence: int) -> str:
    return f"seg-{first_sequence:020d}.log"


def _fsync_dir(directory: Path) -> None:
    if sys.platform == "win32":  # pragma: no cover - directories cannot be fsynced there
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_state(directory: Path, last_persisted: int, last_sequence: int, sync: bool) -> None:
    """Replace ``<dir>/state`` atomically (write a temp file, fsync it, rename, fsync the dir)."""
    tmp = directory / _STATE_TMP
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, _encode_state(last_persisted, last_sequence))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / _STATE_NAME)
    if sync:
        _fsync_dir(directory)


# ---------------------------------------------------------------------------------- scanning


@dataclass(slots=True)
class SegmentInfo:
    """One segment file as found by a scan."""

    path: Path
    """The segment file."""
    first_sequence: int
    """The sequence number in the file name (the next sequence when it was created)."""
    size: int
    """Bytes of intact data (the file may be longer by a zero tail or a torn tail)."""
    records: int
    """Intact records (stores and discards)."""
    high: int
    """The highest sequence number used before the next segment was started (for the newest
    segment: the highest found so far)."""


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete or damaged last record at the end of the newest segment."""

    path: Path
    offset: int
    """Where the torn record starts (the file is cut or zeroed from here when a store opens
    it)."""
    length: int
    """How many bytes from ``offset`` to the last non-zero byte of the file."""


@dataclass(slots=True)
class StoreInspection:
    """What a read-only scan of a store directory found (see :func:`inspect_store`)."""

    directory: Path
    messages: list[StoredMessage]
    """Unpersisted messages in sequence order."""
    holes: list[int]
    """Sequence numbers inside ``messages``' range dropped by a single discard."""
    last_persisted: int
    next_sequence: int | None
    """The next sequence number the store would assign (``None``: a brand-new store)."""
    segments: list[SegmentInfo]
    torn_tail: TornTail | None
    state: tuple[int, int] | None
    """The state file's ``(last_persisted, last_sequence)``, or ``None`` if there is none."""
    header_torn: bool = False
    """The newest segment holds less than its 8-byte magic, possibly followed by zeros (a
    crash while creating it)."""
    unknown_files: list[str] = field(default_factory=list)


def _read_state(path: Path) -> tuple[int, int] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if (
        len(data) != _STATE_SIZE
        or data[:8] != STATE_MAGIC
        or zlib.crc32(data[:-4]) != int.from_bytes(data[-4:], "big")
    ):
        raise CorruptStoreError(f"{path}: not a valid publish store state file")
    _, last_persisted, last_sequence = _STATE.unpack_from(data)
    return last_persisted, last_sequence


def _find_valid_record(data: bytes, start: int) -> int | None:
    """The offset of the first intact record at or after ``start``, if there is one.

    Every record body is a 2-element msgpack array, so its first byte is ``0x92``; only
    offsets 8 bytes before such a byte are checked.
    """
    size = len(data)
    view = memoryview(data)
    q = data.find(b"\x92", start + _REC_SIZE)
    while q != -1:
        length, crc = _REC.unpack_from(data, q - _REC_SIZE)
        if 0 < length <= size - q and zlib.crc32(view[q : q + length]) == crc:
            return q - _REC_SIZE
        q = data.find(b"\x92", q + 1)
    return None


def _decode_body(body: memoryview, where: str) -> tuple[int, int, bytes | None]:
    """Decode one record body: ``(kind, sequence, payload)``; kind 0=store, 1="d", 2="x"."""
    n = len(body)
    if n >= 12 and body[0] == 0x92 and body[1] == 0xCF:  # our own store encoding
        tag = body[10]
        if tag == 0xC4:
            start, length = 12, body[11]
        elif tag == 0xC5 and n >= 13:
            start, length = 13, int.from_bytes(body[11:13], "big")
        elif tag == 0xC6 and n >= 15:
            start, length = 15, int.from_bytes(body[11:15], "big")
        else:
            start, length = -1, -1
        if start + length == n:
            return 0, int.from_bytes(body[2:10], "big"), bytes(body[start:])
    elif n == 12 and body[0] == 0x92 and body[1] == 0xA1 and body[3] == 0xCF:
        kind = body[2]
        if kind in (0x64, 0x78):  # "d", "x"
            return (1 if kind == 0x64 else 2), int.from_bytes(body[4:12], "big"), None
    try:  # any other valid msgpack encoding of the same shapes
        obj = msgpack.unpackb(body)
    except Exception as exc:
        raise CorruptStoreError(f"{where}: record body is not msgpack ({exc})") from exc
    if isinstance(obj, list) and len(obj) == 2 and type(obj[1]) in (int, bytes):
        a, b = obj
        if type(a) is int and type(b) is bytes and 0 < a <= _U64_MAX:
            return 0, a, b
        if a in ("d", "x") and type(b) is int and 0 <= b <= _U64_MAX:
            return (1 if a == "d" else 2), b, None
    raise CorruptStoreError(f"{where}: unknown record {obj!r:.80}")


def _scan(directory: Path) -> tuple[StoreInspection, list[tuple[int, bytes]], set[int]]:
    """Read every segment, verify every record and rebuild the store's state (read-only).

    Returns:
        The inspection, the stored records above ``last_persisted`` in order, and the
        sequence numbers dropped by single discards.

    Raises:
        CorruptStoreError: a damaged record that is not a torn tail, a bad file name or
            magic, or a garbage state file.
    """
    segment_paths: list[tuple[int, Path]] = []
    unknown: list[str] = []
    for entry in os.scandir(directory):
        m = _SEGMENT_RE.match(entry.name)
        if m:
            segment_paths.append((int(m.group(1)), Path(entry.path)))
        elif entry.name not in (_STATE_NAME, _STATE_TMP, _LOCK_NAME):
            unknown.append(entry.name)
    segment_paths.sort()
    state = _read_state(directory / _STATE_NAME)
    last_persisted = state[0] if state else 0
    high = state[1] if state else 0
    records: dict[int, bytes] = {}
    singles: set[int] = set()
    previous = 0
    torn: TornTail | None = None
    header_torn = False
    segments: list[SegmentInfo] = []
    for number, (first, path) in enumerate(segment_paths):
        last_segment = number == len(segment_paths) - 1
        data = path.read_bytes()
        size = len(data)
        high = max(high, first - 1)
        if (
            last_segment
            and data[: len(SEGMENT_MAGIC)] != SEGMENT_MAGIC
            and SEGMENT_MAGIC.startswith(data[: len(SEGMENT_MAGIC)].rstrip(b"\0"))
            and _all_zero(data, len(SEGMENT_MAGIC))
        ):
            header_torn = True
            segments.append(SegmentInfo(path, first, 0, 0, high))
            continue
        if data[: len(SEGMENT_MAGIC)] != SEGMENT_MAGIC:
            raise CorruptStoreError(f"{path}: not a publish store segment (bad magic)")
        view = memoryview(data)
        offset = len(SEGMENT_MAGIC)
        count = 0
        while offset < size:
            if size - offset < _REC_SIZE or data[offset : offset + 4] == _ZERO4:
                if _all_zero(data, offset):
                    break  # the preallocated zero tail: end of the data
                bad = True
            else:
                length, crc = _REC.unpack_from(data, offset)
                end = offset + _REC_SIZE + length
                body = view[offset + _REC_SIZE : end]
                bad = end > size or zlib.crc32(body) != crc
            if bad:
                if not last_segment or _find_valid_record(data, offset + 1) is not None:
                    raise CorruptStoreError(
                        f"{path}: damaged record at offset {offset} followed by intact data"
                        if last_segment
                        else f"{path}: damaged record at offset {offset} in a closed segment"
                    )
                torn = TornTail(path, offset, len(data.rstrip(b"\0")) - offset)
                break
            kind, sequence, payload = _decode_body(body, f"{path} offset {offset}")
            if kind == 0:
                assert payload is not None
                if sequence <= previous or sequence < first:
                    raise CorruptStoreError(
                        f"{path} offset {offset}: sequence {sequence} out of order"
                    )
                if sequence > previous + 1 and previous:
                    # Sequence numbers only jump when discard_up_to() went past the next one:
                    # everything below the jump was persisted (even if that "d" record was lost).
                    last_persisted = max(last_persisted, sequence - 1)
                records[sequence] = payload
                previous = sequence
                high = max(high, sequence)
            elif kind == 1:
                last_persisted = max(last_persisted, sequence)
            else:
                singles.add(sequence)
            count += 1
            offset = end
        segments.append(SegmentInfo(path, first, offset, count, high))
    for older, newer in itertools.pairwise(segments):
        older.high = newer.first_sequence - 1  # exactly next - 1 when the store rolled over
    high = max(high, last_persisted)
    live = [(s, p) for s, p in records.items() if s > last_persisted]
    while live and live[-1][0] in singles:
        live.pop()
    start = 0
    while start < len(live) and live[start][0] in singles:
        start += 1
    live = live[start:]
    messages = [StoredMessage(s, p) for s, p in live if s not in singles]
    holes = [s for s, _ in live if s in singles]
    inspection = StoreInspection(
        directory=directory,
        messages=messages,
        holes=holes,
        last_persisted=last_persisted,
        next_sequence=high + 1 if (segments or state) else None,
        segments=segments,
        torn_tail=torn,
        state=state,
        header_torn=header_torn,
        unknown_files=sorted(unknown),
    )
    return inspection, live, singles


def inspect_store(path: str | os.PathLike[str]) -> StoreInspection:
    """Scan a :class:`FilePublishStore` directory without changing anything.

    Safe to run while a store has the directory open (a record being written may then show
    up as a torn tail).

    Args:
        path: the store directory.

    Returns:
        What the store would load.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CorruptStoreError: the store could not be opened either.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory")
    return _scan(directory)[0]


# ---------------------------------------------------------------------------------- the store


@dataclass(slots=True)
class _Segment:
    path: Path
    size: int
    high: int
    """Highest sequence number used when the segment was closed (meaningless while active)."""


class FilePublishStore(IndexedPublishStore):
    """A publish store that survives restarts: an append-only, segmented log on disk.

    Every :meth:`store` appends one record to the newest segment with a single ``write()``
    before it returns. What happens next depends on ``fsync``:

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
        fsync's duration).
    ``"never"``
        No fsync at all (also not of the state file). A process crash loses nothing; a
        machine crash can lose whatever the OS had not yet written back.

    Discards (persisted acks) are appended as small records but never force an fsync: losing
    one only means replaying messages the server already has, which it ignores as duplicates.

    The newest segment rolls over once it reaches ``segment_size`` bytes; then every older
    segment whose messages are all discarded is deleted (after the state file records the
    last persisted and last used sequence numbers), so a long-running publisher's directory
    stays bounded by its window of unacknowledged messages plus one segment.

    Opening a directory scans every segment and verifies every record's CRC. A torn tail (an
    incomplete or damaged record at the end of the newest segment, with nothing intact after
    it) is truncated with a logged warning; every intact record is kept. Damage anywhere else
    raises :class:`~ampsclient.exceptions.CorruptStoreError` naming the file and offset.

    A directory is used by one store at a time (an ``flock`` on ``<dir>/lock``).

    Args:
        path: the store directory (created if missing).
        fsync: ``"always"``, ``"interval"`` or ``"never"`` (see above).
        fsync_interval: seconds between background fsyncs for ``"interval"``.
        segment_size: roll to a new segment file past this many bytes.
        error_on_publish_gap: see :meth:`PublishStore.discard_up_to`.

    Raises:
        CorruptStoreError: see above.
        StoreError: the directory is in use by another store, or cannot be written.
    """

    __slots__ = (
        "_active_size",
        "_always",
        "_broken",
        "_dir",
        "_fd",
        "_fsyncs",
        "_interval",
        "_lock_fd",
        "_map_size",
        "_mm",
        "_policy",
        "_segment_size",
        "_segments",
        "_segments_deleted",
        "_stop",
        "_sync_cond",
        "_sync_files",
        "_synced_gen",
        "_syncing",
        "_thread",
        "_torn_tails_repaired",
        "_write_gen",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "always",
        fsync_interval: float = 0.005,
        segment_size: int = 16 * MiB,
        error_on_publish_gap: bool = False,
    ) -> None:
        if fsync not in _POLICIES:
            raise ValueError(f"fsync must be one of {sorted(_POLICIES)}, not {fsync!r}")
        if fsync_interval <= 0:
            raise ValueError("fsync_interval must be positive")
        if segment_size < 64:
            raise ValueError("segment_size must be at least 64 bytes")
        super().__init__(error_on_publish_gap=error_on_publish_gap, next_sequence=0)
        self._dir = Path(path)
        """The store directory."""
        self._policy: FsyncPolicy = fsync
        self._always = fsync == "always"
        self._sync_files = fsync != "never"
        self._interval = fsync_interval
        self._segment_size = segment_size
        self._segments: list[_Segment] = []
        self._fd = -1
        self._mm: mmap.mmap | None = None
        """The active segment's mapping (``_map_size`` bytes, the file is at least that long)."""
        self._map_size = 0
        self._active_size = 0
        self._broken: str | None = None
        """Why the store refuses writes after an I/O error it could not undo."""
        # Group commit: writes bump _write_gen (under _lock); a sync covers every write
        # whose generation it read before starting (under _sync_cond).
        self._write_gen = 0
        self._synced_gen = 0
        self._syncing = False
        self._sync_cond = threading.Condition(threading.Lock())
        self._fsyncs = 0
        self._segments_deleted = 0
        self._torn_tails_repaired = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create publish store directory {self._dir}: {exc}") from exc
        self._lock_fd = self._acquire_directory()
        try:
            self._load()
        except BaseException as exc:
            if self._fd >= 0:
                self._release_active(trim=False)
            os.close(self._lock_fd)
            if isinstance(exc, OSError):
                raise StoreError(f"cannot open publish store {self._dir}: {exc}") from exc
            raise
        if fsync == "interval":
            self._thread = threading.Thread(
                target=self._interval_loop, name=f"publish-store-fsync {self._dir}", daemon=True
            )
            self._thread.start()

    # ------------------------------------------------------------------ opening

    def _acquire_directory(self) -> int:
        fd = os.open(self._dir / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        if sys.platform != "win32":
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                raise StoreError(
                    f"publish store {self._dir} is in use by another store or process"
                ) from exc
        return fd

    def _load(self) -> None:
        inspection, live, singles = _scan(self._dir)
        sync = self._sync_files
        try:
            (self._dir / _STATE_TMP).unlink()
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
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            self._torn_tails_repaired += 1
        if inspection.header_torn:
            path = inspection.segments[-1].path
            logger.warning("publish store %s: rewriting the torn header of %s", self._dir, path)
            path.write_bytes(SEGMENT_MAGIC)
            inspection.segments[-1].size = len(SEGMENT_MAGIC)
        next_sequence = inspection.next_sequence
        self._next = initial_sequence() if next_sequence is None else next_sequence
        self._last_persisted = inspection.last_persisted
        if live:
            self._first = live[0][0]
            self._buf = [None if s in singles else p for s, p in live]
            self._count = len(inspection.messages)
            self._holes = len(inspection.holes)
            self._pad = self._next - (self._first + len(self._buf))
        self._segments = [_Segment(s.path, s.size, s.high) for s in inspection.segments]
        if not self._segments:
            self._create_segment()
        else:
            active = self._segments[-1]
            self._fd = os.open(active.path, os.O_RDWR)
            self._active_size = active.size
            self._mm, self._map_size = self._map(self._fd, active.size)
        logger.debug(
            "publish store %s opened: %d unpersisted, next sequence %d, %d segment(s)",
            self._dir,
            self._count,
            self._next,
            len(self._segments),
        )
        self._compact()

    def _map(self, fd: int, used: int) -> tuple[mmap.mmap, int]:
        """Preallocate the segment to ``segment_size`` (or more) and map all of it."""
        size = max(self._segment_size, used, os.fstat(fd).st_size)
        _preallocate(fd, size)
        return mmap.mmap(fd, size), size

    def _create_segment(self) -> None:
        """Create ``seg-<next>.log`` with its magic and make it the active segment."""
        fd, mm, segment = self._new_segment_file()
        self._fd = fd
        self._mm, self._map_size = mm, len(mm)
        self._active_size = segment.size
        self._segments.append(segment)

    def _new_segment_file(self) -> tuple[int, mmap.mmap, _Segment]:
        """Create ``seg-<next>.log``: the magic, then zeros up to ``segment_size``, mapped
        (synced unless ``"never"``)."""
        path = self._dir / _segment_name(self._next)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, SEGMENT_MAGIC)
            mm, _ = self._map(fd, len(SEGMENT_MAGIC))
            try:
                if self._sync_files:
                    _fdatasync(fd)
                    _fsync_dir(self._dir)
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
        return fd, mm, _Segment(path, len(SEGMENT_MAGIC), 0)

    def _release_active(self, *, trim: bool) -> None:
        """Unmap and close the active segment; with ``trim``, cut its zero tail off first
        (best effort: a zero tail is valid, it only costs disk space)."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if trim:
            try:
                os.ftruncate(self._fd, self._active_size)
            except OSError as exc:
                logger.warning("publish store %s: could not trim a segment: %s", self._dir, exc)
        os.close(self._fd)
        self._fd = -1

    # ------------------------------------------------------------------ writing (lock held)

    def _check_writable(self) -> None:
        self._check_open()
        if self._broken is not None:
            raise StoreError(f"publish store {self._dir} is unusable: {self._broken}")

    def _grow(self, end: int) -> None:
        """Extend the active segment and its mapping to hold ``end`` bytes (a record that
        crosses ``segment_size``); ``StoreError`` (nothing written) if the disk is full."""
        size = -(-end // _PAGE) * _PAGE
        try:
            _preallocate(self._fd, size)
            mm = mmap.mmap(self._fd, size)
        except OSError as exc:
            raise StoreError(f"publish store {self._dir}: write failed: {exc}") from exc
        with self._sync_cond:
            while self._syncing:
                self._sync_cond.wait()
            assert self._mm is not None
            self._mm.close()
            self._mm, self._map_size = mm, size

    def _append(self, record: bytes) -> None:
        """Copy one record (or a batch) into the active segment's mapping.

        The only failure (growing the segment for an oversized record) happens before
        anything is copied, so a partial record never stays in the middle of the log.
        """
        start = self._active_size
        end = start + len(record)
        if end > self._map_size:
            self._grow(end)
        assert self._mm is not None
        self._mm[start:end] = record
        self._active_size = end
        self._write_gen += 1

    def _roll(self) -> None:
        """Close the full active segment, start a new one, and delete discarded segments.

        Called after a record was appended, so it does not raise for problems that leave
        that record safe: if the new segment cannot be created, the store logs a warning and
        keeps appending to the old one (and tries again after the next store).
        """
        active = self._segments[-1]
        try:
            fd, mm, segment = self._new_segment_file()
        except OSError as exc:
            logger.warning(
                "publish store %s: cannot start a new segment (%s); still appending to %s",
                self._dir,
                exc,
                active.path.name,
            )
            return
        with self._sync_cond:
            while self._syncing:
                self._sync_cond.wait()
            try:
                if self._sync_files:
                    self._sync_active()
                    self._fsyncs += 1
            except OSError as exc:
                mm.close()
                os.close(fd)
                segment.path.unlink()
                self._broken = f"fsync of {active.path.name} failed ({exc})"
                raise StoreError(f"publish store {self._dir}: {self._broken}") from exc
            self._release_active(trim=True)
            active.size = self._active_size
            active.high = self._next - 1
            self._fd = fd
            self._mm, self._map_size = mm, len(mm)
            self._active_size = segment.size
            self._segments.append(segment)
            self._synced_gen = self._write_gen
        try:
            self._compact()
        except OSError as exc:
            logger.warning("publish store %s: could not delete old segments: %s", self._dir, exc)

    def _compact(self) -> None:
        """Delete the oldest closed segments whose messages are all discarded."""
        low = self._first if self._count else None
        doomed = 0
        for segment in self._segments[:-1]:
            if low is not None and segment.high >= low:
                break
            doomed += 1
        if not doomed:
            return
        _write_state(self._dir, self._last_persisted, self._next - 1, self._sync_files)
        for segment in self._segments[:doomed]:
            try:
                segment.path.unlink()
            except FileNotFoundError:
                pass
            logger.debug("publish store %s: deleted %s", self._dir, segment.path.name)
        del self._segments[:doomed]
        self._segments_deleted += doomed
        if self._sync_files:
            _fsync_dir(self._dir)

    # ------------------------------------------------------------------ group commit

    def _sync_to(self, generation: int) -> None:
        """Return once an fsync that started after write ``generation`` has completed."""
        cond = self._sync_cond
        with cond:
            while True:
                if self._synced_gen >= generation or self._fd < 0:
                    return
                if not self._syncing:
                    break
                cond.wait()
            self._syncing = True
            target = self._write_gen
        error: OSError | None = None
        try:
            self._sync_active()  # _roll/_grow/close wait for _syncing before unmapping
        except OSError as exc:
            error = exc
        with cond:
            self._syncing = False
            if error is None:
                self._fsyncs += 1
                if target > self._synced_gen:
                    self._synced_gen = target
            cond.notify_all()
        if error is not None:
            raise StoreError(f"publish store {self._dir}: fsync failed: {error}") from error

    def _sync_active(self) -> None:
        """msync + fdatasync of the active segment (without holding the GIL on Linux).

        On Linux ``msync(MS_SYNC)`` of a shared file mapping is ``vfs_fsync_range`` on the
        file, i.e. what ``fdatasync`` does, and ``fdatasync`` runs without the GIL (CPython's
        ``mmap.flush`` keeps it), so only ``fdatasync`` is called there.
        """
        if not _LINUX and self._mm is not None:
            self._mm.flush()
        _fdatasync(self._fd)

    def _interval_loop(self) -> None:
        while not self._stop.wait(self._interval):
            if self._write_gen > self._synced_gen:
                try:
                    self._sync_to(self._write_gen)
                except StoreError:
                    logger.exception("publish store %s: background fsync failed", self._dir)

    def flush(self) -> None:
        """Force everything written so far to stable storage now (any policy)."""
        self._sync_to(self._write_gen)

    # ------------------------------------------------------------------ the store API

    def store(self, build: Build) -> int:
        """Assign the next sequence number, build the payload, append it; returns the number.

        With ``fsync="always"`` the record is on stable storage when this returns.

        Raises:
            StoreError: the store is closed, or the write or the fsync failed (after a failed
                fsync the message is kept, but its durability is unknown).
        """
        with self._lock:
            if self._closed or self._broken is not None:
                self._check_writable()
            s = self._next
            payload = build(s)
            self._append(_store_record(s, payload))
            self._index_one(s, payload)
            generation = self._write_gen
            if self._active_size >= self._segment_size:
                self._roll()
        if self._always:
            self._sync_to(generation)
        return s

    def store_parts(self, head: bytes, tail: bytes) -> tuple[int, bytes]:
        """:meth:`store` of ``head + b"<sequence>" + tail`` (the HA client's hot path)."""
        lock = self._lock
        lock.acquire()  # not ``with``: this runs once per publish and __exit__ costs a call
        try:
            if self._closed or self._broken is not None:
                self._check_writable()
            s = self._next
            payload = _join_seq(head, s, tail)
            n = len(payload)
            # _append(_store_record(s, payload)) inlined, the record written in place
            start = self._active_size
            end = start + n + (20 if n < 0x100 else 21 if n < 0x10000 else 23)
            if end > self._map_size:
                self._grow(end)
            _write_record(self._mm, start, s, payload)
            self._active_size = end
            self._write_gen += 1
            # _index_one inlined (the HA publish hot path)
            if not self._count:
                self._first = s
            elif self._pad:
                self._index_pad()
            self._buf.append(payload)
            self._count += 1
            self._next = s + 1
            generation = self._write_gen
            if end >= self._segment_size:
                self._roll()
        finally:
            lock.release()
        if self._always:
            self._sync_to(generation)
        return s, payload

    def store_many(self, builds: Iterable[Build]) -> list[int]:
        """Store a batch with one copy into the segment and (for ``"always"``) one fsync.

        All or none of the batch is recorded.
        """
        with self._lock:
            self._check_writable()
            s = self._next
            payloads: list[bytes] = []
            records: list[bytes] = []
            for build in builds:
                payload = build(s + len(payloads))
                payloads.append(payload)
                records.append(_store_record(s + len(records), payload))
            if not payloads:
                return []
            self._append(b"".join(records))
            self._index_extend(s, payloads)
            n = len(payloads)
            generation = self._write_gen
            if self._active_size >= self._segment_size:
                self._roll()
        if self._always:
            self._sync_to(generation)
        return list(range(s, s + n))

    def _record_discard(self, kind: bytes, sequence: int) -> None:
        """Record a discard (no fsync); an I/O error is logged, not raised (it only costs a
        duplicate replay after a restart)."""
        if self._broken is not None:
            return
        try:
            self._append(_control_record(kind, sequence))
        except StoreError:
            logger.exception("publish store %s: could not record a discard", self._dir)

    def close(self) -> None:
        """Sync (unless ``"never"``), write the state file and release the directory.

        Idempotent. Threads blocked in :meth:`wait_for` wake up and raise ``StoreError``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        with self._lock:
            try:
                with self._sync_cond:
                    while self._syncing:
                        self._sync_cond.wait()
                    if self._sync_files and self._write_gen > self._synced_gen:
                        self._sync_active()
                        self._fsyncs += 1
                    self._synced_gen = self._write_gen
                if self._broken is None:
                    self._compact()
                    _write_state(self._dir, self._last_persisted, self._next - 1, self._sync_files)
            except OSError as exc:
                raise StoreError(f"publish store {self._dir}: close failed: {exc}") from exc
            finally:
                with self._sync_cond:
                    self._release_active(trim=True)
                    self._sync_cond.notify_all()
                os.close(self._lock_fd)
        logger.debug("publish store %s closed", self._dir)

    # ------------------------------------------------------------------ introspection

    @property
    def path(self) -> Path:
        """The store directory."""
        return self._dir

    @property
    def fsync_policy(self) -> FsyncPolicy:
        """``"always"``, ``"interval"`` or ``"never"``."""
        return self._policy

    def segment_files(self) -> list[Path]:
        """The segment files, oldest first (the last one is being appended to)."""
        with self._lock:
            return [s.path for s in self._segments]

    def statistics(self) -> dict[str, int]:
        """The base counters plus ``fsyncs``, ``segments``, ``segments_deleted``,
        ``disk_bytes`` (segment bytes) and ``torn_tails_repaired``."""
        stats = super().statistics()
        with self._lock:
            stats.update(
                fsyncs=self._fsyncs,
                segments=len(self._segments),
                segments_deleted=self._segments_deleted,
                disk_bytes=sum(s.size for s in self._segments[:-1]) + self._active_size,
                torn_tails_repaired=self._torn_tails_repaired,
            )
        return stats

    def __repr__(self) -> str:
        return (
            f"FilePublishStore({str(self._dir)!r}, fsync={self._policy!r}, "
            f"unpersisted={self._count}, next={self._next})"
        )
