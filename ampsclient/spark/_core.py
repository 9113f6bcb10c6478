"""The AMPS side of the Spark data source: options, positions, range planning, log probes.

Nothing here imports pyspark, so the planning logic is plain Python (and unit-testable without
a JVM). Every function that talks to a server takes a connected :class:`~ampsclient.Client`.

Vocabulary:

* a **position** is a point in the transaction log that Spark can store in a checkpoint: the
  journal bookmark (``publisherId|seq|``) of one message, with that message's server time;
* a **bound** is one end of a bookmark range (``[``/``(`` ... ``]``/``)``);
* a **fence** is a tiny message the planner publishes to a side topic to learn the log's end
  (its bookmark comes back through a bookmark subscription started at NOW, so the planner
  learns a journal position that is after every message recorded before it, without reading
  them).
"""

from __future__ import annotations

import calendar
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ..client import ConnectionEvent, ConnectionState
from ..command import Command
from ..exceptions import (
    AMPSError,
    CommandError,
    DisconnectedError,
    InvalidBookmarkError,
    TimeoutError,
    error_for_reason,
)
from ..protocol.acks import AckType
from ..protocol.bookmarks import (
    EPOCH,
    NOW,
    BookmarkId,
    BookmarkList,
    BookmarkRange,
    Epoch,
    Now,
    Timestamp,
    format_timestamp,
    parse_bookmark,
)
from ..protocol.message import Message, body_offset
from ..sync import Client
from ..uri import parse_uri

__all__ = [
    "DEFAULT_FENCE_TOPIC",
    "METADATA_COLUMNS",
    "AMPSDataLossError",
    "AMPSSparkError",
    "AMPSUnavailableError",
    "Backlog",
    "Bound",
    "Position",
    "ReadOptions",
    "Reconnect",
    "ReplayEnd",
    "WriteOptions",
    "bookmark_micros",
    "connect",
    "counting_replay",
    "describe",
    "fence",
    "first_micros",
    "format_micros",
    "last_micros",
    "offset_bounds",
    "parse_micros",
    "plan_ranges",
    "range_text",
    "replay",
    "scan",
    "server_micros",
]

log = logging.getLogger("ampsclient.spark")

DEFAULT_FENCE_TOPIC: Final = "ampsclient.spark.fence"
"""The side topic fences are published to (it must be recorded by the transaction log)."""

METADATA_COLUMNS: Final = (
    "topic",
    "bookmark",
    "publisher_id",
    "sequence",
    "timestamp",
    "sow_key",
    "correlation_id",
    "data",
)
"""The columns of the default schema, in order."""

SOW_COLUMNS: Final = ("topic", "sow_key", "bookmark", "timestamp", "data")
"""The default columns of a ``command=sow`` read (a record's key, the bookmark and server time
of its last update, its document)."""

SOW_PARSED_COLUMNS: Final = ("sow_key",)
"""The default metadata columns of a ``command=sow`` read with ``parse``."""

TEXT_TYPES: Final = frozenset({"json", "xml", "fix", "nvfix", "text", "string"})
"""Message types whose payload becomes a STRING column (every other type: BINARY)."""

REPLAY_OPTIONS: Final = "timestamp,bookmark_not_found=fail"
"""Subscription options of every replay: server times on messages, and a start bookmark the
log does not hold is an error (``invalid bookmark``) rather than a silent empty read."""

UNTIMED_REPLAY_OPTIONS: Final = "bookmark_not_found=fail"
""":data:`REPLAY_OPTIONS` without server times (for reads that need no ``timestamp``)."""

PROBE_OPTIONS: Final = REPLAY_OPTIONS + ",rate=100"
"""Subscription options of a planning probe (:func:`first_micros`, which wants one message):
with server times, paced by the server at 100 messages per second (AMPS' ``rate`` option of
bookmark replays, seed 000 "Delivery Rate Control"), so that it sends the first message at
once and almost nothing before the probe's early close reaches it. Unpaced, a server sends up
to its replay backlog (4 MB in the reference server) that the client then reads and drops:
about 1 s per probe of a 1M-message topic, 18 probes for a 2-partition read. Not for a range
starting at EPOCH (see :func:`first_micros`)."""

WAIT_MS: Final = 60_000
"""How long a planning or reading step waits for the server's next ack or message before it
raises :class:`~ampsclient.exceptions.TimeoutError` naming what it waited for."""

DEFAULT_STREAM_RECONNECT_MS: Final = 30_000
"""``reconnectTimeout`` of a streaming read (a batch read's default is 0: Spark retries the
task, and an interactive read should fail at once when no server is there)."""

_BACKOFF_FIRST_S: Final = 0.05
_BACKOFF_MAX_S: Final = 2.0

_EPOCH_DT: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US: Final = timedelta(microseconds=1)


class AMPSSparkError(AMPSError):
    """A Spark read or write against AMPS failed; the message carries the AMPS reason."""


class AMPSDataLossError(AMPSSparkError):
    """A read's start is no longer in the transaction log (its journal file was removed or
    archived away) and ``failOnDataLoss`` is true; the message names the range that is gone."""


class AMPSUnavailableError(AMPSSparkError):
    """No server of a read's URIs could be reached within ``reconnectTimeout``; the message
    names the URIs, what was waited for and each URI's last error."""


def describe(exc: BaseException) -> str:
    """``ExceptionType: message``, with the AMPS reason string when the server gave one."""
    text = str(exc) or type(exc).__name__
    reason = getattr(exc, "reason", "") if isinstance(exc, CommandError) else ""
    if reason and reason not in text:
        text = f"{reason}: {text}"
    return f"{type(exc).__name__}: {text}"


# ------------------------------------------------------------------------------------ times


