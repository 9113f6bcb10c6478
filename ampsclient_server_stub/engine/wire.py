"""Wire frames of the broker: header field readers, ack writers, byte-level publish recognizers.

Everything here is pure (no broker state): the command handlers read a command's header
through :func:`ack_flags`, :func:`command_options`, :func:`text` and :func:`int_field`, answer
with :func:`send_ack`/:func:`send_acks`, and the broker's fast paths recognise the two common
publish shapes straight from the bytes (:func:`parse_plain_publish`, :func:`parse_seq_publish`)
without decoding a header.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final
from zlib import crc32

from ampsclient.protocol.acks import AckType, parse_ack_types
from ampsclient.protocol.header import Header, encode_header

from ..errors import RequestError
from .composite_codec import composite_type, opaque_part_refusal
from .filter_syntax import Path, identifiers, parse_filter
from .filters import FilterError, compile_filter
from .journal_format import FRAME_OVERHEAD, MIN_BODY
from .payload import PARSEABLE_TYPES, is_parseable, parse_options
from .topics import TopicError, TopicMatcher, compile_topic

__all__ = [
    "ALL_ACKS",
    "COMPLETED",
    "DETAILED_REASONS",
    "FAST_PUBLISH_SHAPES",
    "MT_FIELDS",
    "PERSISTED",
    "PROCESSED",
    "REASON_DETAIL",
    "RECEIVED",
    "STATS",
    "SUBSCRIBE_COMMANDS",
    "CommandFailure",
    "ack_flags",
    "command_filter",
    "command_matcher",
    "command_options",
    "delivery_frames",
    "format_micros",
    "format_timestamp",
    "int_field",
    "opaque_filter_refusal",
    "parse_plain_publish",
    "parse_queue_ack",
    "parse_seq_publish",
    "persisted_ack",
    "printable_detail",
    "processed_ack_sent",
    "publish_header",
    "replay_frames",
    "scan_publishes",
    "send_ack",
    "send_acks",
    "sequence_of",
    "set_path",
    "split_list",
    "text",
]

# Ack flags as plain ints: IntFlag arithmetic is slow on the publish path.
RECEIVED: Final = int(AckType.RECEIVED)
PROCESSED: Final = int(AckType.PROCESSED)
PERSISTED: Final = int(AckType.PERSISTED)
COMPLETED: Final = int(AckType.COMPLETED)
STATS: Final = int(AckType.STATS)
ALL_ACKS: Final = RECEIVED | PROCESSED | COMPLETED | STATS | PERSISTED

MT_FIELDS: Final[Mapping[str, Mapping[str, str | int]]] = {
    mt: {"mt": mt} for mt in ("json", "nvfix", "fix", "xml", "bson", "msgpack", "binary")
}
"""Shared ``fields`` of a journal record that has nothing but its message type (read-only)."""

SUBSCRIBE_COMMANDS: Final = frozenset(
    {"subscribe", "delta_subscribe", "sow_and_subscribe", "sow_and_delta_subscribe"}
)

_FAST_PUBLISH: Final = b'{"c":"p","t":"'
_FAST_LEN: Final = len(_FAST_PUBLISH)
_FAST_SEQ: Final = b'{"c":"p","s":'
_FAST_SEQ_LEN: Final = len(_FAST_SEQ)
_FAST_SEQ_MID: Final = b',"a":"persisted","t":"'
_FAST_SEQ_MID_LEN: Final = len(_FAST_SEQ_MID)
_CLOSE_BRACE: Final = ord("}")
# the official HAClient's shape: {"c":"p","t":"T","a":"persisted","s":N}BODY
_FAST_SEQ_T: Final = b'{"c":"p","t":"'
_FAST_SEQ_T_LEN: Final = len(_FAST_SEQ_T)
_FAST_SEQ_T_MID: Final = b'","a":"persisted","s":'
_FAST_SEQ_T_MID_LEN: Final = len(_FAST_SEQ_T_MID)
FAST_PUBLISH_SHAPES: Final = (_FAST_SEQ, _FAST_SEQ_T)
"""Every publish the recognizers take starts with one of these (``bytes.startswith`` test)."""

_MAX_RUN_SEQ: Final = 2**63 - 1
_RECORD_HEAD: Final = struct.Struct("<IIQQQQ")  # a journal record's frame and fixed fields
_EMPTY_OPTIONS: Final[Mapping[str, str]] = {}


class CommandFailure(RequestError):
    """A command is refused; ``reason`` is the exact AMPS reason string."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


