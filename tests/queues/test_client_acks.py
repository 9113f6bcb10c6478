"""This project's client acking queue messages of the reference server: ack batches capped at
the backlog the subscribe ack reports, the stream forms (``await message.ack()``,
``message.processing()``, stream auto-ack on the ack timeout)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _queue_support import publish, start

import ampsclient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    cfg = QueueConfig(name="work", message_type="json", max_per_subscription_backlog=100)
    thread = start(tmp_path, cfg)
    try:
        yield thread
    finally:
        thread.stop()


def stats(server: ServerThread) -> dict[str, Any]:
    return server.call(lambda: server.broker.queues.statistics()["work"])  # type: ignore[union-attr]


def connect(server: ServerThread, name: str) -> ampsclient.Client:
    client = ampsclient.Client(name)
    client.connect(server.uri("tcp", "json"))
    client.logon()
    return client


def test_batch_capped_at_reported_backlog(server: ServerThread) -> None:
    """Batch 300 against a backlog of 100: with a 60 s ack timer, only the cap lets the
    consumer go on (uncapped, the batch never fills and the queue stalls)."""
    seen: list[int] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        with lock:
            seen.append(json.loads(message.data)["n"])

    client = connect(server, "ours-cap")
    client.set_auto_ack(True)
    client.set_ack_batch_size(300)
    client.set_ack_timeout(60_000)
    try:
        command = ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=300")
        client.execute_async(command, on_message)
        assert client.queue_acks.batch_limit("work") == 100  # the server granted 100, not 300
        publish(server, "work", [{"n": i} for i in range(1000)])
        wait_for(lambda: stats(server)["acked"] == 1000, 20, "1000 acked before the timer")
        with lock:
            assert seen == list(range(1000))  # each once, in order: nothing cancelled
        assert client.queue_acks.pending == 0
    finally:
        client.close()


def test_cap_forgotten_at_unsubscribe(server: ServerThread) -> None:
    client = connect(server, "ours-cap-unsub")
    client.set_ack_batch_size(300)
    try:
        sub_id = client.execute_async(
            ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=500"),
            lambda m: None,
        )
        assert client.queue_acks.batch_limit("work") == 100
        client.unsubscribe(sub_id)
        assert client.queue_acks.batch_limit("work") == 300
    finally:
        client.close()
