"""Helpers of the transaction-log tests: inboxes, waiting on conditions, configurations, server
probes, clients."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from ampsclient.stores import FilePublishStore
from ampsclient.sync import HAClient
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


def txlog_xml(name: str, txlog: str, *, more: str = "") -> str:
    """An AMPS configuration ``name`` with one tcp transport (a free port of 127.0.0.1), the
    ``<TransactionLog>`` holding ``txlog``, then ``more``."""
    return f"""
<AMPSConfig>
  <Name>{name}</Name>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports>
  <TransactionLog>
    {txlog}
  </TransactionLog>
  {more}
</AMPSConfig>
"""


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


def journal_bookmarks(server: ServerThread) -> list[str]:
    """Every bookmark in the journal, in log order (read on the server thread)."""
    journal = server.server.journal
    assert journal is not None

    def read() -> list[str]:
        out: list[str] = []
        position = journal.first_index
        while batch := journal.read(position, max_records=5000):
            out.extend(r.bookmark for r in batch)
            position = batch[-1].index + 1
        return out

    return server.call(read)


def ha_client(name: str, store_dir: Path, uri: str) -> HAClient:
    """A connected, logged-on :class:`HAClient` of ``uri`` with a file publish store in
    ``store_dir``."""
    client = HAClient(name, FilePublishStore(store_dir, fsync="interval"))
    client.get_server_chooser().add(uri)
    client.set_reconnect_delay(20)
    client.connect_and_logon()
    return client
