"""An auto-ack ``MessageStream`` on a queue whose subscription backlog is 1: the stream acks
the message the application holds as soon as the application asks for the next one, before it
waits (the next message is only delivered once that ack is in). Run with our client and, where
installed, with the official one (the behaviour matched)."""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

COUNT = 12


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    """A queue ``jobs``: one message leased per subscription, leases of 60 s."""
    queue = QueueConfig(
        name="jobs", message_type="json", max_per_subscription_backlog=1, lease_period=60.0
    )
    config = dataclasses.replace(
        default_config(tcp_port=0, ws_port=0, data_dir=tmp_path), queues=(queue,)
    )
    thread = ServerThread(config, fsync="never").start()
    try:
        yield thread
    finally:
        thread.stop()


def stats(server: ServerThread) -> dict[str, Any]:
    return server.call(lambda: server.broker.queues.statistics()["jobs"])  # type: ignore[union-attr]


def module(name: str) -> Any:
    if name == "AMPS":
        return pytest.importorskip("AMPS")
    return importlib.import_module(name)


@pytest.mark.parametrize("name", ["ampsclient", "AMPS"])
def test_auto_ack_stream_acks_when_the_next_message_is_asked_for(
    server: ServerThread, name: str
) -> None:
    amps = module(name)
    uri = server.uri("tcp", "json")
    publisher = amps.Client(f"{name}-pub")
    publisher.connect(uri)
    publisher.logon()
    for n in range(COUNT):
        publisher.publish("jobs", json.dumps({"n": n}))
    publisher.publish_flush()
    consumer = amps.Client(f"{name}-con")
    consumer.connect(uri)
    consumer.logon()
    consumer.set_auto_ack(True)
    consumer.set_ack_batch_size(10)
    consumer.set_ack_timeout(60000)  # no idle ack within the test: only the next() ack
    try:
        command = amps.Command("subscribe").set_topic("jobs").set_options("max_backlog=1")
        stream = consumer.execute(command).timeout(5000)
        seen: list[int] = []
        for message in stream:
            assert message is not None, f"stalled after {seen}"  # before: stalled after [0]
            seen.append(json.loads(message.get_data())["n"])
            if len(seen) == COUNT:
                break
        assert seen == list(range(COUNT))  # in order, none delivered twice
        wait_for(lambda: stats(server)["acked"] == COUNT - 1, 10, "all but the held one acked")
        stream.close()
    finally:
        consumer.close()
        publisher.close()