def parse_micros(text: str) -> int:
    """Exact microseconds since the epoch of an AMPS timestamp (``YYYYmmddTHHMMSS[.f]Z``)."""
    parsed = parse_bookmark(text)
    if not isinstance(parsed, Timestamp):
        raise InvalidBookmarkError(f"not a timestamp: {text!r}", reason="invalid bookmark")
    return _dt_micros(parsed.when)


def _dt_micros(when: datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH_DT) // _ONE_US


def server_micros(ts: str) -> int:
    """The server's ``ts`` header (usually ``YYYYmmddTHHMMSS.ffffffZ``) in microseconds."""
    if len(ts) == 23 and ts[8] == "T" and ts[15] == ".":
        secs = calendar.timegm(
            (int(ts[0:4]), int(ts[4:6]), int(ts[6:8]), int(ts[9:11]), int(ts[11:13]),
             int(ts[13:15]), 0, 0, 0)
        )  # fmt: skip
        return secs * 1_000_000 + int(ts[16:22])
    return parse_micros(ts)


def format_micros(micros: int) -> str:
    """The AMPS timestamp bookmark of a time in microseconds since the epoch."""
    return format_timestamp(_EPOCH_DT + timedelta(microseconds=micros))


def micros_datetime(micros: int) -> datetime:
    """An aware UTC datetime."""
    return _EPOCH_DT + timedelta(microseconds=micros)


# -------------------------------------------------------------------------------- positions


@dataclass(frozen=True, slots=True)
class Position:
    """A message's place in the transaction log: its journal bookmark and server time."""

    bookmark: str
    micros: int

    def offset(self) -> dict[str, Any]:
        """The JSON-able streaming offset of this position."""
        return {"bookmark": self.bookmark, "timestamp": format_micros(self.micros)}


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a replay range.

    Attributes:
        text: the bookmark in wire form (EPOCH ``0``, NOW ``0|1|``, an id, a timestamp or a
            comma list).
        inclusive: ``[`` / ``]`` rather than ``(`` / ``)``.
        micros: the bound's server time when known (a timestamp, or the message an id names).
    """

    text: str
    inclusive: bool
    micros: int | None = None

    @property
    def is_now(self) -> bool:
        """The NOW point."""
        return self.text == NOW

    @property
    def is_timestamp(self) -> bool:
        """A timestamp bound (its time is :attr:`micros`)."""
        return isinstance(_parse_point(self.text), Timestamp)


def _parse_point(text: str) -> Epoch | Now | BookmarkId | Timestamp | BookmarkList:
    parsed = parse_bookmark(text)
    if isinstance(parsed, BookmarkRange):
        raise InvalidBookmarkError(f"a range is not a point: {text!r}", reason="invalid bookmark")
    return parsed


def _bound(point: Any, inclusive: bool) -> Bound:
    """A bound for a parsed point; ids and lists start *after* the message they name."""
    micros = _dt_micros(point.when) if isinstance(point, Timestamp) else None
    return Bound(str(point), inclusive, micros)


def range_text(start: Bound, end: Bound | None) -> str:
    """The wire form of the range from ``start`` to ``end`` (``None``: open end)."""
    opener = "[" if start.inclusive else "("
    if end is None:
        return f"{opener}{start.text}:)"
    return f"{opener}{start.text}:{end.text}{']' if end.inclusive else ')'}"


def point_from_option(value: str, what: str) -> Bound:
    """A ``begin``/``end`` option value: a bookmark, an AMPS timestamp, an ISO-8601 time,
    POSIX seconds, ``epoch`` or ``now``. The bound is inclusive (callers flip it for ends)."""
    text = value.strip()
    low = text.lower()
    if low in ("epoch", EPOCH):
        return Bound(EPOCH, True)
    if low == "now":
        return Bound(NOW, True)
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        micros = round(seconds * 1_000_000)
        return Bound(format_micros(micros), True, micros)
    try:
        point = _parse_point(text)
    except InvalidBookmarkError:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise AMPSSparkError(
                f"option {what}={value!r} is not a bookmark, a timestamp "
                "(YYYYmmddTHHMMSS[.ffffff][Z] or ISO-8601), POSIX seconds, 'epoch' or 'now'"
            ) from None
        micros = _dt_micros(when)
        return Bound(format_micros(micros), True, micros)
    return _bound(point, True)


def bounds_from_bookmark(text: str) -> tuple[Bound, Bound | None]:
    """``(start, end)`` of a ``bookmark`` option: a range, or a starting point (open end).

    A bookmark id (or list) as a starting point means *after* that message, as in a bookmark
    subscription; EPOCH and timestamps are inclusive. A NOW end is an open end.
    """
    parsed = parse_bookmark(text)
    if isinstance(parsed, BookmarkRange):
        start = _bound(parsed.start, parsed.start_inclusive)
        end_point = parsed.end
        if end_point is None or isinstance(end_point, Now):
            return start, None
        return start, _bound(end_point, parsed.end_inclusive)
    inclusive = isinstance(parsed, Epoch | Now | Timestamp)
    return _bound(parsed, inclusive), None


def offset_bounds(start: Mapping[str, Any], end: Mapping[str, Any]) -> tuple[Bound, Bound]:
    """The range ``(start:end]`` between two streaming offsets."""
    return _offset_bound(start, end=False), _offset_bound(end, end=True)


def _offset_bound(offset: Mapping[str, Any], *, end: bool) -> Bound:
    text = str(offset["bookmark"])
    ts = offset.get("timestamp")
    micros = parse_micros(str(ts)) if ts else None
    if end:
        return Bound(text, True, micros)
    point = _parse_point(text)
    # a consumed id: start after it; EPOCH / a starting time: include it
    return Bound(text, isinstance(point, Epoch | Timestamp), micros)


# ---------------------------------------------------------------------------------- options


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise AMPSSparkError(f"expected true or false, got {value!r}")


def _option_flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    try:
        return _flag(options.get(name.lower()), default)
    except AMPSSparkError as exc:
        raise AMPSSparkError(f"option {name}: {exc}") from None


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> Any:
    raw = options.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(float(raw))
    except ValueError:
        raise AMPSSparkError(f"option {name}={raw!r} is not a number") from None
    if value < minimum:
        raise AMPSSparkError(f"option {name} must be >= {minimum}, got {value}")
    return value


def normalize(options: Mapping[str, Any]) -> dict[str, str]:
    """Spark options as a plain dict with lower-case keys (Spark's own dict is
    case-insensitive; ``dict(options)`` would lower-case them silently anyway)."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


