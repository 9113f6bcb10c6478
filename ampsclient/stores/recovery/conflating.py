"""ConflatingRecoveryPointAdapter: forward only the latest point per subscription, now and then.

Behaviour (matching the official ``ConflatingRecoveryPointAdapter``, observed black-box with
``amps-python-client`` 5.3.5.14; argument names and defaults are the official ones):

* :meth:`~ConflatingRecoveryPointAdapter.update` only records the point: the latest point of
  each subscription replaces the pending one;
* a subscription's pending point is forwarded to the delegate once that subscription has had
  ``update_threshold`` updates since its last forward (at once), or ``timeout_millis`` after
  the first of those updates, whichever comes first;
* forwarding happens on a background thread that checks the timeouts every
  ``update_interval_millis`` (and wakes up at once when a threshold is reached);
* the delegate is never called concurrently: every call to it (``update``, ``purge``,
  ``prune``, ``close``, reading points) holds one lock;
* :meth:`~ConflatingRecoveryPointAdapter.purge` drops the pending points concerned and passes
  the purge through; :meth:`~ConflatingRecoveryPointAdapter.close` stops the thread, forwards
  everything pending, then closes the delegate.

A delegate ``update`` that raises is logged (and reported to the exception listener); the
point stays pending, with a fresh timeout, unless a newer point replaced it meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from ...exceptions import StoreError
from .base import (
    EMPTY_POINT,
    RecoveryPoint,
    RecoveryPointAdapter,
    iter_recovery_points,
    make_point,
)

__all__ = ["ConflatingRecoveryPointAdapter"]

logger = logging.getLogger("ampsclient.stores.recovery")


class _Pending:
    __slots__ = ("bookmark", "count", "first")

    def __init__(self, bookmark: str, first: float) -> None:
        self.bookmark = bookmark
        self.count = 1
        self.first = first


class ConflatingRecoveryPointAdapter:
    """Wrap an adapter so that it sees fewer, later updates.

    Args:
        delegate: the adapter that stores the points (any object with ``update``, ``purge``,
            ``close`` and ``__iter__`` or ``next()``).
        update_threshold: forward a subscription's point after this many updates of it.
        timeout_millis: forward a pending point at most this long after its first update.
        update_interval_millis: how often the background thread checks the timeouts.

    Raises:
        ValueError: a non-positive argument, or ``delegate`` is ``None``.

    Example::

        sow = SOWRecoveryPointAdapter(store_client, "orders-app")
        store = MemoryBookmarkStore(ConflatingRecoveryPointAdapter(sow, 100, 250, 50))
    """

    def __init__(
        self,
        delegate: RecoveryPointAdapter,
        update_threshold: int = 10,
        timeout_millis: float = 2000,
        update_interval_millis: float = 50,
    ) -> None:
        if delegate is None:
            raise ValueError("a ConflatingRecoveryPointAdapter needs a delegate")
        if update_threshold < 1 or timeout_millis <= 0 or update_interval_millis <= 0:
            raise ValueError("threshold, timeout and interval must be positive")
        self._delegate = delegate
        self._threshold = int(update_threshold)
        self._timeout = timeout_millis / 1000.0
        self._interval = update_interval_millis / 1000.0
        self._pending: dict[str, _Pending] = {}
        self._due = False
        self._closed = False
        self._cond = threading.Condition(threading.Lock())
        """Guards :attr:`_pending`; :meth:`update` takes only this one."""
        self._delegate_lock = threading.RLock()
        """Held around every call to the delegate (taken before :attr:`_cond`)."""
        self._listener: Callable[[BaseException], Any] | None = None
        self._forwarded = 0
        self._thread = threading.Thread(
            target=self._run, name="ampsclient-recovery-conflater", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------ properties

    @property
    def delegate(self) -> RecoveryPointAdapter:
        """The wrapped adapter."""
        return self._delegate

    @property
    def update_threshold(self) -> int:
        """Updates of one subscription that trigger a forward."""
        return self._threshold

    @property
    def timeout_millis(self) -> float:
        """Longest time a point stays pending."""
        return self._timeout * 1000.0

    @property
    def update_interval_millis(self) -> float:
        """How often timeouts are checked."""
        return self._interval * 1000.0

    def pending_count(self) -> int:
        """How many subscriptions have a point waiting to be forwarded."""
        with self._cond:
            return len(self._pending)

    def statistics(self) -> dict[str, int]:
        """Points ``forwarded`` to the delegate so far and subscriptions ``pending`` now."""
        with self._cond:
            return {"forwarded": self._forwarded, "pending": len(self._pending)}

    def set_exception_listener(self, listener: Callable[[BaseException], Any] | None) -> None:
        """Call ``listener(exc)`` when forwarding to the delegate fails."""
        self._listener = listener

    def get_exception_listener(self) -> Callable[[BaseException], Any] | None:
        """The exception listener, if any."""
        return self._listener

    # ------------------------------------------------------------------ adapter API

    def update(self, point: RecoveryPoint) -> None:
        """Record ``point``; it reaches the delegate later (see the module docstring).

        Raises:
            StoreError: the adapter is closed.
        """
        self.update_bookmark(point.get_sub_id(), point.get_bookmark())

    def update_bookmark(self, sub_id: str, bookmark: str) -> None:
        """:meth:`update` without building a :class:`RecoveryPoint` (the store's fast path).

        Raises:
            StoreError: the adapter is closed.
        """
        cond = self._cond
        cond.acquire()
        try:
            if self._closed:
                raise StoreError("the conflating recovery point adapter is closed")
            pending = self._pending.get(sub_id)
            if pending is None:
                self._pending[sub_id] = _Pending(bookmark, time.monotonic())
                count = 1
            else:
                pending.bookmark = bookmark
                count = pending.count = pending.count + 1
            if count >= self._threshold and not self._due:
                self._due = True
                cond.notify()
        finally:
            cond.release()

    def purge(self, sub_id: str | None = None) -> None:
        """Drop pending points (of ``sub_id``, or all) and purge the delegate the same way."""
        with self._delegate_lock:
            with self._cond:
                if sub_id is None:
                    self._pending.clear()
                else:
                    self._pending.pop(sub_id, None)
            self._delegate.purge(sub_id)

    def prune(self) -> None:
        """Pass ``prune()`` to the delegate, if it has one."""
        prune = getattr(self._delegate, "prune", None)
        if prune is not None:
            with self._delegate_lock:
                prune()

    def flush(self) -> None:
        """Forward every pending point now."""
        with self._delegate_lock:
            with self._cond:
                points = [make_point(k, p.bookmark) for k, p in self._pending.items()]
                self._pending.clear()
            self._forward(points, requeue=True)

    def close(self) -> None:
        """Stop the thread, forward everything pending, close the delegate. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._delegate_lock:
            with self._cond:
                points = [make_point(k, p.bookmark) for k, p in self._pending.items()]
                self._pending.clear()
            self._forward(points, requeue=False)
            self._delegate.close()

    # ------------------------------------------------------------------ reading

    def __iter__(self) -> Iterator[RecoveryPoint]:
        """The delegate's stored points (read under the delegate lock)."""
        with self._delegate_lock:
            points = list(iter_recovery_points(self._delegate))
        return iter(points)

    _cursor: Iterator[RecoveryPoint] | None = None

    def next(self) -> RecoveryPoint:
        """The delegate's next point, or an empty one at the end (official API)."""
        if self._cursor is None:
            self._cursor = iter(self)
        return next(self._cursor, EMPTY_POINT)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                if not self._closed and not self._due:
                    cond.wait(self._interval)
                if self._closed:
                    return
            try:
                self._forward_due()
            except Exception:  # pragma: no cover - _forward already reports delegate errors
                logger.exception("recovery point conflation failed")

    def _forward_due(self) -> None:
        with self._delegate_lock:
            with self._cond:
                self._due = False
                if not self._pending:
                    return
                now = time.monotonic()
                limit = self._threshold
                expired = now - self._timeout
                due = [
                    k for k, p in self._pending.items() if p.count >= limit or p.first <= expired
                ]
                points = [make_point(k, self._pending.pop(k).bookmark) for k in due]
            self._forward(points, requeue=True)

    def _forward(self, points: list[RecoveryPoint], *, requeue: bool) -> None:
        """Call the delegate for each point (delegate lock held by the caller)."""
        for point in points:
            try:
                self._delegate.update(point)
            except Exception as exc:
                logger.warning("recovery point update of %r failed: %s", point.sub_id, exc)
                listener = self._listener
                if listener is not None:
                    try:
                        listener(exc)
                    except Exception:
                        logger.exception("recovery point exception listener failed")
                if requeue:
                    with self._cond:
                        if point.sub_id not in self._pending and not self._closed:
                            self._pending[point.sub_id] = _Pending(point.bookmark, time.monotonic())
                continue
            with self._cond:
                self._forwarded += 1

    def __enter__(self) -> ConflatingRecoveryPointAdapter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
