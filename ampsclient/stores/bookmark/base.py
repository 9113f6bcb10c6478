"""The bookmark store contract (the official client's ``BookmarkStore`` method names).

A bookmark store makes bookmark subscriptions resumable. For every message of a bookmark
subscription the client (or the application) calls, in this order:

1. :meth:`BookmarkStore.is_duplicate` (or checks that :meth:`BookmarkStore.log` returned
   ``0``): a message whose publisher sequence is ``<=`` the highest already seen from that
   publisher on that subscription is a redelivery and goes to the duplicate handler, not the
   application;
2. :meth:`BookmarkStore.log` to record it (it returns the message's per-subscription
   sequence number);
3. after processing, :meth:`BookmarkStore.discard_message` (or
   ``discard(sub_id, sequence_number)``).

On (re)subscribe with ``MOST_RECENT`` the client asks :meth:`BookmarkStore.get_most_recent`
for the *recovery point*: the bookmark (or comma list) after which every message not yet
discarded lies. Persisted acks from the server go to :meth:`BookmarkStore.persisted`.

Store methods are sync-coloured (local and bounded) and thread-safe.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, overload, runtime_checkable

__all__ = ["BookmarkStore", "MessageLike"]


@runtime_checkable
class MessageLike(Protocol):
    """The two accessors a bookmark store reads from a message."""

    def get_bookmark(self) -> str | None:
        """The ``bm`` header: ``publisherId|sequence|``."""

    def get_sub_id(self) -> str | None:
        """The subscription the message was delivered to."""


class BookmarkStore(abc.ABC):
    """What a bookmark store does; :class:`~ampsclient.stores.bookmark.MemoryBookmarkStore`.

    Sequence numbers returned by :meth:`log` are per subscription, start at 1 and only grow;
    ``0`` means "not recorded" (a duplicate, or a message without a usable bookmark).
    """

    @property
    def log_lane(self) -> Callable[[MessageLike], int]:
        """:meth:`log` as the client's receive path calls it for each delivery of a bookmark
        subscription: a store may offer a faster callable doing exactly the same (the memory
        store: the C speedups' common case); by default :meth:`log` itself."""
        return self.log

    @property
    def discard_lane(self) -> Callable[[MessageLike], None]:
        """:meth:`discard_message` the same way (``HAClient.discard`` is this callable)."""
        return self.discard_message

    @abc.abstractmethod
    def log(self, message: MessageLike) -> int:
        """Record a received message of a bookmark subscription.

        Args:
            message: the message (its sub id and ``bm`` header are read).

        Returns:
            The message's sequence number within its subscription (``>= 1``), or ``0`` when
            the message was not recorded: a duplicate (see :meth:`is_duplicate`) or a
            message without a sub id or a ``publisherId|sequence|`` bookmark.

        Raises:
            StoreError: the store is closed.
        """

    @overload
    def discard(self, message: MessageLike, /) -> None: ...

    @overload
    def discard(self, sub_id: str, bookmark_seq_no: int, /) -> None: ...

    def discard(self, message_or_sub_id: Any, bookmark_seq_no: int | None = None, /) -> None:
        """Mark a message as processed: ``discard(message)`` or ``discard(sub_id, seq_no)``.

        The second form is the official ``discard(subId, bookmarkSeqNo)`` with the number
        :meth:`log` returned. Unknown messages and numbers are ignored.

        Raises:
            StoreError: the store is closed.
        """
        if bookmark_seq_no is None:
            self.discard_message(message_or_sub_id)
        else:
            self.discard_seq_no(str(message_or_sub_id), int(bookmark_seq_no))

    @abc.abstractmethod
    def discard_message(self, message: MessageLike) -> None:
        """Mark ``message`` as processed (official name)."""

    @abc.abstractmethod
    def discard_seq_no(self, sub_id: str, bookmark_seq_no: int) -> None:
        """Mark the message :meth:`log` numbered ``bookmark_seq_no`` as processed."""

    @abc.abstractmethod
    def is_duplicate(self, message: MessageLike) -> bool:
        """Whether ``message`` was already seen: its sequence is ``<=`` the highest sequence
        logged (or recovered) for its publisher on its subscription."""

    @abc.abstractmethod
    def is_discarded(self, message: MessageLike) -> bool:
        """Whether ``message`` has been discarded (or lies before the recovered point).

        This is the official client's meaning, observed black-box: a message that was logged
        but not yet discarded is *not* discarded. Use :meth:`is_duplicate` to divert
        redeliveries.
        """

    @abc.abstractmethod
    def get_most_recent(self, sub_id: str) -> str:
        """The recovery point of ``sub_id``: what ``MOST_RECENT`` resolves to.

        Returns:
            A bookmark, a comma list, or ``"0"`` (EPOCH) when the store knows nothing.
        """

    @abc.abstractmethod
    def persisted(self, sub_id: str, bookmark: str) -> None:
        """A persisted ack from the server for a bookmark subscription.

        Args:
            sub_id: the ack's ``sub_id``.
            bookmark: the ack's ``bm``: the journal position up to which the server has
                delivered everything for that subscription.
        """

    def set_live(self, sub_id: str) -> None:
        """``sub_id`` uses the ``live`` option: its recovery point must not pass the last
        :meth:`persisted` point (the server may lose what it delivered and had not persisted).

        The client calls this when it places such a subscription. This default keeps
        nothing and logs a warning: a store that does not override it resumes a ``live``
        subscription from the last discarded message, which can skip persisted messages
        after a server failure (``docs/bookmark-stores.md``).
        """
        logging.getLogger("ampsclient.stores.bookmark").warning(
            "%s does not track persisted points: live subscription %r resumes from the last "
            "discarded message",
            type(self).__name__,
            sub_id,
        )

    def rewind_live(self, sub_id: str) -> None:
        """A ``live`` subscription is about to resume after a failover: messages received
        after its recovery point may be gone from the server, so they count as unseen (a
        redelivery is not a duplicate). No-op by default and for other subscriptions."""
        return None

    @abc.abstractmethod
    def purge(self, sub_id: str | None = None) -> None:
        """Forget ``sub_id`` (or everything when ``None``), in the adapter too."""

    def purge_sub_id(self, sub_id: str) -> None:
        """Official spelling of ``purge(sub_id)``."""
        self.purge(sub_id)

    @abc.abstractmethod
    def get_oldest_bookmark_seq(self, sub_id: str) -> int:
        """The sequence number of the oldest message of ``sub_id`` not yet discarded.

        Returns:
            That number, or ``0`` when every logged message is discarded (or ``sub_id`` is
            unknown).
        """

    def get_oldest_bookmark(self, sub_id: str) -> str | None:
        """The bookmark of the oldest message of ``sub_id`` logged and not yet discarded.

        The HA client resumes a subscription started at NOW from there when the store has no
        recovery point for it yet. Returns ``None`` when there is none, or when the store
        cannot tell (this default).
        """
        return None

    @abc.abstractmethod
    def set_server_version(self, version: int | str) -> None:
        """Tell the store which server version the client is connected to."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the store (and its adapter). Idempotent."""

    def __enter__(self) -> BookmarkStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
