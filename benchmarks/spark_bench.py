"""Spark data source throughput: rows/s of a batch write and a batch read, 1 and 2 partitions.

For each partition count P: write ``--count`` rows (``spark.range`` -> one JSON ``data`` column)
to a fresh topic with ``df.write.format("amps")``, then read that topic back with
``spark.read.format("amps")`` (all columns, aggregated so that every row crosses into the JVM).
Both timings include Spark's planning and task scheduling; the write includes the final
``publish_flush`` (every row persisted).

Usage::

    python benchmarks/spark_bench.py                      # 1,000,000 rows, P = 1 and 2
    python benchmarks/spark_bench.py --count 200000 --partitions 1,2,4
    python benchmarks/spark_bench.py --uri tcp://host:9007/amps/json

Without ``--uri`` a reference server subprocess is started (``--fsync`` passed through).
Needs ``pip install 'ampsclient[spark]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="rows per run")
    parser.add_argument("--partitions", default="1,2", help="comma list of partition counts")
    parser.add_argument("--uri", default=None, help="an AMPS server (default: start one)")
    parser.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    parser.add_argument("--master", default="local[2]", help="Spark master")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession, functions as F

    from ampsclient.spark import register
    from ampsclient_server_stub.harness import ServerProcess

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
        print(f"server {uri}, {n:,} rows per run, master {args.master}")
        print(f"{'partitions':>10} {'write rows/s':>14} {'read rows/s':>14}")
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
            rows.write.format("amps").option("uri", uri).option("topic", topic).mode(
                "append"
            ).save()
            write_s = time.perf_counter() - t0
            df = (
                spark.read.format("amps")
                .option("uri", uri)
                .option("topic", topic)
                .option("numPartitions", p)
                .load()
            )
            t0 = time.perf_counter()
            got = df.agg(
                F.count("*").alias("n"),
                F.sum(F.length("data")).alias("bytes"),
                F.max("timestamp").alias("last"),
                F.max("sequence").alias("seq"),
            ).collect()[0]
            read_s = time.perf_counter() - t0
            if got.n != n:
                raise SystemExit(f"read {got.n} rows, expected {n}")
            print(f"{p:>10} {n / write_s:>14,.0f} {n / read_s:>14,.0f}")


if __name__ == "__main__":
    main()