READ_OPTIONS: Final = (
    "uri",
    "topic",
    "filter",
    "bookmark",
    "begin",
    "end",
    "message_type",
    "parse",
    "schema",
    "metadataColumns",
    "numPartitions",
    "maxRowsPerBatch",
    "maxRecordsPerTrigger",
    "maxBytesPerTrigger",
    "fenceTopic",
    "mode",
    "connectTimeout",
    "reconnectTimeout",
    "readTimeout",
    "clientNamePrefix",
    "command",
    "topN",
    "orderBy",
    "asOf",
    "splits",
    "failOnDataLoss",
    "maxBacklog",
    "ackBatchSize",
)
"""The options a read accepts (batch and streaming)."""

DEFAULT_MAX_BACKLOG: Final = 1000
"""``maxBacklog`` of a ``command=queue`` read: the most messages leased at once (AMPS grants
at most the queue's ``MaxPerSubscriptionBacklog``)."""

DEFAULT_ACK_BATCH_SIZE: Final = 1000
"""``ackBatchSize`` of a ``command=queue`` read: bookmarks per acknowledgement frame."""

WRITE_OPTIONS: Final = (
    "uri",
    "topic",
    "message_type",
    "writeId",
    "clientNamePrefix",
    "connectTimeout",
    "flushTimeout",
)
"""The options a write accepts (batch and streaming)."""

_SPARK_OPTIONS: Final = frozenset({"path", "checkpointlocation", "messagetype"})
"""Options Spark itself adds (``load(path)``, a stream's checkpoint), and a spelling kept."""


