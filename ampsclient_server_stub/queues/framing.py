"""The delivery frames of a queue's leases, grouped per session.

A delivery of a queued message is ``{"c":"p","t":"<queue>","sids":"<sid>","bm":"<bookmark>",
"lp":"<lease end>"[,"x":"..."]}BODY``. The header's start is made once per subscription; the
leases of one offer share their lease end (one ``now``, one ``LeasePeriod``), so a run of
them is ``start + bookmark + tail + body`` each: :func:`frame_run` joins such a run (C when
built, :mod:`.speedups`), :func:`lease_frames` does the rest (barrier messages, ``x``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from ampsclient.protocol.header import escape

from ..engine.state import Subscription
from ..engine.wire import format_timestamp
from . import speedups
from .model import QueueMessage, QueueSub

__all__ = ["NEVER", "Starts", "frame_run", "lease_frames"]

NEVER: Final = "99991231T235959.000000Z"
"""``lp`` of a lease that never expires (no ``LeasePeriod``)."""

Starts = dict[QueueSub, tuple[bytes, list[bytes]]]
"""A subscription -> its frames' header start (up to the bookmark's value), and the list
its session's frames go to."""

Sends = list[tuple[Callable[[list[bytes]], None], list[bytes]]]
"""Per session: its ``send_many`` and its frames, in order."""


def frame_run(
    leases: Sequence[tuple[QueueSub, QueueMessage]],
    pos: int,
    starts: Starts,
    deadline: float | None,
    tail: bytes,
) -> int:
    """Append ``start + bookmark + tail + body`` for each lease of ``leases[pos:]`` to its
    subscription's list in ``starts``, up to the first lease whose subscription is not in
    ``starts``, whose message has an ``x`` (not ``None``), is a barrier message (``barrier``
    not ``False``) or has another ``lease_deadline`` object than ``deadline``; that position
    (``len(leases)``: all). The twin of the C ``frame_run`` (:mod:`.speedups`).

    Raises:
        ValueError: ``pos`` is negative.
    """
    if pos < 0:
        raise ValueError("frame_run: pos must be >= 0")
    end = len(leases)
    while pos < end:
        qsub, msg = leases[pos]
        entry = starts.get(qsub)
        if (
            entry is None
            or msg.x is not None
            or msg.barrier is not False
            or msg.lease_deadline is not deadline
        ):
            return pos
        entry[1].append(b"".join((entry[0], msg.bookmark.encode(), tail, msg.data)))
        pos += 1
    return pos


_frame_run: Final = speedups.frame_run or frame_run


def lease_frames(
    name: str, leases: Sequence[tuple[QueueSub, QueueMessage]], *, at_most_once: bool
) -> tuple[Sends, list[str]]:
    """The frames of ``leases`` (one :meth:`.Queue.offer` of queue ``name``) per session, and
    the bookmarks that left the queue by being sent (barrier messages; at-most-once: all)."""
    head = '{"c":"p","t":"' + escape(name) + '","sids":"'
    gone: list[str] = []
    starts: Starts = {}
    sends: dict[int, tuple[Callable[[list[bytes]], None], list[bytes]]] = {}
    lp_tails: dict[float | None, bytes] = {}
    deadline = leases[0][1].lease_deadline if leases else None  # (see Queue.offer)
    tail = _lp_tail(deadline, lp_tails) + b"}"
    pos, count = 0, len(leases)
    while pos < count:
        if not at_most_once:
            pos = _frame_run(leases, pos, starts, deadline, tail)
            if pos == count:
                break
        qsub, msg = leases[pos]
        pos += 1
        entry = starts.get(qsub)
        if entry is None:
            sub = qsub.key
            assert isinstance(sub, Subscription)
            session = sub.conn.session
            sent = sends.get(id(session))
            if sent is None:
                sent = sends[id(session)] = (session.send_many, [])
            entry = starts[qsub] = ((head + sub.sid + '","bm":"').encode(), sent[1])
        start, frames = entry
        bookmark = msg.bookmark
        if msg.barrier:  # not leased: no lp (nothing to acknowledge)
            lease_tail = b'"'
            if not gone or gone[-1] != bookmark:
                gone.append(bookmark)
        else:
            lease_tail = _lp_tail(msg.lease_deadline, lp_tails)
            if at_most_once:
                gone.append(bookmark)
        if msg.x:
            lease_tail += (',"x":"' + escape(msg.x) + '"').encode()
        frames.append(b"".join((start, bookmark.encode(), lease_tail, b"}", msg.data)))
    return list(sends.values()), gone


def _lp_tail(deadline: float | None, cache: dict[float | None, bytes]) -> bytes:
    """``","lp":"<lease end>"`` (made once per lease end)."""
    lp_tail = cache.get(deadline)
    if lp_tail is None:
        lp = NEVER if deadline is None else format_timestamp(deadline)
        lp_tail = cache[deadline] = ('","lp":"' + lp + '"').encode()
    return lp_tail
