"""Scale: many connected clients against ONE reference-server process on this machine.

    .venv/bin/python benchmarks/scale.py                       # N = 200, 500, 1000, 2000
    .venv/bin/python benchmarks/scale.py --sizes 300 --seconds 5 --rate 1000

For each size N (a fresh server each time, no transaction log): ``N - 20`` subscribers, each an
:class:`~ampsclient.AsyncClient` subscribed to one of 200 topics (``scale/0`` ..
``scale/199``, subscriber ``i`` on topic ``i % 200``), and 20 publishers (publisher ``p`` owns
the topics ``j`` with ``j % 20 == p``). The clients run in a few processes, at most
``--per-process`` (500) subscribers each, and the 20 publishers in one more, so that no client
process is the bound. The publishers publish ``--rate`` messages a second in all, spread evenly
over the 200 topics, for ``--seconds``; then flush. Each message carries its topic's sequence
number and its publish time.

Every subscriber checks every delivery, message by message: its topic's sequence numbers must
arrive once each and in order (a gap, a number seen before, a late arrival of a gap are counted
as lost, duplicated, out of order); at the end every number up to the last the publisher
flushed must have arrived. Latency: receipt time minus publish time (one machine, one clock).

Reported per size: the time to connect, log on and subscribe every client; deliveries per
second (first publish to last delivery) against those offered; p50/p99/max latency; lost /
duplicated / out of order; the server's RSS (before the clients, all connected and idle, peak
under load), its open file descriptors and CPU; the client processes' RSS and CPU (what the
client side costs). The figures go to stdout and, as JSON, to ``<work>/scale.json``. Exit
status 0 only when nothing was lost, duplicated or out of order.

The soft ``RLIMIT_NOFILE`` is raised (to the hard limit) when N clients need more descriptors
than it allows; the server and the client processes inherit it.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ampsclient import AsyncClient, Message  # noqa: E402

TOPICS = 200
PUBLISHERS = 20


def topic_name(j: int) -> str:
    return f"scale/{j}"


# =========================================================================== the checks


@dataclass
class Checker:
    """One subscriber's check of its topic's sequence numbers, message by message."""

    topic: str
    last: int = 0
    deliveries: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    missing: set[int] = field(default_factory=set)
    latencies: array.array[float] = field(default_factory=lambda: array.array("f"))
    got: list[int] | None = None
    """Every sequence number in arrival order (kept when asked for: the test's exact check)."""
    last_receipt: float = 0.0

    def on_message(self, message: Message) -> None:
        now = time.time()
        body = json.loads(message.get_data())
        k = int(body["k"])
        self.deliveries += 1
        self.last_receipt = now
        self.latencies.append(1000.0 * (now - body["t"]))
        if self.got is not None:
            self.got.append(k)
        if k == self.last + 1:
            self.last = k
        elif k > self.last + 1:
            self.missing.update(range(self.last + 1, k))
            self.last = k
        elif k in self.missing:
            self.missing.discard(k)
            self.out_of_order += 1
        else:
            self.duplicated += 1

    def complete(self, expected: int) -> bool:
        return self.last >= expected and not self.missing

    def lost(self, expected: int) -> int:
        return max(0, expected - self.last) + len(self.missing)


# =========================================================================== the clients


async def connect_all(
    uri: str, names: Sequence[str], *, concurrency: int = 50, timeout_ms: int = 60_000
) -> list[AsyncClient]:
    """Connect and log on a client per name, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> AsyncClient:
        async with gate:
            client = AsyncClient(name)
            await client.connect(uri)
            await client.logon(timeout_ms)
            return client

    return list(await asyncio.gather(*(one(n) for n in names)))


async def subscribe_all(
    clients: Sequence[AsyncClient],
    checkers: Sequence[Checker],
    *,
    concurrency: int = 50,
    timeout_ms: int = 60_000,
) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(client: AsyncClient, checker: Checker) -> None:
        async with gate:
            await client.subscribe(checker.on_message, checker.topic, timeout=timeout_ms)

    await asyncio.gather(*(one(c, k) for c, k in zip(clients, checkers, strict=True)))


async def close_all(clients: Sequence[AsyncClient]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def topics_of(publisher: int) -> list[int]:
    return [j for j in range(TOPICS) if j % PUBLISHERS == publisher]


async def publish(
    publishers: Sequence[AsyncClient],
    *,
    rate: float,
    seconds: float | None = None,
    per_topic: int | None = None,
    tick: float = 0.01,
) -> dict[str, int]:
    """Publish ``rate`` messages a second over the 200 topics (each publisher its own
    topics, round robin) for ``seconds``, or ``per_topic`` messages to every topic; then
    flush every publisher. Returns the last sequence number of each topic."""
    last = {topic_name(j): 0 for j in range(TOPICS)}
    order = [(publishers[j % len(publishers)], topic_name(j)) for j in range(TOPICS)]
    loop = asyncio.get_running_loop()
    start = loop.time()
    sent = 0
    cursor = 0
    total = per_topic * TOPICS if per_topic is not None else None
    while True:
        elapsed = loop.time() - start
        if seconds is not None and elapsed >= seconds:
            break
        if total is not None and sent >= total:
            break
        due = int(rate * (elapsed + tick)) - sent
        if total is not None:
            due = min(due, total - sent)
        for _ in range(max(0, due)):
            client, topic = order[cursor]
            cursor = (cursor + 1) % TOPICS
            last[topic] += 1
            client.publish(
                topic, json.dumps({"k": last[topic], "t": time.time()}, separators=(",", ":"))
            )
            sent += 1
        await asyncio.sleep(tick)
    await asyncio.gather(*(c.flush(60_000) for c in publishers))
    return last


async def wait_for(condition: Callable[[], bool], timeout: float, *, poll: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll)
    return True


# =========================================================================== worker roles


def _wait_file(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def run_subscribers(args: argparse.Namespace) -> int:
    """``--role subscribers``: subscribers ``first .. first+count-1``; writes
    ``ready-<first>`` once all are subscribed, then, after the publishers' ``published.json``,
    waits until every subscriber has everything (or ``--drain``) and writes
    ``subs-<first>.json`` and ``lat-<first>.f32``."""
    work = Path(args.work)
    indices = range(args.first, args.first + args.count)
    t0 = time.monotonic()
    clients = await connect_all(args.uri, [f"sub-{i}" for i in indices])
    checkers = [Checker(topic_name(i % TOPICS)) for i in indices]
    await subscribe_all(clients, checkers)
    (work / f"ready-{args.first}").write_text(json.dumps({"connect_s": time.monotonic() - t0}))
    published = work / "published.json"
    await asyncio.to_thread(_wait_file, published, args.wait)
    last: dict[str, int] = json.loads(published.read_text())["last"] if published.exists() else {}
    await wait_for(
        lambda: all(c.complete(last.get(c.topic, 0)) for c in checkers), args.drain, poll=0.2
    )
    await close_all(clients)
    result = {
        "subscribers": len(checkers),
        "deliveries": sum(c.deliveries for c in checkers),
        "lost": sum(c.lost(last.get(c.topic, 0)) for c in checkers),
        "duplicated": sum(c.duplicated for c in checkers),
        "out_of_order": sum(c.out_of_order for c in checkers),
        "incomplete_subscribers": sum(not c.complete(last.get(c.topic, 0)) for c in checkers),
        "last_receipt": max((c.last_receipt for c in checkers), default=0.0),
    }
    lat = array.array("f")
    for c in checkers:
        lat.extend(c.latencies)
    (work / f"lat-{args.first}.f32").write_bytes(lat.tobytes())
    (work / f"subs-{args.first}.json").write_text(json.dumps(result))
    return 0


async def run_publishers(args: argparse.Namespace) -> int:
    """``--role publishers``: the 20 publishers; after ``go`` exists, publish, flush, and
    write ``published.json`` (last sequence number per topic, first publish time)."""
    work = Path(args.work)
    clients = await connect_all(args.uri, [f"pub-{p}" for p in range(PUBLISHERS)])
    (work / "ready-publishers").write_text("{}")
    await asyncio.to_thread(_wait_file, work / "go", args.wait)
    start = time.time()
    last = await publish(clients, rate=args.rate, seconds=args.seconds)
    flushed = time.time()
    await close_all(clients)
    out = {"last": last, "start": start, "flushed": flushed, "sent": sum(last.values())}
    (work / "published.json").write_text(json.dumps(out))
    return 0


# =========================================================================== orchestrator


def raise_nofile(needed: int) -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit when ``needed`` exceeds it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        new = hard if hard == resource.RLIM_INFINITY else max(soft, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new != resource.RLIM_INFINITY and new < needed:
            print(f"scale: RLIMIT_NOFILE hard limit {hard} < {needed} needed", flush=True)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


_CLK = os.sysconf("SC_CLK_TCK")


def proc_stats(pid: int) -> tuple[int, int, float]:
    """``(rss_kb, open fds, cpu seconds)`` of a process (zeros once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / _CLK
        rss = int(fields[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, IndexError, ValueError):
        return 0, 0, 0.0
    return rss, fds, cpu


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    return float(values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))])


