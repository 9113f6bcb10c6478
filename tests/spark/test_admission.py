"""Admission control (Spark 4.2+ ``ReadLimit``): ``maxRecordsPerTrigger`` (the old name
``maxRowsPerBatch`` still works), ``maxBytesPerTrigger``, ``Trigger.AvailableNow`` honouring
them, and the backlog reported through ``reportLatestOffset`` into the query's progress."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal, publish
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from ampsclient.spark import AMPSSparkError, AMPSStreamReader
from ampsclient.spark._convert import output_schema
from ampsclient.spark._core import ReadOptions


def docs(n: int) -> list[dict[str, Any]]:
    """``n`` documents of 10 bytes each (``{"i":1000}``)."""
    return [{"i": 1000 + i} for i in range(n)]


def reader(uri: str, topic: str, **options: Any) -> AMPSStreamReader:
    opts = {"uri": uri, "topic": topic, **{k: str(v) for k, v in options.items()}}
    return AMPSStreamReader(opts, output_schema(ReadOptions.parse_options(opts, streaming=True)))


@pytest.mark.integration
def test_a_byte_cap_ends_the_batch_before_the_message_that_would_exceed_it(
    uri: str, topic: str
) -> None:
    publish(uri, topic, docs(50))
    log = journal(uri, topic)
    source = reader(uri, topic, maxBytesPerTrigger=105)
    assert source.getDefaultReadLimit() == ReadMaxBytes(105)
    epoch = source.initialOffset()
    end = source.latestOffset(epoch, ReadMaxBytes(105))
    assert end["bookmark"] == log[9]["bookmark"]  # 10 x 10 bytes; the 11th would make 110
    assert source.reportLatestOffset() == {
        "bookmark": log[-1]["bookmark"],
        "messagesBehind": 40,
        "bytesBehind": 400,
    }
    # one message always fits, however small the cap
    assert source.latestOffset(epoch, ReadMaxBytes(3))["bookmark"] == log[0]["bookmark"]
    # Trigger.Once passes ReadAllAvailable: no cap, nothing behind
    assert source.latestOffset(epoch, ReadAllAvailable())["bookmark"] == log[-1]["bookmark"]
    assert source.reportLatestOffset() == {
        "bookmark": log[-1]["bookmark"],
        "messagesBehind": 0,
        "bytesBehind": 0,
    }


@pytest.mark.integration
def test_rows_and_bytes_together_the_first_cap_reached_wins(uri: str, topic: str) -> None:
    publish(uri, topic, docs(20))
    log = journal(uri, topic)
    source = reader(uri, topic, maxRecordsPerTrigger=7, maxBytesPerTrigger=55)
    assert source.getDefaultReadLimit() == ReadMaxRows(7)
    epoch = source.initialOffset()
    assert source.latestOffset(epoch, ReadMaxRows(7))["bookmark"] == log[4]["bookmark"]
    assert source.latestOffset(epoch, ReadMaxRows(3))["bookmark"] == log[2]["bookmark"]
    assert source.reportLatestOffset() == {
        "bookmark": log[-1]["bookmark"],
        "messagesBehind": 17,
        "bytesBehind": 170,
    }


def test_max_records_per_trigger_is_max_rows_per_batch() -> None:
    base = {"uri": "tcp://127.0.0.1:1/amps/json", "topic": "t"}
    assert ReadOptions.parse_options({**base, "maxRecordsPerTrigger": "9"}).max_rows_per_batch == 9
    assert ReadOptions.parse_options({**base, "maxRowsPerBatch": "9"}).max_rows_per_batch == 9
    both = {**base, "maxRowsPerBatch": "9", "maxRecordsPerTrigger": "9"}
    assert ReadOptions.parse_options(both).max_rows_per_batch == 9
    with pytest.raises(AMPSSparkError, match="same option"):
        ReadOptions.parse_options({**base, "maxRowsPerBatch": "9", "maxRecordsPerTrigger": "8"})
    with pytest.raises(AMPSSparkError, match="maxBytesPerTrigger must be >= 1"):
        ReadOptions.parse_options({**base, "maxBytesPerTrigger": "0"})


@pytest.mark.integration
def test_available_now_honours_the_byte_cap_and_reports_the_backlog(
    spark: Any, uri: str, topic: str, tmp_path: pathlib.Path
) -> None:
    publish(uri, topic, docs(50))
    query = (
        spark.readStream.format("amps")
        .option("uri", uri)
        .option("topic", topic)
        .option("maxRecordsPerTrigger", 20)
        .option("maxBytesPerTrigger", 155)
        .load()
        .select("bookmark")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in progress] == [15, 15, 15, 5]
    behind = [json.loads(p["sources"][0]["latestOffset"])["messagesBehind"] for p in progress]
    assert behind == [35, 20, 5, 0]
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.bookmark for r in rows) == sorted(e["bookmark"] for e in journal(uri, topic))
