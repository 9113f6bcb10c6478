"""Bookmark stores: what makes bookmark subscriptions resumable.

* :class:`BookmarkStore`: the contract (official method names).
* :class:`MemoryBookmarkStore`: per-subscription, per-publisher tracking in memory, optionally
  backed by a :mod:`recovery point adapter <ampsclient.stores.recovery>` to survive restarts.

See ``docs/bookmark-stores.md``.
"""

from __future__ import annotations

from .base import BookmarkStore, MessageLike
from .memory import MemoryBookmarkStore

__all__ = ["BookmarkStore", "MemoryBookmarkStore", "MessageLike"]
