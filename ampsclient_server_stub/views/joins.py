"""The joined rows of a view over two topics: a pure core, no I/O.

Records of both sides are indexed by their join value; a joined row is a pair of record keys
(``None`` for the missing side of an outer row) and its document ``{"0": left, "1": right}``
(the shape ``views.config.qualify`` rewrites ``[topic].[/path]`` into). A change on either
side can only change the rows of the join values the record had and has, so
:meth:`JoinRows.change` recomputes those value classes only and returns the rows that left and
the rows that are (new or changed). A ``NULL`` join value matches nothing (as in SQL): such a
record appears only in an outer row.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ..engine.filters import compile_expression
from .config import JoinSpec

__all__ = ["JoinRows", "Row"]

Row = tuple[str | None, str | None]
"""A joined row: (left key, right key)."""


def _hashable(value: Any) -> Hashable:
    if isinstance(value, list | dict):
        return ("\0json", repr(value))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value  # type: ignore[no-any-return]


class JoinRows:
    """The rows of ``spec`` (an inner, left, right or full outer join)."""

    def __init__(self, spec: JoinSpec) -> None:
        self._kind = spec.kind
        self._values = (compile_expression(spec.left_path), compile_expression(spec.right_path))
        self._docs: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        self._class: tuple[dict[str, Hashable], dict[str, Hashable]] = ({}, {})
        self._index: tuple[dict[Hashable, dict[str, None]], dict[Hashable, dict[str, None]]] = (
            {},
            {},
        )
        self._rows: dict[Hashable, list[Row]] = {}

    def _class_of(self, side: int, key: str, doc: Any) -> Hashable:
        value = self._values[side](doc)
        if value is None:
            return ("\0null", side, key)  # matches nothing: a class of its own
        return _hashable(value)

    def change(self, side: int, key: str, doc: Any) -> tuple[list[Row], dict[Row, Any]]:
        """Record ``key`` of ``side`` (0 left, 1 right) is now ``doc`` (``None``: gone):
        ``(rows that left, rows that are new or changed with their documents)``."""
        classes: list[Hashable] = []
        old = self._class[side].pop(key, None)
        if old is not None:
            members = self._index[side][old]
            members.pop(key, None)
            if not members:
                del self._index[side][old]
            self._docs[side].pop(key, None)
            classes.append(old)
        if doc is not None:
            new = self._class_of(side, key, doc)
            self._class[side][key] = new
            self._index[side].setdefault(new, {})[key] = None
            self._docs[side][key] = doc
            if new != old:
                classes.append(new)
        gone: list[Row] = []
        now: dict[Row, Any] = {}
        for cls in classes:
            before = self._rows.pop(cls, [])
            rows = self._rows_of(cls)
            if rows:
                self._rows[cls] = rows
            kept = set(rows)
            gone.extend(r for r in before if r not in kept)
            for row in rows:
                now[row] = self._doc(row)
        return gone, now

    def _rows_of(self, cls: Hashable) -> list[Row]:
        left = list(self._index[0].get(cls, ()))
        right = list(self._index[1].get(cls, ()))
        if left and right:
            return [(lk, rk) for lk in left for rk in right]
        if left and self._kind in ("LEFT", "FULL"):
            return [(lk, None) for lk in left]
        if right and self._kind in ("RIGHT", "FULL"):
            return [(None, rk) for rk in right]
        return []

    def _doc(self, row: Row) -> dict[str, Any]:
        lk, rk = row
        doc: dict[str, Any] = {}
        if lk is not None:
            doc["0"] = self._docs[0][lk]
        if rk is not None:
            doc["1"] = self._docs[1][rk]
        return doc
