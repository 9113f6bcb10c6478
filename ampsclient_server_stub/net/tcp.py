"""TCP listener: an asyncio ``Protocol`` per connection (no streams, for speed).

Inbound bytes go through :class:`ampsclient.protocol.TcpFramer` (4-byte big-endian length
prefix, protocol.md §1); outbound payloads are length-prefixed and written with one
``transport.write`` per event-loop iteration. A length prefix above ``max_frame_size`` closes
only that connection. The connection's message type comes from the transport configuration
or, failing that, from the logon's ``mt``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from typing import TYPE_CHECKING, Any, Final

from ampsclient.exceptions import FrameTooLargeError
from ampsclient.protocol.compression import looks_compressed
from ampsclient.protocol.framing import TcpFramer
from ampsclient_server_stub import accel
from ampsclient_server_stub.engine.broker import Broker

from .exposure import warn_if_exposed
from .session import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_WRITE_BUFFER, NetSession

if TYPE_CHECKING:
    from ampsclient_server_stub.security.policy import TransportPolicy

    from .flow import FlowControl

__all__ = ["TcpSession", "frame_join", "frame_join_any", "start_tcp_listener"]

logger = logging.getLogger(__name__)

_pack_len: Final = struct.Struct(">I").pack


def frame_join(payloads: list[bytes]) -> bytes:
    """Each payload after its 4-byte big-endian length, in one bytes object (what one
    ``transport.write`` sends). Twin of the C ``frame_join``."""
    parts: list[bytes] = []
    append = parts.append
    for payload in payloads:
        append(_pack_len(len(payload)))
        append(payload)
    return b"".join(parts)


_frame_join: Final = accel.frame_join or frame_join
frame_join_any: Final = _frame_join
"""The fastest ``frame_join`` there is (C when built)."""


class TcpSession(NetSession, asyncio.Protocol):
    """One TCP client connection."""

    def __init__(
        self,
        broker: Broker,
        loop: asyncio.AbstractEventLoop,
        *,
        message_type: str | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ) -> None:
        super().__init__(
            broker,
            loop,
            transport_name="tcp",
            max_frame_size=max_frame_size,
            max_write_buffer=max_write_buffer,
        )
        self.message_type = message_type
        self.framer = TcpFramer(max_frame_size=max_frame_size)
        self.transport: asyncio.Transport | None = None

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peername: Any = transport.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        if not peer:  # a unix socket's client has no address: name the socket file
            peer = f"unix:{transport.get_extra_info('sockname')}"
        self.attach(message_type=self.message_type, peer=peer)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self.last_received = self.loop.time()
        framer = self.framer
        try:
            framer.receive_data(data)
        except FrameTooLargeError as exc:
            reason, problem = "frame too large", str(exc)
            if self.messages_in == 0 and looks_compressed(data):
                reason = "compression not accepted"
                problem = (
                    "a compressed connection (compression=zlib) on a transport that does not "
                    "accept compression (add <Compression>zlib</Compression> to it)"
                )
            logger.warning("tcp client %s: %s; disconnecting", self.peer, problem)
            self.handle_payloads(framer.frames())
            if self.conn is not None:
                self.broker.kick(self.conn, reason)
            else:  # pragma: no cover
                self.disconnect(reason)
            return
        self.handle_payloads(framer.frames())

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            logger.debug("tcp client %s lost: %s", self.peer, exc)
        self.connection_closed()

    # ------------------------------------------------------------------ NetSession

    def _write(self, payloads: list[bytes]) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if len(payloads) == 1:
            payload = payloads[0]
            transport.write(_pack_len(len(payload)) + payload)
            return
        transport.write(_frame_join(payloads))

    def _buffered(self) -> int:
        transport = self.transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def _close_transport(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _abort_transport(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def start_tcp_listener(
    broker: Broker,
    host: str,
    port: int,
    *,
    message_type: str | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ssl_context: ssl.SSLContext | None = None,
    policy: TransportPolicy | None = None,
    flow: FlowControl | None = None,
    session_class: type[TcpSession] | None = None,
) -> asyncio.Server:
    """Listen on ``host:port`` (port 0 picks a free port) and serve AMPS over TCP.

    ``ssl_context`` makes it a ``tcps`` listener; ``policy`` (security package) applies
    connection caps to its sessions, and slow-client management with ``flow``
    (the server's running resource pools). ``session_class`` (a :class:`TcpSession`, the
    default) is ``ZlibTcpSession`` on a transport that accepts compressed connections.
    """
    loop = asyncio.get_running_loop()
    session_factory = session_class or TcpSession

    def factory() -> TcpSession:
        session = session_factory(
            broker,
            loop,
            message_type=message_type,
            max_frame_size=max_frame_size,
            max_write_buffer=max_write_buffer,
        )
        session.policy = policy
        session.flow = flow
        return session

    if ssl_context is None:
        server = await loop.create_server(factory, host, port, reuse_address=True)
    else:
        server = await loop.create_server(
            factory, host, port, reuse_address=True, ssl=ssl_context, ssl_handshake_timeout=10
        )
    bound: int = server.sockets[0].getsockname()[1] if server.sockets else port
    authenticated = (policy is not None and policy.auth is not None) or (
        broker.hooks.authenticate is not None
    )
    warn_if_exposed("tcp", host, bound, authenticated=authenticated)
    return server
