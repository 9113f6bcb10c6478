"""Helpers of the transaction-log tests: inboxes, waiting on conditions, server probes."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ServerConfig, default_config
from ampsclient_server_stub.testing import Inbox as _Inbox, wait_for

_names = itertools.count()


def unique(prefix: str) -> str:
    """A client name or topic no other test uses."""
    return f"{prefix}-{next(_names)}-{time.time_ns()}"


wait_until = wait_for
"""Poll a condition until it holds (the shared :func:`wait_for`, under its old name)."""


Inbox = _Inbox
"""A thread-safe message handler that remembers everything it was given (the shared one)."""


def journal_config(tmp_path: Path) -> ServerConfig:
    """The zero config (every topic recorded) with its data under ``tmp_path``."""
    return default_config(tcp_port=0, ws_port=0, data_dir=tmp_path)


def wait_durable(server: ServerThread, timeout: float = 10.0) -> None:
    """Wait until every record appended so far is durable and delivered to replays.

    ``on_durable`` runs on the server loop right after the group commit returns, so once the
    durable index reaches the last index *and* a call on the loop returns, every replay has
    been pumped past that point.
    """

    def done() -> bool:
        journal = server.server.journal
        assert journal is not None
        return bool(server.call(lambda: journal.durable_index >= journal.last_index))

    wait_until(done, timeout, "journal durable")
    server.call(lambda: None)
