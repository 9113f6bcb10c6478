"""Replication compression: bytes on the wire and replication time, with and without it.

A source instance replicates ``-n`` realistic JSON orders (the generator of
``tests/replication/test_compression.py``: 12 fields, about 300 bytes each) to one receiver
through a loopback proxy that counts every byte crossing it, both directions (records, acks,
heartbeats); the handshake is left out. Two instances in this process (``ServerThread``),
journal without fsync. Each mode runs ``--runs`` times; medians are printed.

Measured: bytes per message on the wire; the time from the first publish until the receiver
has applied the last message (the publisher publishes as fast as it can, so this is the
replication throughput with the CPU of 2 cores shared by publisher, source and receiver).

Usage::

    python benchmarks/replication_compression_bench.py [-n 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "replication"))

from test_compression import orders, receiver, source

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.replication.protocol import RecordCompressor, RecordDecompressor
from ampsclient_server_stub.testing.proxy import LoopbackProxy


def applied(thread: ServerThread) -> int:
    status = thread.call(lambda: thread.server.replication_admin("status"))
    return sum(int(i["applied"]) for i in status["inbound"])


def run(count: int, compression: str | None, docs: list[str]) -> tuple[int, float]:
    """``(bytes on the wire, seconds)`` of one replication of ``docs``."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        port = free_port()
        (base / "r").mkdir()
        (base / "s").mkdir()
        rcv = ServerThread(parse_config(receiver("R", port), base_dir=base / "r"), fsync="never")
        rcv.start()
        proxy = LoopbackProxy("127.0.0.1", port).start()
        extra = f"<Compression>{compression}</Compression>" if compression else ""
        src_config = parse_config(source({"R": (proxy.port, extra)}), base_dir=base / "s")
        src = ServerThread(src_config, fsync="never").start()
        try:
            deadline = time.monotonic() + 10
            while not any(
                d["connected"]
                for d in src.call(lambda: src.server.replication_admin("status"))["destinations"]
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the link did not come up")
                time.sleep(0.01)
            handshake = proxy.bytes
            start = time.perf_counter()
            with Client("order-feed") as client:
                client.connect(src.uri("tcp", "json"))
                client.logon(5000)
                for doc in docs:
                    client.publish("orders", doc)
                client.flush(30_000)
            while applied(rcv) < count:
                time.sleep(0.002)
            elapsed = time.perf_counter() - start
            return proxy.bytes - handshake, elapsed
        finally:
            src.stop()
            proxy.stop()
            rcv.stop()


def codec_cost(docs: list[str], batch: int = 500) -> tuple[float, float]:
    """Microseconds per message to compress and to decompress, in ``rrec``-sized batches."""
    records = [
        (i + 1, 42, i + 1, "p", "orders", d.encode(), {"mt": "json"}) for i, d in enumerate(docs)
    ]
    batches = [records[i : i + batch] for i in range(0, len(records), batch)]
    compressor = RecordCompressor("zlib")
    start = time.perf_counter()
    chunks = [compressor.compress(b) for b in batches]
    packed = time.perf_counter() - start
    decompressor = RecordDecompressor("zlib", max_size=1 << 28)
    start = time.perf_counter()
    for chunk in chunks:
        decompressor.records(chunk)
    unpacked = time.perf_counter() - start
    return packed / len(docs) * 1e6, unpacked / len(docs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    logging.disable(logging.CRITICAL)  # the open instances' warnings, the proxy's teardown
    docs = orders(options.n)
    payload = sum(len(d) for d in docs)
    print(f"{options.n} orders, {payload / options.n:.0f} payload bytes each on average")
    results: dict[str, tuple[float, float]] = {}
    for mode in (None, "zlib"):
        sizes, times = [], []
        for _ in range(options.runs):
            size, seconds = run(options.n, mode, docs)
            sizes.append(size)
            times.append(seconds)
        size = statistics.median(sizes)
        seconds = statistics.median(times)
        results[mode or "none"] = (size, seconds)
        print(
            f"compression {mode or 'none':>4}: {size / options.n:7.1f} bytes/msg on the wire "
            f"({size / 1e6:.2f} MB), {options.n / seconds:8.0f} msgs/s replicated "
            f"(runs: {', '.join(f'{s / options.n:.1f}' for s in sizes)} bytes/msg; "
            f"{', '.join(f'{t:.2f}' for t in times)} s)"
        )
    ratio = results["zlib"][0] / results["none"][0]
    print(f"zlib / none bytes: {ratio:.3f} ({1 / ratio:.1f}x fewer bytes)")
    costs = [codec_cost(docs) for _ in range(options.runs)]
    print(
        f"zlib CPU per message: compress {statistics.median(c[0] for c in costs):.2f} us, "
        f"decompress {statistics.median(c[1] for c in costs):.2f} us (medians)"
    )


if __name__ == "__main__":
    main()
