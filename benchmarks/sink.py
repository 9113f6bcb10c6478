"""Minimal AMPS servers for benchmarks: they do as little as possible so the client is measured.

* ``SinkServer``: reads frames; acks logon and flush (processed, echoing cid) and sends
  conflated persisted acks (``s`` = highest seen) at most every :data:`ACK_INTERVAL`, and
  before the ack of a flush.
* ``PumpServer``: on a subscribe, acks it and then writes N ``p`` frames routed to its sub id
  as fast as the socket takes them. The frames for sub id ``PUMP_SUB_ID`` on topic
  ``orders`` are built before the server starts, so a client subscribing with them is
  measured, not the pump.

Each runs in a child process so that the server does not share the GIL
with the client being measured. Uses only the stdlib and ampsclient.protocol.
"""

from __future__ import annotations

import asyncio
import re
import struct
import subprocess
import sys
from typing import Any

from ampsclient.protocol import TcpFramer, decode_header, encode_header, tcp_frame

_CID = re.compile(rb'"cid":"([^"]*)"')
_S = re.compile(rb'"s":"?(\d+)')
_PUBLISH = b'{"c":"p"'
ACK_INTERVAL = 0.001
"""Seconds over which the sink conflates persisted acks (a flush acks at once)."""


class _Sink(asyncio.Protocol):
    def __init__(self, counter: dict[str, int]) -> None:
        self.framer = TcpFramer()
        self.counter = counter
        self.transport: asyncio.Transport | None = None
        self.top = -1
        """The highest publish sequence number not acknowledged yet."""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def _persisted_ack(self) -> bytes:
        ack = tcp_frame(
            encode_header({"c": "ack", "a": "persisted", "s": self.top, "status": "success"})
        )
        self.top = -1
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        return ack

    def _send_persisted_ack(self) -> None:
        self.timer = None
        if self.top >= 0 and self.transport is not None:
            self.transport.write(self._persisted_ack())

    def data_received(self, data: bytes) -> None:
        self.framer.receive_data(data)
        frames = self.framer.frames()
        out = []
        # Publishes need no work but the highest ``s``. A connection's publishes all carry
        # one (an HA client) or none, and they rise, so only the last publish is parsed:
        # per frame there is one ``startswith`` in a comprehension (the sink must cost far
        # less than the clients it measures).
        for payload in reversed(frames):
            if payload.startswith(_PUBLISH):
                m = _S.search(payload, 0, 200)
                if m:
                    self.top = int(m.group(1))
                break
        for payload in [f for f in frames if not f.startswith(_PUBLISH)]:
            header, _ = decode_header(payload)
            c = header.get("c")
            if c == "p":
                if "s" in header:
                    self.top = max(self.top, int(header["s"]))
                continue
            if c in ("logon", "flush", "subscribe") and "cid" in header:
                ack: dict[str, Any] = {
                    "c": "ack",
                    "cid": header["cid"],
                    "a": "processed",
                    "status": "success",
                }
                if c == "logon":
                    ack.update(
                        {"s": 0, "client_name": header.get("client_name", ""), "version": "5.3.5.0"}
                    )
                if self.top >= 0 and c == "flush":
                    out.append(self._persisted_ack())
                out.append(tcp_frame(encode_header(ack)))
        self.counter["n"] = self.counter.get("n", 0) + len(frames)
        if self.top >= 0 and self.timer is None:
            # persisted acks are conflated over ACK_INTERVAL, like a journal's group commit:
            # a server does not ack every read (a client that writes small chunks would get
            # an ack per few messages, and the sink would measure its ack handling)
            self.timer = asyncio.get_running_loop().call_later(
                ACK_INTERVAL, self._send_persisted_ack
            )
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


PUMP_SUB_ID = "bench"
"""Sub id whose frames the pump builds before it serves (subscribe with it to measure only
the client: the pump then just writes)."""


def _pump_chunks(count: int, body: bytes, sub_id: str, topic: str) -> list[bytes]:
    """The ``count`` delivery frames for ``sub_id``, joined in chunks of 5,000."""
    head = encode_header({"c": "p", "t": topic, "sids": sub_id})[:-1] + b',"bm":"12345|'
    chunk = 5000
    chunks = []
    for first in range(1, count + 1, chunk):
        frames = []
        for i in range(first, min(first + chunk, count + 1)):
            payload = head + str(i).encode() + b'|"}' + body
            frames.append(struct.pack(">I", len(payload)) + payload)
        chunks.append(b"".join(frames))
    return chunks


class _Pump(asyncio.Protocol):
    def __init__(self, count: int, body: bytes, ready: dict[tuple[str, str], list[bytes]]) -> None:
        self.framer = TcpFramer()
        self.count = count
        self.body = body
        self.ready = ready
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.framer.receive_data(data)
        for payload in self.framer.frames():
            header, _ = decode_header(payload)
            c = header.get("c")
            if c in ("logon", "flush", "subscribe") and "cid" in header:
                ack: dict[str, Any] = {
                    "c": "ack",
                    "cid": header["cid"],
                    "a": "processed",
                    "status": "success",
                }
                if c == "logon":
                    ack.update(
                        {"s": 0, "client_name": header.get("client_name", ""), "version": "5.3.5.0"}
                    )
                if c == "subscribe":
                    ack["sub_id"] = header.get("sub_id", header["cid"])
                assert self.transport is not None
                self.transport.write(tcp_frame(encode_header(ack)))
                if c == "subscribe":
                    asyncio.ensure_future(self.pump(str(ack["sub_id"]), str(header.get("t", "t"))))

    async def pump(self, sub_id: str, topic: str) -> None:
        assert self.transport is not None
        chunks = self.ready.get((sub_id, topic))
        if chunks is None:  # not prebuilt: built here, the client waits for it too
            chunks = _pump_chunks(self.count, self.body, sub_id, topic)
        for data in chunks:
            self.transport.write(data)
            while self.transport.get_write_buffer_size() > 8 * 1024 * 1024:
                await asyncio.sleep(0.001)


def _serve(kind: str, count: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        counter: dict[str, int] = {}
        if kind == "sink":
            server = await loop.create_server(lambda: _Sink(counter), "127.0.0.1", 0)
        else:
            body = b'{"id":1,"sym":"IBM","px":101.5}'
            ready = {(PUMP_SUB_ID, "orders"): _pump_chunks(count, body, PUMP_SUB_ID, "orders")}
            server = await loop.create_server(lambda: _Pump(count, body, ready), "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin

    asyncio.run(main())


class _ChildServer:
    """A server in a child process (so it does not share the GIL with the measured client)."""

    def __init__(self, kind: str, count: int = 0) -> None:
        self._args = [sys.executable, __file__, kind, str(count)]
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> _ChildServer:
        self._proc = subprocess.Popen(
            self._args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        self.port = int(self._proc.stdout.readline())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)

    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.port}/amps/json"


def SinkServer() -> _ChildServer:
    """A sink in a child process; use as a context manager, then ``.uri()``."""
    return _ChildServer("sink")


def PumpServer(count: int) -> _ChildServer:
    """A pumping server that answers a subscribe with ``count`` messages."""
    return _ChildServer("pump", count)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
