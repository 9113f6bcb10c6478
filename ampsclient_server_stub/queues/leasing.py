"""The hot path of a queue's offer: leasing a run of new messages, as the intake read them.

:meth:`.Queue.offer` with only new messages waiting (none went back), no filters and no
``BarrierExpression``, by one subscription or ``proportional`` fairness, leases the queue's
arrivals (:mod:`.arrivals`) a run at a time: :func:`lease_run` (C when built,
:mod:`.speedups`) makes each message and its lease; :func:`lowest_ratio` is the choice it
makes per message.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .arrivals import Arrivals
from .message import QueueMessage, QueueSub

__all__ = ["FrameTargets", "lease_arrivals", "lease_run", "lowest_ratio"]


class FrameTargets(Protocol):
    """Where :func:`lease_run` frames the messages it leases (:class:`.framing.LeaseFrames`)."""

    def targets(self, subs: Sequence[QueueSub]) -> list[tuple[bytes, list[bytes]]]:
        """Per subscription: its frames' header start, and the list its frames go to."""

    def tail(self, deadline: float | None) -> bytes:
        """What follows the bookmark in the frame of a lease ending at ``deadline``."""


def lowest_ratio(subs: Sequence[QueueSub]) -> QueueSub:
    """``proportional`` fairness without filters: the subscription with the lowest
    leased/backlog ratio, ties to the first (the first of all when none has room: the
    caller leases only while one has).

    Raises:
        IndexError: ``subs`` is empty.
    """
    best = subs[0]
    best_ratio = 2.0
    for candidate in subs:
        leased = len(candidate.leased)
        if leased < candidate.backlog:
            ratio = leased / candidate.backlog
            if ratio < best_ratio:
                best, best_ratio = candidate, ratio
    return best


def lease_run(
    run: Sequence[tuple[str, bytes]],
    index: int,
    n: int,
    first: int,
    enqueued: float,
    subs: Sequence[QueueSub],
    messages: dict[str, QueueMessage] | None,
    now: float,
    state: int,
    lease_deadline: float | None,
    heappush: Callable[[list[Any], tuple[float, int, QueueMessage]], None],
    lease_heap: list[Any],
    out: list[tuple[QueueSub, QueueMessage]],
    frames: Sequence[tuple[bytes, list[bytes]]] | None = None,
    tail: bytes | None = None,
) -> None:
    """Lease the ``n`` arrivals ``run[index:index + n]`` (``(bookmark, body)`` tuples; the
    first of the run has the order number ``first``, all arrived at ``enqueued``).

    Each becomes a ``QueueMessage(bookmark, body, None, first + i, enqueued)``, kept in
    ``messages`` (``None``: at-most-once, it leaves the queue as it is sent), leased to
    ``subs[0]`` when it is the only one, else to :func:`lowest_ratio`'s choice: it enters that
    subscription's ``leased``, with ``deliveries`` 1, that ``lessee``, ``leased_at`` ``now``,
    ``state`` ``state``; with a ``lease_deadline`` (one object for all: :mod:`.framing`
    relies on it) it is set and ``(lease_deadline, order, msg)`` pushed on ``lease_heap``
    with ``heappush``. ``(subscription, message)`` is appended to ``out`` for each; with
    ``frames`` (one ``(start, list)`` per subscription, in ``subs``' order) the message's
    delivery frame ``start + bookmark + tail + body`` is appended to its subscription's list
    instead (:mod:`.framing`). The twin of the C ``lease_run`` (:mod:`.speedups`).

    Raises:
        ValueError: ``index`` is negative; ``frames`` has not one entry per subscription.
        IndexError: the run has fewer than ``index + n`` arrivals, or there is no
            subscription.
        TypeError: ``frames`` without ``tail`` (bytes).
    """
    if index < 0:
        raise ValueError("lease_run: index must be >= 0")
    if n <= 0:
        return
    if index + n > len(run):
        raise IndexError("lease_run: the run has fewer arrivals")
    if not subs:
        raise IndexError("lease_run: no subscription")
    if frames is not None:
        _check_frames(frames, tail, len(subs))
    targets = None if frames is None else dict(zip(map(id, subs), frames, strict=True))
    new = QueueMessage
    append = out.append
    single = subs[0] if len(subs) == 1 else None
    for i in range(index, index + n):
        bookmark, data = run[i]
        msg = new(bookmark, data, None, first + i, enqueued)
        if messages is not None:
            messages[bookmark] = msg
        qsub = single or lowest_ratio(subs)
        qsub.leased[bookmark] = msg
        msg.deliveries = 1
        msg.lessee = qsub
        msg.leased_at = now
        msg.state = state
        if lease_deadline is not None:
            msg.lease_deadline = lease_deadline
            heappush(lease_heap, (lease_deadline, first + i, msg))
        if targets is None:
            append((qsub, msg))
        else:
            start, framed = targets[id(qsub)]
            framed.append(b"".join((start, bookmark.encode(), tail or b"", data)))


def _check_frames(
    frames: Sequence[tuple[bytes, list[bytes]]], tail: bytes | None, count: int
) -> None:
    """:func:`lease_run`'s checks of ``frames`` and ``tail`` (the C one's, in its order)."""
    if type(tail) is not bytes:
        raise TypeError("lease_run: frames needs tail (bytes)")
    if len(frames) != count:
        raise ValueError("lease_run: frames must have one entry per subscription")
    for entry in frames:
        if not (
            isinstance(entry, tuple)
            and len(entry) == 2
            and isinstance(entry[0], bytes)
            and isinstance(entry[1], list)
        ):
            raise TypeError("lease_run: frames entries must be (bytes, list)")


def lease_arrivals(
    lease: Callable[..., None],
    arrivals: Arrivals,
    room: int,
    subs: Sequence[QueueSub],
    kept: dict[str, QueueMessage] | None,
    now: float,
    state: int,
    lease_deadline: float | None,
    lease_heap: list[Any],
    out: list[tuple[QueueSub, QueueMessage]],
    frames: FrameTargets | None,
) -> int:
    """Lease up to ``room`` of ``arrivals``, a run at a time with ``lease`` (:func:`lease_run`
    or its C twin; the other arguments are its own): their leases appended to ``out``, or
    with ``frames`` framed there as they are leased. Returns how many were framed."""
    targets = tail = None
    if frames is not None:
        targets = frames.targets(subs)
        tail = frames.tail(lease_deadline)
    framed = 0
    while room > 0 and arrivals.count:
        run, index, first, enqueued = arrivals.head()
        n = min(room, len(run) - index)
        lease(
            run,
            index,
            n,
            first,
            enqueued,
            subs,
            kept,
            now,
            state,
            lease_deadline,
            heapq.heappush,
            lease_heap,
            out,
            targets,
            tail,
        )
        arrivals.advance(n)
        room -= n
        if targets is not None:
            framed += n
    return framed
