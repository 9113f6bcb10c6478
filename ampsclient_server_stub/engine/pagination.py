"""Paginated ``sow_and_subscribe`` (AMPS User Guide, "Managing Result Sets", "Paginated SOW and
Subscribe": https://docs.crankuptheamps.com/amps-user-guide/sow-queries/managing-result-sets).

A ``sow_and_subscribe`` with both ``top_n`` and ``skip_n`` is a paginated subscription: AMPS
keeps the query's result set and delivers only the records that fall in the page (after the
first ``skip_n`` records, at most ``top_n`` of them, in ``orderby`` order). Here the page is
recomputed from the SOW after each change to its topic and compared with the page before: a
record that enters the page (or is updated in it) is delivered as a ``publish``; a record that
leaves it is an ``oof`` (to ``oof`` subscribers): reason ``deleted``/``expired`` when the record
is gone from the SOW, ``match`` when it moved out of the page (pushed out by a record ranked
before it, or its own update ranked it elsewhere or out of the filter).

No I/O: :meth:`Page.refresh` returns what to send.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .payload import OrderBy
from .sow import SowRecord, SowTopic

__all__ = ["Page"]


class Page:
    """The page of one paginated subscription over one SOW topic."""

    __slots__ = ("_order_by", "_predicate", "_skip_n", "_top_n", "records", "sow")

    def __init__(
        self,
        sow: SowTopic,
        *,
        predicate: Callable[[Any], bool] | None,
        order_by: OrderBy | None,
        skip_n: int,
        top_n: int,
        records: list[SowRecord],
    ) -> None:
        self.sow = sow
        self._predicate = predicate
        self._order_by = order_by
        self._skip_n = skip_n
        self._top_n = top_n
        self.records: dict[str, SowRecord] = {r.key: r for r in records}
        """The records in the page now, by key, in page order."""

    def refresh(self, changed: set[str]) -> tuple[list[SowRecord], list[SowRecord]]:
        """Recompute the page after the records ``changed`` (keys) were written or removed:
        ``(to publish, left)``: the records that entered the page or, being among ``changed``,
        were updated in it (in page order), and the records that left it (as they were)."""
        now, _matches = self.sow.query(
            self._predicate, order_by=self._order_by, top_n=self._top_n, skip_n=self._skip_n
        )
        before = self.records
        publish = [r for r in now if r.key not in before or r.key in changed]
        keys = {r.key for r in now}
        left = [r for k, r in before.items() if k not in keys]
        self.records = {r.key: r for r in now}
        return publish, left
