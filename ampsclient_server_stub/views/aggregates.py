"""AMPS aggregate functions, for views (over queues and SOW topics) and aggregated
subscriptions.

AMPS User Guide, "Aggregate Functions"
(https://docs.crankuptheamps.com/amps-user-guide/amps-functions/aggregate_functions): each
function takes one value per message of a group; ``NULL`` values are left out (``COUNT``
counts non-null values, ``SUM``/``AVG`` add and average the non-null ones, ``MIN``/``MAX``
ignore ``NULL``); ``MIN``/``MAX`` compare numbers numerically, strings in ASCII order, and a
string is greater than a number (so ``MIN`` prefers numbers, ``MAX`` strings).

:func:`aggregate` computes one function over a list of values (queue views recompute their
groups); :class:`Accumulator` keeps one function's state as values come and go, so a view
over a SOW topic updates a group in constant time (``SUM``/``AVG``/``STDDEV_*`` keep exact
running totals as scaled integers, ``MIN``/``MAX`` rescan only when the current extreme leaves).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import Any, Final

__all__ = ["AGGREGATES", "Accumulator", "aggregate"]

AGGREGATES: Final = (
    "ANY",
    "AVG",
    "COUNT",
    "COUNT_DISTINCT",
    "MAX",
    "MIN",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "SUM",
)
"""The aggregate functions a projected field may use."""


def _number(value: Any) -> int | float | None:
    """``value`` as a number (numeric strings convert, as AMPS' arithmetic does)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _hashable(value: Any) -> Hashable:
    if isinstance(value, list | dict):
        return repr(value)
    return value  # type: ignore[no-any-return]


def _order(value: Any) -> tuple[int, Any]:
    """MIN/MAX order: numbers before strings (a string is greater than a number)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


_SCALE: Final = 1074
"""Numbers are summed exactly as integers in units of 2**-1074 (the smallest float step)."""
_ONE: Final = 1 << _SCALE
_DISTINCT: Final = frozenset({"ANY", "COUNT_DISTINCT", "MIN", "MAX"})
_SUMS: Final = frozenset({"SUM", "AVG", "STDDEV_POP", "STDDEV_SAMP"})
_PLAIN: Final = frozenset({str, int, float})  # values that are their own Counter key


def _scaled(number: int | float) -> int:
    if isinstance(number, int):
        return number << _SCALE
    n, d = number.as_integer_ratio()
    return n << (_SCALE - d.bit_length() + 1)


class Accumulator:
    """One aggregate function's state over a group's values (``add``/``remove`` a value)."""

    __slots__ = (
        "_count",
        "_extreme",
        "_floats",
        "_fn",
        "_n",
        "_sq",
        "_sq_too",
        "_sums",
        "_total",
        "_values",
    )

    def __init__(self, fn: str) -> None:
        if fn not in AGGREGATES:
            raise ValueError(f"unknown aggregate function {fn!r}")
        self._fn = fn
        self._count = 0  # non-null values
        self._values: Counter[Hashable] | None = Counter() if fn in _DISTINCT else None
        self._n = 0  # numeric values
        self._total = 0  # their exact sum, scaled
        self._sq = 0  # the exact sum of their squares, scaled twice (STDDEV_* only)
        self._floats = 0  # numeric values that were floats (the result is then a float)
        self._extreme: Any = _UNSET
        self._sums = fn in _SUMS
        self._sq_too = fn.startswith("STDDEV")

    def add(self, value: Any) -> None:
        if value is None:
            return
        self._count += 1
        values = self._values
        if values is not None:
            values[value if type(value) in _PLAIN else _hashable(value)] += 1
            extreme = self._extreme
            if extreme is not _UNSET and self._better(value, extreme):
                self._extreme = value
        elif self._sums:
            kind = type(value)
            if kind is int:
                self._n += 1
                self._total += value << _SCALE
                if self._sq_too:
                    self._sq += (value << _SCALE) ** 2
            else:
                self._numeric(value, 1)

    def remove(self, value: Any) -> None:
        if value is None:
            return
        self._count -= 1
        values = self._values
        if values is not None:
            key = value if type(value) in _PLAIN else _hashable(value)
            left = values[key] - 1
            if left > 0:
                values[key] = left
            else:
                del values[key]
                if self._extreme is not _UNSET and _hashable(self._extreme) == key:
                    self._extreme = _UNSET  # rescanned on the next result()
        elif self._sums:
            self._numeric(value, -1)

    def _numeric(self, value: Any, sign: int) -> None:
        number = _number(value)
        if number is None or (isinstance(number, float) and not math.isfinite(number)):
            return
        scaled = _scaled(number)
        self._n += sign
        if sign > 0:
            self._total += scaled
        else:
            self._total -= scaled
        if self._sq_too:
            self._sq += sign * scaled * scaled
        if isinstance(number, float):
            self._floats += sign

    def _better(self, value: Any, than: Any) -> bool:
        if type(value) is type(than) and type(value) in _PLAIN:
            return value < than if self._fn == "MIN" else self._fn == "MAX" and value > than
        if self._fn == "MIN":
            return _order(value) < _order(than)
        if self._fn == "MAX":
            return _order(value) > _order(than)
        return False

    def result(self) -> Any:
        """The function's value now (``None``: NULL)."""
        fn = self._fn
        if fn == "COUNT":
            return self._count
        values = self._values
        if values is not None:
            if fn == "COUNT_DISTINCT":
                return len(values)
            if not values:
                return None
            if fn == "ANY":
                return next(iter(values))
            if self._extreme is _UNSET:
                pick = min if fn == "MIN" else max
                self._extreme = pick(values, key=_order)
            return self._extreme
        if self._n == 0:
            return None
        if fn == "SUM":
            if self._floats:
                return self._total / _ONE  # (int / int: correctly rounded)
            if self._total & (_ONE - 1):  # (a numeric string with a fraction)
                return self._total / _ONE
            return self._total >> _SCALE
        if fn == "AVG":
            return self._total / (self._n << _SCALE)
        total = Fraction(self._total, _ONE)
        mean = total / self._n
        variance = Fraction(self._sq, 1 << (2 * _SCALE)) / self._n - mean * mean
        if fn == "STDDEV_SAMP":
            if self._n < 2:
                return None
            variance = variance * self._n / (self._n - 1)
        return math.sqrt(float(variance))


_UNSET: Final = object()


def aggregate(fn: str, values: Sequence[Any]) -> Any:
    """``fn`` over ``values`` (``NULL`` values left out)."""
    acc = Accumulator(fn)
    for value in values:
        acc.add(value)
    return acc.result()
