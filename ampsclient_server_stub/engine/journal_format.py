"""Byte-level formats of the transaction log (journal): records, sidecar indexes, compression.

Everything here is plain storage code used by :mod:`.journal`: no locks, no policy. The formats
are described byte by byte in ``docs/journal.md``; the constants below are the reference.

Record (all integers little-endian)::

    offset  size  field
    0       4     body_len   bytes after this 8-byte frame header (>= 32)
    4       4     crc32      zlib.crc32 over the body (the body_len bytes that follow)
    8       8     index      the record's log position (1-based, +1 per record)
    16      8     timestamp  server receive time, microseconds since the epoch (UTC)
    24      8     publisher_id
    32      8     sequence
    40      ...   msgpack array [command, topic, payload(bin), fields(map)]

Sidecar index ``<segment>.index`` (written once a segment is sealed, rewritten by compression)::

    header (64 bytes)  magic "AMPSJIX1", first_index, count, data_size, first_ts, last_ts,
                       npublishers (u32), nblocks (u32), body_crc (u32), header_crc (u32)
    columns of u64     offsets[count], timestamps[count]           (log order)
                       pids[count], seqs[count], indexes[count]   (sorted by (pid, seq))
                       pub_pids[npub], pub_seqs[npub]             (highest seq per publisher)
                       block_uoffs[nblocks], block_coffs[nblocks+1] (compressed segments only)

A compressed segment ``<segment>.journal.gz`` is a multi-member gzip file (``zcat`` restores the
original segment bytes); each member holds whole records, and the sidecar's block columns map
uncompressed offsets to member offsets, so a read decompresses only the members it needs.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import msgpack

from ..errors import StorageError

__all__ = [
    "BLOCK_SIZE",
    "CLIENTS_MAGIC",
    "FIXED",
    "FRAME",
    "FRAME_OVERHEAD",
    "INDEX_HEADER",
    "INDEX_MAGIC",
    "MIN_BODY",
    "CorruptJournalError",
    "FileSource",
    "GzipSource",
    "IndexHeader",
    "IndexView",
    "ScanResult",
    "Source",
    "decode_clients",
    "decode_records",
    "encode_clients",
    "encode_index",
    "expected_index_size",
    "fsync_dir",
    "gzip_segment",
    "index_with_blocks",
    "read_index",
    "read_index_header",
    "scan_gzip",
    "scan_records",
    "verify_index_body",
    "write_atomic",
]

FRAME: Final = struct.Struct("<II")
"""``body_len, crc32``: the 8-byte frame header in front of every record."""
FIXED: Final = struct.Struct("<QQQQ")
"""``index, timestamp, publisher_id, sequence``: the fixed start of every record body."""
FRAME_OVERHEAD: Final = FRAME.size + FIXED.size  # 40 bytes before the msgpack part
_HEAD: Final = struct.Struct("<IIQQQQ")  # FRAME then FIXED
MIN_BODY: Final = FIXED.size
MAX_BODY: Final = 1 << 31  # sanity bound: a length above this is garbage, not a record

INDEX_MAGIC: Final = b"AMPSJIX1"
INDEX_HEADER: Final = struct.Struct("<8sQQQQQIIII")  # 64 bytes
BLOCK_SIZE: Final = 256 * 1024  # uncompressed bytes per gzip member (whole records)
_SCAN_CHUNK: Final = 4 * 1024 * 1024
_LOOKAHEAD_INDEXES: Final = 64
_LITTLE: Final = sys.byteorder == "little"

_unpackb = msgpack.unpackb


class CorruptJournalError(StorageError, ValueError):
    """A journal file is damaged somewhere other than a torn tail.

    Attributes:
        path: the damaged file.
        offset: byte offset (in the uncompressed segment) of the first bad record, or -1.
    """

    def __init__(self, path: str | os.PathLike[str], offset: int, detail: str) -> None:
        self.path = Path(path)
        self.offset = offset
        where = f"{self.path}" if offset < 0 else f"{self.path} at offset {offset}"
        super().__init__(f"corrupt journal: {where}: {detail}")


# --------------------------------------------------------------------------------------------
# files


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that file creations, renames and removals in it are durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


class _Fd:
    """An owned read-only file descriptor, closed when the last reference goes away.

    Readers keep a reference while they read, so pruning or compressing a segment (which drops
    the journal's reference and unlinks the file) never closes a descriptor in use.
    """

    __slots__ = ("fd",)

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def pread(self, size: int, offset: int) -> bytes:
        chunks: list[bytes] = []
        while size > 0:
            chunk = os.pread(self.fd, size, offset)
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk)
            offset += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def __del__(self) -> None:
        fd = getattr(self, "fd", -1)  # absent when os.open failed in __init__
        self.fd = -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover
                pass


class Source:
    """Random access to the uncompressed bytes of one segment."""

    __slots__ = ()

    def read(self, start: int, end: int) -> bytes:  # pragma: no cover - interface
        """Return the segment bytes ``[start, end)`` (subclasses; the base holds nothing)."""
        return b""


class FileSource(Source):
    """An uncompressed segment file."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = _Fd(path)

    def read(self, start: int, end: int) -> bytes:
        """``pread`` the bytes ``[start, end)``."""
        return self._fd.pread(end - start, start)


class GzipSource(Source):
    """A compressed segment: gzip members at known offsets, the last one decoded cached."""

    __slots__ = ("_cache", "_coffs", "_fd", "_uoffs", "path")

    def __init__(self, path: Path, uoffs: Sequence[int], coffs: Sequence[int]) -> None:
        self.path = path
        self._fd = _Fd(path)
        self._uoffs = list(uoffs)
        self._coffs = list(coffs)
        self._cache: tuple[int, bytes] | None = None

    def _block(self, i: int) -> bytes:
        cached = self._cache
        if cached is not None and cached[0] == i:
            return cached[1]
        raw = self._fd.pread(self._coffs[i + 1] - self._coffs[i], self._coffs[i])
        try:
            data = zlib.decompress(raw, wbits=31)
        except zlib.error as exc:
            raise CorruptJournalError(self.path, self._uoffs[i], f"bad gzip member: {exc}") from exc
        self._cache = (i, data)
        return data

    def read(self, start: int, end: int) -> bytes:
        """Decompress the members covering ``[start, end)`` and return those bytes."""
        if end <= start:
            return b""
        i = bisect_right(self._uoffs, start) - 1
        parts: list[bytes] = []
        pos = start
        while pos < end and i < len(self._uoffs):
            block = self._block(i)
            base = self._uoffs[i]
            parts.append(block[pos - base : end - base])
            pos = base + len(block)
            i += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)


