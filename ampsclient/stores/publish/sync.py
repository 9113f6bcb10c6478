"""When a file publish store forces its writes to stable storage: the policies, and the
background thread of ``fsync="interval"``.

The group commit itself (:meth:`.segments.SegmentLog.sync_to`) lives with the segments,
because a sync and the unmapping of a segment (roll, growth, close) exclude each other.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Final, Literal, get_args

from ...exceptions import StoreError

if TYPE_CHECKING:
    from .segments import SegmentLog

__all__ = ["FSYNC_POLICIES", "FsyncPolicy", "IntervalSync", "check_policy"]

logger = logging.getLogger("ampsclient.stores.publish")

FsyncPolicy = Literal["always", "interval", "never"]
"""When a :class:`~ampsclient.stores.publish.FilePublishStore` forces its writes to stable
storage (see the class)."""

FSYNC_POLICIES: Final = frozenset(get_args(FsyncPolicy))
"""Every :data:`FsyncPolicy`."""


def check_policy(fsync: str, fsync_interval: float) -> None:
    """Refuse an unknown policy or a non-positive interval with ``ValueError``."""
    if fsync not in FSYNC_POLICIES:
        raise ValueError(f"fsync must be one of {sorted(FSYNC_POLICIES)}, not {fsync!r}")
    if fsync_interval <= 0:
        raise ValueError("fsync_interval must be positive")


class IntervalSync:
    """A daemon thread that syncs ``log`` every ``interval`` seconds when it has unsynced
    writes (``fsync="interval"``). Errors are logged: the next round tries again."""

    __slots__ = ("_interval", "_log", "_stop", "_thread")

    def __init__(self, log: SegmentLog, interval: float, name: str) -> None:
        self._log = log
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        log = self._log
        while not self._stop.wait(self._interval):
            if log.write_gen > log.synced_gen:
                try:
                    log.sync_to(log.write_gen)
                except StoreError:
                    logger.exception("publish store %s: background fsync failed", log.directory)

    def stop(self) -> None:
        """Stop the thread and wait for it (idempotent)."""
        self._stop.set()
        self._thread.join()
