"""Client-side stores: what an HA client keeps to recover after a disconnect or a restart.

Publish stores (:mod:`ampsclient.stores.publish`) hold unacknowledged publishes. Bookmark
stores (:mod:`ampsclient.stores.bookmark`) track what bookmark subscriptions have processed;
recovery point adapters (:mod:`ampsclient.stores.recovery`) persist their recovery points.
"""

from __future__ import annotations

from .bookmark import BookmarkStore, MemoryBookmarkStore, MessageLike
from .publish import (
    FilePublishStore,
    MemoryPublishStore,
    PublishStore,
    StoredMessage,
    inspect_store,
)
from .recovery import (
    ConflatingRecoveryPointAdapter,
    FileRecoveryPointAdapter,
    RecoveryPoint,
    RecoveryPointAdapter,
    SOWRecoveryPointAdapter,
)

__all__ = [
    "BookmarkStore",
    "ConflatingRecoveryPointAdapter",
    "FilePublishStore",
    "FileRecoveryPointAdapter",
    "MemoryBookmarkStore",
    "MemoryPublishStore",
    "MessageLike",
    "PublishStore",
    "RecoveryPoint",
    "RecoveryPointAdapter",
    "SOWRecoveryPointAdapter",
    "StoredMessage",
    "inspect_store",
]