# --------------------------------------------------------------------------------------------
# records


def decode_records(
    data: bytes, base: int, first_index: int, count: int, path: Path
) -> list[tuple[int, int, int, int, str, str, bytes, dict[str, str | int], int]]:
    """Decode ``count`` whole records from ``data`` (which starts at segment offset ``base``).

    Returns:
        ``(index, publisher_id, sequence, timestamp, command, topic, payload, fields, size)``
        per record, in order.

    Raises:
        CorruptJournalError: a CRC mismatch, a bad length or an out-of-order index.
    """
    out: list[tuple[int, int, int, int, str, str, bytes, dict[str, str | int], int]] = []
    append = out.append
    pos = 0
    n = len(data)
    head_unpack = _HEAD.unpack_from  # frame header and fixed fields in one go
    crc32 = zlib.crc32
    unpackb = _unpackb
    for expected in range(first_index, first_index + count):
        if pos + FRAME_OVERHEAD > n:
            raise CorruptJournalError(path, base + pos, "record cut short")
        length, crc, index, ts, pid, seq = head_unpack(data, pos)
        end = pos + 8 + length
        if length < MIN_BODY or end > n:
            raise CorruptJournalError(path, base + pos, f"bad record length {length}")
        body = data[pos + 8 : end]
        if crc32(body) != crc:
            raise CorruptJournalError(path, base + pos, "CRC mismatch")
        if index != expected:
            raise CorruptJournalError(
                path, base + pos, f"record index {index}, expected {expected}"
            )
        try:
            command, topic, payload, fields = unpackb(body[MIN_BODY:])
        except Exception as exc:
            raise CorruptJournalError(path, base + pos, f"bad record body: {exc}") from exc
        append((index, pid, seq, ts, command, topic, payload, fields, end - pos))
        pos = end
    return out


