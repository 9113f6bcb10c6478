"""The official HAClient against our servers: failover between two independent instances."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ampsclient import Client, Message
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for

AMPS = pytest.importorskip("AMPS")
pytestmark = [pytest.mark.interop, pytest.mark.integration]


def test_official_haclient_fails_over_and_replays(tmp_path: Path) -> None:
    a = ServerProcess(data_dir=tmp_path / "a", name="A")
    b = ServerProcess(data_dir=tmp_path / "b", name="B")
    with a, b, Client("observer-a") as obs_a, Client("observer-b") as obs_b:
        seen: dict[str, list[int]] = {"a": [], "b": []}
        lock = threading.Lock()

        def collector(key: str) -> Callable[[Message], None]:
            def on(message: Message) -> None:
                with lock:
                    seen[key].append(json.loads(message.get_data())["n"])

            return on

        obs_a.connect(a.uri())
        obs_a.logon(5000)
        obs_a.subscribe(collector("a"), "orders")
        obs_b.connect(b.uri())
        obs_b.logon(5000)
        obs_b.subscribe(collector("b"), "orders")

        client = AMPS.HAClient("official-ha", str(tmp_path / "official.store"))
        chooser = AMPS.DefaultServerChooser()
        chooser.add(a.uri())
        chooser.add(b.uri())
        client.set_server_chooser(chooser)
        client.connect_and_logon()
        try:
            for n in range(500):
                client.publish("orders", json.dumps({"n": n}))
            client.publish_flush(10_000)
            a.kill()
            for n in range(500, 1000):
                client.publish("orders", json.dumps({"n": n}))
            client.publish_flush(30_000)
            assert client.get_unpersisted_count() == 0
        finally:
            client.close()
        wait_for(lambda: len(seen["b"]) >= 500, timeout=20.0, what="the messages on B")
        with lock:
            # everything persisted by A before it died was delivered there; the rest on B,
            # each exactly once and in order
            assert seen["a"][:500] == list(range(500))
            assert seen["b"] == list(range(500, 1000))
