"""The worker grid on an AMPS message queue (``runner.py --mode queue``).

A reference server (its own process) with a transaction log, a queue ``work`` over the
underlying topic ``orders`` and a SOW topic ``results`` keyed by ``/order_id``; the same order
publisher as the bookmark mode; K ``queue_worker.py`` processes consuming the queue with
``max_backlog`` and auto-ack batching. Part way through one worker is killed with ``kill -9``
and started again: the orders it held come back to the queue and are processed again by
whoever takes them. The audit: every order has its result in ``results``, and it is the right
one (0 lost); the ``processed`` topic, replayed from the transaction log, counts how many orders
were processed more than once (redeliveries); the queue is empty at the end (the admin
interface's ``/amps/instance/queues/work``: nothing waiting, nothing leased).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from grid import Grid, TimedOut, run_loop, spawn

from ampsclient import Client, Message
from ampsclient_server_stub.harness import ServerProcess, free_port

CONFIG = """<AMPSConfig>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
    <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
  <TransactionLog><JournalDirectory>journal</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>processed</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>
    <Topic><Name>results</Name><MessageType>json</MessageType><Key>/order_id</Key></Topic>
    <Queue><Name>work</Name><MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <MaxPerSubscriptionBacklog>{backlog}</MaxPerSubscriptionBacklog></Queue>
  </SOW>
</AMPSConfig>"""


def run_queue(args: argparse.Namespace) -> dict[str, Any]:
    """Run the queue-mode grid; print its audit and return it as a summary."""
    workdir = Path(tempfile.mkdtemp(prefix="worker-grid-queue-"))
    config = workdir / "grid.xml"
    config.write_text(CONFIG.format(backlog=args.backlog))
    started = time.monotonic()
    admin_port = free_port()
    server = ServerProcess(
        data_dir=workdir / "server",
        config=config,
        name="grid-queue",
        die_with_parent=True,
        extra_args=["--admin-port", str(admin_port)],
    )
    server.start()
    uri = server.uri()
    print(f"queue mode: reference server {uri}; data in {workdir}")
    seen: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def on_processed(message: Message) -> None:
        with lock:
            seen[message.json()["order_id"]] += 1

    def worker(index: int) -> subprocess.Popen[str]:
        return spawn(
            "queue_worker.py",
            "--uri",
            uri,
            "--name",
            f"queue-worker-{index}",
            "--backlog",
            str(args.backlog),
            "--batch",
            str(args.batch),
        )

    grid = Grid(worker, args.workers)
    killed: int | None = None
    results: dict[int, Any] = {}
    audit: collections.Counter[int] = collections.Counter()
    left = -1
    try:
        with Client("grid-queue-auditor") as auditor:
            auditor.connect(uri)
            auditor.logon(10_000)
            auditor.subscribe(on_processed, "processed")
            grid.launch(uri, args.orders, workdir / "publisher.store")

            def processed() -> int:
                with lock:
                    return len(seen)

            try:
                killed = run_loop(
                    grid.workers,
                    start=worker,
                    done=processed,
                    # every order processed and every lease acknowledged
                    finished=lambda done: done >= args.orders and _outstanding(admin_port) == 0,
                    total=args.orders,
                    kill_at=args.kill_at,
                    timeout=args.timeout,
                    name="queue-worker",
                    resumes="its leased orders came back",
                )
            except TimedOut:
                return {"mode": "queue", "ok": False}
            grid.stop()  # each closes its client: pending acks go out first
            # the audit: the results (SOW), the processing count (journal), the queue
            for record in auditor.sow("results", timeout=10_000):
                if record.command in ("sow", "p", "publish") and record.data:
                    doc = record.json()
                    results[doc["order_id"]] = doc["total"]
            replay = auditor.bookmark_subscribe("processed", "0", timeout=10_000)
            for replayed in replay.timeout(1000):
                if replayed is None:
                    break
                audit[replayed.json()["order_id"]] += 1
            replay.close()
            left = _outstanding(admin_port)
    finally:
        grid.kill()
        server.stop()

    wrong = [n for n in range(args.orders) if results.get(n) != (1 + n % 50) * 10]
    missing = [n for n in range(args.orders) if n not in results]
    again = sum(c - 1 for c in audit.values() if c > 1)
    took = time.monotonic() - started
    ok = not missing and not wrong and left == 0 and len(audit) == args.orders
    print("=" * 64)
    print(f" orders published      {args.orders}")
    print(
        f" workers               {args.workers} (queue-worker-{killed} killed with kill -9, "
        "restarted)"
    )
    print(f" orders processed      {len(results)} distinct results, in {took:.1f} s")
    print(f" lost                  {len(missing)}")
    print(f" wrong results         {len(wrong) - len(missing)}")
    print(f" processed again       {again} (redeliveries; max_backlog {args.backlog})")
    print(f" left in the queue     {left}")
    print(f" audit                 {'PASSED' if ok else 'FAILED'}")
    print("=" * 64)
    if missing:
        print(f"missing orders: {missing[:20]}...", file=sys.stderr)
    return {
        "mode": "queue",
        "ok": ok,
        "orders": args.orders,
        "distinct": len(results),
        "lost": len(missing),
        "again": again,
        "seconds": took,
        "killed": f"queue-worker-{killed}",
    }


def _outstanding(admin_port: int) -> int:
    """Messages of the queue not acknowledged yet (waiting or leased), from the server's
    admin interface (``/amps/instance/queues/work``)."""
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
    try:
        conn.request("GET", "/amps/instance/queues/work")
        stats = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return int(stats["queue_depth"]) + int(stats["backlog"])


if __name__ == "__main__":  # pragma: no cover - run through runner.py
    print("run: python examples/worker_grid/runner.py --mode queue", file=sys.stderr)
    sys.exit(2)
