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
from collections.abc import Sequence
from typing import Any, Final

import msgpack

from ampsclient_server_stub import accel
from ampsclient_server_stub.engine.journal_format import FRAME_OVERHEAD, MIN_BODY

from .protocol import WireRecord
from .rules import PATH_FIELD

__all__ = [
    "PATH_MARK",
    "BlockRuns",
    "RawRun",
    "Run",
    "block_runs",
    "eligible_prefix",
    "journal_runs",
    "journal_walk",
    "mt_suffixes",
]

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U64: Final = 1 << 64
_HEAD: Final = struct.Struct("<IIQQQQ")
"""The frame then the fixed fields: ``body_len, crc32, index, timestamp, publisher id,
sequence`` (``journal_format`` documents the layout)."""

PATH_MARK: Final = msgpack.packb(PATH_FIELD)
"""The packed path field name: a block without these bytes holds no replicated record (a
block with them may still hold none: it then goes record by record)."""

_MARK_CHUNK: Final = 32 * 1024
"""Bytes the walk twin searches for :data:`PATH_MARK` at a time."""


def mt_suffixes(message_types: Sequence[str]) -> tuple[bytes, ...]:
    """The byte endings of a record whose fields say its message type is one of
    ``message_types`` (``{..., "mt": mt}``; ``{}`` for json, the default).

    Sound because the journal's field names are the server's own (``mt``, ``x``, ``e``,
    ``k``, ``rp``, ...: ASCII, none named like a message type) and every value is text or an
    integer: bytes ending a record with the packed ``"mt"`` then the packed type can only be
    its last field, ``mt``, with that value (a value cannot end in the key half of the
    pattern followed by a key named like the type)."""
    out: list[bytes] = []
    for mt in message_types:
        out.append(msgpack.packb("mt") + msgpack.packb(mt))
        if mt == "json":
            out.append(msgpack.packb({}))
    return tuple(out)


def journal_walk(
    data: bytes,
    pos: int,
    expected: int,
    count: int,
    sent_seq: dict[int, int],
    suffixes: tuple[bytes, ...] | None,
) -> tuple[int, int, int]:
    """How many records of the raw block ``data`` from offset ``pos`` (indexes from
    ``expected``, at most ``count``) go as they are: each whole, its index right, its
    msgpack part (after the fixed fields) without :data:`PATH_MARK` (so no replicated record
    goes as written), its publisher sequence above ``sent_seq`` (0 when absent; updated for
    each that goes) and, unless ``suffixes`` is ``None`` (every type goes), ending with one
    of ``suffixes``. A ``sent_seq`` value that is not an int in 0..2**64-1 stops the walk.
    CRCs are not checked here (the downstream checks them). The twin of the C
    ``journal_walk``.

    Returns:
        ``(records that go, the offset after them, the timestamp of the first of them or 0)``:
        the walk stops at the first record that does not go, or at anything malformed (the
        record-by-record path then reports it).
    """
    head = _HEAD.unpack_from
    size = len(data)
    get = sent_seq.get
    first_ts = 0
    taken = 0
    find = data.find
    # PATH_MARK: searched in chunks (one search per record would cost more than the walk):
    # ``mark`` is the first match lying wholly in [the record's start, ``limit``), or -1
    mark = -1
    limit = pos
    while taken < count:
        if pos < 0 or pos + FRAME_OVERHEAD > size:
            break
        length, _crc, index, ts, pid, seq = head(data, pos)
        end = pos + 8 + length
        if length < MIN_BODY or end > size or index != expected:
            break
        if mark < 0 and limit < end:  # (a match may straddle the old limit)
            start = max(pos, limit - len(PATH_MARK) + 1)
            limit = max(end, limit + _MARK_CHUNK)
            mark = find(PATH_MARK, start, limit)
        if 0 <= mark < end:
            if find(PATH_MARK, pos + FRAME_OVERHEAD, end) >= 0:
                break
            mark = -1  # (in the fixed fields, or past the end: search on from the next record)
            limit = end
        held = get(pid, 0)
        if type(held) is not int or not 0 <= held < _U64:
            break
        if seq <= held or (suffixes is not None and not data.endswith(suffixes, pos, end)):
            break
        sent_seq[pid] = seq
        if not taken:
            first_ts = ts
        pos = end
        expected += 1
        taken += 1
    return taken, pos, first_ts


def _canonical(data: bytes, p: int, end: int, bin_: bool) -> tuple[int, int]:
    """``(header size, length)`` of the shortest-form msgpack str (bin) at ``p``; (0, 0)
    when it is anything else or runs past ``end``."""
    if p >= end:
        return 0, 0
    b = data[p]
    if not bin_ and 0xA0 <= b <= 0xBF:
        hs, n = 1, b & 0x1F
    elif b == (0xC4 if bin_ else 0xD9):
        if p + 2 > end:
            return 0, 0
        hs, n = 2, data[p + 1]
        if not bin_ and n < 32:
            return 0, 0
    elif b == (0xC5 if bin_ else 0xDA):
        if p + 3 > end:
            return 0, 0
        hs, n = 3, _U16.unpack_from(data, p + 1)[0]
        if n < 256:
            return 0, 0
    elif b == (0xC6 if bin_ else 0xDB):
        if p + 5 > end:
            return 0, 0
        hs, n = 5, _U32.unpack_from(data, p + 1)[0]
        if n < 65536:
            return 0, 0
    else:
        return 0, 0
    if n > end - p - hs:
        return 0, 0
    return hs, n


