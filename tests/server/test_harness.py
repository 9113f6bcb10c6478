"""free_port: ports from below the kernel's ephemeral range, never handed out twice, and
under pytest-xdist from a slice of that range of the worker's own."""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ampsclient_server_stub.harness import free_port, port_range

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
linux_only = pytest.mark.skipif(
    not RANGE.exists(), reason="the ephemeral range is known on Linux only"
)


def test_ports_are_distinct_and_bindable() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


@linux_only
def test_ports_lie_below_the_ephemeral_range() -> None:
    start = int(RANGE.read_text().split()[0])
    low, high = port_range()
    assert start - 10000 <= low < high <= start
    for _ in range(50):
        port = free_port()
        assert low <= port < high, (port, low, high)


@linux_only
def test_each_xdist_worker_has_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    start = int(RANGE.read_text().split()[0])
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert port_range() == (start - 10000, start)  # not under xdist: the whole range
    slices = []
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        low, high = port_range()
        assert start - 10000 <= low < high <= start
        for _ in range(20):
            assert low <= free_port() < high
        slices.append((low, high))
    slices.sort()
    for (_, high), (low, _) in itertools.pairwise(slices):
        assert high <= low, slices  # disjoint


@linux_only
def test_the_slice_is_taken_from_the_environment_in_child_processes() -> None:
    # servers and CLI runs a worker starts inherit its PYTEST_XDIST_* variables
    code = "from ampsclient_server_stub.harness import port_range; print(*port_range())"
    slices = []
    for index in range(2):
        env = {"PYTEST_XDIST_WORKER": f"gw{index}", "PYTEST_XDIST_WORKER_COUNT": "2"}
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env | {"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        low, high = map(int, done.stdout.split())
        slices.append((low, high))
    assert slices[0][1] <= slices[1][0], slices


@pytest.mark.parametrize("worker,count", [("gw5", "2"), ("master", "2"), ("gw0", "x")])
def test_an_unusable_worker_id_falls_back_to_the_whole_range(
    monkeypatch: pytest.MonkeyPatch, worker: str, count: str
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    whole = port_range()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert port_range() == whole