@dataclass(slots=True)
class ScanResult:
    """What a sequential scan of a segment found.

    Attributes:
        count: valid records.
        size: bytes of valid records (where a torn tail, if any, begins).
        torn: bytes after ``size`` that do not form a valid record (a torn tail).
        offsets, timestamps: one entry per record, in log order.
        pubs: per publisher, the sequences and indexes of its records, in log order.
    """

    count: int = 0
    size: int = 0
    torn: int = 0
    offsets: array[int] = field(default_factory=lambda: array("Q"))
    timestamps: array[int] = field(default_factory=lambda: array("Q"))
    pubs: dict[int, tuple[array[int], array[int]]] = field(default_factory=dict)


def _valid_frame_at(data: bytes, pos: int) -> bool:
    if pos < 0 or pos + FRAME_OVERHEAD > len(data):
        return False
    length: int
    crc: int
    length, crc = FRAME.unpack_from(data, pos)
    end = pos + 8 + length
    return length >= MIN_BODY and end <= len(data) and zlib.crc32(data[pos + 8 : end]) == crc


def _later_record_exists(rest: bytes, expected: int) -> bool:
    """Whether a valid record with an index after ``expected`` follows in ``rest``."""
    for index in range(expected + 1, expected + 1 + _LOOKAHEAD_INDEXES):
        needle = struct.pack("<Q", index)
        at = rest.find(needle)
        while at >= 0:
            if _valid_frame_at(rest, at - 8):
                return True
            at = rest.find(needle, at + 1)
    return False


def _scan_stream(
    chunks: Iterator[bytes],
    first_index: int,
    path: Path,
    *,
    tolerate_tail: bool,
    result: ScanResult | None = None,
    on_block: list[int] | None = None,
) -> ScanResult:
    res = result if result is not None else ScanResult()
    carry = b""
    base = res.size  # segment offset of carry[0]
    expected = first_index + res.count
    frame_unpack = FRAME.unpack_from
    fixed_unpack = FIXED.unpack_from
    crc32 = zlib.crc32
    offsets, timestamps, pubs = res.offsets, res.timestamps, res.pubs
    bad_at: int | None = None
    bad_detail = ""
    exhausted = False
    while not exhausted:
        chunk = next(chunks, None)
        if chunk is None:
            exhausted = True
        else:
            if on_block is not None:
                on_block.append(base + len(carry))
            carry = carry + chunk if carry else chunk
        data = carry
        n = len(data)
        pos = 0
        while True:
            if pos + 8 > n:
                break
            length, crc = frame_unpack(data, pos)
            if length < MIN_BODY or length > MAX_BODY:
                bad_at, bad_detail = base + pos, f"bad record length {length}"
                break
            end = pos + 8 + length
            if end > n:
                break  # need more data (or a torn tail at the end)
            if crc32(memoryview(data)[pos + 8 : end]) != crc:
                bad_at, bad_detail = base + pos, "CRC mismatch"
                break
            index, ts, pid, seq = fixed_unpack(data, pos + 8)
            if index != expected:
                bad_at, bad_detail = base + pos, f"record index {index}, expected {expected}"
                break
            offsets.append(base + pos)
            timestamps.append(ts)
            pub = pubs.get(pid)
            if pub is None:
                pub = pubs[pid] = (array("Q"), array("Q"))
            pub[0].append(seq)
            pub[1].append(index)
            expected += 1
            pos = end
        res.count = expected - first_index
        res.size = base + pos
        if bad_at is not None:
            rest = data[pos:] + b"".join(chunks)
            if not tolerate_tail or _later_record_exists(rest, expected):
                raise CorruptJournalError(path, bad_at, bad_detail)
            res.torn = len(rest)
            return res
        carry = data[pos:]
        base += pos
    if carry:
        if not tolerate_tail or _later_record_exists(carry, expected):
            raise CorruptJournalError(path, base, f"{len(carry)} bytes of incomplete record")
        res.torn = len(carry)
    return res


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb", buffering=0) as fh:
        while True:
            chunk = fh.read(_SCAN_CHUNK)
            if not chunk:
                return
            yield chunk


