"""Fixtures of the transaction-log tests (helpers live in ``_txlog_support``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _txlog_support import journal_config, unique

from ampsclient import Client
from ampsclient_server_stub import ServerThread


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: a heavier transaction-log test (still part of the default run)"
    )


@pytest.fixture
def txserver(tmp_path: Path) -> Iterator[ServerThread]:
    """A journaled :class:`ServerThread` (fsync=never: kill-safe, fast) per test."""
    with ServerThread(journal_config(tmp_path), fsync="never") as thread:
        yield thread


@pytest.fixture
def connect(txserver: ServerThread) -> Iterator[Callable[..., Client]]:
    """``connect(prefix)``: a logged-on sync :class:`Client` of ``txserver`` (closed after)."""
    clients: list[Client] = []

    def factory(prefix: str = "c", *, uri: str | None = None) -> Client:
        client = Client(unique(prefix))
        client.connect(uri or txserver.uri("tcp", "json"))
        client.logon(5000)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        try:
            client.close()
        except Exception:
            pass
