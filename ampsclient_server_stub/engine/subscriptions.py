"""The subscription table: installing and removing a connection's subscriptions.

A live subscription goes into the routing index; a bookmark subscription to the replay
scheduler (its replay feeds it). Removing one closes what it holds (conflation holds, its
replay); a subscription replacing another (option ``replace``) first releases what the old
one held for conflation.
"""

from __future__ import annotations

from collections.abc import Callable

from .delivery import Delivery
from .replay_scheduler import ReplayScheduler
from .routing import RoutingIndex
from .state import Connection, Subscription

__all__ = ["SubscriptionTable"]


class SubscriptionTable:
    """Adds and removes subscriptions everywhere they are known."""

    def __init__(self, index: RoutingIndex, scheduler: ReplayScheduler, delivery: Delivery) -> None:
        self._index = index
        self._scheduler = scheduler
        self._delivery = delivery
        self.on_remove: Callable[[Subscription], None] | None = None
        """Told of every subscription removed (the message queues return its leases)."""
        self.events: Callable[[str, Subscription], None] | None = None
        """Told ``("subscribe", sub)`` and ``("unsubscribe", sub)`` (``/AMPS/ClientStatus``)."""

    def add(self, sub: Subscription) -> None:
        """Register ``sub`` with its connection and its feeder."""
        sub.conn.subs[sub.sub_id] = sub
        if sub.replay is not None:
            # bookmark subscriptions are fed by their journal cursor, not by routing
            self._scheduler.add(sub.replay)
        else:
            self._index.add(sub)
        if self.events is not None:
            self.events("subscribe", sub)

    def remove(self, sub: Subscription) -> None:
        """Forget ``sub`` (held conflated messages are dropped, its replay stops)."""
        if sub.conn.subs.get(sub.sub_id) is sub:
            del sub.conn.subs[sub.sub_id]
        if sub.conflation is not None:
            sub.conflation.close()  # held messages are dropped, the timer cancelled
        if sub.replay is not None:
            self._scheduler.remove(sub)
        else:
            self._index.remove(sub)
        if self.on_remove is not None:
            self.on_remove(sub)
        if self.events is not None:
            self.events("unsubscribe", sub)

    def install(self, sub: Subscription, replaced: Subscription | None) -> None:
        """Add ``sub``, taking over the ``sub_id`` of ``replaced`` (if any)."""
        if replaced is not None:
            if replaced.conflation is not None:
                # the replacement takes over the sub_id: what was held goes out now
                self._delivery.send_held(replaced, replaced.conflation.holds.release_all())
            self.remove(replaced)
        self.add(sub)

    def remove_all(self, conn: Connection) -> None:
        """Forget every subscription of ``conn``."""
        for sub in list(conn.subs.values()):
            self.remove(sub)
        conn.subs.clear()
