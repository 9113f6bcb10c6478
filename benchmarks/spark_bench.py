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

``--baseline REV`` measures the Spark data source of another revision in the same invocation
(with ``--targets``, issue #26's cases in each tree's session):
a copy of this tree's packages gets ``ampsclient/spark`` of ``REV`` (``git archive``; client,
server and C extension stay the same), and this script runs once per tree in child processes
(baseline first, then this tree), ``--rounds`` times alternately, each child doing ``--runs``
runs. Each child starts its own SparkSession and reference server. ``--scope all`` takes the
client and the reference server of ``REV`` too (their C extensions built in the copy).

``--targets`` measures issue #26's four cases against do-nothing Python sources on the same
Spark, interleaved in one session (``--runs`` times; median and range): a batch read of the
eight default columns against a source that yields ready-made Arrow batches of them; a
``parse=json`` read of three payload fields against one of those three columns; a streaming
read in micro-batches of ``--stream`` rows (``Trigger.AvailableNow`` and a processing-time
trigger) against the same eight-column source; a batch write against a
``DataSourceArrowWriter`` that only counts the rows. Each ratio is printed with its target.

``--targets --replay-only`` adds a do-nothing experiment for each batch read: our source's
planning, connection, replay and framing with a slice of the do-nothing source's batch per
chunk instead of any conversion (what that case could reach with a free conversion).

Usage::

    python benchmarks/spark_bench.py --targets --runs 5   # issue #26's cases, 1M rows
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
        "--targets",
        action="store_true",
        help="issue #26's four cases against do-nothing sources, interleaved in one session",
    )
    parser.add_argument(
        "--batch-only",
        action="store_true",
        help="with --targets: the batch cases only (write, read, parse=json read), no streams",
    )
    parser.add_argument(
        "--replay-only",
        action="store_true",
        help="with --targets: also read each batch case's topic with our planning, replay and "
        "framing but a ready-made batch per chunk (no conversion): each case's bound",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="where a read's time goes, outside Spark: planning, connecting, the server's "
        "replay alone, framing, conversion (us per row, wall and CPU; conversion_json: the "
        "parse=json case's three fields, framing included)",
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


PAYLOAD_FIELDS = "id BIGINT, sym STRING, qty BIGINT"
"""The ``parse=json`` case's schema (the fields the written rows have)."""

TARGETS = {"read": 0.7, "read_json": 0.5, "stream_now": 0.6, "stream_time": 0.6, "write": 0.5}
"""Issue #26's targets: ours / the do-nothing source of the same shape."""


def _ceiling_batch(shape: str) -> Any:
    """The ready-made 65,536-row Arrow batch a do-nothing source slices (built once per
    Python worker process and kept in ``builtins``: Spark reuses its workers)."""
    import builtins
    import datetime
    import decimal

    import pyarrow as pa

    cache = builtins.__dict__.setdefault("_spark_bench_batches", {})
    if shape in cache:
        return cache[shape]
    size = 65536
    ids = range(size)
    if shape == "json3":
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(ids, pa.int64()),
                pa.array([f"S{i % 50}" for i in ids]),
                pa.array([i % 100 for i in ids], pa.int64()),
            ],
            names=["id", "sym", "qty"],
        )
    else:
        t0 = datetime.datetime(2026, 11, 28, tzinfo=datetime.UTC)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(["bench"] * size),
                pa.array([f"1234567890123456|{i}|" for i in ids]),
                pa.array([decimal.Decimal(1234567890123456)] * size, pa.decimal128(20, 0)),
                pa.array(ids, pa.int64()),
                pa.array([t0] * size, pa.timestamp("us", tz="UTC")),
                pa.nulls(size, pa.string()),
                pa.nulls(size, pa.string()),
                pa.array([json.dumps({"id": i, "sym": f"S{i % 50}", "qty": i % 100})
                          for i in ids]),
            ],
            names=["topic", "bookmark", "publisher_id", "sequence", "timestamp",
                   "sow_key", "correlation_id", "data"],
        )  # fmt: skip
    cache[shape] = batch
    return batch


def _slices(shape: str, rows: int) -> Any:
    batch = _ceiling_batch(shape)
    while rows > 0:
        k = min(batch.num_rows, rows)
        rows -= k
        yield batch.slice(0, k)


