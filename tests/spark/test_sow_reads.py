"""``command=sow`` reads (a SOW topic's current state, or its state as of a time) and
``splits`` (content-filter partitions of SOW queries and replays), against a server of this
module's own with SOW topics (one keeps history and is recorded by the transaction log)."""

from __future__ import annotations

import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal

from ampsclient.command import Command
from ampsclient.spark._core import (
    SOW_COLUMNS,
    AMPSSparkError,
    ReadOptions,
    format_micros,
    server_micros as micros_of,
)
from ampsclient.sync import Client
from ampsclient_server_stub.harness import ServerProcess

CONFIG = """<AMPSConfig><Name>spark-sow</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>
    <Topic><Name>pos</Name><MessageType>json</MessageType><Key>/id</Key>
      <History><Window>1h</Window></History></Topic>
    <Topic><Name>plain</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  </SOW>
  <TransactionLog><JournalSize>4MB</JournalSize>
    <Topic><Name>pos</Name><MessageType>json</MessageType></Topic></TransactionLog>
</AMPSConfig>
"""


@pytest.fixture(scope="module")
def sow_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("spark-sow")
    config = base / "config.xml"
    config.write_text(CONFIG)
    with ServerProcess(config=config, data_dir=base / "data", name="spark-sow") as server:
        yield server.uri()


def send(uri: str, topic: str, docs: list[dict[str, Any]]) -> None:
    with Client(f"sow-pub-{uuid.uuid4().hex[:8]}") as client:
        client.connect_and_logon(uri)
        for doc in docs:
            client.publish(topic, json.dumps(doc, separators=(",", ":")))
        client.flush()


def sow_of(uri: str, topic: str) -> dict[str, dict[str, Any]]:
    """sow_key -> {bookmark, data} as our Client's own sow query returns them."""
    out: dict[str, dict[str, Any]] = {}
    with Client(f"sow-check-{uuid.uuid4().hex[:8]}") as client:
        client.connect_and_logon(uri)
        for m in client.execute(Command("sow").set_topic(topic).add_ack_type("completed")):
            if m.command == "ack":
                break
            if m.command == "sow":
                out[m.sow_key or ""] = {"bookmark": m.bookmark, "data": m.get_data()}
    return out


