"""The official HAClient against our servers: failover between two independent instances."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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


OFFICIAL_PUBLISHER = """
import json, sys
import AMPS
uri, store, mode, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = AMPS.HAClient("official-killed", store)
chooser = AMPS.DefaultServerChooser()
chooser.add(uri)
client.set_server_chooser(chooser)
client.connect_and_logon()  # a rerun replays what the killed run stored
if mode == "publish":
    for n in range(total):
        client.publish("orders", json.dumps({"n": n}))
        if n % 1000 == 0:
            print("stored", n, flush=True)
client.publish_flush(60_000)
print("flushed", client.get_unpersisted_count(), flush=True)
client.close()
"""


def test_official_haclient_killed_with_kill_9_and_rerun(tmp_path: Path) -> None:
    """The official HAClient with its file store, killed with ``kill -9`` mid-stream and run
    again with the same store: our server ends with orders 0..m exactly once, in order, and
    m covers every order the killed run had stored."""
    total = 100_000
    store = str(tmp_path / "official.store")
    seen: list[int] = []
    lock = threading.Lock()

    def on(message: Message) -> None:
        with lock:
            seen.append(json.loads(message.get_data())["n"])

    def run(uri: str, mode: str) -> subprocess.Popen[str]:
        args = [sys.executable, "-c", OFFICIAL_PUBLISHER, uri, store, mode, str(total)]
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    with ServerProcess(data_dir=tmp_path / "server") as server, Client("observer") as observer:
        observer.connect(server.uri())
        observer.logon(5000)
        observer.subscribe(on, "orders")
        first = run(server.uri(), "publish")
        assert first.stdout is not None
        stored = -1
        for line in first.stdout:  # kill it once it has stored a fifth of the orders
            if line.startswith("stored"):
                stored = int(line.split()[1])
                if stored >= total // 5:
                    break
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
        assert first.returncode == -signal.SIGKILL, "the publisher finished before the kill"
        rerun = run(server.uri(), "replay")
        out, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err
        assert "flushed 0" in out
        # every order was persisted (acked after the server routed it) before the rerun
        # exited, so the observer's flush ack comes after its last delivery
        observer.flush(5000)
    with lock:
        assert seen == list(range(len(seen))), "each order once, in order"
        assert len(seen) > stored
