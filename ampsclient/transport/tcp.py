"""tcp:// (and tcps://, unix://): an asyncio Protocol feeding a :class:`TcpFramer`.

``compression=zlib`` picks :class:`ZlibTcpTransport`, whose protocol inflates before framing
and whose writes are deflated (:mod:`ampsclient.protocol.compression`); the plain classes
carry no test for it.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import socket
import ssl
from collections.abc import Callable

from ..exceptions import (
    AMPSConnectionError,
    DisconnectedError,
    NotAmpsPortError,
    RemoteProtocolError,
    TimeoutError,
)
from ..protocol.compression import ZlibStream
from ..protocol.framing import TcpFramer
from ..uri import URI
from .base import OnClose, OnPayload, Transport

__all__ = ["TcpTransport", "ZlibTcpTransport"]

log = logging.getLogger("ampsclient.transport")


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: TcpTransport) -> None:
        self.owner = owner

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        on_data = owner._on_data
        if on_data is not None:  # the receiver frames the bytes itself (one pass)
            try:
                on_data(data)
            except (RemoteProtocolError, NotAmpsPortError) as exc:
                log.warning("closing connection: %s", exc)
                owner._fail(exc)
            return
        framer = owner._framer
        assert framer is not None  # made whenever there is no on_data
        try:
            framer.receive_data(data)
        except (RemoteProtocolError, NotAmpsPortError) as exc:
            log.warning("closing connection: %s", exc)
            owner._fail(exc)
            return
        frames = framer.frames()
        if frames:
            owner._on_payload(frames)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost(exc)

    def pause_writing(self) -> None:
        if self.owner._on_writable is not None:
            self.owner._on_writable(False)

    def resume_writing(self) -> None:
        if self.owner._on_writable is not None:
            self.owner._on_writable(True)


class _ZlibProtocol(_Protocol):
    """Inflates what a compression=zlib connection reads, then frames it as plain bytes."""

    owner: ZlibTcpTransport

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        owner._received = True
        try:
            for plain in owner._zlib.inflate(data):  # a bounded chunk at a time
                super().data_received(plain)
                if owner._error is not None:  # the framer refused it: read no further
                    return
        except RemoteProtocolError as exc:
            log.warning("closing connection: %s", exc)
            owner._fail(exc)


class TcpTransport(Transport):
    """A TCP (or Unix domain socket) connection carrying 4-byte-length-framed payloads."""

    _protocol_class: type[_Protocol] = _Protocol

    def __init__(
        self,
        *,
        on_payload: OnPayload,
        on_close: OnClose,
        on_writable: Callable[[bool], None] | None,
        max_frame_size: int,
        on_data: Callable[[bytes], None] | None = None,
    ) -> None:
        self._on_payload = on_payload
        self._on_data = on_data
        self._on_close = on_close
        self._on_writable = on_writable
        self._framer: TcpFramer | None = None
        """Frames the bytes read, unless ``on_data`` takes them (then none is made)."""
        if on_data is None:
            self._framer = TcpFramer(max_frame_size=max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._tls = False
        self._closed = False
        self._error: BaseException | None = None

    @classmethod
    async def connect(
        cls,
        uri: URI,
        *,
        on_payload: OnPayload,
        on_close: OnClose,
        on_writable: Callable[[bool], None] | None = None,
        max_frame_size: int,
        connect_timeout: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
        on_data: Callable[[bytes], None] | None = None,
    ) -> TcpTransport:
        """Open a connection to ``uri``. With ``on_data``, the bytes read go to it as they
        come (it frames them, as ``ClientCore.receive_data`` does) instead of being split into
        payloads for ``on_payload``."""
        kind = ZlibTcpTransport if uri.compression else cls
        self = kind(
            on_payload=on_payload,
            on_close=on_close,
            on_writable=on_writable,
            max_frame_size=max_frame_size,
            on_data=on_data,
        )
        loop = asyncio.get_running_loop()
        if uri.tls and ssl_context is None:
            ssl_context = ssl.create_default_context()
        protocol = self._protocol_class
        unix_path = uri.unix_path
        try:
            if unix_path is not None:
                coro = loop.create_unix_connection(lambda: protocol(self), unix_path)
            else:
                coro = loop.create_connection(
                    lambda: protocol(self),
                    uri.host,
                    uri.port,
                    ssl=ssl_context if uri.tls else None,
                )
            transport, _ = await asyncio.wait_for(coro, connect_timeout)
        except builtins.TimeoutError:
            raise TimeoutError(f"timed out connecting to {uri.redacted()}") from None
        except OSError as exc:
            raise AMPSConnectionError(f"cannot connect to {uri.redacted()}: {exc}") from exc
        sock = transport.get_extra_info("socket")
        if (
            sock is not None
            and unix_path is None
            and uri.options.get("tcp_nodelay", "true").lower() != "false"
        ):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        self._transport = transport
        self._tls = uri.tls
        if self._closed:
            # the peer closed it before this call returned: the close was reported to a
            # client that had not attached us yet, so nobody would ever hear of it again
            # (a logon would wait for its whole timeout on a dead connection)
            raise DisconnectedError(
                f"{uri.redacted()} closed the connection while it was being opened"
            ) from self._error
        return self

    def write(self, data: bytes) -> None:
        t = self._transport
        if t is None or self._closed:
            raise DisconnectedError("the connection is closed")
        t.write(data)

    def caller_socket(self) -> socket.socket | None:
        """A duplicate of the socket's descriptor (plain TCP only: TLS records are the
        loop's to write), non-blocking; the caller closes it."""
        t = self._transport
        sock = None if t is None or self._closed or self._tls else t.get_extra_info("socket")
        if sock is None:
            return None
        try:
            fd = os.dup(sock.fileno())
        except OSError as exc:
            log.debug("no caller socket: %s", exc)
            return None
        try:
            dup = socket.socket(fileno=fd)
        except OSError as exc:
            os.close(fd)
            log.debug("no caller socket: %s", exc)
            return None
        dup.setblocking(False)
        return dup

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection without flushing."""
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        if self._transport is not None:
            self._transport.abort()

    def _lost(self, exc: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        err = self._error or exc
        if err is not None and not isinstance(err, (DisconnectedError, NotAmpsPortError)):
            wrapped: BaseException = DisconnectedError(f"connection lost: {err}")
            wrapped.__cause__ = err
            err = wrapped
        self._on_close(err)

    def pause_reading(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()

    @property
    def write_buffer_size(self) -> int:
        t = self._transport
        return 0 if t is None else t.get_write_buffer_size()


class ZlibTcpTransport(TcpTransport):
    """A ``compression=zlib`` connection: one raw deflate stream each way, from the first
    byte (docs/protocol.md, "Transport compression")."""

    _protocol_class = _ZlibProtocol

    def __init__(
        self,
        *,
        on_payload: OnPayload,
        on_close: OnClose,
        on_writable: Callable[[bool], None] | None,
        max_frame_size: int,
        on_data: Callable[[bytes], None] | None = None,
    ) -> None:
        super().__init__(
            on_payload=on_payload,
            on_close=on_close,
            on_writable=on_writable,
            max_frame_size=max_frame_size,
            on_data=on_data,
        )
        self._zlib = ZlibStream()
        self._received = False
        """Whether the peer sent anything: a server that closes a compressed connection
        before answering most likely does not accept compression on that transport."""

    def write(self, data: bytes) -> None:
        t = self._transport
        if t is None or self._closed:
            raise DisconnectedError("the connection is closed")
        t.write(self._zlib.compress(data))

    def caller_socket(self) -> socket.socket | None:
        """None: the bytes must go through the deflater, in order."""
        return None

    def _lost(self, exc: BaseException | None) -> None:
        if not self._closed and not self._received and self._error is None:
            self._error = DisconnectedError(
                "the server closed the compressed connection before answering: does its "
                "transport accept compression=zlib (<Compression>zlib</Compression>)?"
            )
        super()._lost(exc)
