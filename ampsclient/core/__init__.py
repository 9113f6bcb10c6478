"""The sans-I/O connection core (see :mod:`ampsclient.core.connection`), its events and its
state table.

No module of this package does I/O: no socket, no event loop, no thread.
"""

from __future__ import annotations

from .connection import ClientCore, Pending, Sink, publish_fields
from .event_types import (
    CommandAcked,
    CommandFailed,
    ConnectionLost,
    Event,
    HandlerFailed,
    HeartbeatTimedOut,
    LogonAcked,
    PublishPersisted,
    StateChanged,
    StreamEnded,
    SubscriptionPersisted,
)
from .events import ConnectionEvent, ConnectionState
from .state import TRANSITIONS, InvalidStateError, State

__all__ = [
    "TRANSITIONS",
    "ClientCore",
    "CommandAcked",
    "CommandFailed",
    "ConnectionEvent",
    "ConnectionLost",
    "ConnectionState",
    "Event",
    "HandlerFailed",
    "HeartbeatTimedOut",
    "InvalidStateError",
    "LogonAcked",
    "Pending",
    "PublishPersisted",
    "Sink",
    "State",
    "StateChanged",
    "StreamEnded",
    "SubscriptionPersisted",
    "publish_fields",
]
