"""The driver program of the standalone-cluster test (``test_cluster.py``), run by
``spark-submit``-like means: ``python cluster_job.py --master spark://... --uri ... ...``.

It reads ``--topic`` as a stream into a Parquet sink with a checkpoint, through the cluster's
executors, until the sink holds ``--expect`` rows. A query that fails (the server was killed
under it) is started again from its checkpoint, as a supervisor would, once the server answers
again. It prints one line per event on stdout for the test to follow:
``batch <id> <rows>``, ``failed <reason>``, ``restarted``, ``done <rows>``; the sink's rows
(as Spark's file sink log commits them) go to ``--report``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", required=True)
    parser.add_argument("--uri", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--report", required=True, help="JSON file: the sink's rows at the end")
    parser.add_argument("--deadline", type=float, default=240.0)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    from ampsclient.spark import register

    spark = (
        SparkSession.builder.master(args.master)
        .appName("ampsclient-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    deadline = time.monotonic() + args.deadline

    def start() -> Any:
        return (
            spark.readStream.format("amps")
            .option("uri", args.uri)
            .option("topic", args.topic)
            .option("numPartitions", 2)
            .option("maxRowsPerBatch", 400)
            .option("connectTimeout", 2000)
            .load()
            .select("bookmark", "publisher_id", "sequence", "data")
            .writeStream.format("parquet")
            .option("path", args.out)
            .option("checkpointLocation", args.checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def sink_rows() -> int:
        try:
            return spark.read.parquet(args.out).count()
        except Exception:  # no committed file yet
            return 0

    query = start()
    seen = -1
    try:
        while time.monotonic() < deadline:
            if not query.isActive:
                error = query.exception()
                say(f"failed {str(error).splitlines()[0][:200] if error else 'stopped'}")
                query = start()
                say("restarted")
                continue
            progress = query.lastProgress
            if progress is not None and progress["batchId"] != seen:
                seen = progress["batchId"]
                say(f"batch {seen} {progress['numInputRows']}")
            if sink_rows() >= args.expect:
                query.stop()
                rows = spark.read.parquet(args.out).select("bookmark", "data").collect()
                with open(args.report, "w") as report:
                    json.dump([[r.bookmark, r.data] for r in rows], report)
                say(f"done {len(rows)}")
                return 0
            try:
                query.awaitTermination(0.5)
            except StreamingQueryException:
                pass  # reported and restarted at the top of the loop
        say(f"timeout {sink_rows()}")
        return 1
    finally:
        if query.isActive:
            query.stop()
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
