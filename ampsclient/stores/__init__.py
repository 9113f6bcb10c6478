"""Client-side stores: what an HA client keeps to recover after a disconnect or a restart.

Publish stores (:mod:`ampsclient.stores.publish`) hold unacknowledged publishes. Here,
``PublishStore`` is the official client's file store (``PublishStore(filename)``, see
:mod:`ampsclient.stores.publish.official`); the abstract contract of every publish store,
``ampsclient.stores.publish.PublishStore``, is exported here as ``BasePublishStore``. Bookmark
stores (:mod:`ampsclient.stores.bookmark`) track what bookmark subscriptions have processed;
recovery point adapters (:mod:`ampsclient.stores.recovery`) persist their recovery points.
"""

from __future__ import annotations

from .bookmark import (
    BookmarkStore,
    MemoryBookmarkStore,
    MessageLike,
    MMapBookmarkStore,
    RingBookmarkStore,
)
from .publish import (
    FilePublishStore,
    MemoryPublishStore,
    PublishStore as BasePublishStore,
    StoredMessage,
    inspect_store,
)
from .publish.official import HybridPublishStore, PublishStore
from .recovery import (
    ConflatingRecoveryPointAdapter,
    FileRecoveryPointAdapter,
    RecoveryPoint,
    RecoveryPointAdapter,
    SOWRecoveryPointAdapter,
)

__all__ = [
    "BasePublishStore",
    "BookmarkStore",
    "ConflatingRecoveryPointAdapter",
    "FilePublishStore",
    "FileRecoveryPointAdapter",
    "HybridPublishStore",
    "MMapBookmarkStore",
    "MemoryBookmarkStore",
    "MemoryPublishStore",
    "MessageLike",
    "PublishStore",
    "RecoveryPoint",
    "RecoveryPointAdapter",
    "RingBookmarkStore",
    "SOWRecoveryPointAdapter",
    "StoredMessage",
    "inspect_store",
]
