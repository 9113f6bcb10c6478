"""The transaction log as the broker uses it: what is recorded, and bookmark replays.

:class:`TxLog` decides which (message type, topic) pairs are recorded and owns the
:class:`~ampsclient_server_stub.engine.journal.Journal`. :class:`Replay` is one bookmark
subscription's cursor over the journal (seed 000, "Replaying Messages with Bookmark
Subscription"):

* it delivers, in log order, the records after its starting point that match the
  subscription's topic and filter and that are durable (or merely written, with ``live``);
* it is *paced by the subscriber*: it reads a bounded batch, and stops while the session has
  more than :data:`REPLAY_BACKLOG` bytes waiting (the broker pumps it again later), so a
  million-message replay never blows up the server's memory;
* once it reaches the end of the log it sends the ``completed`` ack (if requested) and keeps
  following new durable records: replay then live, with no gap and no duplicate, because
  live delivery *is* the same cursor moving on;
* ranges stop it (and send ``completed``) at their end, not at the catch-up; ``rate=`` paces
  it; ``pause`` holds it; subscriptions resumed together at the same point share one cursor (a
  leader and its ``members``: each record is read once and sent once, with every matching
  ``sids``); a pin keeps the journal files it still needs from being pruned;
* with ``conflation=``, matching records are held per key on the journal's timeline and
  delivered under the first record's bookmark (:mod:`.conflation`); ``persisted`` acks come from
  the broker's periodic timer, to replays that delivered something since their last one.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar
from zlib import crc32 as _crc32

import msgpack

from ampsclient.protocol.bookmarks import (
    BookmarkId,
    BookmarkList,
    BookmarkRange,
    Epoch,
    Now,
    Timestamp,
    parse_bookmark,
)
from ampsclient.protocol.header import escape
from ampsclient.protocol.options import parse_duration, parse_rate

from .. import accel
from ..errors import RequestError
from .filters import Predicate, compile_filter
from .journal import Journal, JournalPin, JournalRecord, RawBlock
from .journal_format import FRAME_OVERHEAD, MIN_BODY, CorruptJournalError, decode_records
from .payload import decode
from .topics import TopicMatcher, compile_topic
from .wire import format_micros, replay_frames

if TYPE_CHECKING:  # pragma: no cover
    from .conflation import ReplayConflation

__all__ = [
    "REPLAY_BACKLOG",
    "REPLAY_BATCH",
    "REPLAY_FIRST_STEP",
    "Replay",
    "ReplayError",
    "ReplaySubscription",
    "TxLog",
]

logger = logging.getLogger(__name__)

_packb = msgpack.Packer(use_bin_type=True).pack
_replay_frames: Final = accel.replay_frames or replay_frames
"""Frames of the usual records of a replay block (C, or its Python twin)."""
_HEAD: Final = struct.Struct("<IIQQQQ")  # a record's frame header and fixed fields

REPLAY_BATCH: Final = 2000
"""Records read from the journal per pump step."""

REPLAY_FIRST_STEP: Final = 32
"""Records a replay's first pump step delivers before yielding (quick first message)."""

REPLAY_BACKLOG: Final = 4 * 1024 * 1024
"""A replay pauses while its session has more than this many bytes waiting to be written."""

PERSISTED_ACK_INTERVAL: Final = 1.0
"""Default seconds between persisted acks to a bookmark subscription (sent only to those that
were delivered something since their last one)."""


