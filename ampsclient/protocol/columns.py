"""Delivery payloads to column buffers: the headers of a batch of deliveries, cut in one pass.

:func:`delivery_columns` turns a list of delivery payloads (header and body, undecoded) into
the buffers of Arrow-layout columns (offsets, data and validity bitmaps, little-endian), for
readers that hand whole columns on (the Spark data source builds ``pyarrow`` arrays on them
without copying). It is the Python twin of the C speedups' ``delivery_columns``
(:mod:`ampsclient._accel`); a differential test runs both. No I/O, no third-party import.

Only the usual shape is taken: a flat header of ``"key":value`` pairs without whitespace,
the wanted keys (``t``, ``bm``, ``k``, ``x``, ``ts``) as ASCII strings without escapes, at
most once each, no long name of them (``topic``, ``bookmark``...), a ``bm`` of the form
``publisherId|sequence|`` and a ``ts`` of the form ``YYYYmmddTHHMMSS.ffffffZ``. Anything
else makes the whole batch irregular (``None``): the caller decodes it message by message.
"""

from __future__ import annotations

import calendar
import struct
from collections.abc import Collection, Sequence
from typing import Final

from ..exceptions import AMPSError

__all__ = ["COLUMN_KEYS", "delivery_columns"]

COLUMN_KEYS: Final = (b"t", b"bm", b"k", b"x")
"""The header keys whose text becomes a string column, in the order of the result."""

_INT32_MAX: Final = 2**31 - 1
_UINT64_MAX: Final = 2**64 - 1
_INT64_MAX: Final = 2**63 - 1
_BARE: Final = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.+-_")
_DIGITS: Final = frozenset(b"0123456789")
_WANTED: Final = {b"t": 0, b"bm": 1, b"k": 2, b"x": 3, b"ts": 4}
_DAYS: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

Columns = tuple[bytes | None, ...]
"""``(t offsets, t data, t validity, bm ..., k ..., x ..., publisher ids, sequences,
micros, ts validity, body offsets, body data)``: see :func:`delivery_columns`."""


class _Irregular(AMPSError):
    """A payload not in the usual shape (caught below: the general path takes it)."""


def _header(p: bytes, aliases: Collection[bytes]) -> tuple[list[bytes | None], int]:
    """The wanted values of ``p``'s header and the offset of its body."""
    n = len(p)
    if n < 2 or p[0] != 0x7B:  # {
        raise _Irregular
    values: list[bytes | None] = [None] * 5
    i = 1
    if p[i] == 0x7D:  # }
        return values, 2
    while True:
        if i >= n or p[i] != 0x22:  # "
            raise _Irregular
        end = p.find(b'"', i + 1)
        if end < 0 or b"\\" in p[i + 1 : end]:
            raise _Irregular
        key = p[i + 1 : end]
        i = end + 1
        if i >= n or p[i] != 0x3A:  # :
            raise _Irregular
        i += 1
        if i >= n:
            raise _Irregular
        which = _WANTED.get(key, -1)
        if which < 0 and key in aliases:
            raise _Irregular
        if p[i] == 0x22:
            j = i + 1
            escaped = False
            while j < n and p[j] != 0x22:
                if p[j] == 0x5C:  # backslash: skip the escaped byte
                    escaped = True
                    j += 2
                else:
                    j += 1
            if j >= n:
                raise _Irregular
            if which >= 0:
                value = p[i + 1 : j]
                if escaped or values[which] is not None or not value.isascii():
                    raise _Irregular
                values[which] = value
            i = j + 1
        else:
            if which >= 0:
                raise _Irregular
            j = i
            while j < n and p[j] in _BARE:
                j += 1
            if j == i:
                raise _Irregular
            i = j
        if i >= n:
            raise _Irregular
        if p[i] == 0x2C:  # ,
            i += 1
            continue
        if p[i] == 0x7D:
            return values, i + 1
        raise _Irregular


def _digits(text: bytes) -> bool:
    return bool(text) and all(c in _DIGITS for c in text)


