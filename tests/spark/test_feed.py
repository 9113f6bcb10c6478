"""The executor's read path without Spark: raw payload chunks from a real server
(``_feed.replay_payloads``) and their bulk conversion to Arrow (``_arrow.MetadataBatches``),
checked against the journal and against the row-by-row reference conversion."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa
from _spark_helpers import journal
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ampsclient import _accel
from ampsclient.exceptions import InvalidBookmarkError
from ampsclient.protocol.message import Message
from ampsclient.spark._arrow import MetadataBatches
from ampsclient.spark._convert import default_schema
from ampsclient.spark._core import (
    REPLAY_OPTIONS,
    UNTIMED_REPLAY_OPTIONS,
    AMPSSparkError,
    AMPSUnavailableError,
)
from ampsclient.spark._feed import replay_payloads
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.harness import ServerProcess, free_port
from ampsclient_server_stub.testing.proxy import LoopbackProxy

EVERYTHING = "[0:0|1|]"


def publish_mixed(uri: str, topic: str, n: int) -> None:
    """``n`` JSON messages; every third has a sow key, every fifth a correlation id, some
    carry non-ASCII text."""
    with HAClient(f"pub-{uuid.uuid4().hex[:8]}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        for i in range(n):
            client.publish(
                topic,
                json.dumps({"id": i, "name": "Zoë" if i % 4 == 0 else "Zoe"}),
                correlation_id=f"corr-{i}" if i % 5 == 0 else None,
                sow_key=f"key-{i}" if i % 3 == 0 else None,
            )
        client.publish_flush(30_000)


def payloads_of(
    uri: str, topic: str, *, options: str = REPLAY_OPTIONS, chunk: int = 7
) -> list[list[bytes]]:
    return list(
        replay_payloads(
            [uri], "feed-test", 10_000, topic=topic, filter=None, bookmark=EVERYTHING,
            options=options, chunk=chunk,
        )
    )  # fmt: skip


def batches_for(columns: list[str] | None = None) -> MetadataBatches:
    schema = default_schema("json")
    if columns is not None:
        schema = StructType([schema[c] for c in columns])
    return MetadataBatches(to_arrow_schema(schema, timezone="UTC"), text=True)


@pytest.mark.integration
def test_chunks_are_the_journal_in_order(uri: str, topic: str) -> None:
    publish_mixed(uri, topic, 50)
    chunks = payloads_of(uri, topic, chunk=7)
    log = journal(uri, topic)
    flat = [p for c in chunks for p in c]
    assert [Message(p).bookmark for p in flat] == [e["bookmark"] for e in log]
    assert [Message(p).get_data() for p in flat] == [e["data"] for e in log]
    assert all(len(c) >= 7 for c in chunks[:-1]) and len(chunks[-1]) >= 1
    assert all(p.startswith(b'{"c":"p"') for p in flat)


@pytest.mark.integration
@pytest.mark.parametrize(
    "columns",
    [None, ["data"], ["timestamp", "bookmark"], ["sequence", "correlation_id", "topic"]],
)
def test_bulk_conversion_equals_the_reference_and_the_journal(
    uri: str, topic: str, columns: list[str] | None
) -> None:
    publish_mixed(uri, topic, 40)
    log = journal(uri, topic)
    chunks = payloads_of(uri, topic, chunk=16)
    batches = batches_for(columns)
    got = [batches.batch(c) for c in chunks]
    assert batches.fallbacks == 0
    assert batches.one_pass == (len(chunks) if _accel.delivery_columns is not None else 0)
    for chunk, batch in zip(chunks, got, strict=True):
        assert batch.equals(batches.reference_batch(chunk))
    rows = pa.Table.from_batches(got).to_pylist()
    assert len(rows) == len(log) == 40
    for row, entry in zip(rows, log, strict=True):
        for name, value in row.items():
            if name == "timestamp":
                assert value.strftime("%Y%m%dT%H%M%S.%fZ") == entry["timestamp"]
            else:
                assert value == entry[name], name


@pytest.mark.integration
def test_untimed_replay_has_no_times_and_still_converts_in_bulk(uri: str, topic: str) -> None:
    publish_mixed(uri, topic, 20)
    chunks = payloads_of(uri, topic, options=UNTIMED_REPLAY_OPTIONS, chunk=100)
    assert all(b'"ts":' not in Message(p).raw_payload for c in chunks for p in c)
    batches = batches_for(["bookmark", "publisher_id", "sequence", "data"])
    rows = pa.Table.from_batches([batches.batch(c) for c in chunks]).to_pylist()
    assert batches.fallbacks == 0
    assert [r["bookmark"] for r in rows] == [e["bookmark"] for e in journal(uri, topic)]


@pytest.mark.integration
def test_irregular_chunks_take_the_row_path_with_the_same_result(uri: str) -> None:
    # a "}" inside the header (the topic) cuts the first header inside a string; a body that
    # is not UTF-8 is decoded with replacement characters, as Message.get_data() does
    topic = f"odd}}topic-{uuid.uuid4().hex[:6]}"
    with HAClient(f"pub-{uuid.uuid4().hex[:8]}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        client.publish(topic, b'{"id": 1}')
        client.publish(topic, b"\xff\xfe not utf-8")
        client.publish_flush(30_000)
    (chunk,) = payloads_of(uri, topic, chunk=100)
    batches = batches_for()
    batch = batches.batch(chunk)
    assert batches.fallbacks == 1
    assert batch.equals(batches.reference_batch(chunk))
    rows = batch.to_pylist()
    assert [r["topic"] for r in rows] == [topic, topic]
    assert rows[1]["data"] == b"\xff\xfe not utf-8".decode("utf-8", "replace")

    plain = f"plain-{uuid.uuid4().hex[:6]}"  # the same bad body alone: bulk path, same text
    with HAClient(f"pub-{uuid.uuid4().hex[:8]}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        client.publish(plain, b"\xff\xfe not utf-8")
        client.publish_flush(30_000)
    (chunk,) = payloads_of(uri, plain, chunk=100)
    batches = batches_for()
    assert batches.batch(chunk).to_pylist()[0]["data"] == rows[1]["data"]
    assert batches.fallbacks == 0


@pytest.mark.integration
def test_a_start_not_in_the_log_fails_and_no_server_fails(uri: str, topic: str) -> None:
    publish_mixed(uri, topic, 3)
    feed = replay_payloads(
        [uri], "feed-test", 10_000, topic=topic, filter=None,
        bookmark="[1|2|:0|1|]", options=REPLAY_OPTIONS,
    )  # fmt: skip
    with pytest.raises(InvalidBookmarkError):
        next(feed)
    dead = f"tcp://127.0.0.1:{free_port()}/amps/json"
    feed = replay_payloads(
        [dead], "feed-test", 2_000, topic=topic, filter=None, bookmark=EVERYTHING,
        options=REPLAY_OPTIONS,
    )  # fmt: skip
    with pytest.raises(AMPSSparkError, match="could not connect"):
        next(feed)


def _publish_big(uri: str, n: int) -> None:
    body = json.dumps({"pad": "x" * 200})
    with HAClient(f"feed-killed-pub-{uuid.uuid4().hex[:6]}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        for _ in range(n):  # ~15 MB for 60k: more than the socket buffers hold
            client.publish("big", body)
        client.publish_flush(60_000)


def _bookmarks(payloads: list[bytes]) -> list[str]:
    return [Message(p).bookmark or "" for p in payloads]


@pytest.mark.integration
def test_a_server_killed_mid_replay_is_resumed_after_the_last_delivery(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """kill -9 mid-read, restart on the same port (data kept): the replay goes on from the
    last payload handed out, and the whole read equals the journal, message by message."""
    with ServerProcess(data_dir=tmp_path / "amps", extra_args=["--fsync", "never"]) as server:
        uri = server.uri()
        _publish_big(uri, 60_000)
        log = [e["bookmark"] for e in journal(uri, "big")]
        assert len(log) == 60_000
        feed = replay_payloads(
            [uri], "feed-killed", 10_000, topic="big", filter=None,
            bookmark=f"[{log[10]}:{log[-11]}]", options=REPLAY_OPTIONS, chunk=100,
        )  # fmt: skip
        seen = _bookmarks(next(feed))
        server.kill()
        server.start()  # same port, same data directory
        for chunk in feed:
            seen += _bookmarks(chunk)
    assert seen == log[10:-10]  # no loss, no duplicate, in log order
    assert any("resuming with (" in r.getMessage() for r in caplog.records)


@pytest.mark.integration
def test_a_replay_resumes_on_the_next_uri(tmp_path: Any) -> None:
    """URIs [a proxy, the server]: the proxy cuts the replay and goes away after the first
    chunk; the rest comes through the next URI, after the last payload handed out."""
    with ServerProcess(data_dir=tmp_path / "amps", extra_args=["--fsync", "never"]) as server:
        uri = server.uri()
        _publish_big(uri, 60_000)
        log = [e["bookmark"] for e in journal(uri, "big")]
        with LoopbackProxy("127.0.0.1", server.tcp_port) as proxy:
            via = f"tcp://127.0.0.1:{proxy.port}/amps/json"
            feed = replay_payloads(
                [via, uri], "feed-next", 10_000, topic="big", filter=None,
                bookmark=EVERYTHING, options=REPLAY_OPTIONS, chunk=100,
            )  # fmt: skip
            seen = _bookmarks(next(feed))
            assert proxy.cut() == 1  # the replay's connection goes...
            proxy.stop()  # ...and the proxy takes no new one
        for chunk in feed:
            seen += _bookmarks(chunk)
    assert seen == log


@pytest.mark.integration
def test_a_server_killed_mid_replay_and_not_back_fails_naming_the_rest(tmp_path: Any) -> None:
    with ServerProcess(data_dir=tmp_path / "amps", extra_args=["--fsync", "never"]) as server:
        uri = server.uri()
        _publish_big(uri, 60_000)
        feed = replay_payloads(
            [uri], "feed-killed", 10_000, topic="big", filter=None, bookmark=EVERYTHING,
            options=REPLAY_OPTIONS, chunk=100,
        )  # fmt: skip
        last = _bookmarks(next(feed))[-1]
        server.kill()
        with pytest.raises(AMPSUnavailableError) as caught:
            for chunk in feed:  # what the socket buffers held before the drop shows
                last = _bookmarks(chunk)[-1]
    text = str(caught.value)
    assert f"resuming reading 'big' {EVERYTHING} with ({last}:0|1|]" in text, text
    assert "connection: DisconnectedException" in text and "reconnectTimeout=0" in text


@pytest.mark.integration
def test_closing_early_closes_the_connection(uri: str, topic: str) -> None:
    publish_mixed(uri, topic, 30)
    feed = replay_payloads(
        [uri], "feed-early", 10_000, topic=topic, filter=None, bookmark=EVERYTHING,
        options=REPLAY_OPTIONS, chunk=5,
    )  # fmt: skip
    first = next(feed)
    feed.close()
    assert len(first) >= 5
    # the server is still fine and the whole topic is still there
    assert len([p for c in payloads_of(uri, topic) for p in c]) == 30


@pytest.mark.integration
def test_scan_counts_and_finds_the_last_position(uri: str, topic: str) -> None:
    from ampsclient.spark._core import connect, parse_micros, scan

    publish_mixed(uri, topic, 25)
    log = journal(uri, topic)
    client = connect([uri], "scan-test", 10_000)
    try:
        count, pos = scan(client, topic, None, EVERYTHING, None)
        assert count == 25 and pos is not None
        assert (pos.bookmark, pos.micros) == (
            log[-1]["bookmark"],
            parse_micros(log[-1]["timestamp"]),
        )
        count, pos = scan(client, topic, None, EVERYTHING, 10)  # a row cap: the 10th message
        assert count == 10 and pos is not None and pos.bookmark == log[9]["bookmark"]
        after = f"({log[-1]['bookmark']}:0|1|]"
        assert scan(client, topic, None, after, None) == (0, None)
        count, pos = scan(client, topic, "/id < 5", EVERYTHING, None)  # with a filter
        assert count == 5 and pos is not None and pos.bookmark == log[4]["bookmark"]
    finally:
        client.close()
