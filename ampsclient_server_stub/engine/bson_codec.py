"""The ``bson`` message type: one BSON document per message (bsonspec.org, version 1.1).

A document is a ``dict`` in field order; a BSON array is a ``list``. Filters, SOW keys,
``select`` and ``orderby`` address fields as for JSON (``/order/qty``). So that a document
survives a ``delta_publish`` merge or a ``select`` with its types, the element types that a
Python value does not determine have a marker type, each usable as the value it holds:

* int32 (``0x10``) is a plain ``int``; int64 (``0x12``) an :class:`Int64` (an ``int``), so a
  small int64 stays an int64; UTC datetime (``0x09``) a :class:`DateTime` (``int``
  milliseconds since the epoch); timestamp (``0x11``) a :class:`Timestamp` (``int``);
* ObjectId (``0x07``) an :class:`ObjectId`: its 24 lower-case hex digits (a ``str``), so
  ``/_id = '5f1d...'`` matches;
* binary (``0x05``) a :class:`Binary` (``bytes``) with its subtype;
* double, string, document, array, boolean and null are ``float``, ``str``, ``dict``,
  ``list``, ``bool`` and ``None``.

The deprecated and code types (undefined, DBPointer, regex, JavaScript, symbol, decimal128,
min/max key) are refused: such a payload is not a document for the server (it matches no
filter and has no SOW key, as a malformed JSON payload), and is still carried unchanged.

Pure functions: bytes in, documents out, and back.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

from ..errors import PayloadError

__all__ = [
    "MAX_BSON_DEPTH",
    "Binary",
    "BsonFormatError",
    "DateTime",
    "Int64",
    "ObjectId",
    "Timestamp",
    "decode_bson",
    "encode_bson",
]

MAX_BSON_DEPTH: Final = 100
"""The deepest document/array nesting the server parses."""

_INT32: Final = struct.Struct("<i")
_INT64: Final = struct.Struct("<q")
_UINT64: Final = struct.Struct("<Q")
_DOUBLE: Final = struct.Struct("<d")


class BsonFormatError(PayloadError):
    """A payload that is not one BSON document, or a value BSON cannot hold."""


class Int64(int):
    """A BSON int64 (``0x12``)."""


class DateTime(int):
    """A BSON UTC datetime (``0x09``): milliseconds since the Unix epoch."""


class Timestamp(int):
    """A BSON timestamp (``0x11``), the unsigned 64-bit value."""


class ObjectId(str):
    """A BSON ObjectId (``0x07``) as its 24 lower-case hex digits."""


class Binary(bytes):
    """BSON binary data (``0x05``); ``subtype`` is its subtype byte (0: generic)."""

    subtype: int

    def __new__(cls, data: bytes, subtype: int = 0) -> Binary:
        self = super().__new__(cls, data)
        self.subtype = subtype
        return self


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise BsonFormatError("truncated bson")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def cstring(self) -> str:
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise BsonFormatError("unterminated bson name")
        name = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return name

    def int32(self) -> int:
        value: int = _INT32.unpack(self.take(4))[0]
        return value


def _document(reader: _Reader, depth: int) -> dict[str, Any]:
    if depth > MAX_BSON_DEPTH:
        raise BsonFormatError(f"documents nested deeper than {MAX_BSON_DEPTH}")
    start = reader.pos
    size = reader.int32()
    end = start + size
    if size < 5 or end > len(reader.data) or reader.data[end - 1] != 0:
        raise BsonFormatError("a bson document's length does not fit its bytes")
    doc: dict[str, Any] = {}
    while reader.pos < end - 1:
        kind = reader.take(1)[0]
        name = reader.cstring()
        doc[name] = _value(reader, kind, name, depth)
    if reader.pos != end - 1:
        raise BsonFormatError("a bson element runs past its document")
    reader.pos = end
    return doc


def _value(reader: _Reader, kind: int, name: str, depth: int) -> Any:
    if kind == 0x01:
        return _DOUBLE.unpack(reader.take(8))[0]
    if kind == 0x02:
        size = reader.int32()
        raw = reader.take(size)
        if size < 1 or raw[-1] != 0:
            raise BsonFormatError(f"bad string length for {name!r}")
        return raw[:-1].decode("utf-8")
    if kind == 0x03:
        return _document(reader, depth + 1)
    if kind == 0x04:
        return list(_document(reader, depth + 1).values())
    if kind == 0x05:
        size = reader.int32()
        subtype = reader.take(1)[0]
        return Binary(reader.take(size), subtype)
    if kind == 0x07:
        return ObjectId(reader.take(12).hex())
    if kind == 0x08:
        flag = reader.take(1)[0]
        if flag > 1:
            raise BsonFormatError(f"bad boolean for {name!r}")
        return flag == 1
    if kind == 0x09:
        return DateTime(_INT64.unpack(reader.take(8))[0])
    if kind == 0x0A:
        return None
    if kind == 0x10:
        return reader.int32()
    if kind == 0x11:
        return Timestamp(_UINT64.unpack(reader.take(8))[0])
    if kind == 0x12:
        return Int64(_INT64.unpack(reader.take(8))[0])
    raise BsonFormatError(f"bson element type 0x{kind:02x} of {name!r} is not supported")


def decode_bson(data: bytes) -> dict[str, Any]:
    """Parse one BSON document (the whole payload).

    Raises:
        BsonFormatError: truncated, inconsistent lengths, trailing bytes, or an element
            type the server does not support (see the module docstring).
        UnicodeDecodeError: a name or string that is not UTF-8 (a ``ValueError`` too).
    """
    reader = _Reader(bytes(data))
    doc = _document(reader, 0)
    if reader.pos != len(reader.data):
        raise BsonFormatError("bytes after the bson document")
    return doc


def _cstring(name: str) -> bytes:
    raw = name.encode("utf-8")
    if b"\x00" in raw:
        raise BsonFormatError(f"bson name {name!r} contains NUL")
    return raw + b"\x00"


def _element(name: str, value: object, depth: int) -> bytes:
    key = _cstring(name)
    if isinstance(value, bool):
        return b"\x08" + key + (b"\x01" if value else b"\x00")
    if isinstance(value, DateTime):
        return b"\x09" + key + _INT64.pack(value)
    if isinstance(value, Timestamp):
        return b"\x11" + key + _UINT64.pack(value)
    if isinstance(value, int):
        if not isinstance(value, Int64) and -(2**31) <= value < 2**31:
            return b"\x10" + key + _INT32.pack(value)
        if not -(2**63) <= value < 2**63:
            raise BsonFormatError(f"{name!r}: {value} does not fit an int64")
        return b"\x12" + key + _INT64.pack(value)
    if isinstance(value, float):
        return b"\x01" + key + _DOUBLE.pack(value)
    if isinstance(value, ObjectId):
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = b""
        if len(raw) != 12:
            raise BsonFormatError(f"{name!r}: {value!r} is not an ObjectId")
        return b"\x07" + key + raw
    if isinstance(value, str):
        text = value.encode("utf-8") + b"\x00"
        return b"\x02" + key + _INT32.pack(len(text)) + text
    if isinstance(value, bytes | bytearray | memoryview):
        subtype = value.subtype if isinstance(value, Binary) else 0
        raw = bytes(value)
        return b"\x05" + key + _INT32.pack(len(raw)) + bytes([subtype]) + raw
    if value is None:
        return b"\x0a" + key
    if isinstance(value, Mapping):
        return b"\x03" + key + _encode_document(value, depth + 1)
    if isinstance(value, list | tuple):
        items = {str(i): item for i, item in enumerate(value)}
        return b"\x04" + key + _encode_document(items, depth + 1)
    raise BsonFormatError(f"{name!r}: a {type(value).__name__} cannot be written as bson")


def _encode_document(doc: Mapping[Any, Any], depth: int) -> bytes:
    if depth > MAX_BSON_DEPTH:
        raise BsonFormatError(f"documents nested deeper than {MAX_BSON_DEPTH}")
    body = b"".join(_element(str(k), v, depth) for k, v in doc.items())
    return _INT32.pack(len(body) + 5) + body + b"\x00"


def encode_bson(doc: object) -> bytes:
    """Serialise a mapping as one BSON document (a Python ``int`` in the int32 range is
    an int32, larger ones and :class:`Int64` an int64).

    Raises:
        BsonFormatError: not a mapping, a name with NUL, or a value BSON cannot hold.
    """
    if not isinstance(doc, Mapping):
        raise BsonFormatError(f"a bson document is a mapping, not a {type(doc).__name__}")
    return _encode_document(doc, 0)