def _refuse_unknown(options: Mapping[str, str], known: Sequence[str], what: str) -> None:
    """Refuse an option this source does not know (a misspelling would be silently ignored)."""
    if "leaseperiod" in options:
        raise AMPSSparkError(
            "option leasePeriod: AMPS does not let a subscriber choose its lease; a queue's "
            "lease period is the LeasePeriod of its <Queue> in the server's configuration "
            "(a micro-batch that outlasts it sees its messages delivered again)"
        )
    names = {k.lower() for k in known} | _SPARK_OPTIONS
    unknown = sorted(k for k in options if k not in names)
    if unknown:
        raise AMPSSparkError(
            f"unknown {what} option(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )


def _uris(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = options.get("uri") or options.get("path") or ""
    uris = tuple(u.strip() for u in raw.split(",") if u.strip())
    if not uris:
        raise AMPSSparkError(
            "option uri is required, e.g. tcp://host:9007/amps/json "
            "(several, comma-separated, to fail over)"
        )
    for uri in uris:
        try:
            parse_uri(uri)
        except AMPSError as exc:
            raise AMPSSparkError(f"option uri: {describe(exc)}") from None
    return uris


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The options of a batch or streaming read (see ``docs/spark.md``)."""

    uris: tuple[str, ...]
    topic: str
    filter: str | None
    start: Bound
    end: Bound | None
    message_type: str
    parse: str
    """``none``, ``json`` or ``msgpack``: how payloads are turned into columns."""
    payload_schema: str | None
    """The ``schema`` option: DDL of the payload's fields (with ``parse``)."""
    metadata_columns: tuple[str, ...] | None
    """The ``metadataColumns`` option (``None``: the default for the parse mode)."""
    num_partitions: int
    max_rows_per_batch: int | None
    fence_topic: str | None
    connect_timeout_ms: int
    client_name_prefix: str
    fail_fast: bool
    """``mode=FAILFAST``: a payload that does not fit the schema fails the task."""
    reconnect_timeout_ms: int = 0
    """``reconnectTimeout``: how long the planner and a reading task keep trying to reach a
    server (every URI in turn, with back-off) before failing; 0 tries each URI once."""
    command: str = "replay"
    """``replay`` (the transaction log), ``sow`` (a snapshot of the topic's SOW) or
    ``queue`` (a queue's messages, leased per micro-batch, streaming only)."""
    top_n: int | None = None
    order_by: str | None = None
    as_of: str | None = None
    """``asOf`` of a historical SOW query, as an AMPS timestamp."""
    splits: tuple[str, ...] | None = None
    """``splits``: content filters, one task each (ANDed with ``filter``)."""
    max_bytes_per_trigger: int | None = None
    """``maxBytesPerTrigger``: bytes of message data per micro-batch at most (one message
    always fits)."""
    read_timeout_ms: int = WAIT_MS
    """``readTimeout``: how long a reading task waits for the server's next message (or the
    end of its range) before it fails with a timeout naming the topic and range."""
    max_backlog: int = DEFAULT_MAX_BACKLOG
    """``maxBacklog`` (``command=queue``): the ``max_backlog`` of the queue subscription."""
    ack_batch_size: int = DEFAULT_ACK_BATCH_SIZE
    """``ackBatchSize`` (``command=queue``): bookmarks per acknowledgement at a commit."""
    fail_on_data_loss: bool = True
    """``failOnDataLoss``: a start the log no longer holds fails the read (``False``: the
    read continues from the oldest message the log still holds, with a warning)."""

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any], *, streaming: bool = False) -> ReadOptions:
        """Validate Spark's options (every value is a string)."""
        options = normalize(raw)
        _refuse_unknown(options, READ_OPTIONS, "read")
        uris = _uris(options)
        topic = options.get("topic", "").strip()
        if not topic:
            raise AMPSSparkError("option topic is required")
        bookmark = options.get("bookmark")
        begin = options.get("begin")
        end_opt = options.get("end")
        if bookmark and (begin or end_opt):
            raise AMPSSparkError("give either bookmark or begin/end, not both")
        try:
            if bookmark:
                start, end = bounds_from_bookmark(bookmark)
            else:
                start = point_from_option(begin, "begin") if begin else Bound(EPOCH, True)
                end = None
                if end_opt:
                    e = point_from_option(end_opt, "end")
                    end = None if e.is_now else Bound(e.text, False, e.micros)
        except InvalidBookmarkError as exc:
            raise AMPSSparkError(f"{describe(exc)}") from None
        if streaming and end is not None:
            raise AMPSSparkError(
                "a streaming read takes a starting point (bookmark or begin), not a range end"
            )
        mt = (options.get("message_type") or options.get("messagetype") or "").strip().lower()
        if not mt:
            mt = parse_uri(uris[0]).message_type.lower()
        parse = (options.get("parse") or "none").strip().lower()
        if parse == "auto":
            parse = mt if mt in ("json", "msgpack") else "none"
        if parse not in ("none", "json", "msgpack"):
            raise AMPSSparkError(f"option parse must be none, json, msgpack or auto, not {parse!r}")
        meta = options.get("metadatacolumns")
        metadata = None
        if meta is not None:
            metadata = tuple(c.strip() for c in meta.split(",") if c.strip())
            unknown = [c for c in metadata if c not in METADATA_COLUMNS]
            if unknown:
                raise AMPSSparkError(
                    f"option metadataColumns: unknown column(s) {unknown}; "
                    f"known: {', '.join(METADATA_COLUMNS)}"
                )
        sow = _sow_options(options, streaming=streaming)
        if sow.command == "sow" and metadata is None:
            metadata = SOW_COLUMNS if parse == "none" else SOW_PARSED_COLUMNS
        max_rows = _int(options, "maxRowsPerBatch", None, 1)
        max_records = _int(options, "maxRecordsPerTrigger", None, 1)
        if max_rows is not None and max_records is not None and max_rows != max_records:
            raise AMPSSparkError(
                "maxRecordsPerTrigger and maxRowsPerBatch are the same option (its Kafka "
                f"name and its old name): give one, not {max_records} and {max_rows}"
            )
        max_rows = max_rows if max_rows is not None else max_records
        fence_topic = options.get("fencetopic", DEFAULT_FENCE_TOPIC).strip() or None
        mode = (options.get("mode") or "permissive").strip().lower()
        if mode not in ("permissive", "failfast"):
            raise AMPSSparkError(f"option mode must be PERMISSIVE or FAILFAST, not {mode!r}")
        return cls(
            uris=uris,
            topic=topic,
            filter=(options.get("filter") or "").strip() or None,
            start=start,
            end=end,
            message_type=mt,
            parse=parse,
            payload_schema=(options.get("schema") or "").strip() or None,
            metadata_columns=metadata,
            num_partitions=_int(options, "numPartitions", 1, 1),
            max_rows_per_batch=max_rows,
            fence_topic=fence_topic,
            connect_timeout_ms=_int(options, "connectTimeout", 10_000, 1),
            client_name_prefix=(options.get("clientnameprefix") or "spark").strip(),
            fail_fast=mode == "failfast",
            reconnect_timeout_ms=_int(
                options,
                "reconnectTimeout",
                DEFAULT_STREAM_RECONNECT_MS if streaming else 0,
                0,
            ),
            command=sow.command,
            top_n=sow.top_n,
            order_by=sow.order_by,
            as_of=sow.as_of,
            splits=_splits(options),
            fail_on_data_loss=_option_flag(options, "failOnDataLoss", True),
            read_timeout_ms=_int(options, "readTimeout", WAIT_MS, 1),
            max_backlog=_int(options, "maxBacklog", DEFAULT_MAX_BACKLOG, 1),
            ack_batch_size=_int(options, "ackBatchSize", DEFAULT_ACK_BATCH_SIZE, 1),
            max_bytes_per_trigger=_int(options, "maxBytesPerTrigger", None, 1),
        )


@dataclass(frozen=True, slots=True)
class _SowOptions:
    command: str
    top_n: int | None
    order_by: str | None
    as_of: str | None


_REPLAY_ONLY: Final = (
    "bookmark",
    "begin",
    "end",
    "maxRowsPerBatch",
    "maxRecordsPerTrigger",
    "maxBytesPerTrigger",
    "fenceTopic",
)
_SOW_ONLY: Final = ("topN", "orderBy", "asOf")
_QUEUE_ONLY: Final = ("maxBacklog", "ackBatchSize")
_NOT_QUEUE: Final = ("bookmark", "begin", "end", "fenceTopic", "failOnDataLoss", "splits")


