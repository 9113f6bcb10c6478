"""Transports move TCP-shaped AMPS payloads over tcp:// or ws://; they know nothing of commands.

Every transport has the same small surface (:class:`~ampsclient.transport.base.Transport`):
``write(framed_bytes)`` on the event loop, a callback per received payload, a callback when
the connection closes, and ``close()``.
"""

from .base import Transport
from .factory import open_transport
from .tcp import TcpTransport
from .ws import WebSocketTransport

__all__ = ["TcpTransport", "Transport", "WebSocketTransport", "open_transport"]
