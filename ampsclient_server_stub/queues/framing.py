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
from .message import QueueMessage, QueueSub

__all__ = ["NEVER", "LeaseFrames", "Starts", "frame_run"]

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


class LeaseFrames:
    """The delivery frames of one offer's leases (queue ``name``), per session.

    Made before the offer: :meth:`.Queue.offer` leases its new messages (the arrivals)
    straight into :meth:`targets` with :func:`.leasing.lease_run`, which frames each as it
    leases it; :meth:`add` frames the leases the offer returned (messages that were objects
    already, barrier messages, ``x``). An offer does one or the other, so each session's
    frames stay in lease order. :meth:`sends` then has them per session.
    """

    __slots__ = ("_head", "_lp_tails", "_sends", "_starts", "_subs", "at_most_once")

    def __init__(self, name: str, subs: Sequence[QueueSub], *, at_most_once: bool) -> None:
        self._head = '{"c":"p","t":"' + escape(name) + '","sids":"'
        self._subs = subs
        self.at_most_once = at_most_once
        """At-most-once: every message leaves the queue as it is sent (see :meth:`add`)."""
        self._starts: Starts = {}
        self._sends: dict[int, tuple[Callable[[list[bytes]], None], list[bytes]]] = {}
        self._lp_tails: dict[float | None, bytes] = {}

    def targets(self, subs: Sequence[QueueSub]) -> list[tuple[bytes, list[bytes]]]:
        """Per subscription of ``subs``: its frames' header start up to the bookmark's
        value, and the list its session's frames go to."""
        starts = self._starts
        return [starts.get(qsub) or self._start(qsub) for qsub in subs]

    def tail(self, deadline: float | None) -> bytes:
        """What follows the bookmark in a frame of a lease ending at ``deadline``, up to the
        body: ``","lp":"<lease end>"}``."""
        return _lp_tail(deadline, self._lp_tails) + b"}"

    def add(self, leases: Sequence[tuple[QueueSub, QueueMessage]]) -> list[str]:
        """Frame ``leases``; the bookmarks that left the queue by being sent (barrier
        messages; at-most-once: all)."""
        gone: list[str] = []
        starts = self._starts
        if not starts:  # (a run of plain leases is then one frame_run, whoever takes them)
            self.targets(self._subs)
        lp_tails = self._lp_tails
        at_most_once = self.at_most_once
        deadline = leases[0][1].lease_deadline if leases else None  # (see Queue.offer)
        tail = self.tail(deadline)
        pos, count = 0, len(leases)
        while pos < count:
            if not at_most_once:
                pos = _frame_run(leases, pos, starts, deadline, tail)
                if pos == count:
                    break
            qsub, msg = leases[pos]
            pos += 1
            start, frames = starts.get(qsub) or self._start(qsub)
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
        return gone

    def sends(self) -> Sends:
        """Per session with frames: its ``send_many`` and its frames, in lease order."""
        return [sent for sent in self._sends.values() if sent[1]]

    def _start(self, qsub: QueueSub) -> tuple[bytes, list[bytes]]:
        sub = qsub.key
        assert isinstance(sub, Subscription)
        session = sub.conn.session
        sent = self._sends.get(id(session))
        if sent is None:
            sent = self._sends[id(session)] = (session.send_many, [])
        entry = self._starts[qsub] = ((self._head + sub.sid + '","bm":"').encode(), sent[1])
        return entry


def _lp_tail(deadline: float | None, cache: dict[float | None, bytes]) -> bytes:
    """``","lp":"<lease end>"`` (made once per lease end)."""
    lp_tail = cache.get(deadline)
    if lp_tail is None:
        lp = NEVER if deadline is None else format_timestamp(deadline)
        lp_tail = cache[deadline] = ('","lp":"' + lp + '"').encode()
    return lp_tail
