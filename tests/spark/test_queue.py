"""``command=queue``: a queue read at least once, tied to Spark's commits, against a reference
server process with queues. Messages are leased per micro-batch by the driver, acknowledged
only when the batch commits, and delivered again when it never does (a failed query, a stop).

The first tests call the reader's methods as Spark's workers do (no session); the others run
streaming queries on the session's Spark."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ampsclient.command import Command
from ampsclient.spark import AMPSSparkError
from ampsclient.spark._convert import output_schema
from ampsclient.spark._core import ReadOptions
from ampsclient.spark._queue import AMPSQueueStreamReader
from ampsclient.spark.datasource import AMPSBatchReader
from ampsclient.sync import Client
from ampsclient_server_stub.harness import ServerProcess

QUEUES = 8
CONFIG = """<AMPSConfig><Name>spark-queue</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>{journal}</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>{queues}</SOW>
</AMPSConfig>
"""
QUEUE = """<Queue><Name>work{n}</Name><MessageType>json</MessageType>
  <UnderlyingTopic>jobs{n}</UnderlyingTopic>
  <MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue>"""
"""Queue ``work<n>`` over topic ``jobs<n>``; a subscription may hold 100 leases."""

WAIT_S = 30.0


@pytest.fixture(scope="module")
def queue_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("spark-queue")
    config = base / "config.xml"
    queues = "".join(QUEUE.format(n=n) for n in range(QUEUES))
    config.write_text(CONFIG.format(journal=base / "journal", queues=queues))
    with ServerProcess(config=config, data_dir=base / "data", name="spark-queue") as server:
        yield server


_used: list[int] = []


@pytest.fixture
def queue(queue_server: ServerProcess) -> tuple[str, str, str]:
    """``(uri, queue topic, underlying topic)``: a queue of this test's own."""
    n = len(_used)
    assert n < QUEUES, "add queues to the module's config"
    _used.append(n)
    return queue_server.uri(), f"work{n}", f"jobs{n}"


def publish(uri: str, topic: str, ids: range | list[int]) -> None:
    with Client(f"pub-{uuid.uuid4().hex[:8]}") as client:
        client.connect_and_logon(uri)
        for i in ids:
            client.publish(topic, json.dumps({"i": i}))
        client.flush()


def consume_until_marker(uri: str, queue: str, marker: int) -> list[int]:
    """A second consumer of ``queue``: the ``i`` of each message it is delivered, in order,
    up to ``marker`` (published after it subscribed); it acknowledges each one."""
    got: list[int] = []
    with Client(f"other-{uuid.uuid4().hex[:8]}") as client:
        client.connect_and_logon(uri)
        cmd = Command("subscribe").set_topic(queue).set_options("max_backlog=100")
        stream = client.execute(cmd).timeout(int(WAIT_S * 1000))
        publish(uri, queue.replace("work", "jobs"), [marker])
        for message in stream:
            assert message is not None, f"nothing within {WAIT_S} s; got {got}"
            if message.command != "p" and message.command != "publish":
                continue
            client.ack(queue, message.bookmark or "")
            got.append(json.loads(message.get_data())["i"])
            if got[-1] == marker:
                break
        client.flush_acks()
        client.flush()
        stream.close()
    return got


def reader(uri: str, queue: str, **more: str) -> AMPSQueueStreamReader:
    options = {"uri": uri, "topic": queue, "command": "queue", **more}
    schema = output_schema(ReadOptions.parse_options(options, streaming=True))
    return AMPSQueueStreamReader(options, schema)