def _sow_options(options: Mapping[str, str], *, streaming: bool) -> _SowOptions:
    """``command`` (``replay`` or ``sow``) and the options only a ``sow`` read takes."""
    command = (options.get("command") or "replay").strip().lower()
    if command not in ("replay", "sow", "queue"):
        raise AMPSSparkError(
            f"option command must be replay (the default: the transaction log), sow (the "
            f"topic's current state) or queue (a queue's messages, acknowledged as "
            f"micro-batches commit), not {command!r}"
        )
    if command != "queue":
        given = [n for n in _QUEUE_ONLY if options.get(n.lower()) is not None]
        if given:
            raise AMPSSparkError(f"option(s) {', '.join(given)} need command=queue")
    else:
        given = [n for n in (*_NOT_QUEUE, *_SOW_ONLY) if options.get(n.lower()) is not None]
        if given:
            raise AMPSSparkError(
                f"option(s) {', '.join(given)} do not apply to command=queue (AMPS leases a "
                "queue's messages in its own order: there is no position to start from)"
            )
        return _SowOptions("queue", None, None, None)
    if command == "replay":
        given = [n for n in _SOW_ONLY if options.get(n.lower()) is not None]
        if given:
            raise AMPSSparkError(f"option(s) {', '.join(given)} need command=sow")
        return _SowOptions("replay", None, None, None)
    if streaming:
        raise AMPSSparkError(
            "command=sow is a batch read (a snapshot of the SOW): use spark.read, or a "
            "replay (the default command) to stream a topic's changes"
        )
    given = [n for n in _REPLAY_ONLY if options.get(n.lower()) is not None]
    if options.get("numpartitions") not in (None, "", "1"):
        given.append("numPartitions")
    if given:
        raise AMPSSparkError(
            f"option(s) {', '.join(given)} do not apply to command=sow (a SOW query takes "
            "filter, topN, orderBy, asOf; split a big SOW with splits)"
        )
    as_of = (options.get("asof") or "").strip()
    as_of_text: str | None = None
    if as_of:
        point = point_from_option(as_of, "asOf")
        if point.micros is None:
            raise AMPSSparkError(
                f"option asOf={as_of!r} must be a time (a historical SOW query is as of a "
                "timestamp: YYYYmmddTHHMMSS[.ffffff]Z, ISO-8601 or POSIX seconds)"
            )
        as_of_text = format_micros(point.micros)
    order_by = (options.get("orderby") or "").strip() or None
    return _SowOptions("sow", _int(options, "topN", None, 1), order_by, as_of_text)


def _splits(options: Mapping[str, str]) -> tuple[str, ...] | None:
    """``splits``: a JSON list of content filters, one task each."""
    raw = options.get("splits")
    if raw is None or raw.strip() == "":
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise AMPSSparkError(f"option splits is not JSON ({exc}): {raw!r}") from None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(f, str) and f.strip() for f in value)
    ):
        raise AMPSSparkError(
            "option splits must be a JSON list of content filters, e.g. "
            f"[\"/region = 'EU'\", \"/region = 'US'\"], not {raw!r}"
        )
    if options.get("numpartitions") not in (None, "", "1"):
        raise AMPSSparkError("give splits or numPartitions, not both")
    return tuple(f.strip() for f in value)


def lost_start(bookmark: str) -> str | None:
    """The bookmark id a range starts after (``(<id>:...``), or ``None`` for any other start
    (EPOCH, a time): only such a start can be gone from the log."""
    if not bookmark.startswith("("):
        return None
    colon = bookmark.find(":")
    point = bookmark[1:colon] if colon > 0 else ""
    if "|" not in point or "," in point:
        return None
    return point


def after_data_loss(
    opts: ReadOptions, bookmark: str, exc: BaseException, start_time: str | None = None
) -> str:
    """What to read when the range ``bookmark`` starts after a message the log no longer
    holds (``exc``: the server's ``invalid bookmark``): the same range from the oldest
    message the log holds (EPOCH), when ``failOnDataLoss`` is false.

    Raises:
        AMPSDataLossError: ``failOnDataLoss`` is true (the default), naming the range gone.
        BaseException: ``exc`` itself when the range does not start after a message id.
    """
    gone = lost_start(bookmark)
    if gone is None:
        raise exc
    when = f" (server time {start_time})" if start_time else ""
    colon = bookmark.find(":")
    rest = f"[{EPOCH}:{bookmark[colon + 1 :]}"
    if opts.fail_on_data_loss:
        raise AMPSDataLossError(
            f"data loss on {opts.topic!r}: the transaction log no longer holds message {gone}"
            f"{when}, where the range {bookmark} starts (its journal file was removed or "
            f"archived away): the messages after it up to the oldest one the log still holds "
            f"are gone ({describe(exc)}). Set failOnDataLoss=false to continue from the oldest "
            "available message."
        ) from exc
    log.warning(
        "data loss on %r: message %s%s is no longer in the transaction log; reading %s "
        "instead of %s (what the log held between them was skipped)",
        opts.topic,
        gone,
        when,
        rest,
        bookmark,
    )
    return rest


def split_filter(base: str | None, split: str | None) -> str | None:
    """The filter of one split: ``(base) AND (split)``."""
    if not split:
        return base
    if not base:
        return split
    return f"({base}) AND ({split})"


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The options of a batch or streaming write (see ``docs/spark.md``)."""

    uris: tuple[str, ...]
    topic: str | None
    message_type: str
    write_id: str | None
    client_name_prefix: str
    connect_timeout_ms: int
    flush_timeout_ms: int

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any]) -> WriteOptions:
        """Validate Spark's options."""
        options = normalize(raw)
        _refuse_unknown(options, WRITE_OPTIONS, "write")
        uris = _uris(options)
        mt = (options.get("message_type") or options.get("messagetype") or "").strip().lower()
        return cls(
            uris=uris,
            topic=(options.get("topic") or "").strip() or None,
            message_type=mt or parse_uri(uris[0]).message_type.lower(),
            write_id=(options.get("writeid") or "").strip() or None,
            client_name_prefix=(options.get("clientnameprefix") or "spark").strip(),
            connect_timeout_ms=_int(options, "connectTimeout", 10_000, 1),
            flush_timeout_ms=_int(options, "flushTimeout", 120_000, 1),
        )


