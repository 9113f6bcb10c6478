"""Values of the AMPS filter language: normalisation, coercion and comparison helpers.

The value model is described in ``filters.py``. Every helper here is total: it never
raises, a type mismatch or a missing field gives None (NULL) or False, as AMPS says.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "Bool3",
    "Eval",
    "Op",
    "Predicate",
    "Step",
    "as_num",
    "as_text",
    "ascii_lower",
    "ascii_upper",
    "cmp_right",
    "cmp_scalar",
    "compare_any",
    "constant",
    "each_scalar",
    "first_scalar",
    "is_null_value",
    "negate3",
    "parse_num",
    "scalar",
    "scalar_str",
    "truth3",
    "walk_steps",
]

Predicate = Callable[[Any], bool]
"""A compiled filter: takes a parsed payload, returns True when the message matches."""

Eval = Callable[[Any], Any]
"""A compiled value expression: takes a parsed payload, returns an AMPS value."""
Bool3 = Callable[[Any], "bool | None"]
"""A compiled three-valued expression (True, False or None for unknown)."""
Op = Callable[[Any, Any], bool]
"""A binary comparison such as ``operator.lt``."""
Step = str | int
"""One step of an identifier: a field name or an array subscript."""

_NUM_RE: Final = re.compile(
    r"[+-]?(?:[0-9]+(?P<frac>\.[0-9]*)?|(?P<frac2>\.[0-9]+))(?P<exp>[eE][+-]?[0-9]+)?"
)


def parse_num(s: str) -> int | float | None:
    """Number spelled by ``s`` (ASCII decimal, optional sign/fraction/exponent), else None."""
    m = _NUM_RE.fullmatch(s)
    if m is None:
        return None
    try:
        if m.group("frac") is None and m.group("frac2") is None and m.group("exp") is None:
            return int(s)
        return float(s)
    except ValueError:  # more digits than int() accepts: fall back to float
        try:
            return float(s)
        except ValueError:
            return None


def scalar(v: Any) -> Any:
    """Normalise one value: '' and compound values (dict/list/other) become None."""
    t = type(v)
    if t is str:
        return v if v else None
    if t is int or t is float or t is bool or v is None:
        return v
    if t is bytes or t is bytearray:
        s = bytes(v).decode("utf-8", "replace")
        return s if s else None
    if isinstance(v, str):
        return str(v) if v else None
    if isinstance(v, int | float):
        return v
    return None


def first_scalar(v: Any) -> Any:
    """First element of an array (None when empty), or the value itself; then normalised."""
    if type(v) is list:
        return scalar(v[0]) if v else None
    return scalar(v)


def as_num(v: Any) -> int | float | None:
    """Numeric view of a value (first element of an array), or None."""
    t = type(v)
    if t is int or t is float:
        return v  # type: ignore[no-any-return]
    v = first_scalar(v)
    if v is None:
        return None
    if isinstance(v, str):
        return parse_num(v)
    if isinstance(v, bool):
        return int(v)
    return v  # type: ignore[no-any-return]


def scalar_str(v: Any) -> str | None:
    """Text view of an already-normalised scalar."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    try:
        return str(v)
    except ValueError:  # int too long for str()
        return None


def as_text(v: Any) -> str | None:
    """Text view of a value (first element of an array), or None for NULL."""
    t = type(v)
    if t is str:
        return v if v else None
    return scalar_str(first_scalar(v))


def truth3(v: Any) -> bool | None:
    """Three-valued truth of an arbitrary value (TRUE is 1, FALSE is 0)."""
    if v is True or v is False:
        return v
    v = first_scalar(v)
    if v is None:
        return None
    if isinstance(v, str):
        n = parse_num(v)
        if n is None:
            low = v.lower()
            if low == "true":
                return True
            if low == "false":
                return False
            return None
        return n != 0
    return bool(v != 0)


def is_null_value(v: Any) -> bool:
    """``IS NULL``: None, empty string/bytes and empty arrays are NULL; objects are not."""
    if v is None:
        return True
    t = type(v)
    if t is str or t is list or t is bytes or t is bytearray:
        return not v
    return False


def negate3(r: bool | None) -> bool | None:
    """SQL NOT: unknown stays unknown."""
    return None if r is None else not r


def cmp_scalar(a: Any, b: Any, op: Op) -> bool | None:
    """Compare two normalised scalars with AMPS coercion (spec 1.4)."""
    if a is None or b is None:
        return None
    sa = type(a) is str
    sb = type(b) is str
    if sa is sb:
        return op(a, b)
    if sa:
        n = parse_num(a)
        # A non-numeric string compares greater than any number.
        return op(1, 0) if n is None else op(n, b)
    n = parse_num(b)
    return op(0, 1) if n is None else op(a, n)


def cmp_right(a: Any, b: Any, op: Op) -> bool | None:
    """Compare normalised scalar ``a`` with ``b``, which may be an array."""
    if type(b) is list:
        if not b:
            return None
        res: bool | None = False
        for y in b:
            r = cmp_scalar(a, scalar(y), op)
            if r is True:
                return True
            if r is None:
                res = None
        return res
    return cmp_scalar(a, scalar(b), op)


def compare_any(a: Any, b: Any, op: Op) -> bool | None:
    """Array-aware comparison: true when any pair of elements satisfies ``op``."""
    if type(a) is list:
        if not a:
            return None
        res: bool | None = False
        for x in a:
            r = cmp_right(scalar(x), b, op)
            if r is True:
                return True
            if r is None:
                res = None
        return res
    return cmp_right(scalar(a), b, op)


def each_scalar(v: Any, test: Callable[[Any], bool | None]) -> bool | None:
    """Apply a per-scalar test to a value or to every element of an array (any-semantics)."""
    if type(v) is list:
        if not v:
            return None
        res: bool | None = False
        for x in v:
            r = test(scalar(x))
            if r is True:
                return True
            if r is None:
                res = None
        return res
    return test(scalar(v))


def walk_steps(doc: Any, steps: tuple[Step, ...]) -> Any:
    """Follow parsed identifier steps through dicts and lists (iterative, never raises)."""
    cur = doc
    for step in steps:
        if type(step) is int:
            if isinstance(cur, list):
                cur = cur[step] if step < len(cur) else None
            elif step != 0:  # a single value is a one-element sequence
                cur = None
        elif isinstance(cur, dict):
            cur = cur.get(step)
        elif isinstance(cur, list):
            out: list[Any] = []
            for elem in cur:
                if isinstance(elem, dict):
                    val = elem.get(step)
                    if isinstance(val, list):
                        out.extend(val)
                    elif val is not None:
                        out.append(val)
            cur = out if out else None
        else:
            cur = None
        if cur is None:
            return None
    return cur


def ascii_lower(s: str) -> str:
    return s.lower() if s.isascii() else s.translate(_LOWER_TABLE)


def ascii_upper(s: str) -> str:
    return s.upper() if s.isascii() else s.translate(_UPPER_TABLE)


_LOWER_TABLE: Final = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_UPPER_TABLE: Final = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def constant(value: Any) -> Eval:
    """An evaluator that ignores the payload and returns ``value``."""

    def f(_d: Any) -> Any:
        return value

    return f
