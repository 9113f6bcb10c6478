"""Where this instance's journal records came from, by runs of indexes: so that a destination
skips, without reading them, the records it sent here itself.

Loop prevention (``rules.py``, rule 3) never sends a record back to an instance on its path.
In a hot-hot pair every record B received from A has A on its path, so B's destination A
would read and decode each of them only to skip it: about a fifth of B's CPU under load.
:class:`IndexRuns` remembers, per upstream instance, the local indexes of the records applied
from it (consecutive indexes merge into one run); an outbound stream to that instance jumps
over a run in one step.

The runs live in memory for the life of the instance (after a restart the records are read
and skipped one by one, as before); they are a shortcut for a decision the rules would make
anyway, never a different one.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final

__all__ = ["MAX_RUNS", "IndexRuns"]

MAX_RUNS: Final = 65_536
"""Runs kept per upstream instance; the oldest half is forgotten beyond (they are then read
and skipped record by record: slower, same result)."""


class IndexRuns:
    """Ascending runs ``[first, last]`` of local journal indexes."""

    __slots__ = ("_firsts", "_lasts")

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []

    def __len__(self) -> int:
        return len(self._firsts)

    def add(self, index: int) -> None:
        """Record ``index`` (indexes arrive ascending; one that does not is ignored)."""
        self.add_range(index, index)

    def add_range(self, first: int, last: int) -> None:
        """Record every index from ``first`` to ``last``."""
        if last < first:
            return
        lasts = self._lasts
        if lasts and first <= lasts[-1]:
            first = lasts[-1] + 1
            if last < first:
                return
        if lasts and first == lasts[-1] + 1:
            lasts[-1] = last
            return
        self._firsts.append(first)
        lasts.append(last)
        if len(lasts) > MAX_RUNS:
            half = MAX_RUNS // 2
            del self._firsts[:half]
            del lasts[:half]

    def skip(self, index: int) -> int:
        """The end of the run holding ``index`` plus one, or ``index`` itself when no run
        holds it."""
        i = bisect_right(self._firsts, index) - 1
        if i >= 0 and index <= self._lasts[i]:
            return self._lasts[i] + 1
        return index

    def next_start(self, index: int) -> int | None:
        """The first index of the first run that starts after ``index`` (``None``: none)."""
        firsts = self._firsts
        i = bisect_right(firsts, index)
        return firsts[i] if i < len(firsts) else None
