"""The queues of one broker: intake, queue subscriptions, acknowledgements, timers, durability.

How it plugs into the engine (small hooks, no queue logic in the engine's files):

* **Intake.** Each queue owns an internal subscription, in the broker's routing index, to each
  of its underlying topics (with the queue's ``Filter``). Every message published to an
  underlying topic (a client's publish, a run, a replicated record) is therefore handed to
  :meth:`QueueEngine.intake` by the ordinary delivery code, after it is journaled (a run of
  plain publishes to :meth:`QueueEngine.intake_run`, the connection's ``run_sink``); the
  plain publish path is unchanged and costs nothing when no queue is configured.
* **Subscriptions.** ``subscribe`` to a queue topic (no bookmark) is taken by
  :meth:`QueueEngine.subscribe` (``BrokerHooks.queues``); the subscription is registered
  with its connection like any other, and its end (``unsubscribe``, ``replace``, disconnect)
  reaches :meth:`QueueEngine.removed` through the subscription table.
* **Acknowledgements.** A ``sow_delete`` on a queue topic is taken by
  :meth:`QueueEngine.acknowledge`: one bookmark or a comma list (``bookmark``/``bm``), options
  ``cancel``/``expire``, or the filter form.

Durability: the acknowledgements (and expirations, and at-most-once deliveries) are
journaled as ``sow_delete`` records on the queue topic carrying the bookmarks in ``bm``,
under the queues' own publisher id. ``<instance>.queues.ack`` in the journal directory holds, per
queue, the journal index before which every message is acknowledged or expired; a restart
scans the journal from there (from the ``RecoveryPoint`` without one), re-enqueues what the
underlying topics received and applies the journaled removals, so that what was
acknowledged stays acknowledged and everything else is delivered again. The journal is
pinned at the oldest such point (journal management never removes a file still holding an
unacknowledged queue message).

On an instance with ``<Replication>``, ``Queue`` and ``GroupLocalQueue`` are replicated
queues: message ownership, transfer and proxied transfer live in :mod:`.replicated`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient.protocol.header import Header

from ..config_values import ConfigError
from ..engine.filters import compile_expression, compile_filter
from ..engine.journal import JournalError
from ..engine.payload import decode
from ..engine.session import CallLater, TimerHandle
from ..engine.state import Connection, Subscription
from ..engine.storage_faults import StorageFaults
from ..engine.subscriptions import SubscriptionTable
from ..engine.topics import TopicMatcher, compile_topic
from ..engine.txlog import TxLog
from ..engine.wire import (
    COMPLETED,
    PERSISTED,
    PROCESSED,
    RECEIVED,
    CommandFailure,
    ack_flags,
    command_options,
    int_field,
    send_ack,
    send_acks,
    split_list,
)
from . import acking, intake, speedups
from .config import QueueConfig
from .dead_letter import DeadLetters
from .depth import Inactive, Waiting
from .expiration import MessageExpiry
from .framing import NEVER, LeaseFrames
from .intake import Parsed, parse_frame
from .metadata_file import MetadataFiles
from .model import Queue, QueueMessage, QueueSub
from .recovery import Replay
from .replicated import ReplicatedQueues
from .sow_subscribe import answer_query, queue_sow_and_subscribe
from .view_config import ViewConfig
from .views import QueueViews

__all__ = ["ACK_FILE", "NEVER", "QueueEngine", "QueueStartError"]

_ACK: Final = {"queue": 1}

logger = logging.getLogger(__name__)

# each C when built, else its Python twin
plain_run: Final = speedups.plain_run or intake.plain_run
run_pairs: Final = speedups.run_pairs or intake.run_pairs
split_bookmarks: Final = speedups.split_bookmarks or acking.split_bookmarks

ACK_FILE: Final = "queues.ack"
"""The ack-point file in the journal directory is ``<journal name>.queues.ack``."""


_COMMIT_DELAY: Final = 0.02
"""Seconds a journaled acknowledgement waits for a group commit nobody waits for."""

_ACK_POINT_INTERVAL: Final = 1.0
"""Seconds between writes of ``queues.ack`` while acknowledgements come in."""


class QueueStartError(ConfigError):
    """A queue cannot run with this configuration (start-up fails): an underlying topic that
    is not recorded in the transaction log, or no transaction log at all."""


class _Intake:
    """The session of a queue's internal subscription: delivered frames enter the queue."""

    def __init__(self, engine: QueueEngine, queue: Queue) -> None:
        self._engine = engine
        self._queue = queue

    def send(self, payload: bytes) -> None:
        self._engine.intake(self._queue, (payload,))

    def send_many(self, payloads: list[bytes]) -> None:
        self._engine.intake(self._queue, payloads)

    def take_run(self, pid: int, batch: list[tuple[int, str, bytes]]) -> None:
        self._engine.intake_run(self._queue, pid, batch)

    def backlog(self) -> int:
        return 0

    def disconnect(self, reason: str) -> None:  # pragma: no cover - never disconnected
        logger.warning("queue %r intake: disconnect %s ignored", self._queue.name, reason)

    def start_heartbeat(self, interval: float) -> None:  # pragma: no cover
        return None


