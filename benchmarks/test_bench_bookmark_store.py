"""pytest-benchmark: ``MemoryBookmarkStore.log`` + ``discard_message`` per message.

Target: < 2 µs per message (log + discard), with no adapter and with a conflating adapter in
front of an in-memory one. Each round logs and discards ``N`` fresh messages of one
subscription in order (the common case: one publisher, messages processed as they arrive);
``extra_info["us_per_message"]`` has the per-message figure. The assertions use a loose bound
(4x the target) so that a slow or busy machine does not fail the run; the printed figure is
what to compare with the target.

Run: ``.venv/bin/python -m pytest -p no:cacheprovider benchmarks/test_bench_bookmark_store.py``
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ampsclient import Message
from ampsclient.stores import (
    ConflatingRecoveryPointAdapter,
    MemoryBookmarkStore,
    RecoveryPoint,
)

N = 20_000
TARGET_US = 2.0
PUBLISHER = "10620414156524534001"


class DictAdapter:
    """An in-memory recovery point adapter (a plain Python class)."""

    def __init__(self) -> None:
        self.points: dict[str, str] = {}

    def update(self, point: RecoveryPoint) -> None:
        self.points[point.sub_id] = point.bookmark

    def purge(self, sub_id: str | None = None) -> None:
        self.points.clear()

    def close(self) -> None:
        pass

    def __iter__(self) -> Iterator[RecoveryPoint]:
        return iter([])


def messages(n: int = N, publishers: int = 1) -> list[Message]:
    """Deliveries as the client routes them (``sub_id`` known, the bookmark read by the
    receive fast path)."""
    batch = [
        Message(
            header={
                "c": "p",
                "t": "orders",
                "bm": f"{PUBLISHER}{i % publishers}|{i}|",
                "sub_id": "orders-1",
            },
            data=b'{"id":1}',
            sub_id="orders-1",
        )
        for i in range(1, n + 1)
    ]
    for m in batch:
        m._bm = m.header["bm"]
    return batch


STORES: dict[str, Callable[[], MemoryBookmarkStore]] = {
    "no-adapter": MemoryBookmarkStore,
    "dict-adapter": lambda: MemoryBookmarkStore(DictAdapter()),
    "conflating+dict": lambda: MemoryBookmarkStore(ConflatingRecoveryPointAdapter(DictAdapter())),
}


def run(store: MemoryBookmarkStore, batch: list[Message], fast: bool) -> MemoryBookmarkStore:
    # "fast": what the client's receive path and HAClient.discard call (the C speedups' lane
    # when built, docs/speedups.md); else the public methods
    log = store._log_fast if fast else store.log
    discard = store._discard_fast if fast else store.discard_message
    for message in batch:
        log(message)
        discard(message)
    return store


@pytest.mark.parametrize("path", ["methods", "fast"])
@pytest.mark.parametrize("kind", list(STORES))
@pytest.mark.parametrize("publishers", [1, 3])
def test_log_and_discard(benchmark: Any, kind: str, publishers: int, path: str) -> None:
    opened: list[MemoryBookmarkStore] = []

    def setup() -> tuple[tuple[MemoryBookmarkStore, list[Message], bool], dict[str, Any]]:
        store = STORES[kind]()
        opened.append(store)
        return (store, messages(N, publishers), path == "fast"), {}

    store = benchmark.pedantic(run, setup=setup, rounds=15, iterations=1)
    assert store.get_most_recent("orders-1").endswith(f"|{N}|") or publishers > 1
    per_message = benchmark.stats.stats.min / N * 1e6
    benchmark.extra_info["us_per_message"] = round(per_message, 3)
    print(f"\n{kind} publishers={publishers} {path}: {per_message:.3f} us per message")
    for s in opened:
        s.close()
    assert per_message < 4 * TARGET_US
