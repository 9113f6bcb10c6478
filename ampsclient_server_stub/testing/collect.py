"""A thread-safe message handler that keeps what it is given and lets the test wait on it.

Works with this project's :class:`ampsclient.Message` and with the official client's messages
(it reads them through the official getters: ``get_command``, ``get_ack_type``,
``get_data``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Inbox"]


class Inbox:
    """Keeps every message it is called with, with its arrival time; thread-safe.

    Example::

        inbox = Inbox()
        client.subscribe(inbox, "orders")
        ...
        inbox.wait_messages(3)          # or inbox.wait(lambda box: ...)
        assert inbox.ns() == [0, 1, 2]

    Args:
        keep: only messages for which it returns true are kept (default: all).
    """

    def __init__(self, keep: Callable[[Any], bool] | None = None) -> None:
        self._keep = keep
        self._cond = threading.Condition()
        self._items: list[tuple[float, Any]] = []

    def __call__(self, message: Any) -> None:
        if self._keep is not None and not self._keep(message):
            return
        with self._cond:
            self._items.append((time.monotonic(), message))
            self._cond.notify_all()

    # ------------------------------------------------------------------ reading

    def snapshot(self) -> list[Any]:
        """Every message kept so far, in arrival order."""
        with self._cond:
            return [m for _, m in self._items]

    items = property(snapshot, doc="Every message kept so far, in arrival order.")

    def arrivals(self) -> list[tuple[float, Any]]:
        """``(time.monotonic() at arrival, message)`` of every message kept so far."""
        with self._cond:
            return list(self._items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    @property
    def messages(self) -> list[Any]:
        """The deliveries (``publish`` commands) so far."""
        return [m for m in self.snapshot() if m.get_command() == "publish"]

    def acks(self, ack_type: str) -> list[Any]:
        """The acks of type ``ack_type`` so far."""
        return [
            m for m in self.snapshot() if m.get_command() == "ack" and m.get_ack_type() == ack_type
        ]

    def payloads(self) -> list[Any]:
        """The JSON documents of :attr:`messages`."""
        return [json.loads(m.get_data()) for m in self.messages]

    def ns(self, field: str = "n") -> list[Any]:
        """``field`` of every JSON document in :attr:`messages` (``n`` by default)."""
        return [doc[field] for doc in self.payloads()]

    # ------------------------------------------------------------------ waiting

    def wait(self, condition: Callable[[Inbox], bool], timeout: float = 10.0) -> None:
        """Block until ``condition(self)`` holds (checked at each arrival).

        Raises:
            AssertionError: it still does not hold after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    last = [_describe(m) for _, m in self._items[-5:]]
                    raise AssertionError(
                        f"inbox condition not met within {timeout} s "
                        f"({len(self._items)} items, last {last})"
                    )
                self._cond.wait(min(left, 0.05))

    def wait_for_count(self, count: int, timeout: float = 10.0) -> list[Any]:
        """Block until at least ``count`` items were kept (whatever their command: with a
        ``keep`` filter, what it lets through); return them all, in arrival order.

        Raises:
            AssertionError: fewer than ``count`` after ``timeout`` seconds (the message
                names how many arrived and the last ones).
        """
        self.wait(lambda box: len(box) >= count, timeout)
        return self.snapshot()

    def wait_messages(self, count: int, timeout: float = 10.0) -> list[Any]:
        """Block until at least ``count`` deliveries arrived; return :attr:`messages`."""
        self.wait(lambda box: len(box.messages) >= count, timeout)
        return self.messages

    def wait_ack(self, ack_type: str, timeout: float = 10.0) -> Any:
        """Block until an ack of ``ack_type`` arrived; return the first one."""
        self.wait(lambda box: bool(box.acks(ack_type)), timeout)
        return self.acks(ack_type)[0]


def _describe(message: Any) -> tuple[str, str]:
    try:
        return str(message.get_command()), str(message.get_ack_type() or "")
    except Exception:  # pragma: no cover - not a message
        return type(message).__name__, ""
