"""WebSocket listener (``websockets.asyncio.server``), protocol.md §12.

* The request path must be ``/amps/<message type>`` (a query string is ignored); anything
  else is refused with HTTP 404 before the upgrade.
* Client messages (optional ``"text"``/``"binary"`` announcement, then per command a 4-byte
  little-endian count and that many messages) are assembled by
  :class:`ampsclient.protocol.WsServerFramer` into TCP-shaped payloads.
* Replies are split by :func:`ampsclient.protocol.encode_ws_from_server` into the messages
  the client expects and sent as text messages when the client announced ``"text"`` (or,
  without an announcement, when the message type is json), as binary messages otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.utils import apply_mask

from ampsclient.exceptions import FrameTooLargeError, MalformedFrameError
from ampsclient.protocol.framing import WsServerFramer, encode_ws_from_server
from ampsclient.transport.wsconn import BatchingMixin, frame_header
from ampsclient_server_stub import accel
from ampsclient_server_stub.engine.broker import Broker

from .exposure import warn_if_exposed
from .session import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_WRITE_BUFFER, NetSession

if TYPE_CHECKING:
    from ampsclient_server_stub.security.policy import TransportPolicy

    from .flow import FlowControl

__all__ = [
    "WsSession",
    "client_frames",
    "parse_ws_path",
    "server_frames",
    "start_ws_listener",
    "ws_commands",
]

logger = logging.getLogger(__name__)

_PATH_RE: Final = re.compile(r"^/amps/([A-Za-z0-9_.-]+)/?$")


def client_frames(data: bytes, max_size: int) -> tuple[int, list[tuple[bytes, bool]], bool]:
    """The data messages ``(payload, is_text)`` of the WebSocket frames a client sent, from
    the start of ``data``, while each frame is a whole, unfragmented, masked text or binary
    message of at most ``max_size`` bytes (``-1``: any) without RSV bits: what websockets'
    frame parser would deliver for them (text is not validated as UTF-8 there either).
    Returns ``(end, messages, whole)``: where it stopped, and whether only for want of
    bytes (else the frame at ``end`` is of another kind: a control frame, a fragment, a
    protocol error, for websockets to handle).
    Twin of the C ``ws_client_frames``."""
    n = len(data)
    pos = 0
    out: list[tuple[bytes, bool]] = []
    while n - pos >= 2:
        b0 = data[pos]
        b1 = data[pos + 1]
        opcode = b0 & 0x0F
        if b0 & 0xF0 != 0x80 or opcode not in (1, 2) or not b1 & 0x80:
            return pos, out, False
        length = b1 & 0x7F
        h = 2
        if length == 126:
            if n - pos < 4:
                break
            length = int.from_bytes(data[pos + 2 : pos + 4], "big")
            h = 4
        elif length == 127:
            if n - pos < 10:
                break
            length = int.from_bytes(data[pos + 2 : pos + 10], "big")
            h = 10
        if (max_size >= 0 and length > max_size) or length > sys.maxsize // 2:
            return pos, out, False
        start = pos + h + 4
        if n - start < length:
            break
        payload = apply_mask(data[start : start + length], data[pos + h : start])
        out.append((payload, opcode == 1))
        pos = start + length
    return pos, out, True


_client_frames: Final = accel.ws_client_frames or client_frames

_DELIVERY: Final = b'{"c":"p",'


def server_frames(payloads: list[bytes], text: bool) -> bytes | None:
    """The WebSocket frames (unmasked; text or binary messages) of deliveries
    ``{"c":"p",...}BODY``: the header and the body each its own message, as
    :func:`ampsclient.protocol.encode_ws_from_server` splits them. ``None`` when a payload
    is of another kind, its header has a backslash before its end, or (``text``) it is not
    ASCII: the caller then takes the general path. Twin of the C ``ws_server_frames``."""
    out: list[bytes] = []
    append = out.append
    first = 0x81 if text else 0x82
    for payload in payloads:
        if type(payload) is not bytes or not payload.startswith(_DELIVERY):
            return None
        if text and not payload.isascii():
            return None
        end = payload.find(b"}")
        while end >= 0 and payload.count(b'"', 0, end) % 2:
            end = payload.find(b"}", end + 1)
        if end < 0 or payload.find(b"\\", 0, end) >= 0:
            return None
        end += 1
        append(frame_header(first, end, 0))
        append(payload[:end])
        append(frame_header(first, len(payload) - end, 0))
        append(payload[end:])
    return b"".join(out)


_server_frames: Final = accel.ws_server_frames or server_frames


def ws_commands(
    messages: list[tuple[bytes, bool]], start: int, max_size: int
) -> tuple[int, list[bytes]]:
    """The AMPS commands in ``messages[start:]``: a binary 4-byte little-endian count of 1 or
    2, then that many parts joined into one payload of at most ``max_size`` bytes (what
    :class:`~ampsclient.protocol.framing.WsServerFramer` assembles). Stops at anything else,
    at a command not whole in ``messages``, and at a short (up to 6 bytes) non-ASCII text
    part; the framer takes it from there. Returns ``(end, payloads)``. Twin of the C
    ``ws_commands``."""
    payloads: list[bytes] = []
    n = len(messages)
    i = start
    while i < n:
        data, is_text = messages[i]
        if is_text or len(data) != 4:
            break
        count = int.from_bytes(data, "little")
        if count < 1 or count > 2 or i + count >= n:
            break
        parts = [part for part, _text in messages[i + 1 : i + 1 + count]]
        if any(
            text and len(part) <= 6 and not part.isascii()
            for part, text in messages[i + 1 : i + 1 + count]
        ):
            break
        payload = parts[0] if count == 1 else parts[0] + parts[1]
        if len(payload) > max_size:
            break
        payloads.append(payload)
        i += 1 + count
    return i, payloads


_ws_commands: Final = accel.ws_commands or ws_commands


def _data_frame(data: bytes, pos: int, max_message: int) -> tuple[bytes, bool, int] | None:
    """The whole data frame at ``data[pos]`` as :func:`client_frames` takes it:
    ``(payload, is_text, next position)``, or ``None``."""
    n = len(data)
    if n - pos < 2:
        return None
    b0 = data[pos]
    b1 = data[pos + 1]
    opcode = b0 & 0x0F
    if b0 & 0xF0 != 0x80 or opcode not in (1, 2) or not b1 & 0x80:
        return None
    length = b1 & 0x7F
    h = 2
    if length == 126:
        if n - pos < 4:
            return None
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        h = 4
    elif length == 127:
        if n - pos < 10:
            return None
        length = int.from_bytes(data[pos + 2 : pos + 10], "big")
        h = 10
    if (max_message >= 0 and length > max_message) or length > sys.maxsize // 2:
        return None
    start = pos + h + 4
    if n - start < length:
        return None
    payload = apply_mask(data[start : start + length], data[pos + h : start])
    return payload, opcode == 1, start + length


def client_commands(data: bytes, max_message: int, max_size: int) -> tuple[int, list[bytes]]:
    """The whole AMPS commands at the start of a client's WebSocket bytes: what
    :func:`client_frames` then :func:`ws_commands` take, in one pass. Each is a binary count
    message (4 bytes, little-endian 1 or 2), then that many data messages joined into one
    payload of at most ``max_size`` bytes; every frame whole, unfragmented, masked, of at
    most ``max_message`` bytes (``-1``: any); a short (up to 6 bytes) text part ASCII.
    Returns ``(end, payloads)``, ``end`` the byte after the last command taken. Twin of the
    C ``ws_client_commands``."""
    payloads: list[bytes] = []
    pos = 0
    while True:
        head = _data_frame(data, pos, max_message)
        if head is None or head[1] or len(head[0]) != 4:
            break
        count = int.from_bytes(head[0], "little")
        if count < 1 or count > 2:
            break
        parts: list[bytes] = []
        nxt = head[2]
        for _ in range(count):
            part = _data_frame(data, nxt, max_message)
            if part is None or (part[1] and len(part[0]) <= 6 and not part[0].isascii()):
                break
            parts.append(part[0])
            nxt = part[2]
        if len(parts) < count:
            break
        payload = b"".join(parts)
        if len(payload) > max_size:
            break
        payloads.append(payload)
        pos = nxt
    return pos, payloads


_client_commands: Final = accel.ws_client_commands or client_commands

_NOT_HTTP_BODY: Final = (
    b"This is an AMPS WebSocket port: connect with ws://HOST:PORT/amps/<message type>, "
    b"not tcp://.\n"
)
_NOT_HTTP_RESPONSE: Final = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_NOT_HTTP_BODY)).encode() + b"\r\n\r\n" + _NOT_HTTP_BODY
)


def _looks_like_http(first: bytes) -> bool:
    """An HTTP request starts with its method's upper-case letters (``GET ...``); an AMPS
    tcp:// client's first byte is the high byte of a frame length (0 for any sane frame)."""
    return 0x41 <= first[0] <= 0x5A


