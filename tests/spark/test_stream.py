"""Streaming reads: checkpoint restarts and replayed micro-batches are exactly-once."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal, publish


def stream(spark: Any, uri: str, topic: str, **options: Any) -> Any:
    reader = spark.readStream.format("amps").option("uri", uri).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def docs(start: int, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "symbol": f"S{i % 3}"} for i in range(start, start + n)]


@pytest.mark.integration
def test_restart_from_checkpoint_loses_and_repeats_nothing(
    spark: Any, uri: str, topic: str, tmp_path: pathlib.Path
) -> None:
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run() -> list[int]:
        query = (
            stream(spark, uri, topic, maxRowsPerBatch=20)
            .select("bookmark", "sequence", "data")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    publish(uri, topic, docs(0, 50))
    assert run() == [20, 20, 10]  # the rate limit holds
    publish(uri, topic, docs(50, 30))
    assert run() == [20, 10]  # continues where it stopped
    assert run() == []  # nothing new: no batch

    rows = spark.read.parquet(out).collect()
    log = journal(uri, topic)
    assert len(rows) == 80
    assert sorted(r.bookmark for r in rows) == sorted(e["bookmark"] for e in log)
    assert sorted(json.loads(r.data)["id"] for r in rows) == list(range(80))


@pytest.mark.integration
def test_a_failed_batch_is_replayed_with_identical_offsets_and_data(
    spark: Any, uri: str, topic: str, tmp_path: pathlib.Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    seen: dict[int, list[list[str]]] = {}
    crash_once = {"armed": True}

    def sink(batch: Any, batch_id: int) -> None:
        bookmarks = [r.bookmark for r in batch.orderBy("bookmark").select("bookmark").collect()]
        seen.setdefault(batch_id, []).append(bookmarks)
        if batch_id == 1 and crash_once["armed"]:
            crash_once["armed"] = False
            raise RuntimeError("simulated crash after the sink saw batch 1")

    def run() -> Any:
        query = (
            stream(spark, uri, topic, maxRowsPerBatch=25, numPartitions=2)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except Exception as exc:
            return exc
        return None

    publish(uri, topic, docs(0, 60), chunks=3, gap=0.02)
    failure = run()
    assert failure is not None and "simulated crash" in str(failure)
    offsets_before = (checkpoint / "offsets" / "1").read_text()
    assert not (checkpoint / "commits" / "1").exists()

    publish(uri, topic, docs(60, 20))  # must not leak into the replayed batch
    assert run() is None
    assert (checkpoint / "offsets" / "1").read_text() == offsets_before
    assert len(seen[1]) == 2 and seen[1][0] == seen[1][1]  # identical replay
    assert [len(seen[b][-1]) for b in sorted(seen)] == [25, 25, 25, 5]
    delivered = [bm for b in sorted(seen) for bm in seen[b][-1]]
    assert sorted(delivered) == sorted(e["bookmark"] for e in journal(uri, topic))


@pytest.mark.integration
def test_begin_now_reads_only_what_comes_after_the_start(
    spark: Any, uri: str, topic: str, tmp_path: pathlib.Path
) -> None:
    publish(uri, topic, docs(0, 5))  # before the query: not read
    name = f"now_{tmp_path.name.replace('-', '_')}"
    query = (
        stream(spark, uri, topic, begin="now", numPartitions=2)
        .select("bookmark", "data")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # the start is pinned (a fence) before this returns
        publish(uri, topic, docs(5, 7), chunks=2, gap=0.02)
        query.processAllAvailable()
        rows = spark.sql(f"select * from {name}").collect()
    finally:
        query.stop()
    assert sorted(json.loads(r.data)["id"] for r in rows) == list(range(5, 12))
