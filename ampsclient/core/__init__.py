"""The sans-I/O connection core (see :mod:`ampsclient.core.connection`), its events and its
state table, and the HA reconnect sequence (:mod:`ampsclient.core.ha_sequence`).

No module of this package does I/O: no socket, no event loop, no thread.
"""

from __future__ import annotations

from .connection import ClientCore, Pending, Sink
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
from .ha_sequence import HA_TRANSITIONS, HAPhase, HAPhaseChanged, HAPhaseError, HASequence
from .publish import PUBLISH_COMMANDS, encode_publish, publish_frame, publish_header
from .state import TRANSITIONS, InvalidStateError, State

__all__ = [
    "HA_TRANSITIONS",
    "PUBLISH_COMMANDS",
    "TRANSITIONS",
    "ClientCore",
    "CommandAcked",
    "CommandFailed",
    "ConnectionEvent",
    "ConnectionLost",
    "ConnectionState",
    "Event",
    "HAPhase",
    "HAPhaseChanged",
    "HAPhaseError",
    "HASequence",
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
    "encode_publish",
    "publish_frame",
    "publish_header",
]
