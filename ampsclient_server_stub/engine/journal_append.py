"""Journal record frames for a run of one publisher's records: the pure-Python twin of the C
``journal_frames`` (``ampsclient_server_stub/_speedups.c``).

:meth:`Journal.append_many <.journal.Journal.append_many>` hands a whole batch of
``(sequence, topic, payload)`` to :func:`journal_frames`, which checks the sequences, then
builds every record's bytes (frame, fixed part, msgpack ``[command, topic, payload, fields]``)
and CRC straight into the journal's append buffer. The bytes are exactly those of one
:meth:`Journal.append <.journal.Journal.append>` per record (format in
:mod:`.journal_format`); only the loop moved.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Final
from zlib import crc32

import msgpack

from .journal_format import FIXED, FRAME

__all__ = ["journal_frames", "record_prefix"]

_UINT64: Final = 1 << 64
_packb = msgpack.Packer(use_bin_type=True).pack
_fixed_pack = FIXED.pack
_frame_pack = FRAME.pack
_BIN8: Final = tuple(b"\xc4" + bytes((n,)) for n in range(256))
"""msgpack ``bin 8`` headers by length (payloads under 256 bytes, the usual case)."""


def record_prefix(command: str) -> bytes:
    """The msgpack bytes every record of ``command`` starts with: a 4-array, then the
    command string (the ``prefix`` argument of :func:`journal_frames`)."""
    packed: bytes = _packb(command)
    return b"\x94" + packed


def journal_frames(
    buf: bytearray,
    records: Sequence[tuple[int, str, bytes]],
    start: int,
    publisher_id: int,
    index: int,
    ts: int,
    prefix: bytes,
    fields: bytes,
    size: int,
    limit: int,
    prev: int,
) -> tuple[int, int, bytes, bytes, bytes]:
    """Append the journal records of ``records[start:]`` to ``buf``.

    First every sequence from ``start`` on is checked: each must be above the previous one
    (``prev`` before the first) and below 2**64; if one is not, nothing is appended and the
    result is ``(-1 - position, size, b"", b"", b"")``. Then records are framed in order, record
    ``i`` at index ``index + i - start`` with timestamp ``ts``; ``prefix`` (see
    :func:`record_prefix`) and ``fields`` (a packed msgpack map) are shared. Framing stops
    after the first record that brings the segment's ``size`` to ``limit`` or more (where the
    segment rotates).

    Returns:
        ``(next position, new size, offsets, sequences, indexes)``: the offsets in the
        segment, the sequences and the indexes of the records framed, each as native unsigned
        64-bit integers (``array('Q')`` bytes).
    """
    n = len(records)
    for pos in range(start, n):
        seq = records[pos][0]
        if not prev < seq < _UINT64:
            return -1 - pos, size, b"", b"", b""
        prev = seq
    offsets = array("Q")
    seqs = array("Q")
    first = index
    prefixes: dict[str, bytes] = {}
    join = b"".join
    bin8 = _BIN8
    pos = start
    while pos < n:
        seq, topic, payload = records[pos]
        head = prefixes.get(topic)
        if head is None:
            head = prefixes[topic] = prefix + _packb(topic)
        length = len(payload)
        if length < 256:
            tail = join((head, bin8[length], payload, fields))
        else:
            tail = join((head, _packb(bytes(payload)), fields))
        fixed = _fixed_pack(index, ts, publisher_id, seq)
        body_len = len(fixed) + len(tail)
        buf += _frame_pack(body_len, crc32(tail, crc32(fixed)))
        buf += fixed
        buf += tail
        offsets.append(size)
        seqs.append(seq)
        size += body_len + 8
        index += 1
        pos += 1
        if size >= limit:
            break
    indexes = array("Q", range(first, index))
    return pos, size, offsets.tobytes(), seqs.tobytes(), indexes.tobytes()
