"""Write failures of the server's own files, one condition per store, reported once.

A full disk refuses every write to a store until space returns: the transaction log
(``tx store failure``), a SOW topic's file (``sow store failed``), a queue's metadata files,
the replication holds. Logging each refused write would write thousands of lines a second (a
log that may be on the same full disk); :class:`StorageFaults` turns them into one
*condition* per store instead: one error line when the first write fails, a count of the
writes refused while it lasts, one line when a write to the store succeeds again, and the
conditions in force for the admin interface (``/amps/instance/storage``).

No I/O of its own beyond the log; the stores call :meth:`StorageFaults.failed` and
:meth:`StorageFaults.succeeded` (cheap while nothing failed: callers test :attr:`active`).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["StorageFault", "StorageFaults"]

logger = logging.getLogger(__name__)

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _is_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in _FULL:
        return True
    text = str(exc).lower()  # SQLite: "database or disk is full"
    return "disk is full" in text or "no space left" in text


@dataclass(slots=True)
class StorageFault:
    """A store whose writes fail."""

    store: str
    """What cannot be written: ``journal``, ``sow/<topic>``, ``queue/<name>``, ..."""
    path: str
    """The file (or directory) written."""
    error: str
    """The first failure's error."""
    disk_full: bool
    """Whether it is a full disk (``ENOSPC``, ``EDQUOT``, SQLite's ``disk is full``)."""
    since: float
    """Wall time of the first failure."""
    refused: int = 1
    """Writes that failed while the condition lasted (the first included)."""


class StorageFaults:
    """The stores whose writes fail now, and how many conditions ended (see the module).

    Args:
        clock: wall clock (epoch seconds) for :attr:`StorageFault.since`.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.active: dict[str, StorageFault] = {}
        """The conditions in force, by store (empty while every write succeeds)."""
        self.ended = 0
        """Conditions that ended (a write succeeded again) since the start."""

    def failed(self, store: str, path: str, exc: BaseException) -> None:
        """A write to ``store`` (file ``path``) failed with ``exc``: the first one is logged
        (an error line naming the store, the file and the error), the next ones counted."""
        fault = self.active.get(store)
        if fault is not None:
            fault.refused += 1
            return
        full = _is_full(exc)
        self.active[store] = StorageFault(store, path, str(exc), full, self._clock())
        logger.error(
            "storage: %s cannot be written (%s): %s; %s until a write succeeds again "
            "(further failures are counted, not logged)",
            store,
            path,
            exc,
            "the disk is full" if full else "writes fail",
        )

    def succeeded(self, store: str) -> None:
        """A write to ``store`` succeeded: a condition in force ends (one line with its
        count and length)."""
        fault = self.active.pop(store, None)
        if fault is None:
            return
        self.ended += 1
        logger.warning(
            "storage: %s is written again after %d failed write(s) in %.1f s (%s)",
            store,
            fault.refused,
            max(0.0, self._clock() - fault.since),
            fault.error,
        )

    def snapshot(self) -> dict[str, Any]:
        """The admin interface's ``/amps/instance/storage``: ``conditions`` (the stores whose
        writes fail: file, error, ``disk_full``, ``since``, ``failed_writes``) and
        ``conditions_ended``."""
        return {
            "conditions": {
                f.store: {
                    "path": f.path,
                    "error": f.error,
                    "disk_full": f.disk_full,
                    "since": f.since,
                    "failed_writes": f.refused,
                }
                for f in self.active.values()
            },
            "conditions_ended": self.ended,
        }
