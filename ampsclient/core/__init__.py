"""The sans-I/O connection core (see :mod:`ampsclient.core.connection`) and its state table.

No module of this package does I/O: no socket, no event loop, no thread.
"""

from __future__ import annotations

from .connection import ClientCore, Pending, Sink, Waiter, publish_fields
from .events import ConnectionEvent, ConnectionState
from .state import TRANSITIONS, InvalidStateError, State

__all__ = [
    "TRANSITIONS",
    "ClientCore",
    "ConnectionEvent",
    "ConnectionState",
    "InvalidStateError",
    "Pending",
    "Sink",
    "State",
    "Waiter",
    "publish_fields",
]