REASON_DETAIL: Final = "reason_detail"
"""Header field of a failure ack that says what exactly is wrong, beside the exact AMPS
``reason``. Not an AMPS field: AMPS sends only ``reason``. The official Python client ignores
it (its ``BadFilterException`` still reads ``bad filter '<filter>'``); probed with client 5.3.5.14,
which, by contrast, took a field named ``detail`` for the reason and raised a plain
``CommandException``, so the name matters."""
DETAILED_REASONS: Final = frozenset({"bad filter", "bad regex topic", "invalid options"})
"""Reasons whose detail is sent: it only describes the client's own filter, topic or options."""
_MAX_DETAIL: Final = 512


def printable_detail(detail: str) -> str:
    """``detail`` as one line of at most 512 characters (control characters replaced)."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in detail)
    return clean if len(clean) <= _MAX_DETAIL else clean[: _MAX_DETAIL - 3] + "..."


# --------------------------------------------------------------------------- header fields


@lru_cache(maxsize=1024)
def _cached_options(value: str) -> Mapping[str, str]:
    return parse_options(value)


@lru_cache(maxsize=256)
def _parse_flags(value: str) -> int:
    return int(parse_ack_types(value))


def ack_flags(hdr: Header) -> int:
    """The requested ack types (``a``) as an int bit set."""
    a = hdr.get("a")
    if not a:
        return 0
    return _parse_flags(str(a))


def command_options(hdr: Header) -> Mapping[str, str]:
    """The command's options (``o``), parsed (cached per distinct text)."""
    o = hdr.get("o")
    if not o:
        return _EMPTY_OPTIONS
    return _cached_options(str(o))


def text(value: Any) -> str | None:
    """A header value as a non-empty string, else ``None``."""
    if value is None:
        return None
    result = str(value)
    return result or None


