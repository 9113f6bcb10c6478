"""Writes: retried tasks and replayed micro-batches leave each row exactly once in the log."""

from __future__ import annotations

import json
import pathlib
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal, publish
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub.harness import free_port


def failing(marker: pathlib.Path, bad_id: int, times: int) -> Any:
    """A UDF that formats a row as JSON and raises for ``bad_id`` the first ``times`` calls
    (counted in a file, since every task attempt runs in a fresh Python worker)."""

    def to_json(i: int, symbol: str) -> str:
        if i == bad_id:
            seen = marker.read_text().count("x") if marker.exists() else 0
            if seen < times:
                marker.write_text("x" * (seen + 1))
                raise RuntimeError(f"simulated failure #{seen + 1} at id {bad_id}")
        return json.dumps({"id": i, "symbol": symbol})

    return F.udf(to_json, StringType(), useArrow=False)


def ids_of(entries: list[dict[str, Any]]) -> Counter[int]:
    return Counter(json.loads(e["data"])["id"] for e in entries)


@pytest.mark.integration
def test_a_retried_write_task_publishes_each_row_once(
    spark: Any, uri: str, topic: str, tmp_path: pathlib.Path
) -> None:
    marker = tmp_path / "failed-once"
    df = (
        spark.range(0, 200, numPartitions=2)
        .withColumn("symbol", F.concat(F.lit("S"), (F.col("id") % 5).cast("string")))
        .select(failing(marker, 150, times=1)("id", "symbol").alias("data"))
    )
    writer = (
        df.write.format("amps")
        .option("uri", uri)
        .option("topic", topic)
        .option("writeId", "job-1")
        .mode("append")
    )
    writer.save()
    assert marker.read_text() == "x"  # the second partition's task failed once, mid-way
    log = journal(uri, topic)
    assert ids_of(log) == Counter(range(200))
    # each task's rows carry its client name's publisher id and sequences 1..n, in row order
    second = [e for e in log if e["publisher_id"] == publisher_id_for("spark-job-1-p1")]
    assert [e["sequence"] for e in second] == list(range(1, 101))
    assert [json.loads(e["data"])["id"] for e in second] == list(range(100, 200))
    # running the same write again (same writeId) adds nothing
    writer.save()
    assert len(journal(uri, topic)) == 200


@pytest.mark.integration
def test_a_replayed_stream_write_batch_publishes_each_row_once(
    spark: Any, uri: str, tmp_path: pathlib.Path
) -> None:
    source, target = f"{tmp_path.name}-in", f"{tmp_path.name}-out"
    marker = tmp_path / "failures"
    publish(uri, source, [{"id": i, "symbol": f"S{i % 3}"} for i in range(60)])

    def run() -> Exception | None:
        rows = (
            spark.readStream.format("amps")
            .option("uri", uri)
            .option("topic", source)
            .option("parse", "json")
            .option("schema", "id BIGINT, symbol STRING")
            .option("maxRowsPerBatch", 20)
            .load()
        )
        query = (
            rows.select(failing(marker, 30, times=2)("id", "symbol").alias("data"))
            .writeStream.format("amps")
            .option("uri", uri)
            .option("topic", target)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except Exception as exc:
            return exc
        return None

    # batch 1 (ids 20..39) fails in both task attempts: the query dies mid-batch
    failure = run()
    assert failure is not None and "simulated failure #2" in str(failure)
    assert 0 < len(journal(uri, target)) < 60
    # restarted from the checkpoint, batch 1 is replayed and de-duplicated by the server
    assert run() is None
    assert ids_of(journal(uri, target)) == Counter(range(60))


@pytest.mark.integration
def test_write_errors_carry_the_reason(spark: Any, uri: str, topic: str) -> None:
    df = spark.createDataFrame([("a",), ("b",)], "data STRING")
    dead = f"tcp://127.0.0.1:{free_port()}/amps/json"
    with pytest.raises(Exception, match="could not connect to AMPS"):
        df.write.format("amps").option("uri", dead).option("topic", topic).option(
            "connectTimeout", 1500
        ).mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        df.write.format("amps").option("uri", uri).option("topic", topic).mode("overwrite").save()
