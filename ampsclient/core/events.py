"""What a connection tells its listeners: the state changes the application sees."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["ConnectionEvent", "ConnectionState"]


class ConnectionState(enum.Enum):
    """What happened to a connection (see ``AsyncClient.add_connection_state_listener``)."""

    CONNECTED = "connected"
    LOGGED_ON = "logged_on"
    PUBLISH_REPLAYED = "publish_replayed"
    RESUBSCRIBED = "resubscribed"
    DISCONNECTED = "disconnected"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    """A connection state change, with the server it concerns and the cause of a disconnect."""

    state: ConnectionState
    uri: str | None = None
    cause: BaseException | None = None

    def __bool__(self) -> bool:
        """``True`` unless the connection went down: the official listener's ``bool`` state."""
        return self.state not in (ConnectionState.DISCONNECTED, ConnectionState.SHUTDOWN)
