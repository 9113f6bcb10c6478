"""The two ends of a replication stream: :class:`Outbound` (one per ``<Destination>``) pushes
this instance's journal; :class:`Inbound` (one per upstream stream on a link) applies it.

**Positions.** The upstream reads its own journal in index order and only up to its
``durable_index`` (a record is replicated once it is written to the local transaction log,
so an upstream crash never leaves a downstream with a message the upstream lost). Each
record the rules select is sent with its upstream index; the downstream acknowledges
``rack u`` once every record up to ``u`` is durable in *its* journal (or was already there).

**What a destination has acknowledged** (:meth:`Outbound.acked_through`) is the upstream
index just below the oldest selected record that is not acknowledged yet: the first entry
of the in-flight queue, or, when nothing is in flight, the first record not examined yet. A
disconnected destination keeps examining records, skipping those it would not receive, and
stops at the first one it would: so a sync destination that receives nothing of a topic
never holds acks for it, and one that is down holds exactly from its first missing record.

**Resync.** On every (re)connection the upstream sends ``ropen``; the downstream answers
``rhave`` with the highest sequence it holds per publisher id (taken once those records are
durable); the upstream starts at the earliest record the downstream lacks: for each
publisher the downstream is behind on, the record after the one holding the downstream's
sequence (found with ``find_bookmark``), or the start of the journal for a publisher it
never saw; records the downstream already has are skipped on the way (so a resync never
duplicates a record downstream, and the downstream's own dedup is the second guard).
"""

from __future__ import annotations

import logging
import struct
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from ampsclient_server_stub.config import DestinationConfig
from ampsclient_server_stub.engine.journal import Journal, JournalPin, RecordRow
from ampsclient_server_stub.engine.journal_format import FRAME_OVERHEAD, decode_records

from .blocks import eligible_prefix, mt_suffixes
from .inbound import MAX_INFLATED, Inbound
from .origins import IndexRuns
from .protocol import RecordCompressor, WireRecord, pack_records
from .rules import PATH_FIELD, DestinationRules, Hop, decode_path, encode_path

if TYPE_CHECKING:  # pragma: no cover
    import asyncio

    from ampsclient_server_stub.engine.broker import Broker
    from ampsclient_server_stub.security.auth import EntitlementModule

__all__ = [
    "MAX_INFLATED",
    "MAX_IN_FLIGHT",
    "Inbound",
    "Outbound",
    "StreamHost",
    "StreamLink",
    "link_label",
    "resync_start",
]

logger = logging.getLogger("ampsclient_server_stub.replication")

READ_BATCH: Final = 2000
"""Journal records read per step."""

SEND_BATCH: Final = 500
"""Records per ``rrec`` frame (at most)."""

SEND_BYTES: Final = 1024 * 1024
"""Payload bytes per ``rrec`` frame (at most, unless one record is bigger)."""

PUMP_BUDGET: Final = 20_000
"""Records examined per pump call before yielding to the event loop."""

MAX_IN_FLIGHT: Final = 200_000
"""Records sent and not yet acknowledged, per destination, before sending pauses."""

_PIN_STEP: Final = 10_000

_Fields = dict[str, str | int]
_UNKNOWN: Final = object()
_BY_CONTENT: Final = object()
"""A record shape whose fate a ``<Filter>`` decides, record by record."""
_FRAME_LEN: Final = struct.Struct("<I")
_NO_BLOCKS: Final = object()
"""No record of this instance goes to the destination as a journal block."""
_EVERY_TOPIC: Final = frozenset((".*", "^.*", ".*$", "^.*$"))
"""``<Topic>`` names that take every topic."""


def resync_start(journal: Journal, have: dict[int, int]) -> int:
    """The earliest index a downstream holding ``have`` (publisher id -> highest sequence)
    may lack: replication resumes there."""
    start = journal.last_index + 1
    first = journal.first_index
    for pid, last in journal.last_sequences().items():
        held = have.get(pid, 0)
        if last <= held:
            continue
        if held <= 0:
            return first
        found = journal.find_bookmark(pid, held)
        candidate = found + 1 if found is not None else first
        if candidate < start:
            start = candidate
            if start <= first:
                return first
    return start


