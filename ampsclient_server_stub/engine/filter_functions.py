"""The functions of the AMPS filter language (``UPPER``, ``SUBSTR``, ``ROUND``, ...).

``FUNCTION_ARITY`` is the table the parser checks calls against; ``compile_call`` turns a
call into an evaluator once its arguments are compiled. ``IF`` is not here: it needs a
predicate, so the compiler builds it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Final

from .filter_values import (
    Eval,
    as_num,
    as_text,
    ascii_lower,
    ascii_upper,
    constant,
    first_scalar,
)

__all__ = [
    "FUNCTION_ARITY",
    "VOLATILE_FUNCTIONS",
    "char_value",
    "compile_call",
    "round_half_up",
    "substr_chars",
]

FUNCTION_ARITY: Final[dict[str, tuple[int, int | None]]] = {
    "IF": (3, 3),
    "UPPER": (1, 1),
    "LOWER": (1, 1),
    "INSTR": (2, 2),
    "INSTR_I": (2, 2),
    "STREQUAL_I": (2, 2),
    "SUBSTR": (2, 3),
    "REVERSE": (1, 1),
    "CONCAT": (1, None),
    "UNIX_TIMESTAMP": (0, 0),
    "COALESCE": (1, None),
    "LENGTH": (1, 1),
    "LEN": (1, 1),
    "ABS": (1, 1),
    "ROUND": (1, 2),
    "TRUE_VALUE": (0, 0),
    "FALSE_VALUE": (0, 0),
    "NAN_VALUE": (0, 0),
    "CHAR_VALUE": (1, 1),
}
"""Function name -> (least arguments, most arguments or None for variadic)."""
VOLATILE_FUNCTIONS: Final = frozenset({"UNIX_TIMESTAMP"})
"""Functions whose value changes between calls: a call to one is never constant-folded."""


def round_half_up(x: int | float, digits: int) -> int | float | None:
    """ROUND half away from zero."""
    if isinstance(x, int):
        if digits >= 0:
            return x
        if digits < -400:
            return 0
        q: int = 10 ** (-digits)
        r = (abs(x) + q // 2) // q * q
        return -r if x < 0 else r
    if not math.isfinite(x) or digits > 30:
        return x
    digits = max(digits, -400)
    try:
        d = Decimal(repr(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
        return float(d)
    except (InvalidOperation, ValueError, OverflowError):
        return x


def substr_chars(s: str, start: int | float, length: int | float | None) -> str | None:
    try:
        st = int(start)
        ln = None if length is None else int(length)
    except (ValueError, OverflowError):
        return None
    if st > 0:
        begin = st - 1
    elif st < 0:
        begin = max(len(s) + st, 0)
    else:
        return None
    if ln is None:
        out = s[begin:]
    elif ln <= 0:
        return None
    else:
        out = s[begin : begin + ln]
    return out if out else None


def char_value(n: int | float | None) -> str | None:
    if n is None:
        return None
    try:
        code = int(n)
    except (ValueError, OverflowError):
        return None
    return chr(code) if 0 < code <= 0x10FFFF else None


def compile_call(name: str, fs: Sequence[Eval]) -> Eval:
    """Evaluator of a call to function ``name`` (any but ``IF``) with compiled arguments ``fs``.

    Args:
        name: The upper-cased function name, a key of ``FUNCTION_ARITY``.
        fs: The compiled arguments, already checked against the arity table.

    Returns:
        An evaluator that never raises: a NULL or non-numeric argument gives NULL.
    """
    if name == "COALESCE":

        def coalesce(d: Any) -> Any:
            for f in fs:
                v = first_scalar(f(d))
                if v is not None:
                    return v
            return None

        return coalesce
    if name == "CONCAT":

        def concat(d: Any) -> str | None:
            out = "".join(as_text(f(d)) or "" for f in fs)
            return out if out else None

        return concat
    if name == "UNIX_TIMESTAMP":
        return lambda _d: time.time()
    if name == "TRUE_VALUE":
        return constant(True)
    if name == "FALSE_VALUE":
        return constant(False)
    if name == "NAN_VALUE":
        return constant(math.nan)
    if name == "CHAR_VALUE":
        arg = fs[0]
        return lambda d: char_value(as_num(arg(d)))
    if name in ("ABS", "ROUND"):
        return _numeric_call(name, fs)
    return _string_call(name, fs)


def _numeric_call(name: str, fs: Sequence[Eval]) -> Eval:
    x_f = fs[0]
    if name == "ABS":

        def abs_(d: Any) -> Any:
            n = as_num(x_f(d))
            return None if n is None else abs(n)

        return abs_
    digits_f = fs[1] if len(fs) > 1 else constant(0)

    def round_(d: Any) -> Any:
        n = as_num(x_f(d))
        digits = as_num(digits_f(d))
        if n is None or digits is None:
            return None
        try:
            return round_half_up(n, int(digits))
        except (ValueError, OverflowError):
            return None

    return round_


def _string_call(name: str, fs: Sequence[Eval]) -> Eval:
    s_f = fs[0]
    if name in ("UPPER", "LOWER", "REVERSE", "LENGTH", "LEN"):
        conv: Callable[[str], Any] = {
            "UPPER": ascii_upper,
            "LOWER": ascii_lower,
            "REVERSE": lambda s: s[::-1],
            "LENGTH": lambda s: len(s.encode("utf-8", "surrogatepass")),
            "LEN": lambda s: len(s.encode("utf-8", "surrogatepass")),
        }[name]

        def str1(d: Any) -> Any:
            s = as_text(s_f(d))
            return None if s is None else conv(s)

        return str1
    if name == "SUBSTR":
        start_f = fs[1]
        len_f = fs[2] if len(fs) > 2 else None

        def substr(d: Any) -> str | None:
            s = as_text(s_f(d))
            start = as_num(start_f(d))
            if s is None or start is None:
                return None
            length = None
            if len_f is not None:
                length = as_num(len_f(d))
                if length is None:
                    return None
            return substr_chars(s, start, length)

        return substr
    # INSTR, INSTR_I, STREQUAL_I: two string arguments
    b_f = fs[1]
    fold = name != "INSTR"

    def str2(d: Any) -> int | None:
        a = as_text(s_f(d))
        b = as_text(b_f(d))
        if a is None or b is None:
            return None
        if fold:
            a, b = ascii_lower(a), ascii_lower(b)
        if name == "STREQUAL_I":
            return 1 if a == b else 0
        return a.find(b) + 1

    return str2