def journal_runs(
    data: bytes, pos: int, expected: int, stop: int, runs: list[RawRun]
) -> tuple[int, int]:
    """The journal records of ``data`` from offset ``pos`` (indexes ``expected`` up to
    ``stop``), appended to ``runs`` as runs of records with the same publisher, command and
    fields bytes (a call never extends a run it did not start), while each record is whole,
    its index and CRC right and its msgpack part an array of 4: command and topic as
    shortest-form UTF-8 str, payload as shortest-form bin, then at least one byte (the
    fields, left packed). The twin of the C ``journal_runs``.

    Returns:
        ``(offset, index)`` of the first record not taken.
    """
    head = _HEAD.unpack_from
    crc32 = zlib.crc32
    size = len(data)
    view = memoryview(data)
    items: list[tuple[int, str, bytes]] | None = None
    run_pid = -1
    run_command = run_fields = b""
    command = ""
    while expected < stop and pos >= 0:
        if pos + FRAME_OVERHEAD > size:
            break
        length, crc, index, _ts, pid, seq = head(data, pos)
        end = pos + 8 + length
        if length < MIN_BODY or end > size or index != expected:
            break
        p = pos + FRAME_OVERHEAD
        if p >= end or data[p] != 0x94:
            break
        hs, cl = _canonical(data, p + 1, end, False)
        if not hs:
            break
        cp = p + 1 + hs
        hs, tl = _canonical(data, cp + cl, end, False)
        if not hs:
            break
        tp = cp + cl + hs
        hs, pl = _canonical(data, tp + tl, end, True)
        if not hs:
            break
        pp = tp + tl + hs
        fp = pp + pl
        if fp >= end or crc32(view[pos + 8 : end]) != crc:
            break
        raw_command = data[cp : cp + cl]
        raw_fields = data[fp:end]
        same = items is not None and (pid, raw_command, raw_fields) == (
            run_pid,
            run_command,
            run_fields,
        )
        try:
            topic = data[tp : tp + tl].decode()
            if not same:
                command = raw_command.decode()
        except UnicodeDecodeError:
            break
        if not same:
            items = []
            runs.append((pid, command, raw_fields, items))
            run_pid, run_command, run_fields = pid, raw_command, raw_fields
        assert items is not None
        items.append((seq, topic, data[pp:fp]))
        pos = end
        expected += 1
    return pos, expected


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


RawRun = tuple[int, str, bytes, list[tuple[int, str, bytes]]]
"""``(publisher id, command, packed fields, [(sequence, topic, payload), ...])``."""

_walk: Final = accel.journal_walk or journal_walk
_runs: Final = accel.journal_runs
"""Without C, :func:`block_runs` decodes with msgpack (``_decode_rest``), faster in Python
than the twin's byte-level parse; the twin remains the C function's reference."""


def eligible_prefix(
    data: bytes,
    pos: int,
    expected: int,
    count: int,
    sent_seq: dict[int, int],
    suffixes: tuple[bytes, ...] | None,
) -> tuple[int, int, int]:
    """:func:`journal_walk` (C or twin): what of a block goes as written."""
    return _walk(data, pos, expected, count, sent_seq, suffixes)


def block_runs(data: Any, first: Any, count: Any, path_text: str) -> BlockRuns:
    """Decode a received block (``count`` records from upstream index ``first``), verifying
    each record's length, index and CRC.

    Raises:
        ValueError: a CRC mismatch, a bad length, an index out of order, a malformed body.
    """
    if type(data) is not bytes or type(first) is not int or type(count) is not int:
        raise ValueError("rrec block must be bytes with an integer first index and count")
    raw: list[RawRun] = []
    stop = first + count
    runs: list[Run] = []
    if _runs is None:
        _decode_rest(data, 0, first, stop, runs)
        return BlockRuns(first, count, path_text, runs)
    pos, expected = _runs(data, 0, first, stop, raw)
    for pid, command, packed, items in raw:
        try:
            fields = msgpack.unpackb(packed)
        except Exception as exc:
            raise ValueError(f"rrec block: bad record fields: {exc}") from None
        if type(fields) is not dict:
            raise ValueError("rrec block: record fields are not a map")
        runs.append((pid, command, fields, items))
    if expected < stop:
        _decode_rest(data, pos, expected, stop, runs)
    elif pos != len(data):
        raise ValueError("rrec block: bytes after the last record")
    return BlockRuns(first, count, path_text, runs)


def _decode_rest(data: bytes, pos: int, first: int, stop: int, runs: list[Run]) -> None:
    """Decode records ``first`` up to ``stop`` from offset ``pos`` one by one into ``runs``
    (any msgpack encoding), or say what is wrong with them."""
    view = memoryview(data)
    head = _HEAD.unpack_from
    crc32 = zlib.crc32
    unpackb = msgpack.unpackb
    size = len(data)
    run_pid = -1
    run_command: Any = None
    run_fields: Any = None
    items: list[tuple[int, str, bytes]] = []
    add = items.append
    for expected in range(first, stop):
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
