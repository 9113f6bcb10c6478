"""A queue's intake takes a journaled run of plain publishes as ``(sequence, topic, body)``
(the intake connection's ``run_sink``), not as delivery frames it would read back: the C
``run_pairs`` against its twin, against what ``plain_run`` reads from the same run's frames,
and through a server, where every queued message carries the bookmark the journal gave it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from _queue_support import IMPLS, Consumer, connect, implementation, needs_c, start, stats

from ampsclient_server_stub import accel
from ampsclient_server_stub.engine.wire import delivery_frames
from ampsclient_server_stub.queues import intake, speedups
from ampsclient_server_stub.queues.config import QueueConfig


@pytest.mark.parametrize("name", IMPLS)
def test_run_pairs_makes_each_bookmark_from_the_prefix_and_sequence(name: str) -> None:
    fn = implementation(name, speedups.run_pairs, intake.run_pairs)
    batch = [(1, "orders", b'{"id":1}'), (10**15, "orders", b""), (2**63 - 1, "x", b'"}')]
    assert fn("42|", batch) == [
        ("42|1|", b'{"id":1}'),
        (f"42|{10**15}|", b""),
        (f"42|{2**63 - 1}|", b'"}'),
    ]
    assert fn("42|", []) == []
    assert fn("", [(0, "t", b"b")]) == [("0|", b"b")]
    body = b"a body"
    assert fn("7|", [(3, "t", body)])[0][1] is body  # the body is not copied
    with pytest.raises(ValueError, match="ASCII"):
        fn("ü|", [(1, "t", b"")])


@pytest.mark.parametrize("name", IMPLS)
def test_run_pairs_reads_what_plain_run_reads_from_the_frames(name: str) -> None:
    """The pairs are exactly what the intake read from the run's delivery frames before."""
    rng = random.Random(11)
    frames_of = accel.delivery_frames or delivery_frames
    plain_run = speedups.plain_run or intake.plain_run
    for _ in range(300):
        pid = rng.randint(1, 2**63 - 1)
        batch = [
            (rng.randint(1, 2**63 - 1), "orders", rng.randbytes(rng.randint(0, 20)))
            for _ in range(rng.randint(0, 8))
        ]
        head = f'{{"c":"p","t":"orders","sids":"queue-intake-0","bm":"{pid}|'.encode()
        end, read = plain_run(frames_of(head, batch), 0, False)
        assert end == len(batch)
        assert implementation(name, speedups.run_pairs, intake.run_pairs)(f"{pid}|", batch) == read


@needs_c
def test_c_and_python_run_pairs_agree_on_random_runs() -> None:
    rng = random.Random(12)
    assert speedups.run_pairs is not None
    for _ in range(2000):
        prefix = rng.choice(["", "1|", f"{rng.randint(0, 2**63 - 1)}|", "abc"])
        batch = [
            (rng.randint(-(2**63), 2**63 - 1), rng.choice(["t", "ü"]), rng.randbytes(3))
            for _ in range(rng.randint(0, 5))
        ]
        assert speedups.run_pairs(prefix, batch) == intake.run_pairs(prefix, batch)


@needs_c
def test_c_run_pairs_refuses_what_is_not_a_run() -> None:
    assert speedups.run_pairs is not None
    bads: list[list[Any]] = [[(1, "t")], [(1, "t", "text")], [("1", "t", b"")], [[1, "t", b""]]]
    for bad in bads:
        with pytest.raises(TypeError, match="run_pairs"):
            speedups.run_pairs("1|", bad)
    with pytest.raises(OverflowError):
        speedups.run_pairs("1|", [(2**64, "t", b"")])


@pytest.mark.parametrize("queue_filter", [None, "/id >= 0"])
def test_queued_messages_carry_the_journal_bookmarks(
    tmp_path: Path, queue_filter: str | None
) -> None:
    """A publisher's run reaches the queue through the run sink (no ``Filter``) or as frames
    (a ``Filter``: the one-by-one path); either way each queued message's bookmark is the one
    a plain subscriber to the underlying topic sees, in the same order."""
    n = 3000
    server = start(
        tmp_path,
        QueueConfig(
            name="work",
            message_type="json",
            underlying=("orders",),
            filter=queue_filter,
            max_per_subscription_backlog=n,
        ),
    )
    try:
        engine = server.broker.queues
        assert engine is not None
        paths = {"run": 0, "frames": 0}
        take_run, take_frames = engine.intake_run, engine.intake

        def spy_run(queue: Any, pid: int, batch: list[tuple[int, str, bytes]]) -> None:
            paths["run"] += len(batch)
            take_run(queue, pid, batch)

        def spy_frames(queue: Any, frames: Any) -> None:
            paths["frames"] += len(frames)
            take_frames(queue, frames)

        server.call(lambda: setattr(engine, "intake_run", spy_run))
        server.call(lambda: setattr(engine, "intake", spy_frames))
        plain = Consumer(server, "plain")
        plain.subscribe("orders")
        worker = Consumer(server, "worker")
        worker.subscribe("work", o=f"max_backlog={n}")
        pub = connect(server, "pub")
        try:
            for i in range(n):
                pub.publish("orders", f'{{"id":{i}}}')
            pub.flush()
        finally:
            pub.close()
        queued = worker.wait_deliveries(n)
        seen = plain.wait_deliveries(n)
        assert [hdr["bm"] for hdr, _ in queued] == [hdr["bm"] for hdr, _ in seen]
        assert [body for _, body in queued] == [b'{"id":%d}' % i for i in range(n)]
        assert paths["run"] + paths["frames"] == n
        if queue_filter is None:
            assert paths["run"] > 0  # the publisher's runs took the sink
        else:
            assert paths["run"] == 0
        assert stats(server)["backlog"] == n
        worker.ack("work", ",".join(hdr["bm"] for hdr, _ in queued), a="processed")
        assert worker.sync() == []
        assert stats(server)["messages"] == 0  # the bookmarks acknowledged every message
        plain.close()
        worker.close()
    finally:
        server.stop()
