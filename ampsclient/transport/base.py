"""The transport interface and the factory that picks one for a URI."""

from __future__ import annotations

import abc
import ssl
from collections.abc import Callable

from ..uri import URI

__all__ = ["OnClose", "OnPayload", "Transport", "open_transport"]

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


async def open_transport(
    uri: URI,
    *,
    on_payload: OnPayload,
    on_close: OnClose,
    on_writable: Callable[[bool], None] | None = None,
    max_frame_size: int,
    connect_timeout: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Transport:
    """Connect to ``uri`` with the transport its scheme names."""
    if uri.scheme == "memory":
        from .memory import MemoryTransport

        return await MemoryTransport.connect(uri, on_payload=on_payload, on_close=on_close)
    if uri.websocket:
        from .ws import WebSocketTransport

        return await WebSocketTransport.connect(
            uri,
            on_payload=on_payload,
            on_close=on_close,
            on_writable=on_writable,
            max_frame_size=max_frame_size,
            connect_timeout=connect_timeout,
            ssl_context=ssl_context,
        )
    from .tcp import TcpTransport

    return await TcpTransport.connect(
        uri,
        on_payload=on_payload,
        on_close=on_close,
        on_writable=on_writable,
        max_frame_size=max_frame_size,
        connect_timeout=connect_timeout,
        ssl_context=ssl_context,
    )
