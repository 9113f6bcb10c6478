"""The policies other layers plug into the broker, as typed interfaces.

* :class:`BrokerHooks`: the policies other layers plug in, given to the broker's constructor
  as one object: group commit (``request_sync``), authentication (``authenticate``),
  security (``guard``: authentication modules and entitlements) and replication
  (``ack_limit``, ``fully_durable_limit``, ``durable_listeners``);
* :class:`QueueHooks`: the message queues (``ampsclient_server_stub.queues``), which take
  queue subscriptions and queue acknowledgements.

The engine never imports the layers that implement these (network, security, replication):
they depend on the engine, not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ampsclient.protocol.header import Header

from .session import Authenticator
from .state import Connection, Subscription
from .topics import TopicMatcher

__all__ = ["AggregatedQueries", "BrokerHooks", "Guard", "LogonVerdict", "QueueHooks"]


class LogonVerdict(Protocol):
    """The outcome of one logon attempt, as a :class:`Guard` reports it."""

    @property
    def status(self) -> str:
        """``success``, ``failure`` or ``retry``."""

    @property
    def reason(self) -> str:
        """The failure reason (empty: ``auth failure``)."""

    @property
    def challenge(self) -> str:
        """For ``retry``: what goes back to the client in ``pw``."""

    @property
    def ok(self) -> bool:
        """``True`` for ``success``."""


class Guard(Protocol):
    """Security checks (``ampsclient_server_stub.security.guard.SecurityGuard`` fits).

    Every method refuses by raising :class:`~.wire.CommandFailure`.
    """

    def authenticate(self, conn: Connection, user: str, password: str) -> LogonVerdict | None:
        """Decide on a logon; ``None``: not configured (:attr:`BrokerHooks.authenticate`)."""

    def check(self, conn: Connection, command: object, hdr: Header) -> None:
        """May ``conn`` run this command at all?"""

    def check_write(self, conn: Connection, topic: str) -> None:
        """May ``conn`` publish to ``topic``?"""

    def matcher(self, conn: Connection, hdr: Header, matcher: TopicMatcher) -> TopicMatcher:
        """The topic matcher a read command of ``conn`` really gets (entitlement filter)."""


class QueueLimits(Protocol):
    """What the subscribing side reads of a queue's configuration."""

    @property
    def max_per_subscription_backlog(self) -> int:
        """The largest backlog a subscription to the queue gets."""


class QueueView(Protocol):
    """What the subscribing side reads of one queue."""

    @property
    def config(self) -> QueueLimits:
        """The queue's configuration."""


class QueueHooks(Protocol):
    """The message queues (``ampsclient_server_stub.queues.engine.QueueEngine`` fits)."""

    @property
    def queues(self) -> Mapping[tuple[str, str], QueueView]:
        """The queues by ``(message type, queue topic)``."""

    def is_queue(self, mt: str, topic: str) -> bool:
        """``topic`` is a queue of message type ``mt``."""

    def is_view(self, mt: str, topic: str) -> bool:
        """``topic`` is a view over a queue, of message type ``mt``."""

    def subscribe(
        self,
        conn: Connection,
        hdr: Header,
        sub: Subscription,
        replaced: Subscription | None,
        flags: int,
    ) -> bool:
        """Take a validated subscription when it is a queue subscription (acks included)."""

    def acknowledge(
        self, conn: Connection, hdr: Header, predicate: Callable[[object], bool] | None
    ) -> tuple[int, int, int | None]:
        """A ``sow_delete`` on a queue topic: ``(deleted, topic matches, journal index)``."""

    def query(self, conn: Connection, hdr: Header, matcher: TopicMatcher) -> bool:
        """Answer a ``sow`` query of a queue topic (``False``: not a queue)."""

    def replay_matcher(self, mt: str, matcher: TopicMatcher) -> TopicMatcher:
        """What a bookmark subscription to ``matcher`` replays: a queue's underlying
        topics, anything else itself."""

    def sow_and_subscribe(
        self,
        conn: Connection,
        hdr: Header,
        matcher: TopicMatcher,
        sub: Subscription,
        replaced: Subscription | None,
    ) -> None:
        """Answer a ``sow_and_subscribe`` on the queue (or view) ``matcher.topic``: its
        available messages, then a queue subscription."""


class AggregatedQueries(Protocol):
    """Aggregated subscriptions: ``sow``/``sow_and_subscribe`` with ``projection=[...]`` and
    ``grouping=[...]`` options (``ampsclient_server_stub.views.aggregated`` fits)."""

    def run(
        self,
        conn: Connection,
        hdr: Header,
        options: Mapping[str, str],
        matcher: TopicMatcher,
        *,
        subscribe: bool,
        prepare: Callable[[], tuple[Subscription, Subscription | None]],
        remove: Callable[[Subscription], None],
    ) -> bool:
        """Answer the command when it is an aggregated one (``False``: it is not)."""
        ...


@dataclass(slots=True)
class BrokerHooks:
    """The policies plugged into a broker (every one optional).

    The broker fills in :attr:`queues`, :attr:`aggregated` and :attr:`client_status` while it
    is built, then calls :meth:`freeze`: setting any field afterwards raises. The replication
    limits (:attr:`ack_limit`, :attr:`fully_durable_limit`) are given at construction too:
    a ``ampsclient_server_stub.replication.plug.ReplicationPlug``'s, which the replication
    manager attaches to while it runs (it starts after the broker); it adds an entry to
    :attr:`durable_listeners` (a list: the field itself does not change).
    """

    request_sync: Callable[[], None] | None = None
    """Ask for a group commit, answered by ``Broker.on_durable``; ``None``: commit inline."""
    authenticate: Authenticator | None = None
    """``(user_id, password) -> bool`` when no :attr:`guard` decides; ``None``: allow all."""
    guard: Guard | None = None
    """Security hook (authentication modules, entitlements)."""
    ack_limit: Callable[[int], int] | None = None
    """``ack_limit(durable)``: the highest journal index persisted acks may cover."""
    fully_durable_limit: Callable[[], int] | None = None
    """The highest journal index a ``fully_durable`` bookmark replay may deliver."""
    durable_listeners: list[Callable[[int], None]] = field(default_factory=list)
    """Called with the durable index at the end of ``Broker.on_durable``."""
    queues: QueueHooks | None = None
    """The message queues, when the configuration defines any."""
    aggregated: AggregatedQueries | None = None
    """Aggregated subscriptions (``projection``/``grouping`` options of SOW queries)."""
    client_status: Callable[[Connection, str, Mapping[str, str | None]], None] | None = None
    """Told ``(conn, event, fields)`` of a client's ``logon`` and ``sow`` (the broker publishes
    ``/AMPS/ClientStatus``)."""
    _frozen: bool = field(default=False, init=False, repr=False, compare=False)

    def freeze(self) -> None:
        """Refuse any later assignment: the broker is built."""
        self._frozen = True

    def __setattr__(self, name: str, value: object) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"BrokerHooks.{name} cannot change once the broker is built")
        object.__setattr__(self, name, value)
