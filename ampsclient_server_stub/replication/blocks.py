"""Journal blocks on the replication link: records shipped as the journal wrote them.

A run of consecutive journal records that a destination takes whole, exactly as the records
are (every one published here, of a message type the destination takes on every topic, not
already held downstream), travels as the journal's own bytes: the upstream neither decodes
nor re-encodes them, and the downstream verifies each record's CRC and decodes it once.

Upstream, :func:`eligible_prefix` walks the fixed record headers of a block (no msgpack, no
CRC) and says how many records from its start may go that way; the rest of the block goes
record by record (decoded, decided by the rules one at a time). Downstream,
:func:`decode_block` turns a received block into the same
:data:`~.protocol.WireRecord` tuples an ``rrec`` list carries.

The record format is :mod:`ampsclient_server_stub.engine.journal_format`'s: an 8-byte frame
(``body_len``, ``crc32``), 32 fixed bytes (index, timestamp, publisher id, sequence), then the
msgpack array ``[command, topic, payload, fields]``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import MutableSequence, Sequence
from typing import Any, Final

import msgpack

from ampsclient_server_stub.engine.journal_format import FRAME_OVERHEAD, MIN_BODY

from .protocol import WireRecord
from .rules import PATH_FIELD

__all__ = ["PATH_MARK", "decode_block", "eligible_prefix", "mt_suffixes"]

_HEAD: Final = struct.Struct("<IIQQQQ")
"""The frame then the fixed fields: ``body_len, crc32, index, timestamp, publisher id,
sequence`` (``journal_format`` documents the layout)."""

PATH_MARK: Final = msgpack.packb(PATH_FIELD)
"""The packed path field name: a block without these bytes holds no replicated record (a
block with them may still hold none: it then goes record by record)."""


def mt_suffixes(message_types: Sequence[str]) -> tuple[bytes, ...]:
    """The byte endings of a record whose fields say its message type is one of
    ``message_types`` and nothing else (``{"mt": mt}``; ``{}`` for json, the default).

    Journal fields map text names to text or integers, so a record ending with the packed
    ``{..., "mt": mt}`` has that type whatever else its fields hold."""
    out: list[bytes] = []
    for mt in message_types:
        out.append(msgpack.packb("mt") + msgpack.packb(mt))
        if mt == "json":
            out.append(msgpack.packb({}))
    return tuple(out)


def eligible_prefix(
    data: bytes,
    start: int,
    first: int,
    count: int,
    sent_seq: dict[int, int],
    suffixes: tuple[bytes, ...] | None,
    pending: MutableSequence[tuple[int, int]],
) -> tuple[int, int]:
    """How many records from offset ``start`` of the raw block ``data`` (``count`` records
    from there, the first with index ``first``) go as they are: each of a publisher sequence above
    ``sent_seq`` (updated for those that go) and, unless ``suffixes`` is ``None`` (every
    type goes), ending with one of ``suffixes``. The caller has checked the block holds no
    replicated record (:data:`PATH_MARK`). Appends ``(index, timestamp)`` of each record
    that goes to ``pending``.

    Returns:
        ``(records that go, the offset after them)``: the walk stops at the first record
        that does not go, or at anything malformed (the record-by-record path then reports
        it).
    """
    head = _HEAD.unpack_from
    size = len(data)
    get = sent_seq.get
    append = pending.append
    pos = start
    index = first
    stop = first + count
    while index < stop:
        if pos + FRAME_OVERHEAD > size:
            break
        length, _crc, rec_index, ts, pid, seq = head(data, pos)
        end = pos + 8 + length
        if (
            length < MIN_BODY
            or end > size
            or rec_index != index
            or seq <= get(pid, 0)
            or (suffixes is not None and not data.endswith(suffixes, pos, end))
        ):
            break
        sent_seq[pid] = seq
        append((index, ts))
        pos = end
        index += 1
    return index - first, pos


def decode_block(data: Any, first: Any, count: Any, path_text: str) -> list[WireRecord]:
    """The records of a received block (``count`` records from index ``first``), as
    ``rrec`` carries them, each with the path ``path_text``.

    Raises:
        ValueError: a CRC mismatch, a bad length, an index out of order, a malformed body.
    """
    if type(data) is not bytes or type(first) is not int or type(count) is not int:
        raise ValueError("rrec block must be bytes with an integer first index and count")
    out: list[WireRecord] = []
    append = out.append
    view = memoryview(data)
    head = _HEAD.unpack_from
    crc32 = zlib.crc32
    unpackb = msgpack.unpackb
    size = len(data)
    pos = 0
    for expected in range(first, first + count):
        if pos + FRAME_OVERHEAD > size:
            raise ValueError(f"rrec block cut short at record {expected}")
        length, crc, index, _ts, pid, seq = head(data, pos)
        end = pos + 8 + length
        if length < MIN_BODY or end > size:
            raise ValueError(f"rrec block: bad record length {length} at record {expected}")
        if index != expected:
            raise ValueError(f"rrec block: record index {index}, expected {expected}")
        if crc32(view[pos + 8 : end]) != crc:
            raise ValueError(f"rrec block: CRC mismatch in record {index}")
        try:
            command, topic, payload, fields = unpackb(view[pos + FRAME_OVERHEAD : end])
        except Exception as exc:
            raise ValueError(f"rrec block: bad record {index}: {exc}") from None
        if not (
            type(command) is str
            and type(topic) is str
            and type(payload) is bytes
            and type(fields) is dict
        ):
            raise ValueError(f"rrec block: record {index} has a field of the wrong type")
        fields[PATH_FIELD] = path_text
        append((index, pid, seq, command, topic, payload, fields))
        pos = end
    if pos != size:
        raise ValueError("rrec block: bytes after the last record")
    return out
