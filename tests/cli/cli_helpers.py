"""Helpers for the command-line client tests: real server processes, the real command."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """<AMPSConfig><Name>cli-test</Name><Transports>
<Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
<Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
</Transports><SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
</Topic></SOW><TransactionLog><JournalSize>16MB</JournalSize><Topic><Name>.*</Name></Topic>
</TransactionLog></AMPSConfig>"""
"""A SOW topic ``orders`` keyed by ``/id``; the transaction log records every topic (a config
file without <TransactionLog> records nothing, as AMPS)."""


@dataclass
class ServerProcess:
    """``python -m ampsclient_server_stub`` in a child process."""

    proc: subprocess.Popen[str]
    tcp_port: int
    log: list[str] = field(default_factory=list)

    @property
    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.tcp_port}/amps/json"


@contextlib.contextmanager
def server_process(work: Path, config: str = CONFIG) -> Iterator[ServerProcess]:
    """Start a reference server process on free ports; stop it (SIGTERM) at the end."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "amps.xml").write_text(config)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ampsclient_server_stub",
            "--config",
            "amps.xml",
            "--data-dir",
            "data",
        ],
        cwd=work,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    found = threading.Event()
    port: list[int] = []

    def reader() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            match = re.search(r"listening tcp://[^:]+:(\d+)", line)
            if match and not port:
                port.append(int(match.group(1)))
                found.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        assert found.wait(30), "".join(lines)
        yield ServerProcess(proc, port[0], lines)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        thread.join(5)


def cli(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ampsclient ARGS`` to its end."""
    return subprocess.run(
        [sys.executable, "-m", "ampsclient", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def start_cli(*args: str) -> subprocess.Popen[str]:
    """Start ``python -m ampsclient ARGS`` with pipes on stdin, stdout and stderr."""
    return subprocess.Popen(
        [sys.executable, "-m", "ampsclient", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
