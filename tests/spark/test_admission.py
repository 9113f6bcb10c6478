"""Admission control (Spark 4.2+ ``ReadLimit``): ``maxRecordsPerTrigger`` (the old name
``maxRowsPerBatch`` still works), ``maxBytesPerTrigger``, ``Trigger.AvailableNow`` honouring
them, and the backlog reported through ``reportLatestOffset`` into the query's progress."""

from __future__ import annotations

import itertools
import json
import pathlib
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal, publish
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from ampsclient.protocol.message import body_offset
from ampsclient.spark import AMPSSparkError, AMPSStreamReader
from ampsclient.spark._convert import output_schema
from ampsclient.spark._core import ReadOptions
from ampsclient.spark._microbatches import MicroBatches, data_sizes


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


def sized_docs(n: int) -> list[dict[str, Any]]:
    """``n`` documents of 10 to 40 bytes (``{"s":"..."}``), sizes in no simple order."""
    return [{"s": "x" * (2 + (i * 7) % 31)} for i in range(n)]


def chain(source: AMPSStreamReader, limit: Any, start: dict[str, Any]) -> list[dict[str, Any]]:
    """The offsets of the micro-batches after ``start`` up to the log's end, as Spark asks
    for them (each ``latestOffset`` from the previous one's answer)."""
    offsets = [start]
    while True:
        end = source.latestOffset(offsets[-1], limit)
        if end == offsets[-1]:
            return offsets
        offsets.append(end)
        assert len(offsets) < 1000


@pytest.mark.integration
def test_latest_offset_counts_only_the_new_messages(uri: str, topic: str) -> None:
    """A trigger replays to the driver only what came after the last message counted (before:
    the whole backlog from the batch's start at every trigger); its offsets are the ones a
    reader started from each of them (a restart from the checkpoint) finds."""
    publish(uri, topic, docs(30))
    log = journal(uri, topic)
    source = reader(uri, topic, maxRecordsPerTrigger=10)
    limit = ReadMaxRows(10)
    epoch = source.initialOffset()
    first = source.latestOffset(epoch, limit)
    assert first["bookmark"] == log[9]["bookmark"]
    assert source.replayed == 30  # the backlog, counted once
    second = source.latestOffset(first, limit)
    assert second["bookmark"] == log[19]["bookmark"]
    assert source.replayed == 30  # nothing new: nothing replayed
    assert source.reportLatestOffset() == {
        "bookmark": log[-1]["bookmark"],
        "messagesBehind": 10,
        "bytesBehind": 100,
    }
    publish(uri, topic, docs(5))
    log = journal(uri, topic)
    third = source.latestOffset(second, limit)
    assert third["bookmark"] == log[29]["bookmark"]
    assert source.replayed == 35  # the 5 new ones only
    assert source.reportLatestOffset() == {
        "bookmark": log[-1]["bookmark"],
        "messagesBehind": 5,
        "bytesBehind": 50,
    }
    assert source.latestOffset(third, limit)["bookmark"] == log[34]["bookmark"]
    last = source.latestOffset(third, limit)  # the same trigger asked again: same answer
    assert last["bookmark"] == log[34]["bookmark"]
    assert source.latestOffset(last, limit) == last
    assert source.replayed == 35
    # a restart from the checkpoint: a new reader, from a stored offset, finds the same ends
    for start, end in itertools.pairwise([epoch, first, second, third, last]):
        assert reader(uri, topic, maxRecordsPerTrigger=10).latestOffset(start, limit) == end


@pytest.mark.integration
def test_kept_micro_batches_match_a_count_from_each_start(
    uri: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows and bytes capped together over messages of varied sizes, arriving in two parts,
    and only 2 micro-batches kept ahead (then counted again): every offset is the one a reader
    counting from its start finds, and the batches cover the log once, in order."""
    monkeypatch.setattr("ampsclient.spark._microbatches.MAX_CUTS", 2)

    def fresh() -> AMPSStreamReader:
        return reader(uri, topic, maxRecordsPerTrigger=6, maxBytesPerTrigger=120)

    publish(uri, topic, sized_docs(40))
    source, limit = fresh(), ReadMaxRows(6)
    offsets = chain(source, limit, source.initialOffset())
    for start, end in itertools.pairwise(offsets):  # what a restart from each start finds
        assert fresh().latestOffset(start, limit) == end
    publish(uri, topic, sized_docs(25))
    more = chain(source, limit, offsets[-1])
    for start, end in itertools.pairwise(more):
        assert fresh().latestOffset(start, limit) == end
    log = journal(uri, topic)
    ends = [o["bookmark"] for o in offsets[1:] + more[1:]]
    assert ends[-1] == log[-1]["bookmark"]
    at = [i for i, e in enumerate(log) if e["bookmark"] in ends]
    assert len(at) == len(ends) and all(a < b for a, b in itertools.pairwise(at))
    assert all(0 < b - a <= 6 for a, b in itertools.pairwise([-1, *at]))


def test_data_sizes_measure_bodies_even_when_a_header_string_holds_a_brace() -> None:
    plain = [b'{"c":"p","t":"a","bm":"1|2|"}{"i":1}', b'{"c":"p","t":"a"}xyz', b'{"c":"p"}']
    assert list(data_sizes(plain)) == [0, 7, 10, 10]
    tricky = [*plain, b'{"c":"p","t":"a}b","x":"q\\"}"}{"i":22}']
    assert [len(p) - body_offset(p) for p in tricky] == [7, 3, 0, 8]
    assert list(data_sizes(tricky)) == [0, 7, 10, 10, 18]


def test_micro_batches_cut_as_counted_and_advance_only_along_their_cuts() -> None:
    def delivery(i: int) -> bytes:
        return b'{"c":"p","t":"a","bm":"7|%d|"}' % i + b"x" * i

    plan = MicroBatches("0", 2, None)
    plan.feed([delivery(i) for i in range(1, 4)])
    plan.feed([delivery(i) for i in range(4, 6)])
    plan.settle()
    assert [(c.bookmark, c.messages, c.size) for c in plan.cuts] == [("7|2|", 2, 3), ("7|4|", 2, 7)]
    assert (plan.end, plan.messages, plan.size, plan.open_messages) == ("7|5|", 5, 15, 1)
    assert plan.next_end() == ("7|2|", 2, 3)
    assert plan.advance("0")  # the same start asked again
    assert not plan.advance("7|4|")  # not the next batch's end: count again
    assert plan.advance("7|2|") and plan.next_end() == ("7|4|", 2, 7)
    assert plan.advance("7|4|") and plan.next_end() == ("7|5|", 1, 5)  # the open batch
    assert plan.advance("7|5|") and plan.next_end() is None and plan.messages == 0
