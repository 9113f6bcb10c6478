"""Closing a synchronous client on a WebSocket ends its connection at once: the client's
loop thread stops right after ``close()``, and the socket must not outlive it (the server
would hold the connection until its close timeout, 2 s, ran out)."""

from __future__ import annotations

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

SERVER_CLOSE_TIMEOUT = 2.0  # the reference server's WebSocket close_timeout


def open_connections(server: ServerThread) -> int:
    broker = server.server.broker
    assert broker is not None
    return server.call(lambda: len(broker.connections))


def test_a_closed_ws_client_leaves_no_connection_behind(server: ServerThread) -> None:
    # the socket used to be left to the garbage collector: about one close in three kept the
    # server's side open until its close timeout; ten closes in a row show it
    for i in range(10):
        with Client(f"ws-close-{i}") as client:
            client.connect(server.uri("ws", "json"))
            client.logon(5000)
            assert open_connections(server) == 1
        wait_for(
            lambda: open_connections(server) == 0,
            timeout=SERVER_CLOSE_TIMEOUT * 0.75,
            what=f"the server to see close {i} end the connection",
        )
