"""The ingest pipeline: the one way a message enters the server.

:meth:`Ingest.ingest` takes every message, whatever it comes from:

* :class:`ClientPublish` / :class:`ClientRun`: a client's publish (or a run of them, read
  together from one connection and journaled as one batch);
* :class:`ClientDelete`: a client's ``sow_delete``;
* :class:`Journaled`: a record read back from the journal at start (SOW recovery);
* :class:`Replicated`: a record received by replication, under its original bookmark (or
  :class:`ReplicatedRun`, a run of them journaled as one batch when it may be).

The steps are the same for all, each taken when the origin needs it: de-duplication,
journal append, SOW write (publish, delta merge, delete), the group-commit request and the
``live`` bookmark replays (:meth:`Ingest._appended`, once per append), then routing and
delivery. A client's SOW write is committed before its journal append, and a failed append
takes the write back (a write that cannot be committed, e.g. on a full disk, refuses the
publish before anything is journaled); a replicated record is journaled first (its SOW write
may fail: the SOW's checkpoint then stays below it, so the next start re-applies it).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Final, NamedTuple

from ampsclient.protocol.header import Header

from .composite_codec import composite_refusal
from .delivery import NO_PREVIOUS, Delivery
from .durability import Durability
from .filters import compile_filter
from .hooks import BrokerHooks
from .journal import JournalRecord
from .payload import decode, encode, unparsed_refusal
from .replay_scheduler import ReplayScheduler
from .routing import RoutingIndex
from .sow import SowRecord, SowTopic
from .sow_service import SowService, sow_store
from .state import Clients, Connection
from .topics import TopicError, compile_topic
from .txlog import TxLog
from .wire import MT_FIELDS, CommandFailure, format_timestamp, split_list, text

__all__ = [
    "ClientDelete",
    "ClientPublish",
    "ClientRun",
    "Incoming",
    "Ingest",
    "Ingested",
    "Journaled",
    "Replicated",
    "ReplicatedRun",
]

logger = logging.getLogger(__name__)


class ClientPublish(NamedTuple):
    """A ``p``/``delta_publish`` of a logged-on client (``hdr`` is ``None`` on the fast
    paths; ``seq`` is its sequence when it asked for a persisted ack)."""

    conn: Connection
    topic: str
    hdr: Header | None
    payload: bytes
    end: int
    delta: bool = False
    seq: int | None = None


class ClientRun(NamedTuple):
    """Consecutive publishes of one client to recorded, non-SOW topics, journaled as one
    batch: ``(journal sequence, topic, data)`` each; ``acked``: they asked for persisted
    acks (their sequence is then the client's own)."""

    conn: Connection
    batch: Sequence[tuple[int, str, bytes]]
    acked: bool


class ClientDelete(NamedTuple):
    """A client's ``sow_delete``, validated: what it deletes from which SOW topics."""

    conn: Connection
    topic: str
    sows: Sequence[SowTopic]
    predicate: Callable[[Any], bool] | None
    filter_text: str | None
    keys: list[str] | None
    sow_key: str | None
    data_doc: Any
    body: bytes
    seq: int | None
    recorded: bool


class Journaled(NamedTuple):
    """A journal record read back at start: applied to the SOW topics behind it."""

    record: JournalRecord


class Replicated(NamedTuple):
    """A record received over replication (``fields`` already carry the updated path)."""

    publisher_id: int
    sequence: int
    command: str
    topic: str
    payload: bytes
    fields: Mapping[str, str | int]


class ReplicatedRun(NamedTuple):
    """Consecutive ``p`` records received over replication from one publisher with the same
    ``fields`` (path included): ``(sequence, topic, payload)`` each, sequences increasing.
    Taken whole (one journal append) or not at all: see :attr:`Ingested.journaled`."""

    publisher_id: int
    fields: Mapping[str, str | int]
    batch: Sequence[tuple[int, str, bytes]]


Incoming = ClientPublish | ClientRun | ClientDelete | Journaled | Replicated | ReplicatedRun
"""Everything :meth:`Ingest.ingest` takes."""


class Ingested(NamedTuple):
    """What :meth:`Ingest.ingest` did.

    ``record``: the journal record written (``None``: none); ``applied``: SOW topics were
    changed; ``deleted``/``topic_matches``: a delete's figures; ``duplicate``: already
    here; ``unrecorded``: not for this server's journal (a replicated record);
    ``journaled``: the records of a :class:`ReplicatedRun` written (0: none, the run was
    not taken, send its records one by one as :class:`Replicated`); ``failed``: a
    replicated record that belongs in the journal could not be written (a full disk): it
    must not be acknowledged upstream.
    """

    record: JournalRecord | None = None
    applied: bool = False
    deleted: int = 0
    topic_matches: int = 0
    duplicate: bool = False
    unrecorded: bool = False
    journaled: int = 0
    failed: bool = False


_new: Final = tuple.__new__
_topic_of: Final = itemgetter(1)
"""``_new(Ingested, (...))``: a named tuple without its Python-level ``__new__`` (hot path)."""
_NOTHING: Final = Ingested()
_APPLIED: Final = Ingested(applied=True)
_DUPLICATE: Final = Ingested(duplicate=True)
_UNRECORDED: Final = Ingested(unrecorded=True)
_FAILED: Final = Ingested(failed=True)


class Ingest:
    """The ingest pipeline of one broker (see the module docstring)."""

    def __init__(
        self,
        *,
        txlog: TxLog | None,
        clients: Clients,
        sows: SowService,
        index: RoutingIndex,
        delivery: Delivery,
        scheduler: ReplayScheduler,
        durability: Durability,
        request_sync: Callable[[], None],
        hooks: BrokerHooks,
        counters: dict[str, int],
        clock: Callable[[], float],
    ) -> None:
        self._txlog = txlog
        self._clients = clients
        self._sows = sows
        self._index = index
        self._delivery = delivery
        self._scheduler = scheduler
        self._durability = durability
        self._request_sync = request_sync
        self._hooks = hooks
        self._live = scheduler.live
        self._counters = counters
        self._clock = clock
        self._faults = sows.faults
        self.publish_targets: dict[tuple[str, str], str] = {}
        """Queues' ``DefaultPublishTarget``: a client's publish to ``(message type, queue
        name)`` goes to that topic instead."""

    def ingest(self, item: Incoming) -> Ingested:
        """Take one message in (see the module docstring).

        Raises:
            CommandFailure: a client's message is refused (nothing of it stands).
            CommandFailure: ``tx store failure`` for a :class:`ClientRun` that could not be
                journaled (the caller tells a partial write by the journal's last index).
            sqlite3.Error: SOW storage failed while recovering (the start fails).
        """
        if type(item) is ClientPublish:
            return self._client_publish(item)
        if type(item) is ClientRun:
            return self._client_run(item)
        if type(item) is ClientDelete:
            return self._client_delete(item)
        if type(item) is Journaled:
            return _APPLIED if self._apply(item.record, recovering=True) else _NOTHING
        if type(item) is ReplicatedRun:
            return self._replicated_run(item)
        assert type(item) is Replicated
        return self._replicated(item)

    # ------------------------------------------------------------------ steps

    def _appended(self) -> None:
        """After journal appends: ask for a group commit, move live bookmark replays on."""
        self._request_sync()
        if self._live:
            self._scheduler.pump_live()

    def _journal_sequence(self, conn: Connection, seq: int | None) -> int:
        """The sequence a record of this publish gets in the journal (its bookmark's second
        part): the client's own ``s``, or the next number for publishes without one."""
        state = conn.state
        assert state is not None
        if seq is not None:
            return seq
        state.last_seq += 1
        return state.last_seq

    def _journal_append(
        self,
        conn: Connection,
        jseq: int,
        topic: str,
        command: str,
        data: bytes,
        fields: Mapping[str, str | int] | None,
    ) -> JournalRecord:
        """Append one client record to the journal (:meth:`_appended` must follow).

        Raises:
            CommandFailure: ``tx store failure`` (nothing was appended).
        """
        txlog = self._txlog
        assert txlog is not None and conn.state is not None
        # (a shared read-only mapping when there is nothing but the type: the journal copies)
        mt = conn.mt
        extra = {"mt": mt, **fields} if fields else MT_FIELDS.get(mt) or {"mt": mt}
        try:
            record = txlog.journal.append(
                publisher_id=conn.state.publisher_id,
                sequence=jseq,
                topic=topic,
                command=command,
                payload=data,
                fields=extra,
            )
        except Exception as exc:
            self._journal_failed(txlog, exc)
            raise CommandFailure("tx store failure", str(exc)) from exc
        return record

    def _journal_failed(self, txlog: TxLog, exc: Exception) -> None:
        """An append failed: report the condition once (``journal`` in the storage faults),
        with the traceback when it is not a full disk (a bug rather than the disk). The next
        group commit that succeeds ends it (an append that succeeds only buffers)."""
        faults = self._faults
        fresh = "journal" not in faults.active
        faults.failed("journal", str(txlog.journal.directory), exc)
        if fresh and not faults.active["journal"].disk_full:
            logger.error("journal append failed", exc_info=exc)

    def assign_bookmark(self, conn: Connection, topic: str, seq: int | None) -> str:
        """Bookmark of a message written to a SOW topic that is not recorded:
        ``<publisherId>|<n>|`` with the client's publish sequence when it sent one, else a
        per-client-name counter."""
        state = conn.state
        assert state is not None
        if seq is not None:
            state.bookmark_seq = max(state.bookmark_seq, seq)
            return f"{state.publisher_id}|{seq}|"
        state.bookmark_seq += 1
        return f"{state.publisher_id}|{state.bookmark_seq}|"

    # ------------------------------------------------------------------ client publishes

    def _client_publish(self, item: ClientPublish) -> Ingested:
        conn, topic, hdr, payload, end, delta, seq = item
        if self.publish_targets:
            topic = self.publish_targets.get((conn.mt, topic), topic)
        guard = self._hooks.guard
        if guard is not None:
            guard.check_write(conn, topic)
        mt = conn.mt
        if delta:
            refusal = composite_refusal(mt, "delta publish") or unparsed_refusal(
                mt, "delta publish"
            )
            if refusal is not None:
                raise CommandFailure("invalid message type", refusal)
        self._counters["publishes"] += 1
        self._delivery.topics.published(topic)
        sow = self._sows.for_publish(mt, topic) if topic in self._sows.by_name else None
        if sow is not None:
            return self._client_sow_publish(conn, sow, hdr or {}, payload[end:], delta, seq)
        data = payload[end:]
        x = text(hdr.get("x")) if hdr is not None else None
        record = None
        txlog = self._txlog
        if txlog is not None and (  # records() first: no closure when the topic is recorded
            txlog.records(mt, topic) or txlog.records_message(mt, topic, lambda: decode(mt, data))
        ):
            jseq = self._journal_sequence(conn, seq)
            command = "delta_publish" if delta else "p"
            fields = {"x": x} if x else None
            record = self._journal_append(conn, jseq, topic, command, data, fields)
            self._appended()
        route = self._index.routes.get((mt, topic))
        if route is None:
            route = self._index.route(mt, topic)
        if route:
            self._delivery.deliver_plain(
                route, topic, data, x, mt, None if record is None else record.bookmark
            )
        if record is None:
            return _NOTHING
        return _new(Ingested, (record, False, 0, 0, False, False, 0, False))

    def _client_sow_publish(
        self,
        conn: Connection,
        sow: SowTopic,
        hdr: Header,
        data: bytes,
        delta: bool,
        seq: int | None,
    ) -> Ingested:
        mt = sow.message_type
        doc = decode(mt, data)
        preprocessing, enrichment = self._sows.stages_of(sow)
        if preprocessing is not None and doc is not None:  # before the key (User Guide ch. 10)
            doc = preprocessing.apply(doc)
            data = encode(mt, doc)
        sow_key = text(hdr.get("k"))
        if doc is None and not sow_key:
            raise CommandFailure("bad sow key", "cannot compute a SOW key for this payload")
        key = sow.compute_key(doc, sow_key)
        if enrichment is not None and doc is not None:  # after the key, before SOW and txlog
            before = sow.doc(key) if enrichment.reads_previous and key in sow else None
            doc = enrichment.apply(doc, before)
            data = encode(mt, doc)
        prev_doc = sow.doc(key) if key in sow else NO_PREVIOUS
        now = self._clock()
        txlog = self._txlog
        recorded = txlog is not None and txlog.records_message(mt, sow.topic, lambda: doc)
        jseq = 0
        journal_index: int | None = None
        if recorded:
            assert txlog is not None and conn.state is not None
            journal_index = txlog.journal.last_index + 1  # what the append below will get
            jseq = self._journal_sequence(conn, seq)
            bookmark = f"{conn.state.publisher_id}|{jseq}|"
        else:
            bookmark = self.assign_bookmark(conn, sow.topic, seq)
        x = text(hdr.get("x"))
        kwargs: dict[str, Any] = {
            "doc": doc,
            "sow_key": sow_key,
            "bookmark": bookmark,
            "timestamp": format_timestamp(now),
            "correlation_id": x,
            "expiration": self._sows.expiration(sow, hdr, now),
            "journal_index": journal_index,
        }
        journaled = None
        checkpoint = sow.journal_index
        # The SOW write is committed first: a commit that fails (a full disk) refuses the
        # publish before anything is journaled; a journal append that fails then takes the
        # committed write back (SowTopic.take_back), so SOW and journal never disagree.
        try:
            if delta:
                record, previous, new_doc = sow.delta_publish(data, **kwargs)
            else:
                record, previous = sow.publish(data, **kwargs)
                new_doc = doc
        except Exception as exc:
            self._sow_failed(sow, exc)
            raise CommandFailure("sow store failed", str(exc)) from exc
        if self._faults.active:
            self._faults.succeeded(sow_store(sow))
        if recorded:
            fields: dict[str, str | int] = {"k": record.key}
            if x:
                fields["x"] = x
            e = hdr.get("e")
            if e is not None and e != "":
                fields["e"] = str(e)
            command = "delta_publish" if delta else "p"
            try:
                journaled = self._journal_append(
                    conn, jseq, sow.topic, command, record.data, fields
                )
            except CommandFailure:
                before = [] if previous is None else [previous]
                self._take_back(sow, [record.key], before, checkpoint)
                raise
        if journaled is not None:
            self._appended()
            if journaled.index != journal_index:  # pragma: no cover - the loop is the only writer
                logger.warning(
                    "SOW %r: journal index %s, not %s", sow.topic, journaled.index, journal_index
                )
        self._deliver_sow(mt, sow, record, new_doc, prev_doc)
        return Ingested(journaled, applied=True)

    def _sow_failed(self, sow: SowTopic, exc: Exception) -> None:
        """A SOW write failed (nothing of it stands): report the condition once, with the
        traceback when it is not a full disk."""
        faults = self._faults
        store = sow_store(sow)
        fresh = store not in faults.active
        faults.failed(store, sow.filename or ":memory:", exc)
        if fresh and not faults.active[store].disk_full:
            logger.error("SOW %r: write failed", sow.topic, exc_info=exc)

    def _take_back(
        self, sow: SowTopic, written: Sequence[str], restore: Sequence[SowRecord], checkpoint: int
    ) -> None:
        """Undo a committed SOW change whose journal append failed (the publish is refused)."""
        if not written and not restore:
            return
        try:
            sow.take_back(written, restore, journal_index=checkpoint)
        except Exception as exc:  # the SOW now holds a change the journal does not
            self._sow_failed(sow, exc)
            logger.error(
                "SOW %r: a change refused by the transaction log could not be taken back (%s); "
                "the checkpoint stays below it",
                sow.topic,
                exc,
            )
            sow.hold_checkpoint(checkpoint + 1)

    def _deliver_sow(
        self, mt: str, sow: SowTopic, record: SowRecord, new_doc: Any, prev_doc: Any
    ) -> None:
        route = self._index.route(mt, sow.topic)
        if route:
            self._delivery.deliver_sow(route, sow, record, new_doc, prev_doc)

    def _client_run(self, item: ClientRun) -> Ingested:
        """Journal a run with one append, then acknowledge (once durable) and route it."""
        conn, batch, acked = item
        txlog = self._txlog
        state = conn.state
        assert txlog is not None and state is not None
        mt = conn.mt
        pid = state.publisher_id
        journal = txlog.journal
        if self.publish_targets:
            targets = self.publish_targets
            batch = [(seq, targets.get((mt, topic), topic), data) for seq, topic, data in batch]
        try:
            first, _ts = journal.append_many(pid, "p", batch, MT_FIELDS.get(mt) or {"mt": mt})
        except Exception as exc:
            self._journal_failed(txlog, exc)
            raise CommandFailure("tx store failure", str(exc)) from exc
        count = len(batch)
        self._counters["publishes"] += count
        last = batch[-1][0]
        state.last_seq = last
        if acked:
            conn.persist_pending = True
            self._durability.wait_durable(state, first + count - 1, last)
        self._appended()
        topics = list(map(_topic_of, batch))  # once for both
        self._delivery.topics.published_run(batch, topics)
        self._delivery.deliver_run(self._index.route, mt, pid, batch, topics)
        return _NOTHING

    def _client_delete(self, item: ClientDelete) -> Ingested:
        conn = item.conn
        txlog = self._txlog
        journal_index = (
            txlog.journal.last_index + 1 if item.recorded and txlog is not None else None
        )
        deleted = topic_matches = 0
        removed: list[tuple[SowTopic, list[SowRecord]]] = []
        journaled = None
        checkpoints = [sow.journal_index for sow in item.sows]
        # Each topic's deletes are committed first (see _client_sow_publish); a failure takes
        # back those already committed.
        try:
            for sow in item.sows:
                topic_matches += len(sow)
                try:
                    gone = sow.delete(
                        item.predicate,
                        keys=item.keys,
                        data_doc=item.data_doc,
                        sow_key=item.sow_key if item.body or item.sow_key else None,
                        journal_index=journal_index,
                    )
                except Exception as exc:
                    self._sow_failed(sow, exc)
                    raise CommandFailure("sow store failed", str(exc)) from exc
                if self._faults.active:
                    self._faults.succeeded(sow_store(sow))
                deleted += len(gone)
                removed.append((sow, gone))
            if item.recorded:
                fields: dict[str, str | int] = {}
                if item.filter_text is not None:
                    fields["filter"] = item.filter_text
                if item.keys is not None:
                    fields["sow_keys"] = ",".join(item.keys)
                if item.sow_key is not None:
                    fields["k"] = item.sow_key
                jseq = self._journal_sequence(conn, item.seq)
                journaled = self._journal_append(
                    conn, jseq, item.topic, "sow_delete", item.body, fields
                )
        except CommandFailure:
            for (sow, gone), checkpoint in zip(removed, checkpoints, strict=False):
                self._take_back(sow, [], gone, checkpoint)
            raise
        if journaled is not None:
            self._appended()
        for sow, gone in removed:  # subscribers hear of it once it stands
            self._delivery.sow_removed(sow, gone, "deleted")
        return Ingested(journaled, True, deleted, topic_matches)

    # ------------------------------------------------------------------ journaled records

    def _replicated(self, item: Replicated) -> Ingested:
        """Journal a replicated record under its original bookmark, keep the publisher's
        de-duplication state right, then store and deliver it."""
        txlog = self._txlog
        if txlog is None:
            return _UNRECORDED
        journal = txlog.journal
        pid = item.publisher_id
        if item.sequence <= journal.last_sequence(pid):
            return _DUPLICATE  # counted by the inbound stream, not as a client duplicate
        mt = str(item.fields.get("mt", "json"))
        if item.command != "sow_delete" and not txlog.records_message(
            mt, item.topic, lambda: decode(mt, item.payload)
        ):
            logger.debug("replicated record for unrecorded topic %r (%s) ignored", item.topic, mt)
            return _UNRECORDED
        try:
            record = journal.append(
                publisher_id=pid,
                sequence=item.sequence,
                topic=item.topic,
                command=item.command,
                payload=item.payload,
                fields=item.fields,
            )
        except Exception as exc:
            self._journal_failed(txlog, exc)
            return _FAILED
        state = self._clients.state_for_publisher(pid)
        if state is not None and item.sequence > state.last_seq:
            state.last_seq = item.sequence
            state.bookmark_seq = max(state.bookmark_seq, item.sequence)
            self._durability.sequence_moved(state)
        if item.command != "sow_delete":
            self._counters["publishes"] += 1
            self._delivery.topics.published(item.topic)
        try:
            self._apply(record, recovering=False)
        except Exception:
            logger.exception("replication: applying %s to %r failed", record.bookmark, item.topic)
            # journaled but not in the SOW: the checkpoint must not pass it (re-applied at start)
            self._sows.hold_checkpoints(item.topic, record.index)
        self._appended()
        return Ingested(record)

    def _replicated_run(self, item: ReplicatedRun) -> Ingested:
        """Journal a run of replicated publishes with one append, then route it, when every
        record may go that way (recorded topics without a SOW, none of them here yet);
        else take nothing (``journaled`` 0)."""
        pid, fields, batch = item
        txlog = self._txlog
        if txlog is None or not batch:
            return _NOTHING
        journal = txlog.journal
        mt = str(fields.get("mt", "json"))
        if batch[0][0] <= journal.last_sequence(pid):
            return _NOTHING
        sows, records = self._sows, txlog.records
        topics = list(map(_topic_of, batch))  # once for the checks, the counts and routing
        distinct = set(topics)
        for topic in distinct:
            if sows.topic(topic, mt) is not None or not records(mt, topic):
                return _NOTHING
        try:
            journal.append_many(pid, "p", batch, fields)
        except Exception:  # nothing of the batch is stored: the records go one by one
            logger.debug("replication: run of %d record(s) not appended whole", len(batch))
            return _NOTHING
        last = batch[-1][0]
        state = self._clients.state_for_publisher(pid)
        if state is not None and last > state.last_seq:
            state.last_seq = last
            state.bookmark_seq = max(state.bookmark_seq, last)
            self._durability.sequence_moved(state)
        self._counters["publishes"] += len(batch)
        self._delivery.topics.published_run(batch, topics)
        self._appended()
        route_for = self._index.route
        if not any([route_for(mt, topic) for topic in distinct]):
            return Ingested(journaled=len(batch))  # no subscription takes any of them
        x = fields.get("x")
        cid = None if x is None else str(x)
        routes, deliver = self._index.routes, self._delivery.deliver_plain
        for seq, topic, payload in batch:
            route = routes.get((mt, topic))
            if route is None:
                route = route_for(mt, topic)
            if route:
                deliver(route, topic, payload, cid, mt, f"{pid}|{seq}|")
        return Ingested(journaled=len(batch))

    def _apply(self, record: JournalRecord, *, recovering: bool) -> bool:
        """Apply a journaled record to its SOW topics (``recovering``: only those behind it,
        a failure other than storage trouble is logged) and, unless recovering, deliver
        what it changes. Returns whether a SOW topic took it."""
        mt = str(record.fields.get("mt", "json"))
        if record.command == "sow_delete":
            return self._apply_delete(record, mt, recovering=recovering)
        sow = self._sows.topic(record.topic, mt)
        if sow is None:
            if not recovering:
                route = self._index.route(mt, record.topic)
                if route:
                    x = record.fields.get("x")
                    self._delivery.deliver_plain(
                        route,
                        record.topic,
                        record.payload,
                        None if x is None else str(x),
                        mt,
                        record.bookmark,
                    )
            return False
        if recovering and sow.journal_index >= record.index:
            return False
        doc = decode(mt, record.payload)
        k = record.fields.get("k")
        sow_key = str(k) if k is not None and doc is None else None
        prev_doc: Any = NO_PREVIOUS
        if not recovering:
            key = sow.compute_key(doc, sow_key)
            if key in sow:
                prev_doc = sow.doc(key)
        now = record.timestamp / 1_000_000
        x = record.fields.get("x")
        try:
            sow_record, _previous = sow.publish(
                record.payload,
                doc=doc,
                sow_key=sow_key,
                bookmark=record.bookmark,
                timestamp=format_timestamp(now),
                correlation_id=None if x is None else str(x),
                expiration=_expiration(record.fields.get("e"), now),
                journal_index=record.index,
            )
        except sqlite3.Error:
            raise  # storage trouble: a recovery's batch is rolled back, recovery stops
        except Exception:
            if not recovering:
                raise
            logger.exception("recovering SOW %r from journal record %d", sow.topic, record.index)
            return False
        if not recovering:
            self._deliver_sow(mt, sow, sow_record, doc, prev_doc)
        return True

    def _apply_delete(self, record: JournalRecord, mt: str, *, recovering: bool) -> bool:
        try:
            matcher = compile_topic(record.topic)
        except TopicError:
            return False
        fields = record.fields
        filter_text = fields.get("filter")
        predicate = compile_filter(str(filter_text)) if filter_text else None
        keys_text = fields.get("sow_keys")
        keys = split_list(keys_text) if keys_text else None
        data_doc = decode(mt, record.payload) if record.payload else None
        k = fields.get("k")
        sow_key = str(k) if k is not None else None
        applied = False
        for sow in self._sows.matching(mt, matcher):
            if recovering and sow.journal_index >= record.index:
                continue
            try:
                gone = sow.delete(
                    predicate,
                    keys=keys,
                    data_doc=data_doc,
                    sow_key=sow_key if record.payload or sow_key else None,
                    journal_index=record.index,
                )
            except sqlite3.Error:
                raise
            except Exception:
                if not recovering:
                    raise
                logger.exception("recovering a sow_delete on %r", sow.topic)
                continue
            applied = True
            if not recovering:
                self._delivery.sow_removed(sow, gone, "deleted")
        return applied


def _expiration(e: str | int | None, now: float) -> float | None:
    """The expiration time of a journaled record (its ``e`` field: seconds)."""
    if e is None:
        return None
    try:
        seconds = float(e)
    except ValueError:
        return None
    return now + seconds if seconds > 0 else None
