"""Recovery point adapters: where a bookmark store keeps its recovery points across restarts.

* :class:`RecoveryPoint` and the :class:`RecoveryPointAdapter` protocol (duck-typed).
* :class:`FileRecoveryPointAdapter`: an append-only JSON-lines file, crash-safe.
* :class:`SOWRecoveryPointAdapter`: a SOW topic of an AMPS server (official document shape).
* :class:`ConflatingRecoveryPointAdapter`: forwards only the latest point per subscription,
  by count and by time, from a background thread.

See ``docs/bookmark-stores.md``.
"""

from __future__ import annotations

from .base import (
    EMPTY_POINT,
    RecoveryPoint,
    RecoveryPointAdapter,
    RecoveryPointCursor,
    iter_recovery_points,
    make_point,
    point_fields,
)
from .conflating import ConflatingRecoveryPointAdapter
from .file import FILE_FORMAT, FileRecoveryPointAdapter, RecoveryFsyncPolicy
from .sow import DEFAULT_TOPIC, SOWRecoveryPointAdapter

__all__ = [
    "DEFAULT_TOPIC",
    "EMPTY_POINT",
    "FILE_FORMAT",
    "ConflatingRecoveryPointAdapter",
    "FileRecoveryPointAdapter",
    "RecoveryFsyncPolicy",
    "RecoveryPoint",
    "RecoveryPointAdapter",
    "RecoveryPointCursor",
    "SOWRecoveryPointAdapter",
    "iter_recovery_points",
    "make_point",
    "point_fields",
]
