"""The transport interface (:mod:`.factory` picks an implementation for a URI)."""

from __future__ import annotations

import abc
import socket
from collections.abc import Callable

__all__ = ["OnClose", "OnPayload", "Transport"]

OnPayload = Callable[[list[bytes]], None]
"""Called on the loop with the payloads (header + body) completed by one read."""

OnClose = Callable[[BaseException | None], None]
"""Called once on the loop when the connection ends (``None`` = closed by us)."""


class Transport(abc.ABC):
    """One connection to a server, moving payloads."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Send one or more TCP-framed payloads (4-byte big-endian length each). Loop thread."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection; ``on_close(None)`` follows."""

    @abc.abstractmethod
    def pause_reading(self) -> None:
        """Stop reading from the socket (flow control for slow consumers)."""

    @abc.abstractmethod
    def resume_reading(self) -> None:
        """Resume reading."""

    @property
    @abc.abstractmethod
    def write_buffer_size(self) -> int:
        """Bytes accepted by :meth:`write` but not yet handed to the OS."""

    def caller_socket(self) -> socket.socket | None:
        """A second handle on the connection's socket, non-blocking, for threads other than
        the loop's to write the same byte stream (:meth:`.FrameWriter.write_from_caller`);
        the caller owns it and closes it. ``None`` (the default): this transport cannot
        (TLS, WebSocket framing, in-memory), so only the loop writes."""
        return None
