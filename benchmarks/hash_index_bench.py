"""A SOW lookup by a ``<HashIndex>`` against the scan of the same records (issue #30), and what
keeping the index costs a publish.

In process, no sockets: two in-memory SOW topics keyed by ``/id`` get the same ``-n`` records
(``{"id", "code", "region", "qty"}``; ``code`` is unique, ``region`` one of 50, ``qty`` one of
97: about 20 records per pair); one has the hash indexes ``/code`` and ``(/region, /qty)``,
the other none. The filters ``/code = 'c…'`` (one record) and ``/region = 'r7' AND /qty = '7'``
are answered by the index on the first topic and by scanning every record on the second;
each lookup runs ``--lookups`` times with
varying literals, and the same filter and records go to both (the script checks the results
are equal). Medians and ranges of ``--runs``, by the wall clock (``perf_counter``) and by the
process's CPU time (``process_time``; other work on a shared machine inflates it less).

Usage: ``python benchmarks/hash_index_bench.py [-n 100000] [--lookups 50] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.sow import SowTopic

INDEXES = (("/code",), ("/region", "/qty"))


def fill(sow: SowTopic, n: int) -> float:
    """Publish ``n`` records; µs per publish (CPU)."""
    start = time.process_time()
    for i in range(n):
        doc = {"id": i, "code": f"c{i}", "region": f"r{i % 50}", "qty": i % 97}
        sow.publish(json.dumps(doc).encode(), doc=doc, sow_key=None, bookmark="", timestamp="")
    return (time.process_time() - start) / n * 1e6


def timed(action: Callable[[], None], count: int) -> tuple[float, float]:
    """µs per call of ``action``: (wall clock, CPU)."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        action()
    return (
        (time.perf_counter() - wall) / count * 1e6,
        (time.process_time() - cpu) / count * 1e6,
    )


def lookups(sow: SowTopic, filters: list[str]) -> Callable[[], None]:
    compiled = [(text, compile_filter(text)) for text in filters]
    position = 0

    def one() -> None:
        nonlocal position
        text, predicate = compiled[position % len(compiled)]
        position += 1
        sow.query(predicate, filter_text=text)

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="records")
    parser.add_argument("--lookups", type=int, default=50, help="queries per timing")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    n = args.n
    indexed = SowTopic("indexed", keys=("/id",), hash_indexes=INDEXES, key_domain="same")
    plain = SowTopic("plain", keys=("/id",), key_domain="same")
    print(f"publish, µs (CPU): indexed {fill(indexed, n):.2f}, plain {fill(plain, n):.2f}")
    queries = {
        "/code = 'c…' (1 record)": [f"/code = 'c{(i * 7919) % n}'" for i in range(args.lookups)],
        "/region = 'r…' AND /qty = '…'": [
            f"/region = 'r{i % 50}' AND /qty = '{i % 97}'" for i in range(args.lookups)
        ],
    }
    for name, filters in queries.items():
        for text in filters[:3]:
            predicate = compile_filter(text)
            got = indexed.query(predicate, filter_text=text)[0]
            assert [(r.key, r.data) for r in got] == [
                (r.key, r.data) for r in plain.query(predicate)[0]
            ], text
        index_runs, scan_runs = [], []
        for _ in range(args.runs):  # alternate, so load changes hit both alike
            index_runs.append(timed(lookups(indexed, filters), len(filters)))
            scan_runs.append(timed(lookups(plain, filters), max(3, len(filters) // 10)))
        for label, runs in (("hash index", index_runs), ("scan", scan_runs)):
            wall = sorted(r[0] for r in runs)
            cpu = sorted(r[1] for r in runs)
            print(
                f"{name:32} {label:10} µs per query: wall {statistics.median(wall):10.1f} "
                f"({wall[0]:.1f}-{wall[-1]:.1f}), CPU {statistics.median(cpu):10.1f}"
            )
        ratio = statistics.median(r[0] for r in scan_runs) / statistics.median(
            r[0] for r in index_runs
        )
        print(f"{name:32} scan / index (wall medians): {ratio:,.0f}x")
    indexed.close()
    plain.close()


if __name__ == "__main__":
    main()