class _Connection(BatchingMixin, ServerConnection):
    """websockets' server connection with direct delivery and batched writes.

    Once the session runs (:meth:`parse_frames_here`), the data frames of the client are
    parsed by :func:`client_frames` (C or its twin) instead of websockets' parser, many per
    read; the first frame of another kind (ping, close, fragment, protocol error) and
    everything after it go to websockets, as before.
    """

    _fast = False
    _fast_buf = b""
    _on_commands: Callable[[bytes, int], int] | None = None
    """Takes whole AMPS commands straight from the bytes (the session, once its framer is
    idle); returns how many bytes it took."""
    _open_bytes = 0
    """Bytes received while the connection was open and websockets parsed them."""
    _seen_bytes = False
    """Whether the first bytes of the connection (the HTTP request) were received."""

    def _not_http(self) -> None:
        """The client spoke something else than HTTP (an AMPS ``tcp://`` client, whose
        first byte is a frame length): answer at once with a 400 it can read, and close,
        rather than wait for a request until the handshake times out."""
        logger.info("ws: a connection sent no HTTP request (an AMPS tcp:// client?): closed")
        transport = self.transport
        transport.write(_NOT_HTTP_RESPONSE)
        transport.close()

    def parse_frames_here(self) -> bool:
        """Take over the parsing of data frames, when websockets' parser holds nothing (no
        byte received since the handshake); returns whether it did."""
        protocol = self.protocol
        if (
            protocol.state is State.OPEN
            and self._open_bytes == 0
            and not protocol.reader.buffer
            and self._held is None
        ):
            self._fast = True
        return self._fast

    def set_command_taker(self, taker: Callable[[bytes, int], int] | None) -> None:
        """Let ``taker(data, max_message)`` take whole commands from each read first."""
        self._on_commands = taker

    def data_received(self, data: bytes) -> None:
        if not self._fast:
            state = self.protocol.state
            if state is State.OPEN:
                self._open_bytes += len(data)
            elif state is State.CONNECTING and not self._seen_bytes and data:
                self._seen_bytes = True
                if not _looks_like_http(data):
                    self._not_http()
                    return
            super().data_received(data)
            return
        buf = self._fast_buf + data if self._fast_buf else data
        self._fast_buf = b""
        limit = self.protocol.max_message_size
        max_message = -1 if limit is None else limit
        taker = self._on_commands
        if taker is not None:
            used = taker(buf, max_message)
            if used:
                if used == len(buf):
                    return
                buf = buf[used:]
        end, messages, whole = _client_frames(buf, max_message)
        if messages:
            handler = self._on_messages
            if handler is not None:
                handler(messages)
            elif self._held is None:  # pragma: no cover - the handler is set before
                self._held = messages
            else:  # pragma: no cover
                self._held.extend(messages)
        if end < len(buf):
            if whole:
                self._fast_buf = buf[end:]
            else:
                self._fast = False
                super().data_received(buf[end:])


