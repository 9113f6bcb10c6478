"""What both modes of the worker grid share: starting the example's processes, the progress
bar, and the run loop (progress, the ``kill -9`` of one worker part way, its restart, the
deadline)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent

Workers = dict[int, "subprocess.Popen[str]"]


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    """Start ``script`` of this folder with this interpreter (output kept in a pipe)."""
    return subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def bar(done: int, total: int, width: int = 40) -> str:
    """A text progress bar."""
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


class TimedOut(Exception):
    """The run did not finish before its deadline."""


def run_loop(
    workers: Workers,
    *,
    start: Callable[[int], subprocess.Popen[str]],
    done: Callable[[], int],
    finished: Callable[[int], bool],
    total: int,
    kill_at: float,
    timeout: float,
    name: str,
    resumes: str,
) -> int | None:
    """Show progress until ``finished(done())``; once ``kill_at`` of ``total`` is done, kill
    one worker with ``kill -9`` (``workers`` is updated) and ``start`` it again. Returns the
    index of the killed worker (``None``: the run ended first).

    Raises:
        TimedOut: ``timeout`` seconds passed first.
    """
    deadline = time.monotonic() + timeout
    killed: int | None = None
    restarted = False
    while True:
        count = done()
        print("\r" + bar(count, total), end="", flush=True)
        if finished(count):
            print()
            return killed
        if time.monotonic() > deadline:
            print()
            print("timed out", file=sys.stderr)
            raise TimedOut
        if killed is None and count >= kill_at * total:
            killed = 1 % len(workers)
            os.kill(workers[killed].pid, signal.SIGKILL)
            workers[killed].wait()
            print(f"\n  kill -9 {name}-{killed} at {count} processed orders")
        elif killed is not None and not restarted:
            workers[killed] = start(killed)
            restarted = True
            print(f"  {name}-{killed} restarted; {resumes}")
        time.sleep(0.05)  # progress display refresh


class Grid:
    """The processes of one run: K workers (``start(index)`` starts one) and the order
    publisher."""

    def __init__(self, start: Callable[[int], subprocess.Popen[str]], count: int) -> None:
        self.start = start
        self.count = count
        self.workers: Workers = {}
        self.publisher: subprocess.Popen[str] | None = None

    def launch(self, uri: str, orders: int, store: Path) -> None:
        """Start the workers, then the publisher of ``orders`` orders (its store: ``store``)."""
        for i in range(self.count):
            self.workers[i] = self.start(i)
        self.publisher = spawn(
            "publisher.py", "--uri", uri, "--orders", str(orders), "--store", str(store)
        )

    def stop(self) -> None:
        """Stop the workers with SIGTERM (each closes its client) and wait for all."""
        for proc in self.workers.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            proc.wait(30)
        if self.publisher is not None:
            self.publisher.wait(30)

    def kill(self) -> None:
        """Kill whatever is still running (the run failed or was interrupted)."""
        for proc in [*self.workers.values(), self.publisher]:
            if proc is not None and proc.poll() is None:
                proc.kill()
