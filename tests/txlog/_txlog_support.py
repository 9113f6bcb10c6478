"""Helpers of the transaction-log tests: inboxes, waiting on conditions, server probes."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ampsclient import Message
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ServerConfig, default_config
from ampsclient_server_stub.testing import wait_for

_names = itertools.count()


def unique(prefix: str) -> str:
    """A client name or topic no other test uses."""
    return f"{prefix}-{next(_names)}-{time.time_ns()}"


wait_until = wait_for
"""Poll a condition until it holds (the shared :func:`wait_for`, under its old name)."""


class Inbox:
    """A thread-safe message handler that remembers everything it was given."""

    def __init__(self) -> None:
        self.items: list[Message] = []
        self._cond = threading.Condition()

    def __call__(self, message: Message) -> None:
        with self._cond:
            self.items.append(message)
            self._cond.notify_all()

    def snapshot(self) -> list[Message]:
        with self._cond:
            return list(self.items)

    @property
    def messages(self) -> list[Message]:
        """The deliveries (``publish`` commands) so far."""
        return [m for m in self.snapshot() if m.get_command() == "publish"]

    def acks(self, ack_type: str) -> list[Message]:
        return [
            m for m in self.snapshot() if m.get_command() == "ack" and m.get_ack_type() == ack_type
        ]

    def wait(self, condition: Callable[[Inbox], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    kinds = [(m.get_command(), m.get_ack_type()) for m in self.items[-5:]]
                    raise AssertionError(
                        f"inbox condition not met within {timeout} s "
                        f"({len(self.items)} items, last {kinds})"
                    )
                self._cond.wait(min(left, 0.05))

    def wait_messages(self, count: int, timeout: float = 10.0) -> list[Message]:
        self.wait(lambda box: len(box.messages) >= count, timeout)
        return self.messages

    def wait_ack(self, ack_type: str, timeout: float = 10.0) -> Message:
        self.wait(lambda box: bool(box.acks(ack_type)), timeout)
        return self.acks(ack_type)[0]

    def payloads(self) -> list[Any]:
        return [m.json() for m in self.messages]


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
