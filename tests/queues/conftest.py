"""Fixtures of the queue tests.

``server``: a started server (in process, real sockets) with the queue ``work`` whose
``MaxPerSubscriptionBacklog`` is the ``work_backlog`` fixture: 4, unless a module overrides
``work_backlog`` (a module defining its own ``server`` keeps it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _queue_support import start

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.queues.config import QueueConfig


@pytest.fixture
def work_backlog() -> int:
    """``MaxPerSubscriptionBacklog`` of the ``server`` fixture's queue ``work``."""
    return 4


@pytest.fixture
def server(tmp_path: Path, work_backlog: int) -> Iterator[ServerThread]:
    """A started server with the queue ``work`` (see the module docstring)."""
    cfg = QueueConfig(name="work", message_type="json", max_per_subscription_backlog=work_backlog)
    thread = start(tmp_path, cfg)
    try:
        yield thread
    finally:
        thread.stop()