# ----------------------------------------------------------------------------- connections


def client_name(prefix: str, role: str) -> str:
    """A unique client name for a reader or a planner (they never publish with sequences)."""
    return f"{prefix}-{role}-{uuid.uuid4().hex[:16]}"


class Reconnect:
    """The retry schedule of :func:`connect` (and the executor's connect): every URI in turn,
    then a back-off (doubling from 50 ms up to 2 s) while ``reconnectTimeout`` lasts.

    Args:
        uris: the servers, tried in order each round.
        timeout_ms: ``reconnectTimeout``; 0 makes one round only.
        what: what the caller connects for (named in the error).
    """

    def __init__(self, uris: Sequence[str], timeout_ms: int, what: str) -> None:
        self.uris = tuple(uris)
        self.timeout_ms = timeout_ms
        self.what = what
        self.deadline = time.monotonic() + timeout_ms / 1000.0
        self.errors: dict[str, str] = {}
        self.rounds = 0
        self._backoff = _BACKOFF_FIRST_S

    def failed(self, uri: str, exc: BaseException) -> None:
        """Note that connecting to ``uri`` failed."""
        redacted = parse_uri(uri).redacted()
        log.info("cannot connect to %s (%s): %s", redacted, self.what, describe(exc))
        self.errors[redacted] = describe(exc)

    def dropped(self, exc: BaseException) -> None:
        """Note that a connection dropped while it was in use."""
        log.info("the connection dropped (%s): %s", self.what, describe(exc))
        self.errors["connection"] = describe(exc)

    def pause(self) -> float:
        """After a round where no URI answered: the seconds to wait before the next round.

        Raises:
            AMPSUnavailableError: ``reconnectTimeout`` is over (or 0).
        """
        self.rounds += 1
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.error()
        delay = min(self._backoff, left)
        self._backoff = min(self._backoff * 2, _BACKOFF_MAX_S)
        log.warning(
            "no AMPS server answered (%s, round %d); retrying for %.1f s more",
            self.what,
            self.rounds,
            left,
        )
        return delay

    def error(self) -> AMPSUnavailableError:
        """The error once retrying is over, naming the URIs and each one's last error."""
        detail = "; ".join(f"{u}: {e}" for u, e in self.errors.items())
        if self.timeout_ms <= 0:
            return AMPSUnavailableError(
                f"could not connect to AMPS ({self.what}; reconnectTimeout=0, each URI tried "
                f"once): {detail}"
            )
        return AMPSUnavailableError(
            f"could not connect to AMPS ({self.what}) within reconnectTimeout="
            f"{self.timeout_ms} ms ({self.rounds} round(s) over {len(self.uris)} URI(s)): "
            f"{detail}"
        )


def connect(
    uris: Sequence[str], name: str, timeout_ms: int, *, schedule: Reconnect | None = None
) -> Client:
    """A logged-on :class:`Client` on the first of ``uris`` that answers, trying them all
    again (with back-off) while ``schedule`` lasts when none does (default: one round).

    Raises:
        AMPSUnavailableError: no server answered in time; the message lists each URI's error.
    """
    if schedule is None:
        schedule = Reconnect(uris, 0, "planning")
    while True:
        for uri in uris:
            client = Client(name)
            try:
                client.connect_and_logon(uri, timeout=timeout_ms)
            except Exception as exc:
                client.close()
                schedule.failed(uri, exc)
                continue
            return client
        time.sleep(schedule.pause())


def _replay_command(topic: str, filter: str | None, bookmark: str, options: str) -> Command:
    """The subscription of a bounded replay that ends with a ``completed`` ack."""
    return (
        Command("subscribe")
        .set_topic(topic)
        .set_filter(filter)
        .set_bookmark(bookmark)
        .set_options(options)
        .add_ack_type("completed")
    )


def replay(
    client: Client,
    topic: str,
    filter: str | None,
    bookmark: str,
    *,
    max_depth: int = 20_000,
    options: str = REPLAY_OPTIONS,
    wait_ms: int = WAIT_MS,
) -> Generator[Message, None, None]:
    """The messages of a bounded bookmark replay, up to the server's ``completed`` ack
    (with server times unless ``options`` is :data:`UNTIMED_REPLAY_OPTIONS`).

    Closing the generator early unsubscribes.

    Raises:
        CommandError: the server refused the subscription (``invalid bookmark``...).
        DisconnectedError: the connection dropped before the replay completed.
        TimeoutError: the server sent nothing for ``wait_ms`` (the subscription's ack, or
            the next message or ack of the replay).
    """
    cmd = _replay_command(topic, filter, bookmark, options).set_timeout(wait_ms)
    what = f"the replay of {topic!r} {bookmark}"
    try:
        stream = client.execute(cmd)
    except TimeoutError as exc:
        raise TimeoutError(f"no processed ack within {wait_ms} ms for {what}") from exc
    stream.max_depth(max_depth)
    try:
        for message in stream.timeout(wait_ms):
            if message is None:
                raise TimeoutError(f"nothing arrived within {wait_ms} ms during {what}")
            if message.command == "ack":
                if message.status == "failure":
                    raise error_for_reason(message.reason, ack=message)
                if message.ack_type & AckType.COMPLETED:
                    return
                continue
            yield message
        raise AMPSSparkError(f"the replay of {topic!r} {bookmark} ended before it completed")
    finally:
        stream.close()


def message_micros(message: Message) -> int:
    """The server time of a replayed message (subscribed with the ``timestamp`` option)."""
    ts = message.timestamp
    if ts is None:
        raise AMPSSparkError("the server sent a replayed message without a timestamp")
    return server_micros(ts)


