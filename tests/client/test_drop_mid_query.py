"""A connection that drops while a query is still streaming ends that query at once.

The peer is a scripted AMPS server on a real socket of 127.0.0.1: it acknowledges the logon and
the ``sow`` (``processed``), sends one record, and aborts the connection before the query's
``completed`` ack, which is the one moment the reference server cannot be made to hit on demand.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from ampsclient import AsyncClient, Client
from ampsclient.exceptions import DisconnectedError
from ampsclient.protocol.framing import split_frames, tcp_frame
from ampsclient.protocol.header import decode_header, encode_header

pytestmark = pytest.mark.integration


class DropMidQuery:
    """A one-connection AMPS peer that cuts the connection after the first ``sow`` record."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            buf = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                frames: list[bytes] = []
                pos = split_frames(buf, 0, 1 << 20, frames)
                buf = buf[pos:]
                for payload in frames:
                    header, _ = decode_header(payload)
                    if self._answer(conn, dict(header)):
                        return

    def _answer(self, conn: socket.socket, header: dict[str, object]) -> bool:
        command, cid = header.get("c"), header.get("cid")
        if command == "logon":
            conn.sendall(
                tcp_frame(
                    encode_header(
                        {
                            "c": "ack",
                            "cid": cid,
                            "a": "processed",
                            "status": "success",
                            "version": "5.3.5.0",
                            "client_name": header.get("client_name"),
                        }
                    )
                )
            )
        elif command == "sow":
            qid = header.get("query_id") or cid
            ack = {"c": "ack", "cid": cid, "a": "processed", "status": "success", "query_id": qid}
            record = (
                encode_header(
                    {"c": "sow", "t": header.get("t"), "query_id": qid, "k": "1", "bm": "1|1|"}
                )
                + json.dumps({"n": 1}).encode()
            )
            conn.sendall(tcp_frame(encode_header(ack)) + tcp_frame(record))
            # abort: a reset, not an orderly close, as a dying server or network gives
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return True
        return False

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def peer() -> Iterator[DropMidQuery]:
    p = DropMidQuery()
    try:
        yield p
    finally:
        p.close()


async def test_async_sow_stream_ends_with_disconnected_error(peer: DropMidQuery) -> None:
    client = AsyncClient("drop-mid-query")
    await client.connect(f"tcp://127.0.0.1:{peer.port}/amps/json")
    await client.logon(5000)
    stream = await client.sow("orders", timeout=5000)
    got = []
    with pytest.raises(DisconnectedError):
        async with asyncio.timeout(5):
            async for message in stream:
                got.append(message.get_command())
    assert got == ["sow"]
    await client.close()


def test_sync_sow_stream_ends_with_disconnected_error(peer: DropMidQuery) -> None:
    with Client("drop-mid-query-sync") as client:
        client.connect(f"tcp://127.0.0.1:{peer.port}/amps/json")
        client.logon(5000)
        stream = client.sow("orders", timeout=5000)
        stream.timeout(5000)
        got = []
        with pytest.raises(DisconnectedError):
            for message in stream:
                assert message is not None, "the stream timed out instead of ending"
                got.append(message.get_command())
        assert got == ["sow"]
