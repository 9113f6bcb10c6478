"""Batch reads: ranges, parallel partitions, parsed payloads, errors."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import msgpack
from _spark_helpers import journal, publish
from pyspark.sql import functions as F

from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.harness import free_port

COLUMNS = ["topic", "bookmark", "publisher_id", "sequence", "timestamp", "sow_key", "data"]


def rows_of(df: Any) -> list[dict[str, Any]]:
    """Collected rows as dicts, the timestamp in the server's text form, in log order."""
    out = df.withColumn(
        "timestamp", F.date_format("timestamp", "yyyyMMdd'T'HHmmss.SSSSSS'Z'")
    ).collect()
    rows = [{c: r[c] for c in COLUMNS} for r in out]
    for r in rows:
        r["publisher_id"] = int(r["publisher_id"])
    return rows


def expected(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{c: e[c] for c in COLUMNS} for e in entries]


def reader(spark: Any, uri: str, topic: str) -> Any:
    """A fresh DataFrameReader (they are mutable: .option() changes the reader itself)."""
    return spark.read.format("amps").option("uri", uri).option("topic", topic)


def orders(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": i, "symbol": f"S{i % 4}", "qty": i % 7 + 1, "px": 10 + i / 4}
        for i in range(start, start + n)
    ]


@pytest.mark.integration
def test_range_read_equals_the_journal_slice(spark: Any, uri: str, topic: str) -> None:
    publish(uri, topic, orders(120), chunks=3, gap=0.02)
    log = journal(uri, topic)
    assert len(log) == 120
    first, last = log[20]["bookmark"], log[99]["bookmark"]
    df = (
        spark.read.format("amps")
        .option("uri", uri)
        .option("topic", topic)
        .option("bookmark", f"[{first}:{last}]")
        .load()
    )
    got = rows_of(df)
    assert got == expected(log[20:100])
    # exclusive bounds, and the open-ended default (the whole topic up to now)
    exclusive = reader(spark, uri, topic).option("bookmark", f"({first}:{last})").load()
    assert rows_of(exclusive) == expected(log[21:99])
    assert rows_of(reader(spark, uri, topic).load()) == expected(log)


@pytest.mark.integration
def test_parallel_read_by_time_equals_the_journal(spark: Any, uri: str, topic: str) -> None:
    publish(uri, topic, orders(300), chunks=6, gap=0.03)
    log = journal(uri, topic)
    whole = reader(spark, uri, topic).option("numPartitions", 3).load()
    assert whole.rdd.getNumPartitions() == 3
    sizes = whole.rdd.glom().map(len).collect()
    assert sum(sizes) == 300 and all(s > 0 for s in sizes), sizes
    assert sorted(rows_of(whole), key=lambda r: r["sequence"]) == expected(log)
    # a time range split in two: begin inclusive, end exclusive
    begin, end = log[50]["timestamp"], log[250]["timestamp"]
    sliced = (
        reader(spark, uri, topic)
        .option("begin", begin)
        .option("end", end)
        .option("numPartitions", 2)
        .load()
    )
    assert sliced.rdd.getNumPartitions() == 2
    want = [e for e in log if begin <= e["timestamp"] < end]
    assert sorted(rows_of(sliced), key=lambda r: r["sequence"]) == expected(want)
    # a bookmark range split in two
    bounds = f"({log[10]['bookmark']}:{log[280]['bookmark']}]"
    both = reader(spark, uri, topic).option("bookmark", bounds).option("numPartitions", 2).load()
    assert sorted(rows_of(both), key=lambda r: r["sequence"]) == expected(log[11:281])