def _as_utf8(part: bytes) -> bytes:
    """``part`` as valid UTF-8 for a text message (undecodable bytes replaced)."""
    return part.decode("utf-8", "replace").encode()


def parse_ws_path(path: str) -> str | None:
    """The message type named by a ``/amps/<type>`` request path, or ``None``."""
    match = _PATH_RE.match(path.split("?", 1)[0])
    return match.group(1).lower() if match else None


class WsSession(NetSession):
    """One WebSocket client connection."""

    def __init__(
        self,
        broker: Broker,
        loop: asyncio.AbstractEventLoop,
        ws: _Connection,
        *,
        message_type: str,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ) -> None:
        super().__init__(
            broker,
            loop,
            transport_name="ws",
            max_frame_size=max_frame_size,
            max_write_buffer=max_write_buffer,
        )
        self.ws = ws
        self.message_type = message_type
        self.framer = WsServerFramer(max_frame_size=max_frame_size)
        self.text: bool = message_type == "json"
        """Send text messages (else binary)."""
        self.compressed = bool(ws.protocol.extensions)
        """permessage-deflate was agreed: websockets frames (and compresses) the replies."""
        self._first = True
        self._idle = False
        """The framer has assembled a command and holds nothing (``ws_commands`` may run)."""
        self._queue: list[bytes] = []
        """WebSocket frames waiting for the writer task."""
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    def receive(self, message: str | bytes) -> None:
        """Feed one WebSocket message from the client."""
        if isinstance(message, str):
            self.receive_many([(message.encode(), True)])
        else:
            self.receive_many([(message, False)])

    def take_commands(self, data: bytes, max_message: int) -> int:
        """Whole commands straight from the client's WebSocket bytes, while the framer is
        idle (``ws_client_commands``, C or its twin); returns the bytes taken. The rest of
        the read goes to :meth:`receive_many` as messages."""
        if self._closing or not self._idle:
            return 0
        end, payloads = _client_commands(data, max_message, self.max_frame_size)
        if payloads:
            self.last_received = self.loop.time()
            self.handle_payloads(payloads)
        return end

    def receive_many(self, messages: list[tuple[bytes, bool]]) -> None:
        """Feed the ``(data, is_text)`` WebSocket messages of one read."""
        if self._closing:
            return
        self.last_received = self.loop.time()
        if self._first:
            self._first = False
            data, is_text = messages[0]
            if is_text and data in (b"text", b"binary"):
                self.text = data == b"text"
        framer = self.framer
        payloads: list[bytes] = []
        n = len(messages)
        i = 0
        try:
            while i < n:
                if self._idle:  # whole commands, many at a time (C or its twin)
                    i, taken = _ws_commands(messages, i, self.max_frame_size)
                    payloads += taken
                    if i >= n:
                        break
                data, is_text = messages[i]
                i += 1
                # text matters only where a count is expected ("text"/"binary" announce;
                # a text count is an error): short text messages go as str
                payload = framer.receive_message(
                    data.decode("utf-8", "replace") if is_text and len(data) <= 6 else data
                )
                if payload is not None:
                    payloads.append(payload)
                # the framer has taken a count (it is announced) and holds no part
                self._idle = payload is not None
        except (MalformedFrameError, FrameTooLargeError) as exc:
            logger.warning("ws client %s: %s; disconnecting", self.peer, exc)
            if payloads:
                self.handle_payloads(payloads)
            if self.conn is not None:
                self.broker.kick(self.conn, "malformed websocket framing")
            return
        if payloads:
            self.handle_payloads(payloads)

    async def run(self) -> None:
        """Serve the connection until it closes."""
        peer: Any = self.ws.remote_address
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.attach(message_type=self.message_type, peer=peer_text)
        self._writer = asyncio.create_task(self._write_loop())
        try:
            self.ws.set_message_handler(self.receive_many)
            if not self.compressed:  # compressed frames: websockets' parser inflates them
                self.ws.set_command_taker(self.take_commands)
                self.ws.parse_frames_here()
            await self.ws.wait_closed()
        finally:
            self.connection_closed()
            self._wake.set()
            if self._writer is not None:
                try:
                    await self._writer
                except ConnectionClosed:
                    pass

    # ------------------------------------------------------------------ NetSession

    def _write(self, payloads: list[bytes]) -> None:
        text = self.text
        # deliveries only (C or its twin); a compressed connection's frames are websockets'
        frames = None if self.compressed else _server_frames(payloads, text)
        if frames is None:
            messages: list[tuple[bytes, bool]] = []
            append = messages.append
            for payload in payloads:
                for part in encode_ws_from_server(payload):
                    append((part if not text or part.isascii() else _as_utf8(part), text))
            frames = self.ws.frame_many(messages)
        self._queue.append(frames)
        self._wake.set()

    def _buffered(self) -> int:
        transport = self.ws.transport
        size = 0 if transport is None else transport.get_write_buffer_size()
        return size + sum(map(len, self._queue))

    async def _write_loop(self) -> None:
        ws = self.ws
        while True:
            await self._wake.wait()
            self._wake.clear()
            queue = self._queue
            self._queue = []
            try:
                if queue:
                    await ws.send_frames(queue[0] if len(queue) == 1 else b"".join(queue))
            except ConnectionClosed:
                return
            if self._closing and not self._queue:
                await ws.close()
                return

    def _close_transport(self) -> None:
        # the writer sends what is queued, then closes the WebSocket
        self._wake.set()
        if self._writer is None:
            self.loop.create_task(self.ws.close())

    def _abort_transport(self) -> None:
        self._queue = []
        transport = self.ws.transport
        if transport is not None:
            transport.abort()


