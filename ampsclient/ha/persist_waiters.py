"""The publish side of an HA client apart from the connection: what a persisted ack does to
the publish store (:class:`PersistedAcks`), who waits for persisted acks (one future per
``publish_future`` message and one per ``publish_flush`` call; no I/O: the HA client feeds it
the acks), and which stores the C publish lane may write to."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import Any, Literal

from ..exceptions import PublishError, error_for_reason
from ..protocol.message import Message
from ..stores.publish import FilePublishStore, MemoryPublishStore, PublishStore
from ..stores.publish.official import PublishStore as NamedFilePublishStore

__all__ = ["FailedWriteHandler", "PersistWaiters", "PersistedAcks", "publish_lane_store_kind"]

log = logging.getLogger("ampsclient.ha")

FailedWriteHandler = Callable[[Message, str], Any]
"""``handler(message, reason)`` for a publish the server refused (``duplicate``, ...)."""


class PersistWaiters:
    """Futures resolved by persisted acks, in sequence order."""

    def __init__(self) -> None:
        self.publishes: collections.deque[tuple[int, asyncio.Future[int]]] = collections.deque()
        """(sequence, future) of each ``publish_future`` message not yet acked."""
        self.flushes: list[tuple[int, asyncio.Future[None]]] = []
        """(last sequence it waits for, future) of each ``publish_flush`` in progress."""

    def add_publish(self, seq: int, future: asyncio.Future[int]) -> None:
        """``future`` resolves (to ``seq``) when ``seq`` is persisted."""
        self.publishes.append((seq, future))

    def persisted_up_to(self, seq: int) -> None:
        """Everything up to ``seq`` is persisted."""
        futures = self.publishes
        while futures and futures[0][0] <= seq:
            done, fut = futures.popleft()
            if not fut.done():
                fut.set_result(done)

    def refused(self, seq: int, reason: str) -> None:
        """The server refused ``seq`` (a failed write): its future fails with ``reason``."""
        for i, (s, fut) in enumerate(self.publishes):
            if s == seq:
                del self.publishes[i]
                if not fut.done():
                    fut.set_exception(
                        error_for_reason(reason)
                        if reason not in ("duplicate", "")
                        else PublishError(reason, reason=reason)
                    )
                return

    def add_flush(self, target: int, future: asyncio.Future[None]) -> None:
        """``future`` resolves when nothing up to ``target`` is unpersisted."""
        self.flushes.append((target, future))

    def remove_flush(self, future: asyncio.Future[None]) -> None:
        """Stop tracking ``future`` (its flush returned or gave up)."""
        self.flushes = [(t, f) for t, f in self.flushes if f is not future]

    def check_flushes(self, lowest_unpersisted: int | None) -> None:
        """Resolve the flushes whose target is below ``lowest_unpersisted`` (``None``: all)."""
        if not self.flushes:
            return
        keep = []
        for target, fut in self.flushes:
            if lowest_unpersisted is None or lowest_unpersisted > target:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((target, fut))
        self.flushes = keep

    def fail_flushes(self, error: BaseException) -> None:
        """Every flush in progress fails with ``error`` (reconnecting gave up)."""
        for _, fut in self.flushes:
            if not fut.done():
                fut.set_exception(error)
        self.flushes.clear()


class PersistedAcks:
    """Applies the server's persisted acks of publishes to the publish store and its waiters.

    Args:
        store: the publish store (the HA client sets :attr:`store` when it changes).
        waiters: the futures waiting for persisted acks.
        report: gives a failed-write handler's exception to the exception listener.
        unrouted: takes a refusal nobody handles (the last-chance handler).
    """

    def __init__(
        self,
        store: PublishStore,
        waiters: PersistWaiters,
        *,
        report: Callable[[BaseException], None],
        unrouted: Callable[[Message], None],
    ) -> None:
        self.store = store
        """The publish store."""
        self.waiters = waiters
        """Futures waiting for persisted acks."""
        self.failed_write: FailedWriteHandler | None = None
        """Called with ``(message, reason)`` for each stored publish the server refused."""
        self._report = report
        self._unrouted = unrouted
        self._refusals: dict[str, tuple[int, int, int]] = {}
        """Refusals not handed to a failed-write handler, by reason: ``(count, first s, last
        s)``; logged once when a reason first appears and once when the episode ends."""

    def apply(self, ack: Message) -> None:
        """A persisted ack: ``success`` persists everything up to its ``s``; ``failure``
        refuses that one message (discarded; the failed-write handler gets it)."""
        seq = ack.sequence
        if seq is None:
            return
        store = self.store
        if ack.status == "failure":
            reason = ack.reason or ""
            stored = store.get(seq)
            store.discard(seq)
            self.waiters.refused(seq, reason)
            handler = self.failed_write
            if stored is not None and handler is not None:
                try:
                    handler(Message(stored.payload), reason)
                except Exception as exc:
                    self._report(exc)
            elif handler is None:
                self._refused(seq, reason)
                self._unrouted(ack)
        else:
            if self._refusals:
                self._refusals_over()
            store.discard_up_to(seq)
            self.waiters.persisted_up_to(seq)
        self.waiters.check_flushes(store.lowest_unpersisted)

    def _refused(self, seq: int, reason: str) -> None:
        """Log a refusal once per reason and episode (a full disk on the server refuses
        every publish: one line, not one per message)."""
        seen = self._refusals.get(reason)
        if seen is None:
            log.warning(
                "the server refused publish s=%d: %s (further refusals for this reason are "
                "counted until a publish is persisted again)",
                seq,
                reason,
            )
            self._refusals[reason] = (1, seq, seq)
        else:
            self._refusals[reason] = (seen[0] + 1, seen[1], seq)

    def _refusals_over(self) -> None:
        for reason, (count, first, last) in self._refusals.items():
            log.warning(
                "the server refused %d publish(es) for %r, s=%d..%d; publishes are persisted again",
                count,
                reason,
                first,
                last,
            )
        self._refusals.clear()


def publish_lane_store_kind(store: PublishStore) -> Literal["memory", "file"] | None:
    """Which store the C publish lane writes to, or ``None`` when it must not: a
    :class:`MemoryPublishStore`, or a :class:`FilePublishStore` that does not fsync each
    message (with ``"always"`` the record must be on disk before the frame is queued). Not
    for other stores, subclasses included: the lane does exactly what these two classes do."""
    if type(store) is MemoryPublishStore:
        return "memory"
    lane_file = type(store) in (FilePublishStore, NamedFilePublishStore)
    if lane_file and isinstance(store, FilePublishStore) and store.fsync_policy != "always":
        return "file"
    return None
