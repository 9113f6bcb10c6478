"""The subscription manager: remembers live subscriptions so an HA client can re-place them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

from ..calls import Handler
from ..command import Command
from ..stream import MessageStream

__all__ = ["Subscription", "SubscriptionManager"]


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
