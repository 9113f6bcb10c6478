"""The HA reconnect sequence, without I/O: what an HA client sends after each logon, in order.

:class:`HASequence` sits next to a :class:`~ampsclient.core.connection.ClientCore` and is told
when the connection logged on (with the logon ack's ``s``: what the server already holds of
this client's publishes) and when it went away. It then:

1. discards from the publish store what ``s`` covers (:class:`StoreDiscarded`);
2. replays every stored message above it, in sequence order, through the core (the stored
   bytes as they are: a replayed queue ``cancel`` stays a ``cancel``) (:class:`PublishesReplayed`);
3. hands out, one at a time, the commands that re-place each subscription
   (:meth:`HASequence.next_resubscribe`), a bookmark subscription from its resume point, and
   takes each outcome back (:meth:`HASequence.resubscribed`,
   :meth:`HASequence.resubscribe_failed`);
4. replays what was stored while that went on, then says new publishes may go straight out
   (:class:`SequenceOpened`).

The phase is an enum moved only through :data:`HA_TRANSITIONS` (each move is an
:class:`HAPhaseChanged` event)::

    DISCONNECTED | CLOSED --logged_on--> REPLAYING --replayed--> RESUBSCRIBING --open--> OPEN
    REPLAYING | RESUBSCRIBING | OPEN --connection_lost / resubscribe failed--> DISCONNECTED
    any --closed--> CLOSED

It never waits, never locks and never touches a future: the HA wing
(:class:`~ampsclient.ha.client.AsyncHAClient`) holds the publish lock around
:meth:`HASequence.logged_on` and :meth:`HASequence.open`, sends each resubscribe command and
waits for its ack, and acts on the events it takes with :meth:`HASequence.events_received`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from ..command import Command
from ..exceptions import DisconnectedError, ForeignSequenceError, UsageError
from .connection import ClientCore
from .state import State

__all__ = [
    "HA_TRANSITIONS",
    "HAEvent",
    "HAPhase",
    "HAPhaseChanged",
    "HAPhaseError",
    "HASequence",
    "HAStore",
    "HASubscription",
    "HASubscriptionTable",
    "PublishesReplayed",
    "Resubscribe",
    "SequenceOpened",
    "StoreDiscarded",
    "SubscriptionDropped",
]


class HAPhase(enum.Enum):
    """Where the reconnect sequence is."""

    DISCONNECTED = "disconnected"
    """No logged-on connection; publishes are stored only."""
    REPLAYING = "replaying"
    """Logged on: discarding what the server has and replaying the rest of the store."""
    RESUBSCRIBING = "resubscribing"
    """Re-placing subscriptions, one at a time; publishes are stored only."""
    OPEN = "open"
    """Everything is re-placed: new publishes go straight out."""
    CLOSED = "closed"
    """The application closed the client."""


class HAPhaseError(UsageError, AssertionError):
    """A step the phase table does not allow (e.g. re-placing a subscription while
    disconnected)."""

    def __init__(self, current: HAPhase, wanted: HAPhase) -> None:
        super().__init__(f"the HA sequence cannot go from {current.name} to {wanted.name}")
        self.current = current
        """The phase the sequence was in."""
        self.wanted = wanted
        """The phase the step needed."""


_D, _REP, _RES, _OPEN, _CLOSED = HAPhase

HA_TRANSITIONS: Final[dict[HAPhase, frozenset[HAPhase]]] = {
    _D: frozenset({_REP, _CLOSED}),
    _REP: frozenset({_RES, _D, _CLOSED}),
    _RES: frozenset({_OPEN, _D, _CLOSED}),
    _OPEN: frozenset({_D, _CLOSED}),
    _CLOSED: frozenset({_REP, _CLOSED}),
}
"""phase -> the phases it may move to; any other move raises :class:`HAPhaseError`."""


class _Stored(Protocol):
    @property
    def sequence(self) -> int: ...

    @property
    def payload(self) -> bytes: ...


class HAStore(Protocol):
    """What the sequence needs of a publish store."""

    def discard_up_to(self, sequence: int) -> int:
        """Drop every message up to ``sequence``."""

    def replay(self, replayer: Callable[[_Stored], None]) -> int:
        """Call ``replayer`` with each stored message, in sequence order."""

    def next_sequence(self) -> int:
        """The sequence number the next stored message gets."""

    @property
    def unpersisted_count(self) -> int:
        """How many messages are stored and not yet discarded."""


class HASubscription(Protocol):
    """A subscription as it was placed (its command, without a command id)."""

    @property
    def sub_id(self) -> str:
        """The subscription's id."""

    @property
    def command(self) -> Command:
        """The command that placed it (a copy is sent on a resubscribe, its bookmark resolved)."""


S = TypeVar("S", bound=HASubscription)
S_co = TypeVar("S_co", bound=HASubscription, covariant=True)


