"""memory://NAME:0/amps/<type>: an in-process transport for tests (no sockets).

A server registers an acceptor under a name with :func:`serve_memory`; a client connecting to
``memory://NAME:0/amps/json`` gets a :class:`MemoryTransport` whose peer is a
:class:`MemoryConnection` handed to that acceptor. Payloads cross on the event loop with
``call_soon``, in order, never re-entrantly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..exceptions import AMPSConnectionError, DisconnectedError
from ..protocol.framing import TcpFramer
from ..uri import URI
from .base import OnClose, OnPayload, Transport

__all__ = ["MemoryConnection", "MemoryTransport", "serve_memory"]

Acceptor = Callable[["MemoryConnection"], None]
_servers: dict[str, Acceptor] = {}


def serve_memory(name: str, acceptor: Acceptor) -> Callable[[], None]:
    """Accept memory connections under ``name``; returns a function that stops accepting."""
    if name in _servers:
        raise ValueError(f"a memory server named {name!r} exists already")
    _servers[name] = acceptor
    return lambda: _servers.pop(name, None) and None


class MemoryConnection:
    """The server's end of a memory connection.

    The acceptor sets :attr:`on_payload` (called with each payload the client sent) and
    optionally :attr:`on_close`; it answers with :meth:`send`.
    """

    def __init__(self, transport: MemoryTransport) -> None:
        self._client = transport
        self.on_payload: Callable[[bytes], None] = lambda payload: None
        """Called on the loop with each payload from the client."""
        self.on_close: Callable[[], None] = lambda: None
        """Called once when the client closes."""
        self.closed = False

    def send(self, payload: bytes) -> None:
        """Deliver one payload to the client (asynchronously, in order)."""
        if not self.closed:
            self._client._loop.call_soon(self._client._deliver, payload)

    def close(self) -> None:
        """Close from the server side: the client sees a disconnect."""
        if not self.closed:
            self.closed = True
            self._client._loop.call_soon(
                self._client._lost, DisconnectedError("the memory server closed the connection")
            )


class MemoryTransport(Transport):
    """The client's end of a memory connection."""

    def __init__(self, on_payload: OnPayload, on_close: OnClose) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_payload = on_payload
        self._on_close = on_close
        self._framer = TcpFramer()
        self._closed = False
        self._paused = False
        self._held: list[bytes] = []
        self.peer = MemoryConnection(self)

    @classmethod
    async def connect(
        cls, uri: URI, *, on_payload: OnPayload, on_close: OnClose
    ) -> MemoryTransport:
        """Connect to the memory server named by the URI's host."""
        acceptor = _servers.get(uri.host)
        if acceptor is None:
            raise AMPSConnectionError(f"no memory server named {uri.host!r}")
        self = cls(on_payload, on_close)
        acceptor(self.peer)
        return self

    def write(self, data: bytes) -> None:
        if self._closed:
            raise DisconnectedError("the connection is closed")
        self._framer.receive_data(data)
        for payload in self._framer.frames():
            self._loop.call_soon(self._to_server, payload)

    def _to_server(self, payload: bytes) -> None:
        if not self._closed and not self.peer.closed:
            self.peer.on_payload(payload)

    def _deliver(self, payload: bytes) -> None:
        if self._closed:
            return
        if self._paused:
            self._held.append(payload)
            return
        self._on_payload([payload])

    def _lost(self, error: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._on_close(error)

    def close(self) -> None:
        if self._closed:
            return
        self.peer.closed = True
        self._loop.call_soon(self.peer.on_close)
        self._lost(None)

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        held, self._held = self._held, []
        if held and not self._closed:
            self._on_payload(held)

    @property
    def write_buffer_size(self) -> int:
        return 0
