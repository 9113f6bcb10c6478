"""Planning without Spark: options, bounds, offsets, time splits, the writer's sequence scheme."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal
from pyspark.sql import Row
from pyspark.sql.types import StringType, StructField, StructType

from ampsclient.protocol.bookmarks import (
    BookmarkId,
    BookmarkRange,
    Epoch,
    Timestamp,
    parse_bookmark,
)
from ampsclient.spark._convert import _ddl_field_names
from ampsclient.spark._core import (
    AMPSSparkError,
    Bound,
    ReadOptions,
    WriteOptions,
    bounds_from_bookmark,
    format_micros,
    offset_bounds,
    parse_micros,
    plan_ranges,
    point_from_option,
    range_text,
)
from ampsclient.spark._publish import RowPublisher
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.testing import wait_for

URI = "tcp://127.0.0.1:9007/amps/json"


# ------------------------------------------------------------------------------- options


def test_bookmark_option_forms() -> None:
    start, end = bounds_from_bookmark("[20260101T000000Z:20260102T000000Z)")
    assert start == Bound("20260101T000000Z", True, parse_micros("20260101T000000Z"))
    assert end is not None and end.text == "20260102T000000Z" and not end.inclusive
    start, end = bounds_from_bookmark("(1|5|:2|9|]")
    assert (start.text, start.inclusive, end) == ("1|5|", False, Bound("2|9|", True))
    assert bounds_from_bookmark("[0:0|1|]") == (Bound("0", True), None)  # NOW end = open
    assert bounds_from_bookmark("7|3|") == (Bound("7|3|", False), None)  # after that message
    assert bounds_from_bookmark("0")[0] == Bound("0", True)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("2026-01-01T10:00:00Z", "20260101T100000Z"),
        ("2026-01-01", "20260101T000000Z"),
        ("20260101T100000.5", "20260101T100000.500000Z"),
        ("1767225600", "20260101T000000Z"),
        ("epoch", "0"),
        ("now", "0|1|"),
        ("12|34|", "12|34|"),
    ],
)
def test_begin_end_values(value: str, text: str) -> None:
    assert point_from_option(value, "begin").text == text


def test_read_options_are_validated() -> None:
    with pytest.raises(AMPSSparkError, match="option uri is required"):
        ReadOptions.parse_options({"topic": "t"})
    with pytest.raises(AMPSSparkError, match="option topic is required"):
        ReadOptions.parse_options({"uri": URI})
    with pytest.raises(AMPSSparkError, match="either bookmark or begin/end"):
        ReadOptions.parse_options({"uri": URI, "topic": "t", "bookmark": "0", "begin": "0"})
    with pytest.raises(AMPSSparkError, match="invalid bookmark"):
        ReadOptions.parse_options({"uri": URI, "topic": "t", "bookmark": "12|x"})
    with pytest.raises(AMPSSparkError, match="not a range end"):
        ReadOptions.parse_options({"uri": URI, "topic": "t", "end": "2026-01-01"}, streaming=True)
    opts = ReadOptions.parse_options(
        {"URI": f"{URI}, tcp://other:9007/amps/json", "Topic": "t", "NUMPARTITIONS": "3"}
    )
    assert opts.uris == (URI, "tcp://other:9007/amps/json") and opts.num_partitions == 3
    assert opts.end is None and opts.start == Bound("0", True)
    timed = ReadOptions.parse_options({"uri": URI, "topic": "t", "begin": "0", "end": "2026-01-01"})
    assert timed.end == Bound("20260101T000000Z", False, parse_micros("20260101T000000Z"))
    assert WriteOptions.parse_options({"uri": URI, "writeId": "w"}).write_id == "w"


def test_unknown_options_are_refused_with_the_known_ones() -> None:
    for streaming in (False, True):
        with pytest.raises(
            AMPSSparkError, match=r"unknown read option\(s\) sow; known: uri, topic"
        ):
            ReadOptions.parse_options(
                {"uri": URI, "topic": "t", "sow": "true"}, streaming=streaming
            )
    with pytest.raises(
        AMPSSparkError, match=r"unknown read option\(s\) numpartition;.*numPartitions"
    ):
        ReadOptions.parse_options({"uri": URI, "topic": "t", "numPartition": "2"})
    with pytest.raises(
        AMPSSparkError, match=r"unknown write option\(s\) writeid2; known: .*writeId"
    ):
        WriteOptions.parse_options({"uri": URI, "writeId2": "w"})
    # what Spark adds itself is accepted: load(path), a stream's checkpointLocation
    assert ReadOptions.parse_options({"path": URI, "topic": "t"}).uris == (URI,)
    assert WriteOptions.parse_options({"uri": URI, "checkpointLocation": "/tmp/x"}).uris == (URI,)


def test_ddl_field_names() -> None:
    ddl = "id BIGINT, `odd, name` STRING, m MAP<STRING, INT>, s STRUCT<a: INT, b: DECIMAL(10,2)>"
    assert _ddl_field_names(ddl) == ["id", "odd, name", "m", "s"]


# ------------------------------------------------------------------------------- offsets


def test_offsets_make_half_open_ranges() -> None:
    start = {"bookmark": "1|5|", "timestamp": "20260101T000000.000001Z"}
    end = {"bookmark": "1|9|", "timestamp": "20260101T000001Z"}
    begin, stop = offset_bounds(start, end)
    assert range_text(begin, stop) == "(1|5|:1|9|]"
    assert begin.micros == parse_micros("20260101T000000.000001Z")
    assert range_text(*offset_bounds({"bookmark": "0", "timestamp": None}, end)) == "[0:1|9|]"
    first = {"bookmark": "20260101T000000Z", "timestamp": "20260101T000000Z"}
    assert range_text(*offset_bounds(first, end)) == "[20260101T000000Z:1|9|]"


# -------------------------------------------------------------------------- time splits


def _float_micros(ts: Timestamp) -> int:  # how a server rounding through float seconds reads it
    return int(ts.when.timestamp() * 1_000_000)


def _exact_micros(ts: Timestamp) -> int:
    return parse_micros(str(ts))


def _replay(log: list[int], text: str, to_micros: Callable[[Timestamp], int]) -> list[int]:
    """Indexes a server replays for ``text`` over records with times ``log`` (ids ``1|i+1|``)."""
    r = parse_bookmark(text)
    assert isinstance(r, BookmarkRange)
    if isinstance(r.start, Epoch):
        first = 0
    elif isinstance(r.start, Timestamp):
        m = to_micros(r.start)
        first = next((i for i, t in enumerate(log) if t >= m), len(log))
    else:
        assert isinstance(r.start, BookmarkId)
        first = r.start.sequence - 1 + (0 if r.start_inclusive else 1)
    out = []
    for i in range(first, len(log)):
        if isinstance(r.end, Timestamp):
            m = to_micros(r.end)
            if log[i] > m or (log[i] == m and not r.end_inclusive):
                break
        elif isinstance(r.end, BookmarkId):
            e = r.end.sequence - 1
            if i > e or (i == e and not r.end_inclusive):
                break
        out.append(i)
    return out


@pytest.mark.parametrize("to_micros", [_float_micros, _exact_micros])
def test_time_splits_cover_the_range_exactly_once(to_micros: Callable[[Timestamp], int]) -> None:
    rng = random.Random(7)
    for _ in range(300):
        t = 1_790_000_000_000_000 + rng.randrange(10**6)
        log = []
        for _ in range(rng.randrange(2, 60)):
            t += rng.choice([0, 0, 1, 2, 3, 50, 10_000])  # equal times happen
            log.append(t)
        a = rng.randrange(len(log))
        b = rng.randrange(a, len(log))
        kind = rng.choice(["id", "epoch", "time"])
        if kind == "id":
            start, lo = Bound(f"1|{a + 1}|", False), log[min(a + 1, len(log) - 1)]
        elif kind == "epoch":
            start, lo = Bound("0", True), log[0]
        else:
            start = Bound(format_micros(log[a]), True, log[a])
            lo = log[a]
        end = Bound(f"1|{b + 1}|", rng.random() < 0.5)
        whole = _replay(log, range_text(start, end), to_micros)
        if not whole:
            continue
        lo = log[whole[0]]
        parts = plan_ranges(start, end, rng.randrange(2, 6), lo, log[b])
        got = [i for p in parts for i in _replay(log, p, to_micros)]
        assert got == whole, (parts, log)


def test_too_short_a_span_is_not_split() -> None:
    start, end = Bound("0", True), Bound("1|9|", True)
    assert plan_ranges(start, end, 4, 100, 102) == ["[0:1|9|]"]
    assert plan_ranges(start, end, 4, None, 500) == ["[0:1|9|]"]
    assert len(plan_ranges(start, end, 4, 100, 10_000)) == 4


# ------------------------------------------------------------------ the writer's sequences


@pytest.mark.integration
def test_a_retried_task_skips_what_the_server_has(uri: str, topic: str) -> None:
    schema = StructType([StructField("data", StringType())])
    opts = WriteOptions.parse_options({"uri": uri, "topic": topic})
    publisher = RowPublisher(opts, schema)
    name = f"retry-{uuid.uuid4().hex[:8]}"
    rows = [Row(data=json.dumps({"id": i})) for i in range(100)]

    def first_attempt() -> Iterator[Row]:
        yield from rows[:30]
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError, match="task killed"):
        publisher.publish(publisher.row_columns(first_attempt(), chunk_rows=10), name, 0, 0, 0)
    # the retry must find the first 30 on the server (a durable replay shows them)
    wait_for(lambda: len(journal(uri, topic)) == 30, what="the first attempt's 30 rows")
    done = publisher.publish(publisher.row_columns(rows), name, 0, 0, 1)
    assert (done.rows, done.skipped, done.published) == (100, 30, 70)
    again = publisher.publish(publisher.row_columns(rows), name, 0, 0, 2)
    assert (again.skipped, again.published) == (100, 0)
    log = journal(uri, topic)
    assert [json.loads(e["data"])["id"] for e in log] == list(range(100))
    assert [e["sequence"] for e in log] == list(range(1, 101))


@pytest.mark.integration
def test_stream_sequences_rise_across_batches(uri: str, topic: str) -> None:
    schema = StructType([StructField("data", StringType())])
    publisher = RowPublisher(WriteOptions.parse_options({"uri": uri, "topic": topic}), schema)
    name = f"stream-{uuid.uuid4().hex[:8]}"
    for batch in (0, 1, 1, 2):  # batch 1 replayed
        rows = [Row(data=f'{{"b":{batch},"i":{i}}}') for i in range(5)]
        publisher.publish(publisher.row_columns(rows), name, batch << 32, 0, 0)
    log = journal(uri, topic)
    assert [e["sequence"] for e in log] == [(b << 32) + i + 1 for b in range(3) for i in range(5)]


@pytest.mark.integration
def test_arrow_batches_retry_skips_inside_a_batch(uri: str, topic: str) -> None:
    import pyarrow as pa

    schema = StructType([StructField("data", StringType())])
    publisher = RowPublisher(WriteOptions.parse_options({"uri": uri, "topic": topic}), schema)
    name = f"arrow-{uuid.uuid4().hex[:8]}"
    docs = [json.dumps({"id": i}) for i in range(100)]

    def batches(size: int, fail_after: int | None = None) -> Iterator[pa.RecordBatch]:
        for n, i in enumerate(range(0, 100, size)):
            if n == fail_after:
                raise RuntimeError("task killed")
            yield pa.record_batch([pa.array(docs[i : i + size], pa.string())], names=["data"])

    with pytest.raises(RuntimeError, match="task killed"):
        publisher.publish(publisher.batch_columns(batches(15, fail_after=2)), name, 0, 0, 0)
    wait_for(lambda: len(journal(uri, topic)) == 30, what="the first attempt's 30 rows")
    # batches of 20: the 30 persisted rows end in the middle of the second batch
    done = publisher.publish(publisher.batch_columns(batches(20)), name, 0, 0, 1)
    assert (done.rows, done.skipped, done.published) == (100, 30, 70)
    log = journal(uri, topic)
    assert [json.loads(e["data"])["id"] for e in log] == list(range(100))
    assert [e["sequence"] for e in log] == list(range(1, 101))


@pytest.mark.integration
def test_arrow_rows_without_data_are_json_documents(uri: str, topic: str) -> None:
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa

    schema = StructType(
        [StructField("topic", StringType()), StructField("correlation_id", StringType())]
    )
    publisher = RowPublisher(WriteOptions.parse_options({"uri": uri}), schema)
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=dt.UTC)
    batch = pa.record_batch(
        {
            "topic": pa.array([topic, topic]),
            "correlation_id": pa.array(["c-1", None]),
            "n": pa.array([1, None], pa.int64()),
            "px": pa.array([Decimal("1.50"), Decimal("2")], pa.decimal128(10, 2)),
            "at": pa.array([when, when], pa.timestamp("us", tz="UTC")),
            "tags": pa.array([{"a": 1}, {}], pa.map_(pa.string(), pa.int64())),
            "inner": pa.array([{"x": "y"}, None], pa.struct([("x", pa.string())])),
        }
    )
    publisher.publish(publisher.batch_columns([batch]), f"doc-{uuid.uuid4().hex[:8]}", 0, 0, 0)
    log = journal(uri, topic)
    assert [e["correlation_id"] for e in log] == ["c-1", None]
    first, second = (json.loads(e["data"]) for e in log)
    assert first == {
        "topic": topic,
        "correlation_id": "c-1",
        "n": 1,
        "px": 1.5,
        "at": "2026-01-02T03:04:05.600000+00:00",
        "tags": {"a": 1},
        "inner": {"x": "y"},
    }
    assert second["n"] is None and second["px"] == 2 and second["tags"] == {}
    assert second["inner"] is None and second["correlation_id"] is None


@pytest.mark.integration
def test_a_probe_takes_one_message_not_the_replay_backlog(uri: str, topic: str) -> None:
    """first_micros closes its replay after the first message: the server paces the probe
    (rate), so the connection receives a handful of frames, not the server's replay backlog
    (about 20,000 frames here before)."""
    from ampsclient.spark._core import bookmark_micros, connect, first_micros

    with HAClient(f"pub-{uuid.uuid4().hex[:8]}", MemoryPublishStore()) as pub:
        pub.get_server_chooser().add(uri)
        pub.connect_and_logon()
        for i in range(20_000):
            pub.publish(topic, b'{"id":%d}' % i)
        pub.publish_flush(60_000)
    log = journal(uri, topic)
    client = connect([uri], f"probe-{uuid.uuid4().hex[:6]}", 10_000)
    try:
        assert first_micros(client, topic, None, "[0:0|1|]") == parse_micros(
            log[0]["timestamp"]
        )  # from EPOCH: unpaced (the server skips other topics' records in its block path)
        assert bookmark_micros(client, topic, log[1]["bookmark"]) == parse_micros(
            log[1]["timestamp"]
        )
        before = client.async_client.statistics()["frames_received"]
        when = first_micros(client, topic, None, f"[{log[0]['timestamp']}:0|1|]")
        assert when == parse_micros(log[0]["timestamp"])
        # a replay on the same connection after it: its ack comes after whatever the server
        # had sent for the probe
        assert bookmark_micros(client, topic, log[5]["bookmark"]) == parse_micros(
            log[5]["timestamp"]
        )
        frames = client.async_client.statistics()["frames_received"] - before
    finally:
        client.close()
    assert frames < 2_000, frames
