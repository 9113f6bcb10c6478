"""With ``fsync="never"`` the group commit has nothing to wait for: it writes the journal's
buffer on the loop (``Journal.write_through``) and no journal thread is started, while
persisted acks and bookmark replays work as with the other policies."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ampsclient import Client, HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


def journal_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("journal")}


def test_never_commits_on_the_loop_and_acks_and_replays(tmp_path: Path) -> None:
    before = journal_threads()
    config = default_config(tcp_port=0, ws_port=0, data_dir=tmp_path)
    server = ServerThread(config, fsync="never").start()
    try:
        with HAClient("never-pub") as ha:
            ha.get_server_chooser().add(server.uri())
            ha.connect_and_logon()
            for n in range(2000):
                ha.publish("never", f'{{"n":{n}}}')
            ha.publish_flush(10_000)  # every persisted ack came
            assert ha.get_unpersisted_count() == 0
        got: list[int] = []
        with Client("never-replay") as sub:
            sub.connect(server.uri())
            sub.logon(5000)
            sub.bookmark_subscribe(lambda m: got.append(m.json()["n"]), "never", "0")
            wait_for(lambda: len(got) == 2000, what="the replay")
        assert got == list(range(2000))
        assert journal_threads() - before == set()  # (earlier tests' threads may end meanwhile)
    finally:
        server.stop()
