"""The scale benchmark's clients (``benchmarks/scale.py``) in a short form, so it cannot rot:
300 connected clients (280 subscribers over the 200 topics, 20 publishers) against one
reference server (in this process, the suite's ``server`` fixture; the benchmark runs it as a
process of its own); every subscriber gets its topic's messages exactly once and in
order, checked message by message."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PER_TOPIC = 5


def _scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "benchmarks" / "scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("scale_bench", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(60)
def test_300_clients_get_every_message_once_in_order(server_uri: str) -> None:
    scale = _scale()
    scale.raise_nofile(300 * 2 + 256)  # both ends of 300 connections live in this process
    asyncio.run(asyncio.wait_for(_run(scale, server_uri), 45))


async def _run(scale: ModuleType, uri: str) -> None:
    subs = 300 - scale.PUBLISHERS
    checkers = [scale.Checker(scale.topic_name(i % scale.TOPICS), got=[]) for i in range(subs)]
    clients = await scale.connect_all(uri, [f"sub-{i}" for i in range(subs)])
    publishers = await scale.connect_all(uri, [f"pub-{p}" for p in range(scale.PUBLISHERS)])
    try:
        await scale.subscribe_all(clients, checkers)
        last = await scale.publish(publishers, rate=20_000, per_topic=PER_TOPIC)
        assert set(last.values()) == {PER_TOPIC}
        # every subscriber's whole sequence, in order, once: wait for it (with a deadline)
        done = await scale.wait_for(lambda: all(c.complete(PER_TOPIC) for c in checkers), 30)
        expected = list(range(1, PER_TOPIC + 1))
        wrong = {i: c.got for i, c in enumerate(checkers) if c.got != expected}
        assert done and not wrong, f"{len(wrong)} subscribers differ: {list(wrong.items())[:3]}"
        # nothing more arrives: a marker message on every topic is the next one each gets
        for j in range(scale.TOPICS):
            publishers[j % scale.PUBLISHERS].publish(
                scale.topic_name(j), f'{{"k":{PER_TOPIC + 1},"t":0}}'
            )
        await asyncio.gather(*(p.flush(30_000) for p in publishers))
        assert await scale.wait_for(lambda: all(c.last == PER_TOPIC + 1 for c in checkers), 30)
        assert all(c.got == [*expected, PER_TOPIC + 1] for c in checkers)
        assert sum(c.duplicated + c.out_of_order for c in checkers) == 0
    finally:
        await scale.close_all(clients + publishers)