def scan_records(path: Path, first_index: int, *, tolerate_tail: bool) -> ScanResult:
    """Scan an uncompressed segment from the start, verifying every record.

    Args:
        path: the segment file.
        first_index: the index its first record must carry.
        tolerate_tail: accept (and report in ``torn``) garbage after the last valid record when
            no valid later record follows it; otherwise any bad byte is corruption.

    Raises:
        CorruptJournalError: a bad record with valid records after it (or any bad record when
            ``tolerate_tail`` is false).
    """
    return _scan_stream(_file_chunks(path), first_index, path, tolerate_tail=tolerate_tail)


def _gzip_members(path: Path, coffs: list[int]) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        raw = fh.read()
    pos = 0
    while pos < len(raw):
        coffs.append(pos)
        d = zlib.decompressobj(wbits=31)
        try:
            out = d.decompress(raw[pos:])
        except zlib.error as exc:
            raise CorruptJournalError(path, -1, f"bad gzip member at {pos}: {exc}") from exc
        if not d.eof:
            raise CorruptJournalError(path, -1, f"truncated gzip member at {pos}")
        pos = len(raw) - len(d.unused_data)
        yield out
    coffs.append(pos)


def scan_gzip(path: Path, first_index: int) -> tuple[ScanResult, list[int], list[int]]:
    """Scan a compressed segment (all records must be valid).

    Returns:
        The scan result and the member map ``(uoffs, coffs)`` (``coffs`` has one extra entry,
        the file size).
    """
    coffs: list[int] = []
    uoffs: list[int] = []
    res = _scan_stream(
        _gzip_members(path, coffs), first_index, path, tolerate_tail=False, on_block=uoffs
    )
    return res, uoffs, coffs


def gzip_segment(
    source: Source,
    offsets: Sequence[int],
    data_size: int,
    dest: Path,
    *,
    level: int = 6,
    durable: bool = True,
) -> tuple[list[int], list[int]]:
    """Write ``dest`` as gzip members of about :data:`BLOCK_SIZE` whole records each.

    Returns:
        ``(uoffs, coffs)``: each member's uncompressed start and compressed start, plus the file
        size as the last ``coffs`` entry. ``dest`` is fsynced when ``durable``.
    """
    uoffs: list[int] = []
    coffs: list[int] = []
    written = 0
    n = len(offsets)
    i = 0
    with open(dest, "wb") as fh:
        while i < n:
            start = offsets[i]
            j = bisect_right(offsets, start + BLOCK_SIZE, i + 1)  # records starting in block
            j = max(j, i + 1)
            end = offsets[j] if j < n else data_size
            comp = zlib.compressobj(level, zlib.DEFLATED, 31)
            member = comp.compress(source.read(start, end)) + comp.flush()
            uoffs.append(start)
            coffs.append(written)
            fh.write(member)
            written += len(member)
            i = j
        coffs.append(written)
        fh.flush()
        if durable:
            os.fsync(fh.fileno())
    return uoffs, coffs


# --------------------------------------------------------------------------------------------
# sidecar index


@dataclass(frozen=True, slots=True)
class IndexHeader:
    """The fixed header of a sidecar index."""

    first_index: int
    count: int
    data_size: int
    first_ts: int
    last_ts: int
    npublishers: int
    nblocks: int
    body_crc: int


def _column_bytes(values: array[int]) -> bytes:
    if _LITTLE:
        return values.tobytes()
    swapped = array("Q", values)  # pragma: no cover - big-endian hosts
    swapped.byteswap()  # pragma: no cover
    return swapped.tobytes()  # pragma: no cover


