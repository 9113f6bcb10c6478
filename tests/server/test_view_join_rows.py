"""``views.joins.JoinRows`` against a plain evaluation of the same joins: after every change of a
record (put, replace, delete) of any of three topics, the rows the incremental core reports
(rows that left, rows that are new or changed) add up to exactly the rows SQL's left-deep
evaluation of ``A JOIN B ON .. JOIN C ON ..`` gives over the current records, for every
combination of inner, left, right and full joins and both orientations of the second join."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from ampsclient_server_stub.views.config import JoinSpec
from ampsclient_server_stub.views.joins import JoinRows, Row

KINDS = ("INNER", "LEFT", "RIGHT", "FULL")


def specs(first: str, second: str, flipped: bool) -> list[JoinSpec]:
    """Topics 0 (a), 1 (b), 2 (c): ``[a].[/x] first [b].[/x]``, then ``[b].[/y] second [c].[/y]``
    (flipped: ``[c].[/y] second [b].[/y]``, the new topic on the left)."""
    one = JoinSpec("a", "/x", "b", "/x", first, 0, 1)
    if flipped:
        return [one, JoinSpec("c", "/y", "b", "/y", second, 2, 1)]
    return [one, JoinSpec("b", "/y", "c", "/y", second, 1, 2)]


def naive(joins: list[JoinSpec], docs: list[dict[str, Any]]) -> set[Row]:
    """Left-deep nested loops, as SQL defines outer joins."""

    def value(topic: int, key: str | None, path: str) -> Any:
        return None if key is None else docs[topic][key].get(path.strip("/"))

    first = joins[0].left_index
    rows: list[list[str | None]] = [
        [k if n == first else None for n in range(3)] for k in docs[first]
    ]
    placed = {first}
    for spec in joins:
        if spec.left_index in placed:
            acc, acc_path, new, new_path = (
                spec.left_index,
                spec.left_path,
                spec.right_index,
                spec.right_path,
            )
            keep_acc, keep_new = spec.kind in ("LEFT", "FULL"), spec.kind in ("RIGHT", "FULL")
        else:
            acc, acc_path, new, new_path = (
                spec.right_index,
                spec.right_path,
                spec.left_index,
                spec.left_path,
            )
            keep_acc, keep_new = spec.kind in ("RIGHT", "FULL"), spec.kind in ("LEFT", "FULL")
        out = []
        matched = set()
        for row in rows:
            mine = value(acc, row[acc], acc_path)
            partners = [
                k for k in docs[new] if mine is not None and value(new, k, new_path) == mine
            ]
            for k in partners:
                matched.add(k)
                out.append([k if n == new else row[n] for n in range(3)])
            if not partners and keep_acc:
                out.append(row)
        if keep_new:
            out += [
                [k if n == new else None for n in range(3)] for k in docs[new] if k not in matched
            ]
        rows = out
        placed.add(new)
    return {tuple(r) for r in rows if any(k is not None for k in r)}


@pytest.mark.parametrize(
    ("first", "second", "flipped"),
    [(f, s, flip) for f, s in itertools.product(KINDS, KINDS) for flip in (False, True)],
)
def test_incremental_rows_equal_a_plain_evaluation(first: str, second: str, flipped: bool) -> None:
    joins = specs(first, second, flipped)
    core = JoinRows(joins, ["json"] * 3)
    docs: list[dict[str, Any]] = [{}, {}, {}]
    rows: dict[Row, Any] = {}
    rng = random.Random(f"{first}{second}{flipped}")
    for _ in range(300):
        topic = rng.randrange(3)
        key = f"k{rng.randrange(5)}"
        if rng.random() < 0.25:
            doc = None
            docs[topic].pop(key, None)
        else:
            doc = {
                "x": rng.choice([1, 2, 3, None]),
                "y": rng.choice([1, 2, None]),
                "v": rng.random(),
            }
            docs[topic][key] = doc
        gone, now = core.change(topic, key, doc)
        for row in gone:
            del rows[row]
        rows.update(now)
        assert set(rows) == naive(joins, docs)
        for row, joined in now.items():  # the documents of the rows that changed are current
            assert joined == {str(n): docs[n][k] for n, k in enumerate(row) if k is not None}
