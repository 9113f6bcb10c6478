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
* Pause/resume of a plain (non-bookmark) subscription buffers at most
  :data:`PAUSE_BUFFER_LIMIT` deliveries while paused, dropping the OLDEST beyond that (with a
  warning); ``resume`` delivers the buffer in order.

Deferred to later tasks (hooks are named so they are easy to find): bookmark replay from a
transaction log (:meth:`Broker.start_bookmark_replay`; any bookmark is treated as NOW and a
requested ``completed`` ack is sent at once), journal bookmarks for non-SOW topics
(:meth:`Broker.assign_bookmark`), durable per-client sequence numbers, entitlements
(``authenticate`` is a plain callable, allow-all by default), paginated subscriptions,
queues (a ``sow_delete`` carrying only ``bookmark`` is accepted as a no-op).

Conflation (options ``conflation``/``conflation_key``) is in :mod:`.conflation`; bookmark
subscriptions asking for ``persisted`` acks get them from one server timer
(:meth:`Broker.send_persisted_acks`); SOW topics recover from their file's checkpoint plus the
journal's tail (:meth:`Broker.recover_sow_from_journal`).
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Protocol

from ampsclient.exceptions import MalformedFrameError
from ampsclient.protocol.acks import AckType, parse_ack_types
from ampsclient.protocol.header import Header, decode_header, encode_header, escape
from ampsclient_server_stub.config import ServerConfig, SowTopicConfig, parse_duration

from ..errors import RequestError
from .conflation import (
    ConflationError,
    ConflationSpec,
    LiveConflation,
    LiveHeld,
    ReplayConflation,
    ReplayHeld,
    parse_conflation,
)
from .filters import FilterError, compile_filter
from .journal import JournalRecord, RecordRow
from .payload import (
    OrderBy,
    OrderByError,
    Select,
    SelectError,
    apply_select,
    decode,
    encode,
    lookup_path,
    parse_options,
    parse_order_by,
    parse_path,
    parse_select,
)
from .sow import SowRecord, SowTopic
from .topics import TopicError, TopicMatcher, compile_topic
from .txlog import (
    PERSISTED_ACK_INTERVAL,
    REPLAY_BACKLOG,
    REPLAY_BATCH,
    REPLAY_FIRST_STEP,
    Replay,
    ReplayError,
    TxLog,
)

if TYPE_CHECKING:  # security hook (ampsclient_server_stub.security)
    from ampsclient_server_stub.security.guard import SecurityGuard
if TYPE_CHECKING:  # replication hook (ampsclient_server_stub.replication)
    from ampsclient_server_stub.replication.apply import ApplyOutcome, ReplicatedRecord

try:
    from ampsclient.protocol.bookmarks import publisher_id_for
