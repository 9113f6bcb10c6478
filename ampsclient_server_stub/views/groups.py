"""The grouped records of a view (or an aggregated subscription), kept up to date one row at a
time: a pure core, no I/O.

A *row* is one underlying record (a single-topic view) or one joined pair (``views.joins``),
identified by a hashable id. :meth:`GroupTable.put` (a row appeared or changed) and
:meth:`GroupTable.drop` (it left) update only the group(s) the row was and is in: each
aggregated field keeps an :class:`~.aggregates.Accumulator` per group, and a non-aggregated
field takes its value from the group's newest row. :meth:`GroupTable.record` builds the
projected record of one group (``None``: the group is empty).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Final

from ..engine.filters import compile_expression, compile_filter
from .aggregates import Accumulator
from .fields import Field

__all__ = ["GroupTable", "Touched", "put_path"]


Touched = dict[str, None]
"""The keys of the groups a change touched, in order (the group a row left before the one it
joined): an ordered set, so deliveries do not depend on hashing."""

_KEY_CACHE: Final = 100_000
_CACHEABLE: Final = frozenset({str, type(None)})

_FieldSpec = tuple[list[str], Callable[[Any], Any], str | None]
"""A compiled projected field: (path parts, expression, aggregate function or None)."""


class _Group:
    __slots__ = ("accumulators", "members")

    def __init__(self, fields: Sequence[_FieldSpec]) -> None:
        self.members: dict[Hashable, Any] = {}  # row id -> row document, newest last
        self.accumulators = [Accumulator(fn) if fn else None for _p, _e, fn in fields]


def put_path(record: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``record[path[0]][path[1]]... = value`` (creating the objects on the way)."""
    node = record
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


class GroupTable:
    """The groups of one view.

    Args:
        projection: the projected fields.
        grouping: the grouping expressions.
        filter_text: only rows matching it count (``None``: every row).
        key_domain: the seed of the group keys.
        rewrite: applied to every expression before it is compiled (joins qualify fields).
    """

    def __init__(
        self,
        projection: Sequence[Field],
        grouping: Sequence[str],
        *,
        filter_text: str | None = None,
        key_domain: str = "",
        rewrite: Callable[[str], str] = lambda text: text,
    ) -> None:
        self._grouping = [compile_expression(rewrite(g)) for g in grouping]
        self._fields = [
            (f.path.strip("/").split("/"), compile_expression(rewrite(f.expression)), f.aggregate)
            for f in projection
        ]
        self._filter = None if filter_text is None else compile_filter(rewrite(filter_text))
        self._seed = key_domain.encode()
        self._keys: dict[tuple[Any, ...], str] = {}  # grouping values -> group key (a cache)
        self._rows: dict[Hashable, tuple[str, tuple[Any, ...]]] = {}  # row -> (group, args)
        self.groups: dict[str, _Group] = {}

    def __len__(self) -> int:
        return len(self.groups)

    def group_of(self, doc: Any) -> str:
        """The key of the group ``doc`` belongs in."""
        values = tuple(g(doc) for g in self._grouping)
        try:
            return self._keys[values]
        except (KeyError, TypeError):  # (TypeError: a list or an object among the values)
            pass
        text = json.dumps(values, sort_keys=True, default=str, separators=(",", ":"))
        key = hashlib.blake2b(self._seed + b"\0" + text.encode(), digest_size=8).hexdigest()
        if all(type(v) in _CACHEABLE for v in values):  # (1 and 1.0 and True hash alike)
            if len(self._keys) >= _KEY_CACHE:
                self._keys.clear()
            self._keys[values] = key
        return key

    def put(self, row: Hashable, doc: Any) -> Touched:
        """Row ``row`` is now ``doc``: the keys of the groups this changed."""
        if self._filter is not None and not self._filter(doc):
            return self.drop(row)
        key = self.group_of(doc)
        args = tuple(expr(doc) if fn else None for _p, expr, fn in self._fields)
        entry = self._rows.get(row)
        if entry is not None and entry[0] == key:  # the same group: replace what changed
            same = self.groups[key]
            del same.members[row]
            same.members[row] = doc  # (newest last)
            for acc, old, new in zip(same.accumulators, entry[1], args, strict=True):
                if acc is not None and not (type(old) is type(new) and old == new):
                    acc.remove(old)
                    acc.add(new)
            self._rows[row] = (key, args)
            return {key: None}
        touched = self.drop(row)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(self._fields)
        group.members[row] = doc
        for acc, value in zip(group.accumulators, args, strict=True):
            if acc is not None:
                acc.add(value)
        self._rows[row] = (key, args)
        touched[key] = None
        return touched

    def drop(self, row: Hashable) -> Touched:
        """Row ``row`` left: the keys of the groups this changed."""
        entry = self._rows.pop(row, None)
        if entry is None:
            return {}
        key, args = entry
        group = self.groups[key]
        del group.members[row]
        if not group.members:
            del self.groups[key]
        else:
            for acc, value in zip(group.accumulators, args, strict=True):
                if acc is not None:
                    acc.remove(value)
        return {key: None}

    def record(self, key: str) -> dict[str, Any] | None:
        """The projected record of group ``key`` (``None``: no such group)."""
        group = self.groups.get(key)
        if group is None:
            return None
        newest = next(reversed(group.members.values()))
        record: dict[str, Any] = {}
        for (path, expr, _fn), acc in zip(self._fields, group.accumulators, strict=True):
            value = acc.result() if acc is not None else expr(newest)
            if len(path) == 1:
                record[path[0]] = value
            else:
                put_path(record, path, value)
        return record

    def records(self) -> Iterable[tuple[str, dict[str, Any]]]:
        """Every group's record."""
        for key in list(self.groups):
            record = self.record(key)
            if record is not None:
                yield key, record
