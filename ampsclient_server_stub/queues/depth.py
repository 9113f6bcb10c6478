"""``TargetQueueDepth``: only so many messages of a queue are active (``shared/queues.md``
§2, §11).

AMPS keeps at most ``TargetQueueDepth`` messages active (deliverable, shown by ``sow``
queries and views, acknowledgeable by a filter); later messages wait in the transaction log
and become active, in publication order, as active ones leave the queue (acknowledged or
expired). So does the reference server: a waiting message is kept here as its journal
position only (plus its own expiration when it has one); its body, ``x`` and publication time
are read back from the journal when it becomes active. The queue itself
(:class:`~.model.Queue`) only ever holds the active ones. The journal cannot drop a waiting
message's record: the queue's ack point (``queues.ack``, the journal pin) is at or before its
oldest active message, and every waiting message is newer. Statistics:
``target_queue_depth`` and ``inactive_message_count``.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Protocol

from ..engine.journal_types import JournalRecord
from .model import Queue

__all__ = ["Enqueue", "Inactive", "JournalReader", "Waiting"]

logger = logging.getLogger(__name__)


class Waiting(NamedTuple):
    """A message not active yet, as it arrives (its body is dropped once its journal
    position is known)."""

    bookmark: str
    data: bytes
    x: str | None
    published: float
    expires: float | None


class JournalReader(Protocol):
    """What :class:`Inactive` needs of the journal."""

    def find_bookmark(self, publisher_id: int, sequence: int) -> int | None: ...

    def read(self, from_index: int, *, max_records: int = ...) -> list[JournalRecord]: ...


class Enqueue(Protocol):
    """Makes a message active (the signature of :meth:`.model.Queue.enqueue`)."""

    def __call__(
        self,
        bookmark: str,
        data: bytes,
        x: str | None,
        now: float,
        *,
        expires: float | None = None,
    ) -> bool: ...


_Held = int | tuple[int, float] | Waiting
"""A waiting message: its journal index, with its own expiration when it has one; the whole
message only when its record cannot be found (a bookmark of another log)."""


class Inactive:
    """The messages of one queue beyond its ``TargetQueueDepth``, oldest first.

    Args:
        queue: the queue (its active messages).
        target: ``TargetQueueDepth``.
        journal: where the waiting messages are read back from; ``None``: they are kept
            whole in memory.
        enqueue: how a message becomes active (default: ``queue.enqueue``; a replicated
            queue's goes through its ownership layer, which gives the message its owner).
    """

    def __init__(
        self,
        queue: Queue,
        target: int,
        journal: JournalReader | None = None,
        *,
        enqueue: Enqueue | None = None,
    ) -> None:
        self._queue = queue
        self._journal = journal
        self._enqueue: Enqueue = enqueue or queue.enqueue
        self.target = target
        """The configured ``TargetQueueDepth``."""
        self.waiting: dict[str, _Held] = {}
        """Bookmark -> journal position (or the message), in publication order."""

    def __len__(self) -> int:
        return len(self.waiting)

    def __contains__(self, bookmark: str) -> bool:
        return bookmark in self.waiting

    def admit(self, message: Waiting, index: int | None = None) -> bool:
        """A new message (``index``: its journal position, when the caller knows it): active
        at once when the queue is below its target depth and nothing waits before it, else
        it waits. ``False``: already known."""
        queue = self._queue
        bookmark = message.bookmark
        if bookmark in self.waiting or bookmark in queue:
            return False
        if self.waiting or len(queue) >= self.target:
            self.waiting[bookmark] = self._held(message, index)
            return True
        return self._activate(message)

    def remove(self, bookmark: str) -> bool:
        """Take a waiting message out for good (acknowledged before it was active)."""
        return self.waiting.pop(bookmark, None) is not None

    def refill(self) -> int:
        """Activate waiting messages while the queue is below its target; how many."""
        queue = self._queue
        waiting = self.waiting
        moved = 0
        while waiting and len(queue) < self.target:
            bookmark = next(iter(waiting))
            message = self._message(bookmark, waiting.pop(bookmark))
            if message is not None and self._activate(message):
                moved += 1
        return moved

    def _held(self, message: Waiting, index: int | None) -> _Held:
        journal = self._journal
        if journal is None:
            return message
        if index is None:
            pid, _, rest = message.bookmark.partition("|")
            try:
                index = journal.find_bookmark(int(pid), int(rest.partition("|")[0]))
            except ValueError:
                index = None
        if index is None:
            return message
        return index if message.expires is None else (index, message.expires)

    def _message(self, bookmark: str, held: _Held) -> Waiting | None:
        if isinstance(held, Waiting):
            return held
        index, expires = (held, None) if isinstance(held, int) else held
        assert self._journal is not None
        records = self._journal.read(index, max_records=1)
        if not records or records[0].index != index or records[0].bookmark != bookmark:
            logger.error(
                "queue %r: waiting message %s not at journal index %d: dropped",
                self._queue.name,
                bookmark,
                index,
            )
            return None
        record = records[0]
        x = record.fields.get("x")
        return Waiting(
            bookmark,
            record.payload,
            None if x is None else str(x),
            record.timestamp / 1e6,
            expires,
        )

    def _activate(self, message: Waiting) -> bool:
        return self._enqueue(
            message.bookmark,
            message.data,
            message.x,
            message.published,
            expires=message.expires,
        )
