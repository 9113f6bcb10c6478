"""The subscription manager: remembers live subscriptions so an HA client can re-place them
(the order and the commands of a re-placement come from :mod:`ampsclient.core.ha_sequence`),
and the preparation of a bookmark subscription before it is first sent."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..calls import Handler
from ..command import Command
from ..protocol.acks import AckType
from ..protocol.bookmarks import EPOCH, MOST_RECENT
from ..stores.bookmark import BookmarkStore
from ..stream import MessageStream
from .bookmarks import logging_handler, mark_live, seed_start_point

__all__ = ["Subscription", "SubscriptionManager", "prepare_bookmark_subscription"]


@dataclass(slots=True)
class Subscription:
    """One subscription as it was placed: the command, and where its messages go."""

    sub_id: str
    command: Command
    handler: Handler
    stream: MessageStream | None = None


class SubscriptionManager:
    """Keeps every active subscription (handler and stream forms) in the order placed."""

    def __init__(self) -> None:
        self._subs: dict[str, Subscription] = {}

    def add(
        self, sub_id: str, command: Command, handler: Handler, stream: MessageStream | None
    ) -> None:
        """Remember a subscription (a copy of its command, without its command id)."""
        saved = copy.copy(command)
        saved.fields = dict(command.fields)
        saved.fields.pop("cid", None)
        saved.fields["sub_id"] = sub_id
        self._subs[sub_id] = Subscription(sub_id, saved, handler, stream)

    def placed(
        self, sub_id: str, command: Command, handler: Handler, stream: MessageStream | None
    ) -> None:
        """The server took subscription ``sub_id``: remember it, unless the command only
        paused or resumed subscriptions (those are re-placed as they were)."""
        options = str(command.fields.get("o", "")).split(",")
        if "pause" not in options and "resume" not in options:
            self.add(sub_id, command, handler, stream)

    def remove(self, sub_id: str) -> None:
        """Forget one subscription (or all with ``"all"``)."""
        if sub_id == "all":
            self._subs.clear()
        else:
            for sid in sub_id.split(","):
                self._subs.pop(sid, None)

    def clear(self) -> None:
        """Forget everything."""
        self._subs.clear()

    def __iter__(self) -> Iterator[Subscription]:
        """The subscriptions in the order placed (a snapshot: removing while iterating is safe)."""
        return iter(list(self._subs.values()))

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._subs


def prepare_bookmark_subscription(
    store: BookmarkStore,
    command: Command,
    handler: Handler,
    duplicates: Callable[[], Handler | None],
) -> Handler:
    """Ready a bookmark subscription before it is first sent; returns the handler to route
    its deliveries to (it logs each in ``store`` and diverts redeliveries to ``duplicates()``).

    ``MOST_RECENT`` becomes the store's recovery point; an explicit start is taught to the
    store (so that the subscription resumes from it, not EPOCH); the command asks for
    ``persisted`` acks (they move the recovery point); a ``live`` one is marked before any
    delivery.
    """
    sub_id = command.get_sub_id()
    if command.fields["bm"] == MOST_RECENT:
        command.fields["bm"] = store.get_most_recent(str(sub_id)) if sub_id else EPOCH
    elif sub_id:
        seed_start_point(store, str(sub_id), str(command.fields["bm"]))
    command.add_ack_type(AckType.PERSISTED)
    route = logging_handler(store, handler, duplicates)
    if sub_id:
        mark_live(store, sub_id, command.fields.get("o"))
    return route
