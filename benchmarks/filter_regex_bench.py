"""Filter and regex-topic evaluation speed (issue 31: LIKE and regex topics moved from Python's
backtracking ``re`` to RE2, with a time-limited engine for backreferences and lookaround).

Each case compiles one filter (or regex topic) and evaluates it over ``-n`` decoded JSON
messages (about half match); ns per evaluation, median and range of ``--runs`` runs. The
``evil`` line times one evaluation of ``/sym LIKE '^(a+)+$'`` against ``--evil`` a's and a
``!`` (exponential on a backtracking engine: keep ``--evil`` small, e.g. 22, before the fix).

Usage: ``python benchmarks/filter_regex_bench.py [-n 20000] [--runs 5] [--evil 22]``.
Run it with ``PYTHONPATH`` pointing at another checkout to measure that one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.payload import decode
from ampsclient_server_stub.engine.topics import compile_topic

FILTERS = {
    "plain: /px > 90 AND /sym = 'IBM'": "/px > 90 AND /sym = 'IBM'",
    "LIKE '^IB.?$'": "/sym LIKE '^IB.?$'",
    "LIKE '(?i)^us$'": "/country LIKE '(?i)^us$'",
    "LIKE '^90\\..*' AND /px < 91": "/spx LIKE '^90\\..*' AND /px < 91",
    "LIKE '(.)\\1' (backreference)": "/sym LIKE '(.)\\1'",
    "LIKE '5$' (every value different)": "/oid LIKE '5$'",
    "LIKE '(.)\\1$' (backreference, every value different)": "/oid LIKE '(.)\\1$'",
}
TOPIC = "^orders\\.(eu|us)\\..*"


def messages(n: int) -> list[Any]:
    out = []
    for i in range(n):
        even = i % 2 == 0
        doc = {
            "sym": "IBM" if even else "AAPL",
            "px": 90.5 if even else 120.0,
            "spx": "90.5" if even else "120.0",
            "country": "US" if even else "fr",
            "oid": f"ord-{i:06d}",
        }
        out.append(decode("json", json.dumps(doc).encode()))
    return out


def timed(run: Callable[[], int], count: int) -> float:
    start = time.perf_counter()
    hits = run()
    elapsed = time.perf_counter() - start
    assert 0 < hits < count, hits
    return elapsed / count * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--evil", type=int, default=22)
    args = parser.parse_args()
    docs = messages(args.n)
    topics = [
        f"orders.{'eu' if i % 2 else 'us'}.{i}" if i % 3 else f"trades.{i}" for i in range(args.n)
    ]
    cases: dict[str, Callable[[], int]] = {}
    for label, text in FILTERS.items():
        predicate = compile_filter(text)
        cases[label] = lambda p=predicate: sum(1 for d in docs if p(d))
    matcher = compile_topic(TOPIC)
    cases[f"regex topic {TOPIC}"] = lambda: sum(1 for t in topics if matcher.matches(t))
    results: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.runs):
        for label, run in cases.items():
            results[label].append(timed(run, args.n))
    print(f"{args.n} messages, {args.runs} runs: ns per evaluation, median (min-max)")
    for label, values in results.items():
        median, low, high = statistics.median(values), min(values), max(values)
        print(f"| {label} | {median:,.0f} ({low:,.0f}-{high:,.0f}) |")
    evil = compile_filter("/sym LIKE '^(a+)+$'")
    doc = decode("json", json.dumps({"sym": "a" * args.evil + "!"}).encode())
    start = time.perf_counter()
    evil(doc)
    ms = (time.perf_counter() - start) * 1e3
    print(f"| evil LIKE '^(a+)+$' on {args.evil} a's + '!' | {ms:,.2f} ms |")


if __name__ == "__main__":
    main()
