"""A minimal blocking AMPS-over-TCP client on a raw socket, for tests that must control the
bytes, the sequence numbers or the reading pace themselves (no client library involved)."""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from ampsclient.protocol.framing import TcpFramer, tcp_frame
from ampsclient.protocol.header import decode_header, encode_header

__all__ = ["Frame", "RawClient"]

Frame = tuple[dict[str, Any], bytes]
"""A received frame: its header fields and its body."""


class RawClient:
    """One TCP connection to an AMPS server, framed by hand.

    Args:
        port: the server's TCP port on ``host``.
        host: the server's address (loopback by default).
        rcvbuf: ``SO_RCVBUF`` to set before connecting (a small one makes a slow reader).
        timeout: the socket timeout of the connect and of the default reads.
        max_frame_size: the largest frame :meth:`recv` accepts.
    """

    def __init__(
        self,
        port: int,
        *,
        host: str = "127.0.0.1",
        rcvbuf: int | None = None,
        timeout: float = 5.0,
        max_frame_size: int = 64 * 1024 * 1024,
    ) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        self.framer = TcpFramer(max_frame_size=max_frame_size)
        self.ready: deque[bytes] = deque()
        """Payloads received and not yet returned."""

    @classmethod
    def from_uri(cls, uri: str, **kwargs: Any) -> Self:
        """Connect to the host and port of a ``tcp://host:port/amps/json`` URI."""
        parts = urlsplit(uri)
        if parts.port is None:
            raise ValueError(f"no port in {uri!r}")
        return cls(parts.port, host=parts.hostname or "127.0.0.1", **kwargs)

    # ------------------------------------------------------------------ sending

    def send(self, hdr: dict[str, Any], body: bytes = b"") -> None:
        """Send one command (header fields and body), framed."""
        self.sock.sendall(tcp_frame(encode_header(hdr) + body))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (framing included)."""
        self.sock.sendall(data)

    def logon(self, name: str, **fields: Any) -> dict[str, Any]:
        """Log on as ``name`` and return the ``processed`` ack (asserted a success)."""
        hdr = {"c": "logon", "cid": "L", "client_name": name, "mt": "json", "a": "processed"}
        self.send({**hdr, **fields})
        ack, _ = self.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "L")
        assert ack.get("status") == "success", ack
        return ack

    # ------------------------------------------------------------------ receiving

    def _read(self, size: int, timeout: float | None) -> bytes:
        self.sock.settimeout(timeout)
        data = self.sock.recv(size)
        if not data:
            raise ConnectionError("closed by server")
        return data

    def read_some(self, size: int = 65536, timeout: float | None = 5.0) -> list[Frame]:
        """One ``recv`` of at most ``size`` bytes, and the frames it completed (maybe none):
        the reading pace is the caller's. ``timeout=None`` blocks.

        Raises:
            TimeoutError: nothing arrived in time.
            ConnectionError: the server closed the connection.
        """
        self.framer.receive_data(self._read(size, timeout))
        self.ready.extend(self.framer.frames())
        out: list[Frame] = []
        while self.ready:
            payload = self.ready.popleft()
            hdr, end = decode_header(payload)
            out.append((hdr, payload[end:]))
        return out

    def recv(self, timeout: float = 5.0) -> Frame:
        """The next frame.

        Raises:
            TimeoutError: none arrived in ``timeout`` seconds.
            ConnectionError: the server closed the connection.
        """
        deadline = time.monotonic() + timeout
        while not self.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame")
            self.framer.receive_data(self._read(65536, remaining))
            self.ready.extend(self.framer.frames())
        payload = self.ready.popleft()
        hdr, end = decode_header(payload)
        return hdr, payload[end:]

    def recv_until(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> Frame:
        """The first frame whose header satisfies ``pred`` (earlier ones are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv(max(0.0, deadline - time.monotonic()))
            if pred(frame[0]):
                return frame

    def wait_ack(self, ack_type: str, timeout: float = 10.0) -> dict[str, Any]:
        """The header of the next ack of ``ack_type`` (other frames are dropped)."""
        hdr, _ = self.recv_until(lambda h: h.get("c") == "ack" and h.get("a") == ack_type, timeout)
        return hdr

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """Read (discarding) until the server closes the connection; ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
        return False

    # ------------------------------------------------------------------ ending

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