class QueueEngine:
    """The queues of one broker (see the module docstring).

    Args:
        configs: the configured queues.
        txlog: the transaction log (queues need one).
        table: the broker's subscription table (intake subscriptions go into it).
        request_sync: asks for a group commit after a journal append.
        call_later: timers (lease expiry, expiration, ack-point writes); ``None``: only
            explicit :meth:`tick` calls.
        clock: epoch seconds.
        instance: this instance's name (``GroupLocalQueue`` ownership).
        replicated: the instance replicates (``Queue``/``GroupLocalQueue`` are then
            replicated queues, see :mod:`.replicated`).
        expiry: a message's own expiration (SOW underlying topics, ``ExpirationModel``);
            ``None``: messages carry none.

    Raises:
        QueueStartError: an underlying topic is not recorded in the transaction log.
    """

    def __init__(
        self,
        configs: Sequence[QueueConfig],
        *,
        txlog: TxLog,
        table: SubscriptionTable,
        request_sync: Callable[[], None],
        call_later: CallLater | None,
        clock: Callable[[], float],
        instance: str,
        replicated: bool = False,
        expiry: MessageExpiry | None = None,
        views: Sequence[ViewConfig] = (),
        faults: StorageFaults | None = None,
    ) -> None:
        self._txlog = txlog
        self._faults = faults if faults is not None else StorageFaults()
        self._table_remove = table.remove
        self._journal = txlog.journal
        self._request_sync = request_sync
        self._call_later = call_later
        self._clock = clock
        self.queues: dict[tuple[str, str], Queue] = {}
        """The queues by ``(message type, name)``."""
        self._names: set[str] = set()
        self._subs: dict[int, tuple[Queue, QueueSub]] = {}
        self._pid = publisher_id_for(f"{instance}/queues")
        self._seq = self._journal.last_sequence(self._pid)
        self._timer: TimerHandle | None = None
        self._commit_timer: TimerHandle | None = None
        self._timer_at: float | None = None
        self._ack_timer: TimerHandle | None = None
        self._ack_dirty = False
        self._pin: object | None = None
        self._points: dict[str, int] = {}
        self._ack_path = Path(self._journal.directory) / f"{self._journal.name}.{ACK_FILE}"
        self.counters: dict[str, int] = {"acks": 0, "bad_acks": 0, "ack_records": 0}
        self.dead_letters: DeadLetters | None = None
        """The dead-letter actions run on expirations (set by the broker)."""
        self._expiry = expiry
        self.inactive: dict[str, Inactive] = {}
        """``TargetQueueDepth`` queues: their messages not active yet, by queue name."""
        self.publish_targets: dict[tuple[str, str], str] = {
            (c.message_type, c.name): c.default_publish_target
            for c in configs
            if c.default_publish_target is not None
        }
        """``DefaultPublishTarget``: ``(message type, queue name)`` -> the topic a publish to
        the queue's name goes to (the broker's ingest re-routes it)."""
        self._timed = expiry is not None or any(c.lease_period or c.expiration for c in configs)
        self._stale = False
        self.replica: ReplicatedQueues | None = None
        """Ownership of the replicated queues (``None``: the instance does not replicate)."""
        if replicated and any(c.kind != "LocalQueue" for c in configs):
            self.replica = ReplicatedQueues(
                self, self._journal, configs, instance=instance, own_pid=self._pid, clock=clock
            )
        self.metadata = MetadataFiles(self._journal, faults=self._faults)  # FileBackedMetadata
        for i, cfg in enumerate(configs):
            self._check(cfg)
            owner = replicated or cfg.initial_owner is None or cfg.initial_owner == instance
            self._add(-(i + 1), cfg, owner, table)
        self.views = QueueViews(views, queues=self.queues, call_later=call_later) if views else None
        """The views over the queues (``None``: none configured)."""
        self._refresh_points()
        self._write_points()
        self._arm()

    def _check(self, cfg: QueueConfig) -> None:
        """Refuse a queue this instance cannot run (:class:`QueueStartError`)."""
        for topic in cfg.topics():
            if compile_topic(topic).is_regex:
                topic = cfg.default_publish_target or topic  # the one topic known for sure
            if not self._txlog.records(cfg.message_type, topic):
                raise QueueStartError(
                    f"queue {cfg.name!r}: underlying topic {topic!r} "
                    f"({cfg.message_type}) is not recorded in the transaction log"
                )

    def _add(self, conn_id: int, cfg: QueueConfig, owner: bool, table: SubscriptionTable) -> None:
        """Create a queue, rebuild it from the journal and subscribe its intake (an internal
        connection ``conn_id``) to its underlying topics."""
        mt = cfg.message_type
        queue = Queue(
            cfg,
            decode=functools.partial(decode, mt),
            owner=owner,
            priority=compile_expression(cfg.priority) if cfg.priority else None,
            barrier=compile_filter(cfg.barrier) if cfg.barrier else None,
        )
        self.queues[(mt, cfg.name)] = queue
        queue.measure_acks = self.replica is not None and cfg.kind != "LocalQueue"
        self._names.add(cfg.name)
        if cfg.target_queue_depth is not None:
            replica = self.replica_of(queue) if self.replica is not None else None
            self.inactive[cfg.name] = Inactive(
                queue,
                cfg.target_queue_depth,
                self._journal,
                enqueue=None if replica is None else functools.partial(replica.enqueue, queue),
            )
        self._recover(queue)
        predicate = compile_filter(cfg.filter) if cfg.filter else None
        session = _Intake(self, queue)
        conn = Connection(conn_id, session, message_type=mt, transport="queue", peer=cfg.name)
        conn.logged_on = True
        conn.run_sink = session.take_run
        for n, topic in enumerate(cfg.topics()):
            table.add(
                Subscription(
                    conn,
                    f"queue-intake-{n}",
                    compile_topic(topic),
                    filter_text=cfg.filter,
                    predicate=predicate,
                    options={},
                    delta=False,
                )
            )

    # ------------------------------------------------------------------ lookups

    def is_view(self, mt: str, topic: str) -> bool:
        """``topic`` is a view (over a queue) of message type ``mt``."""
        return self.views is not None and self.views.is_view(mt, topic)

    def is_queue(self, mt: str, topic: str) -> bool:
        """``topic`` is a queue of message type ``mt``."""
        return topic in self._names and (mt, topic) in self.queues

    def replica_of(self, queue: Queue) -> ReplicatedQueues | None:
        """The ownership layer when ``queue`` is a replicated queue."""
        return self.replica if queue.config.kind != "LocalQueue" else None

    # ------------------------------------------------------------------ intake

    def intake(self, queue: Queue, frames: Sequence[bytes]) -> None:
        """Messages published to one of ``queue``'s underlying topics (delivery frames); the
        queue then offers what it can, once for the whole batch. Runs of plain frames go in
        with one call (:func:`.intake.plain_run`, :meth:`Queue.enqueue_run`)."""
        now = self._clock()
        expiry = self._expiry if queue.config.expiration_model != "queue" else None
        mt = queue.config.message_type
        added = False
        pos, count = 0, len(frames)
        while pos < count:
            pos, run = plain_run(frames, pos, expiry is not None)
            other = None
            if pos < count:  # a frame in another form
                other = parse_frame(frames[pos], mt, expiry)
                pos += 1
            added = self._enqueue(queue, run, other, now) or added
        self._offer_new(queue, added)

    def intake_run(self, queue: Queue, pid: int, batch: list[tuple[int, str, bytes]]) -> None:
        """A journaled run of plain publishes ``(sequence, topic, body)`` of publisher ``pid``
        to an underlying topic (the intake connection's ``run_sink``): what :meth:`intake`
        does with their delivery frames, without making them and reading them back."""
        run = run_pairs(f"{pid}|", batch)
        self._offer_new(queue, self._enqueue(queue, run, None, self._clock()))

    def _enqueue(
        self, queue: Queue, run: list[tuple[str, bytes]], other: Parsed | None, now: float
    ) -> bool:
        """Enqueue a run of plain messages, then ``other``; whether any was added."""
        replica = self.replica_of(queue) if self.replica is not None else None
        inactive = self.inactive.get(queue.name) if self.inactive else None
        added = False
        parsed: list[Parsed] = []
        if run and replica is None and inactive is None:
            added = queue.enqueue_run(run, now) > 0
        elif run:
            parsed = [(bookmark, data, None, None) for bookmark, data in run]
        if other is not None:
            parsed.append(other)
        for bookmark, data, x, expires in parsed:
            if bookmark is None:  # a topic a regex UnderlyingTopic matches, not journaled
                logger.warning("queue %r: a message without a bookmark not enqueued", queue.name)
            elif inactive is not None:  # TargetQueueDepth
                added = inactive.admit(Waiting(bookmark, data, x, now, expires)) or added
            elif replica is not None:
                added = replica.enqueue(queue, bookmark, data, x, now, expires=expires) or added
            else:
                added = queue.enqueue(bookmark, data, x, now, expires=expires) or added
        return added

    def _offer_new(self, queue: Queue, added: bool) -> None:
        if added:
            if queue.subs:
                self.pump(queue)
            elif self.views is not None:
                self.views.changed(queue)
            if self._timed:
                self._arm()

    # ------------------------------------------------------------------ subscriptions

    def subscribe(
        self,
        conn: Connection,
        hdr: Header,
        sub: Subscription,
        replaced: Subscription | None,
        flags: int,
    ) -> bool:
        """Take a subscription to a queue topic (``False``: not a queue subscription).

        The processed ack carries the effective backlog, ``"o":"max_backlog=N"``. A
        subscription to a view over a queue is taken too (it leases nothing).
        """
        views = self.views
        if views is not None and views.subscribe(
            conn, hdr, sub, replaced, flags, self._table_remove
        ):
            return True
        if sub.matcher.is_regex or not self.is_queue(conn.mt, sub.matcher.topic):
            return False
        queue = self.queues[(conn.mt, sub.matcher.topic)]
        requested = int_field(sub.options.get("max_backlog")) if sub.options else None
        if requested is not None and requested < 1:
            raise CommandFailure("invalid options", "max_backlog must be >= 1")
        backlog = min(requested or 1, queue.config.max_per_subscription_backlog)
        qsub = QueueSub(sub, conn, backlog, sub.predicate)
        previous = self._subs.get(id(replaced)) if replaced is not None else None
        if previous is not None and replaced is not None:
            queue_before, old = previous
            del self._subs[id(replaced)]
            if replaced.conn.subs.get(replaced.sub_id) is replaced:
                del replaced.conn.subs[replaced.sub_id]
            if queue_before is queue:
                queue.take_over(old, qsub)
            else:
                self._expired(queue_before, _lease_ends(queue_before.discard(old, self._clock())))
                queue.add(qsub)
        else:
            if replaced is not None:
                self._table_remove(replaced)
            queue.add(qsub)
        conn.subs[sub.sub_id] = sub
        self._subs[id(sub)] = (queue, qsub)
        send = conn.session.send
        if flags & RECEIVED:
            send_ack(send, hdr, "received", sub_id=sub.sub_id)
        if flags & PROCESSED:
            send_ack(
                send, hdr, "processed", sub_id=sub.sub_id, extra={"o": f"max_backlog={backlog}"}
            )
        send_acks(send, hdr, flags & COMPLETED, sub_id=sub.sub_id)
        self.pump(queue)
        self._arm()
        return True

    def removed(self, sub: Subscription) -> None:
        """A subscription ended (``unsubscribe``, disconnect): its leases come back."""
        entry = self._subs.pop(id(sub), None)
        if entry is None:
            if self.views is not None:
                self.views.removed(sub)
            return
        queue, qsub = entry
        self._expired(queue, _lease_ends(queue.discard(qsub, self._clock())))
        self.pump(queue)

    # ------------------------------------------------------------------ acknowledgements

    def acknowledge(
        self,
        conn: Connection,
        hdr: Header,
        predicate: Callable[[Any], bool] | None,
    ) -> tuple[int, int, int | None]:
        """A ``sow_delete`` on a queue topic: ``(records_deleted, topic_matches, journal
        index of the ack record or None)``.

        Raises:
            CommandFailure: ``invalid options`` (an option other than ``cancel``/``expire``),
                ``invalid bookmark`` (an empty list), ``tx store failure`` (the transaction
                log cannot take the ack record: a full disk; nothing changed).
        """
        topic = str(hdr.get("t"))
        queue = self.queues[(conn.mt, topic)]
        options = command_options(hdr)
        option: str | None = None
        for name in options:
            if name in ("cancel", "expire") and option is None:
                option = name
            else:
                self.counters["bad_acks"] += 1
                raise CommandFailure("invalid options", f"queue acknowledgement option {name!r}")
        now = self._clock()
        matches = len(queue)
        joined: str | None = None
        if predicate is not None:
            bookmarks = [
                msg.bookmark
                for msg in list(queue.messages.values())
                if _matches(queue, msg, predicate)
            ]
        else:
            value = hdr.get("bm")
            split = split_bookmarks(value)  # (None: in some other form)
            joined = value if split is not None else None
            bookmarks = split if split is not None else split_list(value)
            if not bookmarks:
                self.counters["bad_acks"] += 1
                raise CommandFailure("invalid bookmark", "queue acknowledgement without bookmarks")
        self.counters["acks"] += 1
        try:  # before anything changes: an ack the log cannot take changes nothing
            self._journal.make_room()
        except OSError as exc:
            raise self._refused(exc) from exc
        inactive = self.inactive.get(queue.name) if self.inactive else None
        early: list[str] = []
        if inactive is not None and option is None:  # not active yet: it never will be
            early = [b for b in bookmarks if inactive.remove(b)]
            bookmarks = [b for b in bookmarks if b not in early] if early else bookmarks
        result = queue.ack(bookmarks, option=option, owner=conn, now=now, known=self.in_journal)
        if early:
            result.removed.extend(early)
        if result.expired:
            self._expired(queue, result.expired, journaled=True)  # letters before the removals
        removed = result.removed
        if result.deferred:  # not here yet: journaled too, so the acknowledgement replicates
            removed = removed + result.deferred  # (to the owner) and survives a restart
        if early or removed != bookmarks:
            joined = None  # (the journal gets what was removed; usually all, as they came)
        try:
            index = self.record(
                queue, removed, urgent=bool(ack_flags(hdr) & PERSISTED), joined=joined
            )
        except OSError as exc:  # (only if another append filled the buffer meanwhile)
            raise self._refused(exc) from exc
        if index is not None:
            for bookmark in result.deferred:
                queue.deferred_index[bookmark] = index
        self.pump(queue)
        if self._timed:  # (no queue has a lease period or an expiration: nothing to arm)
            self._arm()
        return len(result.removed), matches, index

    def _refused(self, exc: OSError) -> CommandFailure:
        """An acknowledgement the transaction log cannot take (a full disk): the log's
        condition (``journal``, reported once), and the refusal a publish gets there."""
        self._faults.failed("journal", str(self._journal.directory), exc)
        return CommandFailure("tx store failure", str(exc))

    # ------------------------------------------------------------------ queries

    def replay_matcher(self, mt: str, matcher: TopicMatcher) -> TopicMatcher:
        """A bookmark subscription to a queue topic is a plain bookmark replay of the queue's
        underlying topics (no leases, no acks); anything else replays itself."""
        if matcher.is_regex or not self.is_queue(mt, matcher.topic):
            return matcher
        topics = self.queues[(mt, matcher.topic)].config.topics()
        if len(topics) == 1:
            return compile_topic(topics[0])
        parts = [t if compile_topic(t).is_regex else "^" + re.escape(t) + "$" for t in topics]
        return compile_topic("|".join(f"(?:{p})" for p in parts))

    def query(self, conn: Connection, hdr: Header, matcher: TopicMatcher) -> bool:
        """A ``sow`` query of a queue topic (its available messages, nothing leased) or of a
        view over a queue (:func:`.sow_subscribe.answer_query`); ``False``: neither.

        Raises:
            CommandFailure: ``bad filter``, ``invalid options`` (a bookmark: no history).
        """
        if self.views is not None and self.views.query(conn, hdr, matcher):
            return True
        if matcher.is_regex or not self.is_queue(conn.mt, matcher.topic):
            return False
        answer_query(self.queues[(conn.mt, matcher.topic)], conn, hdr)
        return True

    def sow_and_subscribe(
        self,
        conn: Connection,
        hdr: Header,
        matcher: TopicMatcher,
        sub: Subscription,
        replaced: Subscription | None,
    ) -> None:
        """A ``sow_and_subscribe`` on a queue or a view over one
        (:func:`.sow_subscribe.queue_sow_and_subscribe`)."""
        queue_sow_and_subscribe(self, conn, hdr, matcher, sub, replaced)

    def in_journal(self, bookmark: str) -> bool:
        """The message ``bookmark`` reached the transaction log (or it is not ours): it is
        there, or its publisher's sequence is past it (journaled, then pruned)."""
        pid, _, rest = bookmark.partition("|")
        seq = rest.partition("|")[0]
        try:
            publisher, sequence = int(pid), int(seq)
        except ValueError:
            return True  # not a bookmark of this log: never deferred
        journal = self._journal
        if sequence <= journal.last_sequence(publisher):
            return True
        return journal.find_bookmark(publisher, sequence) is not None

    # ------------------------------------------------------------------ delivery

    def pump(self, queue: Queue) -> None:
        """Deliver what ``queue`` can lease now."""
        if self.views is not None:
            self.views.changed(queue)  # (recomputed once this turn of the loop is over)
        inactive = self.inactive.get(queue.name) if self.inactive else None
        if inactive is not None and inactive.waiting:
            inactive.refill()
        frames = LeaseFrames(queue.name, queue.subs, at_most_once=queue.at_most_once)
        leases = queue.offer(self._clock(), frames)
        gone = frames.add(leases) if leases else None
        for send_many, batch in frames.sends():
            send_many(batch)
        if gone:
            self.record(queue, gone)
        if inactive is not None and inactive.waiting and len(queue) < inactive.target:
            self.pump(queue)  # at-most-once deliveries left: the next ones become active

    def _expired(
        self,
        queue: Queue,
        expired: Sequence[tuple[QueueMessage, str]],
        *,
        journaled: bool = False,
    ) -> None:
        """Messages that left the queue by expiring, with their reason: the dead-letter
        actions (``queues.dead_letter``) run for each, then the removals are journaled (unless
        ``journaled``: an acknowledgement journals its own, after this). Letters first: the
        journal is durable in order, so a crash loses no letter of a removed message; a
        message whose removal was not durable yet comes back after the restart (processed
        then, or lettered a second time)."""
        if not expired:
            return
        dead_letters = self.dead_letters
        mt = queue.config.message_type
        for msg, reason in expired:
            logger.info("queue %r: message %s expired (%s)", queue.name, msg.bookmark, reason)
            if dead_letters is not None:
                dead_letters.expired(mt, queue.name, msg.data, reason, msg.x)
        if not journaled:
            self.record(queue, [msg.bookmark for msg, _reason in expired])

    # ------------------------------------------------------------------ journal

    def record(
        self,
        queue: Queue,
        bookmarks: Sequence[str],
        *,
        urgent: bool = False,
        extra: Any = None,
        joined: str | None = None,
    ) -> int | None:
        """Journal the removal of ``bookmarks`` from ``queue`` (with ``extra``: a transfer
        record of :mod:`.replicated` instead); its journal index. ``joined``: the bookmarks
        joined by commas already (an acknowledgement's own list).

        ``urgent``: someone waits for it to be durable (an ack asking for ``persisted``),
        so the group commit is requested now; otherwise within :data:`_COMMIT_DELAY` (or
        with the next publish's commit): a commit per acknowledgement would make every
        consumer's round trip wait for the journal thread.
        """
        if not bookmarks:
            return None
        self._seq += 1
        record = self._journal.append(
            publisher_id=self._pid,
            sequence=self._seq,
            topic=queue.name,
            command="sow_delete",
            payload=b"",
            fields={
                "mt": queue.config.message_type,
                "bm": ",".join(bookmarks) if joined is None else joined,
                **(extra or _ACK),
            },
        )
        self.counters["ack_records"] += 1
        if urgent or self._call_later is None:
            self._request_sync()
        elif self._commit_timer is None:
            self._commit_timer = self._call_later(_COMMIT_DELAY, self._commit_due)
        self._stale = True  # the ack point moves once this is durable (on_durable)
        return record.index

    def _commit_due(self) -> None:
        self._commit_timer = None
        self._request_sync()

    def _recover(self, queue: Queue) -> None:
        """Rebuild ``queue`` from the journal (from its saved point or its RecoveryPoint)."""
        journal = self._journal
        cfg = queue.config
        saved = self._load_points().get(_key(cfg))
        if saved is not None:
            start = saved
        elif cfg.recovery_point == "epoch":
            start = journal.first_index
        else:
            start = journal.last_index + 1
        replay = Replay(queue, expiry=self._expiry, inactive=self.inactive.get(cfg.name))
        replica = self.replica_of(queue)
        position = self.metadata.load(queue, replay, replica, max(start, journal.first_index))
        replay.scan(journal, position, replica)
        replay.done(self._clock())
        self._points[_key(cfg)] = start
        if replay.enqueued or replay.removed:
            logger.info(
                "queue %r recovered from journal index %d: %d messages, %d removed",
                cfg.name,
                start,
                len(queue),
                replay.removed,
            )

    def _load_points(self) -> dict[str, int]:
        try:
            data = json.loads(self._ack_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning(
                "%s unreadable (%s): queues recover from their RecoveryPoint", self._ack_path, exc
            )
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): int(v) for k, v in data.items() if isinstance(v, int)}

    def _refresh_points(self) -> bool:
        """Recompute each queue's ack point (the journal index of its oldest message, or
        the end of the log when it is empty; never past the record of an acknowledgement
        that came before its message (:meth:`_deferred_point`), nor, of a replicated queue,
        of a pending transfer; never past what is durable) and move the journal pin there;
        ``True`` when a point was held back by durability. Needs the journal open."""
        journal = self._journal
        limit = journal.durable_index + 1
        points: dict[str, int] = {}
        held = False
        for queue in self.queues.values():
            key = _key(queue.config)
            oldest = queue.oldest_bookmark()
            point = journal.last_index + 1
            if oldest is not None:
                pid, _, rest = oldest.partition("|")
                found = journal.find_bookmark(int(pid), int(rest.partition("|")[0]))
                # (not found: a bookmark of another log; keep the last point)
                point = found if found is not None else self._points.get(key, point)
            replica = self.replica_of(queue) if self.replica is not None else None
            if queue.deferred_index:
                point = self._deferred_point(queue, point)
            if replica is not None:
                pending = replica.oldest_pending_index(queue)
                if pending is not None:
                    point = min(point, pending)
            held = held or point > limit
            points[key] = max(self._points.get(key, 0), min(point, limit))
        self._points = points
        low = min(points.values(), default=None)
        old = self._pin
        self._pin = journal.pin(low) if low is not None else None
        if old is not None:
            journal.unpin(old)
        return held

    def _deferred_point(self, queue: Queue, point: int) -> int:
        """``point`` held at the record of an acknowledgement that came before its message
        (a consumer's ack replayed after a restart, its message republished later; or
        replicated): until the message comes, and once it came and the ack was applied,
        until ``point`` is past the message's record too. A restart from between the two
        records would enqueue the message again, with no removal after it (the removal
        happened in memory when it arrived)."""
        journal = self._journal
        deferred = queue.deferred
        held = point
        for bookmark, index in list(queue.deferred_index.items()):
            if bookmark not in deferred:  # applied since (an expired one is dropped by tick)
                pid, _, rest = bookmark.partition("|")
                try:
                    found = journal.find_bookmark(int(pid), int(rest.partition("|")[0]))
                except ValueError:
                    found = None
                if found is None or found < point:  # the point is past its message
                    del queue.deferred_index[bookmark]
                    continue
            held = min(held, index)
        return held

    def _write_points(self) -> None:
        """Write ``queues.ack`` (atomically: a temporary file renamed over it)."""
        tmp = self._ack_path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self._points, sort_keys=True))
            os.replace(tmp, self._ack_path)
        except OSError as exc:  # a full disk: reported once; the next write tries again
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._faults.failed("queues/ack", str(self._ack_path), exc)
            self._ack_dirty = True
            return
        if self._faults.active:
            self._faults.succeeded("queues/ack")

    def on_durable(self, durable: int) -> None:
        """A group commit completed (``BrokerHooks.durable_listeners``): move the ack
        points past what was acknowledged; the file is written at most once a second."""
        if self.replica is not None:
            self.replica.scan(durable)
        self.metadata.save(self.queues.values(), self.inactive)
        if not self._stale:
            return
        try:
            self._stale = self._refresh_points()  # still held back: again next commit
        except JournalError:  # closed: the points of the last refresh stand
            self._stale = False
            return
        self._ack_dirty = True
        if self._ack_timer is None and self._call_later is not None:
            self._ack_timer = self._call_later(_ACK_POINT_INTERVAL, self._ack_point_due)

    def _ack_point_due(self) -> None:
        self._ack_timer = None
        if self._ack_dirty:
            self._ack_dirty = False
            self._write_points()

    # ------------------------------------------------------------------ time

    def tick(self, now: float | None = None) -> None:
        """Expire leases and messages that are due; deliver what that frees."""
        now = self._clock() if now is None else now
        for queue in self.queues.values():
            expired, _returned = queue.tick(now)
            if expired:
                self._expired(queue, expired)
            self.pump(queue)

    def _arm(self) -> None:
        if self._call_later is None:
            return
        due = [d for d in (q.next_deadline() for q in self.queues.values()) if d is not None]
        if not due:
            return
        when = min(due)
        if self._timer is not None and self._timer_at is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._call_later(max(0.0, when - self._clock()) + 0.001, self._due)

    def _due(self) -> None:
        self._timer = None
        self._timer_at = None
        self.tick()
        self._arm()

    # ------------------------------------------------------------------ statistics, close

    def statistics(self) -> dict[str, dict[str, Any]]:
        """Per queue: ``queue_depth``, ``backlog`` (leased), ``max_backlog``,
        ``expired_leases``, ``age_of_oldest_lease``, ``seconds_behind`` (AMPS: the age of the
        oldest unacknowledged message, since this start), ``owned``, ``deferred_ack_count``,
        ``subscriptions`` and the running totals."""
        now = self._clock()
        out: dict[str, dict[str, Any]] = {}
        for queue in self.queues.values():
            cfg = queue.config
            messages = queue.messages.values()
            available = sum(1 for m in messages if m.lessee is None)
            oldest = min((m.enqueued for m in messages), default=now)
            out[cfg.name] = {
                "topic": cfg.name,
                "message_type": cfg.message_type,
                "semantics": cfg.semantics,
                "queue_depth": available,
                "backlog": queue.leased,
                "max_backlog": cfg.max_backlog,
                "messages": len(queue),
                "owned": len(queue) - queue.remote if queue.owner else 0,
                "proxied_transfer": self.replica is not None and cfg.name in self.replica.proxied,
                "age_of_oldest_lease": round(queue.oldest_lease_age(now), 3),
                "seconds_behind": round(max(0.0, now - oldest), 3),
                "deferred_ack_count": len(queue.deferred),
                "subscriptions": len(queue.subs),
                "target_queue_depth": cfg.target_queue_depth,
                "inactive_message_count": len(self.inactive.get(cfg.name) or ()),
                **queue.counters,
            }
        return out

    def close(self) -> None:
        """Write the ack points and stop the timers (the journal is still open)."""
        for timer in (self._timer, self._ack_timer, self._commit_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._ack_timer = self._commit_timer = None
        if self.views is not None:
            self.views.close()
        try:
            self._refresh_points()
        except JournalError:  # closed first: the points of the last refresh stand
            logger.debug("journal closed: queue ack points as of the last acknowledgement")
        self._write_points()
        self.metadata.save(self.queues.values(), self.inactive, force=True)


def _lease_ends(messages: list[QueueMessage]) -> list[tuple[QueueMessage, str]]:
    """Messages a returned lease expired: the lease was a delivery that did not succeed."""
    return [(msg, "max_deliveries") for msg in messages]


def _key(cfg: QueueConfig) -> str:
    return f"{cfg.message_type}/{cfg.name}"


def _matches(queue: Queue, msg: QueueMessage, predicate: Callable[[Any], bool]) -> bool:
    doc = decode(queue.config.message_type, msg.data)
    return doc is not None and bool(predicate(doc))