class HASubscriptionTable(Protocol[S_co]):
    """The live subscriptions, in the order placed."""

    def __iter__(self) -> Iterator[S_co]: ...

    def __contains__(self, sub_id: object) -> bool: ...

    def remove(self, sub_id: str) -> None:
        """Forget subscription ``sub_id``."""


# --------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class HAPhaseChanged:
    """The sequence moved from ``old`` to ``new``."""

    old: HAPhase
    new: HAPhase


@dataclass(frozen=True, slots=True)
class StoreDiscarded:
    """The logon ack's ``s`` covered the store up to ``up_to``: those are persisted."""

    up_to: int


@dataclass(frozen=True, slots=True)
class PublishesReplayed:
    """``count`` stored messages went out again (the last was ``last``; ``None``: none)."""

    count: int
    last: int | None


@dataclass(frozen=True, slots=True)
class SubscriptionDropped:
    """Re-placing ``sub_id`` failed with ``error`` and it was dropped."""

    sub_id: str
    error: BaseException


@dataclass(frozen=True, slots=True)
class SequenceOpened:
    """All re-placed; ``count`` messages stored meanwhile went out; new publishes may go."""

    count: int


HAEvent = HAPhaseChanged | StoreDiscarded | PublishesReplayed | SubscriptionDropped | SequenceOpened
"""Any event of the sequence."""


@dataclass(frozen=True, slots=True)
class Resubscribe(Generic[S]):
    """Send ``command`` (a fresh copy, its bookmark resolved) to re-place ``subscription``."""

    subscription: S
    command: Command


# ------------------------------------------------------------------------------- sequence