async def start_ws_listener(
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
    compression: str | None = None,
) -> Server:
    """Listen on ``host:port`` (port 0 picks a free port) and serve AMPS over WebSocket.

    ``compression="zlib"`` (``<Compression>zlib</Compression>``) agrees to permessage-deflate
    (RFC 7692) with the clients that ask for it (ours with ``compression=zlib``).

    ``message_type``, when set, is the only type the transport accepts (other paths → 404).
    ``ssl_context`` makes it a ``wss`` listener; ``policy`` (security package) applies
    connection caps to its sessions, and slow-client management with ``flow``
    (the server's running resource pools).
    """
    loop = asyncio.get_running_loop()

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        mt = parse_ws_path(request.path)
        if mt is None or (message_type is not None and mt != message_type.lower()):
            return connection.respond(404, "AMPS WebSocket path must be /amps/<message type>\n")
        return None

    async def handler(ws: ServerConnection) -> None:
        assert isinstance(ws, _Connection)
        mt = parse_ws_path(ws.request.path if ws.request is not None else "") or "json"
        session = WsSession(
            broker,
            loop,
            ws,
            message_type=mt,
            max_frame_size=max_frame_size,
            max_write_buffer=max_write_buffer,
        )
        session.policy = policy
        session.flow = flow
        await session.run()

    server = await serve(
        handler,
        host,
        port,
        process_request=process_request,
        max_size=max_frame_size,
        compression="deflate" if compression else None,
        ping_interval=None,
        close_timeout=2,
        ssl=ssl_context,
        create_connection=_Connection,
    )
    sockets = list(server.sockets)
    bound: int = sockets[0].getsockname()[1] if sockets else port
    authenticated = (policy is not None and policy.auth is not None) or (
        broker.hooks.authenticate is not None
    )
    warn_if_exposed("ws", host, bound, authenticated=authenticated)
    return server
