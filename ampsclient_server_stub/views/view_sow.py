"""The SOW topic of a view: its records are staged in memory as the view changes and written
to the (in-memory) store only when something reads it, so a publish to an underlying topic
pays for the group update and the delivery, not for a store write per change.

:class:`ViewSow` is a :class:`~..engine.sow.SowTopic` whose every read (queries, ``get``,
``doc``, iteration, counts, the write counter) first writes what was staged, in the order it
was staged; the view engine stages with :meth:`ViewSow.stage`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..engine.payload import OrderBy
from ..engine.sow import SowRecord, SowTopic

__all__ = ["ViewSow"]


class ViewSow(SowTopic):
    """A view's records (keys given by the view: its groups)."""

    def __init__(
        self, topic: str, *, message_type: str, hash_indexes: Sequence[Sequence[str]] = ()
    ) -> None:
        super().__init__(topic, keys=(), message_type=message_type, hash_indexes=hash_indexes)
        self.records: dict[str, tuple[SowRecord, Any]] = {}
        """The current record and document of each group (authoritative, staged or not)."""
        self._staged: dict[str, None] = {}  # keys written or removed since the last sync

    def stage(self, key: str, record: SowRecord | None, doc: Any = None) -> None:
        """Group ``key`` is now ``record`` (with its parsed ``doc``; ``None``: removed); the
        watchers (a view over this view, aggregated subscriptions) are told now."""
        before = self.records.pop(key, None) if record is None else self.records.get(key)
        if record is not None:
            self.records[key] = (record, doc)
        self._staged.pop(key, None)  # (re-staged: written after what was staged before it)
        self._staged[key] = None
        for watcher in tuple(self.watchers):
            watcher.record_changed(self, key, None if before is None else before[1], doc)

    def sync(self) -> None:
        """Write what was staged (one transaction)."""
        if not self._staged:
            return
        staged, self._staged = self._staged, {}
        watchers, self.watchers = self.watchers, []  # (told when the change was staged)
        try:
            self._write_staged(staged)
        finally:
            self.watchers = watchers

    def _write_staged(self, staged: dict[str, None]) -> None:
        with self.batch():
            for key in staged:
                entry = self.records.get(key)
                if entry is None:
                    if super().__contains__(key):
                        super().delete(keys=[key])
                    continue
                record, doc = entry
                super().publish(
                    record.data,
                    doc=doc,
                    sow_key=key,
                    bookmark=record.bookmark,
                    timestamp=record.timestamp,
                )

    # every read writes what was staged first

    @property
    def last_seq(self) -> int:
        self.sync()
        return super().last_seq

    def written_since(self, seq: int) -> list[SowRecord]:
        self.sync()
        return super().written_since(seq)

    def get(self, key: str) -> SowRecord | None:
        self.sync()
        return super().get(key)

    def doc(self, key: str) -> Any:
        self.sync()
        return super().doc(key)

    def query(
        self,
        predicate: Callable[[Any], bool] | None = None,
        *,
        keys: Sequence[str] | None = None,
        order_by: OrderBy | None = None,
        top_n: int | None = None,
        skip_n: int = 0,
        filter_text: str | None = None,
    ) -> tuple[list[SowRecord], int]:
        self.sync()
        return super().query(
            predicate,
            keys=keys,
            order_by=order_by,
            top_n=top_n,
            skip_n=skip_n,
            filter_text=filter_text,
        )

    def delete(
        self,
        predicate: Callable[[Any], bool] | None = None,
        *,
        keys: Sequence[str] | None = None,
        data_doc: Any = None,
        sow_key: str | None = None,
        journal_index: int | None = None,
    ) -> list[SowRecord]:
        self.sync()
        return super().delete(
            predicate, keys=keys, data_doc=data_doc, sow_key=sow_key, journal_index=journal_index
        )

    def __len__(self) -> int:
        return len(self.records)

    def __contains__(self, key: object) -> bool:
        return key in self.records

    def __iter__(self) -> Iterator[str]:
        self.sync()
        return super().__iter__()
