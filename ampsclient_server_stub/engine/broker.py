"""The reference server's broker: every command's semantics, with no sockets and no asyncio.

The network layer (``ampsclient_server_stub.net``) turns bytes into payloads (header + body,
TCP-shaped whatever the transport) and calls :meth:`Broker.handle` once per payload; the
broker answers by calling ``send(payload)`` on the :class:`Session` of each connection it
writes to. Everything runs on one thread (the server's event loop), so a command is handled
completely (query snapshot, subscription registration, deliveries, acks) before the next
one: ``sow_and_subscribe`` is atomic by construction.

Semantics follow ``shared/protocol.md`` (wire shapes, verified against the official clients)
and ``shared/amps-semantics.md`` (server behaviour). Summary:

* ``logon`` must come first. Anything else before it gets a ``processed`` failure
  ``logon required`` when an ack was requested, else the connection is closed. A logon with
  a client name that is already connected disconnects the older connection.
* Acks: exactly the requested types (``received``, ``processed``, ``completed``, ``stats``;
  ``persisted`` is conflated; ``parsed`` is ignored), in that order, each its own frame
  echoing ``cid`` and ``sub_id``/``query_id``. Failures carry ``status: failure`` and the
  AMPS ``reason`` on the processed ack.
* Publishes are routed to every matching subscription with ONE frame per session whose
  ``sids`` lists that session's matching subscriptions. The payload is parsed at most once,
  and only when a filter or a SOW topic needs it.
* Persisted acks (publishes/sow_deletes carrying ``s`` and requesting ``persisted``) are
  cumulative: ``s`` is the highest sequence seen from that client name; a sequence at or
  below it is a duplicate (not routed again, still covered by the next ack). They are sent
  at most once per ``ack_conflation`` interval (default 5 ms, logon option
  ``ack_conflation=<duration>``) or after 256 messages, and always before a ``flush`` ack.
* Topics are scoped by message type, as in AMPS: a json subscription never sees a msgpack
  publish to a topic of the same name.
* Pause/resume apply to bookmark subscriptions only (their replay waits at its position in
  the log); on a plain subscription, or with ``live``, they are refused with ``invalid
  options`` (nothing is buffered, nothing is dropped).

Queues live in :mod:`ampsclient_server_stub.queues`, which the engine never imports: the
broker's builder passes their factory (``queues=``, :mod:`.queue_site`) and the broker plugs
the engine it returns into ``BrokerHooks.queues`` before anything runs; the hooks are frozen
once the broker is built. Not done: paginated subscriptions. Without a transaction log a
bookmark subscription fails with ``invalid topic`` (the topic is not recorded).

:class:`Broker` is a small facade over the engine's parts, one module each (docs/design.md
draws them): :mod:`.wire` (header readers, ack writers, publish recognizers), :mod:`.state`
(connections, client states, subscriptions), :mod:`.durability` (persisted acks, flushes),
:mod:`.routing` and :mod:`.delivery` (routing index, frames, OOF, live conflation),
:mod:`.sow_service` (SOW topics, queries, expiry, recovery, checkpoints),
:mod:`.replay_scheduler` (bookmark replays), :mod:`.ingest` (the one way a message enters:
client publish, journal recovery, replication), :mod:`.subscriptions`,
:mod:`.publishing`, :mod:`.subscribing` and :mod:`.commands` (the command handlers and their
dispatch table). Policies from other layers come in one :class:`~.hooks.BrokerHooks`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from ampsclient.exceptions import MalformedFrameError
from ampsclient.protocol.header import decode_header
from ampsclient_server_stub.config import DEFAULT_SERVER_NAME, ServerConfig, parse_duration
from ampsclient_server_stub.config_values import ConfigError
from ampsclient_server_stub.views.aggregated import Aggregated
from ampsclient_server_stub.views.engine import SowViews

from .clocks import steady_clock
from .command_options import check_command_options
from .commands import CommandHandlers, Handler
from .conflated_topics import ConflatedTopics
from .delivery import Delivery
from .durability import PERSISTED_ACK_BATCH, Durability
from .event_topics import EventTopics
from .hooks import BrokerHooks
from .ingest import Incoming, Ingest, Ingested, Journaled
from .publishing import Publishing
from .queue_site import QueueFactory, QueuePlugin, QueueSite
from .replay_scheduler import ReplayScheduler
from .routing import RoutingIndex
from .session import Authenticator, CallLater, Session, TimerHandle
from .sow import SowTopic
from .sow_service import SowService
from .state import (
    DEFAULT_ACK_CONFLATION,
    Clients,
    Connection,
    Subscription,
)
from .storage_faults import StorageFaults
from .subscribing import Subscribing
from .subscriptions import SubscriptionTable
from .txlog import PERSISTED_ACK_INTERVAL, Replay, TxLog
from .wire import (
    FAST_PUBLISH_SHAPES,
    CommandFailure,
    command_options,
    format_timestamp,
    parse_plain_publish,
    parse_queue_ack,
    parse_seq_publish,
)

__all__ = [
    "DEFAULT_ACK_CONFLATION",
    "PERSISTED_ACK_BATCH",
    "SERVER_VERSION",
    "Authenticator",
    "Broker",
    "BrokerHooks",
    "CallLater",
    "CommandFailure",
    "Connection",
    "Session",
    "Subscription",
    "TimerHandle",
    "format_timestamp",
]

logger = logging.getLogger(__name__)

SERVER_VERSION: Final = "5.3.5.0"
"""Version reported in logon acks (clients adapt their behaviour to it)."""


class Broker:
    """All server semantics, driven by plain method calls.

    Args:
        config: the server configuration (SOW topics are created from it); ``None`` means no
            SOW topics beyond those passed in ``sow_topics``.
        sow_topics: extra, already opened SOW topics (tests).
        call_later: timer scheduler used for conflated persisted acks; ``None`` sends every
            persisted ack at once (handy in unit tests).
        clock: wall clock (epoch seconds) for timestamps and expirations.
        monotonic: the monotonic clock of intervals: live conflation holds, and (with
            ``clock``) the queues' steady clock (:func:`.clocks.steady_clock`), so leases,
            queue timers and holds do not move when the wall clock steps.
        version: server version reported in logon acks.
        txlog: the transaction log (bookmark subscriptions, durable publishes, SOW recovery).
        persisted_ack_interval: seconds between the periodic persisted acks to bookmark
            subscriptions that asked for them (``0``: none). Needs ``call_later``.
        hooks: group commit, authentication, security and replication policies.
        queues: builds the message queues of ``config`` (``ampsclient_server_stub.queues.plug.
            start_queues`` fits); ``None`` with ``<Queue>`` definitions in ``config`` is a
            :class:`~ampsclient_server_stub.config_values.ConfigError`.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        sow_topics: Iterable[SowTopic] = (),
        call_later: CallLater | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        version: str = SERVER_VERSION,
        txlog: TxLog | None = None,
        persisted_ack_interval: float = PERSISTED_ACK_INTERVAL,
        hooks: BrokerHooks | None = None,
        queues: QueueFactory | None = None,
    ) -> None:
        self.hooks = hooks if hooks is not None else BrokerHooks()
        """The policies plugged in (the replication manager fills its fields while it runs)."""
        self.txlog = txlog
        """The transaction log, when messages are recorded."""
        self.request_sync: Callable[[], None] = self.hooks.request_sync or self._sync_now
        """Ask for a group commit; :meth:`on_durable` is called when it completed."""
        self.counters: dict[str, int] = {
            "connections": 0,
            "logons": 0,
            "publishes": 0,
            "duplicates": 0,
            "failures": 0,
            "heartbeats_sent": 0,
            "replay_waits": 0,
            "replay_yields": 0,
        }
        """Running totals (for statistics and tests). ``replay_waits``: times a bookmark replay
        paused because its subscriber had more than ``REPLAY_BACKLOG`` bytes unread;
        ``replay_yields``: times a replay's pump used up its per-pump budget and went on at
        the loop's next turn."""
        journal = txlog.journal if txlog is not None else None
        self.clients = Clients(journal.last_sequence if journal is not None else None)
        """Connections and client states."""
        index = RoutingIndex()
        delivery = Delivery(index, clock=clock, monotonic=monotonic, call_later=call_later)
        self.topic_counts = delivery.topics
        """Per-topic publish and delivery counts (the admin interface reads them)."""
        self.storage_faults = StorageFaults(clock=clock)
        """The server's files whose writes fail now (a full disk), each reported once."""
        self.sows = SowService(
            config, sow_topics, delivery=delivery, clock=clock, faults=self.storage_faults
        )
        """The SOW topics."""
        self.durability = Durability(
            self.clients,
            txlog=txlog,
            hooks=self.hooks,
            request_sync=self.request_sync,
            call_later=call_later,
        )
        """Publishers' persisted acks and flushes."""
        self.replays = ReplayScheduler(
            txlog,
            hooks=self.hooks,
            counters=self.counters,
            clock=clock,
            call_later=call_later,
            persisted_ack_interval=persisted_ack_interval,
        )
        """The bookmark replays."""
        self._ingest = Ingest(
            txlog=txlog,
            clients=self.clients,
            sows=self.sows,
            index=index,
            delivery=delivery,
            scheduler=self.replays,
            durability=self.durability,
            request_sync=self.request_sync,
            hooks=self.hooks,
            counters=self.counters,
            clock=clock,
        )
        self._subscriptions = SubscriptionTable(index, self.replays, delivery)
        self.events = EventTopics(
            index,
            delivery,
            clock=clock,
            server_name=config.name if config is not None else DEFAULT_SERVER_NAME,
        )
        """``/AMPS/ClientStatus`` and ``/AMPS/SOWStats``."""
        self._subscriptions.events = self.events.subscription_event
        self.hooks.client_status = self.events.command_event
        self._publishing, self._handlers = self._command_handlers(txlog, version)
        self.commands: dict[str, Handler] = self._handlers.table
        """The dispatch table: command name -> handler."""
        if txlog is not None:
            self.recover_sow_from_journal()
        self.conflated = ConflatedTopics(
            config.conflated_topics if config is not None else (),
            sows=self.sows,
            delivery=delivery,
            index=index,
        )
        """The conflated topics (copied every interval once ``call_later`` is given)."""
        self.views = SowViews(
            config.sow_views if config is not None else (),
            sows=self.sows,
            delivery=delivery,
            index=index,
        )
        """The views over SOW topics (``views``), computed now from their underlying topics."""
        self.hooks.aggregated = Aggregated(self.sows)
        if call_later is not None:
            self.conflated.start(call_later)
        stats_text = config.extra.get("SOWStatsInterval") if config is not None else None
        if stats_text is not None and call_later is not None:
            self.events.start_sow_stats(
                parse_duration(stats_text), lambda: self.sows.topics, call_later
            )
        self.queues = self._start_queues(
            queues, config, txlog, call_later, steady_clock(wall=clock, monotonic=monotonic)
        )
        """The message queues (``None`` without ``<Queue>`` definitions)."""
        self.hooks.freeze()

    def _command_handlers(
        self, txlog: TxLog | None, version: str
    ) -> tuple[Publishing, CommandHandlers]:
        publishing = Publishing(
            txlog=txlog,
            hooks=self.hooks,
            sows=self.sows,
            ingest=self._ingest,
            durability=self.durability,
            counters=self.counters,
            failed=self._failed,
        )
        subscribing = Subscribing(
            txlog=txlog,
            hooks=self.hooks,
            sows=self.sows,
            table=self._subscriptions,
            scheduler=self.replays,
        )
        handlers = CommandHandlers(
            clients=self.clients,
            hooks=self.hooks,
            durability=self.durability,
            publishing=publishing,
            subscribing=subscribing,
            table=self._subscriptions,
            counters=self.counters,
            kick=self.kick,
            version=version,
            unique_names=txlog is not None,
        )
        return publishing, handlers

    def _start_queues(
        self,
        factory: QueueFactory | None,
        config: ServerConfig | None,
        txlog: TxLog | None,
        call_later: CallLater | None,
        clock: Callable[[], float],
    ) -> QueuePlugin | None:
        """The queue engine ``factory`` builds, plugged into the hooks, the ingest (default
        publish targets) and the subscription table; ``clock`` is steady (leases, timers)."""
        if config is None:
            return None
        if factory is None:
            if config.queues:
                raise ConfigError(
                    "the configuration defines <Queue>s but the broker was built without a "
                    "queue engine (Broker(..., queues=...))"
                )
            return None
        engine = factory(
            QueueSite(
                config=config,
                txlog=txlog,
                table=self._subscriptions,
                sows=self.sows,
                ingest=self.ingest,
                request_sync=self.request_sync,
                call_later=call_later,
                clock=clock,
                faults=self.storage_faults,
            )
        )
        if engine is None:
            return None
        self._ingest.publish_targets = engine.publish_targets  # DefaultPublishTarget
        self.hooks.queues = engine
        self.hooks.durable_listeners.append(engine.on_durable)
        self._subscriptions.on_remove = engine.removed
        return engine

    # ------------------------------------------------------------------ ingest

    def ingest(self, item: Incoming) -> Ingested:
        """Take one message in: a client's publish, a journal record, a replicated record
        (:meth:`.ingest.Ingest.ingest`)."""
        return self._ingest.ingest(item)

    # ------------------------------------------------------------------ SOW topics

    def add_sow_topic(self, sow: SowTopic, *, expiration: float | None = None) -> None:
        """Make ``sow`` a SOW topic of this broker (``expiration``: default record lifetime, s)."""
        self.sows.add(sow, expiration=expiration)

    @property
    def sow_topics(self) -> list[SowTopic]:
        """Every SOW topic."""
        return self.sows.topics

    def sow_topic(self, topic: str, message_type: str = "json") -> SowTopic | None:
        """The SOW topic called ``topic`` for ``message_type``, or ``None``."""
        return self.sows.topic(topic, message_type)

    def expire(self, now: float | None = None) -> int:
        """Remove expired SOW records (oof ``expired``); return how many. Call periodically."""
        return self.sows.expire(now)

    def recover_sow_from_journal(self) -> int:
        """Re-apply the journal records the SOW files do not reflect yet (after a restart;
        see :meth:`.sow_service.SowService.recover`). Counters ``sow_recovery_read`` and
        ``sow_recovery_applied`` tell what it did.

        Returns:
            How many journal records were applied to a SOW topic.
        """
        if self.txlog is None:
            return 0
        ingest = self._ingest.ingest
        read, applied = self.sows.recover(
            self.txlog.journal, lambda record: int(ingest(Journaled(record)).applied)
        )
        if read or applied or self.sows.by_name:
            self.counters["sow_recovery_read"] = read
            self.counters["sow_recovery_applied"] = applied
        return applied

    def checkpoint_sows(self) -> None:
        """Record in every SOW topic's file that its state reflects the whole journal."""
        if self.txlog is not None:
            self.sows.checkpoint(self.txlog.journal)

    def hold_sow_checkpoints(self, topic: str, index: int) -> None:
        """Journal record ``index`` could not be applied to the SOW topics it concerns:
        keep their checkpoints below it (re-applied at the next start)."""
        self.sows.hold_checkpoints(topic, index)

    def close(self) -> None:
        """Stop the timers and close the SOW topics the broker opened from its configuration
        (after a last recovery checkpoint, while the journal is still open)."""
        self.replays.close()
        if self.queues is not None:
            self.queues.close()
        self.conflated.close()
        self.views.close()
        self.events.close()
        self.checkpoint_sows()
        self.sows.close()

    # ------------------------------------------------------------------ connections

    def connect(
        self,
        session: Session,
        *,
        message_type: str | None = None,
        transport: str = "tcp",
        peer: str = "",
    ) -> Connection:
        """Register a new connection; its first command must be ``logon``."""
        self.counters["connections"] += 1
        return self.clients.connect(
            session, message_type=message_type, transport=transport, peer=peer
        )

    def disconnect(self, conn: Connection, *, reason: str | None = None) -> None:
        """The connection is gone: forget its subscriptions (idempotent); ``reason``: why the
        server closed it (``/AMPS/ClientStatus``)."""
        if conn.closed:
            return
        conn.closed = True
        if conn.persist_timer is not None:
            conn.persist_timer.cancel()
            conn.persist_timer = None
        self._subscriptions.remove_all(conn)
        if conn.logged_on:
            fields = {} if reason is None else {"reason": reason}
            self.events.client_event(conn, "disconnect", **fields)
        self.clients.forget(conn)

    def kick(self, conn: Connection, reason: str) -> None:
        """Disconnect ``conn`` from the server side (pending output is still written)."""
        if conn.closed:
            return
        logger.info("disconnecting %r: %s", conn, reason)
        self.disconnect(conn, reason=reason)
        try:
            conn.session.disconnect(reason)
        except Exception:  # pragma: no cover - a broken session must not hurt others
            logger.exception("disconnecting %r", conn)

    @property
    def connections(self) -> list[Connection]:
        """Open connections."""
        return list(self.clients)

    def connection_for(self, client_name: str) -> Connection | None:
        """The connection logged on as ``client_name``, if any."""
        return self.clients.connection(client_name)

    def last_sequence(self, client_name: str) -> int:
        """Highest persisted publish sequence seen from ``client_name`` (0 if none)."""
        state = self.clients.state(client_name)
        return 0 if state is None else state.last_seq

    def statistics(self) -> dict[str, int]:
        """Counters plus current sizes."""
        stats = dict(self.counters)
        conns = list(self.clients)
        stats["open_connections"] = len(conns)
        stats["subscriptions"] = sum(len(c.subs) for c in conns)
        return stats

    # ------------------------------------------------------------------ entry points

    def handle(self, conn: Connection, payload: bytes) -> None:
        """Process one payload (header + body) received on ``conn``. Never raises."""
        if conn.closed:
            return
        # Fast paths: a plain publish {"c":"p","t":"T"}BODY, and a publish-store publish
        # (both clients' HAClient shapes, same semantics as a decoded publish with only a
        # persisted ack). Both shapes start with one of these two prefixes.
        if conn.logged_on and payload.startswith(FAST_PUBLISH_SHAPES):
            parsed = parse_plain_publish(payload) or parse_seq_publish(payload)
            if parsed is not None:
                topic, seq, end = parsed
                self._publishing.publish_one(conn, topic, seq, payload, end)
                return
        try:
            hdr, end = parse_queue_ack(payload) or decode_header(payload)
        except MalformedFrameError as exc:
            logger.warning("malformed header from %r: %s", conn, exc)
            self.kick(conn, "malformed header")
            return
        c = hdr.get("c")
        try:
            if not conn.logged_on and c != "logon":
                self._handlers.logon_required(conn, hdr)
                return
            handler = self.commands.get(c) if isinstance(c, str) else None
            if handler is None:
                raise CommandFailure("invalid command", f"unknown command {c!r}")
            guard = self.hooks.guard
            if guard is not None:
                guard.check(conn, c, hdr)
            if "o" in hdr:
                check_command_options(str(c), command_options(hdr))
            handler(conn, hdr, payload, end)
        except Exception as exc:
            self._failed(conn, hdr, exc)

    def handle_many(self, conn: Connection, payloads: Sequence[bytes]) -> None:
        """:meth:`handle` for each of ``payloads`` in order (what one read from a connection
        brought). Runs of consecutive sequenced publishes (both clients' HAClient shapes,
        ``{"c":"p","s":N,"a":"persisted","t":"T"}BODY`` and
        ``{"c":"p","t":"T","a":"persisted","s":N}BODY``) and runs of plain publishes
        (``{"c":"p","t":"T"}BODY``) are journaled as one batch each
        (:meth:`.publishing.Publishing.run`), with the same semantics as one :meth:`handle`
        each."""
        n = len(payloads)
        i = 0
        handle = self.handle
        run = self._publishing.run
        while i < n:
            if conn.closed:
                return
            payload = payloads[i]
            if n - i > 1 and conn.logged_on and payload.startswith(FAST_PUBLISH_SHAPES):
                j = run(conn, payloads, i)
                if j == i:  # {"c":"p","t":"T"}BODY starts like the official sequenced shape
                    j = run(conn, payloads, i, plain=True)
                if j > i:
                    i = j
                    continue
            handle(conn, payload)
            i += 1

    def _failed(self, conn: Connection, hdr: dict[str, object], exc: Exception) -> None:
        self._handlers.failed(conn, hdr, exc)

    # ------------------------------------------------------------------ durability

    def flush_persisted(self, conn: Connection) -> None:
        """Send the pending conflated persisted ack of ``conn`` now (shutdown, tests)."""
        self.durability.flush_persisted(conn)

    def _sync_now(self) -> None:
        """Group commit done inline (no server loop): used by unit tests and tools."""
        txlog = self.txlog
        if txlog is not None:
            self.on_durable(txlog.journal.sync())

    def on_durable(self, durable: int) -> None:
        """A group commit made every record up to ``durable`` durable: persisted acks go out,
        deferred flushes are answered, and bookmark subscriptions move on."""
        self.durability.on_durable(durable)
        for listener in self.hooks.durable_listeners:
            listener(durable)
        self.replays.pump_all()

    def send_persisted_acks(self) -> bool:
        """Persisted acks to bookmark subscriptions that asked for them (see
        :meth:`.replay_scheduler.ReplayScheduler.send_persisted_acks`)."""
        return self.replays.send_persisted_acks()

    def pump(self, replay: Replay[Subscription]) -> None:
        """Let ``replay`` deliver what it may now (the scheduler's timers do this; tests and
        benchmarks without timers call it by hand)."""
        self.replays.pump(replay)
