"""The file publish store's on-disk format: records, segment and state file headers.

Pure functions, no I/O (as the server's ``journal_format.py``). A segment is the 8-byte magic
:data:`SEGMENT_MAGIC` followed by records ``[u32 length][u32 crc32(body)][body]``
(big-endian), where ``body`` is msgpack: ``[sequence, payload]`` for a stored message,
``["d", sequence]`` for a ``discard_up_to`` and ``["x", sequence]`` for a single
``discard``. The state file is ``[magic][u64 last persisted][u64 last used][u32 crc32]``.
The format is documented byte by byte in ``docs/publish-stores.md``.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Final

import msgpack

from ... import _accel
from ...exceptions import CorruptStoreError

__all__ = [
    "KIND_DISCARD_ONE",
    "KIND_DISCARD_UP_TO",
    "KIND_STORE",
    "RECORD_PREFIX_SIZE",
    "SEGMENT_MAGIC",
    "STATE_MAGIC",
    "STATE_SIZE",
    "control_record",
    "decode_body",
    "decode_state",
    "encode_state",
    "find_valid_record",
    "read_prefix",
    "record_size",
    "store_record",
    "store_records",
    "write_record",
    "write_record_fast",
]

SEGMENT_MAGIC: Final = b"AMPSPUB1"
"""The first 8 bytes of every segment file (the trailing ``1`` is the format version)."""
STATE_MAGIC: Final = b"AMPSPST1"
"""The first 8 bytes of the state file."""

_REC = struct.Struct(">II")  # body length, crc32(body)
RECORD_PREFIX_SIZE: Final = _REC.size
"""Bytes before a record's body: its length and its CRC-32."""
_HEAD8 = struct.Struct(">BBQBB")  # msgpack: fixarray(2), uint64 sequence, bin8 length
_HEAD16 = struct.Struct(">BBQBH")  # ... bin16
_HEAD32 = struct.Struct(">BBQBI")  # ... bin32
_CONTROL = struct.Struct(">BBcBQ")  # msgpack: fixarray(2), fixstr(1) "d"/"x", uint64
_STATE = struct.Struct(">8sQQ")  # magic, last persisted, last used sequence
STATE_SIZE: Final = _STATE.size + 4
"""Bytes of a state file (the fields, then the CRC-32 of them)."""
_U64_MAX: Final = (1 << 64) - 1

KIND_STORE: Final = 0
""":func:`decode_body` kind of a stored message."""
KIND_DISCARD_UP_TO: Final = 1
""":func:`decode_body` kind of a ``["d", sequence]`` record."""
KIND_DISCARD_ONE: Final = 2
""":func:`decode_body` kind of an ``["x", sequence]`` record."""


def record_size(payload_size: int) -> int:
    """Bytes of the record of a stored payload of ``payload_size`` bytes."""
    return payload_size + (20 if payload_size < 0x100 else 21 if payload_size < 0x10000 else 23)


def store_record(sequence: int, payload: bytes) -> bytes:
    """The record of a stored message: prefix, msgpack ``[sequence, bin payload]``."""
    n = len(payload)
    if n < 0x100:
        head = _HEAD8.pack(0x92, 0xCF, sequence, 0xC4, n)
    elif n < 0x10000:
        head = _HEAD16.pack(0x92, 0xCF, sequence, 0xC5, n)
    else:
        head = _HEAD32.pack(0x92, 0xCF, sequence, 0xC6, n)
    return _REC.pack(len(head) + n, zlib.crc32(payload, zlib.crc32(head))) + head + payload


def store_records(first: int, payloads: list[bytes]) -> bytes:
    """The records of ``payloads`` stored with sequences from ``first``, concatenated."""
    return b"".join([store_record(first + i, p) for i, p in enumerate(payloads)])


def write_record(buffer: Any, start: int, sequence: int, payload: bytes) -> int:
    """Write :func:`store_record` into ``buffer`` at ``start``; return its end.

    ``ampsclient/_speedups_src/record.c`` has the same function in C (:mod:`ampsclient._accel`).
    """
    record = store_record(sequence, payload)
    end = start + len(record)
    if start < 0 or end > len(buffer):
        raise ValueError("write_record(): no room in the buffer")
    buffer[start:end] = record
    return end


