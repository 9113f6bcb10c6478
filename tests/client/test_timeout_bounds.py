"""Every timeout a user gives a public call of the plain clients is the total bound of that
call (issue 31, "Honest answers"): against a server process frozen with SIGSTOP (the socket
stays open, nothing answers), each call returns within its timeout plus a margin, with the
typed :class:`~ampsclient.exceptions.TimeoutError`. A correctness bound, not a benchmark."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import AsyncClient, Client, Command
from ampsclient.exceptions import TimeoutError
from ampsclient_server_stub.harness import ServerProcess

pytestmark = pytest.mark.integration

TIMEOUT_MS = 1000
MARGIN = 0.5  # seconds of slack on a 2-core machine shared by other work


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Client]]:
    """A server process and a client logged on to it; then the server is SIGSTOPped."""
    server = ServerProcess(data_dir=Path(tmp_path_factory.mktemp("frozen")))
    server.start()
    client = Client("bounds")
    try:
        client.connect(server.uri())
        client.logon(5000)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            yield server, client
        finally:
            os.kill(server.pid, signal.SIGCONT)
    finally:
        client.close()
        server.stop()


def _bounded(call: Callable[[], Any], timeout_ms: int = TIMEOUT_MS) -> float:
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        call()
    took = time.monotonic() - start
    assert took <= timeout_ms / 1000.0 + MARGIN, f"{took:.2f} s for a {timeout_ms} ms timeout"
    return took


CALLS: dict[str, Callable[[Client], Any]] = {
    "flush": lambda c: c.flush(TIMEOUT_MS),
    "publish_flush": lambda c: c.publish_flush(TIMEOUT_MS),
    "sow": lambda c: list(c.sow("bounds", timeout=TIMEOUT_MS)),
    "sow_and_subscribe": lambda c: c.sow_and_subscribe("bounds", timeout=TIMEOUT_MS),
    "subscribe": lambda c: c.subscribe("bounds", timeout=TIMEOUT_MS),
    "bookmark_subscribe": lambda c: c.bookmark_subscribe("bounds", "0", timeout=TIMEOUT_MS),
    "sow_delete": lambda c: c.sow_delete("bounds", "/id = 1", timeout=TIMEOUT_MS),
    "execute": lambda c: c.execute(Command("sow").set_topic("bounds").set_timeout(TIMEOUT_MS)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_call_on_a_frozen_server_is_bounded(
    frozen: tuple[ServerProcess, Client], name: str
) -> None:
    _server, client = frozen
    _bounded(lambda: CALLS[name](client))


def test_logon_and_connect_and_logon_are_bounded(frozen: tuple[ServerProcess, Client]) -> None:
    """The kernel still accepts connections for the stopped process: the logon ack never
    comes, and the logon's timeout is its bound."""
    server, _client = frozen
    with Client("bounds-logon") as late:
        late.connect(server.uri(), timeout=TIMEOUT_MS / 1000.0)
        _bounded(lambda: late.logon(TIMEOUT_MS))
    with Client("bounds-cal") as other:
        _bounded(lambda: other.connect_and_logon(server.uri(), timeout=TIMEOUT_MS))


async def test_async_client_calls_are_bounded(frozen: tuple[ServerProcess, Client]) -> None:
    server, _client = frozen
    async with AsyncClient("bounds-async") as client:
        await client.connect(server.uri())
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.logon(TIMEOUT_MS)
        assert time.monotonic() - start <= TIMEOUT_MS / 1000.0 + MARGIN
