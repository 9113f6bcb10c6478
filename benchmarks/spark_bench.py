"""Spark data source throughput: rows/s of a batch write and a batch read, 1 and 2 partitions,
and the client's own replay rate of the same topic.

For each run and partition count P: write ``--count`` rows (``spark.range`` -> one JSON
``data`` column) to a fresh topic with ``df.write.format("amps")``, then read that topic back
with ``spark.read.format("amps")`` (all columns, aggregated so that every row crosses into the
JVM), then replay the same topic with a plain :class:`~ampsclient.client.AsyncClient` and a
counting handler, with the subscription options a read of those columns uses (a bookmark
range up to NOW, server times). Write and read timings include Spark's planning and task
scheduling; the write includes the final ``publish_flush`` (every row persisted). The figures
are the medians over ``--runs`` runs (each run on fresh topics).

Each record also has the CPU per row of each kind of process during the write and the read
(``/proc``: the reference server, Spark's JVM, its Python workers, this driver), since wall
figures on a shared 2-core machine move with the load. ``--schema DDL`` reads with a schema
instead of the default columns (without ``timestamp`` the server sends no times).

``--baseline REV`` measures the Spark data source of another revision in the same invocation:
a copy of this tree's packages gets ``ampsclient/spark`` of ``REV`` (``git archive``; client,
server and C extension stay the same), and this script runs once per tree in child processes
(baseline first, then this tree), ``--rounds`` times alternately, each child doing ``--runs``
runs. Each child starts its own SparkSession and reference server. ``--scope all`` takes the
client and the reference server of ``REV`` too (their C extensions built in the copy).

Usage::

    python benchmarks/spark_bench.py                      # 1,000,000 rows, P = 1 and 2
    python benchmarks/spark_bench.py --count 200000 --runs 5
    python benchmarks/spark_bench.py --count 200000 --runs 5 --baseline 3f65082
    python benchmarks/spark_bench.py --uri tcp://host:9007/amps/json

Without ``--uri`` a reference server subprocess is started (``--fsync`` passed through).
Needs ``pip install 'ampsclient[spark]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="rows per run")
    parser.add_argument("--partitions", default="1,2", help="comma list of partition counts")
    parser.add_argument("--runs", type=int, default=1, help="runs per partition count")
    parser.add_argument("--uri", default=None, help="an AMPS server (default: start one)")
    parser.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--baseline", default=None, help="git revision to compare with")
    parser.add_argument(
        "--scope",
        default="spark",
        choices=("spark", "all"),
        help="what --baseline takes from REV: the Spark data source, or client and server too",
    )
    parser.add_argument("--rounds", type=int, default=1, help="alternations with --baseline")
    parser.add_argument("--repo", default=str(ROOT), help="the git repository of --baseline")
    parser.add_argument("--json", default=None, help="write the raw results here")
    parser.add_argument(
        "--stream",
        type=int,
        default=0,
        help="also time a streaming read in micro-batches of at most this many rows",
    )
    parser.add_argument(
        "--schema",
        default=None,
        help="read with this schema (DDL) instead of the default columns; the read aggregates "
        "the columns it has of data, sequence and timestamp",
    )
    parser.add_argument(
        "--executor",
        action="store_true",
        help="time the executor's read function outside Spark (rows/s and CPU per row)",
    )
    return parser.parse_args(argv)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of the live processes under ``root`` (Linux ``/proc``),
    by kind: ``server`` (the reference server), ``jvm`` (Spark's JVM), ``workers`` (Spark's
    Python daemons and workers). Processes that already exited are not counted."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out = {"server": 0.0, "jvm": 0.0, "workers": 0.0}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"ampsclient_server_stub" in cmd:
            out["server"] += stats[pid][1]
        elif b"java" in cmd.split(b"\0", 1)[0]:
            out["jvm"] += stats[pid][1]
        elif b"pyspark" in cmd:
            out["workers"] += stats[pid][1]
    return out


class CpuMeter:
    """CPU per row of each kind of process over one phase (``with`` block)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.per_row: dict[str, float] = {}

    def __enter__(self) -> CpuMeter:
        self.start = tree_cpu(os.getpid())
        self.own = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        end = tree_cpu(os.getpid())
        self.per_row = {k: (end[k] - self.start[k]) / self.rows * 1e6 for k in end}
        self.per_row["driver"] = (time.process_time() - self.own) / self.rows * 1e6


