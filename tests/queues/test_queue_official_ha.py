"""The official AMPS HAClient consuming a queue (auto-ack batches, acks through its publish
store with persisted acks) while the reference server is killed with ``kill -9`` and
restarted: it reconnects, re-subscribes, and every message is processed; only messages that
were leased and unacknowledged at the kill come again (at most the backlog)."""

from __future__ import annotations

import collections
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from _queue_support import QUEUE_XML, publish_durably

from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for

AMPS: Any = pytest.importorskip("AMPS")

pytestmark = [pytest.mark.interop, pytest.mark.integration]


def test_official_haclient_queue_consumer_survives_kill_9(tmp_path: Path) -> None:
    config = tmp_path / "queues.xml"
    config.write_text(QUEUE_XML)
    server = ServerProcess(data_dir=tmp_path / "data", config=config, name="Q")
    server.start()
    seen: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        if message.get_command() in ("p", "publish"):
            with lock:
                seen[json.loads(message.get_data())["n"]] += 1

    client = AMPS.HAClient("official-queue-ha")
    try:
        chooser = AMPS.DefaultServerChooser()
        chooser.add(server.uri())
        client.set_server_chooser(chooser)
        client.connect_and_logon()
        client.set_auto_ack(True)
        client.set_ack_batch_size(5)
        client.set_ack_timeout(100)
        command = AMPS.Command("subscribe").set_topic("work").set_options("max_backlog=10")
        client.execute_async(command, on_message)
        publish_durably(server, 0, 100)
        wait_for(lambda: len(seen) >= 40, 20, "40 orders processed")
        server.kill()  # kill -9 with leases outstanding and acks in flight
        server.start()
        publish_durably(server, 100, 100)
        wait_for(lambda: len(seen) == 200, 60, "all 200 orders after the restart")
    finally:
        client.close()
        server.kill()
    again = {n: c for n, c in seen.items() if c > 1}
    assert sorted(seen) == list(range(200))
    assert sum(c - 1 for c in again.values()) <= 10, again  # at most the leased ones
