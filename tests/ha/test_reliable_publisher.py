"""examples/reliable_publisher.py killed with kill -9 at random points and rerun: the server
delivers every order exactly once, in order (checked message by message by an observer)."""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ampsclient import Client, Message
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration
EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "reliable_publisher.py"
ORDERS = {"always": 3000, "never": 50_000}
"""Per fsync policy: without fsyncs the publisher is fast, so it gets more orders to be
killed in the middle of."""


def start_publisher(uri: str, store: Path, fsync: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE),
            "--uri",
            uri,
            "--store",
            str(store),
            "--orders",
            str(ORDERS[fsync]),
            "--fsync",
            fsync,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_kill_9_and_rerun_delivers_each_order_exactly_once(tmp_path: Path, fsync: str) -> None:
    """``never``: a killed process loses nothing either (and HAClient.publish runs through the
    C speedups' PublishLane where they are built)."""
    rng = random.Random(20261122)
    received: list[int] = []
    lock = threading.Lock()

    def on_order(message: Message) -> None:
        with lock:
            received.append(json.loads(message.get_data())["order_id"])

    with ServerProcess(data_dir=tmp_path / "server") as server, Client("observer") as observer:
        observer.connect(server.uri())
        observer.logon(5000)
        observer.subscribe(on_order, "orders")
        store = tmp_path / "store"
        kills = 0
        for _ in range(3):
            proc = start_publisher(server.uri(), store, fsync)
            assert proc.stdout is not None
            # let it store a random number of orders, then kill -9 it mid-stream
            target = rng.randrange(ORDERS[fsync] // 15, ORDERS[fsync] * 5 // 6)
            for line in proc.stdout:
                if line.startswith("stored order") and int(line.split()[-1]) >= target:
                    break
                if line.startswith("done"):
                    break
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
            proc.wait(30)
        final = start_publisher(server.uri(), store, fsync)
        out, err = final.communicate(timeout=120)
        assert final.returncode == 0, err
        orders = ORDERS[fsync]
        assert f"done: {orders} orders, 0 unpersisted" in out
        assert kills >= 1
        wait_for(lambda: len(received) >= orders, timeout=20, what=f"{orders} deliveries")
        observer.flush(5000)
    with lock:
        assert len(received) == orders, f"{len(received)} deliveries"
        assert received == list(range(orders))