write_record_fast: Final = _accel.write_record or write_record
""":func:`write_record`, in C when the speedups are built."""


def control_record(kind: bytes, sequence: int) -> bytes:
    """The record of a discard: ``kind`` is ``b"d"`` (up to ``sequence``) or ``b"x"`` (one)."""
    body = _CONTROL.pack(0x92, 0xA1, kind, 0xCF, sequence)
    return _REC.pack(len(body), zlib.crc32(body)) + body


def encode_state(last_persisted: int, last_sequence: int) -> bytes:
    """The bytes of a state file."""
    head = _STATE.pack(STATE_MAGIC, last_persisted, last_sequence)
    return head + zlib.crc32(head).to_bytes(4, "big")


def decode_state(data: bytes, where: str) -> tuple[int, int]:
    """``(last_persisted, last_sequence)`` from a state file's bytes.

    Raises:
        CorruptStoreError: not a valid state file (``where`` names it).
    """
    if (
        len(data) != STATE_SIZE
        or data[:8] != STATE_MAGIC
        or zlib.crc32(data[:-4]) != int.from_bytes(data[-4:], "big")
    ):
        raise CorruptStoreError(f"{where}: not a valid publish store state file")
    _, last_persisted, last_sequence = _STATE.unpack_from(data)
    return last_persisted, last_sequence


def read_prefix(data: bytes, offset: int) -> tuple[int, int]:
    """``(body length, crc32)`` of the record starting at ``offset``."""
    length, crc = _REC.unpack_from(data, offset)
    return length, crc


def find_valid_record(data: bytes, start: int) -> int | None:
    """The offset of the first intact record at or after ``start``, if there is one.

    Every record body is a 2-element msgpack array, so its first byte is ``0x92``; only
    offsets 8 bytes before such a byte are checked.
    """
    size = len(data)
    view = memoryview(data)
    q = data.find(b"\x92", start + RECORD_PREFIX_SIZE)
    while q != -1:
        length, crc = _REC.unpack_from(data, q - RECORD_PREFIX_SIZE)
        if 0 < length <= size - q and zlib.crc32(view[q : q + length]) == crc:
            return q - RECORD_PREFIX_SIZE
        q = data.find(b"\x92", q + 1)
    return None


def _decode_own(body: memoryview) -> tuple[int, int, bytes | None] | None:
    """:func:`decode_body` of the encodings this module writes; ``None`` for any other."""
    n = len(body)
    if n >= 12 and body[0] == 0x92 and body[1] == 0xCF:
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
            return KIND_STORE, int.from_bytes(body[2:10], "big"), bytes(body[start:])
    elif n == 12 and body[0] == 0x92 and body[1] == 0xA1 and body[3] == 0xCF:
        kind = body[2]
        if kind in (0x64, 0x78):  # "d", "x"
            sequence = int.from_bytes(body[4:12], "big")
            return (KIND_DISCARD_UP_TO if kind == 0x64 else KIND_DISCARD_ONE), sequence, None
    return None


def decode_body(body: memoryview, where: str) -> tuple[int, int, bytes | None]:
    """Decode one record body: ``(kind, sequence, payload)`` (kind: ``KIND_*``).

    Raises:
        CorruptStoreError: not one of the record shapes (``where`` names the place).
    """
    own = _decode_own(body)
    if own is not None:
        return own
    try:  # any other valid msgpack encoding of the same shapes
        obj = msgpack.unpackb(body)
    except Exception as exc:
        raise CorruptStoreError(f"{where}: record body is not msgpack ({exc})") from exc
    if isinstance(obj, list) and len(obj) == 2 and type(obj[1]) in (int, bytes):
        a, b = obj
        if type(a) is int and type(b) is bytes and 0 < a <= _U64_MAX:
            return KIND_STORE, a, b
        if a in ("d", "x") and type(b) is int and 0 <= b <= _U64_MAX:
            return (KIND_DISCARD_UP_TO if a == "d" else KIND_DISCARD_ONE), b, None
    raise CorruptStoreError(f"{where}: unknown record {obj!r:.80}")
