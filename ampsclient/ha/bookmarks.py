"""Bookmark subscriptions on an HA client: where a subscription resumes, the logging handler
that diverts redeliveries, and the bookmark store's discard lane.

No I/O and no client state: the :class:`~ampsclient.ha.client.AsyncHAClient` calls these with
its bookmark store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..client import Handler
from ..protocol.bookmarks import EPOCH, NOW
from ..protocol.message import Message
from ..stores.bookmark import BookmarkStore

__all__ = ["fast_discard", "logging_handler", "mark_live", "resume_point", "seed_start_point"]


def fast_discard(store: BookmarkStore) -> Callable[[Message], None]:
    """``store.discard_lane`` (``discard_message`` for a duck-typed store without one)."""
    fast: Callable[[Message], None] | None = getattr(store, "discard_lane", None)
    return fast if fast is not None else store.discard_message


def logging_handler(
    store: BookmarkStore, handler: Handler, duplicates: Callable[[], Handler | None]
) -> Handler:
    """A handler that logs each delivery in ``store`` and calls ``handler``, or, for a
    redelivery the store recognises, the handler ``duplicates()`` returns (if any)."""

    def on_message(message: Message) -> Any:
        if (
            message.bookmark
            and message.command == "publish"
            and not store.log(message)
            and store.is_duplicate(message)
        ):
            dup = duplicates()
            if dup is not None:
                dup(message)
            return None
        return handler(message)

    # the receive fast path (ampsclient.core.routes) reads the bookmark of such a route's
    # deliveries, logs each itself and calls ``handler`` when ``log`` numbers it; anything
    # else (a duplicate, no bookmark) goes through ``on_message``
    on_message.bookmark_logged = True  # type: ignore[attr-defined]
    on_message.bookmark_log = getattr(store, "log_lane", store.log)  # type: ignore[attr-defined]
    on_message.inner_handler = handler  # type: ignore[attr-defined]
    return on_message


def resume_point(store: BookmarkStore, sub_id: str, start: str) -> str:
    """Where subscription ``sub_id``, placed from bookmark ``start``, resumes after a reconnect.

    The store's recovery point when it has one. When it has none (nothing discarded, no
    persisted ack adopted), the subscription's own starting point, never EPOCH unless it
    started there: an explicit bookmark, timestamp or list is sent again; a subscription
    started at NOW resumes after the oldest message it has handed to the application (every
    later one the store has logged goes to the duplicate handler), or at NOW if it received
    nothing.
    """
    rewind = getattr(store, "rewind_live", None)  # (a duck-typed store may lack it)
    if rewind is not None:
        rewind(sub_id)  # a live one: what came after its recovery point is unseen
    recent = store.get_most_recent(sub_id)
    if recent == EPOCH and start != EPOCH:
        if start == NOW:
            return store.get_oldest_bookmark(sub_id) or NOW
        return start
    return recent


def seed_start_point(store: BookmarkStore, sub_id: str, bookmark: str) -> None:
    """Teach ``store`` where a new subscription starts (an explicit bookmark or timestamp), so
    that its recovery point is that start, not EPOCH, until messages are discarded (and a
    recovery point adapter persists it for a restart). A subscription the store already
    knows, EPOCH, NOW and lists are left alone."""
    if bookmark in (EPOCH, NOW) or "," in bookmark:
        return
    if store.get_most_recent(sub_id) == EPOCH and not store.get_oldest_bookmark_seq(sub_id):
        store.persisted(sub_id, bookmark)


def mark_live(store: BookmarkStore, sub_id: str | None, options: object) -> None:
    """Tell ``store`` that subscription ``sub_id`` uses the ``live`` option (when ``options``,
    the command's ``o`` field, holds it), so that its recovery point stays at or before the
    server's last persisted ack instead of following the discarded messages (seed 004)."""
    if sub_id and isinstance(options, str) and "live" in (o.strip() for o in options.split(",")):
        set_live = getattr(store, "set_live", None)
        if set_live is not None:
            set_live(sub_id)
        else:  # a duck-typed store: say so, as BookmarkStore.set_live does
            BookmarkStore.set_live(store, sub_id)