except ImportError:  # pragma: no cover - the protocol package always has it nowadays
    import hashlib

    def publisher_id_for(client_name: str) -> int:
        """Stable uint64 publisher id: BLAKE2b-64 of the UTF-8 name, big-endian."""
        digest = hashlib.blake2b(client_name.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big")


__all__ = [
    "DEFAULT_ACK_CONFLATION",
    "PAUSE_BUFFER_LIMIT",
    "PERSISTED_ACK_BATCH",
    "SERVER_VERSION",
    "Authenticator",
    "Broker",
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

DEFAULT_ACK_CONFLATION: Final = 0.005
"""Seconds between conflated persisted acks unless the logon asks otherwise."""

PERSISTED_ACK_BATCH: Final = 256
"""A persisted ack is sent at once after this many persisted publishes."""

PAUSE_BUFFER_LIMIT: Final = 10_000
"""Deliveries held for a paused plain subscription (the oldest are dropped beyond)."""

_ROUTE_CACHE_LIMIT: Final = 100_000

# Ack flags as plain ints: IntFlag arithmetic is slow on the publish path.
_RECEIVED: Final = int(AckType.RECEIVED)
_PROCESSED: Final = int(AckType.PROCESSED)
_PERSISTED: Final = int(AckType.PERSISTED)
_COMPLETED: Final = int(AckType.COMPLETED)
_STATS: Final = int(AckType.STATS)

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
_FAST_SEQ_SHAPES: Final = (_FAST_SEQ, _FAST_SEQ_T)
_MT_FIELDS: Final[Mapping[str, Mapping[str, str | int]]] = {
    mt: {"mt": mt} for mt in ("json", "nvfix", "fix", "xml", "bson", "msgpack", "binary")
}
"""Shared ``fields`` of a journal record that has nothing but its message type (read-only)."""
_SUBSCRIBE_COMMANDS: Final = frozenset(
    {"subscribe", "delta_subscribe", "sow_and_subscribe", "sow_and_delta_subscribe"}
)


# --------------------------------------------------------------------------- interfaces


class Session(Protocol):
    """What the broker needs from a connection's transport."""

    def send(self, payload: bytes) -> None:
        """Queue one TCP-shaped payload (header + body) for the client."""

    def disconnect(self, reason: str) -> None:
        """Close the connection after writing what is already queued."""

    def start_heartbeat(self, interval: float) -> None:
        """Heartbeat every ``interval`` s; drop the client after 2 silent intervals."""


class TimerHandle(Protocol):
    """A scheduled callback (``asyncio.TimerHandle`` fits)."""

    def cancel(self) -> None:
        """Cancel the callback if it has not run."""


CallLater = Callable[[float, Callable[[], None]], TimerHandle]
"""``call_later(delay, callback)``; the server passes ``loop.call_later``."""

Authenticator = Callable[[str, str], bool]
"""``authenticate(user_id, password) -> bool`` (the later entitlement task plugs in here)."""


class CommandFailure(RequestError):
    """A command is refused; ``reason`` is the exact AMPS reason string."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


# --------------------------------------------------------------------------- helpers

_ABSENT: Final[Any] = object()
_EMPTY_OPTIONS: Final[Mapping[str, str]] = {}


@lru_cache(maxsize=1024)
def _cached_options(text: str) -> Mapping[str, str]:
    return parse_options(text)


@lru_cache(maxsize=256)
def _parse_flags(text: str) -> int:
    return int(parse_ack_types(text))


def _flags(hdr: Header) -> int:
    """The requested ack types (``a``) as an int bit set."""
    a = hdr.get("a")
    if not a:
        return 0
    return _parse_flags(str(a))


def _options(hdr: Header) -> Mapping[str, str]:
    o = hdr.get("o")
    if not o:
        return _EMPTY_OPTIONS
    return _cached_options(str(o))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text or None


def _int_field(value: Any, *, reason: str = "invalid options") -> int | None:
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


def _split_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [part for part in (p.strip() for p in str(value).split(",")) if part]


def _send_each(session: Session, payloads: list[bytes]) -> None:
    """``send_many`` for a session that has only ``send``."""
    for payload in payloads:
        session.send(payload)


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


def _set_path(target: dict[str, Any], parts: Sequence[str], value: Any) -> None:
    cur = target
    for part in parts[:-1]:
        child = cur.get(part)
        if not isinstance(child, dict):
            child = {}
            cur[part] = child
        cur = child
    cur[parts[-1]] = value


def _publish_header(topic: str, seq: int | None) -> Header:
    """The header of a fast-path publish, for its failure ack."""
    if seq is None:
        return {"c": "p", "t": topic}
    return {"c": "p", "t": topic, "s": seq, "a": "persisted"}


# --------------------------------------------------------------------------- state


class _ClientState:
    """What the broker remembers about a client name across its connections."""

    __slots__ = ("ack_seq", "bookmark_seq", "durable_wait", "last_seq", "name", "publisher_id")

    def __init__(self, name: str, last_seq: int = 0) -> None:
        self.name = name
        self.publisher_id = publisher_id_for(name)
        self.last_seq = last_seq
        """Highest publish sequence accepted from this client name (duplicates are <= it)."""
        self.ack_seq = last_seq
        """Highest sequence that may be acknowledged as persisted (durable in the journal)."""
        self.bookmark_seq = last_seq
        self.durable_wait: deque[tuple[int, int]] = deque()
        """``(journal index, sequence)`` of accepted publishes not yet durable."""


class Connection:
    """The broker's view of one client connection (created by :meth:`Broker.connect`)."""

    __slots__ = (
        "ack_conflation",
        "client_name",
        "closed",
        "deferred_flush",
        "id",
        "logged_on",
        "message_type",
        "peer",
        "persist_count",
        "persist_pending",
        "persist_timer",
        "session",
        "state",
        "subs",
        "transport",
        "user_id",
    )

    def __init__(
        self,
        conn_id: int,
        session: Session,
        *,
        message_type: str | None,
        transport: str,
        peer: str,
    ) -> None:
        self.id = conn_id
        self.session = session
        self.message_type = message_type.lower() if message_type else None
        """Message type of this connection (ws path, transport config or logon ``mt``)."""
        self.transport = transport
        self.peer = peer
        self.logged_on = False
        self.closed = False
        self.client_name: str | None = None
        self.user_id: str | None = None
        self.state: _ClientState | None = None
        self.subs: dict[str, Subscription] = {}
        self.ack_conflation = DEFAULT_ACK_CONFLATION
        self.persist_pending = False
        self.persist_count = 0
        self.persist_timer: TimerHandle | None = None
        self.deferred_flush: list[Header] = []
        """``flush`` commands waiting for this client's publishes to become durable."""

    @property
    def mt(self) -> str:
        """The connection's message type (``json`` when nobody said)."""
        return self.message_type or "json"

    def __repr__(self) -> str:
        return f"Connection(#{self.id} {self.client_name!r} {self.transport} {self.peer})"


class Subscription:
    """One subscription of one connection."""

    __slots__ = (
        "conflation",
        "conn",
        "delta",
        "dropped",
        "filter_text",
        "held",
        "matcher",
        "message_type",
        "no_empties",
        "oof",
        "options",
        "paused",
        "predicate",
        "replay",
        "send_keys",
        "sid",
        "sub_id",
        "timestamp",
    )

    def __init__(
        self,
        conn: Connection,
        sub_id: str,
        matcher: TopicMatcher,
        *,
        filter_text: str | None,
        predicate: Callable[[Any], bool] | None,
        options: Mapping[str, str],
        delta: bool,
    ) -> None:
        self.conn = conn
        self.sub_id = sub_id
        self.sid = escape(sub_id)
        """``sub_id`` escaped for a header string."""
        self.matcher = matcher
        self.message_type = conn.mt
        self.filter_text = filter_text
        self.predicate = predicate
        self.options = options
        self.delta = delta
        self.oof = "oof" in options
        self.timestamp = "timestamp" in options
        self.no_empties = "no_empties" in options
        self.send_keys = "send_keys" in options
        self.paused = "pause" in options
        self.held: deque[bytes] = deque(maxlen=PAUSE_BUFFER_LIMIT)
        self.dropped = 0
        self.replay: Replay | None = None
        """For bookmark subscriptions: the cursor over the transaction log."""
        self.conflation: LiveConflation | None = None
        """Conflation holds of a regular subscription (options ``conflation``/``conflation_key``;
        a bookmark subscription's are on its :attr:`replay`)."""

    def hold(self, payload: bytes) -> None:
        """Buffer a delivery while paused (bounded; the oldest is dropped when full)."""
        if len(self.held) == PAUSE_BUFFER_LIMIT:
            if self.dropped == 0:
                logger.warning(
                    "paused subscription %r of %r: buffer full, dropping oldest deliveries",
                    self.sub_id,
                    self.conn,
                )
            self.dropped += 1
        self.held.append(payload)

    def __repr__(self) -> str:
        return f"Subscription({self.sub_id!r}, {self.matcher.topic!r}, filter={self.filter_text!r})"


Route = tuple[tuple[Connection, tuple[Subscription, ...]], ...]
"""Matching subscriptions of one (message type, topic), grouped by connection."""

_Handler = Callable[[Connection, Header, bytes, int], None]


# --------------------------------------------------------------------------- broker


class Broker:
    """All server semantics, driven by plain method calls.

    Args:
        config: the server configuration (SOW topics are created from it); ``None`` means no
            SOW topics beyond those passed in ``sow_topics``.
        sow_topics: extra, already opened SOW topics (tests).
        call_later: timer scheduler used for conflated persisted acks; ``None`` sends every
            persisted ack at once (handy in unit tests).
        clock: wall clock (epoch seconds) for timestamps and expirations.
        authenticate: ``(user_id, password) -> bool``; default: allow everyone.
        version: server version reported in logon acks.
        txlog: the transaction log (bookmark subscriptions, durable publishes, SOW recovery).
        request_sync: asks for a group commit (the server's committer); default: inline.
        persisted_ack_interval: seconds between the periodic persisted acks to bookmark
            subscriptions that asked for them (``0``: none). Needs ``call_later``.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        sow_topics: Iterable[SowTopic] = (),
        call_later: CallLater | None = None,
        clock: Callable[[], float] = time.time,
        authenticate: Authenticator | None = None,
        version: str = SERVER_VERSION,
        txlog: TxLog | None = None,
        request_sync: Callable[[], None] | None = None,
        persisted_ack_interval: float = PERSISTED_ACK_INTERVAL,
    ) -> None:
        self.call_later = call_later
        self.txlog = txlog
        """The transaction log, when messages are recorded."""
        self.request_sync: Callable[[], None] = request_sync or self._sync_now
        """Ask for a group commit; :meth:`on_durable` is called when it completed."""
        self._replays: dict[int, Replay] = {}
        self._live: set[Replay] = set()
        self._waiting: dict[str, _ClientState] = {}
        self._flush_waits: list[tuple[int, Connection, Header]] = []
        """``flush`` commands asking for a persisted ack: (journal index, connection, header)."""
        self.persisted_ack_interval = persisted_ack_interval
        """Seconds between periodic persisted acks to bookmark subscriptions."""
        self._ack_timer: TimerHandle | None = None
        # replication hooks (ampsclient_server_stub.replication.manager sets them)
        self.ack_limit: Callable[[int], int] | None = None
        """``ack_limit(durable)``: the highest index persisted acks may cover."""
        self.fully_durable_limit: Callable[[], int] | None = None
        """The highest index a ``fully_durable`` bookmark replay may deliver."""
        self.durable_listeners: list[Callable[[int], None]] = []
        """Called with the durable index at the end of :meth:`on_durable`."""
        self.clock = clock
        self.authenticate: Authenticator = authenticate or (lambda user, password: True)
        self.guard: SecurityGuard | None = None
        """Security hook (authentication modules, entitlements); see ``security.guard``."""
        """Authentication hook: replace to refuse logons (reason ``auth failure``)."""
        self.version = version
        self._next_id = 0
        self._connections: dict[int, Connection] = {}
        self._by_name: dict[str, Connection] = {}
        self._states: dict[str, _ClientState] = {}
        self._exact: dict[tuple[str, str], list[Subscription]] = {}
        self._regex: dict[str, list[Subscription]] = {}
        self._routes: dict[tuple[str, str], Route] = {}
        self._sow_by_name: dict[str, list[SowTopic]] = {}
        self._sow_expiration: dict[int, float] = {}
        self._owned_sows: list[SowTopic] = []
        self.counters: dict[str, int] = {
            "connections": 0,
            "logons": 0,
            "publishes": 0,
            "duplicates": 0,
            "failures": 0,
            "heartbeats_sent": 0,
            "replay_waits": 0,
        }
        """Running totals (for statistics and tests). ``replay_waits``: times a bookmark replay
        paused because its subscriber had more than ``REPLAY_BACKLOG`` bytes unread."""
        self._commands: dict[str, _Handler] = {
            "logon": self._cmd_logon,
            "p": self._cmd_publish,
            "delta_publish": self._cmd_delta_publish,
            "subscribe": self._cmd_subscribe,
            "delta_subscribe": self._cmd_delta_subscribe,
            "sow": self._cmd_sow,
            "sow_and_subscribe": self._cmd_sow_and_subscribe,
            "sow_and_delta_subscribe": self._cmd_sow_and_delta_subscribe,
            "sow_delete": self._cmd_sow_delete,
            "unsubscribe": self._cmd_unsubscribe,
            "flush": self._cmd_flush,
            "heartbeat": self._cmd_heartbeat,
        }
        if config is not None:
            for topic_config in config.sow_topics:
                opened = self._open_sow(topic_config)
                self._owned_sows.append(opened)
                self.add_sow_topic(opened, expiration=topic_config.expiration)
        for sow in sow_topics:
            self.add_sow_topic(sow)
        if txlog is not None:
            self.recover_sow_from_journal()

    # ------------------------------------------------------------------ SOW topics

    @staticmethod
    def _open_sow(cfg: SowTopicConfig) -> SowTopic:
        if cfg.file_name is not None:
            cfg.file_name.parent.mkdir(parents=True, exist_ok=True)
        return SowTopic(
            cfg.topic,
            keys=cfg.keys,
            message_type=cfg.message_type,
            filename=cfg.file_name,
            key_domain=cfg.key_domain,
        )

    def add_sow_topic(self, sow: SowTopic, *, expiration: float | None = None) -> None:
        """Make ``sow`` a SOW topic of this broker (``expiration``: default record lifetime, s)."""
        self._sow_by_name.setdefault(sow.topic, []).append(sow)
        if expiration is not None:
            self._sow_expiration[id(sow)] = expiration

    @property
    def sow_topics(self) -> list[SowTopic]:
        """Every SOW topic."""
        return [s for group in self._sow_by_name.values() for s in group]

    def sow_topic(self, topic: str, message_type: str = "json") -> SowTopic | None:
        """The SOW topic called ``topic`` for ``message_type``, or ``None``."""
        for sow in self._sow_by_name.get(topic, ()):
            if sow.message_type == message_type:
                return sow
        return None

    def close(self) -> None:
        """Stop the timers and close the SOW topics the broker opened from its configuration
        (after a last recovery checkpoint, while the journal is still open)."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self.txlog is not None:
            self.checkpoint_sows()
        for sow in self._owned_sows:
            try:
                sow.close()
            except Exception:  # pragma: no cover - best effort on shutdown
                logger.exception("closing SOW topic %r", sow.topic)

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
        self._next_id += 1
        conn = Connection(
            self._next_id, session, message_type=message_type, transport=transport, peer=peer
        )
        self._connections[conn.id] = conn
        self.counters["connections"] += 1
        return conn

    def disconnect(self, conn: Connection) -> None:
        """The connection is gone: forget its subscriptions (idempotent)."""
        if conn.closed:
            return
        conn.closed = True
        if conn.persist_timer is not None:
            conn.persist_timer.cancel()
            conn.persist_timer = None
        for sub in list(conn.subs.values()):
            self._remove_sub(sub)
        conn.subs.clear()
        self._connections.pop(conn.id, None)
        if conn.client_name is not None and self._by_name.get(conn.client_name) is conn:
            del self._by_name[conn.client_name]

    def kick(self, conn: Connection, reason: str) -> None:
        """Disconnect ``conn`` from the server side (pending output is still written)."""
        if conn.closed:
            return
        logger.info("disconnecting %r: %s", conn, reason)
        self.disconnect(conn)
        try:
            conn.session.disconnect(reason)
        except Exception:  # pragma: no cover - a broken session must not hurt others
            logger.exception("disconnecting %r", conn)

    @property
    def connections(self) -> list[Connection]:
        """Open connections."""
        return list(self._connections.values())

    def connection_for(self, client_name: str) -> Connection | None:
        """The connection logged on as ``client_name``, if any."""
        return self._by_name.get(client_name)

    def last_sequence(self, client_name: str) -> int:
        """Highest persisted publish sequence seen from ``client_name`` (0 if none)."""
        state = self._states.get(client_name)
        return 0 if state is None else state.last_seq

    def statistics(self) -> dict[str, int]:
        """Counters plus current sizes."""
        stats = dict(self.counters)
        stats["open_connections"] = len(self._connections)
        stats["subscriptions"] = sum(len(c.subs) for c in self._connections.values())
        return stats

    # ------------------------------------------------------------------ entry point

    def handle(self, conn: Connection, payload: bytes) -> None:
        """Process one payload (header + body) received on ``conn``. Never raises."""
        if conn.closed:
            return
        # Fast paths: a plain publish {"c":"p","t":"T"}BODY, and a publish-store publish
        # (both clients' HAClient shapes, same semantics as _publish_command with only a
        # persisted ack). Both shapes start with one of these two prefixes.
        if conn.logged_on and payload.startswith(_FAST_SEQ_SHAPES):
            parsed = self._parse_plain_publish(payload) or self._parse_seq_publish(payload)
            if parsed is not None:
                topic, seq, end = parsed
                self._publish_one(conn, topic, seq, payload, end)
                return
        try:
            hdr, end = decode_header(payload)
        except MalformedFrameError as exc:
            logger.warning("malformed header from %r: %s", conn, exc)
            self.kick(conn, "malformed header")
            return
        c = hdr.get("c")
        try:
            if not conn.logged_on and c != "logon":
                self._logon_required(conn, hdr)
                return
            handler = self._commands.get(c) if isinstance(c, str) else None
            if handler is None:
                raise CommandFailure("invalid command", f"unknown command {c!r}")
            if self.guard is not None:
                self.guard.check(conn, c, hdr)
            handler(conn, hdr, payload, end)
        except Exception as exc:
            self._failed(conn, hdr, exc)

    def handle_many(self, conn: Connection, payloads: Sequence[bytes]) -> None:
        """:meth:`handle` for each of ``payloads`` in order (what one read from a connection
        brought). Runs of consecutive sequenced publishes (both clients' HAClient shapes,
        ``{"c":"p","s":N,"a":"persisted","t":"T"}BODY`` and
        ``{"c":"p","t":"T","a":"persisted","s":N}BODY``) and runs of plain publishes
        (``{"c":"p","t":"T"}BODY``) are journaled as one batch each (:meth:`_publish_run`),
        with the same semantics as one :meth:`handle` each."""
        n = len(payloads)
        i = 0
        handle = self.handle
        while i < n:
            if conn.closed:
                return
            payload = payloads[i]
            if n - i > 1 and conn.logged_on and payload.startswith(_FAST_SEQ_SHAPES):
                j = self._publish_run(conn, payloads, i)
                if j == i:  # {"c":"p","t":"T"}BODY starts like the official sequenced shape
                    j = self._publish_run(conn, payloads, i, plain=True)
                if j > i:
                    i = j
                    continue
            handle(conn, payload)
            i += 1

    @staticmethod
    def _parse_plain_publish(payload: bytes) -> tuple[str, None, int] | None:
        """``(topic, None, body offset)`` of a plain publish ``{"c":"p","t":"T"}BODY``, else
        None (the shape :meth:`handle`'s first fast path takes)."""
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

    @staticmethod
    def _parse_seq_publish(payload: bytes) -> tuple[str, int, int] | None:
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

    def _publish_run(
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
        entitlement refusals) is handled as one :meth:`handle` would, after what was batched
        before it.
        """
        txlog = self.txlog
        state = conn.state
        if txlog is None or state is None:
            return start
        mt = conn.mt
        guard = self.guard
        parse = self._parse_plain_publish if plain else self._parse_seq_publish
        records = txlog.records
        sow_names = self._sow_by_name
        batch: list[tuple[int, str, bytes]] = []
        add = batch.append
        last_seq = state.last_seq
        n = len(payloads)
        i = start
        while i < n:
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
                        self._commit_run(conn, batch, plain)
                        batch = []
                        add = batch.append
                        self._failed(conn, _publish_header(topic, seq), exc)
                        i += 1
                        if conn.closed:
                            return i
                        continue
                last_seq = last_seq + 1 if seq is None else seq
                add((last_seq, topic, payload[end:]))
            else:  # duplicate, SOW topic, unrecorded topic: exactly the one-by-one path
                self._commit_run(conn, batch, plain)
                batch = []
                add = batch.append
                self._publish_one(conn, topic, seq, payload, end)
                last_seq = state.last_seq
                if conn.closed:
                    return i + 1
            i += 1
        self._commit_run(conn, batch, plain)
        return i

    def _publish_one(
        self, conn: Connection, topic: str, seq: int | None, payload: bytes, end: int
    ) -> None:
        """One publish of a run, the way :meth:`handle`'s fast paths do it."""
        try:
            if seq is None:
                self._do_publish(conn, topic, None, payload, end, False)
            else:
                self._sequenced_publish(conn, topic, seq, payload, end)
        except Exception as exc:
            self._failed(conn, _publish_header(topic, seq), exc)

    def _commit_run(
        self, conn: Connection, batch: list[tuple[int, str, bytes]], plain: bool = False
    ) -> None:
        """Journal, acknowledge (once durable; not ``plain`` publishes) and route a batch
        from :meth:`_publish_run`."""
        if not batch:
            return
        txlog = self.txlog
        state = conn.state
        assert txlog is not None and state is not None
        mt = conn.mt
        pid = state.publisher_id
        journal = txlog.journal
        before = journal.last_index
        try:
            first, _ts = journal.append_many(pid, "p", batch, _MT_FIELDS.get(mt) or {"mt": mt})
        except Exception as exc:
            if journal.last_index != before:  # pragma: no cover - partly written: all failed
                logger.exception("journal append failed for %r", conn)
                for seq, topic, _data in batch:
                    self._failed(
                        conn,
                        _publish_header(topic, None if plain else seq),
                        CommandFailure("tx store failure", str(exc)),
                    )
                return
            # nothing stored: one by one, for each message's own outcome
            for seq, topic, data in batch:
                self._publish_one(conn, topic, None if plain else seq, b"{}" + data, 2)
                if conn.closed:
                    return
            return
        count = len(batch)
        self.counters["publishes"] += count
        last = batch[-1][0]
        state.last_seq = last
        if not plain:
            conn.persist_pending = True
            state.durable_wait.append((first + count - 1, last))
            self._waiting[state.name] = state
        self.request_sync()
        if self._live:
            for replay in list(self._live):
                self._pump(replay)
        routes = self._routes
        for seq, topic, data in batch:
            route = routes.get((mt, topic))
            if route is None:
                route = self._route(mt, topic)
            if route:
                self._deliver_plain(route, topic, data, None, mt, f"{pid}|{seq}|")

    def _failed(self, conn: Connection, hdr: Header, exc: Exception) -> None:
        self.counters["failures"] += 1
        if isinstance(exc, CommandFailure):
            reason = exc.reason
            logger.info("%r: %s failed: %s (%s)", conn, hdr.get("c"), reason, exc)
        else:
            reason = "internal error"
            logger.exception("%r: error handling %r", conn, hdr.get("c"))
        try:
            self._send_failure(conn, hdr, reason)
        except Exception:  # pragma: no cover - never let one client's error escape
            logger.exception("%r: sending a failure ack", conn)

    def _logon_required(self, conn: Connection, hdr: Header) -> None:
        flags = _flags(hdr)
        if flags & (_RECEIVED | _PROCESSED | _COMPLETED | _STATS | _PERSISTED):
            self._send_failure(conn, hdr, "logon required", always_processed=True)
        else:
            logger.warning("%r sent %r before logon; disconnecting", conn, hdr.get("c"))
            self.kick(conn, "logon required")

    # ------------------------------------------------------------------ acks

    def _ack(
        self,
        conn: Connection,
        hdr: Header,
        ack_type: str,
        *,
        status: str = "success",
        reason: str | None = None,
        sub_id: str | None = None,
        query_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        fields: dict[str, Any] = {"c": "ack", "cid": _text(hdr.get("cid")), "a": ack_type}
        fields["status"] = status
        if reason is not None:
            fields["reason"] = reason
        fields["sub_id"] = sub_id if sub_id is not None else _text(hdr.get("sub_id"))
        fields["query_id"] = query_id if query_id is not None else _text(hdr.get("query_id"))
        if extra:
            fields.update(extra)
        conn.session.send(encode_header(fields))

    def _acks(
        self,
        conn: Connection,
        hdr: Header,
        flags: int,
        *,
        sub_id: str | None = None,
        query_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Success acks for the types in ``flags`` (in canonical order; persisted excluded)."""
        if flags & _RECEIVED:
            self._ack(conn, hdr, "received", sub_id=sub_id, query_id=query_id)
        if flags & _PROCESSED:
            self._ack(conn, hdr, "processed", sub_id=sub_id, query_id=query_id)
        if flags & _COMPLETED:
            self._ack(conn, hdr, "completed", sub_id=sub_id, query_id=query_id, extra=extra)
        if flags & _STATS:
            self._ack(conn, hdr, "stats", sub_id=sub_id, query_id=query_id, extra=extra)

    def _send_failure(
        self, conn: Connection, hdr: Header, reason: str, *, always_processed: bool = False
    ) -> None:
        flags = _flags(hdr)
        c = hdr.get("c")
        sub_id = _text(hdr.get("sub_id"))
        if sub_id is None and c in _SUBSCRIBE_COMMANDS:
            sub_id = _text(hdr.get("cid"))
        if flags & _RECEIVED:
            self._ack(conn, hdr, "received", sub_id=sub_id)
        if flags & _PROCESSED or always_processed:
            self._ack(conn, hdr, "processed", status="failure", reason=reason, sub_id=sub_id)
        if flags & _PERSISTED and c in ("p", "delta_publish", "sow_delete"):
            try:
                seq = _int_field(hdr.get("s"))
            except CommandFailure:
                seq = None
            if seq is not None and conn.logged_on:
                self._flush_persisted(conn)
                conn.session.send(
                    encode_header(
                        {
                            "c": "ack",
                            "a": "persisted",
                            "s": seq,
                            "status": "failure",
                            "reason": reason,
                        }
                    )
                )

    # ------------------------------------------------------------------ persisted acks

    def _note_persisted(self, conn: Connection, index: int | None = None, seq: int = 0) -> None:
        """A publish asking for a persisted ack was accepted (or was a duplicate).

        ``index`` is its journal index when it was recorded: the ack then waits for the group
        commit that makes it durable (:meth:`on_durable`). Otherwise everything accepted so
        far is acknowledged, conflated, unless recorded publishes are still pending.
        """
        state = conn.state
        assert state is not None
        conn.persist_pending = True
        if index is not None:  # _appended() already asked for the group commit that covers it
            state.durable_wait.append((index, seq))
            self._waiting[state.name] = state
            return
        if state.durable_wait:
            return  # covered by the ack that follows the pending group commit
        state.ack_seq = state.last_seq
        conn.persist_count += 1
        if conn.persist_count >= PERSISTED_ACK_BATCH or self.call_later is None:
            self._flush_persisted(conn)
        elif conn.persist_timer is None:
            conn.persist_timer = self.call_later(
                conn.ack_conflation, lambda: self._persist_timer_fired(conn)
            )

    def _persist_timer_fired(self, conn: Connection) -> None:
        conn.persist_timer = None
        if not conn.closed:
            self._flush_persisted(conn)

    def _flush_persisted(self, conn: Connection) -> None:
        """Send the pending conflated persisted ack of ``conn`` now (if any)."""
        timer = conn.persist_timer
        if timer is not None:
            conn.persist_timer = None
            timer.cancel()
        if not conn.persist_pending or conn.state is None:
            return
        conn.persist_pending = False
        conn.persist_count = 0
        conn.session.send(
            encode_header(
                {"c": "ack", "a": "persisted", "s": conn.state.ack_seq, "status": "success"}
            )
        )

    def flush_persisted(self, conn: Connection) -> None:
        """Public form of the conflation flush (used on shutdown and by tests)."""
        self._flush_persisted(conn)

    def _sequence(self, conn: Connection, hdr: Header, flags: int) -> int | None:
        """The publish sequence to track (``s`` with a persisted ack requested), else None."""
        if not flags & _PERSISTED:
            return None
        seq = hdr.get("s")
        if seq is None or seq == "":
            return None
        return _int_field(seq, reason="invalid sequence")

    # ------------------------------------------------------------------ logon

    def _cmd_logon(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        name = _text(hdr.get("client_name"))
        user = str(hdr.get("user_id") or "")
        password = str(hdr.get("pw") or "")
        if conn.logged_on:
            if name is not None and name != conn.client_name:
                raise CommandFailure("name in use", "a connection can log on only once")
            self._logon_ack(conn, hdr)
            return
        verdict = self.guard.authenticate(conn, user, password) if self.guard else None
        if verdict is not None and verdict.status == "retry":
            extra = {"user_id": user, "pw": verdict.challenge}
            self._ack(conn, hdr, "processed", status="retry", extra=extra)
            return
        if not (verdict.ok if verdict is not None else self.authenticate(user, password)):
            reason = verdict.reason if verdict is not None else "auth failure"
            self._ack(conn, hdr, "processed", status="failure", reason=reason or "auth failure")
            self.kick(conn, "authentication failure")
            return
        options = _options(hdr)
        conflation = options.get("ack_conflation")
        if conflation is not None:
            try:
                value = float(conflation) if conflation.isdigit() else parse_duration(conflation)
            except (ValueError, TypeError):
                raise CommandFailure("invalid options", f"ack_conflation={conflation}") from None
            conn.ack_conflation = max(0.0, value)
        if conn.message_type is None:
            mt = _text(hdr.get("mt"))
            conn.message_type = mt.lower() if mt else "json"
        if name is None:
            name = f"anonymous-{conn.id}"
        older = self._by_name.get(name)
        if older is not None and older is not conn:
            self.kick(older, f"client name {name!r} logged on again from {conn.peer}")
        conn.client_name = name
        conn.user_id = user or None
        conn.logged_on = True
        state = self._states.get(name)
        if state is None:
            last = 0
            if self.txlog is not None:
                last = self.txlog.journal.last_sequence(publisher_id_for(name))
            state = self._states[name] = _ClientState(name, last)
        conn.state = state
        self._by_name[name] = conn
        self.counters["logons"] += 1
        logger.info("%r logged on (mt=%s)", conn, conn.mt)
        self._logon_ack(conn, hdr)

    def _logon_ack(self, conn: Connection, hdr: Header) -> None:
        state = conn.state
        assert state is not None
        conn.session.send(
            encode_header(
                {
                    "c": "ack",
                    "cid": _text(hdr.get("cid")),
                    "a": "processed",
                    "s": state.ack_seq,
                    "status": "success",
                    "client_name": state.name,
                    "version": self.version,
                    "bm": f"{state.publisher_id}|{state.ack_seq}|",
                }
            )
        )

    # ------------------------------------------------------------------ hooks for later tasks

    def assign_bookmark(self, conn: Connection, topic: str, seq: int | None) -> str:
        """Bookmark of a message written to a SOW topic.

        Hook for the transaction-log task, which will return the journal bookmark. For now:
        ``<publisherId>|<n>|`` with the client's publish sequence when it sent one, else a
        per-client-name counter.
        """
        state = conn.state
        assert state is not None
        if seq is not None:
            state.bookmark_seq = max(state.bookmark_seq, seq)
            return f"{state.publisher_id}|{seq}|"
        state.bookmark_seq += 1
        return f"{state.publisher_id}|{state.bookmark_seq}|"

    def start_bookmark_replay(
        self, conn: Connection, sub: Subscription, bookmark: str, hdr: Header
    ) -> None:
        """Without a transaction log every bookmark is treated as NOW (live messages only)."""
        logger.debug("%r: bookmark %r on %r treated as NOW (no journal)", conn, bookmark, sub)

    # ------------------------------------------------------------------ transaction log

    def _prepare_replay(
        self, conn: Connection, sub: Subscription, bookmark: str, hdr: Header, flags: int
    ) -> None:
        """Attach a journal cursor to a bookmark subscription (before it is installed)."""
        txlog = self.txlog
        assert txlog is not None
        if not txlog.covers(sub.message_type, sub.matcher):
            raise CommandFailure(
                "invalid topic", f"{sub.matcher.topic!r} is not recorded in the transaction log"
            )
        try:
            replay = Replay.start(txlog.journal, sub, bookmark)
        except ReplayError as exc:
            raise CommandFailure(exc.reason, str(exc)) from None
        if flags & _COMPLETED:
            cid_hdr = {"cid": hdr.get("cid")}
            replay.send_completed = lambda: self._ack(conn, cid_hdr, "completed", sub_id=sub.sub_id)
        replay.send_persisted = bool(flags & _PERSISTED)
        if self.fully_durable_limit is not None and "fully_durable" in sub.options:
            replay.cap = self.fully_durable_limit  # replication: sync destinations have it
        if sub.conflation is not None:  # on the journal's timeline (see .conflation)
            replay.conflation = ReplayConflation(sub.conflation.spec)
            sub.conflation = None
        sub.replay = replay

    def _pump(self, replay: Replay) -> None:
        """Deliver what ``replay`` may deliver now, paced by its session's backlog.

        A replay leading a group (subscriptions resumed together) reads the log once for the
        whole group and sends each record once, with the ``sids`` of every member it matches.
        """
        sub = replay.sub
        conn = sub.conn
        if (
            replay.done
            or replay.leader is not None
            or sub.paused
            or conn.closed
            or replay.timer is not None
        ):
            return
        session = conn.session
        backlog = getattr(session, "backlog", None)
        send_many: Callable[[list[bytes]], None] = getattr(session, "send_many", None) or (
            lambda frames: _send_each(session, frames)
        )
        out: list[bytes] = []  # the frames of one read, handed over together
        send = out.append
        read_rows = replay.journal.read_rows
        row_frame = replay.row_frame
        limit = replay.limit()
        group = (replay, *replay.members) if replay.members else None
        # the first step of a replay is short, so its first messages leave at once
        budget = 5 * REPLAY_BATCH if replay.last_bm is not None else REPLAY_FIRST_STEP
        has_end = replay.end_index is not None or replay.end_time is not None
        rate = replay.rate
        matcher = sub.matcher
        conf = replay.conflation
        prev_bm = replay.last_bm  # (conflation) the bookmark of the record before the next
        simple = (
            group is None and sub.predicate is None and matcher.pattern is None and conf is None
        )
        want_topic = matcher.topic
        want_mt = sub.message_type
        fast = simple and not has_end and rate is None and not sub.timestamp
        read_blocks = replay.journal.read_blocks
        block_frames = replay.block_frames
        while replay.position <= limit:
            if budget <= 0:
                self._pump_later(replay, 0.0)
                self._sync_members(replay)
                return
            if backlog is not None and backlog() > REPLAY_BACKLOG:
                self.counters["replay_waits"] += 1
                self._pump_later(replay, 0.002)
                self._sync_members(replay)
                return
            count = min(REPLAY_BATCH, limit - replay.position + 1, budget)
            if fast:
                # plain replay: frames straight from the journal's bytes (Replay.block_frames)
                blocks = read_blocks(replay.position, max_records=count)
                if not blocks:
                    break
                pid = seq = 0
                for block in blocks:
                    pid, seq, _sent = block_frames(block, out)
                if out:
                    replay.delivered = True
                    send_many(out)
                    out = []
                replay.last_bm = f"{pid}|{seq}|"
                budget -= sum(block[3] for block in blocks)
                replay.advance(blocks[-1][2] + blocks[-1][3])
                continue
            rows = read_rows(replay.position, max_records=count)
            if not rows:
                break
            last: RecordRow | None = None
            for row in rows:
                index, pid, seq, ts, command, topic, payload, fields, _size = row
                if index > limit:
                    break
                if has_end and replay.past_end_at(index, ts):
                    if out:
                        send_many(out)
                    self._finish_replay(replay)
                    return
                frame: bytes | None
                if conf is not None:
                    prev_bm = self._conflate_row(replay, conf, row, prev_bm, send)
                    last = row
                    continue
                if simple:
                    frame = (
                        row_frame(pid, seq, ts, topic, payload, fields)
                        if topic == want_topic
                        and command != "sow_delete"
                        and fields.get("mt", "json") == want_mt
                        else None
                    )
                elif group is None:
                    frame = (
                        row_frame(pid, seq, ts, topic, payload, fields)
                        if replay.row_matches(command, topic, payload, fields)
                        else None
                    )
                else:
                    sids = []
                    for member in group:
                        if member.row_matches(command, topic, payload, fields):
                            sids.append(member.sub.sid)
                            member.delivered = True
                    frame = (
                        row_frame(pid, seq, ts, topic, payload, fields, ",".join(sids))
                        if sids
                        else None
                    )
                if frame is not None:
                    if rate is not None:
                        wait = replay.rate_wait_at(ts)
                        if wait > 0:
                            if out:
                                send_many(out)
                            if last is not None:
                                replay.last_bm = f"{last[1]}|{last[2]}|"
                            replay.advance(index)
                            self._pump_later(replay, wait)
                            self._sync_members(replay)
                            return
                        replay.sent_bytes(len(payload))
                    send(frame)
                    replay.delivered = True
                last = row
            if out:
                send_many(out)
                out = []
                send = out.append
            if last is None:
                break
            replay.last_bm = f"{last[1]}|{last[2]}|"
            budget -= len(rows)
            replay.advance(last[0] + 1)
        self._sync_members(replay)
        if replay.position > limit:
            if replay.end_index is not None:
                if replay.position > replay.end_index:
                    self._finish_replay(replay)
            elif replay.end_time is not None:
                # a range ending at a time: completed (and the end) when that time has passed
                # and nothing received before it is still waiting to become durable
                now_us = int(self.clock() * 1_000_000)
                if replay.time_over(now_us) and not self._pending_before(replay, limit):
                    self._finish_replay(replay)
                elif self.call_later is not None and replay.end_timer is None:
                    delay = max((replay.end_time - now_us) / 1_000_000, 0.0) + 0.001

                    def wake(replay: Replay = replay) -> None:
                        replay.end_timer = None
                        self._pump(replay)

                    replay.end_timer = self.call_later(min(delay, 60.0), wake)
            else:
                # caught up with the log: completed, and what follows is live
                if conf is not None:
                    self._release_caught_up(replay, conf, limit)
                for member in group or (replay,):
                    if not member.completed_sent:
                        member.completed_sent = True
                        if member.send_completed is not None:
                            member.send_completed()

    @staticmethod
    def _sync_members(replay: Replay) -> None:
        """Members of a group are where their leader is."""
        for member in replay.members:
            member.position = replay.position
            member.last_bm = replay.last_bm

    @staticmethod
    def _pending_before(replay: Replay, limit: int) -> bool:
        """Is a record past ``limit`` (written, not yet deliverable) inside the range's time?"""
        journal = replay.journal
        if limit >= journal.last_index:
            return False
        nxt = journal.read(limit + 1, max_records=1)
        return bool(nxt) and not replay.past_end(nxt[0])

    def _pump_later(self, replay: Replay, delay: float) -> None:
        if self.call_later is None or replay.timer is not None or replay.done:
            return

        def fire() -> None:
            replay.timer = None
            self._pump(replay)

        replay.timer = self.call_later(delay, fire)

    def _conflate_row(
        self,
        replay: Replay,
        conf: ReplayConflation,
        row: RecordRow,
        before_bm: str | None,
        send: Callable[[bytes], None],
    ) -> str:
        """A conflated replay reads ``row``: first the holds whose interval ended before the
        row's time go out (through ``send``), then the row is held if it matches. Returns the
        row's bookmark (the ``before_bm`` of the next row)."""
        ts = row[3]
        deadline = conf.holds.next_deadline()
        if deadline is not None and ts >= deadline:
            for held in conf.holds.release(ts):
                send(self._held_frame(replay, held))
            replay.delivered = True
        if replay.row_matches(row[4], row[5], row[6], row[7]):
            conf.offer(row, before_bm)
        return f"{row[1]}|{row[2]}|"

    @staticmethod
    def _held_frame(replay: Replay, held: ReplayHeld) -> bytes:
        """The delivery of a hold: the latest record, under the first record's bookmark."""
        latest = held.latest
        return replay.row_frame(
            held.first_publisher, held.first_sequence, latest[3], latest[5], latest[6], latest[7]
        )

    def _send_replay_held(self, replay: Replay, held: list[ReplayHeld]) -> None:
        if not held:
            return
        session = replay.sub.conn.session
        for item in held:
            session.send(self._held_frame(replay, item))
        replay.delivered = True

    def _release_caught_up(self, replay: Replay, conf: ReplayConflation, limit: int) -> None:
        """A conflated replay that has read everything it may: the journal's timeline is now
        the clock. Holds whose interval has passed go out, unless a record received inside
        their interval is written but not deliverable yet (the next durable pump sees it)."""
        if not conf.holds:
            return
        horizon = int(self.clock() * 1_000_000)
        journal = replay.journal
        pending = limit < journal.last_index
        if pending:
            nxt = journal.read_rows(limit + 1, max_records=1)
            if nxt:
                horizon = min(horizon, nxt[0][3])
        self._send_replay_held(replay, conf.holds.release(horizon))
        deadline = conf.holds.next_deadline()
        if deadline is None or pending or conf.timer is not None or self.call_later is None:
            return
        delay = max(0.0, deadline / 1_000_000 - self.clock())

        def wake() -> None:
            conf.timer = None
            self._pump(replay)

        conf.timer = self.call_later(delay + 0.0005, wake)

    def _finish_replay(self, replay: Replay) -> None:
        """A range reached its end: ``completed``, then the subscription (or group) stops."""
        group = [replay, *replay.members]
        replay.members = []
        for member in group:
            member.leader = None
            if member.conflation is not None:  # the range is over: what is held goes out
                self._send_replay_held(member, member.conflation.holds.release_all())
            if not member.completed_sent:
                member.completed_sent = True
                if member.send_completed is not None:
                    member.send_completed()
        for member in group:
            self._remove_sub(member.sub)

    def _ungroup(self, replay: Replay) -> Replay | None:
        """Take ``replay`` out of its group (it is paused or removed).

        Returns the member that now leads the rest of the group when ``replay`` led it (the
        caller pumps it), else ``None``.
        """
        leader = replay.leader
        if leader is not None:
            leader.members.remove(replay)
            replay.leader = None
            replay.advance(leader.position)
            return None
        if not replay.members:
            return None
        heir, *rest = replay.members
        replay.members = []
        heir.leader = None
        heir.members = rest
        for member in rest:
            member.leader = heir
        heir.rate = None if replay.rate is None else dataclasses.replace(replay.rate)
        heir.last_bm = replay.last_bm
        heir.advance(replay.position)
        return heir

    def _group_resumed(self, replays: list[Replay]) -> None:
        """Subscriptions resumed by one command that can share a replay do (the seed: same
        connection, paused at the same point, same rate; here also the same range and
        ``timestamp`` option, and not ``live``); then every one of them is pumped."""
        groups: dict[tuple[Any, ...], list[Replay]] = {}
        for replay in replays:
            if (
                replay.done
                or replay.live
                or replay.conflation is not None
                or replay.leader is not None
                or replay.members
            ):
                groups[(id(replay),)] = [replay]
                continue
            options = replay.sub.options
            key = (
                replay.position,
                options.get("rate"),
                options.get("rate_max_gap"),
                replay.sub.timestamp,
                replay.end_index,
                replay.end_inclusive,
                replay.end_time,
                replay.end_time_inclusive,
            )
            groups.setdefault(key, []).append(replay)
        for leader, *members in groups.values():
            for member in members:
                member.leader = leader
                if member.timer is not None:
                    member.timer.cancel()
                    member.timer = None
                if member.pin is not None:
                    member.journal.unpin(member.pin)
                    member.pin = None
            leader.members.extend(members)
            self._pump(leader)

    def apply_replicated(self, record: ReplicatedRecord) -> ApplyOutcome:
        """Journal, store and deliver a record received over replication, under its original
        bookmark (see :mod:`ampsclient_server_stub.replication.apply`)."""
        from ampsclient_server_stub.replication.apply import apply_replicated

        return apply_replicated(self, record)

    def _sync_now(self) -> None:
        """Group commit done inline (no server loop): used by unit tests and tools."""
        txlog = self.txlog
        if txlog is not None:
            self.on_durable(txlog.journal.sync())

    def on_durable(self, durable: int) -> None:
        """A group commit made every record up to ``durable`` durable: persisted acks go out,
        deferred flushes are answered, and bookmark subscriptions move on."""
        acks_through = durable if self.ack_limit is None else self.ack_limit(durable)
        for name, state in list(self._waiting.items()):
            wait = state.durable_wait
            acked = None
            while wait and wait[0][0] <= acks_through:
                acked = wait.popleft()[1]
            if acked is not None and acked > state.ack_seq:
                state.ack_seq = acked
            if not wait:
                del self._waiting[name]
                if state.last_seq > state.ack_seq:
                    state.ack_seq = state.last_seq  # duplicates and unrecorded publishes
            conn = self._by_name.get(name)
            if conn is None or conn.closed:
                continue
            if acked is not None:
                conn.persist_pending = True
            self._flush_persisted(conn)
            if not wait and conn.deferred_flush:
                deferred, conn.deferred_flush = conn.deferred_flush, []
                for hdr in deferred:
                    self._flush_ack(conn, hdr)
        if self._flush_waits:
            ready = [w for w in self._flush_waits if w[0] <= acks_through]
            if ready:
                self._flush_waits = [w for w in self._flush_waits if w[0] > acks_through]
                for _target, waiting_conn, flush_hdr in ready:
                    if not waiting_conn.closed:
                        self._flush_ack(waiting_conn, flush_hdr)
        for listener in self.durable_listeners:
            listener(durable)
        for replay in list(self._replays.values()):
            self._pump(replay)

    # ------------------------------------------------------------------ bookmark persisted acks

    def _schedule_persisted_acks(self) -> None:
        """Start the server's persisted-ack timer (if it is not running)."""
        if (
            self._ack_timer is None
            and self.call_later is not None
            and self.persisted_ack_interval > 0
        ):
            self._ack_timer = self.call_later(self.persisted_ack_interval, self._persisted_ack_tick)

    def _persisted_ack_tick(self) -> None:
        self._ack_timer = None
        if self.send_persisted_acks():
            self._schedule_persisted_acks()

    def send_persisted_acks(self) -> bool:
        """Send a persisted ack to every bookmark subscription that asked for them and was
        delivered something since its last one (the server's timer calls this periodically).

        The ack's ``bm`` is a journal bookmark at or after everything delivered to the
        subscription (the last record its replay looked at), durable (a ``live`` replay waits
        until what it read is), and never past a conflated record still held. Returns whether
        any subscription still wants persisted acks (the timer stops when none does).
        """
        wanted = False
        durable = self.txlog.journal.durable_index if self.txlog is not None else 0
        for replay in list(self._replays.values()):
            if not replay.send_persisted or replay.done:
                continue
            wanted = True
            if not replay.delivered or replay.position - 1 > durable:
                continue
            bm = replay.last_bm
            if replay.conflation is not None:
                bm = replay.conflation.ack_bookmark(bm)
            if bm is None or bm == replay.acked_bm:
                continue
            replay.delivered = False
            replay.acked_bm = bm
            replay.sub.conn.session.send(
                encode_header(
                    {
                        "c": "ack",
                        "a": "persisted",
                        "status": "success",
                        "sub_id": replay.sub.sub_id,
                        "bm": bm,
                    }
                )
            )
        return wanted

    def recover_sow_from_journal(self) -> int:
        """Re-apply the journal records the SOW files do not reflect yet (after a restart).

        Each SOW topic stores the journal index its state reflects
        (:attr:`SowTopic.journal_index`, updated with every recorded write and by
        :meth:`checkpoint_sows`): the replay starts after the lowest one, and a record is
        applied only to the topics still behind it. A SOW whose file was lost, or that lives in
        memory, is at 0 and is rebuilt from the whole journal. Publishes are upserts and
        deletes are re-run in log order, so re-applying what a SOW already holds is harmless.
        Counters ``sow_recovery_read``/``sow_recovery_applied`` tell what it did. Writes are
        grouped in one transaction per journal batch; a storage error aborts the recovery
        (and the server's start) rather than leave a SOW behind its checkpoint.

        Returns:
            How many journal records were applied to a SOW topic.
        """
        txlog = self.txlog
        if txlog is None or not self._sow_by_name:
            return 0
        journal = txlog.journal
        start = max(journal.first_index, min(s.journal_index for s in self.sow_topics) + 1)
        started = time.perf_counter()
        read = applied = 0
        position = start
        sow_names = self._sow_by_name
        while position <= journal.last_index:
            rows = journal.read_rows(position, max_records=REPLAY_BATCH)
            if not rows:
                break
            read += len(rows)
            with ExitStack() as batch:  # one SOW transaction per journal batch
                for sow in self.sow_topics:
                    batch.enter_context(sow.batch())
                for row in rows:
                    position = row[0] + 1
                    if row[4] != "sow_delete" and row[5] not in sow_names:
                        continue  # most of a log: not a SOW topic (no record object built)
                    applied += self._recover_record(JournalRecord(*row[:8]))
        self.counters["sow_recovery_read"] = read
        self.counters["sow_recovery_applied"] = applied
        self.checkpoint_sows()  # everything up to the end of the log is in now
        logger.info(
            "SOW recovery: %d journal record(s) read from index %d, %d applied, in %.3f s",
            read,
            start,
            applied,
            time.perf_counter() - started,
        )
        return applied

    def checkpoint_sows(self) -> None:
        """Record in every SOW topic's file that its state reflects the whole journal.

        True whenever the broker is between two commands (each recorded write reaches its SOW
        in the command that journals it), so the server calls this periodically and at
        shutdown: a restart then re-reads only what came after, even for SOW topics that are
        rarely written while other topics fill the log. After a crash that lost the journal's
        last unsynced records it moves the mark back to what the journal holds.
        """
        txlog = self.txlog
        if txlog is None:
            return
        last = txlog.journal.last_index
        for sow in self.sow_topics:
            if sow.closed or sow.journal_index == last:
                continue
            try:
                sow.set_journal_index(last)
            except Exception:  # pragma: no cover - storage trouble: recovery just reads more
                logger.exception("SOW %r: recovery checkpoint failed", sow.topic)

    def _recover_record(self, record: JournalRecord) -> int:
        """Apply one journal record to the SOW topics behind it; 1 if any was, else 0."""
        mt = str(record.fields.get("mt", "json"))
        if record.command == "sow_delete":
            return self._recover_delete(record, mt)
        group = self._sow_by_name.get(record.topic)
        sow = next((g for g in group if g.message_type == mt), None) if group else None
        if sow is None or sow.journal_index >= record.index:
            return 0
        doc = decode(mt, record.payload)
        k = record.fields.get("k")
        e = record.fields.get("e")
        expiration = None
        if e is not None:
            try:
                seconds = float(e)
                expiration = record.timestamp / 1_000_000 + seconds if seconds > 0 else None
            except ValueError:
                expiration = None
        x = record.fields.get("x")
        try:
            sow.publish(
                record.payload,
                doc=doc,
                sow_key=str(k) if k is not None and doc is None else None,
                bookmark=record.bookmark,
                timestamp=format_timestamp(record.timestamp / 1_000_000),
                correlation_id=None if x is None else str(x),
                expiration=expiration,
                journal_index=record.index,
            )
        except sqlite3.Error:
            raise  # storage trouble: the batch is rolled back, recovery stops
        except Exception:
            logger.exception("recovering SOW %r from journal record %d", sow.topic, record.index)
            return 0
        return 1

    def _recover_delete(self, record: JournalRecord, mt: str) -> int:
        try:
            matcher = compile_topic(record.topic)
        except TopicError:
            return 0
        filter_text = record.fields.get("filter")
        predicate = compile_filter(str(filter_text)) if filter_text else None
        keys_text = record.fields.get("sow_keys")
        keys = _split_list(keys_text) if keys_text else None
        data_doc = decode(mt, record.payload) if record.payload else None
        k = record.fields.get("k")
        sow_key = str(k) if k is not None else None
        applied = 0
        for name, group in self._sow_by_name.items():
            if not matcher.matches(name):
                continue
            for sow in group:
                if sow.message_type != mt or sow.journal_index >= record.index:
                    continue
                try:
                    sow.delete(
                        predicate,
                        keys=keys,
                        data_doc=data_doc,
                        sow_key=sow_key if record.payload or sow_key else None,
                        journal_index=record.index,
                    )
                except sqlite3.Error:
                    raise
                except Exception:
                    logger.exception("recovering a sow_delete on %r", sow.topic)
                    continue
                applied = 1
        return applied

    # ------------------------------------------------------------------ routing

    def _add_sub(self, sub: Subscription) -> None:
        sub.conn.subs[sub.sub_id] = sub
        if sub.replay is not None:
            # bookmark subscriptions are fed by their journal cursor, not by routing
            self._replays[id(sub)] = sub.replay
            if sub.replay.live:
                self._live.add(sub.replay)
            if sub.replay.send_persisted:
                self._schedule_persisted_acks()
            return
        if sub.matcher.is_regex:
            self._regex.setdefault(sub.message_type, []).append(sub)
        else:
            self._exact.setdefault((sub.message_type, sub.matcher.topic), []).append(sub)
        self._routes.clear()

    def _remove_sub(self, sub: Subscription) -> None:
        if sub.conn.subs.get(sub.sub_id) is sub:
            del sub.conn.subs[sub.sub_id]
        if sub.conflation is not None:
            sub.conflation.close()  # held messages are dropped, the timer cancelled
        if sub.replay is not None:
            replay = self._replays.pop(id(sub), None)
            if replay is not None:
                self._live.discard(replay)
                heir = self._ungroup(replay)
                replay.close()
                if heir is not None:
                    if self.call_later is None:
                        self._pump(heir)
                    else:  # not from inside whatever is removing this subscription
                        self.call_later(0.0, lambda: self._pump(heir))
            return
        if sub.matcher.is_regex:
            regex_group = self._regex.get(sub.message_type)
            if regex_group is not None and sub in regex_group:
                regex_group.remove(sub)
                if not regex_group:
                    del self._regex[sub.message_type]
        else:
            key = (sub.message_type, sub.matcher.topic)
            exact_group = self._exact.get(key)
            if exact_group is not None and sub in exact_group:
                exact_group.remove(sub)
                if not exact_group:
                    del self._exact[key]
        self._routes.clear()

    def _route(self, mt: str, topic: str) -> Route:
        key = (mt, topic)
        route = self._routes.get(key)
        if route is None:
            route = self._build_route(mt, topic)
            if len(self._routes) >= _ROUTE_CACHE_LIMIT:
                self._routes.clear()
            self._routes[key] = route
        return route

    def _build_route(self, mt: str, topic: str) -> Route:
        subs = list(self._exact.get((mt, topic), ()))
        for sub in self._regex.get(mt, ()):
            if sub.matcher.matches(topic):
                subs.append(sub)
        if not subs:
            return ()
        grouped: dict[int, tuple[Connection, list[Subscription]]] = {}
        for sub in subs:
            entry = grouped.get(sub.conn.id)
            if entry is None:
                grouped[sub.conn.id] = (sub.conn, [sub])
            else:
                entry[1].append(sub)
        return tuple((conn, tuple(group)) for conn, group in grouped.values())

    # ------------------------------------------------------------------ publish

    def _cmd_publish(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        self._publish_command(conn, hdr, payload, end, delta=False)

    def _cmd_delta_publish(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        self._publish_command(conn, hdr, payload, end, delta=True)

    def _publish_command(
        self, conn: Connection, hdr: Header, payload: bytes, end: int, *, delta: bool
    ) -> None:
        topic = _text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "publish without a topic")
        flags = _flags(hdr)
        seq = self._sequence(conn, hdr, flags)
        state = conn.state
        assert state is not None
        if seq is not None and seq <= state.last_seq:
            self.counters["duplicates"] += 1
            self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED))
            self._note_persisted(conn)
            return
        index = self._do_publish(conn, topic, hdr, payload, end, delta, seq)
        if flags:
            self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED | _COMPLETED | _STATS))
        if seq is not None:
            state.last_seq = seq
            self._note_persisted(conn, index, seq)

    def _sequenced_publish(
        self, conn: Connection, topic: str, seq: int, payload: bytes, end: int
    ) -> None:
        """:meth:`_publish_command` for a plain publish asking only for a persisted ack."""
        state = conn.state
        assert state is not None
        if seq <= state.last_seq:
            self.counters["duplicates"] += 1
            self._note_persisted(conn)
            return
        index = self._do_publish(conn, topic, None, payload, end, False, seq)
        state.last_seq = seq
        self._note_persisted(conn, index, seq)

    def _sow_for_publish(self, mt: str, topic: str) -> SowTopic | None:
        group = self._sow_by_name.get(topic)
        if group is None:
            return None
        for sow in group:
            if sow.message_type == mt:
                return sow
        raise CommandFailure(
            "invalid message type", f"topic {topic!r} is a SOW topic of another message type"
        )

    def _do_publish(
        self,
        conn: Connection,
        topic: str,
        hdr: Header | None,
        payload: bytes,
        end: int,
        delta: bool,
        seq: int | None = None,
    ) -> int | None:
        """Record (when the topic is recorded), store in the SOW, route. Returns the journal
        index of the record, or ``None`` when the topic is not recorded."""
        if self.guard is not None:
            self.guard.check_write(conn, topic)
        self.counters["publishes"] += 1
        mt = conn.mt
        sow = self._sow_for_publish(mt, topic) if topic in self._sow_by_name else None
        if sow is not None:
            return self._publish_sow(conn, sow, hdr or {}, payload[end:], delta, seq)
        data = payload[end:]
        x = _text(hdr.get("x")) if hdr is not None else None
        record = None
        txlog = self.txlog
        if txlog is not None and txlog.records(mt, topic):
            jseq = self._journal_sequence(conn, seq)
            command = "delta_publish" if delta else "p"
            fields = {"x": x} if x else None
            record = self._journal_append(conn, jseq, topic, command, data, fields)
            self._appended()
        route = self._routes.get((mt, topic))
        if route is None:
            route = self._route(mt, topic)
        if route:
            self._deliver_plain(
                route, topic, data, x, mt, None if record is None else record.bookmark
            )
        return None if record is None else record.index

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
    ) -> Any:
        """Append one record to the journal (:meth:`_appended` must follow).

        Raises:
            CommandFailure: ``tx store failure`` (nothing was appended).
        """
        txlog = self.txlog
        assert txlog is not None and conn.state is not None
        # (a shared read-only mapping when there is nothing but the type: the journal copies)
        mt = conn.mt
        extra = {"mt": mt, **fields} if fields else _MT_FIELDS.get(mt) or {"mt": mt}
        try:
            return txlog.journal.append(
                publisher_id=conn.state.publisher_id,
                sequence=jseq,
                topic=topic,
                command=command,
                payload=data,
                fields=extra,
            )
        except Exception as exc:
            logger.exception("journal append failed for %r", conn)
            raise CommandFailure("tx store failure", str(exc)) from exc

    def _appended(self) -> None:
        """After journal appends: ask for a group commit, move live bookmark replays on."""
        self.request_sync()
        if self._live:
            for replay in list(self._live):
                self._pump(replay)

    def hold_sow_checkpoints(self, topic: str, index: int) -> None:
        """Journal record ``index`` could not be applied to the SOW topics it concerns
        (``topic`` is a name, or a sow_delete's pattern): keep their checkpoints below it so
        that the next start re-applies it (:meth:`SowTopic.hold_checkpoint`)."""
        try:
            matcher = compile_topic(topic)
        except TopicError:
            matcher = None
        for name, group in self._sow_by_name.items():
            if name == topic or (matcher is not None and matcher.matches(name)):
                for sow in group:
                    sow.hold_checkpoint(index)

    def _deliver_plain(
        self,
        route: Route,
        topic: str,
        data: bytes,
        x: str | None,
        mt: str,
        bm: str | None = None,
    ) -> None:
        head = '{"c":"p","t":"' + escape(topic) + '","sids":"'
        tail = (
            '"'
            + (',"bm":"' + bm + '"' if bm else "")
            + (',"x":"' + escape(x) + '"' if x else "")
            + "}"
        )
        doc: Any = _ABSENT
        ts_tail: str | None = None
        for conn, subs in route:
            sids: list[str] = []
            ts_sids: list[str] | None = None
            for sub in subs:
                pred = sub.predicate
                if pred is not None:
                    if doc is _ABSENT:
                        doc = decode(mt, data)
                    if doc is None or not pred(doc):
                        continue
                if sub.conflation is not None:
                    if doc is _ABSENT:
                        doc = decode(mt, data)
                    sub_tail = tail
                    if sub.timestamp:
                        if ts_tail is None:
                            ts_tail = tail[:-1] + ',"ts":"' + format_timestamp(self.clock()) + '"}'
                        sub_tail = ts_tail
                    frame = (head + sub.sid + sub_tail).encode() + data
                    key = sub.conflation.spec.key(topic, doc, None)
                    self._conflate(sub, key, LiveHeld(frame))
                    continue
                if sub.timestamp:
                    if ts_sids is None:
                        ts_sids = []
                    if ts_tail is None:
                        ts_tail = tail[:-1] + ',"ts":"' + format_timestamp(self.clock()) + '"}'
                    if sub.paused:
                        sub.hold((head + sub.sid + ts_tail).encode() + data)
                    else:
                        ts_sids.append(sub.sid)
                elif sub.paused:
                    sub.hold((head + sub.sid + tail).encode() + data)
                else:
                    sids.append(sub.sid)
            send = conn.session.send
            if sids:
                send((head + ",".join(sids) + tail).encode() + data)
            if ts_sids:
                assert ts_tail is not None
                send((head + ",".join(ts_sids) + ts_tail).encode() + data)

    # ------------------------------------------------------------------ SOW publish

    def _expiration(self, sow: SowTopic, hdr: Header, now: float) -> float | None:
        e = hdr.get("e")
        if e is not None and e != "":
            try:
                seconds = float(e)
            except (TypeError, ValueError):
                raise CommandFailure("invalid options", f"bad expiration {e!r}") from None
            return now + seconds if seconds > 0 else None
        default = self._sow_expiration.get(id(sow))
        return now + default if default else None

    def _publish_sow(
        self,
        conn: Connection,
        sow: SowTopic,
        hdr: Header,
        data: bytes,
        delta: bool,
        seq: int | None,
    ) -> int | None:
        mt = sow.message_type
        doc = decode(mt, data)
        sow_key = _text(hdr.get("k"))
        if doc is None and not sow_key:
            raise CommandFailure("bad sow key", "cannot compute a SOW key for this payload")
        key = sow.compute_key(doc, sow_key)
        prev_doc = sow.doc(key) if key in sow else _ABSENT
        now = self.clock()
        txlog = self.txlog
        recorded = txlog is not None and txlog.records(mt, sow.topic)
        jseq = 0
        journal_index: int | None = None
        if recorded:
            assert txlog is not None
            journal_index = txlog.journal.last_index + 1  # what _journal_append below will get
            jseq = self._journal_sequence(conn, seq)
            assert conn.state is not None
            bookmark = f"{conn.state.publisher_id}|{jseq}|"
        else:
            bookmark = self.assign_bookmark(conn, sow.topic, seq)
        x = _text(hdr.get("x"))
        kwargs: dict[str, Any] = {
            "doc": doc,
            "sow_key": sow_key,
            "bookmark": bookmark,
            "timestamp": format_timestamp(now),
            "correlation_id": x,
            "expiration": self._expiration(sow, hdr, now),
            "journal_index": journal_index,
        }
        index = None
        with sow.batch():  # a journal append that fails takes the SOW write back with it
            try:
                if delta:
                    record, _previous, new_doc = sow.delta_publish(data, **kwargs)
                else:
                    record, _previous = sow.publish(data, **kwargs)
                    new_doc = doc
            except Exception as exc:
                logger.exception("SOW %r: write failed", sow.topic)
                raise CommandFailure("sow store failed", str(exc)) from exc
            if recorded:
                fields: dict[str, str | int] = {"k": record.key}
                if x:
                    fields["x"] = x
                e = hdr.get("e")
                if e is not None and e != "":
                    fields["e"] = str(e)
                command = "delta_publish" if delta else "p"
                index = self._journal_append(conn, jseq, sow.topic, command, record.data, fields)
                index = index.index
        if recorded:
            self._appended()
            if index != journal_index:  # pragma: no cover - the loop is the only writer
                logger.warning("SOW %r: journal index %s, not %s", sow.topic, index, journal_index)
        route = self._route(mt, sow.topic)
        if route:
            self._deliver_sow(route, sow, record, new_doc, prev_doc)
        return index

    def _delta_body(self, sow: SowTopic, prev_doc: Any, new_doc: Any) -> tuple[bytes, bool] | None:
        """``(delta payload, changed)``, or ``None`` when a delta cannot be computed."""
        if not isinstance(prev_doc, dict) or not isinstance(new_doc, dict):
            return None
        out: dict[str, Any] = {}
        for name, value in new_doc.items():
            if name not in prev_doc or prev_doc[name] != value:
                out[name] = value
        changed = bool(out)
        for path in sow.keys:
            parts = parse_path(path)
            if parts and parts[0] not in out:
                value = lookup_path(new_doc, path)
                if value is not None:
                    _set_path(out, parts, value)
        ordered = {name: out[name] for name in new_doc if name in out}
        try:
            return encode(sow.message_type, ordered), changed
        except ValueError:
            return None

    def _deliver_sow(
        self,
        route: Route,
        sow: SowTopic,
        record: SowRecord,
        new_doc: Any,
        prev_doc: Any,
    ) -> None:
        base: dict[str, Any] = {"c": "p", "t": sow.topic, "sids": None, "k": record.key}
        if record.bookmark:
            base["bm"] = record.bookmark
        if record.correlation_id:
            base["x"] = record.correlation_id
        delta_info: Any = _ABSENT
        for conn, subs in route:
            # (kind, timestamp) -> sub ids; kind: "p" full, "d" delta, "o" oof
            groups: dict[tuple[str, bool], list[Subscription]] = {}
            for sub in subs:
                pred = sub.predicate
                matches = pred is None or (new_doc is not None and pred(new_doc))
                if matches and sub.conflation is not None:
                    self._conflate_sow(sub, sow, record, new_doc, prev_doc)
                    continue
                if matches:
                    kind = "p"
                    if sub.delta and prev_doc is not _ABSENT:
                        if delta_info is _ABSENT:
                            delta_info = self._delta_body(sow, prev_doc, new_doc)
                        if delta_info is not None:
                            if not delta_info[1] and sub.no_empties:
                                continue
                            kind = "d"
                elif (
                    sub.oof
                    and pred is not None
                    and prev_doc is not _ABSENT
                    and prev_doc is not None
                    and pred(prev_doc)
                ):
                    kind = "o"
                    if sub.conflation is not None:  # what is held no longer matches
                        sub.conflation.holds.pop(
                            sub.conflation.spec.key(sow.topic, prev_doc, record.key)
                        )
                else:
                    continue
                groups.setdefault((kind, sub.timestamp and kind != "o"), []).append(sub)
            for (kind, with_ts), group in groups.items():
                if kind == "o":
                    fields: dict[str, Any] = {
                        "c": "oof",
                        "t": sow.topic,
                        "sids": None,
                        "k": record.key,
                        "reason": "match",
                    }
                    body = record.data
                else:
                    fields = dict(base)
                    if with_ts:
                        fields["ts"] = record.timestamp
                    body = delta_info[0] if kind == "d" else record.data
                self._send_group(conn, group, fields, body)

    @staticmethod
    def _send_group(
        conn: Connection, group: Sequence[Subscription], fields: dict[str, Any], body: bytes
    ) -> None:
        live = [s.sid for s in group if not s.paused]
        for sub in group:
            if sub.paused:
                fields["sids"] = sub.sub_id
                sub.hold(encode_header(fields) + body)
        if live:
            fields["sids"] = ",".join(s.sub_id for s in group if not s.paused)
            conn.session.send(encode_header(fields) + body)

    def _sow_removed(self, sow: SowTopic, records: Sequence[SowRecord], reason: str) -> None:
        """Send oof ``reason`` (``deleted``/``expired``) for removed records to oof subscribers."""
        if not records:
            return
        route = self._route(sow.message_type, sow.topic)
        targets = [(conn, [s for s in subs if s.oof]) for conn, subs in route]
        targets = [(conn, subs) for conn, subs in targets if subs]
        if not targets:
            return
        for record in records:
            doc: Any = _ABSENT
            for conn, subs in targets:
                group: list[Subscription] = []
                for sub in subs:
                    pred = sub.predicate
                    if pred is not None:
                        if doc is _ABSENT:
                            doc = decode(sow.message_type, record.data)
                        if doc is None or not pred(doc):
                            continue
                    if sub.conflation is not None:
                        if doc is _ABSENT:
                            doc = decode(sow.message_type, record.data)
                        spec = sub.conflation.spec
                        sub.conflation.holds.pop(spec.key(sow.topic, doc, record.key))
                    group.append(sub)
                if group:
                    fields: dict[str, Any] = {
                        "c": "oof",
                        "t": sow.topic,
                        "sids": None,
                        "k": record.key,
                        "reason": reason,
                    }
                    if record.correlation_id:
                        fields["x"] = record.correlation_id
                    self._send_group(conn, group, fields, record.data)

    def expire(self, now: float | None = None) -> int:
        """Remove expired SOW records (oof ``expired``); return how many. Call periodically."""
        when = self.clock() if now is None else now
        total = 0
        for sow in self.sow_topics:
            try:
                gone = sow.expire(when)
            except Exception:  # pragma: no cover - storage trouble must not stop the loop
                logger.exception("SOW %r: expiration failed", sow.topic)
                continue
            total += len(gone)
            self._sow_removed(sow, gone, "expired")
        return total

    # ------------------------------------------------------------------ conflation

    def _conflate(self, sub: Subscription, key: Any, held: LiveHeld) -> None:
        """Hold ``held`` for ``key`` on a conflated subscription: a new hold of the interval,
        or the replacement of what is held for that key."""
        conf = sub.conflation
        assert conf is not None
        if self.call_later is None:  # no timers (unit tests): nothing could release it later
            self._send_held(sub, [held])
            return
        started = conf.holds.hold(key, held, self.clock() + conf.spec.interval)
        if started and conf.timer is None:
            self._arm_conflation(sub, conf)

    def _arm_conflation(self, sub: Subscription, conf: LiveConflation) -> None:
        """Schedule the release of the oldest hold (if any)."""
        deadline = conf.holds.next_deadline()
        if deadline is None or self.call_later is None:
            return
        delay = max(0.0, deadline - self.clock())
        conf.timer = self.call_later(delay, lambda: self._conflation_due(sub, conf))

    def _conflation_due(self, sub: Subscription, conf: LiveConflation) -> None:
        """A hold's interval is over: deliver what is due, wait for the next one."""
        conf.timer = None
        if sub.conflation is not conf or sub.conn.closed:
            conf.close()
            return
        self._send_held(sub, conf.holds.release(self.clock()))
        self._arm_conflation(sub, conf)

    @staticmethod
    def _send_held(sub: Subscription, held: Iterable[LiveHeld]) -> None:
        """Deliver released holds (into the pause buffer while the subscription is paused)."""
        send = sub.conn.session.send
        for item in held:
            if sub.paused:
                sub.hold(item.frame)
            else:
                send(item.frame)

    def _conflate_sow(
        self,
        sub: Subscription,
        sow: SowTopic,
        record: SowRecord,
        new_doc: Any,
        prev_doc: Any,
    ) -> None:
        """Hold a SOW update for a conflated subscription. A delta subscription gets, at the
        end of the interval, the delta from the record's state before the hold started."""
        conf = sub.conflation
        assert conf is not None
        key = conf.spec.key(sow.topic, new_doc, record.key)
        held = conf.holds.get(key)
        base = held.base if held is not None else prev_doc
        body = record.data
        if sub.delta and base is not _ABSENT:
            info = self._delta_body(sow, base, new_doc)
            if info is not None:
                if not info[1] and sub.no_empties:
                    conf.holds.pop(key)  # back to what the subscriber has: nothing to send
                    return
                body = info[0]
        fields: dict[str, Any] = {"c": "p", "t": sow.topic, "sids": sub.sub_id, "k": record.key}
        if record.bookmark:
            fields["bm"] = record.bookmark
        if record.correlation_id:
            fields["x"] = record.correlation_id
        if sub.timestamp:
            fields["ts"] = record.timestamp
        self._conflate(sub, key, LiveHeld(encode_header(fields) + body, base))

    # ------------------------------------------------------------------ subscribe

    def _cmd_subscribe(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        self._subscribe_command(conn, hdr, delta=False)

    def _cmd_delta_subscribe(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        self._subscribe_command(conn, hdr, delta=True)

    @staticmethod
    def _compile_filter(hdr: Header) -> tuple[str | None, Callable[[Any], bool] | None]:
        text = _text(hdr.get("filter"))
        if text is None or not text.strip():
            return None, None
        try:
            return text, compile_filter(text)
        except FilterError as exc:
            raise CommandFailure("bad filter", str(exc)) from None
        except (RecursionError, ValueError) as exc:
            raise CommandFailure("bad filter", str(exc)) from None

    @staticmethod
    def _matcher(topic: str) -> TopicMatcher:
        try:
            return compile_topic(topic)
        except TopicError as exc:
            raise CommandFailure("bad regex topic", str(exc)) from None

    def _check_topic_type(self, conn: Connection, matcher: TopicMatcher) -> None:
        if matcher.is_regex:
            return
        group = self._sow_by_name.get(matcher.topic)
        if group and all(s.message_type != conn.mt for s in group):
            raise CommandFailure(
                "invalid message type",
                f"topic {matcher.topic!r} is a SOW topic of another message type",
            )

    def _prepare_subscription(
        self, conn: Connection, hdr: Header, options: Mapping[str, str], *, delta: bool
    ) -> tuple[Subscription, Subscription | None]:
        """Validate a subscribe-type command; return ``(new sub, sub it replaces or None)``."""
        topic = _text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "subscribe without a topic")
        matcher = self._matcher(topic)
        if self.guard is not None:
            matcher = self.guard.matcher(conn, hdr, matcher)
        self._check_topic_type(conn, matcher)
        filter_text, predicate = self._compile_filter(hdr)
        sub_id = _text(hdr.get("sub_id")) or _text(hdr.get("cid"))
        if sub_id is None or "," in sub_id:
            raise CommandFailure("invalid subId", f"bad sub_id {sub_id!r}")
        existing = conn.subs.get(sub_id)
        if existing is not None and "replace" not in options:
            raise CommandFailure("subid in use", f"sub_id {sub_id!r} already exists")
        for name in ("top_n", "skip_n", "max_backlog"):
            if name in options:
                value = _int_field(options[name])
                if value is not None and value < 0:
                    raise CommandFailure("invalid options", f"{name} must be >= 0")
        conflation = self._conflation_spec(conn, matcher, options)
        sub = Subscription(
            conn,
            sub_id,
            matcher,
            filter_text=filter_text,
            predicate=predicate,
            options=options,
            delta=delta,
        )
        if conflation is not None:
            sub.conflation = LiveConflation(conflation)
        if existing is not None:
            sub.paused = existing.paused if "pause" not in options else True
            sub.held = existing.held
            sub.dropped = existing.dropped
        return sub, existing

    def _conflation_spec(
        self, conn: Connection, matcher: TopicMatcher, options: Mapping[str, str]
    ) -> ConflationSpec | None:
        """The conflation a subscription asks for (the SOW key is the default key, so a topic
        that is not a SOW topic needs ``conflation_key``)."""
        has_key = not matcher.is_regex and self.sow_topic(matcher.topic, conn.mt) is not None
        try:
            return parse_conflation(options, has_sow_key=has_key)
        except ConflationError as exc:
            raise CommandFailure(exc.reason, str(exc)) from None

    def _install(self, sub: Subscription, replaced: Subscription | None) -> None:
        if replaced is not None:
            if replaced.conflation is not None:
                # the replacement takes over the sub_id: what was held goes out now
                self._send_held(replaced, replaced.conflation.holds.release_all())
            self._remove_sub(replaced)
        self._add_sub(sub)

    def _pause_resume(
        self, conn: Connection, hdr: Header, options: Mapping[str, str]
    ) -> str | None:
        ids = _split_list(hdr.get("sub_id"))
        if not ids:
            raise CommandFailure("invalid subId", "pause/resume without sub_id")
        resumed: list[Replay] = []
        for sub_id in ids:
            sub = conn.subs.get(sub_id)
            if sub is None:
                continue
            if "pause" in options:
                sub.paused = True
                if sub.replay is not None:
                    heir = self._ungroup(sub.replay)
                    if heir is not None:
                        self._pump(heir)
            elif sub.paused:
                sub.paused = False
                held = list(sub.held)
                sub.held.clear()
                if sub.dropped:
                    logger.warning("%r: %d deliveries dropped while paused", sub, sub.dropped)
                    sub.dropped = 0
                for frame in held:
                    conn.session.send(frame)
                if sub.replay is not None:
                    resumed.append(sub.replay)
        if resumed:
            self._group_resumed(resumed)
        return ",".join(ids)

    def _subscribe_command(self, conn: Connection, hdr: Header, *, delta: bool) -> None:
        options = _options(hdr)
        flags = _flags(hdr)
        if ("pause" in options or "resume" in options) and _text(hdr.get("t")) is None:
            sub_ids = self._pause_resume(conn, hdr, options)
            self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED | _COMPLETED), sub_id=sub_ids)
            return
        sub, replaced = self._prepare_subscription(conn, hdr, options, delta=delta)
        bookmark = _text(hdr.get("bm"))
        if bookmark is not None and self.txlog is not None:
            self._prepare_replay(conn, sub, bookmark, hdr, flags)
        self._install(sub, replaced)
        if "resume" in options and sub.paused:
            self._pause_resume(conn, {"sub_id": sub.sub_id}, {"resume": ""})
        self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED), sub_id=sub.sub_id)
        if sub.replay is not None:
            self._pump(sub.replay)
            return
        if bookmark is not None:
            self.start_bookmark_replay(conn, sub, bookmark, hdr)
        self._acks(conn, hdr, flags & _COMPLETED, sub_id=sub.sub_id)

    # ------------------------------------------------------------------ unsubscribe / flush

    def _cmd_unsubscribe(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        ids = _split_list(hdr.get("sub_id"))
        if not ids:
            raise CommandFailure("invalid subId", "unsubscribe without sub_id")
        if "all" in ids:
            for sub in list(conn.subs.values()):
                self._remove_sub(sub)
        else:
            for sub_id in ids:
                found = conn.subs.get(sub_id)
                if found is not None:
                    self._remove_sub(found)
        flags = _flags(hdr)
        self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED | _COMPLETED))

    def _cmd_flush(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        state = conn.state
        if state is not None and state.durable_wait:
            # answer once everything this client published before is durable
            conn.deferred_flush.append(hdr)
            self.request_sync()
            return
        txlog = self.txlog
        if txlog is not None and _flags(hdr) & _PERSISTED:
            # a persisted ack means everything received so far is durable (plain publishes too)
            target = txlog.journal.last_index
            if txlog.journal.durable_index < target:
                self._flush_waits.append((target, conn, hdr))
                self.request_sync()
                return
        self._flush_ack(conn, hdr)

    def _flush_ack(self, conn: Connection, hdr: Header) -> None:
        self._flush_persisted(conn)
        flags = _flags(hdr)
        self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED))
        if flags & _PERSISTED:
            self._ack(conn, hdr, "persisted")
        self._acks(conn, hdr, flags & _COMPLETED)

    def _cmd_heartbeat(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        options = _split_list(hdr.get("o"))
        if options and options[0] == "start":
            interval: float | None = None
            if len(options) > 1:
                try:
                    interval = float(options[1])
                except ValueError:
                    interval = None
            if interval is None or interval <= 0:
                raise CommandFailure("invalid options", f"bad heartbeat options {hdr.get('o')!r}")
            conn.session.start_heartbeat(interval)
        flags = _flags(hdr)
        self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED))

    # ------------------------------------------------------------------ sow queries

    def _cmd_sow(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        self._sow_command(conn, hdr, subscribe=False, delta=False)

    def _cmd_sow_and_subscribe(
        self, conn: Connection, hdr: Header, payload: bytes, end: int
    ) -> None:
        self._sow_command(conn, hdr, subscribe=True, delta=False)

    def _cmd_sow_and_delta_subscribe(
        self, conn: Connection, hdr: Header, payload: bytes, end: int
    ) -> None:
        self._sow_command(conn, hdr, subscribe=True, delta=True)

    def _sows_for(self, conn: Connection, matcher: TopicMatcher) -> list[SowTopic]:
        """SOW topics selected by ``matcher`` for the connection's message type."""
        mt = conn.mt
        if not matcher.is_regex:
            group = self._sow_by_name.get(matcher.topic)
            if not group:
                raise CommandFailure("invalid topic", f"{matcher.topic!r} is not a SOW topic")
            found = [s for s in group if s.message_type == mt]
            if not found:
                raise CommandFailure(
                    "invalid message type", f"{matcher.topic!r} is a SOW topic of another type"
                )
            return found
        found = [
            s
            for name, group in self._sow_by_name.items()
            if matcher.matches(name)
            for s in group
            if s.message_type == mt
        ]
        if not found:
            raise CommandFailure("invalid topic", f"no SOW topic matches {matcher.topic!r}")
        return found

    def _query(
        self,
        sows: Sequence[SowTopic],
        predicate: Callable[[Any], bool] | None,
        *,
        keys: list[str] | None,
        order_by: OrderBy | None,
        top_n: int | None,
        skip_n: int,
    ) -> tuple[list[tuple[SowTopic, SowRecord]], int, int]:
        """``(records, matches, topic_matches)``."""
        topic_matches = sum(len(s) for s in sows)
        if len(sows) == 1:
            sow = sows[0]
            records, matches = sow.query(
                predicate, keys=keys, order_by=order_by, top_n=top_n, skip_n=skip_n
            )
            return [(sow, r) for r in records], matches, topic_matches
        combined: list[tuple[SowTopic, SowRecord]] = []
        matches = 0
        for sow in sows:
            records, count = sow.query(predicate, keys=keys)
            matches += count
            combined.extend((sow, r) for r in records)
        if order_by is not None:
            combined.sort(key=lambda item: order_by.key(item[0].doc(item[1].key)))
        stop = None if top_n is None else skip_n + top_n
        return combined[skip_n:stop], matches, topic_matches

    def _sow_command(self, conn: Connection, hdr: Header, *, subscribe: bool, delta: bool) -> None:
        options = _options(hdr)
        flags = _flags(hdr)
        topic = _text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "sow without a topic")
        matcher = self._matcher(topic)
        if self.guard is not None:
            matcher = self.guard.matcher(conn, hdr, matcher)
        sows = self._sows_for(conn, matcher)
        _filter_text, predicate = self._compile_filter(hdr)
        order_by: OrderBy | None = None
        order_text = _text(hdr.get("orderby")) or options.get("orderby") or None
        if order_text:
            try:
                order_by = parse_order_by(order_text)
            except OrderByError as exc:
                raise CommandFailure("invalid order by", str(exc)) from None
        top_n = _int_field(hdr.get("top_n"))
        if top_n is None:
            top_n = _int_field(options.get("top_n"))
        skip_n = _int_field(options.get("skip_n")) or 0
        if (top_n is not None and top_n < 0) or skip_n < 0:
            raise CommandFailure("invalid options", "top_n/skip_n must be >= 0")
        select: Select | None = None
        if options.get("select"):
            try:
                select = parse_select(options["select"])
            except SelectError as exc:
                raise CommandFailure("invalid options", str(exc)) from None
        batch_size = _int_field(hdr.get("bs")) or 1
        if batch_size < 1:
            batch_size = 1
        keys = _split_list(hdr.get("sow_keys")) if hdr.get("sow_keys") else None
        sub: Subscription | None = None
        replaced: Subscription | None = None
        if subscribe:
            sub, replaced = self._prepare_subscription(conn, hdr, options, delta=delta)
        cid = _text(hdr.get("cid"))
        query_id = _text(hdr.get("query_id")) or cid or (sub.sub_id if sub else None) or ""
        sub_id = sub.sub_id if sub is not None else None

        results, matches, topic_matches = self._query(
            sows, predicate, keys=keys, order_by=order_by, top_n=top_n, skip_n=skip_n
        )
        self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED), sub_id=sub_id, query_id=query_id)
        send = conn.session.send
        send(encode_header({"c": "group_begin", "query_id": query_id}))
        with_ts = "timestamp" in options
        for batch_topic, batch in self._batches(results, batch_size):
            parts: list[bytes] = []
            with_x = any(r.correlation_id for _, r in batch)
            for sow, record in batch:
                data = record.data
                if select is not None:
                    doc = sow.doc(record.key)
                    if doc is not None:
                        data = encode(sow.message_type, apply_select(doc, select))
                rh: dict[str, Any] = {"k": record.key, "bm": record.bookmark}
                if with_x:
                    rh["x"] = record.correlation_id or ""
                if with_ts:
                    rh["ts"] = record.timestamp
                rh["l"] = len(data)
                parts.append(encode_header(rh))
                parts.append(data)
            outer = {"c": "sow", "t": batch_topic, "query_id": query_id, "bs": len(batch)}
            send(encode_header(outer) + b"".join(parts))
        send(encode_header({"c": "group_end", "query_id": query_id}))
        if sub is not None:
            self._install(sub, replaced)
        stats = {
            "records_returned": len(results),
            "topic_matches": topic_matches,
            "matches": matches,
        }
        self._acks(
            conn, hdr, flags & (_COMPLETED | _STATS), sub_id=sub_id, query_id=query_id, extra=stats
        )

    @staticmethod
    def _batches(
        results: list[tuple[SowTopic, SowRecord]], size: int
    ) -> Iterator[tuple[str, list[tuple[SowTopic, SowRecord]]]]:
        batch: list[tuple[SowTopic, SowRecord]] = []
        current: str | None = None
        for item in results:
            topic = item[0].topic
            if batch and (topic != current or len(batch) >= size):
                assert current is not None
                yield current, batch
                batch = []
            current = topic
            batch.append(item)
        if batch:
            assert current is not None
            yield current, batch

    # ------------------------------------------------------------------ sow_delete

    def _cmd_sow_delete(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        topic = _text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "sow_delete without a topic")
        flags = _flags(hdr)
        matcher = self._matcher(topic)
        if self.guard is not None:
            matcher = self.guard.matcher(conn, hdr, matcher)
        body = payload[end:]
        filter_text, predicate = self._compile_filter(hdr)
        keys = _split_list(hdr.get("sow_keys")) if hdr.get("sow_keys") else None
        state = conn.state
        assert state is not None
        seq = self._sequence(conn, hdr, flags)
        duplicate = seq is not None and seq <= state.last_seq
        deleted = 0
        topic_matches = 0
        queue_ack = (
            _text(hdr.get("bm")) is not None and filter_text is None and keys is None and not body
        )
        txlog = self.txlog
        recorded = (
            not queue_ack
            and not duplicate
            and txlog is not None
            and any(txlog.records(s.message_type, s.topic) for s in self._sows_for(conn, matcher))
        )
        journal_index = txlog.journal.last_index + 1 if recorded and txlog is not None else None
        if queue_ack:
            # Queue acknowledgement (protocol.md §9): queues are a later task; accept as no-op.
            logger.debug("%r: queue ack on %r ignored (no queues)", conn, topic)
        elif duplicate:
            self.counters["duplicates"] += 1
        index = None
        removed: list[tuple[SowTopic, list[SowRecord]]] = []
        if not queue_ack and not duplicate:
            sows = self._sows_for(conn, matcher)
            sow_key = _text(hdr.get("k"))
            data_doc: Any = None
            if body:
                data_doc = decode(conn.mt, body)
                if data_doc is None and not sow_key:
                    raise CommandFailure("bad sow key", "cannot compute a SOW key for the data")
            with ExitStack() as batch:  # a journal append that fails takes the deletes back
                for sow in sows:
                    batch.enter_context(sow.batch())
                for sow in sows:
                    topic_matches += len(sow)
                    try:
                        gone = sow.delete(
                            predicate,
                            keys=keys,
                            data_doc=data_doc,
                            sow_key=sow_key if body or sow_key else None,
                            journal_index=journal_index,
                        )
                    except Exception as exc:
                        logger.exception("SOW %r: delete failed", sow.topic)
                        raise CommandFailure("sow store failed", str(exc)) from exc
                    deleted += len(gone)
                    removed.append((sow, gone))
                if recorded:
                    fields: dict[str, str | int] = {}
                    if filter_text is not None:
                        fields["filter"] = filter_text
                    if keys is not None:
                        fields["sow_keys"] = ",".join(keys)
                    sk = _text(hdr.get("k"))
                    if sk is not None:
                        fields["k"] = sk
                    jseq = self._journal_sequence(conn, seq)
                    record = self._journal_append(conn, jseq, topic, "sow_delete", body, fields)
                    index = record.index
            if recorded:
                self._appended()
            for sow, gone in removed:  # subscribers hear of it once it stands
                self._sow_removed(sow, gone, "deleted")
        self._acks(conn, hdr, flags & (_RECEIVED | _PROCESSED))
        if seq is not None:
            if not duplicate:
                state.last_seq = seq
            self._note_persisted(conn, index, seq)
        stats = {"records_deleted": deleted, "matches": deleted, "topic_matches": topic_matches}
        self._acks(conn, hdr, flags & (_COMPLETED | _STATS), extra=stats)
