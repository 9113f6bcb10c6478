"""Planning waits end: a replay the server stops answering raises a typed error that names
what it waited for (no Spark session: the planner's steps on a plain client)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from ampsclient import Client
from ampsclient.exceptions import TimeoutError as AMPSTimeoutError
from ampsclient.spark._core import replay
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