def _ceiling_classes() -> type:
    """A do-nothing Arrow source (``ceilingsource``: options ``n``, ``partitions``,
    ``shape`` = ``default`` or ``json3``; as a stream, ``maxRecordsPerTrigger`` rows per
    micro-batch, ``Trigger.AvailableNow`` honoured) and a do-nothing Arrow writer. Defined
    here, in ``__main__``, so that Spark's workers get them by value."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    default = (
        "topic STRING, bookmark STRING, publisher_id DECIMAL(20,0), sequence BIGINT, "
        "timestamp TIMESTAMP, sow_key STRING, correlation_id STRING, data STRING"
    )

    class CeilingReader(DataSourceReader):
        def __init__(self, n: int, partitions: int, shape: str) -> None:
            self.n, self.p, self.shape = n, partitions, shape

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.p)]

        def read(self, partition: InputPartition) -> Any:
            return _slices(self.shape, self.n // self.p)

    class CeilingStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, n: int, partitions: int, rows: int) -> None:
            self.n, self.p, self.rows, self.last = n, partitions, rows, 0

        def initialOffset(self) -> dict[str, int]:
            return {"i": 0}

        def prepareForTriggerAvailableNow(self) -> None:
            pass  # everything is there already: the end is n

        def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
            base = start["i"] if start is not None else self.last
            self.last = min(self.n, base + self.rows)
            return {"i": self.last}

        def partitions(self, start: Any, end: Any) -> list[InputPartition]:
            a, b = start["i"], end["i"]
            cuts = [a + (b - a) * k // self.p for k in range(self.p + 1)]
            return [InputPartition((cuts[k], cuts[k + 1])) for k in range(self.p)]

        def read(self, partition: InputPartition) -> Any:
            a, b = partition.value
            return _slices("default", b - a)

    from ampsclient.spark._core import REPLAY_OPTIONS, UNTIMED_REPLAY_OPTIONS
    from ampsclient.spark.datasource import AMPSBatchReader, _chunks

    class ReplayOnlyReader(AMPSBatchReader):
        """Our source's planning, connection, server replay and framing, then a slice of the
        ready-made batch of ``shape`` per chunk of deliveries: no conversion at all."""

        shape = "json3"

        def read(self, partition: InputPartition) -> Any:
            bookmark = partition.bookmark
            if bookmark is None:
                return
            options = UNTIMED_REPLAY_OPTIONS if self.shape == "json3" else REPLAY_OPTIONS
            for chunk in _chunks(self.opts, partition, bookmark, options):
                yield _ceiling_batch(self.shape).slice(0, len(chunk))

    class CeilingWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _batch in iterator:  # take every batch, do nothing with it
                pass
            return WriterCommitMessage()

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ceilingsource"

        def schema(self) -> str:
            return PAYLOAD_FIELDS if self.options.get("shape") == "json3" else default

        def reader(self, schema: Any) -> DataSourceReader:
            opts = self.options
            if "uri" in opts:  # the replay-only source: ours without the conversion
                keys = ("uri", "topic", "numPartitions")
                reader = ReplayOnlyReader({k: opts[k] for k in keys}, schema)
                reader.shape = opts.get("shape", "default")
                return reader
            return CeilingReader(
                int(opts["n"]), int(opts.get("partitions", 2)), opts.get("shape", "default")
            )

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            opts = self.options
            return CeilingStream(
                int(opts["n"]), int(opts.get("partitions", 2)), int(opts["maxrecordspertrigger"])
            )

        def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
            return CeilingWriter()

    return Ceiling


def _stream_rate(
    spark: Any, uri: str | None, topic: str, n: int, rows: int, trigger: dict[str, Any]
) -> float:
    """Rows/s of a streaming read of the whole topic (micro-batches of ``rows``); without
    ``uri``, of the do-nothing stream of ``n`` rows."""
    with tempfile.TemporaryDirectory(prefix="spark-bench-chk-") as checkpoint:
        t0 = time.perf_counter()
        source = (
            spark.readStream.format("amps").option("uri", uri).option("topic", topic)
            if uri is not None
            else spark.readStream.format("ceilingsource").option("n", n)
        )
        query = (
            source.option("numPartitions", 2)
            .option("maxRecordsPerTrigger", rows)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )
        if trigger.get("availableNow"):
            query.awaitTermination()
        else:
            deadline = time.monotonic() + 600
            while sum(p["numInputRows"] for p in query.recentProgress) < n:
                if time.monotonic() > deadline or query.exception() is not None:
                    raise SystemExit(f"the stream stopped short: {query.exception()}")
                time.sleep(0.05)
        took = time.perf_counter() - t0
        got = sum(p["numInputRows"] for p in query.recentProgress)
        query.stop()
    if got != n:
        raise SystemExit(f"the stream read {got} rows, expected {n}")
    return n / took


def measure_targets(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Issue #26's cases, each beside its do-nothing source, ``--runs`` times."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession, functions as F

    from ampsclient.spark import register
    from ampsclient_server_stub.harness import ServerProcess

    n, rows = args.count, args.stream or 100_000
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
            # a streaming source's Python process may take more than the default 15 s to
            # connect back on a loaded machine
            .config("spark.python.authenticate.socketTimeout", "120s")
            .getOrCreate()
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(_ceiling_classes())
        frame = spark.range(0, n, numPartitions=2).select(
            F.to_json(
                F.struct(
                    F.col("id"),
                    F.concat(F.lit("S"), (F.col("id") % 50).cast("string")).alias("sym"),
                    (F.col("id") % 100).alias("qty"),
                )
            ).alias("data")
        )

        def timed(action: Any) -> float:
            t0 = time.perf_counter()
            action()
            return n / (time.perf_counter() - t0)

        def noop(df: Any) -> Any:
            return lambda: df.write.format("noop").mode("overwrite").save()

        def ceiling_read(shape: str) -> Any:
            df = spark.read.format("ceilingsource").option("n", n).option("shape", shape).load()
            return noop(df)

        def amps(topic: str, **options: Any) -> Any:
            reader = spark.read.format("amps").option("uri", uri).option("topic", topic)
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.option("numPartitions", 2).load()

        # warm up: JVM, Python workers, code paths
        warm = f"bench-warm-{uuid.uuid4().hex[:6]}"
        frame.limit(1000).write.format("amps").option("uri", uri).option("topic", warm).mode(
            "append"
        ).save()
        amps(warm).count()
        timed(ceiling_read("default"))
        for run in range(args.runs):
            topic = f"bench-{uuid.uuid4().hex[:6]}"
            record: dict[str, Any] = {"run": run}
            record["write_ceiling"] = timed(
                lambda: frame.write.format("ceilingsource").mode("append").save()
            )
            record["write"] = timed(
                lambda t=topic: (
                    frame.write.format("amps")
                    .option("uri", uri)
                    .option("topic", t)
                    .mode("append")
                    .save()
                )
            )
            if amps(topic).count() != n:
                raise SystemExit(f"run {run}: the topic does not hold {n} rows")
            record["read_ceiling"] = timed(ceiling_read("default"))
            record["read"] = timed(noop(amps(topic)))
            record["read_json_ceiling"] = timed(ceiling_read("json3"))
            record["read_json"] = timed(
                noop(amps(topic, parse="json", schema=PAYLOAD_FIELDS, metadataColumns=""))
            )
            if args.replay_only:
                for shape, case in (("default", "read_replay"), ("json3", "read_json_replay")):
                    replayed = (
                        spark.read.format("ceilingsource").option("shape", shape)
                        .option("uri", uri).option("topic", topic).option("numPartitions", 2)
                        .load()
                    )  # fmt: skip
                    record[case] = timed(noop(replayed))
            if args.batch_only:
                record["load"] = os.getloadavg()[0]
                print(json.dumps(record), flush=True)
                results.append(record)
                continue
            now: dict[str, Any] = {"availableNow": True}
            every: dict[str, Any] = {"processingTime": "0 seconds"}
            record["stream_now_ceiling"] = timed(ceiling_read("default"))
            record["stream_now_nothing"] = _stream_rate(spark, None, topic, n, rows, now)
            record["stream_now"] = _stream_rate(spark, uri, topic, n, rows, now)
            record["stream_time_ceiling"] = timed(ceiling_read("default"))
            record["stream_time_nothing"] = _stream_rate(spark, None, topic, n, rows, every)
            record["stream_time"] = _stream_rate(spark, uri, topic, n, rows, every)
            record["load"] = os.getloadavg()[0]
            print(json.dumps(record), flush=True)
            results.append(record)
    return results


def report_targets(records: list[dict[str, Any]]) -> None:
    """Medians, ranges and the ratios against issue #26's targets."""
    print(f"\nmedians over {len(records)} run(s) [min-max], rows/s")
    print(f"{'case':<12} {'ours':>24} {'do-nothing':>24} {'ratio':>18} {'target':>7}")

    def cell(v: list[float], fmt: str) -> str:
        return f"{statistics.median(v):{fmt}} [{min(v):{fmt}}-{max(v):{fmt}}]"

    for case, target in TARGETS.items():
        if case not in records[0]:  # --batch-only
            continue
        ours = [r[case] for r in records]
        base = [r[f"{case}_ceiling"] for r in records]
        ratio = [o / b for o, b in zip(ours, base, strict=True)]
        mark = "ok" if statistics.median(ratio) >= target else "below"
        print(
            f"{case:<12} {cell(ours, ',.0f'):>24} {cell(base, ',.0f'):>24} "
            f"{cell(ratio, '.2f'):>18} {target:>5.1f} {mark}"
        )
        if f"{case}_nothing" in records[0]:  # the do-nothing stream, same micro-batches
            alone = [r[f"{case}_nothing"] for r in records]
            ratio = [o / b for o, b in zip(ours, alone, strict=True)]
            print(f"{'  (stream)':<12} {'':>24} {cell(alone, ',.0f'):>24} {cell(ratio, '.2f'):>18}")
    for case in ("read", "read_json"):  # --replay-only: the bounds without conversion
        if f"{case}_replay" not in records[0]:
            continue
        alone = [r[f"{case}_replay"] for r in records]
        base = [r[f"{case}_ceiling"] for r in records]
        ratio = [o / b for o, b in zip(alone, base, strict=True)]
        print(
            f"{'  (replay)':<12} {cell(alone, ',.0f'):>24} {'':>24} {cell(ratio, '.2f'):>18}"
            f"  ours without conversion / {case}'s do-nothing"
        )
    loads = [r["load"] for r in records]
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}")


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _raw_replay(uri: str, topic: str, bookmark: str, options: str) -> int:
    """The server alone: a plain socket logs on, subscribes and counts the frames of the
    replay up to its completed ack (no client library, one recv buffer, frames cut with
    ``struct``). Returns the deliveries."""
    import socket
    import struct

    from ampsclient.uri import parse_uri

    where = parse_uri(uri)
    sock = socket.create_connection((where.host, where.port))

    def send(header: dict[str, str]) -> None:
        data = json.dumps(header, separators=(",", ":")).encode()
        sock.sendall(struct.pack(">I", len(data)) + data)

    send({"c": "logon", "cid": "1", "client_name": f"bench-raw-{uuid.uuid4().hex[:8]}",
          "mt": "json", "a": "processed", "version": "5.3.5.0:python"})  # fmt: skip
    send({"c": "subscribe", "cid": "2", "sub_id": "r", "t": topic, "bm": bookmark,
          "o": options, "a": "completed"})  # fmt: skip
    buf = bytearray()
    count = 0
    while True:
        data = sock.recv(1 << 20)
        if not data:
            raise SystemExit("the server closed the raw replay")
        buf += data
        pos, end = 0, len(buf)
        done = False
        while end - pos >= 4:
            (size,) = struct.unpack_from(">I", buf, pos)
            if pos + 4 + size > end:
                break
            if buf.startswith(b'{"c":"p"', pos + 4):
                count += 1
            elif buf.find(b'"completed"', pos + 4, pos + 4 + size) > 0:
                done = True
            pos += 4 + size
        del buf[:pos]
        if done:
            sock.close()
            return count


