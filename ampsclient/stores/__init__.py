"""Client-side stores: what an HA client keeps to recover after a disconnect or a restart.

Publish stores (:mod:`ampsclient.stores.publish`) hold unacknowledged publishes.
"""

from __future__ import annotations

from .publish import (
    FilePublishStore,
    MemoryPublishStore,
    PublishStore,
    StoredMessage,
    inspect_store,
)

__all__ = [
    "FilePublishStore",
    "MemoryPublishStore",
    "PublishStore",
    "StoredMessage",
    "inspect_store",
]