class StreamLink(Protocol):
    """What a stream needs of its link (``link.Link`` fits; the link imports this module, not
    the other way round)."""

    peer_name: str
    peer_group: str
    peer_user: str | None
    paused: bool
    closed: bool
    close_reason: str
    outbound: dict[str, Outbound]

    def send(self, fields: dict[str, Any], body: Any = None) -> None:
        """Queue one frame to the peer."""

    def describe(self) -> str:
        """The link, for log messages."""


class StreamHost(Protocol):
    """What a stream needs of the instance's replication manager (``manager.ReplicationManager``
    fits; the manager imports this module, not the other way round)."""

    name: str
    group: str
    journal: Journal
    broker: Broker
    loop: asyncio.AbstractEventLoop
    entitlements: EntitlementModule | None
    origins: dict[str, IndexRuns]
    """Per upstream instance, the runs of local indexes applied from it."""

    def limits_changed(self) -> None:
        """An outbound stream's acknowledged position moved."""

    def hold_moved(self, *, backwards: bool) -> None:
        """An outbound stream's journal pin moved (``backwards``: to an earlier index)."""

    def inbound_counters(self, peer: str, stream: str) -> dict[str, int]:
        """The counters of an inbound stream."""

    def not_entitled(self, link: Any, topic: str, operation: str) -> None:
        """A replicated message the link's user may not write was refused."""


def link_label(out: Outbound) -> str:
    """`` (transport 'NAME')`` when the destination's ``<Transport>`` has a ``<Name>``: as in
    AMPS, the link's name in logs; else empty."""
    name = out.dest.extra.get("Transport/Name")
    return f" (transport {name!r})" if name else ""