def first_micros(client: Client, topic: str, filter: str | None, bookmark: str) -> int | None:
    """The server time of the first message of a replay range (``None``: the range is empty).

    The range is replayed paced (:data:`PROBE_OPTIONS`) and closed after its first message.
    A range that starts at EPOCH is replayed unpaced: the server reads it from the log's
    first record, and a paced replay is read record by record (the reference server decodes
    every record of the other topics before this one's first: seconds per million), while an
    unpaced one skips them in its block path; what it sends before the early close is read
    and dropped once.
    """
    epoch = bookmark[1:].startswith(f"{EPOCH}:")
    options = REPLAY_OPTIONS if epoch else PROBE_OPTIONS
    messages = replay(client, topic, filter, bookmark, max_depth=16, options=options)
    try:
        first = next(messages, None)
    finally:
        messages.close()
    if first is None:
        return None
    if not first.bookmark:
        raise AMPSSparkError("the server sent a replayed message without a bookmark")
    return message_micros(first)


def bookmark_micros(client: Client, topic: str, bm: str) -> int | None:
    """The server time of the message ``bm`` of ``topic`` (``None``: not in the log)."""
    messages = replay(client, topic, None, f"[{bm}:{bm}]", max_depth=16)
    try:
        for message in messages:
            return message_micros(message)
        return None
    finally:
        messages.close()


