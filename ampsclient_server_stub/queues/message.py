"""A queue's message, its subscriptions and what an acknowledgement did: the objects
:class:`~.model.Queue` works with."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from . import speedups
from .states import AVAILABLE

__all__ = ["UNPARSED", "AckResult", "PyQueueMessage", "QueueMessage", "QueueSub"]

UNPARSED: Final[Any] = speedups.UNPARSED
"""A message's ``doc`` until its payload is parsed (filters, priority, barriers)."""


class PyQueueMessage:
    """A message in the queue.

    This is the pure-Python form, the reference; :data:`QueueMessage` is the C type of
    :mod:`.speedups` when it is built (the same fields, defaults and behaviour), else this
    class."""

    __slots__ = (
        "barrier",
        "bookmark",
        "cancels",
        "data",
        "deliveries",
        "doc",
        "enqueued",
        "expires",
        "lease_deadline",
        "leased_at",
        "lessee",
        "order",
        "owner",
        "rank",
        "state",
        "x",
    )

    def __init__(
        self, bookmark: str, data: bytes, x: str | None, order: int, enqueued: float
    ) -> None:
        self.bookmark = bookmark
        self.data = data
        self.x = x
        self.order = order
        self.rank = 0
        """Heap key before ``order``: minus the priority (0 without ``Priority``)."""
        self.barrier = False
        """It matches the ``BarrierExpression``."""
        self.enqueued = enqueued
        self.expires: float | None = None
        self.state = AVAILABLE
        self.lessee: QueueSub | None = None
        self.lease_deadline: float | None = None
        self.deliveries = 0
        self.cancels = 0
        self.doc: Any = UNPARSED
        self.owner: str | None = None
        """Replicated queues: the instance that owns the message (``None``: not tracked)."""
        self.leased_at = 0.0
        """When it was last leased."""


if TYPE_CHECKING:
    QueueMessage = PyQueueMessage
else:
    QueueMessage = speedups.QueueMessage or PyQueueMessage
    """What a queue's messages are made of: the C type when built, else :class:`PyQueueMessage`
    (subclasses work with either: ``queues.metadata_file``'s overrides ``data``)."""


class QueueSub:
    """A queue subscription: its engine-side identity, its backlog and its leases.

    ``key`` identifies the subscription for the engine (a ``Subscription`` object);
    ``owner`` identifies its connection (``strict`` leasing); ``matches(doc)`` is its content
    filter (``None``: everything).
    """

    __slots__ = ("backlog", "key", "leased", "matches", "owner")

    def __init__(
        self,
        key: object,
        owner: object,
        backlog: int,
        matches: Callable[[Any], bool] | None,
    ) -> None:
        self.key = key
        self.owner = owner
        self.backlog = backlog
        self.matches = matches
        self.leased: dict[str, QueueMessage] = {}

    @property
    def room(self) -> int:
        """Messages it may still take."""
        return self.backlog - len(self.leased)


class AckResult:
    """What one acknowledgement did (the engine journals ``removed`` and reports counts)."""

    __slots__ = ("deferred", "expired", "ignored", "removed", "returned")

    def __init__(self) -> None:
        self.removed: list[str] = []
        """Bookmarks that left the queue (acknowledged, or expired by ``expire``)."""
        self.expired: list[tuple[QueueMessage, str]] = []
        """Messages expired, with the reason (``forced_expire``, ``max_cancels``)."""
        self.returned = 0
        """Leases cancelled (messages back in the queue)."""
        self.deferred: list[str] = []
        """Bookmarks not in the queue (yet): remembered for ``DeferredAckExpiration``."""
        self.ignored = 0
        """Bookmarks that did nothing (already gone, ``strict`` leasing, at-most-once)."""
