"""A Spark standalone cluster for the tests: one master and worker processes started from
pyspark's own ``spark-class`` on 127.0.0.1 (executors run in their own JVMs, with their own
Python workers), stopped with their process groups."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")


class _Daemon:
    """One ``spark-class`` process; its output lines kept for waiting on them."""

    def __init__(self, args: list[str], *, log: Path, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_line(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if match := pattern.search(line):
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    tail = "".join(self.lines[-30:])
                    raise RuntimeError(f"spark-class never printed {pattern.pattern!r}:\n{tail}")
                self._changed.wait(min(left, 1.0))

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)
        self._log.close()


class StandaloneCluster:
    """``with StandaloneCluster(work, workers=2) as cluster: cluster.master_url``."""

    def __init__(self, work: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.master_url = ""
        self._daemons: list[_Daemon] = []

    def __enter__(self) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_NO_DAEMONIZE="1",
        )
        try:
            master = _Daemon(
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                ],
                log=self.work / "master.log",
                env=env,
            )
            self._daemons.append(master)
            self.master_url = master.wait_line(_MASTER_URL, 90)[1]
            for n in range(self.workers):
                worker = _Daemon(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        self.master_url,
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        "0",
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--work-dir",
                        str(self.work / f"worker-{n}"),
                    ],
                    log=self.work / f"worker-{n}.log",
                    env=env,
                )
                self._daemons.append(worker)
            for worker in self._daemons[1:]:
                worker.wait_line(re.compile("Successfully registered with master"), 90)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for daemon in reversed(self._daemons):
            daemon.stop()
        self._daemons.clear()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
