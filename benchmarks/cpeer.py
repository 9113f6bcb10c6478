"""The C peer (``benchmarks/cpeer.c``): a sink and a pump that cost next to nothing.

The Python sink and pump (``benchmarks/sink.py``) spend about a microsecond per message of
their own, which throttles a fast client and flatters a slow one. The C peer does the same
work (see its header comment) in well under 0.1 µs per message. It is compiled with the
system's ``cc`` on first use, into ``benchmarks/.build/``.

``CSinkServer()`` and ``CPumpServer(n)`` have the interface of ``SinkServer``/``PumpServer``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "cpeer.c"
BINARY = HERE / ".build" / "cpeer"


def build() -> Path:
    """Compile the peer if its binary is missing or older than its source."""
    if BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("the C peer needs a C compiler (cc)")
    BINARY.parent.mkdir(exist_ok=True)
    subprocess.run([cc, "-O2", "-o", str(BINARY), str(SOURCE)], check=True)
    return BINARY


class _CPeer:
    def __init__(self, *args: str) -> None:
        self._args = [str(build()), *args]
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> _CPeer:
        self._proc = subprocess.Popen(
            self._args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        self.port = int(self._proc.stdout.readline())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)

    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.port}/amps/json"


def CSinkServer() -> _CPeer:
    """The C sink; use as a context manager, then ``.uri()``."""
    return _CPeer("sink")


def CPumpServer(count: int) -> _CPeer:
    """The C pump: answers a subscribe with ``count`` deliveries."""
    return _CPeer("pump", str(count))
