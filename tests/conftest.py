"""Shared fixtures: a fresh reference server per test, on free ports of 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config


@pytest.fixture
def server() -> Iterator[ServerThread]:
    """A :class:`ServerThread` on ports 0 (tcp and ws), stopped after the test."""
    thread = ServerThread(default_config(tcp_port=0, ws_port=0))
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
def server_uri(server: ServerThread) -> str:
    """``tcp://127.0.0.1:<port>/amps/json`` of the ``server`` fixture."""
    return server.uri("tcp", "json")