def rows(r: AMPSQueueStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
    out: list[int] = []
    for partition in r.partitions(start, end):
        for batch in r.read(partition):
            for data in batch.column("data").to_pylist():
                out.append(json.loads(data)["i"])
    return out


def test_a_batch_is_acknowledged_only_when_spark_commits_it(
    queue: tuple[str, str, str],
) -> None:
    uri, q, jobs = queue
    publish(uri, jobs, range(6))
    r = reader(uri, q, numPartitions="2")
    try:
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        assert end != start and end["batch"] == 1
        assert rows(r, start, end) == list(range(6))  # message by message, in order
        # leased to the query, not yet committed: another consumer is given none of them
        assert consume_until_marker(uri, q, 100) == [100]
        r.commit(end)
    finally:
        r.stop()  # the connection ends: anything not acknowledged would come back
    assert consume_until_marker(uri, q, 101) == [101]  # acknowledged: the queue is empty


def test_a_batch_that_never_commits_is_delivered_again(queue: tuple[str, str, str]) -> None:
    uri, q, jobs = queue
    publish(uri, jobs, range(5))
    r = reader(uri, q)
    try:
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        assert rows(r, start, end) == list(range(5))
    finally:
        r.stop()  # as when a failed query's source process ends: no commit
    assert consume_until_marker(uri, q, 100) == [0, 1, 2, 3, 4, 100]


def test_a_full_backlog_gets_an_empty_batch_so_that_spark_commits_the_last_one(
    queue: tuple[str, str, str],
) -> None:
    """Spark commits micro-batch N when it plans N+1: with every lease in batch N and nothing
    new, ``latestOffset`` still moves (an empty batch), else N would never be acknowledged."""
    uri, q, jobs = queue
    publish(uri, jobs, range(7))
    r = reader(uri, q, maxBacklog="3", maxRecordsPerTrigger="2", ackBatchSize="2")
    try:
        got: list[int] = []
        offset = r.initialOffset()
        planned = 0
        while True:
            end = r.latestOffset(offset, ReadMaxRows(2))
            if end == offset:
                break
            planned += 1
            assert planned < 30, got
            got += rows(r, offset, end)
            r.commit(offset)  # Spark: the previous batch, when this one is planned
            offset = end
        assert got == list(range(7))
        assert r._leases is not None and r._leases.granted == 3
    finally:
        r.stop()
    assert consume_until_marker(uri, q, 100) == [100]


def test_a_commit_after_a_server_restart_acknowledges_on_the_new_connection(
    queue_server: ServerProcess, queue: tuple[str, str, str]
) -> None:
    """The driver's connection drops between a batch and its commit: AMPS returns the leases
    and, once the server is back, delivers them again to the new subscription; the commit
    still acknowledges the batch (any subscriber may, AMPS' default ``sublet`` leasing) and
    those messages are not read a second time."""
    uri, q, jobs = queue
    publish(uri, jobs, range(6))
    r = reader(uri, q)
    try:
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        assert rows(r, start, end) == list(range(6))
        queue_server.stop()
        queue_server.start()
        assert queue_server.uri() == uri
        r.commit(end)  # connects and subscribes again (reconnectTimeout), then acknowledges
        assert r.latestOffset(end, ReadAllAvailable()) == end  # nothing new, nothing to commit
    finally:
        r.stop()
    assert consume_until_marker(uri, q, 100) == [100]


def test_a_commit_the_server_does_not_answer_fails_naming_it(
    queue_server: ServerProcess, queue: tuple[str, str, str]
) -> None:
    """Every wait of the driver has a deadline (``readTimeout``): a frozen server (SIGSTOP)
    makes the commit fail with an error that names the acknowledgement it waited for."""
    uri, q, jobs = queue
    publish(uri, jobs, range(3))
    r = reader(uri, q, readTimeout="1500")
    pid = queue_server.pid
    assert pid is not None
    try:
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        assert rows(r, start, end) == [0, 1, 2]
        os.kill(pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            with pytest.raises(
                AMPSSparkError,
                match=rf"acknowledging 3 message\(s\) of queue '{q}': TimedOutException: "
                r"timed out waiting for the sow_delete ack",
            ):
                r.commit(end)
            assert time.monotonic() - began < 20.0
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        r.stop()


def test_queue_options_are_checked(queue: tuple[str, str, str]) -> None:
    uri, q, _ = queue
    with pytest.raises(AMPSSparkError, match="AMPS does not let a subscriber choose its lease"):
        reader(uri, q, leasePeriod="30s")
    with pytest.raises(AMPSSparkError, match=r"maxBacklog need command=queue"):
        ReadOptions.parse_options({"uri": uri, "topic": q, "maxBacklog": "10"})
    with pytest.raises(AMPSSparkError, match=r"bookmark do not apply to command=queue"):
        reader(uri, q, bookmark="0")
    options = {"uri": uri, "topic": q, "command": "queue"}
    with pytest.raises(AMPSSparkError, match="command=queue is a streaming read"):
        AMPSBatchReader(options, output_schema(ReadOptions.parse_options(options)))


# --------------------------------------------------------------------------- with Spark


def queue_stream(spark: Any, uri: str, q: str, **options: Any) -> Any:
    reader = spark.readStream.format("amps").option("uri", uri).option("topic", q)
    reader = reader.option("command", "queue")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60.0
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.integration
@pytest.mark.timeout(300)  # two queries, the first one starting Spark's Python workers
def test_a_failed_micro_batch_is_delivered_again_and_nothing_is_lost(
    spark: Any, queue: tuple[str, str, str], tmp_path: pathlib.Path
) -> None:
    uri, q, jobs = queue
    checkpoint = str(tmp_path / "checkpoint")
    seen: list[tuple[int, list[int]]] = []  # (batch id, ids) of batches the sink completed
    failed: list[list[int]] = []
    lock = threading.Lock()

    def sink(batch: Any, batch_id: int) -> None:
        ids = sorted(json.loads(r.data)["i"] for r in batch.select("data").collect())
        if ids and not failed:
            failed.append(ids)
            raise RuntimeError("simulated sink failure")
        with lock:
            seen.append((batch_id, ids))

    publish(uri, jobs, range(30))
    first = (
        queue_stream(spark, uri, q, maxRecordsPerTrigger=10)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="simulated sink failure"):
        first.awaitTermination(120)
    assert len(failed) == 1 and failed[0] and seen == []

    second = (  # the same checkpoint: the failed batch is replayed (empty), then new leases
        queue_stream(spark, uri, q, maxRecordsPerTrigger=10)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def delivered() -> list[int]:
            with lock:
                return sorted(i for _, ids in seen for i in ids)

        wait_for(lambda: len(delivered()) >= 30, "every message")

        def last_done() -> bool:  # a batch after the last one with data: that one committed
            with lock:
                last = max(b for b, ids in seen if ids)
                return any(b > last for b, _ in seen)

        wait_for(last_done, "the commit of the last batch")
    finally:
        second.stop()
    assert second.exception() is None
    assert delivered() == list(range(30))  # none lost, none twice (nothing had committed)
    assert set(failed[0]) <= set(delivered())  # the failed batch's messages came again
    assert consume_until_marker(uri, q, 100) == [100]  # all acknowledged


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_restart_from_the_checkpoint_continues_with_new_leases(
    spark: Any, queue: tuple[str, str, str], tmp_path: pathlib.Path
) -> None:
    uri, q, jobs = queue
    checkpoint = str(tmp_path / "checkpoint")
    got: list[list[int]] = []

    def sink(batch: Any, batch_id: int) -> None:
        got.append([json.loads(r.data)["i"] for r in batch.select("data").collect()])

    def run() -> list[int]:
        query = (
            queue_stream(spark, uri, q, maxRecordsPerTrigger=10, numPartitions=2)
            .select("topic", "bookmark", "sequence", "data")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    publish(uri, jobs, range(25))
    assert run() == [10, 10, 5]  # maxRecordsPerTrigger holds
    publish(uri, jobs, range(25, 40))
    assert run() == [10, 5]
    delivered = [i for ids in got for i in ids]
    assert sorted(delivered) == list(range(40)) and len(delivered) == 40
    assert consume_until_marker(uri, q, 100) == [100]
