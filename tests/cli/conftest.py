"""Fixtures for the command-line client tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import ServerProcess, server_process


@pytest.fixture
def amps(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh reference server process for the test."""
    with server_process(tmp_path / "server") as server:
        yield server


@pytest.fixture
def dead_uri() -> str:
    """A URI where nothing listens (a port bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"tcp://127.0.0.1:{port}/amps/json"
