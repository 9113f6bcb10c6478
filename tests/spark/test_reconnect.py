"""``reconnectTimeout``: the stream planner and a reading task ride through a server restart
(every URI in turn, with back-off), and fail with a typed error naming what they waited for
when it expires. No Spark session: the reader's methods are called as Spark's workers do."""

from __future__ import annotations

import logging
import pathlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_helpers import journal, publish

from ampsclient.spark import AMPSBatchReader, AMPSStreamReader, AMPSUnavailableError
from ampsclient.spark._convert import output_schema
from ampsclient.spark._core import ReadOptions, parse_micros
from ampsclient.spark.datasource import ReplayPartition
from ampsclient_server_stub.harness import ServerProcess, free_port


class _Attempts(logging.Handler):
    """Sets an event when the source logs a failed connection attempt."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.failed = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("cannot connect to"):
            self.failed.set()


@pytest.fixture
def attempts() -> Iterator[_Attempts]:
    logger = logging.getLogger("ampsclient.spark")
    handler, level = _Attempts(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[ServerProcess]:
    """A server of this test's own (killed and restarted on the same port, data kept)."""
    proc = ServerProcess(data_dir=tmp_path / "amps", name="reconnect")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _restart_after_a_failed_attempt(
    server: ServerProcess, attempts: _Attempts, fn: Callable[[], Any]
) -> Any:
    """Kill the server, run ``fn`` in a thread, restart the server once ``fn`` failed to
    connect at least once, and return what ``fn`` returned."""
    server.kill()
    attempts.failed.clear()
    thread, out = _in_thread(fn)
    assert attempts.failed.wait(20), "no connection attempt failed while the server was down"
    assert thread.is_alive(), out  # still retrying, not failed
    server.start()
    thread.join(60)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _stream_reader(options: dict[str, Any]) -> AMPSStreamReader:
    opts = {k: str(v) for k, v in options.items()}
    schema = output_schema(ReadOptions.parse_options(opts, streaming=True))
    return AMPSStreamReader(opts, schema)


@pytest.mark.integration
def test_latest_offset_rides_through_a_server_restart(
    server: ServerProcess, attempts: _Attempts
) -> None:
    uri, topic = server.uri(), f"reconnect-{uuid.uuid4().hex[:8]}"
    publish(uri, topic, [{"i": i} for i in range(10)])
    log = journal(uri, topic)
    reader = _stream_reader({"uri": uri, "topic": topic})
    assert reader.opts.reconnect_timeout_ms == 30_000  # the streaming default
    epoch = reader.initialOffset()
    first = reader.latestOffset(epoch, None)
    assert first["bookmark"] == log[-1]["bookmark"]  # its planning client is connected now

    again = _restart_after_a_failed_attempt(
        server, attempts, lambda: reader.latestOffset(epoch, None)
    )
    assert again == first
    assert parse_micros(again["timestamp"]) == parse_micros(log[-1]["timestamp"])
    # and the micro-batch is planned on the restarted server too
    assert len(reader.partitions(epoch, again)) == 1


@pytest.mark.integration
def test_a_reading_task_waits_for_the_server_to_come_back(
    server: ServerProcess, attempts: _Attempts
) -> None:
    uri, topic = server.uri(), f"reconnect-{uuid.uuid4().hex[:8]}"
    publish(uri, topic, [{"i": i} for i in range(25)])
    log = journal(uri, topic)
    reader = _stream_reader({"uri": uri, "topic": topic})
    end = reader.latestOffset(reader.initialOffset(), None)
    (partition,) = reader.partitions(reader.initialOffset(), end)

    def read_all() -> list[str]:
        out: list[str] = []
        for batch in reader.read(partition):
            out += batch.column("bookmark").to_pylist()
        return out

    got = _restart_after_a_failed_attempt(server, attempts, read_all)
    assert got == [e["bookmark"] for e in log]


@pytest.mark.integration
def test_the_wait_ends_with_a_typed_error_naming_each_uri() -> None:
    dead = [f"tcp://127.0.0.1:{free_port()}/amps/json" for _ in range(2)]
    reader = _stream_reader(
        {"uri": ",".join(dead), "topic": "t", "reconnectTimeout": 700, "connectTimeout": 500}
    )
    started = time.monotonic()
    with pytest.raises(AMPSUnavailableError) as caught:
        reader.latestOffset({"bookmark": "0", "timestamp": None}, None)
    assert time.monotonic() - started < 15.0
    text = str(caught.value)
    assert "finding new messages of 't'" in text and "within reconnectTimeout=700 ms" in text
    assert all(u in text for u in dead), text
    # a reading task: the same, naming the range it was to read
    partition = ReplayPartition(0, "[0:0|1|]")
    with pytest.raises(AMPSUnavailableError, match=r"\(reading 't' \[0:0\|1\|\]\) within"):
        list(reader.read(partition))


def test_reconnect_timeout_is_validated_and_batch_reads_default_to_one_round() -> None:
    batch = ReadOptions.parse_options({"uri": "tcp://127.0.0.1:1/amps/json", "topic": "t"})
    assert batch.reconnect_timeout_ms == 0
    with pytest.raises(Exception, match="reconnectTimeout must be >= 0"):
        ReadOptions.parse_options(
            {"uri": "tcp://127.0.0.1:1/amps/json", "topic": "t", "reconnectTimeout": "-1"}
        )
    dead = f"tcp://127.0.0.1:{free_port()}/amps/json"
    opts = {"uri": dead, "topic": "t", "connectTimeout": "500"}
    reader = AMPSBatchReader(opts, output_schema(ReadOptions.parse_options(opts)))
    with pytest.raises(AMPSUnavailableError, match="reconnectTimeout=0, each URI tried once"):
        reader.partitions()