def int_field(value: Any, *, reason: str = "invalid options") -> int | None:
    """A header value as an int (``None`` when absent).

    Raises:
        CommandFailure: ``reason`` when it is not an integer.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise CommandFailure(reason, f"not an integer: {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise CommandFailure(reason, f"not an integer: {value!r}") from None


def split_list(value: Any) -> list[str]:
    """A comma-separated header value as its non-empty, stripped parts."""
    if value is None:
        return []
    return [part for part in (p.strip() for p in str(value).split(",")) if part]


def sequence_of(hdr: Header) -> int | None:
    """The publish sequence to track for duplicate detection: ``s``, whatever acks were
    asked for (AMPS detects duplicates by client name and sequence), else None."""
    seq = hdr.get("s")
    if seq is None or seq == "":
        return None
    return int_field(seq, reason="invalid sequence")


def format_timestamp(now: float) -> str:
    """AMPS-style UTC timestamp ``YYYYmmddTHHMMSS.ffffffZ`` for epoch seconds ``now``."""
    secs = int(now)
    micros = round((now - secs) * 1_000_000)
    if micros >= 1_000_000:
        secs += 1
        micros -= 1_000_000
    t = time.gmtime(secs)
    return (
        f"{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}{t.tm_min:02d}{t.tm_sec:02d}.{micros:06d}Z"
    )


def format_micros(micros: int) -> str:
    """``YYYYmmddTHHMMSS.ffffffZ`` (UTC) of a time in microseconds since the epoch."""
    secs, us = divmod(micros, 1_000_000)
    return f"{_second_prefix(secs)}{us:06d}Z"


@lru_cache(maxsize=256)
def _second_prefix(secs: int) -> str:
    """``YYYYmmddTHHMMSS.`` of a second: a replay's records share a few seconds, so each is
    formatted once (``time.gmtime`` and the f-string cost about 5 µs per call)."""
    t = time.gmtime(secs)
    return (
        f"{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}T{t.tm_hour:02d}{t.tm_min:02d}{t.tm_sec:02d}."
    )


def set_path(target: dict[str, Any], parts: Sequence[str], value: Any) -> None:
    """``target[parts[0]][parts[1]]... = value``, creating the dicts on the way."""
    cur = target
    for part in parts[:-1]:
        child = cur.get(part)
        if not isinstance(child, dict):
            child = {}
            cur[part] = child
        cur = child
    cur[parts[-1]] = value


def publish_header(topic: str, seq: int | None) -> Header:
    """The header of a fast-path publish, for its failure ack."""
    if seq is None:
        return {"c": "p", "t": topic}
    return {"c": "p", "t": topic, "s": seq, "a": "persisted"}


def command_filter(
    hdr: Header, *, message_type: str
) -> tuple[str | None, Callable[[Any], bool] | None]:
    """``(filter text, predicate)`` of a command (``(None, None)`` without a filter) on a
    connection of ``message_type``.

    Raises:
        CommandFailure: ``bad filter``, also for a message type whose payloads the server
            does not parse (a filter there would match nothing, silently).
    """
    source = text(hdr.get("filter"))
    if source is None or not source.strip():
        return None, None
    if not is_parseable(message_type):
        raise CommandFailure(
            "bad filter",
            f"content filters need a message type the server parses "
            f"({', '.join(sorted(PARSEABLE_TYPES))}); {message_type!r} payloads are carried "
            "as they are",
        )
    try:
        predicate = compile_filter(source)
    except FilterError as exc:
        raise CommandFailure("bad filter", str(exc)) from None
    except (RecursionError, ValueError) as exc:
        raise CommandFailure("bad filter", str(exc)) from None
    refusal = opaque_filter_refusal(message_type, source)
    if refusal is not None:
        raise CommandFailure("bad filter", refusal)
    return source, predicate


def opaque_filter_refusal(
    message_type: str, source: str, *, whole_part: bool = False
) -> str | None:
    """Why the filter or expression ``source`` (one that compiles) is refused on
    ``message_type``: an identifier that reads inside a binary part or the unparsed payload of
    a composite-local type (:func:`.composite_codec.opaque_part_refusal`); ``None``: it is
    not. ``whole_part``: a bare identifier of a whole part (``/2``) is allowed (a view's or an
    aggregation's projected field copies it).

    Raises:
        FilterError: ``source`` does not parse.
    """
    ctype = composite_type(message_type.lower())
    if ctype is None or not ctype.local:
        return None
    node = parse_filter(source)
    if whole_part and isinstance(node, Path) and len(node.steps) == 1:
        return None
    for steps in identifiers(node):
        refusal = opaque_part_refusal(ctype, steps)
        if refusal is not None:
            return refusal
    return None


def command_matcher(topic: str) -> TopicMatcher:
    """The matcher of a command's topic.

    Raises:
        CommandFailure: ``bad regex topic``.
    """
    try:
        return compile_topic(topic)
    except TopicError as exc:
        raise CommandFailure("bad regex topic", str(exc)) from None


# --------------------------------------------------------------------------- ack frames


def send_ack(
    send: Callable[[bytes], None],
    hdr: Header,
    ack_type: str,
    *,
    status: str = "success",
    reason: str | None = None,
    sub_id: str | None = None,
    query_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """One ack frame for the command ``hdr`` (echoing its ``cid``, ``sub_id``, ``query_id``)."""
    if ack_type == "processed":
        _processed.hdr = hdr
    fields: dict[str, Any] = {"c": "ack", "cid": text(hdr.get("cid")), "a": ack_type}
    fields["status"] = status
    if reason is not None:
        fields["reason"] = reason
    fields["sub_id"] = sub_id if sub_id is not None else text(hdr.get("sub_id"))
    fields["query_id"] = query_id if query_id is not None else text(hdr.get("query_id"))
    if extra:
        fields.update(extra)
    send(encode_header(fields))


class _LastProcessed(threading.local):
    hdr: Header | None = None


_processed: Final = _LastProcessed()
"""The header of the command whose ``processed`` ack this thread sent last (one server
runs on one thread; a cluster in one process runs one per thread)."""


def processed_ack_sent(hdr: Header) -> bool:
    """Whether the last ``processed`` ack this thread sent answered this very command header
    (identity, not equality: a failing handler is answered right after it raised)."""
    return _processed.hdr is hdr


def send_acks(
    send: Callable[[bytes], None],
    hdr: Header,
    flags: int,
    *,
    sub_id: str | None = None,
    query_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Success acks for the types in ``flags`` (in canonical order; persisted excluded)."""
    if flags & RECEIVED:
        send_ack(send, hdr, "received", sub_id=sub_id, query_id=query_id)
    if flags & PROCESSED:
        send_ack(send, hdr, "processed", sub_id=sub_id, query_id=query_id)
    if flags & COMPLETED:
        send_ack(send, hdr, "completed", sub_id=sub_id, query_id=query_id, extra=extra)
    if flags & STATS:
        send_ack(send, hdr, "stats", sub_id=sub_id, query_id=query_id, extra=extra)


def persisted_ack(seq: int, *, reason: str | None = None) -> bytes:
    """A publisher's cumulative persisted ack (a failure when ``reason`` is given)."""
    if reason is None:
        return encode_header({"c": "ack", "a": "persisted", "s": seq, "status": "success"})
    return encode_header(
        {"c": "ack", "a": "persisted", "s": seq, "status": "failure", "reason": reason}
    )


# --------------------------------------------------------------------------- recognizers


def parse_plain_publish(payload: bytes) -> tuple[str, None, int] | None:
    """``(topic, None, body offset)`` of a plain publish ``{"c":"p","t":"T"}BODY``, else
    None."""
    if not payload.startswith(_FAST_PUBLISH):
        return None
    j = payload.find(b'"', _FAST_LEN)
    if (
        j > _FAST_LEN
        and len(payload) > j + 1
        and payload[j + 1] == _CLOSE_BRACE
        and payload.find(b"\\", _FAST_LEN, j) < 0
    ):
        try:
            return payload[_FAST_LEN:j].decode(), None, j + 2
        except UnicodeDecodeError:
            return None
    return None


def parse_seq_publish(payload: bytes) -> tuple[str, int, int] | None:
    """``(topic, sequence, body offset)`` of a fast-shaped sequenced publish, else None.

    Two shapes: ours (``{"c":"p","s":N,"a":"persisted","t":"T"}``) and the official
    client's (``{"c":"p","t":"T","a":"persisted","s":N}``).
    """
    if payload.startswith(_FAST_SEQ_T):
        j = payload.find(b'"', _FAST_SEQ_T_LEN)
        if j <= _FAST_SEQ_T_LEN or not payload.startswith(_FAST_SEQ_T_MID, j):
            return None
        k = j + _FAST_SEQ_T_MID_LEN
        e = payload.find(b"}", k, k + 21)
        if e <= k or not payload[k:e].isdigit() or payload.find(b"\\", 0, j) >= 0:
            return None
        try:
            return payload[_FAST_SEQ_T_LEN:j].decode(), int(payload[k:e]), e + 1
        except UnicodeDecodeError:
            return None
    if not payload.startswith(_FAST_SEQ):
        return None
    i = payload.find(_FAST_SEQ_MID, _FAST_SEQ_LEN, _FAST_SEQ_LEN + 21 + _FAST_SEQ_MID_LEN)
    if i <= _FAST_SEQ_LEN:
        return None
    t0 = i + _FAST_SEQ_MID_LEN
    j = payload.find(b'"', t0)
    if (
        j > t0
        and len(payload) > j + 1
        and payload[j + 1] == _CLOSE_BRACE
        and payload[_FAST_SEQ_LEN:i].isdigit()
        and payload.find(b"\\", t0, j) < 0
    ):
        try:
            return payload[t0:j].decode(), int(payload[_FAST_SEQ_LEN:i]), j + 2
        except UnicodeDecodeError:
            return None
    return None


_FAST_ACK: Final = b'{"c":"sow_delete","t":"'
_FAST_ACK_LEN: Final = len(_FAST_ACK)
_FAST_ACK_CID: Final = b'","cid":"'
_FAST_ACK_BM: Final = b'","bookmark":"'
_FAST_ACK_END: Final = b'"}'


def parse_queue_ack(payload: bytes) -> tuple[Header, int] | None:
    """``(header, body offset)`` of a queue acknowledgement in the shape both clients send
    (sheet §10), ``{"c":"sow_delete","t":"T","cid":"C","bookmark":"B"}`` with no body, else
    None. The header is the one :func:`~ampsclient.protocol.header.decode_header` returns
    (``bookmark`` under its short name ``bm``), found with four ``find`` calls instead of the
    general parse: a consumer acknowledges every batch this way."""
    if (
        not payload.startswith(_FAST_ACK)
        or not payload.endswith(_FAST_ACK_END)
        or payload.find(b"\\", _FAST_ACK_LEN) >= 0
    ):
        return None
    t_end = payload.find(b'"', _FAST_ACK_LEN)
    if t_end <= _FAST_ACK_LEN or not payload.startswith(_FAST_ACK_CID, t_end):
        return None
    c_start = t_end + len(_FAST_ACK_CID)
    c_end = payload.find(b'"', c_start)
    if c_end < 0 or not payload.startswith(_FAST_ACK_BM, c_end):
        return None
    b_start = c_end + len(_FAST_ACK_BM)
    end = len(payload)
    if payload.find(b'"', b_start, end - 2) >= 0:
        return None
    try:
        hdr: Header = {
            "c": "sow_delete",
            "t": payload[_FAST_ACK_LEN:t_end].decode(),
            "cid": payload[c_start:c_end].decode(),
            "bm": payload[b_start : end - 2].decode(),
        }
    except UnicodeDecodeError:
        return None
    return hdr, end


# --------------------------------------------------------------------------- runs (C twins)


def scan_publishes(
    payloads: list[bytes], start: int, plain: bool, last_seq: int, topics: Mapping[str, Any]
) -> tuple[int, list[tuple[int, str, bytes]]]:
    """The publishes at ``payloads[start:]`` that can be batched: parsed by
    :func:`parse_plain_publish` (``plain``) or :func:`parse_seq_publish`, each sequence above
    the one before (plain publishes are numbered from ``last_seq + 1``), each topic a key of
    ``topics``. Returns ``(end, batch)``: the index of the first payload not taken and
    ``(sequence, topic, body)`` per publish taken.

    Twin of the C ``scan_publishes``. A sequence above 2**63 - 1 ends the run (the caller's
    one-by-one path takes it).
    """
    parse = parse_plain_publish if plain else parse_seq_publish
    batch: list[tuple[int, str, bytes]] = []
    append = batch.append
    n = len(payloads)
    i = start
    while i < n:
        payload = payloads[i]
        parsed = parse(payload)
        if parsed is None:
            break
        topic, seq, end = parsed
        if topic not in topics:
            break
        if seq is None:
            seq = last_seq + 1
        elif seq <= last_seq or seq > _MAX_RUN_SEQ:
            break
        append((seq, topic, payload[end:]))
        last_seq = seq
        i += 1
    return i, batch


def delivery_frames(head: bytes, batch: list[tuple[int, str, bytes]]) -> list[bytes]:
    """``head + b'%d|"}' % sequence + body`` for each ``(sequence, topic, body)`` of
    ``batch``: the delivery frames of a run to one connection, ``head`` ending with the
    publisher id's ``"bm":"PID|``. Twin of the C ``delivery_frames``."""
    return [b'%s%d|"}%s' % (head, seq, data) for seq, _topic, data in batch]


def _msgpack_str(data: bytes, p: int, end: int) -> tuple[int, int] | None:
    """``(start, stop)`` of the content of the msgpack str at ``data[p]`` (within ``end``)."""
    if p >= end:
        return None
    b = data[p]
    if b & 0xE0 == 0xA0:
        h, size = 1, b & 0x1F
    elif b == 0xD9 and end - p >= 2:
        h, size = 2, data[p + 1]
    elif b == 0xDA and end - p >= 3:
        h, size = 3, int.from_bytes(data[p + 1 : p + 3], "big")
    elif b == 0xDB and end - p >= 5:
        h, size = 5, int.from_bytes(data[p + 1 : p + 5], "big")
    else:
        return None
    if end - p - h < size:
        return None
    return p + h, p + h + size


def _other_topic(data: bytes, p: int, end: int, want: bytes) -> bool:
    """Is the record body ``data[p:end]`` (msgpack ``[command, topic, payload, fields]``) to
    a topic other than ``want``? ``False`` when it is to ``want`` or not of that form."""
    if p >= end or data[p] != 0x94:
        return False
    command = _msgpack_str(data, p + 1, end)
    if command is None:
        return False
    topic = _msgpack_str(data, command[1], end)
    return topic is not None and data[topic[0] : topic[1]] != want


def replay_frames(
    data: bytes,
    pos: int,
    expected: int,
    stop: int,
    prefix: bytes,
    suffix: bytes,
    head: bytes,
    pid: int,
    out: list[bytes],
    stamp: bool = False,
    until: int = -1,
) -> tuple[int, int, int]:
    """Delivery frames ``head + b'%d|"}' % sequence + payload`` straight from the journal
    records of ``data`` (a :meth:`Journal.read_blocks` block) from ``pos``, indexes
    ``expected`` up to ``stop``, appended to ``out``. It takes records while each is whole
    (length, CRC-32, index as :func:`.journal_format.decode_records` checks them), of
    publisher ``pid``, and its msgpack part is ``prefix`` + one length byte + payload +
    ``suffix`` (a ``p`` to the wanted topic with only the wanted message type); the caller
    handles the record it stopped at. A whole record to another topic (any publisher) is
    checked (CRC, and ``until``) and skipped. With ``stamp`` (the ``timestamp`` option) the frame is
    ``head + b'%d|","ts":"%s"}' % (sequence, format_micros(time)) + payload``, a record
    whose time has no four-digit year left to the caller; with ``until`` >= 0 it stops at
    the first record received after ``until`` (microseconds: a range ending at a time).
    Returns ``(pos, expected, sequence)`` where it stopped, with the last sequence framed
    (-1: none). Twin of the C ``replay_frames``.
    """
    unpack = _RECORD_HEAD.unpack_from
    n = len(data)
    skip = FRAME_OVERHEAD + len(prefix)
    slen = len(suffix)
    last = -1
    want = _msgpack_str(prefix, 3, len(prefix) - 1) if len(prefix) >= 4 else None
    wanted = None if want is None else prefix[want[0] : want[1]]
    while expected < stop:
        if pos + FRAME_OVERHEAD > n:
            break
        length, crc, index, ts, rpid, seq = unpack(data, pos)
        end = pos + 8 + length
        if length < MIN_BODY or end > n or index != expected:
            break
        if wanted is not None and _other_topic(data, pos + FRAME_OVERHEAD, end, wanted):
            if (until >= 0 and ts > until) or crc32(data[pos + 8 : end]) != crc:
                break
            pos = end  # another topic's record (any publisher): checked, skipped
            expected += 1
            continue
        if rpid != pid:
            break
        p = pos + skip
        if (
            p >= end
            or not data.startswith(prefix, pos + FRAME_OVERHEAD)
            or p + 1 + data[p] + slen != end
            or not data.startswith(suffix, end - slen)
            or crc32(data[pos + 8 : end]) != crc
            or seq > _MAX_RUN_SEQ
            or (until >= 0 and ts > until)
        ):
            break
        if stamp:
            if ts > _MAX_RUN_SEQ:
                break
            when = format_micros(ts)
            if len(when) != 23:
                break
            tail = b'|","ts":"%s"}' % when.encode()
        else:
            tail = b'|"}'
        out.append(b"%s%d%s%s" % (head, seq, tail, data[p + 1 : end - slen]))
        last = seq
        pos = end
        expected += 1
    return pos, expected, last