class ReplayError(RequestError):
    """A bookmark subscription that cannot start; ``reason`` is the AMPS reason string."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class TxLog:
    """Which topics are recorded, and the journal they go to.

    Args:
        journal: the open journal.
        topics: ``(name or regex, message type or None)`` pairs to record; ``None`` records
            every topic (the zero-config default).
    """

    def __init__(
        self,
        journal: Journal,
        topics: Iterable[tuple[str, str | None]] | None = None,
        *,
        filters: Iterable[tuple[str, str | None, str]] = (),
    ) -> None:
        self.journal = journal
        self._rules: list[tuple[TopicMatcher, str | None]] | None = (
            None
            if topics is None
            else [(compile_topic(name), mt.lower() if mt else None) for name, mt in topics]
        )
        self._cache: dict[tuple[str, str], bool] = {}
        self._filtered: list[tuple[TopicMatcher, str | None, Predicate]] = [
            (compile_topic(name), mt.lower() if mt else None, compile_filter(expression))
            for name, mt, expression in filters
        ]
        """``<Topic>`` rules with a ``<Filter>``: only the messages matching it are recorded."""
        self._filter_cache: dict[tuple[str, str], tuple[Predicate, ...]] = {}

    @property
    def records_everything(self) -> bool:
        """True when every topic is recorded."""
        return self._rules is None

    def records(self, mt: str, topic: str) -> bool:
        """Is ``topic`` of message type ``mt`` recorded?"""
        key = (mt, topic)
        hit = self._cache.get(key)
        if hit is None:
            if self._rules is None:
                hit = True
            else:
                hit = any(
                    (rule_mt is None or rule_mt == mt) and matcher.matches(topic)
                    for matcher, rule_mt in self._rules
                )
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def filters_for(self, mt: str, topic: str) -> tuple[Predicate, ...]:
        """The ``<Filter>`` predicates of the filtered rules that match ``topic`` of type ``mt``
        (empty: no filtered rule applies)."""
        if not self._filtered:
            return ()
        key = (mt, topic)
        found = self._filter_cache.get(key)
        if found is None:
            found = tuple(
                pred
                for matcher, rule_mt, pred in self._filtered
                if (rule_mt is None or rule_mt == mt) and matcher.matches(topic)
            )
            if len(self._filter_cache) > 100_000:
                self._filter_cache.clear()
            self._filter_cache[key] = found
        return found

    def records_message(self, mt: str, topic: str, doc: Callable[[], Any]) -> bool:
        """Is this message recorded: its topic unconditionally (:meth:`records`), or a
        filtered rule's ``<Filter>`` matches it (``doc()`` decodes the payload, called only
        when a filter has to be evaluated)?"""
        if self.records(mt, topic):
            return True
        preds = self.filters_for(mt, topic)
        if not preds:
            return False
        value = doc()
        if value is None:
            return False
        return any(_matches(pred, value) for pred in preds)

    def covers(self, mt: str, matcher: TopicMatcher) -> bool:
        """Can a subscription to ``matcher`` be served from the log at all?"""
        if self._rules is None:
            return True
        if not matcher.is_regex:
            return self.records(mt, matcher.topic) or bool(self.filters_for(mt, matcher.topic))
        rules = [rule_mt for _, rule_mt in self._rules]
        rules += [rule_mt for _, rule_mt, _ in self._filtered]
        return any(rule_mt is None or rule_mt == mt for rule_mt in rules)


def _matches(pred: Predicate, doc: Any) -> bool:
    try:
        return bool(pred(doc))
    except Exception:  # a filter that cannot evaluate this document does not match it
        return False


@dataclass(slots=True)
class _Rate:
    kind: str  # "msgs", "bytes", "multiple"
    value: float
    max_gap: float | None
    started: float = 0.0
    sent: float = 0.0
    first_ts: int | None = None


_UNIX_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def _micros(ts: Timestamp) -> int:
    # exact integer arithmetic: float seconds lose the last microsecond of a current time
    return (ts.when - _UNIX_EPOCH) // _MICROSECOND


def _future(point: object, inclusive: bool) -> int | None:
    """For a starting timestamp later than now: the first receive time (microseconds) the
    replay may deliver; ``None`` otherwise."""
    if not isinstance(point, Timestamp):
        return None
    start = _micros(point) + (0 if inclusive else 1)
    return start if start > int(time.time() * 1_000_000) else None


class ReplaySubscription(Protocol):
    """What a replay reads of its subscription (the broker's ``Subscription`` fits)."""

    @property
    def options(self) -> Mapping[str, str]:
        """The subscription's options."""

    @property
    def message_type(self) -> str:
        """The subscription's message type."""

    @property
    def matcher(self) -> TopicMatcher:
        """The subscription's topic."""

    @property
    def predicate(self) -> Callable[[Any], bool] | None:
        """The subscription's filter."""

    @property
    def sid(self) -> str:
        """The subscription id, escaped for a header string."""

    @property
    def timestamp(self) -> bool:
        """Whether deliveries carry ``ts``."""


S = TypeVar("S", bound=ReplaySubscription)


class Replay(Generic[S]):
    """One bookmark subscription's position in the journal.

    Created by :meth:`start`; the broker calls :meth:`pump` whenever there may be something
    to deliver (after the subscribe, after each durable advance, when the session drained).
    """

    __slots__ = (
        "_shape",
        "acked_bm",
        "cap",
        "completed_sent",
        "conflation",
        "delivered",
        "done",
        "end_inclusive",
        "end_index",
        "end_time",
        "end_time_inclusive",
        "end_timer",
        "heads",
        "journal",
        "last_bm",
        "leader",
        "live",
        "members",
        "not_before",
        "pin",
        "position",
        "rate",
        "send_completed",
        "send_persisted",
        "stepped",
        "sub",
        "timer",
        "want_completed_cid",
    )

    def __init__(self, journal: Journal, sub: S, position: int) -> None:
        self.journal = journal
        self.sub = sub
        self._shape: tuple[str, str, bytes, bytes] | None = None
        """(topic, type, body prefix, body suffix) of the usual record (:meth:`block_frames`)."""
        self.heads: dict[tuple[str, int, str | None], bytes] = {}
        """Frame prefixes up to the bookmark's sequence, per (topic, publisher, sids)."""
        self.position = max(position, 1)
        """The next journal index to look at."""
        self.end_index: int | None = None
        self.end_inclusive = True
        self.end_time: int | None = None
        self.end_time_inclusive = True
        self.live = "live" in sub.options
        self.completed_sent = False
        self.send_completed: Callable[[], None] | None = None
        self.send_persisted = False
        self.want_completed_cid: str | None = None
        self.done = False
        self.last_bm: str | None = None
        """Bookmark of the last record looked at (delivered or not)."""
        self.stepped = False
        """A pump has run (the first one is short: :data:`REPLAY_FIRST_STEP`)."""
        self.delivered = False
        """Something was delivered since the last persisted ack."""
        self.acked_bm: str | None = None
        """Bookmark of the last persisted ack sent to this subscription."""
        self.conflation: ReplayConflation | None = None
        """Conflation holds (options ``conflation``, ``conflation_key``)."""
        self.pin: JournalPin | None = journal.pin(self.position)
        self.rate: _Rate | None = None
        self.timer: Any = None
        """Pacing timer (rate, backlog, budget): no pumping until it fires."""
        self.cap: Callable[[], int] | None = None
        """Replication (``fully_durable``): a further bound on :meth:`limit`."""
        self.end_timer: Any = None
        """For a range ending at a future time: wakes the replay up at that time."""
        self.leader: Replay[S] | None = None
        """Set while this replay is a member of a group: the group's leader reads for it."""
        self.members: list[Replay[S]] = []
        """For a group's leader: the other subscriptions it delivers to (resumed together)."""
        self.not_before: int | None = None
        """A start time still in the future (microseconds): nothing is delivered until then,
        and the replay then starts at the first record received at or after it."""

    # ------------------------------------------------------------------ starting

    @classmethod
    def start(cls, journal: Journal, sub: S, bookmark: str) -> Replay[S]:
        """Resolve ``bookmark`` to a starting position (and an end for ranges).

        Raises:
            ReplayError: ``invalid bookmark`` for garbage or (with
                ``bookmark_not_found=fail``) a bookmark the log does not hold.
        """
        try:
            parsed = parse_bookmark(bookmark)
        except Exception as exc:  # InvalidBookmarkError and friends
            raise ReplayError("invalid bookmark", str(exc)) from None
        not_found = sub.options.get("bookmark_not_found", "now").lower()
        if not_found not in ("now", "epoch", "fail"):
            raise ReplayError("invalid options", f"bookmark_not_found={not_found}")
        resolver = _Resolver(journal, not_found)
        if "live" in sub.options and any(o in sub.options for o in ("rate", "pause", "resume")):
            raise ReplayError(
                "invalid options", "the live option is not supported with rate, pause or resume"
            )
        if isinstance(parsed, BookmarkRange):
            start = resolver.start(parsed.start, inclusive=parsed.start_inclusive)
            replay = cls(journal, sub, start)
            replay.not_before = _future(parsed.start, parsed.start_inclusive)
            end = parsed.end
            if isinstance(end, Timestamp):
                replay.end_time = _micros(end)
                replay.end_time_inclusive = parsed.end_inclusive
            elif isinstance(end, BookmarkId):
                found = journal.find_bookmark(end.publisher_id, end.sequence)
                replay.end_index = found if found is not None else journal.last_index
                replay.end_inclusive = parsed.end_inclusive if found is not None else True
            elif isinstance(end, BookmarkList):
                # the latest of the list ends the range; each item resolved with the closer
                ends = [resolver.end_point(p, inclusive=parsed.end_inclusive) for p in end.items]
                replay.end_index = max(ends) if ends else journal.last_index
            elif isinstance(end, Now):
                replay.end_index = journal.last_index
            elif isinstance(end, Epoch):
                replay.end_index = 0
        else:
            # after a bookmark; at or after a timestamp ("begins replay at the closest point")
            start = resolver.start(parsed, inclusive=False, ts_inclusive=True)
            replay = cls(journal, sub, start)
            replay.not_before = _future(parsed, True)
        rate = sub.options.get("rate")
        if rate:
            try:
                kind, value = parse_rate(rate)
                gap_text = sub.options.get("rate_max_gap")
                gap = parse_duration(gap_text, default_unit="ms") if gap_text else None
            except Exception as exc:
                raise ReplayError("invalid options", f"rate={rate}: {exc}") from None
            if value <= 0:
                raise ReplayError("invalid options", f"rate={rate}")
            replay.rate = _Rate(kind, value, gap)
        return replay

    # ------------------------------------------------------------------ pumping

    def limit(self) -> int:
        """The highest index this replay may deliver now (durable, or written with live)."""
        journal = self.journal
        limit = journal.last_index if self.live else journal.durable_index
        cap = self.cap
        return limit if cap is None else min(limit, cap())

    def matches(self, record: JournalRecord) -> bool:
        """Does ``record`` belong to this subscription?"""
        return self.row_matches(record.command, record.topic, record.payload, record.fields)

    def row_matches(
        self, command: str, topic: str, payload: bytes, fields: Mapping[str, str | int]
    ) -> bool:
        """:meth:`matches` for the parts of a record (a :meth:`Journal.read_rows` row)."""
        if command == "sow_delete":
            return False
        sub = self.sub
        mt = fields.get("mt", "json")
        if mt != sub.message_type:
            return False
        matcher = sub.matcher
        if matcher.pattern is None:
            if matcher.topic != topic:
                return False
        elif not matcher.matches(topic):
            return False
        pred = sub.predicate
        if pred is not None:
            doc = decode(str(mt), payload)
            if doc is None or not pred(doc):
                return False
        return True

    def frame(self, record: JournalRecord, sids: str | None = None) -> bytes:
        """The delivery of ``record`` to this subscription (or to ``sids``, for a group)."""
        return self.row_frame(
            record.publisher_id,
            record.sequence,
            record.timestamp,
            record.topic,
            record.payload,
            record.fields,
            sids,
        )

    def _head(self, topic: str, publisher_id: int, sids: str | None) -> bytes:
        """The frame prefix up to the bookmark's sequence (cached in :attr:`heads`)."""
        head = (
            '{"c":"p","t":"'
            + escape(topic)
            + '","sids":"'
            + (self.sub.sid if sids is None else sids)
            + '","bm":"'
            + str(publisher_id)
            + "|"
        ).encode()
        if len(self.heads) >= 1024:
            self.heads.clear()
        self.heads[(topic, publisher_id, sids)] = head
        return head

    def row_frame(
        self,
        publisher_id: int,
        sequence: int,
        timestamp: int,
        topic: str,
        payload: bytes,
        fields: Mapping[str, str | int],
        sids: str | None = None,
    ) -> bytes:
        """:meth:`frame` for the parts of a record: ``{"c":"p","t":..,"sids":..,"bm":..}``
        then ``k``, ``x`` and (option ``timestamp``) ``ts``, then the payload. The constant
        prefix is cached per (topic, publisher, sids)."""
        head = self.heads.get((topic, publisher_id, sids)) or self._head(topic, publisher_id, sids)
        if len(fields) == 1 and "mt" in fields and not self.sub.timestamp:
            return head + b'%d|"}' % sequence + payload  # the common case: nothing else
        tail = ""
        k = fields.get("k")
        if k is not None:
            tail += ',"k":"' + escape(str(k)) + '"'
        x = fields.get("x")
        if x is not None:
            tail += ',"x":"' + escape(str(x)) + '"'
        if self.sub.timestamp:
            tail += ',"ts":"' + format_micros(timestamp) + '"'
        return head + b'%d|"' % sequence + tail.encode() + b"}" + payload

    def block_frames(self, block: RawBlock, out: list[bytes]) -> tuple[int, int, int]:
        """Frames for a plain subscription (exact topic, no filter, no rate) from a
        :meth:`Journal.read_blocks` block, appended to ``out`` (with server times under the
        ``timestamp`` option).

        Every record is verified as :func:`.journal_format.decode_records` does (frame, CRC,
        index). Records of the usual shape (a ``p`` to the wanted topic whose only field is
        the wanted message type) become their frames straight from the bytes, many at a time,
        without decoding the msgpack body (:func:`.wire.replay_frames`, or the C speedups');
        any other record is decoded and judged as :meth:`row_matches`. A range ending at a
        time stops at the first record received after it (as :meth:`past_end_at`).

        Returns:
            ``(publisher_id, sequence)`` of the last record taken, and the index of the
            record past the range's end time where it stopped (-1: none).
        """
        data, base, first_index, count, path = block
        sub = self.sub
        want_topic = sub.matcher.topic
        want_mt = sub.message_type
        shape = self._shape
        if shape is None or shape[0] != want_topic or shape[1] != want_mt:
            shape = self._shape = (
                want_topic,
                want_mt,
                b"\x94\xa1p" + _packb(want_topic) + b"\xc4",
                _packb({"mt": want_mt}),
            )
        prefix = shape[2]
        suffix = shape[3]
        stamp = sub.timestamp
        end_t = self.end_time
        until = -1 if end_t is None else end_t if self.end_time_inclusive else end_t - 1
        head_unpack = _HEAD.unpack_from
        n = len(data)
        pos = 0
        pid = seq = 0
        head_pid = -1
        head = b""
        expected = first_index
        stop = first_index + count
        while expected < stop:
            if pos + FRAME_OVERHEAD <= n:  # the usual records, many at a time (C or twin)
                rpid = head_unpack(data, pos)[4]
                if rpid != head_pid:
                    head_pid = rpid
                    head = self.heads.get((want_topic, rpid, None)) or self._head(
                        want_topic, rpid, None
                    )
                pos, at, last = _replay_frames(
                    data, pos, expected, stop, prefix, suffix, head, rpid, out, stamp, until
                )
                if at > expected:  # framed (last >= 0), or only skipped other topics
                    expected = at
                    if last >= 0:
                        pid, seq = rpid, last
                    continue
            if pos + FRAME_OVERHEAD > n:
                raise CorruptJournalError(path, base + pos, "record cut short")
            length, crc, index, ts, rpid, rseq = head_unpack(data, pos)
            end = pos + 8 + length
            if length < MIN_BODY or end > n:
                raise CorruptJournalError(path, base + pos, f"bad record length {length}")
            if _crc32(data[pos + 8 : end]) != crc:
                raise CorruptJournalError(path, base + pos, "CRC mismatch")
            if index != expected:
                raise CorruptJournalError(
                    path, base + pos, f"record index {index}, expected {expected}"
                )
            if 0 <= until < ts:
                return pid, seq, index
            pid, seq = rpid, rseq
            row = decode_records(data[pos:end], base + pos, index, 1, path)[0]
            _i, _p, _s, _t, command, topic, payload, fields, _n = row
            if (
                topic == want_topic
                and command != "sow_delete"
                and fields.get("mt", "json") == want_mt
            ):
                out.append(self.row_frame(pid, seq, ts, topic, payload, fields))
            pos = end
            expected += 1
        return pid, seq, -1

    def past_end(self, record: JournalRecord) -> bool:
        """Is ``record`` beyond this range's end?"""
        return self.past_end_at(record.index, record.timestamp)

    def past_end_at(self, index: int, timestamp: int) -> bool:
        """Is the record at ``index`` received at ``timestamp`` beyond this range's end?"""
        end = self.end_index
        if end is not None and (index > end or (index == end and not self.end_inclusive)):
            return True
        end_t = self.end_time
        return end_t is not None and (
            timestamp > end_t or (timestamp == end_t and not self.end_time_inclusive)
        )

    def time_over(self, now_us: int) -> bool:
        """For a range ending at a time: has that time passed?"""
        end_t = self.end_time
        return end_t is not None and now_us > end_t

    def rate_wait(self, record: JournalRecord) -> float:
        """Seconds to wait before delivering ``record`` under ``rate=`` (0 = now)."""
        return self.rate_wait_at(record.timestamp)

    def rate_wait_at(self, timestamp: int) -> float:
        """Seconds to wait before delivering a record received at ``timestamp`` (0 = now)."""
        rate = self.rate
        if rate is None:
            return 0.0
        now = time.monotonic()
        if rate.started == 0.0:
            rate.started = now
            rate.first_ts = timestamp
        elapsed = now - rate.started
        if rate.kind in ("msgs", "bytes"):
            due = rate.sent / rate.value
        else:
            assert rate.first_ts is not None
            due = (timestamp - rate.first_ts) / 1_000_000 / rate.value
            if rate.max_gap is not None and due - elapsed > rate.max_gap:
                # skip the idle stretch: shift the clock so the wait is at most max_gap
                rate.started -= due - elapsed - rate.max_gap
                due = elapsed + rate.max_gap
        return max(0.0, due - elapsed)

    def sent(self, record: JournalRecord) -> None:
        """Account for a delivered record (rate pacing)."""
        self.sent_bytes(len(record.payload))

    def sent_bytes(self, size: int) -> None:
        """Account for a delivered record of ``size`` payload bytes (rate pacing)."""
        rate = self.rate
        if rate is not None:
            rate.sent += size if rate.kind == "bytes" else 1

    def advance(self, position: int) -> None:
        """Move the position and the pin with it (as a :class:`JournalCursor` does), so the
        files the replay has passed may be removed at once. (The pin moved only every 10,000
        records: a caught-up replay kept the files of its last 10,000 records, and a removal
        logged them "still needed" from where the replay had started, not where it was.)"""
        self.position = position
        pin = self.pin
        if pin is None:
            self.pin = self.journal.pin(position)
        elif position > pin.index:
            pin.index = position

    def close(self) -> None:
        """Stop: release the pin and any timer."""
        self.done = True
        if self.pin is not None:
            self.journal.unpin(self.pin)
            self.pin = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.end_timer is not None:
            self.end_timer.cancel()
            self.end_timer = None
        if self.conflation is not None:
            self.conflation.close()


class _Resolver:
    def __init__(self, journal: Journal, not_found: str) -> None:
        self.journal = journal
        self.not_found = not_found

    def _missing(self, what: str) -> int:
        if self.not_found == "fail":
            raise ReplayError("invalid bookmark", f"bookmark {what} is not in the transaction log")
        if self.not_found == "epoch":
            return self.journal.first_index
        return self.journal.last_index + 1

    def start(self, point: Any, *, inclusive: bool, ts_inclusive: bool | None = None) -> int:
        """First index to deliver for a starting point.

        ``inclusive`` applies to bookmarks and ``ts_inclusive`` (default: the same) to
        timestamps: a plain bookmark starts after it, a plain timestamp at it.
        """
        journal = self.journal
        ts_skip = 0 if (inclusive if ts_inclusive is None else ts_inclusive) else 1
        if isinstance(point, Epoch):
            return journal.first_index
        if isinstance(point, Now):
            return journal.last_index + 1
        if isinstance(point, Timestamp):
            # "(" after a time: the first record strictly later than it
            return journal.find_time(_micros(point) + ts_skip)
        if isinstance(point, BookmarkId):
            found = journal.find_bookmark(point.publisher_id, point.sequence)
            if found is None:
                return self._missing(str(point))
            return found if inclusive else found + 1
        if isinstance(point, BookmarkList):
            starts = []
            for item in point.items:
                if isinstance(item, Timestamp):
                    starts.append(journal.find_time(_micros(item) + ts_skip))
                    continue
                found = journal.find_bookmark(item.publisher_id, item.sequence)
                if found is not None:
                    starts.append(found if inclusive else found + 1)
            if not starts:
                return self._missing(str(point))
            return min(starts)
        raise ReplayError("invalid bookmark", f"unsupported bookmark {point!r}")

    def end_point(self, item: BookmarkId | Timestamp, *, inclusive: bool) -> int:
        """The last index a range ending at ``item`` delivers (``]`` or ``)``)."""
        journal = self.journal
        if isinstance(item, Timestamp):
            return journal.find_time(_micros(item) + (1 if inclusive else 0)) - 1
        found = journal.find_bookmark(item.publisher_id, item.sequence)
        if found is None:
            return journal.last_index
        return found if inclusive else found - 1
