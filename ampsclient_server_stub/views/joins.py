"""The joined rows of a view over two or more topics: a pure core, no I/O.

A view's ``<Join>`` elements are evaluated in order, as SQL evaluates ``A JOIN B ON .. JOIN C
ON ..``: the first relates two topics, each later one adds a topic to the rows joined so far
(its other side names a topic already joined). An inner join keeps the pairs with equal values;
an outer one also keeps the rows of the kept side(s) that found no partner, with ``None`` for
the other topic's record. AMPS's ``=`` is a left outer join (``views.config``; our reading of
the User Guide's "Multiple Topic Aggregation: Join", docs/views.md). Join values are compared as
strings (12345 and 12345.00 differ); a ``NULL`` (missing or empty) value matches nothing, unless
the view enables ``JoinNullEquivalency`` (then they all match each other). A multi-field join
compares every field pair.

A row is a tuple of record keys, one per topic (``None``: no record), and its document
``{"0": doc, "1": doc, ...}`` (the shape ``views.config.qualify`` rewrites ``[topic].[/path]``
into). :meth:`JoinRows.change` returns the rows that left and the rows that are (new or
changed). With inner joins only, a row exists when its own records match, so a change of one
record changes only the rows that hold it: they are found from the record, join by join,
through an index of each join side's values. With outer joins a record may also take a
partner from (or give it back to) a row padded with ``None``: records are *linked* when a join
relates them with equal values, the rows of a set of linked records depend on those records
only, so the rows of the records linked to the changed one (before or after the change) are
recomputed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final

from ..engine.filters import compile_expression
from .config import JoinSpec

__all__ = ["JoinRows", "Row", "join_text"]

Row = tuple[str | None, ...]
"""A joined row: one record key (or ``None``) per underlying topic."""

_Record = tuple[int, str]
"""(topic index, record key)."""


_NULL: Final = "\0null"
"""The join value of ``NULL``, missing and empty values under ``JoinNullEquivalency``."""


def join_text(value: Any) -> str | None:
    """The string a join compares for ``value`` (``None``: ``NULL``, or an empty string, which
    AMPS also treats as ``NULL`` in a join)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value).upper()
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


class _Side:
    """One side of one join: the value of each record of its topic, and the records of each
    value."""

    __slots__ = ("equivalent", "index", "topic", "value", "values")

    def __init__(self, topic: int, paths: Sequence[str], *, null_equivalency: bool) -> None:
        self.topic = topic
        compiled = [compile_expression(path) for path in paths]
        if len(compiled) == 1:
            self.value: Callable[[Any], Any] = compiled[0]
        else:
            self.value = lambda doc: tuple(f(doc) for f in compiled)
        self.values: dict[str, Hashable] = {}
        self.index: dict[Hashable, dict[str, None]] = {}
        self.equivalent = null_equivalency

    def of(self, doc: Any) -> Hashable | None:
        value = self.value(doc)
        if isinstance(value, tuple):
            texts = tuple(self._text(v) for v in value)
            return None if None in texts else texts
        return self._text(value)

    def _text(self, value: Any) -> str | None:
        text = join_text(value)
        return _NULL if text is None and self.equivalent else text

    def put(self, key: str, doc: Any) -> None:
        self.drop(key)
        value = self.of(doc)
        if value is not None:
            self.values[key] = value
            self.index.setdefault(value, {})[key] = None

    def drop(self, key: str) -> None:
        old = self.values.pop(key, None)
        if old is not None:
            members = self.index[old]
            members.pop(key, None)
            if not members:
                del self.index[old]


class _Step:
    """One ``<Join>``: the side already joined (``acc``), the side it adds (``new``), and
    which of them an outer join keeps without a partner."""

    __slots__ = ("acc", "keep_acc", "keep_new", "new")

    def __init__(self, spec: JoinSpec, joined: set[int], *, null_equivalency: bool) -> None:
        pairs = [(spec.left_path, spec.right_path), *spec.more]
        left = _Side(spec.left_index, [a for a, _ in pairs], null_equivalency=null_equivalency)
        right = _Side(spec.right_index, [b for _, b in pairs], null_equivalency=null_equivalency)
        keep_left = spec.kind in ("LEFT", "FULL")
        keep_right = spec.kind in ("RIGHT", "FULL")
        if not joined or left.topic in joined:
            self.acc, self.new = left, right
            self.keep_acc, self.keep_new = keep_left, keep_right
        else:
            self.acc, self.new = right, left
            self.keep_acc, self.keep_new = keep_right, keep_left


