"""The worker grid: a publisher, K workers, a kill -9 in the middle, and an exact audit.

Starts a reference server (a separate process), the order publisher and K worker processes
(each with its own HAClient and a bookmark subscription filtered to its share of the orders,
keeping its resume point in the server's SOW through SOW + conflating recovery point
adapters). Part way through it kills one worker with ``kill -9`` and starts it again; the
worker resumes from its recovery point in the SOW. At the end it replays the ``processed``
topic from the transaction log and checks, order by order, that every order was processed,
that none was lost, and that re-processed orders stayed within the conflation threshold.

``--mode queue`` runs the same grid on an AMPS message queue instead (``queue_mode.py``):
orders published to an underlying topic, K workers consuming the queue with ``max_backlog``
and auto-ack batching, one worker ``kill -9``'d and restarted, results keyed by order id in a
SOW topic; the audit counts lost orders (0) and redeliveries. ``--mode both`` runs the two
one after the other and prints their audits side by side (``make demo``).

Usage: ``python examples/worker_grid/runner.py [--mode bookmark|queue|both] [--orders 3000]
[--workers 3]``. Exit status 0 when every audit passes.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from grid import Grid, TimedOut, run_loop, spawn
from queue_mode import run_queue

from ampsclient import Client, Message
from ampsclient_server_stub.harness import ServerProcess


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("bookmark", "queue", "both"), default="bookmark")
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threshold", type=int, default=10, help="conflation threshold")
    parser.add_argument("--backlog", type=int, default=10, help="queue mode: max_backlog")
    parser.add_argument("--batch", type=int, default=5, help="queue mode: acks per batch")
    parser.add_argument("--kill-at", type=float, default=0.3, help="fraction done at the kill")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    summaries: list[dict[str, Any]] = []
    if args.mode in ("bookmark", "both"):
        summaries.append(run_bookmark(args))
    if args.mode in ("queue", "both"):
        print()
        summaries.append(run_queue(args))
    if len(summaries) > 1:
        print_side_by_side(summaries)
    return 0 if all(s["ok"] for s in summaries) else 1


def run_bookmark(args: argparse.Namespace) -> dict[str, Any]:
    """Bookmark mode: each worker a filtered bookmark subscription with its resume point in the
    SOW; exactly once within the conflation threshold."""
    workdir = Path(tempfile.mkdtemp(prefix="worker-grid-"))
    started = time.monotonic()
    server = ServerProcess(data_dir=workdir / "server", name="grid", die_with_parent=True)
    server.start()
    uri = server.uri()
    print(f"reference server {uri}; data in {workdir}")
    processed: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def on_result(message: Message) -> None:
        with lock:
            processed[message.json()["order_id"]] += 1

    def count(seen: collections.Counter[int]) -> int:
        with lock:
            return len(seen)

    def worker(index: int) -> subprocess.Popen[str]:
        return spawn(
            "worker.py",
            "--uri",
            uri,
            "--index",
            str(index),
            "--workers",
            str(args.workers),
            "--threshold",
            str(args.threshold),
        )

    grid = Grid(worker, args.workers)
    killed = None
    try:
        with Client("grid-auditor") as auditor:
            auditor.connect(uri)
            auditor.logon(10_000)
            auditor.subscribe(on_result, "processed")
            grid.launch(uri, args.orders, workdir / "publisher.store")
            try:
                killed = run_loop(
                    grid.workers,
                    start=worker,
                    done=lambda: count(processed),
                    finished=lambda done: done >= args.orders,
                    total=args.orders,
                    kill_at=args.kill_at,
                    timeout=args.timeout,
                    name="worker",
                    resumes="it resumes from its point in the SOW",
                )
            except TimedOut:
                return {"mode": "bookmark", "ok": False}
            grid.stop()
            # the audit: replay every result from the transaction log
            audit: collections.Counter[int] = collections.Counter()
            replay = auditor.bookmark_subscribe("processed", "0", timeout=10_000)
            for message in replay.timeout(1000):
                if message is None:
                    break
                audit[message.json()["order_id"]] += 1
            replay.close()
    finally:
        grid.kill()
        server.stop()

    missing = [n for n in range(args.orders) if audit[n] == 0]
    duplicates = sum(c - 1 for c in audit.values() if c > 1)
    took = time.monotonic() - started
    print("=" * 64)
    print(f" orders published      {args.orders}")
    print(f" workers               {args.workers} (worker-{killed} killed with kill -9, restarted)")
    print(f" orders processed      {len(audit)} distinct, in {took:.1f} s")
    print(f" lost                  {len(missing)}")
    print(f" processed twice       {duplicates} (conflation threshold {args.threshold})")
    ok = not missing and duplicates <= args.threshold + 1
    print(f" audit                 {'PASSED' if ok else 'FAILED'}")
    print("=" * 64)
    if missing:
        print(f"missing orders: {missing[:20]}...", file=sys.stderr)
    return {
        "mode": "bookmark",
        "ok": ok,
        "orders": args.orders,
        "distinct": len(audit),
        "lost": len(missing),
        "again": duplicates,
        "seconds": took,
        "killed": f"worker-{killed}",
    }


def print_side_by_side(summaries: list[dict[str, Any]]) -> None:
    """The two modes' audits in two columns."""
    rows = [
        ("", "mode"),
        ("orders published", "orders"),
        ("processed (distinct)", "distinct"),
        ("lost", "lost"),
        ("processed again", "again"),
        ("seconds", "seconds"),
        ("killed with kill -9", "killed"),
        ("audit", "ok"),
    ]
    print("=" * 64)
    for label, key in rows:
        cells = []
        for summary in summaries:
            value = summary.get(key, "-")
            if key == "ok":
                value = "PASSED" if value else "FAILED"
            elif key == "seconds" and isinstance(value, float):
                value = f"{value:.1f}"
            cells.append(f"{value!s:>18}")
        print(f" {label:<22}" + "".join(cells))
    print("=" * 64)


if __name__ == "__main__":
    sys.exit(main())
