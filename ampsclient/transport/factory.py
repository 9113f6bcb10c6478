"""``open_transport``: the factory that picks the transport a URI's scheme names.

It lives apart from :mod:`.base` (the interface the implementations import) so that the
implementations and the interface do not import each other.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from ..uri import URI
from .base import OnClose, OnPayload, Transport

__all__ = ["open_transport"]


async def open_transport(
    uri: URI,
    *,
    on_payload: OnPayload,
    on_close: OnClose,
    on_writable: Callable[[bool], None] | None = None,
    max_frame_size: int,
    connect_timeout: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    on_data: Callable[[bytes], None] | None = None,
) -> Transport:
    """Connect to ``uri`` with the transport its scheme names. ``on_data``, when given,
    receives what a tcp:// connection reads, unframed (the other transports frame their
    messages themselves and call ``on_payload``)."""
    if uri.scheme == "memory":
        from .memory import MemoryTransport  # loaded on use: the ws one imports websockets

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
        on_data=on_data,
    )
