"""Ours vs the official AMPS Python client, same servers, one run: prints msgs/s and ratios.

Paths measured (each client in turn, against the same server process):

1. publish: N small JSON publishes then ``flush`` against a minimal sink server;
2. publish end to end through our reference server (``python -m ampsclient_server_stub``);
3. receive: a pumping server answers a subscribe with N ``p`` frames; msgs/s to a handler.

Usage: ``python benchmarks/publish_vs_official.py [-n 300000]``. The official client
(``pip install amps-python-client``) is a black-box peer: without it only our figures print.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.dirname(__file__))

from sink import PUMP_SUB_ID, PumpServer, SinkServer

import ampsclient

try:
    import AMPS  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - optional peer
    AMPS = None

DATA = '{"id":1,"sym":"IBM","px":101.5}'


def publish_run(make_client: Callable[[str], object], uri: str, n: int, name: str) -> float:
    client = make_client(name)
    client.connect(uri)  # type: ignore[attr-defined]
    client.logon(10000)  # type: ignore[attr-defined]
    publish = client.publish  # type: ignore[attr-defined]
    data = DATA  # the same str for both clients (what a migrated script passes)
    start = time.perf_counter()
    for _ in range(n):
        publish("orders", data)
    client.flush(120000)  # type: ignore[attr-defined]
    took = time.perf_counter() - start
    (getattr(client, "close", None) or client.disconnect)()  # type: ignore[attr-defined]
    return n / took


def receive_run(make_client: Callable[[str], object], uri: str, n: int, name: str) -> float:
    client = make_client(name)
    client.connect(uri)  # type: ignore[attr-defined]
    client.logon(10000)  # type: ignore[attr-defined]
    count = [0]
    done = threading.Event()

    def handler(message: object) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    start = time.perf_counter()
    client.subscribe(handler, "orders", sub_id=PUMP_SUB_ID)  # type: ignore[attr-defined]
    if not done.wait(120):
        raise SystemExit(f"{name}: only {count[0]} of {n} messages arrived")
    took = time.perf_counter() - start
    (getattr(client, "close", None) or client.disconnect)()  # type: ignore[attr-defined]
    return n / took


@contextlib.contextmanager
def reference_server() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ampsclient_server_stub", "--tcp-port", "0", "--ws-port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        uri = None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "listening" in line and "tcp://" in line:
                hostport = line.split("tcp://", 1)[1].split()[0].rstrip("/")
                uri = f"tcp://{hostport}/amps/json"
                break
        if uri is None:
            raise SystemExit("the reference server did not start")
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        yield uri
    finally:
        proc.terminate()
        proc.wait(10)


def report(label: str, ours: float, official: float | None) -> None:
    if official is None:
        print(f"{label:<44} ours {ours:>11,.0f} msgs/s   (official client not installed)")
    else:
        print(
            f"{label:<44} ours {ours:>11,.0f} msgs/s   official {official:>11,.0f} msgs/s"
            f"   ratio {ours / official:5.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=300_000, help="messages per run")
    parser.add_argument(
        "--paths",
        default="publish,e2e,receive",
        help="comma list of the paths to run: publish, e2e, receive",
    )
    args = parser.parse_args()
    n = args.n
    paths = set(args.paths.split(","))
    ours = ampsclient.Client
    theirs = AMPS.Client if AMPS is not None else None
    print(f"{n:,} messages per run; python {sys.version.split()[0]}")

    if "publish" in paths:
        with SinkServer() as sink:
            a = publish_run(ours, sink.uri(), n, "ours-pub")
            b = publish_run(theirs, sink.uri(), n, "official-pub") if theirs else None
        report("publish + flush -> minimal sink", a, b)

    if "e2e" in paths:  # a fresh server each: the second client would find a longer journal
        with reference_server() as uri:
            a = publish_run(ours, uri, n, "ours-pub-e2e")
        b = None
        if theirs:
            with reference_server() as uri:
                b = publish_run(theirs, uri, n, "official-pub-e2e")
        report("publish + flush -> reference server", a, b)

    if "receive" in paths:
        with PumpServer(n) as pump:
            a = receive_run(ours, pump.uri(), n, "ours-sub")
        with PumpServer(n) as pump:
            b = receive_run(theirs, pump.uri(), n, "official-sub") if theirs else None
        report("receive: pumping server -> handler", a, b)


if __name__ == "__main__":
    main()