async def _count_replay(uri: str, topic: str, options: str) -> int:
    from ampsclient.client import AsyncClient
    from ampsclient.command import Command

    client = AsyncClient(f"bench-replay-{uuid.uuid4().hex[:6]}")
    await client.connect_and_logon(uri)
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    count = 0

    def handler(message: Any) -> None:
        nonlocal count
        if message.command == "ack":
            if not done.done():
                done.set_result(None)
        else:
            count += 1

    cmd = (
        Command("subscribe")
        .set_topic(topic)
        .set_bookmark("[0:0|1|]")
        .set_options(options)
        .add_ack_type("completed")
    )
    await client.execute_async(cmd, handler)
    await done
    await client.close()
    return count


def client_replay_rate(uri: str, topic: str, expected: int, *, timed: bool = True) -> float:
    """Messages/s of our client replaying ``topic`` with a counting handler (with server
    times when the read has the ``timestamp`` column)."""
    options = "timestamp,bookmark_not_found=fail" if timed else "bookmark_not_found=fail"
    t0 = time.perf_counter()
    got = asyncio.run(_count_replay(uri, topic, options))
    took = time.perf_counter() - t0
    if got != expected:
        raise SystemExit(f"client replay got {got} messages, expected {expected}")
    return expected / took


def stream_seconds(spark: Any, uri: str, topic: str, partitions: int, n: int, rows: int) -> float:
    """Seconds for a streaming query (``trigger(availableNow=True)``, micro-batches of at most
    ``rows`` rows, a ``noop`` sink) to take in the whole topic."""
    with tempfile.TemporaryDirectory(prefix="spark-bench-chk-") as checkpoint:
        t0 = time.perf_counter()
        query = (
            spark.readStream.format("amps")
            .option("uri", uri)
            .option("topic", topic)
            .option("numPartitions", partitions)
            .option("maxRowsPerBatch", rows)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        took = time.perf_counter() - t0
        got = sum(p["numInputRows"] for p in query.recentProgress)
    if got != n:
        raise SystemExit(f"the stream read {got} rows, expected {n}")
    return took


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Runs in this process: returns one record per (run, partitions)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession, functions as F

    from ampsclient.spark import register
    from ampsclient_server_stub.harness import ServerProcess

    results: list[dict[str, Any]] = []
    with ExitStack() as stack:
        uri = args.uri
        if uri is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-bench-"))
            server = ServerProcess(data_dir=data_dir, extra_args=["--fsync", args.fsync])
            stack.enter_context(server)
            uri = server.uri()
        spark = (
            SparkSession.builder.master(args.master)
            .appName("ampsclient-spark-bench")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        # warm up: JVM, Python workers, code paths
        warm = f"bench-warm-{uuid.uuid4().hex[:6]}"
        spark.range(1000).select(F.to_json(F.struct("id")).alias("data")).write.format(
            "amps"
        ).option("uri", uri).option("topic", warm).mode("append").save()
        spark.read.format("amps").option("uri", uri).option("topic", warm).load().count()

        n = args.count
        for run in range(args.runs):
            for p in (int(x) for x in args.partitions.split(",")):
                topic = f"bench-{p}-{uuid.uuid4().hex[:6]}"
                rows = spark.range(0, n, numPartitions=p).select(
                    F.to_json(
                        F.struct(
                            F.col("id"),
                            F.concat(F.lit("SYM"), (F.col("id") % 50).cast("string")).alias("sym"),
                            (F.col("id") % 100 + 1).alias("qty"),
                            (F.col("id") % 1000 / 10).alias("px"),
                        )
                    ).alias("data")
                )
                t0 = time.perf_counter()
                with CpuMeter(n) as write_cpu:
                    rows.write.format("amps").option("uri", uri).option("topic", topic).mode(
                        "append"
                    ).save()
                write_s = time.perf_counter() - t0
                reader = spark.read.format("amps")
                if args.schema:
                    reader = reader.schema(args.schema)
                reader = reader.option("uri", uri).option("topic", topic)
                df = reader.option("numPartitions", p).load()
                aggs = [F.count("*").alias("n")]
                if "data" in df.columns:
                    aggs.append(F.sum(F.length("data")).alias("bytes"))
                aggs += [F.max(c).alias(c) for c in ("timestamp", "sequence") if c in df.columns]
                t0 = time.perf_counter()
                with CpuMeter(n) as read_cpu:
                    got = df.agg(*aggs).collect()[0]
                read_s = time.perf_counter() - t0
                if got.n != n:
                    raise SystemExit(f"read {got.n} rows, expected {n}")
                timed = args.schema is None or "timestamp" in df.columns
                replay = client_replay_rate(uri, topic, n, timed=timed)
                record = {
                    "run": run,
                    "partitions": p,
                    "write": n / write_s,
                    "read": n / read_s,
                    "client_replay": replay,
                    "load": os.getloadavg()[0],
                    "write_cpu_us": write_cpu.per_row,
                    "read_cpu_us": read_cpu.per_row,
                }
                if args.stream:
                    record["stream"] = n / stream_seconds(spark, uri, topic, p, n, args.stream)
                print(json.dumps(record), flush=True)
                results.append(record)
    return results


def measure_executor(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The read function a Spark task runs (``AMPSBatchReader.read``), called here in this
    process without Spark: wall rows/s and this process's CPU per row (both threads)."""
    import json as _json

    from ampsclient.spark.datasource import AMPSBatchReader, AMPSDataSource, ReplayPartition
    from ampsclient.stores.publish import MemoryPublishStore
    from ampsclient.sync import HAClient
    from ampsclient_server_stub.harness import ServerProcess

    results: list[dict[str, Any]] = []
    with ExitStack() as stack:
        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-bench-"))
        server = ServerProcess(data_dir=data_dir, extra_args=["--fsync", args.fsync])
        with server:
            uri, topic, n = server.uri(), "bench-executor", args.count
            with HAClient("bench-executor-pub", MemoryPublishStore()) as client:
                client.get_server_chooser().add(uri)
                client.connect_and_logon()
                for i in range(n):
                    doc = {"id": i, "sym": f"SYM{i % 50}", "qty": i % 100 + 1, "px": i % 1000 / 10}
                    client.publish(topic, _json.dumps(doc))
                client.publish_flush(120_000)
            options = {"uri": uri, "topic": topic}
            schema = AMPSDataSource(options).schema()
            for run in range(args.runs):
                reader = AMPSBatchReader(options, schema)  # type: ignore[arg-type]
                t0, c0 = time.perf_counter(), time.process_time()
                got = 0
                for item in reader.read(ReplayPartition(0, "[0:0|1|]")):
                    got += getattr(item, "num_rows", 1)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                if got != n:
                    raise SystemExit(f"read {got} rows, expected {n}")
                record = {
                    "run": run,
                    "partitions": 1,
                    "read": n / wall,
                    "cpu_us_per_row": cpu / n * 1e6,
                    "client_replay": client_replay_rate(uri, topic, n),
                    "load": os.getloadavg()[0],
                }
                print(json.dumps(record), flush=True)
                results.append(record)
    return results


def _median(records: list[dict[str, Any]], p: int, key: str) -> tuple[float, float, float]:
    values = [r[key] for r in records if r["partitions"] == p]
    return statistics.median(values), min(values), max(values)


def report(label: str, records: list[dict[str, Any]]) -> None:
    """Print medians (and ranges) per partition count."""
    print(f"\n{label}: medians over {len(records)} record(s) [min-max]")
    if "cpu_us_per_row" in records[0]:
        read = _median(records, 1, "read")
        cpu = _median(records, 1, "cpu_us_per_row")
        replay = _median(records, 1, "client_replay")
        print(
            f"executor read {read[0]:,.0f} rows/s [{read[1]:,.0f}-{read[2]:,.0f}], "
            f"CPU {cpu[0]:.2f} us/row [{cpu[1]:.2f}-{cpu[2]:.2f}], "
            f"client replay {replay[0]:,.0f}/s"
        )
        return
    stream = "stream" in records[0]
    head = f"{'P':>3} {'write rows/s':>24} {'read rows/s':>24} {'client replay/s':>24}"
    print(head + (f" {'stream rows/s':>24}" if stream else "") + f" {'ratio':>6}")
    for p in sorted({r["partitions"] for r in records}):
        cells = []
        for key in ("write", "read", "client_replay", "stream"):
            if key in records[0]:
                med, lo, hi = _median(records, p, key)
                cells.append(f"{med:>9,.0f} [{lo:,.0f}-{hi:,.0f}]")
        ratios = [r["read"] / r["client_replay"] for r in records if r["partitions"] == p]
        row = " ".join(f"{c:>24}" for c in cells)
        print(f"{p:>3} {row} {statistics.median(ratios):>6.2f}")
        for phase in ("write", "read"):
            key = f"{phase}_cpu_us"
            if key in records[0]:
                kinds = records[0][key]
                per_kind = {
                    k: statistics.median(r[key][k] for r in records if r["partitions"] == p)
                    for k in kinds
                }
                print(
                    f"    {phase} CPU us/row (median): "
                    + ", ".join(f"{k} {v:.2f}" for k, v in per_kind.items())
                    + f", total {sum(per_kind.values()):.2f}"
                )
    loads = [r["load"] for r in records]
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}")


def _baseline_tree(repo: str, rev: str, into: Path, scope: str = "spark") -> Path:
    """A copy of this tree's packages (C extension included) whose ``ampsclient/spark`` is
    the one of ``rev``: only the Spark data source differs from the working tree. With
    ``scope="all"``, both packages (client and reference server) are those of ``rev``, their
    C extensions built here."""
    if scope == "all":
        archive = subprocess.run(
            ["git", "-C", repo, "archive", rev, "ampsclient", "ampsclient_server_stub",
             "setup.py", "pyproject.toml", "benchmarks"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
        subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
            cwd=into, check=True, capture_output=True,
        )  # fmt: skip
        return into
    for package in ("ampsclient", "ampsclient_server_stub"):
        shutil.copytree(
            ROOT / package, into / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.rmtree(into / "ampsclient" / "spark")
    archive = subprocess.run(
        ["git", "-C", repo, "archive", rev, "ampsclient/spark"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def compare(args: argparse.Namespace) -> None:
    """Alternate child runs of the baseline revision and of the working tree."""
    child_args = [
        "--count", str(args.count), "--partitions", args.partitions, "--runs", str(args.runs),
        "--fsync", args.fsync, "--master", args.master,
    ] + (["--executor"] if args.executor else []) + ["--stream", str(args.stream)]  # fmt: skip
    if args.uri:
        child_args += ["--uri", args.uri]
    results: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
    with tempfile.TemporaryDirectory(prefix="spark-bench-base-") as tmp:
        tree = _baseline_tree(args.repo, args.baseline, Path(tmp), args.scope)
        for _ in range(args.rounds):
            for label, path in (("baseline", tree), ("current", ROOT)):
                env = dict(os.environ, PYTHONPATH=str(path), PYSPARK_PYTHON=sys.executable)
                out = Path(tmp) / f"{label}.json"
                subprocess.run(
                    [sys.executable, __file__, *child_args, "--json", str(out)],
                    env=env,
                    cwd=path,
                    check=True,
                )
                results[label] += json.loads(out.read_text())
    report(f"baseline {args.baseline}", results["baseline"])
    report("working tree", results["current"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.baseline:
        compare(args)
        return
    print(f"{args.count:,} rows per run, master {args.master}, {args.runs} run(s)", flush=True)
    records = measure_executor(args) if args.executor else measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps(records))
    report("this tree", records)


if __name__ == "__main__":
    main()
