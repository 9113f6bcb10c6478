"""The cost of a grouped view on publishes to its underlying SOW topic (issue #30's bound: a
publish to a topic with one grouped view costs at most 2x a publish to the same topic without).

In process, no sockets: a broker (in-memory SOW topic ``orders`` keyed by ``/id``) takes ``-n``
publishes (``--keys`` distinct orders over ``--groups`` symbols, so most publishes replace an
order: the view removes the old values from a group and adds the new ones); once without a
view, once with ``by_sym`` (COUNT, SUM, AVG, MIN, MAX over ``/sym``). The two alternate run by
run; medians and ranges of ``--runs``. Each run is timed twice over the same publishes: the
process's CPU time (``process_time``: other work on a shared machine inflates it less) and the
wall-clock time (``perf_counter``: what a publisher waits, throughput in publishes/s).

Usage: ``python benchmarks/view_bench.py [-n 50000] [--runs 5] [--keys 10000] [--groups 100]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from ampsclient.protocol.header import encode_header
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.broker import Broker
from ampsclient_server_stub.testing.session import RecordingSession

VIEW = """<View><Name>by_sym</Name><MessageType>json</MessageType>
  <UnderlyingTopic>orders</UnderlyingTopic>
  <Projection><Field>/sym</Field><Field>COUNT(/id) AS /orders</Field>
    <Field>SUM(/qty) AS /qty</Field><Field>AVG(/px) AS /avg_px</Field>
    <Field>MIN(/px) AS /low</Field><Field>MAX(/px) AS /high</Field></Projection>
  <Grouping><Field>/sym</Field></Grouping></View>"""


def config(view: bool) -> str:
    return f"""<AMPSConfig><Name>bench</Name><SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  {VIEW if view else ""}</SOW></AMPSConfig>"""


def frames(n: int, keys: int, groups: int) -> list[bytes]:
    head = encode_header({"c": "p", "t": "orders"})
    out = []
    for i in range(n):
        doc = {"id": i % keys, "sym": f"S{i % groups}", "qty": i % 97, "px": 100 + (i % 13) / 4}
        out.append(head + json.dumps(doc).encode())
    return out


def run(view: bool, data: list[bytes]) -> tuple[float, float]:
    """Microseconds per publish: (CPU time, wall-clock time)."""
    broker = Broker(parse_config(config(view)))
    try:
        conn = broker.connect(RecordingSession())
        broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": "bench"}))
        start = time.process_time()  # CPU time: the shared machine's load does not count
        wall = time.perf_counter()
        for frame in data:
            broker.handle(conn, frame)
        wall = time.perf_counter() - wall
        elapsed = time.process_time() - start
        if view:
            sow = broker.sow_topic("by_sym")
            assert sow is not None and len(sow) > 0
        return elapsed / len(data) * 1e6, wall / len(data) * 1e6
    finally:
        broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=100)
    args = parser.parse_args()
    data = frames(args.n, args.keys, args.groups)
    plain: list[tuple[float, float]] = []
    viewed: list[tuple[float, float]] = []
    for _ in range(args.runs):
        plain.append(run(False, data))
        viewed.append(run(True, data))
    for clock, at in (("CPU", 0), ("wall-clock", 1)):
        print(f"{clock} time, {args.runs} runs of {args.n} publishes:")
        medians = []
        for label, runs in (("no view", plain), ("one grouped view", viewed)):
            values = [r[at] for r in runs]
            medians.append(statistics.median(values))
            line = (
                f"  {label:18} {medians[-1]:8.2f} us/publish ({min(values):.2f}-{max(values):.2f})"
            )
            if at == 1:  # throughput: publishes per second of wall-clock time
                rates = [1e6 / v for v in values]
                line += (
                    f"  {statistics.median(rates):9.0f} publishes/s "
                    f"({min(rates):.0f}-{max(rates):.0f})"
                )
            print(line)
        print(f"  ratio (medians): {medians[1] / medians[0]:.2f}x")


if __name__ == "__main__":
    main()
