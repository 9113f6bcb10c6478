"""ws:// (and wss://): the websockets library, with AMPS's WebSocket message framing."""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import logging
import ssl
import struct
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from .. import _accel
from ..exceptions import (
    AMPSConnectionError,
    DisconnectedError,
    RemoteProtocolError,
    TimeoutError,
)
from ..protocol.framing import WsClientFramer, encode_ws_from_client
from ..protocol.message import body_offset
from ..uri import URI
from .base import OnClose, OnPayload, Transport
from .wsconn import BatchingMixin

__all__ = ["WebSocketTransport"]

log = logging.getLogger("ampsclient.transport")
_unpack_len = struct.Struct(">I").unpack_from


class _Connection(BatchingMixin, ClientConnection):
    """websockets' client connection with direct delivery and batched writes."""

    _mask_frames = True


def ws_messages(data: bytes, text: bool) -> list[tuple[bytes, bool]]:
    """The ``(message, is_text)`` WebSocket messages a client sends for the
    4-byte-length-prefixed payloads in ``data``: count, header[, body] each (protocol.md
    §12); header and body are text in a text session when they are UTF-8.

    ``ampsclient/_speedups_src/ws.c`` has ``ws_encode``, which goes on to the masked frames.
    """
    messages: list[tuple[bytes, bool]] = []
    append = messages.append
    pos = 0
    size = len(data)
    while pos < size:
        (n,) = _unpack_len(data, pos)
        payload = data[pos + 4 : pos + 4 + n]
        pos += 4 + n
        end = body_offset(payload)
        parts = encode_ws_from_client(payload[:end], payload[end:] if end < n else None)
        append((parts[0], False))
        for part in parts[1:]:
            append((part, text and _is_utf8(part)))
    return messages


def _is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


