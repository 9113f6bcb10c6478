"""A peer that closes the connection before ``connect`` returns (a proxy whose upstream is
down, a cut): the close must not be lost. Before the fix, the close reached the client before
it had attached the transport, the client stayed "connected" to a dead socket and a logon
waited for its whole timeout (forever with none); the chaos run's publishers behind the proxy
sat 10 s per attempt and some had nothing acknowledged in 20 s."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from ampsclient import AsyncClient
from ampsclient.exceptions import AMPSError, DisconnectedError, TimeoutError as AMPSTimeoutError

pytestmark = pytest.mark.integration


class ClosingListener:
    """A real listening socket whose thread accepts each connection and closes it at once."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.set()
            conn.close()
            self.closed.set()

    def stop(self) -> None:
        self.sock.close()
        # a last connection wakes accept() so the thread sees the closed socket and ends
        with socket.socket() as poke:
            poke.settimeout(1)
            try:
                poke.connect(("127.0.0.1", self.port))
            except OSError:
                pass
        self.thread.join(5)


@pytest.fixture
def listener() -> Iterator[ClosingListener]:
    lst = ClosingListener()
    try:
        yield lst
    finally:
        lst.stop()


@pytest.mark.serial
async def test_a_close_before_connect_returns_is_not_lost(listener: ClosingListener) -> None:
    uri = f"tcp://127.0.0.1:{listener.port}/amps/json"
    for attempt in range(5):
        listener.accepted.clear()
        listener.closed.clear()
        client = AsyncClient(f"peer-closes-{attempt}")
        connecting = asyncio.ensure_future(client.connect(uri, timeout=5.0))
        # let the connect start (its socket connects at once on loopback: the listener
        # accepts), then hold the loop until the peer has closed, so that the FIN is
        # waiting before connect() can return
        deadline = time.monotonic() + 5
        while not listener.accepted.is_set():
            assert time.monotonic() < deadline, "the listener never accepted the connection"
            await asyncio.sleep(0)
        assert listener.closed.wait(5)
        t0 = time.monotonic()
        try:
            await connecting
        except DisconnectedError as exc:
            assert "closed the connection" in str(exc)
            assert not client.connected
            continue
        try:
            # the close was seen: the logon fails at once, it does not wait for its timeout
            with pytest.raises(AMPSError) as info:
                await client.logon(3000)
            assert not isinstance(info.value, AMPSTimeoutError), info.value
            assert time.monotonic() - t0 < 2.5
            assert not client.connected
        finally:
            await client.close()