def encode_index(
    *,
    first_index: int,
    data_size: int,
    offsets: array[int],
    timestamps: array[int],
    pubs: dict[int, tuple[array[int], array[int]]],
    blocks: tuple[Sequence[int], Sequence[int]] | None = None,
) -> bytes:
    """Build the sidecar index bytes for one sealed segment.

    ``pubs`` maps publisher id to its (sequences, indexes) in log order; sequences of one
    publisher increase, so concatenating publishers in id order yields the (pid, seq) sort.
    """
    count = len(offsets)
    pid_col = array("Q")
    seq_col = array("Q")
    idx_col = array("Q")
    pub_pids = array("Q")
    pub_seqs = array("Q")
    for pid in sorted(pubs):
        seqs, idxs = pubs[pid]
        pid_col.extend(array("Q", [pid]) * len(seqs))
        seq_col.extend(seqs)
        idx_col.extend(idxs)
        pub_pids.append(pid)
        pub_seqs.append(seqs[-1])
    parts = [
        _column_bytes(offsets),
        _column_bytes(timestamps),
        _column_bytes(pid_col),
        _column_bytes(seq_col),
        _column_bytes(idx_col),
        _column_bytes(pub_pids),
        _column_bytes(pub_seqs),
    ]
    nblocks = 0
    if blocks is not None:
        uoffs, coffs = blocks
        nblocks = len(uoffs)
        parts.append(_column_bytes(array("Q", uoffs)))
        parts.append(_column_bytes(array("Q", coffs)))
    body = b"".join(parts)
    header = IndexHeader(
        first_index=first_index,
        count=count,
        data_size=data_size,
        first_ts=timestamps[0] if count else 0,
        last_ts=timestamps[-1] if count else 0,
        npublishers=len(pub_pids),
        nblocks=nblocks,
        body_crc=zlib.crc32(body),
    )
    return _pack_header(header) + body


def _pack_header(h: IndexHeader) -> bytes:
    head = INDEX_HEADER.pack(
        INDEX_MAGIC,
        h.first_index,
        h.count,
        h.data_size,
        h.first_ts,
        h.last_ts,
        h.npublishers,
        h.nblocks,
        h.body_crc,
        0,
    )
    return head[:60] + struct.pack("<I", zlib.crc32(head[:60]))


def index_with_blocks(
    path: Path, header: IndexHeader, uoffs: Sequence[int], coffs: Sequence[int]
) -> tuple[IndexHeader, bytes]:
    """The sidecar ``path`` rewritten with the block map of a compressed segment.

    Any block map already present is replaced. Returns the new header and the file bytes.
    """
    with open(path, "rb") as fh:
        raw = fh.read()
    keep = INDEX_HEADER.size + 8 * (5 * header.count + 2 * header.npublishers)
    body = (
        raw[INDEX_HEADER.size : keep]
        + _column_bytes(array("Q", uoffs))
        + _column_bytes(array("Q", coffs))
    )
    new = replace(header, nblocks=len(uoffs), body_crc=zlib.crc32(body))
    return new, _pack_header(new) + body


def read_index_header(raw: bytes) -> IndexHeader | None:
    """Parse and check a sidecar header; ``None`` if it is not a valid one."""
    if len(raw) < INDEX_HEADER.size:
        return None
    fields = INDEX_HEADER.unpack_from(raw)
    magic, first, count, size, fts, lts, npub, nblocks, body_crc, head_crc = fields
    if magic != INDEX_MAGIC or zlib.crc32(raw[:60]) != head_crc:
        return None
    return IndexHeader(first, count, size, fts, lts, npub, nblocks, body_crc)


def expected_index_size(h: IndexHeader) -> int:
    """The byte size a sidecar with header ``h`` must have."""
    blocks = 2 * h.nblocks + 1 if h.nblocks else 0
    return INDEX_HEADER.size + 8 * (5 * h.count + 2 * h.npublishers + blocks)