def sow_read(spark: Any, uri: str, topic: str, **options: Any) -> Any:
    reader = (
        spark.read.format("amps").option("uri", uri).option("topic", topic).option("command", "sow")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.fixture
def key() -> str:
    """A field value of this test's own (the module's topics are shared)."""
    return uuid.uuid4().hex[:8]


@pytest.mark.integration
def test_a_sow_read_is_the_topics_current_state(spark: Any, sow_uri: str, key: str) -> None:
    send(sow_uri, "plain", [{"id": f"{key}-{i}", "k": key, "v": i} for i in range(6)])
    send(sow_uri, "plain", [{"id": f"{key}-{i}", "k": key, "v": 100 + i} for i in range(3)])
    df = sow_read(spark, sow_uri, "plain", filter=f"/k = '{key}'")
    assert tuple(df.columns) == SOW_COLUMNS
    rows = df.collect()
    want = {k: v for k, v in sow_of(sow_uri, "plain").items() if json.loads(v["data"])["k"] == key}
    assert len(rows) == 6 == len(want)
    assert {r.sow_key: r.data for r in rows} == {k: v["data"] for k, v in want.items()}
    assert sorted(json.loads(r.data)["v"] for r in rows) == [3, 4, 5, 100, 101, 102]
    assert all(r.topic == "plain" and r.timestamp is not None for r in rows)


@pytest.mark.integration
def test_filter_order_by_and_top_n(spark: Any, sow_uri: str, key: str) -> None:
    send(sow_uri, "plain", [{"id": f"{key}-{i}", "k": key, "v": i} for i in range(10)])
    df = sow_read(
        spark, sow_uri, "plain", filter=f"/k = '{key}' AND /v >= 3", orderBy="/v DESC", topN=4
    )
    assert [json.loads(r.data)["v"] for r in df.collect()] == [9, 8, 7, 6]
    parsed = sow_read(
        spark, sow_uri, "plain", filter=f"/k = '{key}'", orderBy="/v", topN=3,
        parse="json", schema="v BIGINT",
    )  # fmt: skip
    assert parsed.columns == ["sow_key", "v"]
    assert [r.v for r in parsed.collect()] == [0, 1, 2]


@pytest.mark.integration
def test_as_of_reads_the_sow_as_it_was(spark: Any, sow_uri: str, key: str) -> None:
    send(sow_uri, "pos", [{"id": f"{key}-{i}", "k": key, "v": i} for i in range(4)])
    before = journal(sow_uri, "pos")
    send(sow_uri, "pos", [{"id": f"{key}-{i}", "k": key, "v": 10 + i} for i in range(4)])
    after = journal(sow_uri, "pos")[len(before) :]
    t1, t2 = micros_of(before[-1]["timestamp"]), micros_of(after[0]["timestamp"])
    assert t2 - t1 >= 2
    as_of = format_micros((t1 + t2) // 2)
    then = sow_read(spark, sow_uri, "pos", filter=f"/k = '{key}'", asOf=as_of).collect()
    now = sow_read(spark, sow_uri, "pos", filter=f"/k = '{key}'").collect()
    assert sorted(json.loads(r.data)["v"] for r in then) == [0, 1, 2, 3]
    assert sorted(json.loads(r.data)["v"] for r in now) == [10, 11, 12, 13]
    # the bookmark of a record is that of the update it shows
    assert {r.bookmark for r in then} == {e["bookmark"] for e in before[-4:]}
    # a topic without history refuses a historical query, with the server's reason
    with pytest.raises(Exception, match="sow query of 'plain'"):
        sow_read(spark, sow_uri, "plain", asOf=as_of).collect()


@pytest.mark.integration
def test_splits_partition_a_sow_read(spark: Any, sow_uri: str, key: str) -> None:
    send(sow_uri, "plain", [{"id": f"{key}-{i}", "k": key, "v": i} for i in range(12)])
    df = sow_read(
        spark, sow_uri, "plain", filter=f"/k = '{key}'",
        splits=json.dumps(["/v < 4", "/v >= 4 AND /v < 10", "/v >= 10"]),
    )  # fmt: skip
    assert df.rdd.getNumPartitions() == 3
    parts = df.rdd.glom().map(lambda rows: sorted(json.loads(r.data)["v"] for r in rows))
    assert parts.collect() == [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9], [10, 11]]


@pytest.mark.integration
def test_splits_partition_a_replay(spark: Any, sow_uri: str, key: str) -> None:
    send(sow_uri, "pos", [{"id": f"{key}-{i % 5}", "k": key, "v": i} for i in range(20)])
    log = [e for e in journal(sow_uri, "pos") if json.loads(e["data"])["k"] == key]
    df = (
        spark.read.format("amps")
        .option("uri", sow_uri)
        .option("topic", "pos")
        .option("filter", f"/k = '{key}'")
        .option("splits", json.dumps(["/v < 7", "/v >= 7"]))
        .option("fenceTopic", "")  # this server's log records 'pos' only
        .load()
    )
    assert df.rdd.getNumPartitions() == 2
    parts = df.rdd.glom().map(lambda rows: [r.bookmark for r in rows]).collect()
    low = [e["bookmark"] for e in log if json.loads(e["data"])["v"] < 7]
    high = [e["bookmark"] for e in log if json.loads(e["data"])["v"] >= 7]
    assert parts == [low, high]  # each split in log order, no message in both


@pytest.mark.integration
def test_splits_partition_each_micro_batch(
    spark: Any, sow_uri: str, key: str, tmp_path: pathlib.Path
) -> None:
    send(sow_uri, "pos", [{"id": f"{key}-{i}", "k": key, "v": i} for i in range(9)])
    log = [e for e in journal(sow_uri, "pos") if json.loads(e["data"])["k"] == key]
    seen: list[list[list[int]]] = []

    def sink(batch: Any, batch_id: int) -> None:
        seen.append(
            batch.rdd.glom().map(lambda rows: [json.loads(r.data)["v"] for r in rows]).collect()
        )

    query = (
        spark.readStream.format("amps")
        .option("uri", sow_uri)
        .option("topic", "pos")
        .option("filter", f"/k = '{key}'")
        .option("splits", json.dumps(["/v < 3", "/v >= 3"]))
        .option("fenceTopic", "")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert seen == [[[0, 1, 2], [3, 4, 5, 6, 7, 8]]]
    assert len(log) == 9


URI = "tcp://127.0.0.1:1/amps/json"


@pytest.mark.parametrize(
    ("options", "streaming", "error"),
    [
        ({"command": "sow_and_subscribe"}, False, "option command must be replay"),
        ({"command": "sow", "bookmark": "0"}, False, "bookmark do not apply to command=sow"),
        ({"command": "sow", "numPartitions": "2"}, False, "numPartitions do not apply"),
        ({"topN": "3"}, False, "topN need command=sow"),
        ({"command": "sow"}, True, "command=sow is a batch read"),
        ({"command": "sow", "asOf": "epoch"}, False, "asOf='epoch' must be a time"),
        ({"command": "sow", "topN": "0"}, False, "topN must be >= 1"),
        ({"splits": "/a = 1"}, False, "splits is not JSON"),
        ({"splits": "[]"}, False, "splits must be a JSON list"),
        ({"splits": '["/a = 1"]', "numPartitions": "2"}, False, "splits or numPartitions"),
        ({"sow": "true"}, False, "unknown read option"),
    ],
)
def test_sow_and_split_options_are_validated(
    options: dict[str, str], streaming: bool, error: str
) -> None:
    with pytest.raises(AMPSSparkError, match=error.replace("(", r"\(")):
        ReadOptions.parse_options({"uri": URI, "topic": "t", **options}, streaming=streaming)


def test_sow_options_parse(tmp_path: pathlib.Path) -> None:
    opts = ReadOptions.parse_options(
        {"uri": URI, "topic": "t", "command": "SOW", "asOf": "2026-01-01T00:00:00+00:00",
         "orderBy": "/v DESC", "topN": "5", "splits": '["/a = 1", "/a = 2"]'}
    )  # fmt: skip
    assert (opts.command, opts.top_n, opts.order_by, opts.as_of) == (
        "sow",
        5,
        "/v DESC",
        "20260101T000000Z",
    )
    assert opts.splits == ("/a = 1", "/a = 2")
    assert opts.metadata_columns == SOW_COLUMNS
