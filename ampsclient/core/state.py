"""The connection's state: one enum and the table of its legal transitions.

Everything that moves a :class:`~ampsclient.core.connection.ClientCore` from one state to
another goes through :func:`check_transition`, which raises :class:`InvalidStateError` for a
move the table does not list (as h11's ``_state.py`` keeps every transition in one table).

::

    DISCONNECTED --connection_made--> CONNECTED --send_logon--> LOGGING_ON
    LOGGING_ON --ack success--> LOGGED_ON      LOGGING_ON --ack retry--> LOGGING_ON
    LOGGING_ON --ack failure--> CONNECTED
    LOGGED_ON --send_logon--> LOGGING_ON      (logging on again over the same connection)
    CONNECTED | LOGGING_ON | LOGGED_ON --connection_lost--> DISCONNECTED
    CONNECTED | LOGGING_ON | LOGGED_ON --closed by the application--> CLOSED
    CLOSED --connection_made--> CONNECTED      (a client may connect again)
"""

from __future__ import annotations

import enum
from typing import Final

from ..exceptions import UsageError

__all__ = ["OPEN_STATES", "TRANSITIONS", "InvalidStateError", "State", "check_transition"]


class State(enum.Enum):
    """Where a connection is."""

    DISCONNECTED = "disconnected"
    """No transport (never connected, or the peer/network dropped it)."""
    CONNECTED = "connected"
    """A transport is open; not logged on."""
    LOGGING_ON = "logging_on"
    """The logon was sent; its ack has not arrived."""
    LOGGED_ON = "logged_on"
    """The server accepted the logon."""
    CLOSED = "closed"
    """The application closed the connection."""


TRANSITIONS: Final[dict[State, frozenset[State]]] = {
    State.DISCONNECTED: frozenset({State.CONNECTED}),
    State.CONNECTED: frozenset({State.LOGGING_ON, State.DISCONNECTED, State.CLOSED}),
    State.LOGGING_ON: frozenset(
        {State.LOGGING_ON, State.LOGGED_ON, State.CONNECTED, State.DISCONNECTED, State.CLOSED}
    ),
    State.LOGGED_ON: frozenset({State.LOGGING_ON, State.DISCONNECTED, State.CLOSED}),
    State.CLOSED: frozenset({State.CONNECTED}),
}
"""state -> the states it may move to. Anything else is a bug (or a misuse) and raises."""

OPEN_STATES: Final = frozenset({State.CONNECTED, State.LOGGING_ON, State.LOGGED_ON})
"""The states with a transport: commands may be sent."""


class InvalidStateError(UsageError, AssertionError):
    """A transition the state table does not allow (e.g. a logon while disconnected)."""

    def __init__(self, current: State, wanted: State) -> None:
        super().__init__(f"cannot go from {current.name} to {wanted.name}")
        self.current = current
        """The state the connection was in."""
        self.wanted = wanted
        """The state that was asked for."""


def check_transition(current: State, wanted: State) -> State:
    """Return ``wanted`` if the table allows ``current`` -> ``wanted``, else raise.

    Raises:
        InvalidStateError: the move is not in :data:`TRANSITIONS`.
    """
    if wanted not in TRANSITIONS[current]:
        raise InvalidStateError(current, wanted)
    return wanted
