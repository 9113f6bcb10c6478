"""Connection and publisher state: who is connected, under which client name, subscribed to what.

* :class:`ClientState`: what the server remembers about a client *name* across its
  connections (publish sequence for de-duplication, what may be acknowledged as persisted);
* :class:`Connection`: one client connection;
* :class:`Subscription`: one subscription of one connection;
* :class:`Clients`: the registry of connections and client states (by id, by name, by
  publisher id).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient.protocol.header import Header, escape

from .conflation import LiveConflation
from .topics import TopicMatcher

if TYPE_CHECKING:
    from .pagination import Page
    from .session import Session, TimerHandle
    from .txlog import Replay

__all__ = [
    "DEFAULT_ACK_CONFLATION",
    "ClientState",
    "Clients",
    "Connection",
    "Route",
    "Subscription",
]

logger = logging.getLogger(__name__)

DEFAULT_ACK_CONFLATION: Final = 0.005
"""Seconds between conflated persisted acks unless the logon asks otherwise."""


class ClientState:
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
    """The broker's view of one client connection (created by :meth:`Clients.connect`)."""

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
        "run_sink",
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
        self.state: ClientState | None = None
        self.subs: dict[str, Subscription] = {}
        self.ack_conflation = DEFAULT_ACK_CONFLATION
        self.persist_pending = False
        self.persist_count = 0
        self.persist_timer: TimerHandle | None = None
        self.deferred_flush: list[Header] = []
        """``flush`` commands waiting for this client's publishes to become durable."""
        self.run_sink: Callable[[int, list[tuple[int, str, bytes]]], None] | None = None
        """Takes a journaled run of plain publishes, ``(publisher id, [(sequence, topic,
        body), ...])``, in place of their delivery frames (a queue's intake); ``None``: the
        frames go to the session."""

    @property
    def mt(self) -> str:
        """The connection's message type (``json`` when nobody said)."""
        return self.message_type or "json"

    def conflation_bytes(self) -> int:
        """Bytes held for conflation by this connection's subscriptions (live and replay): they
        count toward the client's memory in its resource pool."""
        total = 0
        for sub in self.subs.values():
            if sub.conflation is not None:
                total += sub.conflation.held_bytes()
            replay = sub.replay
            if replay is not None and replay.conflation is not None:
                total += replay.conflation.held_bytes()
        return total

    def __repr__(self) -> str:
        return f"Connection(#{self.id} {self.client_name!r} {self.transport} {self.peer})"


class Subscription:
    """One subscription of one connection."""

    __slots__ = (
        "conflation",
        "conn",
        "delta",
        "filter_text",
        "matcher",
        "message_type",
        "no_empties",
        "oof",
        "options",
        "page",
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
        """A paused bookmark subscription (only those can be paused): its replay waits."""
        self.replay: Replay[Subscription] | None = None
        """For bookmark subscriptions: the cursor over the transaction log."""
        self.conflation: LiveConflation | None = None
        self.page: Page | None = None
        """The page of a paginated ``sow_and_subscribe`` (``top_n`` and ``skip_n``;
        :mod:`.pagination`): only what enters, changes in or leaves it is delivered."""
        """Conflation holds of a regular subscription (options ``conflation``/``conflation_key``;
        a bookmark subscription's are on its :attr:`replay`)."""

    def __repr__(self) -> str:
        return f"Subscription({self.sub_id!r}, {self.matcher.topic!r}, filter={self.filter_text!r})"


Route = tuple[tuple[Connection, tuple[Subscription, ...]], ...]
"""Matching subscriptions of one (message type, topic), grouped by connection."""


class Clients:
    """Open connections and the client states of every name seen since the start.

    Args:
        last_sequence: ``last_sequence(publisher_id)``, the highest sequence the journal
            holds for a publisher (a new client state starts there); ``None``: 0.
    """

    def __init__(self, last_sequence: Callable[[int], int] | None = None) -> None:
        self._last_sequence = last_sequence
        self._next_id = 0
        self._connections: dict[int, Connection] = {}
        self._by_name: dict[str, Connection] = {}
        self._states: dict[str, ClientState] = {}
        self._by_publisher: dict[int, ClientState] = {}
        self._owners: dict[str, str] = {}
        """Client name -> the authenticated user it belongs to (its first one)."""

    def connect(
        self, session: Session, *, message_type: str | None, transport: str, peer: str
    ) -> Connection:
        """Register a new connection."""
        self._next_id += 1
        conn = Connection(
            self._next_id, session, message_type=message_type, transport=transport, peer=peer
        )
        self._connections[conn.id] = conn
        return conn

    def forget(self, conn: Connection) -> None:
        """The connection is gone."""
        self._connections.pop(conn.id, None)
        if conn.client_name is not None and self._by_name.get(conn.client_name) is conn:
            del self._by_name[conn.client_name]

    def log_on(self, conn: Connection, name: str, *, owner: str | None = None) -> None:
        """``conn`` is now the connection of client name ``name``, with that name's state
        (created on its first logon, starting at the journal's last sequence for it);
        ``owner``, an authenticated user, owns the name from now on if nobody did."""
        conn.client_name = name
        if owner is not None:
            self._owners.setdefault(name, owner)
        state = self._states.get(name)
        if state is None:
            pid = publisher_id_for(name)
            last = 0 if self._last_sequence is None else self._last_sequence(pid)
            state = self._states[name] = ClientState(name, last)
            self._by_publisher[state.publisher_id] = state
        conn.state = state
        self._by_name[name] = conn

    def owner(self, client_name: str) -> str | None:
        """The authenticated user ``client_name`` belongs to, if any."""
        return self._owners.get(client_name)

    def connection(self, client_name: str) -> Connection | None:
        """The connection logged on as ``client_name``, if any."""
        return self._by_name.get(client_name)

    def state(self, client_name: str) -> ClientState | None:
        """The state of ``client_name``, if it ever logged on."""
        return self._states.get(client_name)

    def state_for_publisher(self, publisher_id: int) -> ClientState | None:
        """The state of the client name whose publisher id is ``publisher_id``, if any."""
        return self._by_publisher.get(publisher_id)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._connections.values()))

    def __len__(self) -> int:
        return len(self._connections)