@pytest.mark.integration
def test_parsed_json_with_a_schema(spark: Any, uri: str, topic: str) -> None:
    docs = orders(40)
    docs[5] = {"id": 5, "symbol": "S1", "qty": "not a number", "px": 1.0}
    publish(uri, topic, docs)
    df = (
        spark.read.format("amps")
        .option("uri", uri)
        .option("topic", topic)
        .option("parse", "json")
        .option("schema", "id BIGINT, symbol STRING, qty INT, px DOUBLE")
        .option("filter", "/id < 20")
        .load()
    )
    assert df.columns == ["bookmark", "timestamp", "id", "symbol", "qty", "px"]
    rows = df.orderBy("id").collect()
    assert [r.id for r in rows] == list(range(20))
    assert rows[5].qty is None  # did not fit INT: NULL (mode PERMISSIVE)
    assert rows[6].qty == 7 and rows[6].px == 11.5 and rows[6].symbol == "S2"
    by_symbol = {r.symbol: r.n for r in df.groupBy("symbol").agg(F.sum("qty").alias("n")).collect()}
    assert by_symbol["S0"] == sum(d["qty"] for d in docs[:20] if d["symbol"] == "S0")
    # a user schema mixing metadata and payload columns
    user = (
        spark.read.format("amps")
        .schema("sequence BIGINT, symbol STRING, px DOUBLE")
        .option("uri", uri)
        .option("topic", topic)
        .option("parse", "json")
        .option("metadataColumns", "sequence")
        .load()
    )
    assert user.count() == 40
    assert user.where("symbol = 'S3'").count() == 10


@pytest.mark.integration
def test_a_schema_projects_and_retypes_metadata_columns(spark: Any, uri: str, topic: str) -> None:
    publish(uri, topic, orders(5))
    log = journal(uri, topic)
    df = reader(spark, uri, topic).schema("data STRING, publisher_id STRING, sequence STRING")
    rows = df.load().collect()
    assert sorted((r.data, r.publisher_id, r.sequence) for r in rows) == sorted(
        (e["data"], str(e["publisher_id"]), str(e["sequence"])) for e in log
    )
    with pytest.raises(Exception, match="not an AMPS metadata column"):
        reader(spark, uri, topic).schema("data STRING, symbol STRING").load().collect()


@pytest.mark.integration
def test_msgpack_payloads_are_binary_or_parsed(spark: Any, uri: str, topic: str) -> None:
    mp_uri = uri.replace("/amps/json", "/amps/msgpack")
    with HAClient(f"mp-{topic}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(mp_uri)
        client.connect_and_logon()
        for i in range(10):
            client.publish(topic, {"id": i, "tags": ["a", "b"][: i % 3], "px": i / 2})
        client.publish_flush(10_000)
    raw = reader(spark, mp_uri, topic).load()
    assert dict(raw.dtypes)["data"] == "binary"
    assert msgpack.unpackb(raw.orderBy("sequence").first().data) == {"id": 0, "tags": [], "px": 0.0}
    parsed = (
        reader(spark, mp_uri, topic)
        .option("parse", "auto")
        .option("schema", "id INT, tags ARRAY<STRING>, px DOUBLE")
        .load()
        .orderBy("id")
        .collect()
    )
    assert [(r.id, r.tags, r.px) for r in parsed][:3] == [
        (0, [], 0.0),
        (1, ["a"], 0.5),
        (2, ["a", "b"], 1.0),
    ]


@pytest.mark.integration
def test_bad_bookmark_fails_with_the_amps_reason(spark: Any, uri: str, topic: str) -> None:
    publish(uri, topic, orders(3))
    df = (
        spark.read.format("amps")
        .option("uri", uri)
        .option("topic", topic)
        .option("bookmark", "[123|456|:]")  # well-formed, but not in the log
        .load()
    )
    with pytest.raises(Exception, match="invalid bookmark"):
        df.collect()
    with pytest.raises(Exception, match="invalid bookmark"):
        spark.read.format("amps").option("uri", uri).option("topic", topic).option(
            "bookmark", "12|x"
        ).load().collect()


@pytest.mark.integration
def test_server_down_fails_the_task_with_the_reason(spark: Any, topic: str) -> None:
    dead = f"tcp://127.0.0.1:{free_port()}/amps/json"
    df = (
        spark.read.format("amps")
        .option("uri", dead)
        .option("topic", topic)
        .option("bookmark", "[0:20260101T000000Z)")
        .option("connectTimeout", 2000)
        .load()
    )
    with pytest.raises(Exception, match="could not connect to AMPS"):
        df.collect()
