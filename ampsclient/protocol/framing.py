"""Streaming framers: bytes or WebSocket messages in, whole AMPS payloads out. No I/O.

A *payload* is what one AMPS command is on TCP: the header immediately followed by the body.
Both framers turn their transport's units into payloads, so everything above them sees one
shape whatever the transport.

TCP (``shared/protocol.md`` §1): each payload is preceded by its length as a 4-byte
big-endian unsigned integer.

WebSocket (§12):

* client to server: an optional first text message ``"text"`` or ``"binary"`` (the encoding
  announcement), then per command a 4-byte *little-endian* count message, then that many
  messages: the header and, when there is one, the data;
* server to client: the header as its own message; ``p``/``publish``/``oof`` headers are
  followed by exactly one data message unless the header says ``"l":0``; a ``sow`` header
  carries ``bs`` = number of records and is followed by ``bs`` pairs of (record header,
  record data) messages.
"""

from __future__ import annotations

import struct
from typing import Final

from .. import _accel
from ..exceptions import AMPSError, FrameTooLargeError, MalformedFrameError, NotAmpsPortError
from .header import decode_header
from .message import body_offset

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "TcpFramer",
    "WsClientFramer",
    "WsServerFramer",
    "encode_ws_from_client",
    "encode_ws_from_server",
    "oversized",
    "tcp_frame",
]

DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024
"""Largest payload accepted by default (64 MiB)."""

_LEN: Final = struct.Struct(">I")
_pack_len = _LEN.pack
_unpack_len = _LEN.unpack_from
_COUNT: Final = struct.Struct("<I")
_P_HEAD: Final = b'{"c":"p",'
_L0_COMMA: Final = b'"l":0,'
_L0_BRACE: Final = b'"l":0}'


def tcp_frame(payload: bytes) -> bytes:
    """Prefix a payload with its 4-byte big-endian length."""
    return _pack_len(len(payload)) + payload


def split_frames(data: bytes, pos: int, limit: int, out: list[bytes]) -> int:
    """Append every whole length-prefixed payload of ``data[pos:]`` to ``out``.

    Returns the offset of the first byte not consumed, or ``-1 - offset`` of a length prefix
    above ``limit`` (nothing after it is consumed). ``ampsclient/_speedups_src/frames.c`` has
    the same function in C (:mod:`ampsclient._accel`).
    """
    end = len(data)
    append = out.append
    while end - pos >= 4:
        (n,) = _unpack_len(data, pos)
        if n > limit:
            return -1 - pos
        stop = pos + 4 + n
        if stop > end:
            break
        append(data[pos + 4 : stop])
        pos = stop
    return pos


def oversized(data: bytes | bytearray, at: int, n: int, limit: int) -> AMPSError:
    """The error for a length prefix ``n`` over ``limit`` at ``data[at:]``: an HTTP response
    where a frame was expected (its first bytes read ``HTTP/``, a length of 1213486160) is a
    :class:`NotAmpsPortError` quoting the status line; anything else a
    :class:`FrameTooLargeError`."""
    if bytes(data[at : at + 5]) == b"HTTP/":
        line = bytes(data[at : at + 200]).split(b"\r\n", 1)[0].decode("latin-1")
        return NotAmpsPortError(
            f"the server answered with HTTP ({line!r}), not AMPS framing: this is a WebSocket "
            "port (connect with ws://) or an HTTP (admin) port, not an AMPS tcp:// port"
        )
    return FrameTooLargeError(f"frame of {n} bytes exceeds the maximum of {limit}")


class TcpFramer:
    """Split a TCP byte stream into payloads.

    Feed bytes with :meth:`receive_data` in chunks of any size (one byte at a time works);
    collect whole payloads with :meth:`frames`.

    Args:
        max_frame_size: a length prefix above this raises :class:`FrameTooLargeError`
            before any of the payload is buffered.
    """

    __slots__ = ("_buf", "_max", "_ready")

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._max = max_frame_size
        self._ready: list[bytes] = []

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole payload."""
        return len(self._buf)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes; whole payloads become available from :meth:`frames`.

        Raises:
            FrameTooLargeError: a length prefix exceeds ``max_frame_size``.
        """
        view = data if type(data) is bytes else bytes(data)
        end = len(view)
        pos = self.receive_head(view) if self._buf else 0
        if pos == end:
            return
        ready = self._ready
        limit = self._max
        buf = self._buf
        pos = (_accel.split_frames or split_frames)(view, pos, limit, ready)
        if pos < 0:
            (n,) = _unpack_len(view, -1 - pos)
            raise oversized(view, -1 - pos, n, limit)
        if pos < end:
            buf += view[pos:end]

    def receive_head(self, data: bytes) -> int:
        """Complete the payload held from the last call with the first bytes of ``data``.

        Returns how many bytes of ``data`` that took (all of them while the payload is still
        incomplete); a completed payload is available from :meth:`frames`. The rest of
        ``data`` is the caller's: :meth:`receive_data` splits it, and the client's receive
        path delivers it as it splits it (``ampsclient.core.routes.deliver_stream``), then
        hands the incomplete tail back here.

        Raises:
            FrameTooLargeError: the held length prefix exceeds ``max_frame_size``.
        """
        buf = self._buf
        if not buf:
            return 0
        # Just the bytes the held frame lacks: the rest of ``data`` is sliced in place (no
        # join of the tail with a whole new chunk, and a large frame arriving in many pieces
        # is appended, never re-copied).
        end = len(data)
        pos = 0
        if len(buf) < 4:
            pos = min(4 - len(buf), end)
            buf += data[:pos]
            if len(buf) < 4:
                return pos
        (n,) = _unpack_len(buf, 0)
        if n > self._max:
            raise oversized(bytes(buf) + bytes(data[pos : pos + 200]), 0, n, self._max)
        missing: int = 4 + n - len(buf)
        if missing > end - pos:
            buf += data[pos:] if pos else data
            return end
        buf += data[pos : pos + missing]
        self._ready.append(bytes(buf[4:]))
        buf.clear()
        return pos + missing

    @property
    def max_frame_size(self) -> int:
        """The largest payload accepted."""
        return self._max

    def frames(self) -> list[bytes]:
        """Return and forget the payloads completed so far."""
        ready = self._ready
        if not ready:
            return []
        self._ready = []
        return ready


