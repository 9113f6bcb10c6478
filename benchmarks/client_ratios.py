"""The client paths of issue #14, ours vs the official client, against both peers in one run.

Paths (each client in turn against a fresh peer process):

* ``publish``: ``Client.publish`` x N, then ``flush`` -> sink;
* ``ha-memory``: ``HAClient`` with its default memory store, publish x N, ``publish_flush`` -> sink;
* ``ha-path``: ``HAClient(name, "<path>")``, the file store named by a path with its default
  durability, publish x N, ``publish_flush`` -> sink (the official one gets its own path);
* ``receive``: a subscribe answered with N deliveries -> a handler that counts;
* ``bookmark``: a bookmark subscription answered with N deliveries -> a handler that discards.

Peers: ``c`` (``benchmarks/cpeer.c``, well under 0.1 µs per message) and ``python``
(``benchmarks/sink.py``, about 1 µs per message, which throttles the official client).

Usage: ``python benchmarks/client_ratios.py [-n 300000] [--runs 5] [--peers c,python]``.
Prints each run, then per path and peer the medians, ranges and the median of the ratios,
and the client process's CPU time per message (``time.process_time``, connect and logon
included), which a busy machine stretches less than the wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(__file__))

from bookmark_vs_official import official as official_bookmark, ours as ours_bookmark
from cpeer import CPumpServer, CSinkServer
from ha_vs_official import tempdir
from publish_vs_official import publish_run, receive_run
from sink import PumpServer, SinkServer

import ampsclient
from ampsclient.sync import HAClient

try:
    import AMPS  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    AMPS = None

DATA = '{"id":1,"sym":"IBM","px":101.5}'
PEERS = {"c": (CSinkServer, CPumpServer), "python": (SinkServer, PumpServer)}


def ha_run(client: object, uri: str, n: int) -> float:
    client.get_server_chooser().add(uri)  # type: ignore[attr-defined]
    client.connect_and_logon()  # type: ignore[attr-defined]
    publish = client.publish  # type: ignore[attr-defined]
    start = time.perf_counter()
    for _ in range(n):
        publish("orders", DATA)
    client.publish_flush(300_000)  # type: ignore[attr-defined]
    took = time.perf_counter() - start
    client.close()  # type: ignore[attr-defined]
    return n / took


def official_ha(name: str, path: str | None) -> object:
    client = AMPS.HAClient(name) if path is None else AMPS.HAClient(name, path)
    client.set_server_chooser(AMPS.DefaultServerChooser())
    return client


def paths(n: int, work: str) -> dict[str, tuple[Callable[[str], float], Callable[[str], float]]]:
    """Each path: (ours(uri) -> msgs/s, official(uri) -> msgs/s)."""

    def store_path(who: str) -> str:
        return os.path.join(work, f"{who}-{time.monotonic_ns()}.store")

    return {
        "publish": (
            lambda uri: publish_run(ampsclient.Client, uri, n, "ours-pub"),
            lambda uri: publish_run(AMPS.Client, uri, n, "official-pub"),
        ),
        "ha-memory": (
            lambda uri: ha_run(HAClient("ours-ha-mem"), uri, n),
            lambda uri: ha_run(official_ha("off-ha-mem", None), uri, n),
        ),
        "ha-path": (
            lambda uri: ha_run(HAClient("ours-ha-path", store_path("ours")), uri, n),
            lambda uri: ha_run(official_ha("off-ha-path", store_path("official")), uri, n),
        ),
        "receive": (
            lambda uri: receive_run(ampsclient.Client, uri, n, "ours-sub"),
            lambda uri: receive_run(AMPS.Client, uri, n, "official-sub"),
        ),
        "bookmark": (
            lambda uri: ours_bookmark(uri, n),
            lambda uri: official_bookmark(uri, n),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=300_000, help="messages per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--peers", default="c,python")
    parser.add_argument("--paths", default="publish,ha-memory,ha-path,receive,bookmark")
    args = parser.parse_args()
    if AMPS is None:
        raise SystemExit("the official client (amps-python-client) is needed for ratios")
    chosen = args.paths.split(",")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    cpus: dict[tuple[str, str], list[tuple[float, float]]] = {}  # process CPU ns per message
    print(
        f"{args.n:,} messages per run, {args.runs} runs; python {sys.version.split()[0]}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    with tempdir() as work:
        table = paths(args.n, work)
        for run in range(1, args.runs + 1):
            for peer in args.peers.split(","):
                sink, pump = PEERS[peer]
                for name in chosen:
                    ours, official = table[name]
                    make = (lambda: pump(args.n)) if name in ("receive", "bookmark") else sink
                    with make() as server:
                        cpu = time.process_time()
                        a = ours(server.uri())
                        cpu_a = (time.process_time() - cpu) / args.n * 1e9
                    with make() as server:
                        cpu = time.process_time()
                        b = official(server.uri())
                        cpu_b = (time.process_time() - cpu) / args.n * 1e9
                    results.setdefault((name, peer), []).append((a, b))
                    cpus.setdefault((name, peer), []).append((cpu_a, cpu_b))
                    print(
                        f"run {run} {peer:<6} {name:<10} ours {a:>11,.0f}  "
                        f"official {b:>11,.0f}  ratio {a / b:5.2f}   CPU ns/msg ours "
                        f"{cpu_a:5.0f} official {cpu_b:5.0f} ratio {cpu_b / cpu_a:5.2f}",
                        flush=True,
                    )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    print(
        "\npath       peer    ours median (range)              official median (range)"
        "          ratio median (range)"
    )
    for (name, peer), pairs in results.items():
        ours_v = [a for a, _ in pairs]
        off_v = [b for _, b in pairs]
        ratios = [a / b for a, b in pairs]
        print(
            f"{name:<10} {peer:<6}  {statistics.median(ours_v):>10,.0f} "
            f"({min(ours_v) / 1e6:.2f}-{max(ours_v) / 1e6:.2f}M)   "
            f"{statistics.median(off_v):>10,.0f} ({min(off_v) / 1e6:.2f}-{max(off_v) / 1e6:.2f}M)"
            f"   {statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )
    print("\nCPU of the client process per message (ns; busy machines stretch wall time more)")
    for (name, peer), pairs in cpus.items():
        ratios = [b / a for a, b in pairs]
        print(
            f"{name:<10} {peer:<6}  ours {statistics.median([a for a, _ in pairs]):6.0f}  "
            f"official {statistics.median([b for _, b in pairs]):6.0f}  "
            f"ratio {statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()
