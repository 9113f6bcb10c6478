"""Publish commands: ``p``, ``delta_publish``, ``sow_delete``, and the batched publish runs.

A publish is checked here (topic, sequence, de-duplication of a sequence at or below the
client name's last one) and acknowledged; what it does to the server goes through the ingest
pipeline (:mod:`.ingest`). Runs of consecutive publishes of one shape that one read brought
(:meth:`Publishing.run`) are journaled as one batch, with the semantics of one by one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from ampsclient.protocol.header import Header

from .. import accel
from .composite_codec import stats_ack_refusal
from .durability import Durability
from .hooks import BrokerHooks
from .ingest import ClientDelete, ClientPublish, ClientRun, Ingest
from .payload import decode
from .sow_service import SowService
from .state import Connection
from .txlog import TxLog
from .wire import (
    COMPLETED,
    PERSISTED,
    PROCESSED,
    RECEIVED,
    STATS,
    CommandFailure,
    ack_flags,
    command_filter,
    command_matcher,
    command_options,
    parse_plain_publish,
    parse_seq_publish,
    publish_header,
    scan_publishes,
    send_acks,
    sequence_of,
    split_list,
    text,
)

__all__ = ["Publishing"]

logger = logging.getLogger(__name__)

_new: Final = tuple.__new__
"""``_new(ClientPublish, (...))``: the named tuple without its Python ``__new__`` (hot path)."""

_scan: Final = accel.scan_publishes or scan_publishes
"""Takes the batchable publishes of a run (C, or its Python twin)."""

Failed = Callable[[Connection, Header, Exception], None]
"""Answers a failed command (failure acks, counters)."""


def _refuse_composite_stats(conn: Connection) -> None:
    """A publish or ``sow_delete`` asking for a ``stats`` ack on a composite connection: the
    guide's composite restriction (no stats acks, whatever the module).

    Raises:
        CommandFailure: ``invalid options``, naming the type.
    """
    refusal = stats_ack_refusal(conn.mt)
    if refusal is not None:
        raise CommandFailure("invalid options", refusal)


class Publishing:
    """The publish commands of one broker."""

    def __init__(
        self,
        *,
        txlog: TxLog | None,
        hooks: BrokerHooks,
        sows: SowService,
        ingest: Ingest,
        durability: Durability,
        counters: dict[str, int],
        failed: Failed,
    ) -> None:
        self._txlog = txlog
        self._hooks = hooks
        self._sows = sows
        self._ingest = ingest
        self._durability = durability
        self._counters = counters
        self._failed = failed

    # ------------------------------------------------------------------ one publish

    def publish(
        self, conn: Connection, hdr: Header, payload: bytes, end: int, *, delta: bool
    ) -> None:
        """``p`` / ``delta_publish`` with a decoded header."""
        topic = text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "publish without a topic")
        flags = ack_flags(hdr)
        if flags & STATS:
            _refuse_composite_stats(conn)
        seq = sequence_of(hdr)
        state = conn.state
        assert state is not None
        if seq is not None and seq <= state.last_seq:
            self._counters["duplicates"] += 1
            send_acks(conn.session.send, hdr, flags & (RECEIVED | PROCESSED))
            if flags & PERSISTED:
                self._durability.note_persisted(conn)
            return
        done = self._ingest.ingest(ClientPublish(conn, topic, hdr, payload, end, delta, seq))
        if flags:
            send_acks(conn.session.send, hdr, flags & (RECEIVED | PROCESSED | COMPLETED | STATS))
        if seq is not None:
            state.last_seq = seq
            index = None if done.record is None else done.record.index
            self._sequenced(conn, flags, index, seq)

    def _sequenced(self, conn: Connection, flags: int, index: int | None, seq: int) -> None:
        """Accepted sequence ``seq`` (journal record ``index``, if recorded): acknowledged as
        persisted when asked for, else only noted for the logon ack's ``s`` (no ack is sent
        that the client did not ask for)."""
        if flags & PERSISTED:
            self._durability.note_persisted(conn, index, seq)
            return
        state = conn.state
        assert state is not None
        if not state.durable_wait:  # else the pending group commit's ack brings it up
            state.ack_seq = state.last_seq

    def publish_one(
        self, conn: Connection, topic: str, seq: int | None, payload: bytes, end: int
    ) -> None:
        """A fast-shaped publish (``{"c":"p","t":"T"}BODY`` when ``seq`` is ``None``, else
        one asking only for a persisted ack); failures are answered here."""
        try:
            if seq is None:
                self._ingest.ingest(
                    _new(ClientPublish, (conn, topic, None, payload, end, False, None))
                )
                return
            state = conn.state
            assert state is not None
            if seq <= state.last_seq:
                self._counters["duplicates"] += 1
                self._durability.note_persisted(conn)
                return
            done = self._ingest.ingest(
                _new(ClientPublish, (conn, topic, None, payload, end, False, seq))
            )
            state.last_seq = seq
            index = None if done.record is None else done.record.index
            self._durability.note_persisted(conn, index, seq)
        except Exception as exc:
            self._failed(conn, publish_header(topic, seq), exc)

    # ------------------------------------------------------------------ runs

    def run(
        self, conn: Connection, payloads: Sequence[bytes], start: int, *, plain: bool = False
    ) -> int:
        """Handle the run of sequenced publishes (or, with ``plain``, of plain publishes) at
        ``payloads[start:]``; returns the position after the last one handled (``start``
        when there is no run to batch).

        Publishes to recorded, non-SOW topics are appended with one
        :meth:`Journal.append_many` (one timestamp for the batch), followed by one group commit
        request, one live-replay pump and, for sequenced publishes, one persisted-ack
        bookkeeping entry (its last ``(index, sequence)``: the ack waits for the commit
        covering the whole batch). Plain publishes get the next sequence numbers of their
        client name, as one by one. Plain subscribers get each message, in order, after the
        batch is journaled. Anything else in the run (duplicates, SOW or unrecorded topics,
        entitlement refusals) is handled as one by one, after what was batched before it.
        """
        txlog = self._txlog
        state = conn.state
        if txlog is None or state is None:
            return start
        mt = conn.mt
        guard = self._hooks.guard
        parse = parse_plain_publish if plain else parse_seq_publish
        records = txlog.records
        sow_names = self._sows.by_name
        # topics seen in this run that batch (no SOW, recorded); the scanner takes publishes
        # to them without Python code per message (without a guard: it checks each one)
        batching: dict[str, bool] = {}
        scan = _scan if guard is None else None
        if type(payloads) is not list:
            payloads = list(payloads)
        batch: list[tuple[int, str, bytes]] = []
        last_seq = state.last_seq
        n = len(payloads)
        i = start
        while i < n:
            if scan is not None and batching:
                j, taken = scan(payloads, i, plain, last_seq, batching)
                if j > i:
                    batch += taken
                    last_seq = taken[-1][0]
                    i = j
                    if i >= n:
                        break
            payload = payloads[i]
            parsed = parse(payload)
            if parsed is None:
                break
            topic, seq, end = parsed
            if (seq is None or seq > last_seq) and topic not in sow_names and records(mt, topic):
                if guard is not None:
                    try:
                        guard.check_write(conn, topic)
                    except Exception as exc:
                        self._commit(conn, batch, plain)
                        batch = []
                        self._failed(conn, publish_header(topic, seq), exc)
                        i += 1
                        if conn.closed:
                            return i
                        continue
                batching[topic] = True
                last_seq = last_seq + 1 if seq is None else seq
                batch.append((last_seq, topic, payload[end:]))
            else:  # duplicate, SOW topic, unrecorded topic: exactly the one-by-one path
                self._commit(conn, batch, plain)
                batch = []
                self.publish_one(conn, topic, seq, payload, end)
                last_seq = state.last_seq
                if conn.closed:
                    return i + 1
            i += 1
        self._commit(conn, batch, plain)
        return i

    def _commit(self, conn: Connection, batch: list[tuple[int, str, bytes]], plain: bool) -> None:
        """Journal, acknowledge (once durable; not ``plain`` publishes) and route a batch
        from :meth:`run`."""
        if not batch:
            return
        txlog = self._txlog
        assert txlog is not None
        before = txlog.journal.last_index
        try:
            self._ingest.ingest(ClientRun(conn, batch, not plain))
        except CommandFailure as exc:
            if txlog.journal.last_index != before:  # pragma: no cover - partly written: all failed
                logger.exception("journal append failed for %r", conn)
                for seq, topic, _data in batch:
                    self._failed(conn, publish_header(topic, None if plain else seq), exc)
                return
            # nothing stored: one by one, for each message's own outcome
            for seq, topic, data in batch:
                self.publish_one(conn, topic, None if plain else seq, b"{}" + data, 2)
                if conn.closed:
                    return

    # ------------------------------------------------------------------ sow_delete

    def sow_delete(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        """``sow_delete`` by filter, keys or data; on a queue topic, a queue acknowledgement
        (``BrokerHooks.queues``; a bookmark-only one on another topic fails with
        ``invalid topic``)."""
        topic = text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "sow_delete without a topic")
        flags = ack_flags(hdr)
        if flags & STATS:
            _refuse_composite_stats(conn)
        state = conn.state
        assert state is not None
        seq = sequence_of(hdr)
        duplicate = seq is not None and seq <= state.last_seq
        queues = self._hooks.queues
        index = None
        if queues is not None and queues.is_queue(conn.mt, topic):  # a queue acknowledgement
            if duplicate:
                self._counters["duplicates"] += 1
                deleted = topic_matches = 0
            else:
                predicate = command_filter(hdr, message_type=conn.mt)[1]
                deleted, topic_matches, index = queues.acknowledge(conn, hdr, predicate)
            self._sow_delete_acks(conn, hdr, flags, seq, duplicate, index, deleted, topic_matches)
            return
        options = command_options(hdr)
        if options:  # cancel/expire: queue acknowledgements only
            raise CommandFailure(
                "invalid options",
                f"option {next(iter(options))!r}: only a queue acknowledgement takes options",
            )
        matcher = command_matcher(topic)
        guard = self._hooks.guard
        if guard is not None:
            matcher = guard.matcher(conn, hdr, matcher)
        body = payload[end:]
        filter_text, predicate = command_filter(hdr, message_type=conn.mt)
        keys = split_list(hdr.get("sow_keys")) if hdr.get("sow_keys") else None
        queue_ack = text(hdr.get("bm")) is not None and filter_text is None and keys is None
        queue_ack = queue_ack and not body
        deleted = topic_matches = 0
        if queue_ack and not duplicate:  # the bookmark form is for queue topics only
            raise CommandFailure("invalid topic", f"{topic!r} is not a queue (bookmark ack)")
        elif duplicate:
            self._counters["duplicates"] += 1
        else:
            sows = self._sows.for_query(conn.mt, matcher)
            self._sows.check_writable(sows)
            txlog = self._txlog
            recorded = txlog is not None and any(
                txlog.records(s.message_type, s.topic) for s in sows
            )
            sow_key = text(hdr.get("k"))
            data_doc: Any = None
            if body:
                data_doc = decode(conn.mt, body)
                if data_doc is None and not sow_key:
                    raise CommandFailure("bad sow key", "cannot compute a SOW key for the data")
            done = self._ingest.ingest(
                ClientDelete(
                    conn,
                    topic,
                    sows,
                    predicate,
                    filter_text,
                    keys,
                    sow_key,
                    data_doc,
                    body,
                    seq,
                    recorded,
                )
            )
            deleted, topic_matches = done.deleted, done.topic_matches
            index = None if done.record is None else done.record.index
        self._sow_delete_acks(conn, hdr, flags, seq, duplicate, index, deleted, topic_matches)

    def _sow_delete_acks(
        self,
        conn: Connection,
        hdr: Header,
        flags: int,
        seq: int | None,
        duplicate: bool,
        index: int | None,
        deleted: int,
        topic_matches: int,
    ) -> None:
        """A ``sow_delete``'s acks, and its sequence noted (``persisted`` acks are conflated)."""
        state = conn.state
        assert state is not None
        send_acks(conn.session.send, hdr, flags & (RECEIVED | PROCESSED))
        if seq is not None:
            if not duplicate:
                state.last_seq = seq
                self._sequenced(conn, flags, index, seq)
            elif flags & PERSISTED:
                self._durability.note_persisted(conn)
        stats = {"records_deleted": deleted, "matches": deleted, "topic_matches": topic_matches}
        send_acks(conn.session.send, hdr, flags & (COMPLETED | STATS), extra=stats)
