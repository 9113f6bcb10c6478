"""What the broker needs from a connection's transport and from a timer service.

* :class:`Session`: a connection's transport (the network layer's sessions implement it);
* :class:`TimerHandle` / :data:`CallLater`: timers (``loop.call_later`` fits);
* :data:`Authenticator`: the plain authentication callable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Authenticator", "CallLater", "Session", "TimerHandle"]


class Session(Protocol):
    """What the broker needs from a connection's transport."""

    def send(self, payload: bytes) -> None:
        """Queue one TCP-shaped payload (header + body) for the client."""

    def send_many(self, payloads: list[bytes]) -> None:
        """:meth:`send` for several payloads, in order (bookmark replays send in batches)."""

    def backlog(self) -> int:
        """Bytes queued towards the client and not yet taken by the OS (replays pace on it)."""

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
"""``authenticate(user_id, password) -> bool``."""