class HASequence(Generic[S]):
    """The reconnect sequence of one HA client (see the module docstring).

    Args:
        core: the connection's core: replayed payloads are queued with its
            :meth:`~ampsclient.core.connection.ClientCore.send_payload` (which raises
            :class:`DisconnectedError` once the connection is gone), and the commands of
            the previous connection's subscriptions are forgotten at each logon.
        store: the publish store (read and discarded, never written).
        subscriptions: the table of live subscriptions (a dropped one is removed).
        resume: ``resume(sub_id, start)``: where a bookmark subscription placed from
            ``start`` resumes (default: from ``start``).
        resubscription_timeout: ms each re-placed subscription waits for its ack (0: no limit).
    """

    def __init__(
        self,
        *,
        core: ClientCore,
        store: HAStore,
        subscriptions: HASubscriptionTable[S],
        resume: Callable[[str, str], str] | None = None,
        resubscription_timeout: int = 0,
    ) -> None:
        self.phase = HAPhase.DISCONNECTED
        """The sequence's phase; moved only through :data:`HA_TRANSITIONS`."""
        self.core = core
        """The connection's core."""
        self.store = store
        """The publish store."""
        self.subscriptions = subscriptions
        """The live subscriptions."""
        self.resume = resume
        """Where a bookmark subscription resumes (``None``: from its start)."""
        self.resubscription_timeout = resubscription_timeout
        """ms each re-placed subscription waits for its ack (0: no limit)."""
        self.events: list[HAEvent] = []
        """Events not yet taken by :meth:`events_received`."""
        self._todo: list[S] = []
        self._last = 0

    def _move(self, wanted: HAPhase) -> None:
        old = self.phase
        if wanted not in HA_TRANSITIONS[old]:
            raise HAPhaseError(old, wanted)
        self.phase = wanted
        self.events.append(HAPhaseChanged(old, wanted))

    def events_received(self) -> list[HAEvent]:
        """Take every queued event, oldest first."""
        events = self.events
        self.events = []
        return events

    @property
    def resubscribing(self) -> list[str]:
        """The subscription ids still to be re-placed, in order."""
        return [sub.sub_id for sub in self._todo]

    # ----------------------------------------------------------------------------- inputs

    def logged_on(self, persisted: int | None) -> None:
        """The connection logged on; ``persisted`` is the logon ack's ``s``.

        Discards what ``s`` covers, replays the rest of the store and moves to RESUBSCRIBING.

        Raises:
            DisconnectedError: the core is not logged on (the connection went away since the
                ack), or it went away during the replay (the phase is DISCONNECTED; the next
                logon replays again from the store).
            ForeignSequenceError: ``persisted`` is a sequence the store never issued (at or
                above its next one) while it holds unpersisted messages: discarding them
                would report persisted what the server will drop as duplicates of someone
                else's sequence. Nothing is discarded or sent.
        """
        if self.core.state is not State.LOGGED_ON:  # lost between the ack and this call
            raise DisconnectedError("the connection was lost before the reconnect sequence")
        store = self.store
        if persisted and persisted >= store.next_sequence() and store.unpersisted_count:
            raise ForeignSequenceError(
                f"the server's last sequence for this client name ({persisted}) is one this "
                f"publish store never issued (next: {store.next_sequence()}); another "
                f"publisher used the name: {store.unpersisted_count} unpersisted message(s) "
                "kept, not replayed"
            )
        self._move(HAPhase.REPLAYING)
        if persisted:
            self.store.discard_up_to(persisted)
            self.events.append(StoreDiscarded(persisted))
        count, self._last = self._replay(0)
        self.events.append(PublishesReplayed(count, self._last or None))
        self._move(HAPhase.RESUBSCRIBING)
        # the pending entries of subscriptions are dead: their ids were on the old connection
        self.core.drop_subscription_commands()
        self._todo = list(self.subscriptions)

    def _replay(self, after: int) -> tuple[int, int]:
        """Send the stored messages above ``after``: (how many, the last sequence sent)."""
        last = after
        count = 0
        send = self.core.send_payload

        def one(message: _Stored) -> None:
            nonlocal last, count
            if message.sequence > after:
                send(message.payload)
                last = message.sequence
                count += 1

        try:
            self.store.replay(one)
        except DisconnectedError:
            self.connection_lost()
            raise
        return count, last

    def next_resubscribe(self) -> Resubscribe[S] | None:
        """The next subscription to re-place (``None``: all are; call :meth:`open`).

        A subscription unsubscribed since the logon is skipped. The command is a fresh copy
        of the one placed (no command id), with the resubscription timeout and, for a
        bookmark subscription, the bookmark it resumes from.
        """
        self._check(HAPhase.RESUBSCRIBING)
        while self._todo and self._todo[0].sub_id not in self.subscriptions:
            self._todo.pop(0)
        if not self._todo:
            return None
        sub = self._todo[0]
        saved = sub.command
        command = Command(saved.name)
        command.fields = dict(saved.fields)
        command.data = saved.data
        command.set_ack_type(saved.ack_types)
        command.set_timeout(self.resubscription_timeout)
        start = command.fields.get("bm")
        if start is not None and self.resume is not None:
            command.fields["bm"] = self.resume(sub.sub_id, str(start))
        return Resubscribe(sub, command)

    def _check(self, wanted: HAPhase) -> None:
        """A step of the RESUBSCRIBING phase may be taken now.

        Raises:
            DisconnectedError: the connection went away (the wing's await may return after
                that: this is a race, not a misuse); the phase is DISCONNECTED.
            HAPhaseError: not the phase for that step.
        """
        if self.phase in (HAPhase.DISCONNECTED, HAPhase.CLOSED) or (
            self.core.state is not State.LOGGED_ON
        ):
            self.connection_lost()
            raise DisconnectedError("the connection was lost during the reconnect sequence")
        if self.phase is not HAPhase.RESUBSCRIBING:
            raise HAPhaseError(self.phase, wanted)

    def _head(self, sub_id: str) -> S:
        self._check(HAPhase.RESUBSCRIBING)
        if not self._todo:
            raise HAPhaseError(self.phase, HAPhase.OPEN)
        head = self._todo[0]
        if head.sub_id != sub_id:
            raise ValueError(f"{sub_id!r} is not the subscription being re-placed")
        return head

    def resubscribed(self, sub_id: str) -> None:
        """The server acked the re-placed ``sub_id``: on to the next.

        Raises:
            DisconnectedError: the connection went away meanwhile (the phase is DISCONNECTED).
        """
        self._head(sub_id)
        self._todo.pop(0)

    def resubscribe_failed(self, sub_id: str, error: BaseException, *, drop: bool) -> None:
        """Re-placing ``sub_id`` failed: ``drop`` it (:class:`SubscriptionDropped`, on to the
        next), or give up on this connection (DISCONNECTED: the wing reconnects and the next
        logon starts the sequence again). When the connection is gone already, a dropped
        subscription is still forgotten."""
        if self.phase is not HAPhase.RESUBSCRIBING:
            if drop and sub_id in self.subscriptions:
                self.subscriptions.remove(sub_id)
                self.events.append(SubscriptionDropped(sub_id, error))
            return
        self._head(sub_id)
        if drop:
            self._todo.pop(0)
            self.subscriptions.remove(sub_id)
            self.events.append(SubscriptionDropped(sub_id, error))
        else:
            self.connection_lost()

    def open(self) -> None:
        """All subscriptions are re-placed: replay what was stored meanwhile and open.

        Raises:
            DisconnectedError: the connection went away (before or during that replay).
        """
        if self.next_resubscribe() is not None:  # (raises when the connection is gone)
            raise HAPhaseError(self.phase, HAPhase.OPEN)
        count, self._last = self._replay(self._last)
        self._move(HAPhase.OPEN)
        self.events.append(SequenceOpened(count))

    def connection_lost(self) -> None:
        """The connection went away (nothing happens when none was logged on)."""
        if self.phase in (HAPhase.REPLAYING, HAPhase.RESUBSCRIBING, HAPhase.OPEN):
            self._todo = []
            self._move(HAPhase.DISCONNECTED)

    def closed(self) -> None:
        """The application closed the client."""
        self._todo = []
        if self.phase is not HAPhase.CLOSED:
            self._move(HAPhase.CLOSED)
