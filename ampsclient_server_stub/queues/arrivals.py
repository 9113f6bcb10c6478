"""New messages of a queue kept as the intake's runs, until they are leased or looked at.

A queue that takes a run of plain messages from its intake (``Queue.enqueue_run``) does not
make a :class:`~.message.QueueMessage` and a dict entry for each: it keeps the run, the list
of ``(bookmark, body)`` pairs the intake read, with the time it arrived and the order number
of its first message (the others follow one by one). A message becomes an object when it is
leased, or when anything needs the whole queue as objects (a ``sow`` query, a view, an ack of
a message that is not leased, statistics): the queue then turns every arrival into an object
at once (:meth:`Arrivals.drain`).

In a deep queue this saves the memory traffic of an object and of a hash-table entry per
waiting message, and the collector's passes over them; the messages are read back in order,
one run after another.

A run that arrives within :data:`MERGE_WINDOW` of the newest run kept, and follows it in
order, is added to that run instead of standing alone: a publisher sending one message at a
time gives the intake runs of one message each, and the leases are made a run at a time.
Its messages then carry the newest run's arrival time, earlier by less than the window.
"""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["MERGE_WINDOW", "Arrivals"]

MERGE_WINDOW: Final = 0.001
"""Seconds within which a new run joins the newest run kept (see the module docstring)."""


class Arrivals:
    """Runs of new messages, oldest first (see the module docstring)."""

    __slots__ = ("_pos", "_runs", "count")

    def __init__(self) -> None:
        self._runs: deque[tuple[list[tuple[str, bytes]], float, int]] = deque()
        """``(run, arrival time, order of its first message)``, oldest first."""
        self._pos = 0
        """How many of the first run's messages were taken already."""
        self.count = 0
        """Messages waiting here."""

    def __len__(self) -> int:
        return self.count

    def add(self, run: list[tuple[str, bytes]], now: float, first_order: int) -> None:
        """Keep ``run`` (the queue owns the list from now on), arrived at ``now``; its
        messages have the order numbers ``first_order``, ``first_order + 1``, ..."""
        if not run:
            return
        runs = self._runs
        if runs:
            last, when, first = runs[-1]
            if now - when < MERGE_WINDOW and first + len(last) == first_order:
                last.extend(run)
                self.count += len(run)
                return
        runs.append((run, now, first_order))
        self.count += len(run)

    def first_bookmark(self) -> str | None:
        """The bookmark of the oldest message here (``None``: none)."""
        if not self.count:
            return None
        return self._runs[0][0][self._pos][0]

    def head(self) -> tuple[list[tuple[str, bytes]], int, int, float]:
        """``(run, index, first order, arrival time)`` of the oldest run; its messages from
        ``index`` on are still here (take them with :meth:`advance`).

        Raises:
            IndexError: there is none.
        """
        run, now, first = self._runs[0]
        return run, self._pos, first, now

    def advance(self, n: int) -> None:
        """Take the ``n`` oldest messages of the oldest run out (at most what it has left)."""
        run = self._runs[0][0]
        pos = self._pos + n
        if pos >= len(run):
            n -= pos - len(run)
            self._runs.popleft()
            pos = 0
        self._pos = pos
        self.count -= n

    def drain(self) -> list[tuple[str, bytes, int, float]]:
        """Every message, oldest first, taken out."""
        out: list[tuple[str, bytes, int, float]] = []
        append = out.append
        pos = self._pos
        for run, now, first in self._runs:
            for i in range(pos, len(run)):
                bookmark, data = run[i]
                append((bookmark, data, first + i, now))
            pos = 0
        self._runs.clear()
        self._pos = 0
        self.count = 0
        return out