class WebSocketTransport(Transport):
    """A WebSocket connection speaking AMPS's WebSocket framing (``shared/protocol.md`` §12)."""

    def __init__(
        self,
        ws: _Connection,
        *,
        on_payload: OnPayload,
        on_close: OnClose,
        on_writable: Callable[[bool], None] | None,
        max_frame_size: int,
        text: bool,
    ) -> None:
        self._ws = ws
        self._on_payload = on_payload
        self._on_close = on_close
        self._on_writable = on_writable
        self._framer = WsClientFramer(max_frame_size=max_frame_size)
        self._text = text
        self._encode = None if ws.protocol.extensions else _accel.ws_encode
        """The C frame encoder, unless the frames are compressed (websockets does that)."""
        self._outq: asyncio.Queue[bytes | None] = asyncio.Queue()
        """Complete WebSocket frames, in write order (``None``: stop)."""
        self._pending_bytes = 0
        self._closed = False
        self._closer: asyncio.Future[None] | None = None
        ws.set_message_handler(self._on_messages)
        self._reader = asyncio.ensure_future(self._watch())
        self._writer = asyncio.ensure_future(self._write_loop())

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
    ) -> WebSocketTransport:
        """Open a WebSocket to ``uri`` and announce the encoding."""
        url = f"{uri.scheme}://{uri.host}:{uri.port}{uri.path}"
        headers = {}
        if uri.user is not None:
            token = f"{uri.user}:{uri.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        if uri.tls and ssl_context is None:
            ssl_context = ssl.create_default_context()  # verify by default
        try:
            ws = await asyncio.wait_for(
                connect(
                    url,
                    additional_headers=headers,
                    max_size=max_frame_size,
                    compression="deflate" if uri.compression else None,
                    ssl=ssl_context if uri.tls else None,
                    open_timeout=None,
                    ping_interval=None,
                    create_connection=_Connection,
                ),
                connect_timeout,
            )
        except builtins.TimeoutError:
            raise TimeoutError(f"timed out connecting to {uri.redacted()}") from None
        except (OSError, WebSocketException) as exc:
            raise AMPSConnectionError(f"cannot connect to {uri.redacted()}: {exc}") from exc
        if uri.compression and not ws.protocol.extensions:
            await ws.close()
            raise AMPSConnectionError(
                f"{uri.redacted()} does not accept compressed WebSocket connections "
                "(compression=zlib: permessage-deflate was not agreed)"
            )
        text = uri.message_type == "json"
        try:
            await ws.send("text" if text else "binary")
        except ConnectionClosed as exc:  # refused right after the upgrade (e.g. a connection cap)
            raise DisconnectedError(f"{uri.redacted()} closed the connection: {exc}") from None
        assert isinstance(ws, _Connection)
        return cls(
            ws,
            on_payload=on_payload,
            on_close=on_close,
            on_writable=on_writable,
            max_frame_size=max_frame_size,
            text=text,
        )

    def write(self, data: bytes) -> None:
        if self._closed:
            raise DisconnectedError("the connection is closed")
        encode = self._encode
        frames = encode(data, self._text) if encode is not None else None
        if frames is None:
            frames = self._ws.frame_many(ws_messages(data, self._text))
        size = len(frames)
        self._pending_bytes += size
        if self._on_writable is not None and self._pending_bytes > 4 * 1024 * 1024:
            self._on_writable(False)
        self._outq.put_nowait(frames)

    async def _write_loop(self) -> None:
        queue = self._outq
        try:
            while True:
                frames = await queue.get()
                if frames is None:
                    break
                batch = [frames]
                while not queue.empty():  # everything queued meanwhile goes in the same write
                    more = queue.get_nowait()
                    if more is None:
                        await self._ws.send_frames(b"".join(batch))
                        return
                    batch.append(more)
                await self._ws.send_frames(batch[0] if len(batch) == 1 else b"".join(batch))
                self._pending_bytes = max(0, self._pending_bytes - sum(map(len, batch)))
                if self._on_writable is not None and self._pending_bytes <= 1024 * 1024:
                    self._on_writable(True)
        except ConnectionClosed:
            pass
        except Exception as exc:  # pragma: no cover - unexpected
            log.exception("websocket writer failed")
            self._finish(exc)

    def _on_messages(self, messages: list[tuple[bytes, bool]]) -> None:
        """Messages parsed from one read (called by the connection, on the loop)."""
        if self._closed:
            return
        framer = self._framer
        payloads: list[bytes] = []
        try:
            for data, _ in messages:
                payload = framer.receive_message(data)
                if payload is not None:
                    payloads.append(payload)
        except RemoteProtocolError as exc:
            log.warning("closing connection: %s", exc)
            if payloads:
                self._on_payload(payloads)
            self._finish(exc)
            return
        if payloads:
            self._on_payload(payloads)

    async def _watch(self) -> None:
        """Report the end of the connection."""
        ws = self._ws
        await ws.wait_closed()
        error: BaseException | None = None
        if not self._closed:
            exc = ws.close_exc
            error = DisconnectedError(f"connection lost: {exc}")
            error.__cause__ = exc
        self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._outq.put_nowait(None)
        with contextlib.suppress(Exception):
            self._closer = asyncio.ensure_future(self._close_ws())
        self._on_close(error)

    async def _close_ws(self) -> None:
        """The closing handshake; the socket is cut if it is cancelled (the sync client's
        loop stops right after ``close()``), rather than left open for the server to time out."""
        try:
            await self._ws.close()
        except BaseException:
            transport = self._ws.transport
            if transport is not None:
                transport.abort()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._finish(None)
        self._reader.cancel()

    def pause_reading(self) -> None:
        transport = self._ws.transport
        if transport is not None and not self._closed:
            transport.pause_reading()

    def resume_reading(self) -> None:
        transport = self._ws.transport
        if transport is not None and not self._closed:
            transport.resume_reading()

    @property
    def write_buffer_size(self) -> int:
        return self._pending_bytes