def measure_phases(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each phase of a read of the default columns (2 partitions), outside Spark, with the
    server's CPU read from ``/proc``: us per row of wall time and of CPU."""
    from ampsclient.spark._convert import RowBuilder, default_schema
    from ampsclient.spark._core import ReadOptions
    from ampsclient.spark._feed import replay_payloads
    from ampsclient.spark.datasource import AMPSBatchReader
    from ampsclient.sync import Client
    from ampsclient_server_stub.harness import ServerProcess

    results: list[dict[str, Any]] = []
    n = args.count
    with ExitStack() as stack:
        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-bench-"))
        server = ServerProcess(data_dir=data_dir, extra_args=["--fsync", args.fsync])
        stack.enter_context(server)
        uri, topic = server.uri(), f"bench-phases-{uuid.uuid4().hex[:6]}"
        server_pid = server.pid
        assert server_pid is not None
        pub = Client("bench-phases-pub")
        pub.connect(uri)
        pub.logon(5000)
        for i in range(n):
            pub.publish(topic, json.dumps({"id": i, "sym": f"S{i % 50}", "qty": i % 100}))
        pub.flush(300_000)
        pub.close()
        options = {"uri": uri, "topic": topic, "numPartitions": "2"}
        schema = default_schema("json")
        opts = ReadOptions.parse_options(options)
        builder = RowBuilder(schema, opts)
        parsed = RowBuilder(
            _payload_struct(),
            ReadOptions.parse_options(
                dict(options, parse="json", schema=PAYLOAD_FIELDS, metadataColumns="")
            ),
        )
        for run in range(args.runs):
            record: dict[str, Any] = {"run": run, "rows": n}
            t0 = time.perf_counter()
            parts = AMPSBatchReader(options, schema).partitions()
            record["plan_ms"] = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            client = Client(f"bench-connect-{uuid.uuid4().hex[:6]}")
            client.connect_and_logon(uri)
            record["connect_ms"] = (time.perf_counter() - t0) * 1000
            client.close()
            whole = "[0:0|1|]"
            for phase in ("server", "framing", "conversion", "conversion_json"):
                s0, c0, t0 = _proc_cpu(server_pid), time.process_time(), time.perf_counter()
                if phase == "server":
                    got = _raw_replay(uri, topic, whole, builder.replay_options)
                else:
                    chunks = replay_payloads(
                        [uri], f"bench-{phase}-{uuid.uuid4().hex[:6]}", 10_000, topic=topic,
                        filter=None, bookmark=whole, options=builder.replay_options,
                    )  # fmt: skip
                    if phase == "framing":
                        got = sum(len(c) for c in chunks)
                    else:
                        convert = parsed if phase == "conversion_json" else builder
                        got = sum(b.num_rows for b in convert.arrow_batches(chunks))
                wall = time.perf_counter() - t0
                if got != n:
                    raise SystemExit(f"{phase}: {got} rows, expected {n}")
                record[f"{phase}_wall_us"] = wall / n * 1e6
                record[f"{phase}_server_cpu_us"] = (_proc_cpu(server_pid) - s0) / n * 1e6
                record[f"{phase}_cpu_us"] = (time.process_time() - c0) / n * 1e6
            record["partitions"] = len(parts)
            record["load"] = os.getloadavg()[0]
            print(json.dumps(record), flush=True)
            results.append(record)
    return results


def _payload_struct() -> Any:
    """:data:`PAYLOAD_FIELDS` as a StructType (no SparkSession needed)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType(
        [StructField("id", LongType()), StructField("sym", StringType()),
         StructField("qty", LongType())]
    )  # fmt: skip


def report_phases(records: list[dict[str, Any]]) -> None:
    """Medians [min-max] of each phase."""
    print(f"\nmedians over {len(records)} run(s) [min-max]; reads of {records[0]['rows']:,} rows")
    keys = [k for k in records[0] if k not in ("run", "rows", "load", "partitions")]
    for key in keys:
        values = [r[key] for r in records]
        print(f"{key:<26} {statistics.median(values):9.2f} [{min(values):.2f}-{max(values):.2f}]")
    loads = [r["load"] for r in records]
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}")


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
    child_args += ["--targets"] if args.targets else []
    child_args += ["--batch-only"] if args.batch_only else []
    child_args += ["--replay-only"] if args.replay_only else []
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
    show = report_targets if args.targets else None
    for label, key in ((f"baseline {args.baseline}", "baseline"), ("working tree", "current")):
        if show is None:
            report(label, results[key])
        else:
            print(f"\n{label}:")
            show(results[key])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.baseline:
        compare(args)
        return
    print(f"{args.count:,} rows per run, master {args.master}, {args.runs} run(s)", flush=True)
    if args.targets or args.phases:
        records = measure_targets(args) if args.targets else measure_phases(args)
        if args.json:
            Path(args.json).write_text(json.dumps(records))
        (report_targets if args.targets else report_phases)(records)
        return
    records = measure_executor(args) if args.executor else measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps(records))
    report("this tree", records)


if __name__ == "__main__":
    main()
