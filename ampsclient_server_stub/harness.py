"""Run reference servers as separate processes: start, ``kill -9``, restart on the same ports.

For tests and examples that need real process faults::

    with ServerProcess(data_dir=tmp_path / "a") as server:
        client.connect(server.uri())
        server.kill()            # SIGKILL, like a crash
        server.start()           # same ports, same data directory

Ports are chosen free at construction (so a restarted server comes back where clients
expect it) unless given. Only loopback addresses are used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

__all__ = ["ServerProcess", "free_port", "port_range"]

log = logging.getLogger("ampsclient_server_stub.harness")


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGKILL the server when its parent dies, so a test
    killed by a timeout never leaves a server behind. Best effort elsewhere."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


_handed_out: set[int] = set()
_handed_lock = threading.Lock()


def _ephemeral_start() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), or ``None`` when unknown."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _worker_slice() -> tuple[int, int]:
    """``(index, count)`` of this pytest-xdist worker (``PYTEST_XDIST_WORKER=gwN`` of
    ``PYTEST_XDIST_WORKER_COUNT``), ``(0, 1)`` outside xdist or when they do not parse."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit():
        index, total = int(worker[2:]), int(count)
        if 0 <= index < total:
            return index, total
    return 0, 1


def port_range() -> tuple[int, int]:
    """``(low, high)``: the half-open range :func:`free_port` picks from, or ``(0, 0)`` when
    the kernel's ephemeral range is unknown (then the kernel picks).

    Under pytest-xdist each worker gets its own slice of the range, so two workers (and
    the servers they start) never pick the same port.
    """
    start = _ephemeral_start()
    if start is None or start <= 11024:
        return 0, 0
    index, count = _worker_slice()
    width = 10000 // count
    low = start - 10000 + index * width
    return low, low + width


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``.

    Where the kernel's ephemeral range is known (Linux), the port is picked below it: a
    port from inside that range can be taken meanwhile as the local end of any outgoing
    connection, which would keep a server (or a restarted one, or a replication listener
    named in another instance's config) from binding it for as long as that connection
    lives. A port is not handed out twice by one process, and under pytest-xdist each
    worker picks from its own slice (:func:`port_range`).
    """
    low, high = port_range()
    if high > low:
        rng = random.Random()
        for _ in range(200):
            port = rng.randrange(low, high)
            with _handed_lock:
                if port in _handed_out:
                    continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            with _handed_lock:
                if port in _handed_out:
                    continue
                _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A reference server in a child process.

    Args:
        data_dir: the server's data directory (SOW files, journal), kept across restarts.
        name: the instance name.
        tcp_port / ws_port: fixed ports (default: free ones picked now).
        config: an AMPS-style XML config file (flags still override ports and names).
        extra_args: more command-line arguments.
        log_level: the child's log level.
        die_with_parent: kill the server if this process dies (Linux; see the attribute).
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        name: str = "ampsclient-server",
        tcp_port: int | None = None,
        ws_port: int | None = None,
        config: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        log_level: str = "WARNING",
        die_with_parent: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.name = name
        self._auto_ports = not tcp_port and not ws_port
        self._started_once = False
        self.tcp_port = tcp_port or free_port()
        self.ws_port = ws_port or free_port()
        self.config = config
        self.extra_args = list(extra_args)
        self.log_level = log_level
        self.die_with_parent = die_with_parent
        """Linux: the server is killed when the thread that started it dies (start it from a
        thread that lives as long as you need the server, e.g. the main thread)."""
        self.proc: subprocess.Popen[str] | None = None
        self.stderr_lines: list[str] = []
        self._reader: threading.Thread | None = None

    def command(self) -> list[str]:
        """The command line that starts the server."""
        cmd = [
            sys.executable,
            "-m",
            "ampsclient_server_stub",
            "--host",
            "127.0.0.1",
            "--tcp-port",
            str(self.tcp_port),
            "--ws-port",
            str(self.ws_port),
            "--name",
            self.name,
            "--log-level",
            "INFO",
        ]
        if self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        return cmd + self.extra_args

    def start(self, timeout: float = 30.0) -> ServerProcess:
        """Start the process and wait until it listens (retrying while the port is in use)."""
        if self.running:
            return self
        deadline = time.monotonic() + timeout
        while True:
            self._spawn()
            if self._wait_listening(deadline):
                self._started_once = True
                return self
            if self.proc is not None:
                self.proc.wait(10)
            code = self.proc.poll() if self.proc else None
            tail = "".join(self.stderr_lines[-20:])
            if time.monotonic() > deadline or "address already in use" not in tail.lower():
                self.kill()
                raise RuntimeError(f"server {self.name} did not start (exit {code}):\n{tail}")
            if self._auto_ports and not self._started_once:
                # a free port picked earlier was taken meanwhile by someone else: pick again
                self.tcp_port = free_port()
                self.ws_port = free_port()
            else:
                time.sleep(0.05)  # our old socket is still closing: retry shortly

    def _spawn(self) -> None:
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_lines = []
        self._listening = threading.Event()
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            preexec_fn=_die_with_parent if self.die_with_parent else None,
        )
        self._reader = threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True)
        self._reader.start()

    def _read_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.stderr_lines.append(line)
            if "listening" in line and "tcp://" in line:
                self._listening.set()
        self._listening.set()

    def _wait_listening(self, deadline: float) -> bool:
        left = max(0.0, deadline - time.monotonic())
        self._listening.wait(left)
        return self.running and any("listening" in line for line in self.stderr_lines)

    @property
    def running(self) -> bool:
        """``True`` while the process is alive."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id."""
        return None if self.proc is None else self.proc.pid

    def uri(self, kind: str = "tcp", message_type: str = "json") -> str:
        """``tcp://127.0.0.1:PORT/amps/json`` (or ``ws``)."""
        port = self.tcp_port if kind == "tcp" else self.ws_port
        return f"{kind}://127.0.0.1:{port}/amps/{message_type}"

    def kill(self) -> None:
        """``kill -9`` the server and reap it."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (a clean shutdown) and wait; SIGKILL if it does not exit in time."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.terminate()
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("server %s ignored SIGTERM; killing it", self.name)
            self.kill()
            return proc.returncode
        if self._reader is not None:  # its end of stream must not reach a later start()
            self._reader.join(5)
        return code

    def restart(self) -> ServerProcess:
        """Kill (if running) and start again on the same ports and data directory."""
        self.kill()
        return self.start()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
