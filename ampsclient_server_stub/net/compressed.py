"""Compressed TCP connections: a transport with ``<Compression>zlib</Compression>``.

The official AMPS clients' ``compression=zlib`` deflates the whole connection from its first
byte, with no negotiation (docs/protocol.md, "Transport compression"). A transport that
accepts compression therefore tells the two kinds of connection apart by the first byte: an
AMPS frame starts with its 4-byte big-endian length, whose first byte is zero (frames are
under 16 MiB); anything else is taken as a deflate stream. A compressed connection is inflated
before framing and each batch of replies is deflated and sync-flushed; a stream that does not
inflate closes only that connection (:class:`~ampsclient.exceptions.CompressionError`).
"""

from __future__ import annotations

import asyncio
import logging

from ampsclient.exceptions import CompressionError
from ampsclient.protocol.compression import ZlibStream
from ampsclient_server_stub.engine.broker import Broker

from .session import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_WRITE_BUFFER
from .tcp import TcpSession, frame_join_any

__all__ = ["ZlibTcpSession"]

logger = logging.getLogger(__name__)


class ZlibTcpSession(TcpSession):
    """A connection on a transport that accepts compressed connections (and plain ones)."""

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
            message_type=message_type,
            max_frame_size=max_frame_size,
            max_write_buffer=max_write_buffer,
        )
        self.zlib: ZlibStream | None = None
        """The connection's deflate streams once its first byte showed it compressed."""
        self._first = True

    def data_received(self, data: bytes) -> None:
        zlib = self.zlib
        if zlib is None:
            if not self._first or not data:
                TcpSession.data_received(self, data)
                return
            self._first = False
            if data[0] == 0:  # a frame length: a plain connection
                TcpSession.data_received(self, data)
                return
            zlib = self.zlib = ZlibStream()
        if self._closing:
            return
        try:
            for plain in zlib.inflate(data):  # a bounded chunk at a time
                TcpSession.data_received(self, plain)
                if self.closing:  # e.g. a frame too large: the rest is not read
                    return
        except CompressionError as exc:
            logger.warning("tcp client %s: %s; disconnecting", self.peer, exc)
            if self.conn is not None:
                self.broker.kick(self.conn, "invalid compressed data")
            else:  # pragma: no cover
                self.disconnect("invalid compressed data")

    def _write(self, payloads: list[bytes]) -> None:
        zlib = self.zlib
        if zlib is None:
            TcpSession._write(self, payloads)
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(zlib.compress(frame_join_any(payloads)))
