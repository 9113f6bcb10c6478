"""The pipeline on a real Spark standalone cluster: a master and two workers started from
pyspark's ``spark-class``, executors in their own JVMs and Python workers (issue 26).

- ``examples/spark_pipeline.py --master spark://...`` runs its batch read, batch write and
  streaming query on the cluster, end to end, and checks its own totals;
- a streaming query with a checkpoint, reading through the cluster's executors, keeps going
  across a ``kill -9`` and restart of the server in the middle of its backlog: every message of
  the topic is in the sink exactly once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _cluster import StandaloneCluster
from _spark_helpers import journal, publish

from ampsclient_server_stub.harness import ServerProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as running:
        yield running


class Driver:
    """A driver program in its own process; its stdout lines, for waiting on them."""

    def __init__(self, args: list[str], *, cwd: Path) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_line(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if match := re.search(pattern, line):
                        return match
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, (pattern, self.output())
                self._changed.wait(min(left, 1.0))

    def finish(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"the driver did not finish:\n{self.output()}") from None

    def output(self, *, last: int | None = 60) -> str:
        """The driver's output: its last ``last`` lines (for failure messages), or all."""
        return "\n".join(self.lines if last is None else self.lines[-last:])


# the drivers' own deadlines (300 s, 240 s) bound these; pytest's 120 s default is for the rest
@pytest.mark.timeout(360)
def test_the_example_pipeline_runs_on_the_cluster(cluster: StandaloneCluster) -> None:
    driver = Driver(
        [
            "examples/spark_pipeline.py",
            "--master",
            cluster.master_url,
            "--orders",
            "1000",
            "--batches",
            "1",
        ],
        cwd=ROOT,
    )
    assert driver.finish(300) == 0, driver.output()
    out = driver.output(last=None)  # Spark's progress lines push the first ones out of the tail
    assert f"running on {cluster.master_url}" in out
    assert re.search(r"replayed 1000 orders of .* in 2 partitions", out), out
    assert "the SOW accounts for all" in out


@pytest.mark.timeout(480)
def test_a_streaming_query_on_the_cluster_survives_a_server_kill(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    server = ServerProcess(data_dir=tmp_path / "amps", name="cluster-test", die_with_parent=True)
    server.start()
    try:
        uri, topic = server.uri(), "cluster-orders"
        publish(uri, topic, [{"id": i} for i in range(1500)])
        driver = Driver(
            [
                str(Path(__file__).with_name("cluster_job.py")),
                "--master",
                cluster.master_url,
                "--uri",
                uri,
                "--topic",
                topic,
                "--out",
                str(tmp_path / "sink"),
                "--checkpoint",
                str(tmp_path / "checkpoint"),
                "--report",
                str(tmp_path / "report.json"),
                "--expect",
                "3000",
            ],
            cwd=tmp_path,
        )
        try:
            # the first micro-batch of the backlog (400 of 1,500 rows) is in: kill the server
            driver.wait_line(r"^batch \d+ [1-9]\d*$", 180)
            server.kill()
            server.start()
            publish(uri, topic, [{"id": i} for i in range(1500, 3000)])
            assert driver.finish(240) == 0, driver.output()
        finally:
            if driver.proc.poll() is None:
                driver.proc.kill()
                driver.proc.wait(10)
        rows = json.loads((tmp_path / "report.json").read_text())
        log = journal(uri, topic)
    finally:
        server.stop()

    assert len(log) == 3000
    ids = [json.loads(data)["id"] for _, data in rows]
    assert sorted(ids) == list(range(3000)), "every message once: none lost, none repeated"
    assert sorted(bookmark for bookmark, _ in rows) == sorted(e["bookmark"] for e in log)
