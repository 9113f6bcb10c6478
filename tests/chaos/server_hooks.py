"""Test-only faults inside the chaos run's server process (issue 32): a slow or stalled disk
(``--slow-disk``) and steps of the wall clock (``--clock-steps``). Nothing of this is in the
server: the runner starts the server through this module (:class:`HookedServer`), which
installs the hooks and then runs ``python -m ampsclient_server_stub`` in the same process
(this module imports nothing of the server before its hooks are in place; the runner's side
is :mod:`tests.chaos.hook_faults`).

The runner drives the hooks through files in a directory (``--hooks DIR``, polled every
20 ms by a thread of the server process):

* ``fsync-delay``: seconds every ``os.fsync`` of the server waits (``inf``: until the file is
  removed: a stalled disk); the fsync that waits creates ``fsync-held``. The journal's group
  commit fsyncs, so persisted acks wait; nothing else does (subscribers keep receiving).
* ``clock-offset``: seconds added to ``time.time``/``time.time_ns`` (installed before the
  server is imported, so every reader of the wall clock in Python sees the step: the
  journal's receive stamps, bookmarks' timestamps, log lines; ``time.monotonic`` does not
  move, as on a real machine).
"""

from __future__ import annotations

import math
import os
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Final

FSYNC_DELAY: Final = "fsync-delay"
FSYNC_HELD: Final = "fsync-held"
CLOCK_OFFSET: Final = "clock-offset"
_POLL: Final = 0.02


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (the server's poller never reads half)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class _Hooks:
    """The values the poller reads from the hook files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fsync_delay = 0.0
        self.offset = 0.0
        self.offset_ns = 0

    def poll_forever(self) -> None:
        while True:
            self.fsync_delay = self._read(FSYNC_DELAY)
            offset = self._read(CLOCK_OFFSET)
            self.offset_ns = int(offset * 1e9)
            self.offset = offset
            time.sleep(_POLL)

    def _read(self, name: str) -> float:
        try:
            return float((self.directory / name).read_text() or 0)
        except (OSError, ValueError):
            return 0.0


def _install(hooks: _Hooks) -> None:
    real_fsync = os.fsync
    real_time = time.time
    real_time_ns = time.time_ns
    monotonic = time.monotonic

    def fsync(fd: int) -> None:
        delay = hooks.fsync_delay
        if delay > 0:
            (hooks.directory / FSYNC_HELD).touch()
            began = monotonic()
            while hooks.fsync_delay > 0 and (math.isinf(delay) or monotonic() - began < delay):
                time.sleep(0.01)
        real_fsync(fd)

    def wall() -> float:
        return real_time() + hooks.offset

    def wall_ns() -> int:
        return real_time_ns() + hooks.offset_ns

    os.fsync = fsync
    time.time = wall
    time.time_ns = wall_ns


def main() -> None:
    directory = Path(sys.argv[1])
    hooks = _Hooks(directory)
    _install(hooks)
    threading.Thread(target=hooks.poll_forever, name="chaos-hooks", daemon=True).start()
    sys.argv = ["ampsclient_server_stub", *sys.argv[2:]]
    runpy.run_module("ampsclient_server_stub", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
