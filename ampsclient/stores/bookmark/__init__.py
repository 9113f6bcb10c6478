"""Bookmark stores: what makes bookmark subscriptions resumable.

* :class:`BookmarkStore`: the contract (official method names).
* :class:`MemoryBookmarkStore`: per-subscription, per-publisher tracking in memory, optionally
  backed by a :mod:`recovery point adapter <ampsclient.stores.recovery>` to survive restarts.
* :class:`MMapBookmarkStore`, :class:`RingBookmarkStore`: the official file-backed stores
  (a memory store whose recovery points live in a file; they survive ``kill -9``).

See ``docs/bookmark-stores.md``.
"""

from __future__ import annotations

from .base import BookmarkStore, MessageLike
from .file import MMapBookmarkStore, RingBookmarkStore
from .memory import MemoryBookmarkStore

__all__ = [
    "BookmarkStore",
    "MMapBookmarkStore",
    "MemoryBookmarkStore",
    "MessageLike",
    "RingBookmarkStore",
]
