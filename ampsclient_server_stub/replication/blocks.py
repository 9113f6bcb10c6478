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

__all__ = ["PATH_MARK", "BlockRuns", "Run", "block_runs", "eligible_prefix", "mt_suffixes"]

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


class BlockRuns:
    """A received block, decoded: its records grouped in runs of one publisher's records with
    the same command and fields (in log order).

    Attributes:
        first: the upstream index of the first record.
        count: how many records.
        path: the path the upstream gave every record (its own).
        runs: ``(publisher id, command, fields, [(sequence, topic, payload), ...])`` per run;
            ``fields`` is shared by the run and is not to be changed.
    """

    __slots__ = ("count", "first", "path", "runs")

    def __init__(self, first: int, count: int, path: str, runs: list[Run]) -> None:
        self.first = first
        self.count = count
        self.path = path
        self.runs = runs

    def records(self) -> list[WireRecord]:
        """The records one by one, as an ``rrec`` list carries them (own fields each)."""
        out: list[WireRecord] = []
        index = self.first
        for pid, command, fields, items in self.runs:
            for seq, topic, payload in items:
                own = dict(fields)
                own[PATH_FIELD] = self.path
                out.append((index, pid, seq, command, topic, payload, own))
                index += 1
        return out


Run = tuple[int, str, dict[str, str | int], list[tuple[int, str, bytes]]]
"""``(publisher id, command, fields, [(sequence, topic, payload), ...])``."""


def block_runs(data: Any, first: Any, count: Any, path_text: str) -> BlockRuns:
    """Decode a received block (``count`` records from upstream index ``first``), verifying
    each record's length, index and CRC.

    Raises:
        ValueError: a CRC mismatch, a bad length, an index out of order, a malformed body.
    """
    if type(data) is not bytes or type(first) is not int or type(count) is not int:
        raise ValueError("rrec block must be bytes with an integer first index and count")
    runs: list[Run] = []
    view = memoryview(data)
    head = _HEAD.unpack_from
    crc32 = zlib.crc32
    unpackb = msgpack.unpackb
    size = len(data)
    pos = 0
    run_pid = -1
    run_command: Any = None
    run_fields: Any = None
    items: list[tuple[int, str, bytes]] = []
    add = items.append
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
        if type(topic) is not str or type(payload) is not bytes:
            raise ValueError(f"rrec block: record {index} has a field of the wrong type")
        if pid != run_pid or command != run_command or fields != run_fields:
            if type(command) is not str or type(fields) is not dict:
                raise ValueError(f"rrec block: record {index} has a field of the wrong type")
            items = []
            add = items.append
            runs.append((pid, command, fields, items))
            run_pid, run_command, run_fields = pid, command, fields
        add((seq, topic, payload))
        pos = end
    if pos != size:
        raise ValueError("rrec block: bytes after the last record")
    return BlockRuns(first, count, path_text, runs)
