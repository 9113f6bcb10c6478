"""Helpers of the replication tests: waiting, EPOCH replays, an exactly-once processor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ampsclient import Message
from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient.sync import HAClient
from ampsclient_server_stub.testing import Inbox, wait_for as shared_wait_for
from ampsclient_server_stub.testing.log import read_log


def wait_for(cond: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """The shared :func:`~ampsclient_server_stub.testing.wait_for`, with a 20 s default."""
    shared_wait_for(cond, timeout=timeout, what=what)


epoch_replay = read_log
"""Every ``(bookmark, body)`` of a topic in an instance's log (EPOCH to ``completed``)."""


def bookmark_of(client_name: str, seq: int) -> str:
    return f"{publisher_id_for(client_name)}|{seq}|"


class Processor:
    """A bookmark subscriber's handler: keeps each message in an :class:`Inbox`, then discards
    it in the bookmark store; duplicates (diverted by the store) land in a second inbox."""

    def __init__(self) -> None:
        self.client: HAClient | None = None
        self.inbox = Inbox()
        self.duplicates = Inbox()

    def __call__(self, message: Message) -> None:
        self.inbox(message)
        assert self.client is not None
        self.client.discard(message)

    def count(self) -> int:
        return len(self.inbox)

    def by_publisher(self) -> dict[str, list[int]]:
        """``n`` of each message processed so far, by its publisher ``p``, in arrival order."""
        out: dict[str, list[int]] = {}
        for doc in self.inbox.payloads():
            out.setdefault(str(doc["p"]), []).append(int(doc["n"]))
        return out


def start_threads(cluster: Any, *nodes: Any) -> dict[str, Any]:
    """Run cluster nodes in this process (``ServerThread`` each, same generated XML) instead
    of as child processes: faster, and the broker is reachable for white-box checks."""
    from ampsclient_server_stub import ServerThread
    from ampsclient_server_stub.config import parse_config

    threads: dict[str, Any] = {}
    for node in nodes:
        node.data_dir.mkdir(parents=True, exist_ok=True)
        config = parse_config(cluster.config_xml(node), base_dir=node.data_dir)
        threads[node.name] = ServerThread(config, fsync="never").start()
    return threads


def admin(thread: Any, cmd: str, **args: Any) -> Any:
    """A replication admin command on an in-process server."""
    return thread.call(lambda: thread.server.replication_admin(cmd, **args))


def dest_state(thread: Any, name: str) -> dict[str, Any]:
    for dest in admin(thread, "status")["destinations"]:
        if dest["name"] == name:
            return dict(dest)
    raise KeyError(name)
