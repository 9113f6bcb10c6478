"""The wanted fields of flat JSON payloads, read into Arrow column buffers in one pass.

:func:`py_json_fields` is the pure-Python twin of the C speedup's ``json_fields``
(``ampsclient/spark/_json_speedups.c``), :func:`py_payload_fields` of its
``payload_fields``; :data:`json_fields` is the C one when it is built
(and ``AMPSCLIENT_PUREPYTHON`` is not set), else ``None``: without it, ``parse=json`` reads
convert message by message (:meth:`._convert.RowBuilder.row`), which is the specification
both follow. No I/O, no third-party import.

``payload_fields(payloads, names, kinds, strict)`` is the same pass over the bodies of a list
of delivery payloads (each after its header; :func:`py_payload_fields`), for a read that needs
no metadata column.

``json_fields(offsets, data, n, names, kinds, strict)``: body *i* is
``data[offsets[i]:offsets[i + 1]]`` (little-endian int32 offsets, the layout of an Arrow
binary array); ``names`` are the wanted top-level keys (UTF-8 bytes), ``kinds`` one byte per
field (:data:`KINDS`). The result is ``(columns, redo)``: for each field, ``(values,
validity)`` (int64/int32/int16/int8/float64 values, or bits for booleans) or, for strings,
``(offsets, data, validity)``, little-endian Arrow buffers, validity ``None`` when no value
is null; and ``redo``, the rows whose fields are left null for the caller to convert the row
path's way.

A value becomes what the row path makes of it (``json.loads`` of the body, then the field
type's converter), or null where that path gives null (a missing key, ``null``, a value that
does not fit: a boolean or an object for a number, a fraction or an out-of-range number for
an integer, a number for a boolean...). With ``strict`` (``mode=FAILFAST``) a value that does
not fit is not nulled but redone (the row path then fails the task with its message). A row
is redone, whole, when the shortcut could differ from the row path:

* the body is not one JSON object as ``json.loads`` reads it (malformed, another type, bytes
  that are not UTF-8: the row path nulls the row with a warning, or fails), or it holds
  ``NaN``/``Infinity``, a lone surrogate escape, a number token over 600 characters, more than
  64 levels of nesting;
* an object or array for a STRING field (the row path re-serializes it);
* a string for a number or a boolean other than ``[+-]digits`` (BIGINT...), one JSON number
  (DOUBLE) or ASCII text (BOOLEAN: ``true``/``false`` in any case, else null), which Python's
  ``int``/``float``/``str.lower`` take in more forms; an integer over 300 digits for a DOUBLE.

Equal keys: the last wins (as in a dict). Nested objects and arrays of other keys are
validated and skipped. Integers for STRING keep their text (``-0`` is ``0``), fractions are
``repr(float)``, booleans ``True``/``False``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from ..exceptions import AMPSError

__all__ = ["KINDS", "json_fields", "payload_fields", "py_json_fields", "py_payload_fields"]

KINDS: Final = {
    "int64": b"q",
    "int32": b"i",
    "int16": b"h",
    "int8": b"b",
    "double": b"d",
    "bool": b"?",
    "string": b"s",
}
"""Arrow type name -> the kind byte of a field."""

MAX_DEPTH: Final = 64
MAX_NUMBER: Final = 600

Columns = tuple[tuple[bytes | None, ...], ...]
JsonFields = Callable[
    [bytes, bytes, int, tuple[bytes, ...], bytes, bool], tuple[Columns, list[int]]
]

_RANGES: Final = {
    b"q": (-(2**63), 2**63 - 1, "q", 8),
    b"i": (-(2**31), 2**31 - 1, "i", 4),
    b"h": (-(2**15), 2**15 - 1, "h", 2),
    b"b": (-128, 127, "b", 1),
}
_INT_TEXT: Final = re.compile(r"[+-]?[0-9]+")
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")

_NULL: Final = 0
_VALUE: Final = 1
_MISMATCH: Final = 2


class _Redo(AMPSError):
    """This row is left to the caller."""


class _Number:
    """A number token as ``json.loads`` saw it (``parse_int``/``parse_float`` hooks)."""

    __slots__ = ("is_float", "text")

    def __init__(self, text: str, is_float: bool) -> None:
        if len(text) > MAX_NUMBER:
            raise _Redo
        self.text = text
        self.is_float = is_float


def _int_token(text: str) -> _Number:
    return _Number(text, False)


def _float_token(text: str) -> _Number:
    return _Number(text, True)


def _constant(text: str) -> Any:
    raise _Redo  # NaN, Infinity, -Infinity


def _check(value: Any, depth: int) -> None:
    """Raise :class:`_Redo` for a lone surrogate or nesting beyond :data:`MAX_DEPTH`."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            raise _Redo from None
    elif isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            raise _Redo
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for key, item in items:
            if key is not None:
                _check(key, depth)
            _check(item, depth + 1)