def read_index(path: Path) -> IndexHeader | None:
    """Read a sidecar's header (not its columns); ``None`` if missing, short or invalid."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(INDEX_HEADER.size)
            size = os.fstat(fh.fileno()).st_size
    except OSError:
        return None
    header = read_index_header(raw)
    if header is None or size != expected_index_size(header):
        return None
    return header


def _u64_column(buf: memoryview, start: int, n: int) -> Sequence[int]:
    part = buf[start : start + 8 * n]
    if _LITTLE:
        return part.cast("Q")
    col = array("Q", bytes(part))  # pragma: no cover - big-endian hosts
    col.byteswap()  # pragma: no cover
    return col  # pragma: no cover


class IndexView:
    """The columns of a sidecar index, memory-mapped (nothing is copied into Python objects).

    Every column is a sequence of ints supporting ``len``, indexing and :mod:`bisect`.
    """

    __slots__ = (
        "block_coffs",
        "block_uoffs",
        "header",
        "indexes",
        "offsets",
        "pids",
        "pub_pids",
        "pub_seqs",
        "seqs",
        "timestamps",
    )

    def __init__(self, path: Path, header: IndexHeader) -> None:
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        buf = memoryview(mm)
        n = header.count
        pos = INDEX_HEADER.size
        self.header = header
        self.offsets = _u64_column(buf, pos, n)
        self.timestamps = _u64_column(buf, pos + 8 * n, n)
        self.pids = _u64_column(buf, pos + 16 * n, n)
        self.seqs = _u64_column(buf, pos + 24 * n, n)
        self.indexes = _u64_column(buf, pos + 32 * n, n)
        pos += 40 * n
        self.pub_pids = _u64_column(buf, pos, header.npublishers)
        self.pub_seqs = _u64_column(buf, pos + 8 * header.npublishers, header.npublishers)
        pos += 16 * header.npublishers
        nb = header.nblocks
        self.block_uoffs = _u64_column(buf, pos, nb)
        self.block_coffs = _u64_column(buf, pos + 8 * nb, nb + 1 if nb else 0)


def verify_index_body(path: Path, header: IndexHeader) -> bool:
    """Whether the sidecar's body matches its CRC (reads the whole file)."""
    with open(path, "rb") as fh:
        fh.seek(INDEX_HEADER.size)
        return zlib.crc32(fh.read()) == header.body_crc


# --------------------------------------------------------------------------------------------
# per-publisher table ("clients" file) and atomic writes

CLIENTS_MAGIC: Final = b"AMPSJCL1"
_CLIENTS_HEAD: Final = struct.Struct("<8sQQ")
_PAIR: Final = struct.Struct("<QQ")


def encode_clients(through_index: int, table: dict[int, int]) -> bytes:
    """``journal.clients``: the highest sequence per publisher over records ``<= through_index``.

    Layout: magic ``AMPSJCL1``, u64 through_index, u64 count, count x (u64 publisher_id,
    u64 sequence) sorted by publisher id, u32 crc32 of everything before it.
    """
    parts = [_CLIENTS_HEAD.pack(CLIENTS_MAGIC, through_index, len(table))]
    parts.extend(_PAIR.pack(pid, table[pid]) for pid in sorted(table))
    raw = b"".join(parts)
    return raw + struct.pack("<I", zlib.crc32(raw))


def decode_clients(raw: bytes) -> tuple[int, dict[int, int]] | None:
    """Parse a ``journal.clients`` file; ``None`` when it is damaged or not one."""
    if len(raw) < _CLIENTS_HEAD.size + 4:
        return None
    magic, through, count = _CLIENTS_HEAD.unpack_from(raw)
    if magic != CLIENTS_MAGIC or len(raw) != _CLIENTS_HEAD.size + _PAIR.size * count + 4:
        return None
    (crc,) = struct.unpack_from("<I", raw, len(raw) - 4)
    if zlib.crc32(raw[:-4]) != crc:
        return None
    table = dict(_PAIR.iter_unpack(raw[_CLIENTS_HEAD.size : -4]))
    return through, table


def write_atomic(path: Path, data: bytes, *, durable: bool) -> None:
    """Write ``path`` through a ``.tmp`` file and a rename (fsynced first when ``durable``).

    The caller fsyncs the directory afterwards when the rename itself must be durable.
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        if durable:
            os.fsync(fh.fileno())
    os.replace(tmp, path)