def _spawn(role: str, args: argparse.Namespace, work: Path, *extra: str) -> subprocess.Popen[bytes]:
    log = open(work / f"{role}-{len(list(work.glob(role + '-*.log')))}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            *("--role", role, "--uri", args.uri, "--work", str(work)),
            *("--rate", str(args.rate), "--seconds", str(args.seconds)),
            *("--drain", str(args.drain), "--wait", str(args.wait), *extra),
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def measure(n: int, args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """One size: a fresh server, ``n`` clients, the publishing, the checks, the figures."""
    from ampsclient_server_stub.harness import ServerProcess

    work = base / f"n{n}"
    work.mkdir(parents=True, exist_ok=True)
    subs = n - PUBLISHERS
    server = ServerProcess(data_dir=work / "server", name="scale", die_with_parent=True)
    server.start()
    assert server.pid is not None
    spid = server.pid
    procs: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any] = {"clients": n, "subscribers": subs, "publishers": PUBLISHERS}
    try:
        result["server_rss_mb_empty"] = round(proc_stats(spid)[0] / 1024, 1)
        args.uri = server.uri()
        t0 = time.monotonic()
        firsts = list(range(0, subs, args.per_process))
        for first in firsts:
            count = min(args.per_process, subs - first)
            procs.append(
                _spawn("subscribers", args, work, "--first", str(first), "--count", str(count))
            )
        pub_proc = _spawn("publishers", args, work)
        procs.append(pub_proc)
        ready = [work / f"ready-{f}" for f in firsts] + [work / "ready-publishers"]
        deadline = time.monotonic() + args.wait
        while not all(p.exists() for p in ready):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(f"clients not ready within {args.wait} s (see {work}/*.log)")
            time.sleep(0.1)
        result["connect_all_s"] = round(time.monotonic() - t0, 2)
        time.sleep(1.0)  # let the connected server settle before the idle sample
        rss, fds, cpu0 = proc_stats(spid)
        result["server_rss_mb_connected"] = round(rss / 1024, 1)
        result["server_fds_connected"] = fds
        client_cpu0 = {p.pid: proc_stats(p.pid)[2] for p in procs}
        (work / "go").touch()
        load0 = os.getloadavg()
        peak_rss, peak_fds = rss, fds
        client_peak_rss: dict[int, int] = {}
        client_cpu1: dict[int, float] = dict(client_cpu0)
        cpu1 = cpu0
        t_go = time.monotonic()
        while any(p.poll() is None for p in procs):
            if time.monotonic() - t_go > args.seconds + args.drain + args.wait:
                raise RuntimeError("clients did not finish")
            r, f, c = proc_stats(spid)
            peak_rss, peak_fds = max(peak_rss, r), max(peak_fds, f)
            cpu1 = max(cpu1, c)
            for p in procs:
                pr, _, pc = proc_stats(p.pid)
                if pr:
                    client_peak_rss[p.pid] = max(client_peak_rss.get(p.pid, 0), pr)
                    client_cpu1[p.pid] = max(client_cpu1[p.pid], pc)
            time.sleep(0.25)
        load1 = os.getloadavg()
        wall = max(time.monotonic() - t_go, 1e-3)
        codes = [p.returncode for p in procs]
        if any(codes):
            raise RuntimeError(f"client processes failed: {codes} (see {work}/*.log)")
        published = json.loads((work / "published.json").read_text())
        parts = [json.loads((work / f"subs-{f}.json").read_text()) for f in firsts]
        lat = array.array("f")
        for f in firsts:
            lat.frombytes((work / f"lat-{f}.f32").read_bytes())
        ordered = sorted(lat)
        deliveries = sum(p["deliveries"] for p in parts)
        span = max(p["last_receipt"] for p in parts) - published["start"]
        offered = published["sent"] * subs / TOPICS
        publish_s = published["flushed"] - published["start"]
        result.update(
            {
                "messages_published": published["sent"],
                "publish_s": round(publish_s, 2),
                "deliveries": deliveries,
                "deliveries_expected": round(offered),
                "deliveries_per_s": round(deliveries / span) if span > 0 else 0,
                "offered_deliveries_per_s": round(offered / args.seconds),
                "latency_ms": {
                    "p50": round(_percentile(ordered, 0.50), 2),
                    "p99": round(_percentile(ordered, 0.99), 2),
                    "max": round(_percentile(ordered, 1.0), 2),
                },
                "lost": sum(p["lost"] for p in parts),
                "duplicated": sum(p["duplicated"] for p in parts),
                "out_of_order": sum(p["out_of_order"] for p in parts),
                "incomplete_subscribers": sum(p["incomplete_subscribers"] for p in parts),
                "server_rss_mb_peak": round(peak_rss / 1024, 1),
                "server_fds_peak": peak_fds,
                # CPU over the whole run from "go" (publishing, delivering, the clients' close)
                "server_cpu_cores": round((cpu1 - cpu0) / wall, 2),
                "client_processes": len(procs),
                "clients_rss_mb_peak": round(sum(client_peak_rss.values()) / 1024, 1),
                "clients_cpu_cores": round(
                    sum(client_cpu1[p] - client_cpu0[p] for p in client_cpu0) / wall, 2
                ),
                "load_average": [round(x, 2) for x in (*load0, *load1)],
            }
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        server.stop()
    return result


def _print(results: list[dict[str, Any]]) -> None:
    print(
        "clients  connect s  deliveries/s (offered)  p50 ms  p99 ms  max ms  lost/dup/ooo"
        "  server RSS MB empty/connected/peak  server fds  server CPU  clients RSS MB  clients CPU"
        "  load 1-min",
        flush=True,
    )
    for r in results:
        lat = r["latency_ms"]
        print(
            f"{r['clients']:>7}  {r['connect_all_s']:>9.1f}  "
            f"{r['deliveries_per_s']:>12} ({r['offered_deliveries_per_s']:>7})  "
            f"{lat['p50']:>6.1f}  {lat['p99']:>6.1f}  {lat['max']:>6.0f}  "
            f"{r['lost']}/{r['duplicated']}/{r['out_of_order']:<6}  "
            f"{r['server_rss_mb_empty']:>10.1f}/{r['server_rss_mb_connected']:.1f}/"
            f"{r['server_rss_mb_peak']:<8.1f}  {r['server_fds_peak']:>10}  "
            f"{r['server_cpu_cores']:>10.2f}  {r['clients_rss_mb_peak']:>13.1f}  "
            f"{r['clients_cpu_cores']:>11.2f}  {r['load_average'][0]:>5.1f}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--role", choices=("orchestrator", "subscribers", "publishers"), default="orchestrator"
    )
    parser.add_argument("--sizes", default="200,500,1000,2000", help="clients per run")
    parser.add_argument("--rate", type=float, default=2000.0, help="messages/s, all topics")
    parser.add_argument("--seconds", type=float, default=20.0, help="publishing time per size")
    parser.add_argument("--per-process", type=int, default=500, help="subscribers a process")
    parser.add_argument("--drain", type=float, default=120.0, help="max wait for deliveries")
    parser.add_argument("--wait", type=float, default=300.0, help="max wait for connections")
    parser.add_argument("--work", default=None)
    parser.add_argument("--uri", default="")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    args = parser.parse_args(argv)
    if args.role == "subscribers":
        return asyncio.run(run_subscribers(args))
    if args.role == "publishers":
        return asyncio.run(run_publishers(args))
    sizes = [int(s) for s in args.sizes.split(",")]
    limits = raise_nofile(max(sizes) + 256)
    print(
        f"scale: RLIMIT_NOFILE {limits}, rate {args.rate:.0f} msgs/s, {args.seconds} s each",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if args.work is None:
            args.work = stack.enter_context(tempfile.TemporaryDirectory(prefix="ampsclient-scale-"))
        base = Path(args.work).resolve()
        for n in sizes:
            results.append(measure(n, args, base))
            _print(results[-1:])
            (base / "scale.json").write_text(json.dumps(results, indent=1))
        print("", flush=True)
        _print(results)
        print(f"scale: figures in {base / 'scale.json'}", flush=True)
    bad = sum(r["lost"] + r["duplicated"] + r["out_of_order"] for r in results)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