class JoinRows:
    """The rows of a view's joins, over underlying topics of message types ``types``
    (``null_equivalency``: the view's ``JoinNullEquivalency``)."""

    def __init__(
        self, specs: Sequence[JoinSpec], types: Sequence[str], *, null_equivalency: bool = False
    ) -> None:
        topics = self._topics = len(types)
        self._docs: list[dict[str, Any]] = [{} for _ in range(topics)]
        joined: set[int] = set()
        self._steps: list[_Step] = []
        for spec in specs:
            step = _Step(spec, joined, null_equivalency=null_equivalency)
            joined |= {step.acc.topic, step.new.topic}
            self._steps.append(step)
        self._first = self._steps[0].acc.topic
        self._sides: list[list[tuple[_Side, _Side]]] = [[] for _ in range(topics)]
        for step in self._steps:  # (each side, with the side it is compared to)
            self._sides[step.acc.topic].append((step.acc, step.new))
            self._sides[step.new.topic].append((step.new, step.acc))
        self._rows: dict[Row, None] = {}
        self._of: dict[_Record, dict[Row, None]] = {}  # record -> the rows that hold it
        self._inner = all(spec.kind == "INNER" for spec in specs)
        """Inner joins only: a row exists when its own records match, so a change of a record
        changes only the rows that hold it (outer joins: the rows of every record linked to
        it, whose partners it may take or give back)."""
        self._rooted = all(step.keep_acc and not step.keep_new for step in self._steps)
        """Every join keeps the rows joined so far and drops the new topic's records without a
        partner (AMPS's ``=`` with the joined topic on its left): each row grows from one
        record of the first topic, its *root*, so a change recomputes the rows of the roots it
        can reach only: the roots of the rows that hold the record, and those whose rows meet
        its old or new join values."""

    def change(self, side: int, key: str, doc: Any) -> tuple[list[Row], dict[Row, Any]]:
        """Record ``key`` of topic ``side`` is now ``doc`` (``None``: gone):
        ``(rows that left, rows that are new or changed with their documents)``."""
        if self._rooted:
            return self._change_rooted(side, key, doc)
        inner = self._inner
        linked = set() if inner else self._linked(side, key)  # (before the change)
        self._store(side, key, doc)
        if inner:  # only the rows that hold the record change
            before = dict(self._of.get((side, key), {}))
            rows = self._rows_with(side, key) if doc is not None else {}
        else:
            linked |= self._linked(side, key)
            before = {}
            for record in linked:
                before |= self._of.get(record, {})
            docs = self._docs
            rows = self._evaluate({(t, k) for t, k in linked if k in docs[t]})
        return self._settle(before, rows)

    def _change_rooted(self, side: int, key: str, doc: Any) -> tuple[list[Row], dict[Row, Any]]:
        first = self._first
        roots: set[str] = {row[first] for row in self._of.get((side, key), {})}  # type: ignore[misc]
        adding = [step for step in self._steps if step.new.topic == side]
        values = {step.new.values.get(key) for step in adding}
        self._store(side, key, doc)
        if doc is not None and side == first:
            roots.add(key)
        values |= {step.new.values.get(key) for step in adding}
        for step in adding:  # (rows that may gain or lose this record as a partner)
            acc = step.acc
            for value in values:
                if value is None:
                    continue
                for partner in acc.index.get(value, ()):
                    for row in self._of.get((acc.topic, partner), {}):
                        roots.add(row[first])  # type: ignore[arg-type]
        before: dict[Row, None] = {}
        rows: dict[Row, None] = {}
        docs = self._docs[first]
        for root in sorted(roots):
            before |= self._of.get((first, root), {})
            if root in docs:
                rows |= self._grow(root)
        return self._settle(before, rows)

    def _store(self, side: int, key: str, doc: Any) -> None:
        """Record ``key`` of topic ``side`` is now ``doc`` (``None``: gone), in the documents
        and in the join value index of every side of that topic."""
        if doc is None:
            self._docs[side].pop(key, None)
            for own, _other in self._sides[side]:
                own.drop(key)
        else:
            self._docs[side][key] = doc
            for own, _other in self._sides[side]:
                own.put(key, doc)

    def _settle(
        self, before: dict[Row, None], rows: dict[Row, None]
    ) -> tuple[list[Row], dict[Row, Any]]:
        """The rows a change recomputed were ``before`` and are ``rows`` now: forget those that
        left, index the new ones; ``(rows that left, rows that are with their documents)``."""
        gone = [row for row in before if row not in rows]
        for row in gone:
            self._forget(row)
        now: dict[Row, Any] = {}
        for row in rows:
            if row not in self._rows:
                self._rows[row] = None
                for n, k in enumerate(row):
                    if k is not None:
                        self._of.setdefault((n, k), {})[row] = None
            now[row] = self._doc(row)
        return gone, now

    def _grow(self, root: str) -> dict[Row, None]:
        """The rows of root record ``root`` (joins that keep the rows joined so far)."""
        start: list[str | None] = [None] * self._topics
        start[self._first] = root
        rows = [start]
        for step in self._steps:
            acc, new = step.acc, step.new
            out: list[list[str | None]] = []
            for row in rows:
                mine = row[acc.topic]
                value = None if mine is None else acc.values.get(mine)
                partners = sorted(new.index.get(value, ())) if value is not None else ()
                if not partners:
                    out.append(row)
                for partner in partners:
                    joined = list(row)
                    joined[new.topic] = partner
                    out.append(joined)
            rows = out
        return {tuple(row): None for row in rows}

    def _forget(self, row: Row) -> None:
        del self._rows[row]
        for n, k in enumerate(row):
            if k is not None:
                held = self._of[(n, k)]
                del held[row]
                if not held:
                    del self._of[(n, k)]

    def _linked(self, side: int, key: str) -> set[_Record]:
        """The records linked to ``key`` of topic ``side`` (itself included, when present)."""
        seen: set[_Record] = set()
        if key not in self._docs[side]:
            return seen
        todo = [(side, key)]
        seen.add((side, key))
        while todo:
            topic, k = todo.pop()
            for own, other in self._sides[topic]:
                value = own.values.get(k)
                if value is None:
                    continue
                for partner in other.index.get(value, ()):
                    record = (other.topic, partner)
                    if record not in seen:
                        seen.add(record)
                        todo.append(record)
        return seen

    def _rows_with(self, side: int, key: str) -> dict[Row, None]:
        """The rows of inner joins that hold record ``key`` of topic ``side``: from it, each
        join whose one side is placed adds the partners of its other side (the joins form a
        tree over the topics: each adds one topic)."""
        start: list[str | None] = [None] * self._topics
        start[side] = key
        partial = [start]
        placed = {side}
        steps = list(self._steps)
        while steps:
            for step in steps:
                if (step.acc.topic in placed) != (step.new.topic in placed):
                    break
            else:  # (unreachable: the joins are connected)
                break
            steps.remove(step)
            have, add = (step.acc, step.new) if step.acc.topic in placed else (step.new, step.acc)
            out = []
            for row in partial:
                mine = row[have.topic]
                value = None if mine is None else have.values.get(mine)
                if value is None:
                    continue
                for partner in sorted(add.index.get(value, ())):
                    joined = list(row)
                    joined[add.topic] = partner
                    out.append(joined)
            partial = out
            placed.add(add.topic)
        return {tuple(row): None for row in partial}

    def _evaluate(self, records: set[_Record]) -> dict[Row, None]:
        """The rows of the joins over ``records`` only (a set closed under links)."""
        size = self._topics
        rows: list[list[str | None]] = []
        for topic, key in sorted(records, key=lambda r: (r[0], r[1])):
            if topic == self._first:
                row: list[str | None] = [None] * size
                row[topic] = key
                rows.append(row)
        for step in self._steps:
            acc, new = step.acc, step.new
            matched: set[str] = set()
            out: list[list[str | None]] = []
            for row in rows:
                mine = row[acc.topic]
                value = None if mine is None else acc.values.get(mine)
                # (``records`` is closed under links: every partner of a record is in it)
                partners = sorted(new.index.get(value, ())) if value is not None else []
                if partners:
                    matched.update(partners)
                    for partner in partners:
                        joined = list(row)
                        joined[new.topic] = partner
                        out.append(joined)
                elif step.keep_acc:
                    out.append(row)
            if step.keep_new:
                for k in sorted(k for t, k in records if t == new.topic):
                    if k not in matched:
                        alone: list[str | None] = [None] * size
                        alone[new.topic] = k
                        out.append(alone)
            rows = out
        return {tuple(row): None for row in rows if any(k is not None for k in row)}

    def _doc(self, row: Row) -> dict[str, Any]:
        return {str(n): self._docs[n][k] for n, k in enumerate(row) if k is not None}