def _document(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(
            body.decode(),
            parse_int=_int_token,
            parse_float=_float_token,
            parse_constant=_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _Redo from None
    if not isinstance(doc, dict):
        raise _Redo
    _check(doc, 1)
    return doc


def _text_convert(text: str, kind: bytes) -> tuple[int, Any]:
    if kind == b"d":
        if len(text) > MAX_NUMBER or not _NUMBER.fullmatch(text):
            raise _Redo
        return _VALUE, float(text)
    if kind == b"?":
        if not text.isascii():
            raise _Redo
        low = text.lower()
        return (_VALUE, low == "true") if low in ("true", "false") else (_MISMATCH, None)
    if not _INT_TEXT.fullmatch(text) or len(text) > MAX_NUMBER:
        raise _Redo
    lo, hi, _, _ = _RANGES[kind]
    v = int(text)
    return (_VALUE, v) if lo <= v <= hi else (_MISMATCH, None)


def _convert(v: Any, kind: bytes) -> tuple[int, Any]:
    """(outcome, value) of one JSON value for a field of ``kind``."""
    if v is None:
        return _NULL, None
    if kind == b"s":
        if isinstance(v, str):
            return _VALUE, v
        if isinstance(v, bool):
            return _VALUE, str(v)
        if isinstance(v, _Number):
            if v.is_float:
                return _VALUE, repr(float(v.text))
            return _VALUE, "0" if v.text == "-0" else v.text
        raise _Redo  # an object or array
    if isinstance(v, str):
        return _text_convert(v, kind)
    if kind == b"?":
        return (_VALUE, v) if isinstance(v, bool) else (_MISMATCH, None)
    if not isinstance(v, _Number):
        return _MISMATCH, None  # a boolean, an object, an array
    if kind == b"d":
        if not v.is_float and v.text == "-0":
            return _VALUE, 0.0
        if not v.is_float and len(v.text) > 300:
            raise _Redo
        return _VALUE, float(v.text)
    lo, hi, _, _ = _RANGES[kind]
    if v.is_float:
        d = float(v.text)
        if not math.isfinite(d) or not d.is_integer():
            return _MISMATCH, None
        n = int(d)
    else:
        n = int(v.text)
    return (_VALUE, n) if lo <= n <= hi else (_MISMATCH, None)


def _bits(flags: Sequence[bool]) -> bytes:
    out = bytearray((len(flags) + 7) // 8)
    for i, flag in enumerate(flags):
        if flag:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def py_json_fields(
    offsets: bytes,
    data: bytes,
    n: int,
    names: tuple[bytes, ...],
    kinds: bytes,
    strict: bool,
) -> tuple[Columns, list[int]]:
    """The pure-Python twin of the C ``json_fields`` (see the module's docstring)."""
    if len(kinds) != len(names):
        raise ValueError("json_fields: names and kinds do not match")
    if n < 0 or len(offsets) < 4 * (n + 1):
        raise ValueError("json_fields: the offsets do not match n")
    spans = list(itertools.pairwise(struct.unpack_from(f"<{n + 1}i", offsets)))
    if any(a < 0 or b < a or b > len(data) for a, b in spans):
        raise ValueError("json_fields: offsets outside the data")
    return _fields([bytes(data[a:b]) for a, b in spans], names, kinds, strict)


def py_payload_fields(
    payloads: list[bytes], names: tuple[bytes, ...], kinds: bytes, strict: bool
) -> tuple[Columns, list[int]]:
    """The pure-Python twin of the C ``payload_fields``: :func:`py_json_fields` of the
    bodies of delivery payloads. A body starts after the header's first ``}`` that has no
    backslash and an even number of quotes before it (the fast path of
    :func:`~ampsclient.protocol.message.body_offset`); a payload without one is redone."""
    if len(kinds) != len(names):
        raise ValueError("json_fields: names and kinds do not match")
    return _fields([_body(p) for p in payloads], names, kinds, strict)


def _body(payload: bytes) -> bytes | None:
    if not isinstance(payload, bytes):
        raise TypeError("payload_fields: payloads must be bytes")
    quotes = 0
    for i, c in enumerate(payload):
        if c == 0x22:  # "
            quotes += 1
        elif c == 0x5C:  # backslash
            return None
        elif c == 0x7D and quotes % 2 == 0:  # }
            return payload[i + 1 :]
    return None


def _fields(
    bodies: list[bytes | None], names: tuple[bytes, ...], kinds: bytes, strict: bool
) -> tuple[Columns, list[int]]:
    """The pass over ``bodies`` (``None``: a row redone as it is)."""
    keys = [name.decode() for name in names]
    kind_list = [kinds[j : j + 1] for j in range(len(kinds))]
    values: list[list[Any]] = [[] for _ in names]
    redo: list[int] = []
    for i, body in enumerate(bodies):
        row: list[Any] = []
        try:
            if body is None:
                raise _Redo
            doc = _document(body)
            for key, kind in zip(keys, kind_list, strict=True):
                outcome, value = _convert(doc.get(key), kind)
                if outcome == _MISMATCH and strict:
                    raise _Redo
                row.append(value)
        except _Redo:
            redo.append(i)
            row = [None] * len(names)
        for column, value in zip(values, row, strict=True):
            column.append(value)
    columns = tuple(_column(kind, column) for kind, column in zip(kind_list, values, strict=True))
    return columns, redo


def _column(kind: bytes, values: list[Any]) -> tuple[bytes | None, ...]:
    valid = [v is not None for v in values]
    validity = None if all(valid) else _bits(valid)
    if kind == b"s":
        parts = [b"" if v is None else v.encode() for v in values]
        ends = [0]
        for part in parts:
            ends.append(ends[-1] + len(part))
        return struct.pack(f"<{len(ends)}i", *ends), b"".join(parts), validity
    if kind == b"?":
        return _bits([bool(v) for v in values]), validity
    if kind == b"d":
        return struct.pack(f"<{len(values)}d", *(0.0 if v is None else v for v in values)), validity
    fmt = _RANGES[kind][2]
    return struct.pack(f"<{len(values)}{fmt}", *(0 if v is None else v for v in values)), validity


PayloadFields = Callable[[list[bytes], tuple[bytes, ...], bytes, bool], tuple[Columns, list[int]]]

json_fields: JsonFields | None = None
"""The C ``json_fields`` when built (and ``AMPSCLIENT_PUREPYTHON`` unset), else ``None``."""
payload_fields: PayloadFields | None = None
"""The C ``payload_fields`` when built (and ``AMPSCLIENT_PUREPYTHON`` unset), else ``None``."""

if not os.environ.get("AMPSCLIENT_PUREPYTHON"):
    try:
        from ._json_speedups import (  # type: ignore[import-not-found,no-redef]
            json_fields,
            payload_fields,
        )
    except ImportError:  # pragma: no cover - built without a compiler
        pass


def implementations() -> dict[str, tuple[JsonFields, PayloadFields]]:
    """Every implementation present, by name (``python``, and ``c`` when built), as
    ``(json_fields, payload_fields)``: for tests."""
    found: dict[str, tuple[JsonFields, PayloadFields]] = {
        "python": (py_json_fields, py_payload_fields)
    }
    try:
        from . import _json_speedups  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover
        return found
    found["c"] = (_json_speedups.json_fields, _json_speedups.payload_fields)
    return found
