"""Content filtering on ``nvfix`` and ``fix`` against the same fields as ``json`` (issue #28's
bound: nvfix may cost at most 1.5x json).

Two measurements, alternating the types run by run, medians and ranges of 5 (and the median
and range of each run's own ratio to json, the types of a run being measured back to back):

* the server's per-message filter step alone (``decode`` + the compiled filter), in process;
* end to end: a publisher sends ``-n`` messages (half match) to a reference server started in
  a subprocess, a subscriber with the filter receives the matching ones; wall time from the
  first publish to the marker's arrival.

Usage: ``python benchmarks/message_type_filter_bench.py [-n 50000] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import timeit
from typing import Any

from ampsclient import Client
from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.payload import decode

FILTER = "/35 = 'D' AND /38 > 100"
FIELDS = {"35": "D", "55": "IBM", "38": "150", "44": "120.5", "54": "1", "11": "ord-000000"}


def body(message_type: str, i: int) -> str:
    fields = dict(FIELDS, **{"11": f"ord-{i:06d}", "38": "150" if i % 2 == 0 else "50"})
    if message_type == "json":
        return json.dumps({k: (int(v) if k == "38" else v) for k, v in fields.items()})
    return "".join(f"{k}={v}\x01" for k, v in fields.items())


def filter_step(message_type: str) -> float:
    """ns per message of decode + filter on one payload."""
    data = body(message_type, 0).encode()
    predicate = compile_filter(FILTER)
    number = 50_000
    seconds = min(timeit.repeat(lambda: predicate(decode(message_type, data)), number=number))
    return seconds / number * 1e9


def start_server() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "ampsclient_server_stub", "--tcp-port", "0"),
            *("--ws-port", "0", "--no-txlog", "--log-level", "INFO"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "listening tcp://" in line:
            address = line.split("listening tcp://", 1)[1].split()[0]
            port = int(address.rsplit(":", 1)[1])
            return proc, port
    proc.kill()
    raise RuntimeError("the server did not report its tcp port")


def end_to_end(port: int, message_type: str, n: int, run: int) -> float:
    """msgs/s published through a filtered subscription (wall clock, marker-terminated)."""
    topic = f"bench-{message_type}-{run}"
    done = threading.Event()
    marker = body(message_type, n)  # even: matches

    def on_message(message: Any) -> None:
        if message.get_data() == marker:
            done.set()

    uri = f"tcp://127.0.0.1:{port}/amps/{message_type}"
    with Client(f"sub-{topic}") as sub, Client(f"pub-{topic}") as pub:
        sub.connect(uri)
        sub.logon(5000)
        pub.connect(uri)
        pub.logon(5000)
        sub.subscribe(on_message, topic, FILTER)
        bodies = [body(message_type, i) for i in range(n)]
        start = time.perf_counter()
        for data in bodies:
            pub.publish(topic, data)
        pub.publish(topic, marker)
        if not done.wait(120):
            raise RuntimeError("the marker never arrived")
        return n / (time.perf_counter() - start)


def summary(values: list[float], unit: str) -> str:
    low, high = min(values), max(values)
    return f"median {statistics.median(values):,.0f} {unit} (range {low:,.0f}-{high:,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    types = ["json", "nvfix", "fix"]
    step: dict[str, list[float]] = {t: [] for t in types}
    rate: dict[str, list[float]] = {t: [] for t in types}
    proc, port = start_server()
    try:
        for run in range(args.runs):
            order = types if run % 2 == 0 else types[::-1]
            for message_type in order:
                step[message_type].append(filter_step(message_type))
                rate[message_type].append(end_to_end(port, message_type, args.n, run))
    finally:
        proc.kill()
        proc.wait()
    for message_type in types:
        print(f"{message_type:6} filter step: {summary(step[message_type], 'ns/msg')}")
        print(f"{message_type:6} end to end:  {summary(rate[message_type], 'msgs/s')}")
    for message_type in ("nvfix", "fix"):
        cost = statistics.median(step[message_type]) / statistics.median(step["json"])
        speed = statistics.median(rate["json"]) / statistics.median(rate[message_type])
        print(f"{message_type} / json: filter step cost x{cost:.2f}, end-to-end time x{speed:.2f}")
        # each run measured the types back to back: its own ratio is less exposed to the
        # machine's load changing between runs
        costs = [t / j for t, j in zip(step[message_type], step["json"], strict=True)]
        times = [j / t for t, j in zip(rate[message_type], rate["json"], strict=True)]
        print(
            f"{message_type} / json per run: filter step x{statistics.median(costs):.2f} "
            f"(x{min(costs):.2f}-x{max(costs):.2f}), end to end x{statistics.median(times):.2f} "
            f"(x{min(times):.2f}-x{max(times):.2f})"
        )


if __name__ == "__main__":
    main()