class Outbound:
    """The stream of one ``<Destination>``: what was sent, what is acknowledged.

    Args:
        manager: the instance's replication manager.
        dest: the ``<Destination>``.
        hold: the first index the destination may still need, as the previous run of the
            instance saved it (``None``: assume it is caught up with this journal).
    """

    def __init__(
        self, manager: StreamHost, dest: DestinationConfig, *, hold: int | None = None
    ) -> None:
        self.manager = manager
        self.dest = dest
        self.name = dest.name
        self.rules = DestinationRules(dest, manager.name, manager.group)
        self.journal: Journal = manager.journal
        self.sync_configured = dest.sync_type == "sync"
        self.downgraded = False
        self.manual = False
        self.link: StreamLink | None = None
        self.state = "detached"  # detached | opening | streaming
        self.peer: Hop = (dest.name, dest.group or dest.name)
        self._set_peer(self.peer)
        end = self.journal.last_index + 1
        self.scan_pos = end if hold is None else min(max(hold, self.journal.first_index), end)
        self.pending: deque[tuple[int, int, int]] = deque()
        """Sent, not acknowledged: ``(first index, last index, timestamp of the first, µs)``
        per run of consecutive records sent."""
        self.in_flight = 0
        """Records in :attr:`pending`."""
        self.stall_ts: int | None = None
        self.sent_seq: dict[int, int] = {}
        self.pin: JournalPin | None = self.journal.pin(self.scan_pos)
        self.pin_at = self.scan_pos
        self.pump_scheduled = False
        self.connected_since: float | None = None
        self.last_ack_time: float | None = None
        self.compression = dest.compression
        """``<Compression>`` of the destination (``None``: records go uncompressed)."""
        self._compressor: RecordCompressor | None = None
        self._batch: list[WireRecord] = []
        self._batch_bytes = 0
        self.counters: dict[str, int] = {
            "sent": 0,
            "acked": 0,
            "skipped": 0,  # examined and not for this destination (streaming or not)
            "resyncs": 0,
            "connects": 0,
            "blocks": 0,  # rrec frames that carried journal blocks as written
            "bytes_before_compression": 0,
            "bytes_after_compression": 0,
        }
        """``bytes_before/after_compression``: the records of a compressed stream, msgpack-
        encoded, and the compressed ``rrec`` bodies that carried them (0 when uncompressed)."""

    # ------------------------------------------------------------------ state

    def attached(self) -> bool:
        """Attached to a link (opening or streaming)."""
        return self.link is not None

    @property
    def effective_sync(self) -> bool:
        """Sync acknowledgment in force (configured sync and not downgraded)."""
        return self.sync_configured and not self.downgraded

    def acked_through(self) -> int:
        """Highest upstream index below which this destination holds no ack back."""
        if self.pending:
            return self.pending[0][0] - 1
        return self.scan_pos - 1

    def oldest_unacked_age(self, now_us: int) -> float | None:
        """Seconds since the oldest record this destination still has to acknowledge was
        written (``None``: nothing outstanding)."""
        if self.pending:
            return max(0.0, (now_us - self.pending[0][2]) / 1e6)
        if self.state != "streaming" and self.stall_ts is not None:
            return max(0.0, (now_us - self.stall_ts) / 1e6)
        return None

    def status(self) -> dict[str, Any]:
        now_us = time.time_ns() // 1000
        age = self.oldest_unacked_age(now_us)
        return {
            "name": self.name,
            "sync_type": self.dest.sync_type,
            "effective": "sync" if self.effective_sync else "async",
            "downgraded": self.downgraded,
            "manual": self.manual,
            "state": self.state,
            "connected": self.state == "streaming",
            "peer": self.peer[0] if self.link is not None else None,
            "scan_position": self.scan_pos,
            "in_flight": self.in_flight,
            "acked_through": self.acked_through(),
            "hold": self.pin_at,
            "oldest_unacked_age": age,
            **self.counters,
        }

    # ------------------------------------------------------------------ link events

    def attach(self, link: StreamLink) -> None:
        """Start a stream on ``link``: ``ropen``, then wait for the downstream's ``rhave``."""
        self.link = link
        self._set_peer((link.peer_name, link.peer_group))
        self.state = "opening"
        self.counters["connects"] += 1
        link.outbound[self.name] = self
        opening: dict[str, Any] = {"c": "ropen", "d": self.name, "sync": self.dest.sync_type}
        if self.compression is not None:
            self._compressor = RecordCompressor(self.compression)  # a fresh stream per link
            opening["z"] = self.compression
        link.send(opening)
        logger.info(
            "replication: destination %r connected to %s (%s)",
            self.name,
            link.describe(),
            "sync" if self.effective_sync else "async",
        )

    def detach(self) -> None:
        """The link is gone: keep what is in flight (still unacknowledged)."""
        if self.link is not None:
            self.link.outbound.pop(self.name, None)
            logger.info(
                "replication: destination %r disconnected from %s (%s); %d record(s) "
                "unacknowledged",
                self.name,
                self.link.describe(),
                self.link.close_reason or "closed",
                self.in_flight,
            )
        self.link = None
        self.state = "detached"
        self.stall_ts = None
        self.connected_since = None
        self.schedule_pump()

    def on_have(self, have: dict[int, int]) -> None:
        """The downstream said what it holds: resync from the first record it lacks."""
        if self.state != "opening" or self.link is None:
            return
        start = resync_start(self.journal, have)
        behind = max(0, self.journal.durable_index - start + 1)
        self.pending.clear()
        self.in_flight = 0
        self.sent_seq = dict(have)
        self.scan_pos = start
        self.stall_ts = None
        self.state = "streaming"
        self.connected_since = time.monotonic()
        self.counters["resyncs"] += 1
        logger.info(
            "replication: resync of %r to %s from index %d (%d journal record(s) to examine)",
            self.name,
            self.link.describe(),
            start,
            behind,
        )
        self._repin(start)
        self.manager.limits_changed()
        self.pump()

    def on_ack(self, upstream_index: int) -> None:
        pending = self.pending
        count = 0
        while pending:
            first, last, ts = pending[0]
            if last <= upstream_index:
                pending.popleft()
                count += last - first + 1
            else:
                if first <= upstream_index:
                    pending[0] = (upstream_index + 1, last, ts)
                    count += upstream_index - first + 1
                break
        if count:
            self.in_flight -= count
            self.counters["acked"] += count
            self.last_ack_time = time.monotonic()
            if self.effective_sync:
                self.manager.limits_changed()
            self._repin(self.acked_through() + 1)
            if self.in_flight + count >= MAX_IN_FLIGHT:
                self.schedule_pump()

    # ------------------------------------------------------------------ pumping

    def schedule_pump(self) -> None:
        if not self.pump_scheduled:
            self.pump_scheduled = True
            self.manager.loop.call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self.pump_scheduled = False
        self.pump()

    def wire(self, row: RecordRow) -> WireRecord | None:
        """The journal record ``row`` as sent to this destination, or ``None`` when it is not
        for it."""
        index, pid, seq, _ts, command, topic, payload, fields, _size = row
        mt = fields.get("mt", "json")
        key = (mt, topic)
        decision = self._topic_ok.get(key)
        if decision is None:
            decision = self.rules.topic_decision(str(mt), topic)
            if len(self._topic_ok) > 10_000:
                self._topic_ok.clear()
            self._topic_ok[key] = decision
        if decision is False:
            return None
        if decision is None and not self.rules.topic_matches(str(mt), topic, command, payload):
            return None
        path_text = self._path_text(fields.get(PATH_FIELD))
        if path_text is None:
            return None
        if seq <= self.sent_seq.get(pid, 0):
            return None
        out_fields = dict(fields)
        out_fields[PATH_FIELD] = path_text
        return (index, pid, seq, command, topic, payload, out_fields)

    def _path_text(self, raw_path: str | int | None) -> str | None:
        """The path a record with journal path ``raw_path`` is sent with (``None``: rules 2
        and 3 keep it from this destination)."""
        if raw_path is None:
            return self._own_path if self._direct_ok else None
        path_text = str(raw_path)
        ok = self._path_ok.get(path_text)
        if ok is None:
            path = decode_path(path_text)
            ok = bool(path) and self.rules.passes(path) and self._loop_free(path)
            if len(self._path_ok) > 4096:
                self._path_ok.clear()
            self._path_ok[path_text] = ok
        return path_text if ok else None

    def _shape(self, key: tuple[Any, str, Any]) -> dict[str, str | int] | object | None:
        """What :meth:`wire` decides for every record whose fields are ``mt`` and ``rp``
        only, ``key`` being ``(mt, topic, rp)`` (``None`` for an absent field): ``None``
        (not for this destination), ``_BY_CONTENT`` (a ``<Filter>`` decides: ask
        :meth:`wire`), or the fields to send (shared by those records: only packed)."""
        mt, topic, raw_path = key
        shape: dict[str, str | int] | object | None = None
        decision = self.rules.topic_decision(str(mt if mt is not None else "json"), topic)
        if decision is None:
            shape = _BY_CONTENT
        elif decision:
            path_text = self._path_text(raw_path)
            if path_text is not None:
                fields: dict[str, str | int] = {} if mt is None else {"mt": mt}
                fields[PATH_FIELD] = path_text
                shape = fields
        if len(self._shapes) > 10_000:
            self._shapes.clear()
        self._shapes[key] = shape
        return shape

    def _span(self, durable: int, limit: int) -> int:
        """How many journal records to examine next from ``scan_pos`` (at most ``limit``,
        none past ``durable``; 0: none), after jumping over the runs that the peer itself
        sent here (loop prevention would skip each of them: see ``origins.py``)."""
        pos = self.scan_pos
        runs = self.manager.origins.get(self.peer[0])
        if runs is not None:
            after = runs.skip(pos)
            if after != pos:
                after = min(after, durable + 1)
                self.counters["skipped"] += after - pos
                self.scan_pos = pos = after
            start = runs.next_start(pos)
            if start is not None:
                limit = min(limit, start - pos)
        if pos > durable:
            return 0
        return min(limit, durable - pos + 1)

    def _rows(self, durable: int, limit: int) -> list[RecordRow]:
        """The next journal records to examine (see :meth:`_span`)."""
        count = self._span(durable, limit)
        if count <= 0:
            return []
        return self.journal.read_rows(self.scan_pos, max_records=count)

    def _set_peer(self, peer: Hop) -> None:
        self.peer = peer
        self._path_ok: dict[str, bool] = {}
        self._topic_ok: dict[tuple[Any, str], bool | None] = {}
        self._shapes: dict[tuple[Any, str, Any], dict[str, str | int] | object | None] = {}
        own: list[Hop] = [(self.manager.name, self.manager.group)]
        self._own_path = encode_path(own)
        self._direct_ok = self._loop_free(own)
        self._block_types = self._whole_types() if self._direct_ok else _NO_BLOCKS

    def _whole_types(self) -> tuple[bytes, ...] | object | None:
        """Which of this instance's own records may travel as journal blocks: those whose
        message type a ``<Topic>`` without ``<Filter>`` takes on every topic. The byte
        endings of such records (see :func:`.blocks.mt_suffixes`), ``None`` when every type
        is taken, ``_NO_BLOCKS`` when none is."""
        types: list[str] = []
        for topic in self.dest.topics:
            if topic.filter or topic.name not in _EVERY_TOPIC:
                continue
            if topic.message_type is None:
                return None
            types.append(topic.message_type)
        return mt_suffixes(types) if types else _NO_BLOCKS

    def _loop_free(self, path: list[Hop]) -> bool:
        return DestinationRules.loop_free(path, self.peer[0], self.peer[1], self.manager.group)

    def pump(self) -> None:
        """Send (streaming) or examine (disconnected) newly durable records."""
        if self.state == "streaming":
            self._send()
        elif self.state == "detached" and not self.pending:
            self._find_stall()

    def _send(self) -> None:
        link = self.link
        assert link is not None
        journal = self.journal
        durable = journal.durable_index
        start_pos = self.scan_pos
        budget = PUMP_BUDGET
        pending = self.pending
        self._batch = []
        self._batch_bytes = 0
        types = self._block_types
        blocks = types is not _NO_BLOCKS and self._compressor is None
        suffixes = cast("tuple[bytes, ...] | None", types)
        while (
            self.scan_pos <= durable
            and budget > 0
            and not link.paused
            and not link.closed
            and self.in_flight < MAX_IN_FLIGHT
        ):
            count = self._span(durable, READ_BATCH)
            if count <= 0:
                break
            if not blocks:
                rows = journal.read_rows(self.scan_pos, max_records=count)
                if not rows:
                    break
                self._examine(rows)
                self.scan_pos = rows[-1][0] + 1
                budget -= len(rows)
                continue
            raw = journal.read_blocks(self.scan_pos, max_records=count)
            if not raw:
                break
            for data, begin, first, n, path in raw:
                self._send_raw(link, data, begin, first, n, path, suffixes)
                self.scan_pos = first + n
                budget -= n
        self._flush(link)
        if self.scan_pos != start_pos:
            if self.effective_sync:
                self.manager.limits_changed()
            if not pending:
                self._repin(self.scan_pos)
        if (
            self.scan_pos <= journal.durable_index
            and not link.paused
            and not link.closed
            and self.in_flight < MAX_IN_FLIGHT
        ):
            self.schedule_pump()

    def _send_raw(
        self,
        link: StreamLink,
        data: bytes,
        begin: int,
        first: int,
        n: int,
        path: Path,
        suffixes: tuple[bytes, ...] | None,
    ) -> None:
        """Send the ``n`` journal records of ``data`` (the first with index ``first``, at
        offset ``begin`` of segment ``path``): runs of this instance's own records that the
        destination takes whole go as written, in frames of up to ``SEND_BATCH`` records
        (:mod:`.blocks`); any other record is decoded and decided alone."""
        pos = 0
        done = 0
        size = len(data)
        pending = self.pending
        sent_seq = self.sent_seq
        while done < n:  # (blocks stop before a replicated record: the walk sees its "rp")
            k, end, ts = eligible_prefix(
                data,
                pos,
                first + done,
                min(n - done, SEND_BATCH),
                sent_seq,
                suffixes,
            )
            if k:
                pending.append((first + done, first + done + k - 1, ts))
                self.in_flight += k
                self._flush(link)
                self._send_block(link, data[pos:end], first + done, k)
            else:  # this record is not one of them: decode it (errors are raised there)
                end = size
                if pos + FRAME_OVERHEAD <= size:
                    end = min(size, pos + 8 + _FRAME_LEN.unpack_from(data, pos)[0])
                k = 1
                self._examine(decode_records(data[pos:end], begin + pos, first + done, 1, path))
            pos = end
            done += k

    def _examine(self, rows: list[RecordRow]) -> None:
        """Decide ``rows`` record by record; queue those for this destination in
        ``rrec`` frames (sent when full; :meth:`_flush` sends the last)."""
        link = self.link
        assert link is not None
        pending = self.pending
        sent_seq = self.sent_seq
        sent_get = sent_seq.get
        wire = self.wire
        shapes = self._shapes
        batch = self._batch
        batch_bytes = self._batch_bytes
        skipped = 0
        for row in rows:
            index, pid, seq, ts, command, topic, payload, fields, _size = row
            # the usual record carries only "mt" (and "rp"): its fate and the fields it
            # is sent with depend on (mt, topic, rp) alone, decided once (see _shape)
            item: WireRecord | None
            if len(fields) == ("mt" in fields) + (PATH_FIELD in fields):
                key = (fields.get("mt"), topic, fields.get(PATH_FIELD))
                shape = shapes.get(key, _UNKNOWN)
                if shape is _UNKNOWN:
                    shape = self._shape(key)
                if shape is None or (shape is not _BY_CONTENT and seq <= sent_get(pid, 0)):
                    skipped += 1
                    continue
                if shape is _BY_CONTENT:
                    item = wire(row)
                    if item is None:
                        skipped += 1
                        continue
                else:
                    item = (index, pid, seq, command, topic, payload, cast(_Fields, shape))
            else:
                item = wire(row)
                if item is None:
                    skipped += 1
                    continue
            batch.append(item)
            batch_bytes += len(payload)
            if pending and pending[-1][1] == index - 1:
                pending[-1] = (pending[-1][0], index, pending[-1][2])
            else:
                pending.append((index, index, ts))
            self.in_flight += 1
            sent_seq[pid] = seq
            if len(batch) >= SEND_BATCH or batch_bytes >= SEND_BYTES:
                self._send_records(link, batch)
                batch = self._batch = []
                batch_bytes = 0
        self._batch_bytes = batch_bytes
        self.counters["skipped"] += skipped

    def _flush(self, link: StreamLink) -> None:
        """Send the records :meth:`_examine` queued."""
        if self._batch:
            self._send_records(link, self._batch)
            self._batch = []
            self._batch_bytes = 0

    def _send_block(self, link: StreamLink, data: bytes, first: int, count: int) -> None:
        """One ``rrec`` frame carrying ``count`` journal records as written (see
        :mod:`.blocks`): the downstream gives each this instance's path."""
        link.send({"c": "rrec", "d": self.name, "b": first, "n": count, "rp": self._own_path}, data)
        self.counters["sent"] += count
        self.counters["blocks"] += 1

    def _send_records(self, link: StreamLink, batch: list[WireRecord]) -> None:
        """One ``rrec`` frame (compressed when the destination says so)."""
        counters = self.counters
        compressor = self._compressor
        if compressor is None:
            link.send({"c": "rrec", "d": self.name}, pack_records(batch))
        else:
            before = compressor.raw_bytes
            chunk = compressor.compress(batch)
            link.send({"c": "rrec", "d": self.name, "z": compressor.algorithm}, chunk)
            counters["bytes_before_compression"] += compressor.raw_bytes - before
            counters["bytes_after_compression"] += len(chunk)
        counters["sent"] += len(batch)

    def _find_stall(self) -> None:
        """Disconnected: move past records this destination would not get; stop at the
        first one it would (its timestamp is the age of what it misses)."""
        if self.stall_ts is not None:
            return
        journal = self.journal
        durable = journal.durable_index
        start_pos = self.scan_pos
        budget = PUMP_BUDGET
        while self.scan_pos <= durable and budget > 0:
            rows = self._rows(durable, 256)
            if not rows:
                break
            for row in rows:
                if self.wire(row) is not None:
                    self.stall_ts = row[3]
                    break
                self.scan_pos = row[0] + 1
                self.counters["skipped"] += 1
                budget -= 1
            if self.stall_ts is not None:
                break
        if self.scan_pos != start_pos and self.effective_sync:
            self.manager.limits_changed()
        if self.stall_ts is None and self.scan_pos <= journal.durable_index:
            self.schedule_pump()

    def _repin(self, index: int) -> None:
        """Move the journal pin to ``index``: at once backwards or when nothing is in flight
        (caught up), else in steps of ``_PIN_STEP`` records; the manager persists it."""
        if self.pin is not None:
            at = self.pin_at
            if index == at or (at < index < at + _PIN_STEP and self.pending):
                return
        new = self.journal.pin(index)
        if self.pin is not None:
            self.journal.unpin(self.pin)
        backwards = index < self.pin_at
        self.pin = new
        self.pin_at = index
        self.manager.hold_moved(backwards=backwards)

    def close(self) -> None:
        if self.pin is not None:
            self.journal.unpin(self.pin)
            self.pin = None
