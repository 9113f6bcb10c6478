"""Publish stores: keep published messages until the server's persisted ack covers them.

* :class:`MemoryPublishStore`: in process memory (survives reconnects).
* :class:`FilePublishStore`: an append-only segmented log with group commit (also survives
  restarts and, with ``fsync="always"``, machine crashes).

``python -m ampsclient.stores.publish <dir>`` inspects a file store (see
``docs/publish-stores.md``).
"""

from __future__ import annotations

from .base import Build, PublishStore, Replayer, StoredMessage, initial_sequence
from .file import (
    FilePublishStore,
    FsyncPolicy,
    SegmentInfo,
    StoreInspection,
    TornTail,
    inspect_store,
)
from .memory import MemoryPublishStore

__all__ = [
    "Build",
    "FilePublishStore",
    "FsyncPolicy",
    "MemoryPublishStore",
    "PublishStore",
    "Replayer",
    "SegmentInfo",
    "StoreInspection",
    "StoredMessage",
    "TornTail",
    "initial_sequence",
    "inspect_store",
]
