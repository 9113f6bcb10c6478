"""Load: 50 concurrent clients publish and subscribe for 10 s against a server process; the
server stays responsive (heartbeats keep coming, flush round trips stay short) and its RSS
stays bounded. Figures are printed (see docs/reliability.md)."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from pathlib import Path

import pytest

from ampsclient import AsyncClient, Client, Message
from ampsclient_server_stub.harness import ServerProcess
from tests.chaos.run import rss_mb

pytestmark = pytest.mark.integration

CLIENTS = 50
GROUPS = 5
SECONDS = 10.0
BURST = 5
"""Messages each client publishes every 100 ms."""
RSS_LIMIT_MB = 300.0


@pytest.mark.serial
@pytest.mark.timeout(120)
async def test_fifty_clients_server_stays_responsive(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", extra_args=["--fsync", "interval"])
    await asyncio.to_thread(server.start)
    try:
        uri = server.uri()
        received = [0] * CLIENTS
        published = [0] * CLIENTS
        clients: list[AsyncClient] = []
        for i in range(CLIENTS):
            c = AsyncClient(f"load-{i}")
            await c.connect(uri, timeout=10)
            await c.logon(10_000)

            def handler(message: Message, i: int = i) -> None:
                received[i] += 1

            await c.subscribe(handler, f"load-{i % GROUPS}")
            clients.append(c)

        # the monitor runs on its own loop thread, away from the load's busy loop
        monitor = Client("monitor")
        await asyncio.to_thread(monitor.connect, uri, timeout=10)
        beats: list[float] = []
        monitor.set_global_command_type_message_handler(
            "heartbeat", lambda m: beats.append(time.monotonic())
        )
        monitor.set_heartbeat(0.5, 10.0)
        await asyncio.to_thread(monitor.logon, 10_000)

        stop = time.monotonic() + SECONDS
        body = json.dumps({"pad": "x" * 200})

        async def publisher(i: int) -> None:
            rng = random.Random(i)
            c = clients[i]
            while time.monotonic() < stop:
                for _ in range(BURST):
                    c.publish(f"load-{rng.randrange(GROUPS)}", body)
                published[i] += BURST
                await asyncio.sleep(0.1)

        rss: list[float] = []
        flush_ms: list[float] = []

        async def watch() -> None:
            while time.monotonic() < stop:
                t0 = time.monotonic()
                await asyncio.to_thread(monitor.flush, 10_000)
                flush_ms.append((time.monotonic() - t0) * 1000)
                rss.append(rss_mb(server.pid))
                await asyncio.sleep(0.25)

        t_start = time.monotonic()
        await asyncio.gather(*(publisher(i) for i in range(CLIENTS)), watch())
        for c in clients:
            await c.flush(30_000)
        elapsed = time.monotonic() - t_start
        gaps = [b - a for a, b in itertools.pairwise(beats)]
        total_pub = sum(published)
        expected = total_pub * (CLIENTS // GROUPS)
        deadline = time.monotonic() + 30
        while sum(received) < expected and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        figures = {
            "clients": CLIENTS,
            "seconds": round(elapsed, 1),
            "published": total_pub,
            "delivered": sum(received),
            "expected_deliveries": expected,
            "heartbeats": len(beats),
            "max_heartbeat_gap_s": round(max(gaps, default=0.0), 2),
            "max_flush_ms": round(max(flush_ms, default=0.0), 1),
            "max_rss_mb": round(max(rss, default=0.0), 1),
        }
        print("load figures:", json.dumps(figures))
        assert sum(received) == expected
        assert len(beats) >= SECONDS / 0.5 * 0.6
        assert max(gaps) < 2.0, "the server stopped sending heartbeats"
        assert max(flush_ms) < 3000
        assert max(rss) < RSS_LIMIT_MB
        for c in clients:
            await c.close()
        await asyncio.to_thread(monitor.close)
    finally:
        await asyncio.to_thread(server.stop)
