"""Planning and reading waits end: a replay the server stops answering raises a typed error
that names what it waited for (no Spark session: the planner's steps on a plain client, the
executor's read loop on its own)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from ampsclient import Client
from ampsclient.exceptions import TimeoutError as AMPSTimeoutError
from ampsclient.protocol.message import Message
from ampsclient.spark import AMPSSparkError
from ampsclient.spark._core import format_micros, replay
from ampsclient.spark._feed import replay_payloads
from ampsclient_server_stub.harness import ServerProcess


@pytest.fixture
def frozen_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A reference server of this test's own (the test stops it with SIGSTOP)."""
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("amps-waits"), name="waits")
    server.start()
    try:
        yield server
    finally:
        pid = server.pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        server.stop()


def test_a_replay_the_server_stops_answering_raises_a_named_timeout(
    frozen_server: ServerProcess,
) -> None:
    topic = f"waits-{uuid.uuid4().hex[:8]}"
    with Client(f"pub-{uuid.uuid4().hex[:8]}") as pub:
        pub.connect_and_logon(frozen_server.uri())
        pub.publish(topic, '{"i":1}')
        pub.flush()
    with Client(f"plan-{uuid.uuid4().hex[:8]}") as client:
        client.connect_and_logon(frozen_server.uri())
        assert len(list(replay(client, topic, None, "[0:0|1|]", wait_ms=5000))) == 1
        pid = frozen_server.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the server answers nothing from now on
        started = time.monotonic()
        with pytest.raises(AMPSTimeoutError, match=r"within 300 ms for the replay of 'waits-"):
            list(replay(client, topic, None, "[0:0|1|]", wait_ms=300))
        assert time.monotonic() - started < 5.0


def test_a_reading_task_the_server_stops_answering_raises_a_named_timeout(
    frozen_server: ServerProcess,
) -> None:
    """The executor's read loop (``replay_payloads``) waits ``wait_ms`` at most for the next
    message: the range ends in an hour, so the replay goes on live after the journal's
    messages; the server is frozen (SIGSTOP) and the task fails with a timeout naming the
    topic and range instead of waiting for ever."""
    topic = f"waits-{uuid.uuid4().hex[:8]}"
    with Client(f"pub-{uuid.uuid4().hex[:8]}") as pub:
        pub.connect_and_logon(frozen_server.uri())
        for i in range(3):
            pub.publish(topic, f'{{"i":{i}}}')
        pub.flush()
    end = format_micros(int((time.time() + 3600) * 1_000_000))
    chunks = replay_payloads(
        [frozen_server.uri()],
        f"read-{uuid.uuid4().hex[:8]}",
        5000,
        topic=topic,
        filter=None,
        bookmark=f"[0:{end}]",
        options="",
        chunk=3,
        wait_ms=5000,
    )
    outcome: list[BaseException | int] = []

    def read() -> None:
        try:
            first = next(chunks)
            assert [Message(p).get_data() for p in first] == [f'{{"i":{i}}}' for i in range(3)]
            pid = frozen_server.pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)  # the server answers nothing from now on
            outcome.append(len(list(chunks)))
        except BaseException as exc:  # the outcome is checked by the test's thread
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    started = time.monotonic()
    reader.start()
    reader.join(30.0)
    assert not reader.is_alive(), "the read loop waited on a frozen server with no deadline"
    assert len(outcome) == 1 and isinstance(outcome[0], AMPSTimeoutError), outcome
    assert re.search(rf"within 5000 ms while reading '{topic}' \[0:", str(outcome[0]))
    assert time.monotonic() - started < 20.0


def test_read_timeout_is_the_reading_tasks_wait() -> None:
    from ampsclient.spark._core import WAIT_MS, ReadOptions

    base = {"uri": "tcp://127.0.0.1:9/amps/json", "topic": "t"}
    assert ReadOptions.parse_options(base).read_timeout_ms == WAIT_MS
    assert ReadOptions.parse_options({**base, "readTimeout": "2500"}).read_timeout_ms == 2500
    with pytest.raises(AMPSSparkError, match="readTimeout must be >= 1"):
        ReadOptions.parse_options({**base, "readTimeout": "0"})
