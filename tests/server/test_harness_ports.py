"""free_port: ports from below the kernel's ephemeral range, never handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ampsclient_server_stub.harness import free_port

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def test_ports_are_distinct_and_bindable() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


@pytest.mark.skipif(not RANGE.exists(), reason="the ephemeral range is known on Linux only")
def test_ports_lie_below_the_ephemeral_range() -> None:
    start = int(RANGE.read_text().split()[0])
    for _ in range(50):
        port = free_port()
        assert start - 10000 <= port < start, port
