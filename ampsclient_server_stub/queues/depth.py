"""``TargetQueueDepth``: only so many messages of a queue are active (``shared/queues.md``
§2, §11).

AMPS keeps at most ``TargetQueueDepth`` messages active (deliverable, shown by ``sow``
queries and views, acknowledgeable by a filter); later messages wait in the transaction log
and become active, in publication order, as active ones leave the queue (acknowledged or
expired). The reference server keeps the waiting messages here, in memory, in order; the
queue itself (:class:`~.model.Queue`) only ever holds the active ones. Statistics:
``target_queue_depth`` and ``inactive_message_count``.
"""

from __future__ import annotations

from typing import NamedTuple

from .model import Queue

__all__ = ["Inactive", "Waiting"]


class Waiting(NamedTuple):
    """A message not active yet."""

    bookmark: str
    data: bytes
    x: str | None
    published: float
    expires: float | None


class Inactive:
    """The messages of one queue beyond its ``TargetQueueDepth``, oldest first."""

    def __init__(self, queue: Queue, target: int) -> None:
        self._queue = queue
        self.target = target
        """The configured ``TargetQueueDepth``."""
        self.waiting: dict[str, Waiting] = {}
        """Bookmark -> message, in publication order."""

    def __len__(self) -> int:
        return len(self.waiting)

    def __contains__(self, bookmark: str) -> bool:
        return bookmark in self.waiting

    def admit(self, message: Waiting) -> bool:
        """A new message: active at once when the queue is below its target depth and
        nothing waits before it, else it waits. ``False``: already known."""
        queue = self._queue
        if message.bookmark in self.waiting or message.bookmark in queue:
            return False
        if self.waiting or len(queue) >= self.target:
            self.waiting[message.bookmark] = message
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
            if self._activate(waiting.pop(bookmark)):
                moved += 1
        return moved

    def _activate(self, message: Waiting) -> bool:
        return self._queue.enqueue(
            message.bookmark,
            message.data,
            message.x,
            message.published,
            expires=message.expires,
        )