def last_micros(
    client: Client,
    topic: str,
    filter: str | None,
    end: Bound,
    lo: int,
    hi: int,
    steps: int,
) -> int:
    """Narrow down the time of the last message before ``end`` by bisection.

    ``lo`` is the time of a message in the range, ``hi`` a time at or after the last one
    (the time of a fence, or of a timestamp end). Each probe asks for the first message at or
    after the midpoint: none moves ``hi`` down, one moves ``lo`` up to its time. Stops after
    ``steps`` probes or when the window is under 1/64 of the original span.

    Returns:
        A time at or after the last message, within the final window.
    """
    resolution = max(1, (hi - lo) // 64)
    for _ in range(steps):
        if hi - lo <= resolution:
            break
        mid = (lo + hi) // 2
        found = first_micros(
            client, topic, filter, range_text(Bound(format_micros(mid), True), end)
        )
        if found is None:
            hi = mid
        else:
            lo = max(found, mid)
    return hi


@dataclass
class Backlog:
    """What a :func:`scan` saw after the position it returned: the messages (and the bytes of
    their data) between it and the log's end."""

    messages: int = 0
    size: int = 0
    """Their bytes."""
    last: bytes | None = None
    """The payload of the last message of the range (the log's end, for this filter)."""

    @property
    def end_bookmark(self) -> str | None:
        """The bookmark of the range's last message (``None``: nothing past the caps)."""
        return None if self.last is None else Message(self.last).bookmark


class ReplayEnd:
    """How a counting replay ends: its completed ack, a failed ack (``error``: the server's
    reason), a dropped connection, or its handler giving up (:meth:`fail`)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        """Why the replay ended badly (raised by :func:`counting_replay`)."""
        self.done = threading.Event()
        """Set when the replay ended, well or not."""

    def on_ack(self, message: Message, on_completed: Callable[[], None] | None = None) -> None:
        """An ack of the replay: a failure ends it with the server's reason; the completed
        ack ends it (``on_completed`` runs first, on the client's thread)."""
        if message.status == "failure":
            self.fail(error_for_reason(message.reason, ack=message))
        elif message.ack_type & AckType.COMPLETED:
            if on_completed is not None:
                on_completed()
            self.done.set()

    def fail(self, error: BaseException) -> None:
        """End the replay with ``error``."""
        self.error = error
        self.done.set()

    def on_state(self, event: ConnectionEvent) -> None:
        """A connection listener: a drop before the end fails the replay."""
        if event.state is ConnectionState.DISCONNECTED and not self.done.is_set():
            self.fail(DisconnectedError(f"the connection dropped: {event.cause or 'closed'}"))


def counting_replay(
    client: Client,
    handler: Callable[[Message], None],
    end: ReplayEnd,
    *,
    topic: str,
    filter: str | None,
    bookmark: str,
    options: str,
    wait_ms: int,
) -> None:
    """Replay the range ``bookmark`` of ``topic`` (with a completed ack) through ``handler``,
    on the client's thread, until ``end`` is done; then unsubscribe.

    Raises:
        CommandError: the server refused the replay (``invalid bookmark``: its start is gone).
        DisconnectedError: the connection dropped before the replay ended.
        TimeoutError: the replay did not end within ``wait_ms``.
        Exception: whatever ended it through :meth:`ReplayEnd.fail`.
    """
    cmd = _replay_command(topic, filter, bookmark, options)
    client.add_connection_state_listener(end.on_state)
    try:
        sub_id = client.execute_async(cmd, handler)
        try:
            if not end.done.wait(wait_ms / 1000.0):
                raise TimeoutError(
                    f"counting the replay of {topic!r} {bookmark} did not end within {wait_ms} ms"
                )
        finally:
            with contextlib.suppress(AMPSError):
                client.unsubscribe(sub_id)
    finally:
        client.remove_connection_state_listener(end.on_state)
    if end.error is not None:
        raise end.error


class _Counter:
    """Counts a replay's deliveries on the client's thread, keeping the last counted one's
    payload; past a row or byte cap it only counts the rest (when asked for a backlog)."""

    def __init__(self, limit: int | None, max_bytes: int | None, backlog: Backlog | None) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.backlog = backlog
        self.sizing = max_bytes is not None or backlog is not None
        self.count = 0
        self.bytes = 0
        self.full = False
        self.last: bytes | None = None
        self.end = ReplayEnd()

    def _stop(self) -> None:
        self.full = True
        if self.backlog is None:
            self.end.done.set()

    def on_message(self, message: Message) -> None:
        raw = message.raw_payload
        if raw.startswith(b'{"c":"p"') or message.command == "publish":
            size = len(raw) - body_offset(raw) if self.sizing else 0
            if not self.full and (
                self.max_bytes is not None and self.count and self.bytes + size > self.max_bytes
            ):
                self._stop()  # this one would go over the byte cap (one message always fits)
            if self.full:
                if self.backlog is not None:
                    self.backlog.messages += 1
                    self.backlog.size += size
                    self.backlog.last = raw
                return
            self.count += 1
            self.bytes += size
            self.last = raw
            if self.count == self.limit or (
                self.max_bytes is not None and self.bytes >= self.max_bytes
            ):
                self._stop()
        elif message.command == "ack":
            self.end.on_ack(message)


def scan(
    client: Client,
    topic: str,
    filter: str | None,
    bookmark: str,
    limit: int | None,
    *,
    max_bytes: int | None = None,
    backlog: Backlog | None = None,
) -> tuple[int, Position | None]:
    """Count a replay range's messages, stopping after ``limit`` messages or ``max_bytes``
    bytes of message data (the message that would go over is left out, except a first one,
    which always fits); returns the
    count and the position of the last message counted (``None`` when there was none).

    With ``backlog``, the replay goes on to the range's end and the messages past the caps
    are counted into it (what is left behind).

    The messages are counted by a handler on the client's thread without decoding them, and
    replayed without server times (cheaper for the server); one more probe asks for the time
    of the last one.
    """
    counter = _Counter(limit, max_bytes, backlog)
    counting_replay(
        client, counter.on_message, counter.end, topic=topic, filter=filter,
        bookmark=bookmark, options=UNTIMED_REPLAY_OPTIONS, wait_ms=WAIT_MS,
    )  # fmt: skip
    if counter.last is None:
        return 0, None
    bm = Message(counter.last).bookmark
    if not bm:
        raise AMPSSparkError("the server sent a replayed message without a bookmark")
    micros = bookmark_micros(client, topic, bm)
    if micros is None:
        raise AMPSSparkError(f"message {bm} of {topic!r} left the log while it was planned")
    return counter.count, Position(bm, micros)


def fence(client: Client, topic: str, timeout_ms: int = 30_000) -> Position:
    """Publish a fence message to ``topic`` and return its position in the log.

    The fence is recorded after every message the server recorded before it, and it comes back
    through a bookmark subscription (which delivers only durable messages) so everything up to
    it is durable too: a range ending at the fence is fixed.

    Raises:
        AMPSSparkError: the fence did not come back in time (is ``topic`` recorded by the
            transaction log?).
    """
    token = uuid.uuid4().hex
    cmd = Command("subscribe").set_topic(topic).set_bookmark(NOW).set_options("timestamp")
    try:
        stream = client.execute(cmd)
    except CommandError as exc:
        raise AMPSSparkError(
            f"cannot place a fence on {topic!r} ({describe(exc)}): set option fenceTopic to a "
            "topic the transaction log records, or to '' to find the log's end by a replay"
        ) from exc
    try:
        mt = client.async_client.message_type
        body: Any = {"ampsclient_spark_fence": token} if mt in ("json", "msgpack") else token
        client.publish(topic, body, correlation_id=token)
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            left = deadline - time.monotonic()
            message = stream.get(max(left, 0.0)) if left > 0 else None
            if message is None:
                raise AMPSSparkError(
                    f"the fence published to {topic!r} did not come back within "
                    f"{timeout_ms} ms: is that topic recorded by the transaction log? "
                    "(set option fenceTopic to a recorded topic, or to '' to scan instead)"
                )
            if message.command != "ack" and message.correlation_id == token:
                bm = message.bookmark
                if not bm:
                    raise AMPSSparkError("the fence came back without a bookmark")
                return Position(bm, message_micros(message))
    finally:
        stream.close()


# -------------------------------------------------------------------------------- planning


def plan_ranges(
    start: Bound, end: Bound, partitions: int, lo: int | None, hi: int | None
) -> list[str]:
    """Split the range ``start``..``end`` into up to ``partitions`` disjoint sub-ranges by
    server time; together they replay exactly what the whole range replays.

    ``lo`` is a time at or before the first message of the range (at or after the start
    message), ``hi`` the time of the end. The inner boundaries ``t_1 < ... < t_{n-1}`` go
    between them, each sub-range being ``[t_k:t_{k+1})``, the first keeping the original start
    and the last the original end. The server resolves a boundary's text the same way for both
    neighbours, so no message is in two sub-ranges or in none; boundaries are kept at least
    2 µs after ``lo`` and 1 µs before ``hi`` so that the server's float rounding of a
    timestamp cannot move one past the range's ends.

    Returns:
        Range texts; a single one when the range cannot be split (unknown or too short span).
    """
    whole = range_text(start, end)
    if partitions <= 1 or lo is None or hi is None or hi - lo < 4:
        return [whole]
    cuts: list[int] = []
    for k in range(1, partitions):
        cut = lo + (hi - lo) * k // partitions
        if lo + 2 <= cut <= hi - 1 and (not cuts or cut > cuts[-1]):
            cuts.append(cut)
    if not cuts:
        return [whole]
    texts = [format_micros(c) for c in cuts]
    starts = [start] + [Bound(t, True, c) for t, c in zip(texts, cuts, strict=True)]
    ends = [Bound(t, False, c) for t, c in zip(texts, cuts, strict=True)] + [end]
    return [range_text(s, e) for s, e in zip(starts, ends, strict=True)]
