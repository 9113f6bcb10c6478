"""Replication benchmarks on loopback, every instance a separate process (``Cluster``).

1. **Persisted publish throughput**: an ``HAClient`` (memory publish store) publishes ``-n``
   messages and waits for every persisted ack (``publish_flush``); a single instance vs a
   hot-hot pair replicating sync both ways (the ack then waits for the partner). Ratio, and
   the CPU time each server process spent per message (from ``/proc``: the figure that
   holds on a loaded machine, where the rates follow the share of CPU the processes get).
2. **Replication lag under load**: publishes to A at ``--rate`` msgs/s; a plain subscriber
   on B measures (receive time - publish time) per message: p50 / p99 / max.
3. **Resync rate after an outage**: B is down while ``--outage`` messages are published to
   A (async link, so A acks alone); B restarts and the clock runs until A's destination B
   has everything acknowledged. Messages/s.
4. **Failover time**: kill -9 of A while a publisher (``HAClient``) and a bookmark
   subscriber use it; time from the kill to the first message delivered from B, for a
   plain bookmark subscription and for a ``fully_durable`` one (which also waits for B's
   downgrade of the dead sync partner: ``Age`` 0.5 s here).

Usage::

    python benchmarks/replication_bench.py [-n 100000] [--outage 1000000] [--fsync always]

Each figure is printed as it is measured; ``--json FILE`` also writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ampsclient import Client, Message
from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster, ClusterNode, DowngradePolicy

DATA = '{"id":1,"sym":"IBM","px":101.5,"n":%d}'


def wait(cond: Callable[[], bool], timeout: float, what: str, poll: float = 0.002) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(poll)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` so far (0 where /proc is not there)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int | None) -> float:
    """Peak resident set size of process ``pid`` so far, MB (``VmHWM``; 0 without /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def persisted_throughput(
    node: ClusterNode, n: int, name: str, servers: tuple[ClusterNode, ...] = ()
) -> tuple[float, list[float]]:
    """Messages/s, and the CPU µs per message of each of ``servers``."""
    with HAClient(name) as pub:
        pub.get_server_chooser().add(node.uri())
        pub.connect_and_logon()
        for i in range(2000):  # warm-up
            pub.publish("warm", DATA % i)
        pub.publish_flush(60_000)
        before = [cpu_seconds(s.pid) for s in servers]
        started = time.perf_counter()
        for i in range(n):
            pub.publish("orders", DATA % i)
        pub.publish_flush(600_000)
        rate = n / (time.perf_counter() - started)
        after = [cpu_seconds(s.pid) for s in servers]
    return rate, [(b - a) / n * 1e6 for a, b in zip(before, after, strict=True)]


def bench_throughput(base: Path, n: int, fsync: str) -> dict[str, float]:
    single = Cluster(base / "single", fsync=fsync)
    node = single.add("S")
    with single:
        single.start()
        one, (cpu_s,) = persisted_throughput(node, n, "tp-single", (node,))
        rss_s = peak_rss_mb(node.pid)
    print(
        f"persisted publishes, single instance : {one:10.0f} msgs/s, server {cpu_s:.2f} us/msg, "
        f"peak RSS {rss_s:.0f} MB"
    )
    pair = Cluster(base / "pair", fsync=fsync)
    a = pair.add("A", group="HA")
    b = pair.add("B", group="HA")
    pair.hot_hot(a, b)
    with pair:
        pair.start()
        pair.wait_streaming()
        two, (cpu_a, cpu_b) = persisted_throughput(a, n, "tp-pair", (a, b))
        rss_a, rss_b = peak_rss_mb(a.pid), peak_rss_mb(b.pid)
    print(
        f"persisted publishes, sync pair       : {two:10.0f} msgs/s, A {cpu_a:.2f} us/msg, "
        f"B {cpu_b:.2f} us/msg, peak RSS A {rss_a:.0f} MB, B {rss_b:.0f} MB"
    )
    print(f"ratio pair / single                  : {two / one:10.2f}")
    # on 2 cores with the client on one of them, the busier of A and B bounds the pair
    cpu_ratio = cpu_s / max(cpu_a, cpu_b)
    print(f"ratio by server CPU per message      : {cpu_ratio:10.2f}")
    return {
        "single_msgs_per_s": one,
        "pair_msgs_per_s": two,
        "ratio": two / one,
        "single_cpu_us_per_msg": cpu_s,
        "pair_a_cpu_us_per_msg": cpu_a,
        "pair_b_cpu_us_per_msg": cpu_b,
        "cpu_ratio": cpu_ratio,
        "single_peak_rss_mb": rss_s,
        "pair_a_peak_rss_mb": rss_a,
        "pair_b_peak_rss_mb": rss_b,
    }


def lag_subscriber(uri: str, n: int, out: Path) -> None:
    """The lag run's subscriber, in a process of its own (``--lag-subscriber``): the lag of
    each of ``n`` messages (receive time - the publish time in the message), written to
    ``out`` as a JSON list; prints ``ready`` once subscribed."""
    lags: list[float] = []
    lock = threading.Lock()

    def on(message: Message) -> None:
        sent = json.loads(message.get_data())["t"]
        with lock:
            lags.append(time.time() - sent)

    with Client("lag-sub") as sub:
        sub.connect(uri)
        sub.logon(5000)
        sub.subscribe(on, "lag")
        print("ready", flush=True)
        wait(lambda: len(lags) >= n, 600, "every message on B", poll=0.01)
    out.write_text(json.dumps({"lags": lags, "cpu_s": time.process_time()}))


def bench_lag(base: Path, n: int, rate: float, fsync: str) -> dict[str, float]:
    """The subscriber runs in its own process: in this one it would share the interpreter
    lock with the publisher, and the lag would measure the two clients' contention."""
    import subprocess

    cluster = Cluster(base / "lag", fsync=fsync)
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.hot_hot(a, b)
    lag_file = base / "lags.json"
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        sub = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--lag-subscriber", b.uri(),
             str(n), str(lag_file)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert sub.stdout is not None
            if sub.stdout.readline().strip() != "ready":
                raise RuntimeError("the lag subscriber did not start")
            before = [cpu_seconds(s.pid) for s in (a, b)]
            pub_cpu = time.process_time()
            with HAClient("lag-pub") as pub:
                pub.get_server_chooser().add(a.uri())
                pub.connect_and_logon()
                started = time.perf_counter()
                for i in range(n):
                    due = started + i / rate
                    now = time.perf_counter()
                    if due > now:
                        time.sleep(due - now)
                    pub.publish("lag", json.dumps({"n": i, "t": time.time()}))
                achieved = n / (time.perf_counter() - started)
                pub.publish_flush(600_000)
            pub_cpu = time.process_time() - pub_cpu
            if sub.wait(timeout=600) != 0:
                raise RuntimeError("the lag subscriber failed")
            cpu = [
                (cpu_seconds(s.pid) - t0) / n * 1e6 for s, t0 in zip((a, b), before, strict=True)
            ]
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait()
    received = json.loads(lag_file.read_text())
    ordered = sorted(received["lags"])
    out = {
        "rate_msgs_per_s": achieved,
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
        "max_ms": ordered[-1] * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
        "a_cpu_us_per_msg": cpu[0],
        "b_cpu_us_per_msg": cpu[1],
        "publisher_cpu_us_per_msg": pub_cpu / n * 1e6,
        "subscriber_cpu_us_per_msg": received["cpu_s"] / n * 1e6,
    }
    print(
        f"replication lag A->B at {achieved:.0f} msgs/s : p50 {out['p50_ms']:.2f} ms, "
        f"p99 {out['p99_ms']:.2f} ms, max {out['max_ms']:.2f} ms "
        f"(CPU us/msg: A {cpu[0]:.2f}, B {cpu[1]:.2f}, publisher "
        f"{out['publisher_cpu_us_per_msg']:.1f}, subscriber {out['subscriber_cpu_us_per_msg']:.1f})"
    )
    return out


def bench_resync(base: Path, count: int, fsync: str) -> dict[str, float]:
    cluster = Cluster(base / "resync", fsync=fsync)
    a = cluster.add("A", group="GA")
    b = cluster.add("B", group="GB")
    cluster.replicate(a, b, sync=False)
    cluster.replicate(b, a, sync=False)
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        with Client("resync-pub") as pub:
            pub.connect(a.uri())
            pub.logon(5000)
            pub.publish("outage", DATA % -1)  # B knows this publisher before the outage
            pub.flush(60_000)
            cluster.wait_caught_up()
            b.kill()
            started = time.perf_counter()
            for i in range(count):
                pub.publish("outage", DATA % i)
            pub.flush(3_600_000)
            publish_s = time.perf_counter() - started
        print(f"outage: {count} messages published to A in {publish_s:.1f} s")
        target = a.admin("journal")["last_index"]
        b.start()
        started = time.perf_counter()

        def caught_up() -> bool:
            dest = a.destination_status("B")
            return bool(
                dest["state"] == "streaming"
                and dest["in_flight"] == 0
                and dest["scan_position"] > target
            )

        wait(caught_up, 3600, "B to resync", poll=0.05)  # admin calls cost the server time
        elapsed = time.perf_counter() - started
    rate = count / elapsed
    print(f"resync of {count} messages           : {elapsed:10.2f} s, {rate:10.0f} msgs/s")
    return {"messages": count, "seconds": elapsed, "msgs_per_s": rate}


def bench_failover(base: Path, rounds: int, fsync: str) -> dict[str, Any]:
    results: dict[str, list[float]] = {"plain": [], "fully_durable": []}
    for options in ("plain", "fully_durable"):
        for r in range(rounds):
            cluster = Cluster(
                base / f"failover-{options}-{r}",
                fsync=fsync,
                downgrade=DowngradePolicy(age=0.5, upgrade_age=0.2, every=0.1),
            )
            a = cluster.add("A", group="HA")
            b = cluster.add("B", group="HA")
            cluster.hot_hot(a, b)
            with cluster:
                cluster.start()
                cluster.wait_streaming()
                results[options].append(_failover_once(a, b, options))
    out: dict[str, Any] = {}
    for options, values in results.items():
        out[options] = {"median_ms": statistics.median(values), "all_ms": values}
        print(
            f"failover kill -> first delivery on B ({options:13s}): median "
            f"{statistics.median(values):7.0f} ms over {len(values)} run(s) "
            f"({', '.join(f'{v:.0f}' for v in values)})"
        )
    return out


def _failover_once(a: ClusterNode, b: ClusterNode, options: str) -> float:
    seen: list[int] = []
    killed_at: list[float] = []
    first_after: list[float] = []
    lock = threading.Lock()

    def on(message: Message) -> None:
        with lock:
            seen.append(int(json.loads(message.get_data())["n"]))
            if killed_at and not first_after:
                first_after.append(time.monotonic())

    with (
        HAClient(
            "fo-sub",
            bookmark_store=MemoryBookmarkStore(),
            reconnect_delay_strategy=FixedDelayStrategy(10),
        ) as sub,
        HAClient("fo-pub", reconnect_delay_strategy=FixedDelayStrategy(10)) as pub,
    ):
        for client in (sub, pub):
            client.get_server_chooser().add(a.uri()).add(b.uri())
            client.connect_and_logon()
        sub.bookmark_subscribe(
            on,
            "fo",
            HAClient.Bookmarks.MOST_RECENT,
            sub_id="fo",
            options="fully_durable" if options == "fully_durable" else None,
        )
        for i in range(200):
            pub.publish("fo", json.dumps({"n": i}))
        pub.publish_flush(30_000)
        wait(lambda: len(seen) >= 200, 30, "warm-up deliveries")
        with lock:
            killed_at.append(time.monotonic())
        a.kill()
        i = 200
        while not first_after:
            pub.publish("fo", json.dumps({"n": i}))
            i += 1
            time.sleep(0.001)
            if time.monotonic() - killed_at[0] > 60:
                raise RuntimeError("no delivery after failover")
        pub.publish_flush(60_000)
    return (first_after[0] - killed_at[0]) * 1000


def compare(trees: list[str], runs: int, forwarded: list[str]) -> dict[str, Any]:
    """Run this benchmark ``runs`` times under each source tree (``label=path``: the tree's
    ``ampsclient`` and ``ampsclient_server_stub`` on ``PYTHONPATH`` and as the working
    directory, which ``python -m`` puts first, so the servers run it too; this script measures
    every tree),
    alternating the trees run by run, and print the median and range of each figure."""
    import subprocess

    results: dict[str, list[dict[str, Any]]] = {}
    for r in range(runs):
        for spec in trees:
            label, _, path = spec.partition("=")
            out = Path(tempfile.mkstemp(prefix="replbench-", suffix=".json")[1])
            tree = Path(path).resolve()
            env = dict(os.environ, PYTHONPATH=str(tree))
            print(f"--- run {r + 1}/{runs}: {label} ({path})", flush=True)
            subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), *forwarded, "--json", str(out)],
                env=env, cwd=tree, check=True,
            )  # fmt: skip
            results.setdefault(label, []).append(json.loads(out.read_text()))
            out.unlink()
    summary: dict[str, Any] = {}
    print("--- medians [min .. max] over", runs, "run(s)")
    for label, rows in results.items():
        figures: dict[str, list[float]] = {}
        for row in rows:
            for part in ("throughput", "lag", "resync"):
                for key, value in row.get(part, {}).items():
                    if isinstance(value, (int, float)):
                        figures.setdefault(f"{part}.{key}", []).append(float(value))
        summary[label] = {
            key: {"median": statistics.median(vs), "min": min(vs), "max": max(vs), "all": vs}
            for key, vs in figures.items()
        }
        for key, stat in summary[label].items():
            print(
                f"{label:>8s} {key:36s} {stat['median']:12.2f} "
                f"[{stat['min']:.2f} .. {stat['max']:.2f}]"
            )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100_000, help="messages per throughput run")
    parser.add_argument("--lag-messages", type=int, default=50_000)
    parser.add_argument("--rate", type=float, default=20_000, help="msgs/s for the lag run")
    parser.add_argument(
        "--outage",
        type=int,
        default=200_000,
        help="messages published while the destination is down (e.g. 1000000)",
    )
    parser.add_argument("--failover-rounds", type=int, default=3)
    parser.add_argument("--fsync", choices=("always", "interval", "never"), default="always")
    parser.add_argument(
        "--only", nargs="*", default=None, choices=("throughput", "lag", "resync", "failover")
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="LABEL=TREE",
        help="run under each source tree in turn (e.g. before=/tmp/old after=.), --runs times",
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per tree with --compare")
    parser.add_argument("--lag-subscriber", nargs=3, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.lag_subscriber:
        uri, count, out = args.lag_subscriber
        lag_subscriber(uri, int(count), Path(out))
        return 0
    if args.compare:
        argv = sys.argv[1:]
        forwarded: list[str] = []
        skip = 0
        for arg in argv:
            if skip:
                skip -= 1
                continue
            if arg == "--compare":
                skip = len(args.compare)
                continue
            if arg in ("--runs", "--json"):
                skip = 1
                continue
            forwarded.append(arg)
        summary = compare(args.compare, args.runs, forwarded)
        if args.json is not None:
            args.json.write_text(json.dumps(summary, indent=2))
        return 0
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="replbench-"))
    results: dict[str, Any] = {"fsync": args.fsync, "cpus": os.cpu_count()}
    wanted = set(args.only or ("throughput", "lag", "resync", "failover"))
    print(f"fsync={args.fsync}, {os.cpu_count()} CPU(s), work dir {base}")
    try:
        if "throughput" in wanted:
            results["throughput"] = bench_throughput(base, args.n, args.fsync)
        if "lag" in wanted:
            results["lag"] = bench_lag(base, args.lag_messages, args.rate, args.fsync)
        if "resync" in wanted:
            results["resync"] = bench_resync(base, args.outage, args.fsync)
        if "failover" in wanted:
            results["failover"] = bench_failover(base, args.failover_rounds, args.fsync)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
