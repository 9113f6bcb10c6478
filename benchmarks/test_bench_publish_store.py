"""pytest-benchmark: the publish store's hot path, store + discard, per message.

Each round stores ``N`` messages and acks every ``ACK_EVERY``-th one with ``discard_up_to``
(the seed expects persisted acks at a ratio of 1:10 to 1:100). The per-message cost and, for
file stores, the fsyncs per 100k messages land in each benchmark's ``extra_info``::

    .venv/bin/python -m pytest benchmarks/test_bench_publish_store.py --benchmark-only \
        -p no:cacheprovider --benchmark-columns=mean,min,rounds
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient.stores.publish import FilePublishStore, MemoryPublishStore, PublishStore

PAYLOAD = (
    b'{"c":"p","t":"orders","a":"persisted","s":1795334494549000001}'
    b'{"id":1,"qty":100,"px":101.25,"sym":"MSFT"}'
)
ACK_EVERY = 10


def build(s: int) -> bytes:
    return PAYLOAD


def store_and_ack(store: PublishStore, n: int) -> None:
    put, ack = store.store, store.discard_up_to
    for _ in range(n // ACK_EVERY):
        for _ in range(ACK_EVERY):
            s = put(build)
        ack(s)


def batched_store_and_ack(store: PublishStore, n: int, batch: int) -> None:
    for _ in range(n // batch):
        store.discard_up_to(store.store_many([build] * batch)[-1])


def record(benchmark: Any, store: PublishStore, per_round: int, fsyncs_before: int = 0) -> None:
    """Put µs/message and fsyncs per 100k messages into the benchmark's extra_info."""
    assert store.unpersisted_count == 0
    if benchmark.stats is None:  # --benchmark-disable: the function ran once, unmeasured
        return
    mean = benchmark.stats.stats.mean
    benchmark.extra_info["us_per_message"] = round(mean / per_round * 1e6, 3)
    stats = store.statistics()
    if "fsyncs" in stats:
        messages = stats["stored_total"]
        fsyncs = stats["fsyncs"] - fsyncs_before
        benchmark.extra_info["fsyncs_per_100k_messages"] = round(fsyncs / messages * 100_000)


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Callable[..., FilePublishStore]]:
    opened: list[FilePublishStore] = []

    def open_store(**kwargs: Any) -> FilePublishStore:
        store = FilePublishStore(tmp_path / f"s{len(opened)}", **kwargs)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


def test_memory_store_and_discard(benchmark: Any) -> None:
    store = MemoryPublishStore()
    benchmark(store_and_ack, store, 10_000)
    record(benchmark, store, 10_000)


def test_memory_store_many_and_discard(benchmark: Any) -> None:
    store = MemoryPublishStore()
    benchmark(batched_store_and_ack, store, 10_000, 100)
    record(benchmark, store, 10_000)


@pytest.mark.parametrize("fsync", ["never", "interval"])
def test_file_store_and_discard(
    benchmark: Any, file_store: Callable[..., FilePublishStore], fsync: str
) -> None:
    store = file_store(fsync=fsync)
    benchmark(store_and_ack, store, 10_000)
    record(benchmark, store, 10_000)


@pytest.mark.parametrize("fsync", ["never", "interval", "always"])
def test_file_store_many_and_discard(
    benchmark: Any, file_store: Callable[..., FilePublishStore], fsync: str
) -> None:
    """Batches of 100 messages: one copy into the mapped segment (and, for "always", one
    fsync) per batch."""
    store = file_store(fsync=fsync)
    benchmark(batched_store_and_ack, store, 10_000, 100)
    record(benchmark, store, 10_000)


@pytest.mark.parametrize("kind", ["memory", "file-never"])
def test_store_next_to_a_syscall_thread(
    benchmark: Any, file_store: Callable[..., FilePublishStore], kind: str
) -> None:
    """store + discard while another thread makes GIL-releasing syscalls, like the HA
    client's event loop writing the socket. A store that made a syscall per message (the
    file store before it wrote through mmap) handed the GIL to that thread on every message.
    """
    store: PublishStore = MemoryPublishStore() if kind == "memory" else file_store(fsync="never")
    stop = threading.Event()
    fd = os.open(os.devnull, os.O_WRONLY)

    def writer() -> None:
        chunk = b"x" * 256
        while not stop.is_set():
            for _ in range(100):
                os.write(fd, chunk)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        benchmark(store_and_ack, store, 10_000)
    finally:
        stop.set()
        thread.join()
        os.close(fd)
    record(benchmark, store, 10_000)


def test_file_store_always_single_publisher(
    benchmark: Any, file_store: Callable[..., FilePublishStore]
) -> None:
    """One publisher thread, no batching: one fsync per message."""
    store = file_store(fsync="always")
    before = store.statistics()["fsyncs"]
    benchmark.pedantic(store_and_ack, args=(store, 500), rounds=5, iterations=1)
    record(benchmark, store, 500, before)


def test_file_store_always_four_publishers(
    benchmark: Any, file_store: Callable[..., FilePublishStore]
) -> None:
    """Four publisher threads: group commit lets concurrent stores share fsyncs."""
    store = file_store(fsync="always")
    before = store.statistics()["fsyncs"]

    def run() -> None:
        threads = [threading.Thread(target=store_and_ack, args=(store, 500)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        store.discard_up_to(store.next_sequence() - 1)

    benchmark.pedantic(run, rounds=5, iterations=1)
    record(benchmark, store, 2000, before)
