"""Publish throughput with OpenTelemetry instrumentation off, imported, and on (issue #33).

Modes, each run in a fresh process against a minimal sink (benchmarks/sink.py):

* ``none``: ``import ampsclient`` only (OpenTelemetry never imported);
* ``imported``: ``ampsclient.tracing`` and the OpenTelemetry API imported, client not
  instrumented (the ``observer is None`` check on the Python path; the C lane unchanged);
* ``imported-sdk``: the same plus the OpenTelemetry SDK's trace and metrics modules (a bigger
  heap: what an application that configures the SDK but leaves this client alone pays);
* ``enabled``: ``instrument(client)`` with an SDK ``TracerProvider`` and ``MeterProvider``
  (spans are made and ended; no exporter, so the cost measured is ours and the SDK's);
* ``sampled``: the same with ``TraceIdRatioBased(0.01)``: 1 % of the spans are recorded.

Prints the median of 5 runs per mode (msgs/s). ``AMPSCLIENT_PUREPYTHON=1`` measures the pure
Python publish path. Usage: ``python benchmarks/tracing_bench.py [-n 200000] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

DATA = '{"id":1,"sym":"IBM","px":101.5}'


def one_run(mode: str, uri: str, n: int) -> float:
    import ampsclient

    client = ampsclient.Client(f"otel-bench-{mode}")
    if mode == "imported":  # ampsclient.tracing and the OpenTelemetry API, not instrumented
        for module in ("opentelemetry.trace", "opentelemetry.metrics", "ampsclient.tracing"):
            importlib.import_module(module)
    if mode not in ("none", "imported"):
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider

        from ampsclient.tracing import instrument

        if mode == "enabled":
            instrument(client, tracer_provider=TracerProvider(), meter_provider=MeterProvider())
        if mode == "sampled":  # 1 % of traces recorded: the others are non-recording spans
            from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

            provider = TracerProvider(sampler=TraceIdRatioBased(0.01))
            instrument(client, tracer_provider=provider, meter_provider=MeterProvider())
    client.connect(uri)
    client.logon(10000)
    publish = client.publish
    start = time.perf_counter()
    for _ in range(n):
        publish("orders", DATA)
    client.flush(120000)
    took = time.perf_counter() - start
    client.close()
    return n / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--modes", default="none,imported,imported-sdk,enabled,sampled")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "URI"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(one_run(args.child[0], args.child[1], args.n))
        return
    from sink import SinkServer

    with SinkServer() as sink:
        modes = tuple(args.modes.split(","))
        results: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(args.runs):  # interleaved, so drift of the machine hits every mode
            for mode, got in results.items():
                out = subprocess.run(
                    [sys.executable, __file__, "-n", str(args.n), "--child", mode, sink.uri()],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=300,
                )
                got.append(float(out.stdout.strip()))
    pure = " (AMPSCLIENT_PUREPYTHON=1)" if os.environ.get("AMPSCLIENT_PUREPYTHON") else ""
    base = statistics.median(results["none"])
    for mode, got in results.items():
        med = statistics.median(got)
        spread = f"{min(got) / 1e3:.0f}-{max(got) / 1e3:.0f} k"
        print(f"{mode:9s}{pure}: median {med / 1e3:.0f} k msgs/s ({spread}), {med / base:.2f}x")


if __name__ == "__main__":
    main()
