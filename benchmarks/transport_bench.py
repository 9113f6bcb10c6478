"""tcp:// vs ws:// through the reference server, our client: publish + flush, and delivery.

The server runs in its own process (``--no-txlog``: the transports are what is measured).
For each transport: N publishes then ``flush`` (msgs/s), then N publishes from a tcp://
client to a topic the measured client subscribes to (msgs/s until the last one arrives).

Usage: ``python benchmarks/transport_bench.py [-n 100000]``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ampsclient import Client, Message

DATA = '{"id":1,"sym":"IBM","px":101.5}'


@contextmanager
def server() -> Iterator[dict[str, int]]:
    args = ["--tcp-port", "0", "--ws-port", "0", "--no-txlog"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ampsclient_server_stub", *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            m = re.search(r"listening tcp://127\.0\.0\.1:(\d+) ws://127\.0\.0\.1:(\d+)", line)
            if m:
                yield {"tcp": int(m.group(1)), "ws": int(m.group(2))}
                return
        raise SystemExit("the server did not start")
    finally:
        proc.kill()
        proc.wait(5)


def publish(uri: str, n: int, name: str) -> float:
    with Client(name) as client:
        client.connect(uri)
        client.logon(5000)
        start = time.perf_counter()
        for _ in range(n):
            client.publish("bench-pub", DATA)
        client.flush(120_000)
        return n / (time.perf_counter() - start)


def receive(uri: str, feed: str, n: int, name: str) -> float:
    done = threading.Event()
    count = [0]

    def handler(message: Message) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    with Client(name) as sub, Client(name + "-feed") as pub:
        sub.connect(uri)
        sub.logon(5000)
        sub.subscribe(handler, "bench-sub")
        pub.connect(feed)
        pub.logon(5000)
        start = time.perf_counter()
        for _ in range(n):
            pub.publish("bench-sub", DATA)
        if not done.wait(300):
            raise SystemExit(f"{name}: {count[0]} of {n} arrived")
        return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=100_000)
    n = parser.parse_args().n
    with server() as ports:
        feed = f"tcp://127.0.0.1:{ports['tcp']}/amps/json"
        for kind in ("tcp", "ws"):
            uri = f"{kind}://127.0.0.1:{ports[kind]}/amps/json"
            p = publish(uri, n, f"bench-{kind}-pub")
            r = receive(uri, feed, n, f"bench-{kind}-sub")
            print(f"{kind}://  publish + flush {p:>10,.0f} msgs/s   delivered {r:>10,.0f} msgs/s")


if __name__ == "__main__":
    main()
