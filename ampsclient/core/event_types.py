"""What the sans-I/O core gives back: typed, frozen events.

:class:`~ampsclient.core.connection.ClientCore` queues one of these for each thing that
happened to the connection's control flow; its wing takes them with
:meth:`~ampsclient.core.connection.ClientCore.events_received` (as websockets'
``Protocol.events_received()``) and acts on them: resolve the future of a command, end a
stream, close a silent connection, tell the listeners. Deliveries are not events (the core
hands each message straight to its route's handler, see the core's module docstring).

Don't subclass these (as h11's ``_events.py`` says): the wings dispatch on the exact type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..protocol.message import Message
from .state import State

if TYPE_CHECKING:
    from .correlation import Sink

__all__ = [
    "CommandAcked",
    "CommandFailed",
    "ConnectionLost",
    "Event",
    "HandlerFailed",
    "HeartbeatTimedOut",
    "LogonAcked",
    "PublishPersisted",
    "StateChanged",
    "StreamEnded",
    "SubscriptionPersisted",
]


@dataclass(frozen=True, slots=True)
class StateChanged:
    """The connection moved from ``old`` to ``new`` (through the transition table)."""

    old: State
    new: State


@dataclass(frozen=True, slots=True)
class LogonAcked:
    """The logon ``cid`` was answered: ``status`` is ``"success"`` (now LOGGED_ON),
    ``"retry"`` (still LOGGING_ON: ask the authenticator again) or ``"failure"`` (back to
    CONNECTED; ``ack.reason`` says why)."""

    cid: str
    status: str
    ack: Message


@dataclass(frozen=True, slots=True)
class CommandAcked:
    """The processed ack of command ``cid`` arrived (its ``status`` may be ``failure``: see
    :meth:`~ampsclient.core.connection.ClientCore.command_acked`)."""

    cid: str
    ack: Message


@dataclass(frozen=True, slots=True)
class CommandFailed:
    """Command ``cid`` was waiting for its processed ack when the connection went away."""

    cid: str
    error: BaseException


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """``stream`` gets nothing more: ended normally (``error`` is ``None``: a terminal ack,
    an unsubscribe, the application closing) or by ``error`` (a disconnect, a refusal)."""

    stream: Sink
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class HeartbeatTimedOut:
    """The server has been silent for ``silence`` seconds, longer than the heartbeat
    timeout: the wing closes the connection."""

    silence: float


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    """The transport closed (after the events that ended its commands and streams).
    ``error`` is what the waiters got; ``by_user`` when the application closed it."""

    error: BaseException
    by_user: bool


@dataclass(frozen=True, slots=True)
class PublishPersisted:
    """A ``persisted`` ack of publishes (its ``s`` covers every sequence up to it; a
    ``failure`` status refuses that one publish)."""

    ack: Message


@dataclass(frozen=True, slots=True)
class SubscriptionPersisted:
    """A ``persisted`` ack of a bookmark subscription (its ``bm`` is safe to resume from)."""

    ack: Message


@dataclass(frozen=True, slots=True)
class HandlerFailed:
    """A handler raised ``error`` (already logged): the wing tells the exception listener."""

    error: BaseException


Event = (
    StateChanged
    | LogonAcked
    | CommandAcked
    | CommandFailed
    | StreamEnded
    | HeartbeatTimedOut
    | ConnectionLost
    | PublishPersisted
    | SubscriptionPersisted
    | HandlerFailed
)
"""Every event the core queues."""
