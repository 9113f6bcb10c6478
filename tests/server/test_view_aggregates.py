"""The aggregate functions of views (``views.aggregates``): an :class:`Accumulator` that values
come into and leave gives what a fresh computation over the values left gives."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient_server_stub.views.aggregates import AGGREGATES, Accumulator, aggregate

VALUES = st.one_of(
    st.none(),
    st.integers(-1000, 1000),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 3)),
    st.sampled_from(["a", "b", "zz", "10"]),
)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(AGGREGATES), st.lists(VALUES, max_size=30), st.data())
def test_adding_and_removing_matches_a_fresh_computation(
    fn: str, values: list[Any], data: st.DataObject
) -> None:
    acc = Accumulator(fn)
    for value in values:
        acc.add(value)
    gone = data.draw(st.lists(st.sampled_from(values), unique_by=id) if values else st.just([]))
    left = list(values)
    for value in gone:
        acc.remove(value)
        left.remove(value)
    expected = aggregate(fn, left)
    got = acc.result()
    if fn == "ANY":
        assert (got is None) == all(v is None for v in left)
    elif isinstance(expected, float) and isinstance(got, float):
        assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    else:
        assert got == expected


def test_the_documented_rules() -> None:
    values = [10, None, 25, 10]
    assert aggregate("COUNT", values) == 3  # NULL is not counted
    assert aggregate("SUM", values) == 45 and isinstance(aggregate("SUM", values), int)
    assert aggregate("AVG", values) == 15.0
    assert aggregate("COUNT_DISTINCT", values) == 2
    assert aggregate("MIN", [3, "a", 2.5]) == 2.5  # numbers sort before strings
    assert aggregate("MAX", [3, "a", "B"]) == "a"  # ASCII order
    assert aggregate("SUM", [None]) is None and aggregate("COUNT", []) == 0
    assert aggregate("STDDEV_POP", [2, 4, 4, 4, 5, 5, 7, 9]) == 2.0
    assert aggregate("STDDEV_SAMP", [1, 2, 3, 4]) == pytest.approx(statistics.stdev([1, 2, 3, 4]))
    assert aggregate("STDDEV_SAMP", [1]) is None
    assert aggregate("SUM", [0.5, 0.25]) == 0.75
