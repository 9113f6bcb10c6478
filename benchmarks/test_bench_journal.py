"""pytest-benchmark: the journal storage engine (append, group commit, seeks, reads).

Run ``.venv/bin/python -m pytest benchmarks/test_bench_journal.py --benchmark-only -s``
(add ``-k "not 1M"`` to skip the one-million-record journals, which take ~10 s to build).
Derived figures (µs per record, records/s, fsyncs per 100k) are stored in each benchmark's
``extra_info`` and printed with ``-s``.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub.engine.journal import Journal

PAYLOAD = b'{"id":12345,"sym":"ABCD","px":101.25,"qty":300,"side":"B"}'
FIELDS = {"k": "12345", "mt": "json"}
PUBS = [publisher_id_for(f"publisher-{i}") for i in range(4)]
T0 = 1_700_000_000_000_000
SIZES = [pytest.param(100_000, id="100k"), pytest.param(1_000_000, id="1M")]


def _report(benchmark: Any, **figures: float) -> None:
    benchmark.extra_info.update({k: round(v, 3) for k, v in figures.items()})
    print(" ".join(f"{k}={v:,.3f}" for k, v in figures.items()))


def _mean(benchmark: Any) -> float | None:
    stats = getattr(benchmark, "stats", None)
    return None if stats is None else float(stats.stats.mean)


def test_append(benchmark: Any, tmp_path: Path) -> None:
    """Append throughput (buffered, not durable): 10k small records per round."""
    journal = Journal(tmp_path, fsync="never")
    seq = itertools.count(1)
    per_round = 10_000

    def run() -> None:
        append = journal.append
        for _ in range(per_round):
            append(
                publisher_id=PUBS[0],
                sequence=next(seq),
                topic="orders",
                command="p",
                payload=PAYLOAD,
                fields=FIELDS,
            )

    benchmark.pedantic(run, rounds=10, iterations=1, warmup_rounds=1)
    mean = _mean(benchmark)
    if mean is not None:
        _report(benchmark, us_per_record=mean / per_round * 1e6, records_per_s=per_round / mean)
    journal.close()


def test_append_and_group_commit_100k(benchmark: Any, tmp_path: Path) -> None:
    """100k appends with fsync="always" and a sync() every 1000 appends (group commit)."""
    journal = Journal(tmp_path, fsync="always", journal_size=16 * 1024 * 1024)
    seq = itertools.count(1)
    fsyncs: list[int] = []

    def run() -> None:
        before = journal.statistics()["fsyncs"]
        append = journal.append
        for batch in range(100):
            for _ in range(1000):
                append(
                    publisher_id=PUBS[batch % 4],
                    sequence=next(seq),
                    topic="orders",
                    command="p",
                    payload=PAYLOAD,
                    fields=FIELDS,
                )
            journal.sync()
        fsyncs.append(journal.statistics()["fsyncs"] - before)

    benchmark.pedantic(run, rounds=3, iterations=1)
    mean = _mean(benchmark)
    if mean is not None:
        _report(
            benchmark,
            us_per_record=mean / 100_000 * 1e6,
            records_per_s=100_000 / mean,
            fsyncs_per_100k=sum(fsyncs) / len(fsyncs),
        )
    journal.close()


def test_sync_of_1000_records(benchmark: Any, tmp_path: Path) -> None:
    """The cost of one group commit (write + fsync) covering 1000 buffered records."""
    journal = Journal(tmp_path, fsync="always")
    seq = itertools.count(1)

    def setup() -> None:
        for _ in range(1000):
            journal.append(
                publisher_id=PUBS[0],
                sequence=next(seq),
                topic="orders",
                command="p",
                payload=PAYLOAD,
                fields=FIELDS,
            )

    benchmark.pedantic(journal.sync, setup=setup, rounds=30, iterations=1)
    mean = _mean(benchmark)
    if mean is not None:
        _report(benchmark, ms_per_sync=mean * 1e3)
    journal.close()


# --------------------------------------------------------------------------------------------
# seeks and reads over big journals (built once per size and shared)

_BUILT: dict[int, Path] = {}


def _big_journal(factory: pytest.TempPathFactory, n: int) -> Path:
    """A journal of ``n`` records: 4 interleaved publishers, 8 MiB segments, 10 µs apart."""
    if n not in _BUILT:
        path = factory.mktemp(f"journal-{n}")
        with Journal(path, fsync="never", journal_size=8 * 1024 * 1024) as journal:
            append = journal.append
            seqs = [0, 0, 0, 0]
            for i in range(n):
                p = i % 4
                seqs[p] += 1
                append(
                    publisher_id=PUBS[p],
                    sequence=seqs[p],
                    topic="orders",
                    command="p",
                    payload=PAYLOAD,
                    fields=FIELDS,
                    timestamp=T0 + i * 10,
                )
        _BUILT[n] = path
    return _BUILT[n]


@pytest.fixture(params=SIZES)
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Journal:
    journal = Journal(_big_journal(tmp_path_factory, request.param), fsync="never")
    request.addfinalizer(journal.close)
    return journal


def test_find_bookmark(benchmark: Any, big: Journal) -> None:
    """Latency of find_bookmark for random existing bookmarks anywhere in the log."""
    rng = random.Random(1)
    n = big.last_index
    probes = [(PUBS[i % 4], i // 4 + 1) for i in (rng.randrange(n) for _ in range(1000))]

    def run() -> int:
        found = 0
        for pid, seq in probes:
            found += big.find_bookmark(pid, seq) is not None
        return found

    assert benchmark(run) == len(probes)
    mean = _mean(benchmark)
    if mean is not None:
        _report(
            benchmark,
            us_per_seek=mean / len(probes) * 1e6,
            records=n,
            segments=len(big.segments()),
        )


def test_find_time(benchmark: Any, big: Journal) -> None:
    """Latency of find_time for random times anywhere in the log."""
    rng = random.Random(2)
    n = big.last_index
    probes = [T0 + rng.randrange(n * 10) for _ in range(1000)]

    def run() -> int:
        return sum(big.find_time(t) for t in probes)

    assert benchmark(run) > 0
    mean = _mean(benchmark)
    if mean is not None:
        _report(benchmark, us_per_seek=mean / len(probes) * 1e6, records=n)


def test_read_from_start(benchmark: Any, big: Journal) -> None:
    """Read throughput: every record from index 1, in batches of 1000."""
    n = big.last_index

    def run() -> int:
        total = 0
        index = 1
        while batch := big.read(index, max_records=1000):
            total += len(batch)
            index = batch[-1].index + 1
        return total

    assert benchmark.pedantic(run, rounds=2, iterations=1) == n
    mean = _mean(benchmark)
    if mean is not None:
        _report(benchmark, records_per_s=n / mean, us_per_record=mean / n * 1e6)
