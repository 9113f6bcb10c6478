"""A command the server never answers, or answers and then fails, does not wait forever.

The peer is a scripted AMPS server on a real socket of 127.0.0.1 that acknowledges the logon and
then answers a ``sow`` in one of two ways:

* ``silent``: nothing at all. The command's timeout (``Command.set_timeout``, ms) bounds the
  wait for its ``processed`` ack and raises the typed timeout error naming the command
  (the official client raises ``TimedOutException: timed out waiting for operation.``).
* ``failed-late``: a ``processed`` ack with ``status=success``, then a second ``processed``
  ack with ``status=failure``, ``reason=internal error``, and nothing else: what the
  reference server sent when its ``sow`` handler raised after acknowledging the query
  (ab35714: the aggregated query's record could not be encoded). The command timeout ends at
  the first ack (as AMPS documents: "how long the command should wait to receive a processed
  acknowledgment"), so the query's stream waited for its ``completed`` ack forever (a sync
  ``Client.execute`` hung past 100 s). The failure now ends the stream with the typed
  command error naming the server's reason. (The official client 5.3.5.14 also waits
  forever on both the ``failed-late`` answer and a ``processed`` ack followed by nothing,
  measured against this peer.)

Each case runs against the sync :class:`Client`, the :class:`AsyncClient` and the sync
:class:`HAClient`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from ampsclient import AsyncClient, Client, Command, HAClient
from ampsclient.exceptions import CommandError, TimeoutError
from ampsclient.protocol.framing import split_frames, tcp_frame
from ampsclient.protocol.header import decode_header, encode_header

pytestmark = pytest.mark.integration

TIMEOUT_MS = 1000
DEADLINE = 15.0  # seconds: far above the 1 s timeout, far below "forever"


class SowPeer:
    """A scripted AMPS peer: acks logons, answers a ``sow`` as ``mode`` says."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sows: list[dict[str, object]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.uri = f"tcp://127.0.0.1:{self.port}/amps/json"
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                frames: list[bytes] = []
                buf = buf[split_frames(buf, 0, 1 << 20, frames) :]
                for payload in frames:
                    header, _ = decode_header(payload)
                    self._answer(conn, dict(header))

    def _ack(self, conn: socket.socket, header: dict[str, object], **fields: object) -> None:
        ack = {"c": "ack", "cid": header.get("cid"), "a": "processed", **fields}
        conn.sendall(tcp_frame(encode_header(ack)))

    def _answer(self, conn: socket.socket, header: dict[str, object]) -> None:
        command = header.get("c")
        if command == "logon":
            self._ack(
                conn,
                header,
                status="success",
                version="5.3.5.0",
                client_name=header.get("client_name"),
            )
        elif command == "sow":
            self.sows.append(header)
            if self.mode == "failed-late":
                qid = header.get("query_id")
                self._ack(conn, header, status="success", query_id=qid)
                self._ack(conn, header, status="failure", reason="internal error", query_id=qid)

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self.listener.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)


@pytest.fixture(params=["silent", "failed-late"])
def peer(request: pytest.FixtureRequest) -> Iterator[SowPeer]:
    p = SowPeer(request.param)
    try:
        yield p
    finally:
        p.close()


def _query() -> Command:
    return Command("sow").set_topic("orders").set_timeout(TIMEOUT_MS)


def _check(peer: SowPeer, exc: BaseException, took: float) -> None:
    assert len(peer.sows) == 1
    if peer.mode == "silent":
        assert isinstance(exc, TimeoutError)
        assert str(exc) == "timed out waiting for the sow ack"
        assert took >= TIMEOUT_MS / 1000.0 * 0.9
    else:
        assert isinstance(exc, CommandError)
        assert exc.reason == "internal error"
        assert "internal error" in str(exc)
    assert took < DEADLINE


def _read_sync(client: Client) -> BaseException:
    """Execute the query on the sync facade and read its stream to the end; what it raised
    (a stream that times out, 15 s without a message, fails the test: it would wait forever)."""
    try:
        stream = client.execute(_query())
        stream.timeout(int(DEADLINE * 1000))
        for message in stream:
            assert message is not None, "the query's stream waited 15 s for its end"
    except Exception as exc:
        return exc
    raise AssertionError("the query ended without an error")


def test_sync_client(peer: SowPeer) -> None:
    with Client("command-timeout-sync") as client:
        client.connect(peer.uri)
        client.logon(5000)
        start = time.monotonic()
        exc = _read_sync(client)
        _check(peer, exc, time.monotonic() - start)


def test_sync_ha_client(peer: SowPeer) -> None:
    with HAClient("command-timeout-ha") as client:
        client.get_server_chooser().add(peer.uri)
        client.connect_and_logon()
        start = time.monotonic()
        exc = _read_sync(client)
        _check(peer, exc, time.monotonic() - start)


async def test_async_client(peer: SowPeer) -> None:
    client = AsyncClient("command-timeout-async")
    try:
        await client.connect(peer.uri)
        await client.logon(5000)
        start = time.monotonic()
        with pytest.raises(Exception) as info:  # checked in _check
            async with asyncio.timeout(DEADLINE):
                stream = await client.execute(_query())
                async for _message in stream:
                    pass
        assert not isinstance(info.value, asyncio.CancelledError)
        _check(peer, info.value, time.monotonic() - start)
    finally:
        await client.close()
