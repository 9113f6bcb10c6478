"""A broker session that records what the broker sends (for sans-I/O broker tests)."""

from __future__ import annotations

import json
from typing import Any

from ampsclient.protocol.header import decode_header

__all__ = ["RecordingSession"]


class RecordingSession:
    """Implements the broker's ``Session`` protocol by keeping every payload it is sent.

    Example::

        broker = Broker()
        session = RecordingSession()
        conn = broker.connect(session)
        broker.handle(conn, b'{"c":"logon","cid":"1","client_name":"a","a":"processed"}')
        assert session.headers("ack")[0]["status"] == "success"
    """

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        """Every payload, in order."""
        self.closed: str | None = None
        """The reason of the broker's ``disconnect`` call, if any."""
        self.heartbeat: float | None = None
        """The interval of the broker's ``start_heartbeat`` call, if any."""

    def send(self, payload: bytes) -> None:
        self.sent.append(payload)

    def send_many(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self.send(payload)

    def disconnect(self, reason: str) -> None:
        self.closed = reason

    def start_heartbeat(self, interval: float) -> None:
        self.heartbeat = interval

    def backlog(self) -> int:
        """Bytes queued and not yet written: always 0 (nothing is ever held back)."""
        return 0

    def frames(self, command: str = "p") -> list[tuple[dict[str, Any], bytes]]:
        """``(header, body)`` of every payload of ``command``."""
        out = []
        for payload in self.sent:
            hdr, end = decode_header(payload)
            if hdr.get("c") == command:
                out.append((dict(hdr), payload[end:]))
        return out

    def headers(self, command: str, ack: str | None = None) -> list[dict[str, Any]]:
        """Headers of every payload of ``command`` (and of ack type ``ack``, if given)."""
        return [h for h, _ in self.frames(command) if ack is None or h.get("a") == ack]

    def bodies(self, command: str = "p") -> list[Any]:
        """JSON-decoded bodies of every payload of ``command``."""
        return [json.loads(body) for _, body in self.frames(command)]

    def deliveries(self) -> list[dict[str, Any]]:
        """Headers of every ``p`` delivery."""
        return self.headers("p")
