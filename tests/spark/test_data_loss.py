"""``failOnDataLoss``: a stream whose checkpointed start is no longer in the transaction log
(its journal files were removed, here by the journal tool's ``prune`` while the server was
down) fails naming the range that is gone, or continues from the oldest message the log still
holds. No Spark session: the reader's methods are called as Spark's workers do."""

from __future__ import annotations

import json
import logging
import pathlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal

from ampsclient.spark import AMPSDataLossError, AMPSStreamReader
from ampsclient.spark._convert import output_schema
from ampsclient.spark._core import ReadOptions
from ampsclient.sync import Client
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.journal_tool import prune_journal

CONFIG = """<AMPSConfig><Name>spark-loss</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>{journal}</JournalDirectory><JournalSize>4KB</JournalSize>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
</AMPSConfig>
"""


@pytest.fixture(scope="module")
def pruned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server whose journal lost its oldest files: 300 messages published, the sealed
    journal files removed while it was down, then restarted."""
    base = tmp_path_factory.mktemp("spark-loss")
    config = base / "config.xml"
    config.write_text(CONFIG.format(journal=base / "journal"))
    topic = f"loss-{uuid.uuid4().hex[:8]}"
    server = ServerProcess(config=config, data_dir=base / "data", name="spark-loss")
    server.start()
    try:
        uri = server.uri()
        with Client("loss-pub") as client:
            client.connect_and_logon(uri)
            for i in range(300):
                client.publish(topic, json.dumps({"i": i, "pad": "x" * 40}))
            client.flush()
        before = journal(uri, topic)
        server.stop()
        removed = prune_journal(pathlib.Path(base / "journal"), 0)
        server.start()
        after = journal(server.uri(), topic)
        yield {"uri": server.uri(), "topic": topic, "before": before, "after": after,
               "removed": removed}  # fmt: skip
    finally:
        server.stop()


def _reader(pruned: dict[str, Any], **options: str) -> AMPSStreamReader:
    opts = {"uri": pruned["uri"], "topic": pruned["topic"], "fenceTopic": "", **options}
    return AMPSStreamReader(opts, output_schema(ReadOptions.parse_options(opts, streaming=True)))


def _checkpointed(pruned: dict[str, Any]) -> dict[str, Any]:
    """The offset a checkpoint would hold after the 10th message (now gone)."""
    entry = pruned["before"][9]
    return {"bookmark": entry["bookmark"], "timestamp": entry["timestamp"]}


def test_the_journal_really_lost_its_oldest_messages(pruned: dict[str, Any]) -> None:
    before, after = pruned["before"], pruned["after"]
    assert pruned["removed"] and len(before) == 300
    assert 0 < len(after) < 290
    assert after == before[-len(after) :]  # the newest ones, intact


def test_a_lost_start_fails_naming_the_range(pruned: dict[str, Any]) -> None:
    reader = _reader(pruned)
    assert reader.opts.fail_on_data_loss
    start = _checkpointed(pruned)
    gone = start["bookmark"]
    with pytest.raises(AMPSDataLossError) as caught:
        reader.latestOffset(start, None)
    text = str(caught.value)
    assert f"no longer holds message {gone} (server time {start['timestamp']})" in text
    assert f"the range ({gone}:0|1|]" in text and "failOnDataLoss=false" in text
    # a task of a micro-batch planned before the files went fails the same way
    end = {"bookmark": pruned["after"][-1]["bookmark"], "timestamp": None}
    (partition,) = reader.partitions(start, end)
    with pytest.raises(AMPSDataLossError, match=re.escape(f"no longer holds message {gone}")):
        list(reader.read(partition))


def test_fail_on_data_loss_false_continues_from_the_oldest_message(
    pruned: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ampsclient.spark")
    reader = _reader(pruned, failOnDataLoss="false")
    start = _checkpointed(pruned)
    end = reader.latestOffset(start, None)
    assert end["bookmark"] == pruned["after"][-1]["bookmark"]
    got: list[str] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            got += batch.column("bookmark").to_pylist()
    assert got == [e["bookmark"] for e in pruned["after"]]  # all that is left, once each
    assert any(
        f"message {start['bookmark']}" in r.getMessage() and "skipped" in r.getMessage()
        for r in caplog.records
    )
    # with two partitions the planner meets the loss itself
    two = _reader(pruned, failOnDataLoss="false", numPartitions="2")
    rows: list[str] = []
    for partition in two.partitions(start, end):
        for batch in two.read(partition):
            rows += batch.column("bookmark").to_pylist()
    assert rows == got
    with pytest.raises(AMPSDataLossError):
        _reader(pruned, numPartitions="2").partitions(start, end)


def test_fail_on_data_loss_is_a_flag() -> None:
    with pytest.raises(Exception, match="option failOnDataLoss: expected true or false"):
        ReadOptions.parse_options(
            {"uri": "tcp://127.0.0.1:1/amps/json", "topic": "t", "failOnDataLoss": "maybe"}
        )