def encode_ws_from_client(header: bytes, data: bytes | None = None) -> list[bytes]:
    """The WebSocket messages a client sends for one command: count, header[, data]."""
    if data is None:
        return [_COUNT.pack(1), header]
    return [_COUNT.pack(2), header, data]


class WsServerFramer:
    """Server side: assemble client WebSocket messages into payloads.

    Args:
        max_frame_size: an assembled payload above this raises :class:`FrameTooLargeError`.
    """

    __slots__ = ("_announced", "_max", "_parts", "_pending", "encoding")

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._max = max_frame_size
        self._pending = 0
        self._parts: list[bytes] = []
        self._announced = False
        self.encoding: str = "text"
        """What the client announced: ``"text"`` or ``"binary"`` (``"text"`` if nothing)."""

    def receive_message(self, message: bytes | str) -> bytes | None:
        """Feed one WebSocket message; return a payload when one is complete.

        Raises:
            MalformedFrameError: a message arrives where a count was expected and it is not one.
            FrameTooLargeError: the assembled payload is too large.
        """
        if self._pending == 0:
            if isinstance(message, str):
                if not self._announced and message in ("text", "binary"):
                    self._announced = True
                    self.encoding = message
                    return None
                raise MalformedFrameError("expected a 4-byte count message")
            if len(message) != 4:
                raise MalformedFrameError("expected a 4-byte count message")
            (count,) = _COUNT.unpack(message)
            if count < 1 or count > 2:
                raise MalformedFrameError(f"unsupported message count {count}")
            self._announced = True
            self._pending = count
            return None
        part = message.encode() if isinstance(message, str) else bytes(message)
        self._parts.append(part)
        if sum(len(p) for p in self._parts) > self._max:
            self._parts = []
            raise FrameTooLargeError(f"frame exceeds the maximum of {self._max} bytes")
        self._pending -= 1
        if self._pending:
            return None
        payload = b"".join(self._parts)
        self._parts = []
        return payload


def encode_ws_from_server(payload: bytes) -> list[bytes]:
    """Split a server payload into the WebSocket messages a client expects (§12).

    ``sow`` payloads (outer header + record header/data pairs) become the outer header
    followed by each record header and record data; ``p``/``oof`` become header + data
    (``"l":0`` is not needed: an empty body is still sent as an empty data message).
    """
    if payload.startswith(_P_HEAD):  # a delivery: header and body, no parse needed
        end = body_offset(payload)
        return [payload[:end], payload[end:]]
    header, end = decode_header(payload)
    c = header.get("c")
    if c == "sow":
        out = [payload[:end]]
        pos = end
        size = len(payload)
        while pos < size:
            rh, rend = decode_header(payload, pos)
            n = int(rh.get("l", 0))
            out.append(payload[pos:rend])
            out.append(payload[rend : rend + n])
            pos = rend + n
        return out
    if c in ("p", "publish", "oof"):
        return [payload[:end], payload[end:]]
    return [payload]


class WsClientFramer:
    """Client side: assemble server WebSocket messages into payloads shaped like TCP ones."""

    __slots__ = ("_max", "_parts", "_pending")

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._max = max_frame_size
        self._parts: list[bytes] = []
        self._pending = 0

    def receive_message(self, message: bytes | str) -> bytes | None:
        """Feed one WebSocket message; return a payload when one is complete."""
        part = message.encode() if isinstance(message, str) else bytes(message)
        if len(part) > self._max:
            raise FrameTooLargeError(f"message exceeds the maximum of {self._max} bytes")
        if self._pending:
            self._parts.append(part)
            self._pending -= 1
            if self._pending:
                return None
            payload = b"".join(self._parts)
            self._parts = []
            return payload
        if part.startswith(_P_HEAD) and _L0_COMMA not in part and _L0_BRACE not in part:
            self._parts = [part]  # a delivery's header: its body comes next
            self._pending = 1
            return None
        header, _ = decode_header(part)
        c = header.get("c")
        if c in ("p", "oof"):
            if str(header.get("l", "")) == "0":
                return part
            self._parts = [part]
            self._pending = 1
            return None
        if c == "sow":
            try:
                count = int(header.get("bs", 0))
            except (TypeError, ValueError):
                raise MalformedFrameError("sow message with a non-integer bs") from None
            if count <= 0:
                return part
            self._parts = [part]
            self._pending = 2 * count
            return None
        return part