def _bookmark(bm: bytes) -> tuple[int, int]:
    """``publisherId|sequence|...`` -> the two numbers."""
    i = bm.find(b"|")
    j = bm.find(b"|", i + 1)
    if i <= 0 or j <= i + 1:
        raise _Irregular
    head, seq = bm[:i], bm[i + 1 : j]
    if not (_digits(head) and _digits(seq)) or len(head) > 20 or len(seq) > 19:
        raise _Irregular
    pid, sequence = int(head), int(seq)
    if pid > _UINT64_MAX or sequence > _INT64_MAX:
        raise _Irregular
    return pid, sequence


def _micros(ts: bytes) -> int:
    """``YYYYmmddTHHMMSS.ffffffZ`` -> microseconds since the epoch (UTC)."""
    if (
        len(ts) != 23
        or ts[8] != 0x54  # T
        or ts[15] != 0x2E  # .
        or ts[22] != 0x5A  # Z
        or not (_digits(ts[:8]) and _digits(ts[9:15]) and _digits(ts[16:22]))
    ):
        raise _Irregular
    y, mo, d = int(ts[0:4]), int(ts[4:6]), int(ts[6:8])
    h, mi, s = int(ts[9:11]), int(ts[11:13]), int(ts[13:15])
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    if y < 1 or not 1 <= mo <= 12 or not 1 <= d <= (_DAYS[mo - 1] if mo != 2 or leap else 28):
        raise _Irregular
    if h > 23 or mi > 59 or s > 59:
        raise _Irregular
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * 1_000_000 + int(ts[16:22])


def _bitmap(valid: Sequence[bool]) -> bytes | None:
    """An Arrow validity bitmap (LSB first), ``None`` when every value is valid."""
    if all(valid):
        return None
    out = bytearray((len(valid) + 7) // 8)
    for i, ok in enumerate(valid):
        if ok:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _strings(values: Sequence[bytes | None]) -> tuple[bytes, bytes, bytes | None]:
    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + (0 if v is None else len(v)))
    if offsets[-1] > _INT32_MAX:
        raise _Irregular
    data = b"".join(v for v in values if v is not None)
    return (
        struct.pack(f"<{len(offsets)}i", *offsets),
        data,
        _bitmap([v is not None for v in values]),
    )


def delivery_columns(payloads: list[bytes], aliases: tuple[bytes, ...]) -> Columns | None:
    """The column buffers of a batch of deliveries, or ``None`` when one is irregular.

    Args:
        payloads: delivery payloads (header and body).
        aliases: long key names the client's decoder maps onto a wanted key (a header
            using one is irregular).

    Returns:
        A tuple of 18: for each of ``t``, ``bm``, ``k``, ``x`` (:data:`COLUMN_KEYS`) the
        int32 offsets, the UTF-8 data and the validity bitmap (``None``: no null) of a string
        column; then the publisher ids of the bookmarks as 16-byte little-endian integers
        (Arrow ``decimal128(20, 0)``), their sequences as int64 (both valid where ``bm`` is),
        the ``ts`` times as int64 microseconds and their validity; then the bodies' int32
        offsets and bytes.
    """
    long_names = frozenset(aliases)
    try:
        headers = [_header(p, long_names) for p in payloads]
        keys = [_strings([h[0][k] for h in headers]) for k in range(4)]
        pids = bytearray()
        seqs = bytearray()
        micros = bytearray()
        for values, _end in headers:
            bm, ts = values[1], values[4]
            pid, seq = _bookmark(bm) if bm is not None else (0, 0)
            pids += pid.to_bytes(16, "little")
            seqs += seq.to_bytes(8, "little", signed=True)
            micros += (_micros(ts) if ts is not None else 0).to_bytes(8, "little", signed=True)
        bodies = _strings([p[end:] for p, (_v, end) in zip(payloads, headers, strict=True)])
    except _Irregular:
        return None
    return (
        *keys[0],
        *keys[1],
        *keys[2],
        *keys[3],
        bytes(pids),
        bytes(seqs),
        bytes(micros),
        _bitmap([h[0][4] is not None for h in headers]),
        bodies[0],
        bodies[1],
    )
