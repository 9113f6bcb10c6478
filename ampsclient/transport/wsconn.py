"""Fast paths on top of the ``websockets`` asyncio connections (client and server side).

``websockets`` hands each received message through a queue to ``recv()``/``async for`` and
writes each sent message with its own ``transport.write``: a few microseconds per message,
which is most of the cost of an AMPS command (two or three WebSocket messages). AMPS
traffic is many small messages, so :class:`BatchingMixin` changes two things, and nothing
about the WebSocket protocol, the handshake, pings or closing (still ``websockets``):

* received data messages go straight to a callback, a list per ``data_received`` call (a
  fragmented message is joined first); nothing waits on ``recv()``;
* :meth:`BatchingMixin.send_many` frames several messages and writes them with one
  ``transport.write`` (:meth:`~BatchingMixin.frame_many` builds the bytes,
  :meth:`~BatchingMixin.send_frames` writes bytes built elsewhere). On a connection that
  negotiated permessage-deflate (``compression=zlib``), the frames are websockets' own,
  compressed by the extension.

Used as ``class C(BatchingMixin, ClientConnection)`` (or ``ServerConnection``); it relies on
``process_event``, ``send_context``, ``send_data``, ``protocol`` and ``transport`` of
``websockets.asyncio.connection.Connection`` (websockets >= 14; tested with 17).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from websockets.frames import Frame, Opcode

try:  # the C version that websockets itself uses
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - pure Python websockets
    from websockets.utils import apply_mask

__all__ = ["BatchingMixin", "OnMessages"]

OnMessages = Callable[[list[tuple[bytes, bool]]], None]
"""Receives ``(data, is_text)`` for every complete data message, in order."""

_TEXT = Opcode.TEXT
_BINARY = Opcode.BINARY
_CONT = Opcode.CONT
_H7: Final = struct.Struct("!BB")
_H16: Final = struct.Struct("!BBH")
_H64: Final = struct.Struct("!BBQ")


def frame_header(first: int, length: int, mask_bit: int) -> bytes:
    """RFC 6455 §5.2 frame header: FIN/opcode byte, mask bit + payload length."""
    if length < 126:
        return _H7.pack(first, mask_bit | length)
    if length < 0x10000:
        return _H16.pack(first, mask_bit | 126, length)
    return _H64.pack(first, mask_bit | 127, length)


class BatchingMixin:
    """Direct delivery of received messages and batched writes (see the module docstring)."""

    _on_messages: OnMessages | None = None
    _held: list[tuple[bytes, bool]] | None = None
    _fragments: list[bytes] | None = None
    _fragment_text = False
    _mask_frames = False
    """Client connections mask what they send (RFC 6455 §5.3); servers do not."""

    # attributes of websockets' Connection used here
    protocol: Any
    transport: Any

    def set_message_handler(self, handler: OnMessages) -> None:
        """Deliver data messages to ``handler`` from now on (anything held arrives first)."""
        self._on_messages = handler
        held = self._held
        if held:
            self._held = None
            handler(held)

    def process_event(self, event: Any) -> None:
        if type(event) is Frame and event.opcode in (_TEXT, _BINARY, _CONT):
            self._data_frame(event)
        else:
            super().process_event(event)  # type: ignore[misc]

    def _data_frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is _CONT:
            if self._fragments is None:  # the protocol layer rejects this; be safe
                return
            self._fragments.append(bytes(frame.data))
            if not frame.fin:
                return
            data = b"".join(self._fragments)
            text = self._fragment_text
            self._fragments = None
        elif not frame.fin:
            self._fragments = [bytes(frame.data)]
            self._fragment_text = opcode is _TEXT
            return
        else:
            data = bytes(frame.data)
            text = opcode is _TEXT
        held = self._held
        if held is None:
            self._held = [(data, text)]
        else:
            held.append((data, text))

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        held = self._held
        handler = self._on_messages
        if held and handler is not None:
            self._held = None
            handler(held)

    def send_data(self) -> None:
        """Write everything the protocol produced with one ``transport.write``."""
        chunks = self.protocol.data_to_send()
        if not chunks:
            return
        eof = b"" in chunks  # the protocol asks for the end of the stream (closing)
        if eof:
            chunks = [c for c in chunks if c]
        if chunks:
            self.transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if eof:
            if self.transport.can_write_eof():
                try:
                    self.transport.write_eof()
                except Exception:  # pragma: no cover - as websockets does
                    pass
            else:  # pragma: no cover
                self.transport.close()

    def frame_many(self, messages: Sequence[tuple[bytes, bool]]) -> bytes:
        """The wire bytes of ``(data, is_text)`` messages, each its own WebSocket message
        (masked on a client connection).

        Frames are built here rather than by the protocol object's send_text/send_binary
        (about 5 µs each: a Frame object, a BytesIO, a urandom call per mask): unfragmented
        data frames carry no state the protocol tracks.
        """
        if self.protocol.extensions:  # permessage-deflate: websockets compresses and frames
            return self._frame_with_extensions(messages)
        out: list[bytes] = []
        append = out.append
        if self._mask_frames:
            keys = os.urandom(4 * len(messages))
            for i, (data, text) in enumerate(messages):
                key = keys[4 * i : 4 * i + 4]
                append(frame_header(0x81 if text else 0x82, len(data), 0x80))
                append(key)
                append(apply_mask(data, key))
        else:
            for data, text in messages:
                append(frame_header(0x81 if text else 0x82, len(data), 0))
                append(data)
        return b"".join(out)

    def _frame_with_extensions(self, messages: Sequence[tuple[bytes, bool]]) -> bytes:
        """The frames of ``messages`` as websockets' protocol writes them: through the
        negotiated extensions (permessage-deflate, ``compression=zlib``), in order."""
        protocol = self.protocol
        for data, text in messages:
            if text:
                protocol.send_text(data)
            else:
                protocol.send_binary(data)
        return b"".join(protocol.data_to_send())

    async def send_many(self, messages: Sequence[tuple[bytes, bool]]) -> None:
        """Send ``(data, is_text)`` messages, each its own WebSocket message, in one write.

        Raises:
            websockets.exceptions.ConnectionClosed: the connection is closed.
        """
        await self.send_frames(self.frame_many(messages))

    async def send_frames(self, frames: bytes) -> None:
        """Write complete WebSocket data frames (from :meth:`frame_many`, or the C
        speedups' ``ws_encode``) with one ``transport.write``.

        Raises:
            websockets.exceptions.ConnectionClosed: the connection is closed.
        """
        async with self.send_context():  # type: ignore[attr-defined]
            self.transport.write(frames)
