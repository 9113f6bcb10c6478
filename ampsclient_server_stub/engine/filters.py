"""AMPS content-filter expressions: tokenizer, Pratt parser and closure compiler.

The language is "XPath identifiers + SQL-92 WHERE predicates" as described in
``amps-semantics.md`` section 1. An expression is parsed once into a small AST which
is then compiled into nested Python closures (never ``eval``); evaluating a compiled
filter is a handful of function calls on the already-parsed message payload.

Value model (what a closure sees and returns):

* ``None`` is NULL. A missing field, JSON ``null`` and the empty string are all NULL.
* ``bool``, ``int``, ``float`` and ``str`` are the scalar types; ``bytes`` from msgpack
  are read as UTF-8 text. Objects (dicts) are compound values and behave as NULL in
  every operator except ``IS NULL`` (they are not NULL).
* Lists are arrays: comparisons, ``IN``, ``BETWEEN``, ``LIKE`` and ``BEGINS/ENDS WITH``
  are true when *any* element satisfies them; arithmetic and functions use the first
  element; an empty array is NULL.
* Logical results are three-valued: ``True``, ``False`` or ``None`` (unknown). A
  filter matches only when its final value is ``True``.

Choices made where the spec says UNCONFIRMED (kept in one place so they can be
revisited): ``TRUE``/``FALSE``/``NULL`` keywords are literals; string literals accept
``\\'``, ``\\"``, ``\\\\``, ``\\xHH`` and a doubled quote, any other backslash is kept
verbatim (so regular-expression escapes such as ``\\d`` or ``\\1`` survive); ``/`` is
true division with a float result; ``NOT IN``/``NOT LIKE``/``NOT BETWEEN``/``NOT BEGINS
WITH`` are the negation of the positive form (so on an array they mean "no element");
two strings compare by code point (= UTF-8 byte order); ``LENGTH`` counts UTF-8 bytes
while ``INSTR``/``SUBSTR`` count characters; a step through an array without a
subscript (``/orders/qty`` with ``orders`` a list of objects) collects the values of
every element, XPath style.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import time
import warnings
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Final

from ..errors import OptionError

__all__ = ["FilterError", "Predicate", "compile_expression", "compile_filter", "get_path"]

Predicate = Callable[[Any], bool]
"""A compiled filter: takes a parsed payload, returns True when the message matches."""

_Eval = Callable[[Any], Any]
_Bool3 = Callable[[Any], "bool | None"]
_Op = Callable[[Any, Any], bool]
_Step = str | int

_MAX_NESTING: Final = 100
"""Deepest recursion the parser accepts (parentheses, NOT, unary minus)."""
_MAX_AST_DEPTH: Final = 128
"""Deepest expression tree the compiler accepts (also bounds evaluation recursion)."""
_MAX_UINT64: Final = 2**64 - 1


class FilterError(OptionError):
    """A filter that does not parse or type-check.

    ``str(exc)`` is a human-readable detail; the server replies with reason ``bad filter``.

    Attributes:
        detail: The message without the position suffix.
        position: Character offset in the expression where the problem was found, if known.
    """

    def __init__(self, detail: str, position: int | None = None) -> None:
        """Build the error.

        Args:
            detail: What is wrong.
            position: Offset in the expression text, or None when not applicable.
        """
        super().__init__(detail if position is None else f"{detail} (at offset {position})")
        self.detail = detail
        """The message without the position suffix."""
        self.position = position
        """Character offset of the problem, or None."""


# ---------------------------------------------------------------------------
# Value helpers (never raise)
# ---------------------------------------------------------------------------

_NUM_RE: Final = re.compile(
    r"[+-]?(?:[0-9]+(?P<frac>\.[0-9]*)?|(?P<frac2>\.[0-9]+))(?P<exp>[eE][+-]?[0-9]+)?"
)


def _parse_num(s: str) -> int | float | None:
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


def _scalar(v: Any) -> Any:
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


def _first(v: Any) -> Any:
    """First element of an array (None when empty), or the value itself; then normalised."""
    if type(v) is list:
        return _scalar(v[0]) if v else None
    return _scalar(v)


def _num(v: Any) -> int | float | None:
    """Numeric view of a value (first element of an array), or None."""
    t = type(v)
    if t is int or t is float:
        return v  # type: ignore[no-any-return]
    v = _first(v)
    if v is None:
        return None
    if isinstance(v, str):
        return _parse_num(v)
    if isinstance(v, bool):
        return int(v)
    return v  # type: ignore[no-any-return]


def _scalar_str(v: Any) -> str | None:
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


def _str(v: Any) -> str | None:
    """Text view of a value (first element of an array), or None for NULL."""
    t = type(v)
    if t is str:
        return v if v else None
    return _scalar_str(_first(v))


def _truth(v: Any) -> bool | None:
    """Three-valued truth of an arbitrary value (TRUE is 1, FALSE is 0)."""
    if v is True or v is False:
        return v
    v = _first(v)
    if v is None:
        return None
    if isinstance(v, str):
        n = _parse_num(v)
        if n is None:
            low = v.lower()
            if low == "true":
                return True
            if low == "false":
                return False
            return None
        return n != 0
    return bool(v != 0)


def _is_null(v: Any) -> bool:
    """``IS NULL``: None, empty string/bytes and empty arrays are NULL; objects are not."""
    if v is None:
        return True
    t = type(v)
    if t is str or t is list or t is bytes or t is bytearray:
        return not v
    return False


def _not3(r: bool | None) -> bool | None:
    """SQL NOT: unknown stays unknown."""
    return None if r is None else not r


def _cmp_scalar(a: Any, b: Any, op: _Op) -> bool | None:
    """Compare two normalised scalars with AMPS coercion (spec 1.4)."""
    if a is None or b is None:
        return None
    sa = type(a) is str
    sb = type(b) is str
    if sa is sb:
        return op(a, b)
    if sa:
        n = _parse_num(a)
        # A non-numeric string compares greater than any number.
        return op(1, 0) if n is None else op(n, b)
    n = _parse_num(b)
    return op(0, 1) if n is None else op(a, n)


def _cmp_right(a: Any, b: Any, op: _Op) -> bool | None:
    """Compare normalised scalar ``a`` with ``b``, which may be an array."""
    if type(b) is list:
        if not b:
            return None
        res: bool | None = False
        for y in b:
            r = _cmp_scalar(a, _scalar(y), op)
            if r is True:
                return True
            if r is None:
                res = None
        return res
    return _cmp_scalar(a, _scalar(b), op)


def _compare(a: Any, b: Any, op: _Op) -> bool | None:
    """Array-aware comparison: true when any pair of elements satisfies ``op``."""
    if type(a) is list:
        if not a:
            return None
        res: bool | None = False
        for x in a:
            r = _cmp_right(_scalar(x), b, op)
            if r is True:
                return True
            if r is None:
                res = None
        return res
    return _cmp_right(_scalar(a), b, op)


def _each(v: Any, test: Callable[[Any], bool | None]) -> bool | None:
    """Apply a per-scalar test to a value or to every element of an array (any-semantics)."""
    if type(v) is list:
        if not v:
            return None
        res: bool | None = False
        for x in v:
            r = test(_scalar(x))
            if r is True:
                return True
            if r is None:
                res = None
        return res
    return test(_scalar(v))


def _walk(doc: Any, steps: tuple[_Step, ...]) -> Any:
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


def _ascii_lower(s: str) -> str:
    return s.lower() if s.isascii() else s.translate(_LOWER_TABLE)


def _ascii_upper(s: str) -> str:
    return s.upper() if s.isascii() else s.translate(_UPPER_TABLE)


_LOWER_TABLE: Final = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_UPPER_TABLE: Final = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------

_NUM = "number"
_STR = "string"
_PATH = "identifier"
_WORD = "word"
_OPR = "operator"
_EOF = "end of filter"


class _Token:
    __slots__ = ("kind", "pos", "text", "value")

    def __init__(self, kind: str, value: Any, pos: int, text: str) -> None:
        self.kind = kind
        self.value = value
        self.pos = pos
        self.text = text

    def describe(self) -> str:
        return "end of filter" if self.kind == _EOF else repr(self.text)


_TWO_CHAR_OPS: Final = frozenset({"==", "!=", "<>", "<=", ">="})
_ONE_CHAR_OPS: Final = frozenset("=<>+-*/%(),")
_LITERAL_WORDS: Final = frozenset({"TRUE", "FALSE", "NULL"})


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


def _is_step_start(c: str) -> bool:
    return c.isalnum() or c in "_@"


def _is_step_char(c: str) -> bool:
    return c.isalnum() or c in "_-."


def _is_word_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or c == "_" or _is_digit(c)


def _after_operand(tokens: list[_Token]) -> bool:
    """True when a '/' here is the division operator rather than the start of a path."""
    if not tokens:
        return False
    last = tokens[-1]
    if last.kind in (_NUM, _STR, _PATH):
        return True
    if last.kind == _OPR:
        return bool(last.value == ")")
    return last.kind == _WORD and last.value in _LITERAL_WORDS


def _scan_string(text: str, i: int) -> tuple[str, int]:
    quote = text[i]
    n = len(text)
    j = i + 1
    buf: list[str] = []
    while j < n:
        c = text[j]
        if c == quote:
            if j + 1 < n and text[j + 1] == quote:  # SQL-style doubled quote
                buf.append(quote)
                j += 2
                continue
            return "".join(buf), j + 1
        if c == "\\" and j + 1 < n:
            e = text[j + 1]
            if e in "'\"\\":
                buf.append(e)
                j += 2
                continue
            if (
                e in "xX"
                and j + 3 < n
                and all(h in "0123456789abcdefABCDEF" for h in text[j + 2 : j + 4])
            ):
                buf.append(chr(int(text[j + 2 : j + 4], 16)))
                j += 4
                continue
            # Any other escape is kept verbatim for the regular-expression engine.
        buf.append(c)
        j += 1
    raise FilterError("unterminated string literal", i)


def _scan_number(text: str, i: int) -> tuple[int | float, int]:
    n = len(text)
    j = i
    is_float = False
    while j < n and _is_digit(text[j]):
        j += 1
    if j < n and text[j] == ".":
        is_float = True
        j += 1
        while j < n and _is_digit(text[j]):
            j += 1
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        if k < n and _is_digit(text[k]):
            is_float = True
            j = k
            while j < n and _is_digit(text[j]):
                j += 1
    if j < n and (_is_word_char(text[j]) or text[j] == "." or text[j].isalnum()):
        raise FilterError(f"malformed number {text[i : j + 1]!r}", i)
    lit = text[i:j]
    if is_float:
        return float(lit), j
    if len(lit) > 20 or int(lit) > _MAX_UINT64:
        raise FilterError(f"integer literal {lit} does not fit in 64 bits", i)
    return int(lit), j


def _scan_subscripts(text: str, i: int, steps: list[_Step]) -> int:
    n = len(text)
    while i < n and text[i] == "[":
        j = k = i + 1
        while k < n and _is_digit(text[k]):
            k += 1
        if k == j or k >= n or text[k] != "]":
            raise FilterError("array subscript must be a non-negative integer in [ ]", i)
        if k - j > 18:
            raise FilterError("array subscript too large", i)
        steps.append(int(text[j:k]))
        i = k + 1
    return i


def _scan_path(text: str, i: int) -> tuple[tuple[_Step, ...], int]:
    """Scan ``/a/b[0]`` or ``[/any name]`` (plus subscripts and further ``/steps``)."""
    n = len(text)
    steps: list[_Step] = []
    if text[i] == "[":
        end = text.find("]", i)
        if end < 0 or i + 1 >= n or text[i + 1] != "/":
            raise FilterError("bracketed identifier must look like [/name]", i)
        for part in text[i + 2 : end].split("/"):
            if not part:
                raise FilterError("empty step in bracketed identifier", i)
            steps.append(part)
        i = _scan_subscripts(text, end + 1, steps)
        if not (i + 1 < n and text[i] == "/" and _is_step_start(text[i + 1])):
            return tuple(steps), i
    while True:
        j = i + 1
        if j >= n or not _is_step_start(text[j]):
            raise FilterError("expected a field name after '/'", i)
        k = j + 1
        while k < n and _is_step_char(text[k]):
            k += 1
        steps.append(text[j:k])
        i = _scan_subscripts(text, k, steps)
        if i + 1 < n and text[i] == "/" and _is_step_start(text[i + 1]):
            continue
        return tuple(steps), i


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        start = i
        kind: str
        value: Any
        if c in "'\"":
            kind = _STR
            value, i = _scan_string(text, i)
        elif _is_digit(c) or (c == "." and i + 1 < n and _is_digit(text[i + 1])):
            kind = _NUM
            value, i = _scan_number(text, i)
        elif c == "[" or (c == "/" and not _after_operand(tokens)):
            kind = _PATH
            value, i = _scan_path(text, i)
        elif _is_word_char(c):
            j = i + 1
            while j < n and _is_word_char(text[j]):
                j += 1
            kind = _WORD
            value = text[i:j].upper()
            i = j
        elif text[i : i + 2] in _TWO_CHAR_OPS:
            kind = _OPR
            value = text[i : i + 2]
            i += 2
        elif c in _ONE_CHAR_OPS:
            kind = _OPR
            value = c
            i += 1
        else:
            raise FilterError(f"unexpected character {c!r}", i)
        tokens.append(_Token(kind, value, start, text[start:i]))
    tokens.append(_Token(_EOF, None, n, ""))
    return tokens


# ---------------------------------------------------------------------------
# AST
# ---------------------------------------------------------------------------


class _Node:
    __slots__ = ("const", "depth")

    def __init__(self, *children: _Node, const: bool | None = None) -> None:
        self.depth: int = 1 + max((c.depth for c in children), default=0)
        self.const: bool = all(c.const for c in children) if const is None else const


class _Lit(_Node):
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        super().__init__(const=True)
        self.value = value


class _Path(_Node):
    __slots__ = ("steps",)

    def __init__(self, steps: tuple[_Step, ...]) -> None:
        super().__init__(const=False)
        self.steps = steps


class _Unary(_Node):
    __slots__ = ("op", "operand")

    def __init__(self, op: str, operand: _Node) -> None:
        super().__init__(operand)
        self.op = op
        self.operand = operand


class _Not(_Node):
    __slots__ = ("operand",)

    def __init__(self, operand: _Node) -> None:
        super().__init__(operand)
        self.operand = operand


class _Binary(_Node):
    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: _Node, right: _Node) -> None:
        super().__init__(left, right)
        self.op = op
        self.left = left
        self.right = right


class _Arith(_Binary):
    __slots__ = ()


class _Compare(_Binary):
    __slots__ = ()


class _Logic(_Node):
    __slots__ = ("items", "op")

    def __init__(self, op: str, items: tuple[_Node, ...]) -> None:
        super().__init__(*items)
        self.op = op
        self.items = items


class _In(_Node):
    __slots__ = ("items", "negated", "operand")

    def __init__(self, operand: _Node, items: tuple[_Node, ...], negated: bool) -> None:
        super().__init__(operand, *items)
        self.operand = operand
        self.items = items
        self.negated = negated


class _Between(_Node):
    __slots__ = ("high", "low", "negated", "operand")

    def __init__(self, operand: _Node, low: _Node, high: _Node, negated: bool) -> None:
        super().__init__(operand, low, high)
        self.operand = operand
        self.low = low
        self.high = high
        self.negated = negated


class _Like(_Node):
    __slots__ = ("negated", "operand", "regex")

    def __init__(self, operand: _Node, regex: re.Pattern[str] | None, negated: bool) -> None:
        super().__init__(operand)
        self.operand = operand
        self.regex = regex
        self.negated = negated


class _IsNull(_Node):
    __slots__ = ("negated", "operand")

    def __init__(self, operand: _Node, negated: bool) -> None:
        super().__init__(operand)
        self.operand = operand
        self.negated = negated


class _Affix(_Node):
    __slots__ = ("affixes", "begins", "negated", "operand")

    def __init__(
        self, operand: _Node, affixes: tuple[str, ...], begins: bool, negated: bool
    ) -> None:
        super().__init__(operand)
        self.operand = operand
        self.affixes = affixes
        self.begins = begins
        self.negated = negated


class _Call(_Node):
    __slots__ = ("args", "name")

    def __init__(self, name: str, args: tuple[_Node, ...]) -> None:
        super().__init__(*args, const=False if name in _VOLATILE else None)
        self.name = name
        self.args = args


_BOOLEAN_NODES: Final = (_Compare, _Logic, _Not, _In, _Between, _Like, _IsNull, _Affix)
"""Node types whose value is already three-valued (True/False/None)."""


# ---------------------------------------------------------------------------
# Parser (Pratt)
# ---------------------------------------------------------------------------

_BP_OR: Final = 10
_BP_AND: Final = 20
_BP_NOT: Final = 30
_BP_CMP: Final = 40
_BP_ADD: Final = 50
_BP_MUL: Final = 60
_BP_UNARY: Final = 70

_CMP_OPS: Final = {
    "=": "=",
    "==": "=",
    "!=": "!=",
    "<>": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
}
_NEGATABLE: Final = frozenset({"IN", "LIKE", "BETWEEN", "BEGINS", "ENDS"})
_WORD_BP: Final = {
    "OR": _BP_OR,
    "AND": _BP_AND,
    "IN": _BP_CMP,
    "LIKE": _BP_CMP,
    "BETWEEN": _BP_CMP,
    "IS": _BP_CMP,
    "BEGINS": _BP_CMP,
    "ENDS": _BP_CMP,
    "MOD": _BP_MUL,
}

# name -> (min args, max args or None for variadic)
_FUNCTIONS: Final[dict[str, tuple[int, int | None]]] = {
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
_VOLATILE: Final = frozenset({"UNIX_TIMESTAMP"})


def _compile_regex(pattern: str, pos: int) -> re.Pattern[str]:
    """Compile a LIKE pattern (PCRE-ish, case-sensitive, not Unicode-aware) or raise."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(pattern, re.ASCII)
    except Exception as exc:  # re.error, OverflowError, RecursionError...: all mean 'bad'
        raise FilterError(f"invalid LIKE pattern {pattern!r}: {exc}", pos) from exc


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.i = 0
        self.nesting = 0

    # -- token helpers -------------------------------------------------
    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        tok = self.tokens[self.i]
        if tok.kind != _EOF:
            self.i += 1
        return tok

    def is_op(self, value: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == _OPR and tok.value == value

    def is_word(self, value: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == _WORD and tok.value == value

    def expect_op(self, value: str) -> None:
        tok = self.advance()
        if tok.kind != _OPR or tok.value != value:
            raise FilterError(f"expected {value!r} but found {tok.describe()}", tok.pos)

    def expect_word(self, value: str) -> None:
        tok = self.advance()
        if tok.kind != _WORD or tok.value != value:
            raise FilterError(f"expected {value} but found {tok.describe()}", tok.pos)

    def node(self, node: _Node, pos: int) -> _Node:
        if node.depth > _MAX_AST_DEPTH:
            raise FilterError("expression nested too deeply", pos)
        return node

    # -- grammar -------------------------------------------------------
    def parse(self) -> _Node:
        if self.peek().kind == _EOF:
            raise FilterError("empty filter", 0)
        result = self.expr(0)
        tok = self.peek()
        if tok.kind != _EOF:
            raise FilterError(f"unexpected {tok.describe()}", tok.pos)
        return result

    def expr(self, min_bp: int) -> _Node:
        self.nesting += 1
        if self.nesting > _MAX_NESTING:
            raise FilterError("expression nested too deeply", self.peek().pos)
        try:
            left = self.prefix()
            while True:
                bp = self.infix_bp()
                if bp <= min_bp:
                    return left
                left = self.infix(left, bp)
        finally:
            self.nesting -= 1

    def infix_bp(self) -> int:
        tok = self.peek()
        if tok.kind == _OPR:
            if tok.value in _CMP_OPS:
                return _BP_CMP
            if tok.value in ("+", "-"):
                return _BP_ADD
            if tok.value in ("*", "/", "%"):
                return _BP_MUL
            return 0
        if tok.kind == _WORD:
            if tok.value == "NOT":
                nxt = self.peek(1)
                return _BP_CMP if nxt.kind == _WORD and nxt.value in _NEGATABLE else 0
            return _WORD_BP.get(tok.value, 0)
        return 0

    def prefix(self) -> _Node:
        tok = self.advance()
        kind = tok.kind
        if kind == _NUM:
            return _Lit(tok.value)
        if kind == _STR:
            return _Lit(tok.value if tok.value else None)  # '' is NULL
        if kind == _PATH:
            return _Path(tok.value)
        if kind == _OPR:
            if tok.value == "(":
                inner = self.expr(0)
                self.expect_op(")")
                return inner
            if tok.value in ("-", "+"):
                operand = self.expr(_BP_UNARY)
                if isinstance(operand, _Lit) and type(operand.value) in (int, float):
                    return _Lit(-operand.value if tok.value == "-" else operand.value)
                return self.node(_Unary(tok.value, operand), tok.pos)
        elif kind == _WORD:
            word = tok.value
            if word == "NOT":
                return self.node(_Not(self.expr(_BP_NOT)), tok.pos)
            if word in _LITERAL_WORDS:
                return _Lit(True if word == "TRUE" else False if word == "FALSE" else None)
            if self.is_op("("):
                return self.call(tok)
            raise FilterError(f"unknown identifier {tok.text!r} (fields start with '/')", tok.pos)
        raise FilterError(f"unexpected {tok.describe()}", tok.pos)

    def call(self, tok: _Token) -> _Node:
        name = tok.value
        arity = _FUNCTIONS.get(name)
        if arity is None:
            raise FilterError(f"unknown function {tok.text}()", tok.pos)
        self.expect_op("(")
        args: list[_Node] = []
        if not self.is_op(")"):
            args.append(self.expr(0))
            while self.is_op(","):
                self.advance()
                args.append(self.expr(0))
        self.expect_op(")")
        lo, hi = arity
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = str(lo) if lo == hi else f"{lo}+" if hi is None else f"{lo} to {hi}"
            raise FilterError(f"{name}() takes {want} argument(s), {len(args)} given", tok.pos)
        return self.node(_Call(name, tuple(args)), tok.pos)

    def infix(self, left: _Node, bp: int) -> _Node:
        tok = self.advance()
        pos = tok.pos
        if tok.kind == _OPR:
            if tok.value in _CMP_OPS:
                return self.node(_Compare(_CMP_OPS[tok.value], left, self.expr(bp)), pos)
            return self.node(_Arith(tok.value, left, self.expr(bp)), pos)
        word = tok.value
        if word in ("AND", "OR"):
            right = self.expr(bp)
            items = (
                (*left.items, right)
                if isinstance(left, _Logic) and left.op == word
                else (left, right)
            )
            return self.node(_Logic(word, items), pos)
        if word == "MOD":
            return self.node(_Arith("%", left, self.expr(bp)), pos)
        if word == "IS":
            negated = self.is_word("NOT")
            if negated:
                self.advance()
            self.expect_word("NULL")
            return self.node(_IsNull(left, negated), pos)
        negated = word == "NOT"
        if negated:
            word = self.advance().value
        if word == "IN":
            return self.node(_In(left, tuple(self.paren_list()), negated), pos)
        if word == "BETWEEN":
            low = self.expr(_BP_CMP)
            self.expect_word("AND")
            high = self.expr(_BP_CMP)
            return self.node(_Between(left, low, high, negated), pos)
        if word == "LIKE":
            pat = self.advance()
            if pat.kind != _STR:
                raise FilterError("LIKE needs a string literal pattern", pat.pos)
            regex = _compile_regex(pat.value, pat.pos) if pat.value else None
            return self.node(_Like(left, regex, negated), pos)
        # BEGINS WITH / ENDS WITH
        self.expect_word("WITH")
        affixes: list[str] = []
        for item in self.affix_list():
            s = _scalar_str(_scalar(item))
            if s is not None:
                affixes.append(s)
        return self.node(_Affix(left, tuple(affixes), word == "BEGINS", negated), pos)

    def paren_list(self) -> list[_Node]:
        self.expect_op("(")
        items = [self.expr(0)]
        while self.is_op(","):
            self.advance()
            items.append(self.expr(0))
        self.expect_op(")")
        return items

    def affix_list(self) -> list[Any]:
        def literal() -> Any:
            tok = self.advance()
            if tok.kind not in (_STR, _NUM):
                raise FilterError("BEGINS/ENDS WITH takes literal values", tok.pos)
            return tok.value

        if not self.is_op("("):
            return [literal()]
        self.advance()
        values = [literal()]
        while self.is_op(","):
            self.advance()
            values.append(literal())
        self.expect_op(")")
        return values


# ---------------------------------------------------------------------------
# Compiler: AST -> closures
# ---------------------------------------------------------------------------

_OPS: Final[dict[str, _Op]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_MIRROR: Final = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _div(a: int | float, b: int | float) -> float | None:
    return None if b == 0 else a / b


def _mod(a: int | float, b: int | float) -> int | float | None:
    """Remainder with the sign of the left operand (``-5 % 3 = -2``, ``5 % -3 = 2``)."""
    if b == 0:
        return None
    if type(a) is int and type(b) is int:
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return math.fmod(a, b)


_ARITH: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _div,
    "%": _mod,
}


def _const(value: Any) -> _Eval:
    def f(_d: Any) -> Any:
        return value

    return f


def _const_pred(value: bool) -> Predicate:
    def f(_d: Any) -> bool:
        return value

    return f


def _path_getter(steps: tuple[_Step, ...]) -> _Eval:
    if len(steps) == 1 and type(steps[0]) is str:
        key = steps[0]
        walk = _walk

        def get1(d: Any) -> Any:
            if type(d) is dict:
                return d.get(key)
            return walk(d, steps)

        return get1
    if all(type(s) is str for s in steps):
        count = len(steps)

        def getn(d: Any) -> Any:
            v = d
            for i in range(count):
                if type(v) is dict:
                    v = v.get(steps[i])
                else:
                    return _walk(v, steps[i:]) if v is not None else None
            return v

        return getn

    def get(d: Any) -> Any:
        return _walk(d, steps)

    return get


def _round(x: int | float, digits: int) -> int | float | None:
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


def _substr(s: str, start: int | float, length: int | float | None) -> str | None:
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


def _char_value(n: int | float | None) -> str | None:
    if n is None:
        return None
    try:
        code = int(n)
    except (ValueError, OverflowError):
        return None
    return chr(code) if 0 < code <= 0x10FFFF else None


class _Compiler:
    """Turns an AST into closures; ``value`` gives AMPS values, ``pred`` gives matches."""

    # -- entry points ----------------------------------------------------
    def value(self, node: _Node) -> _Eval:
        if node.const and not isinstance(node, _Lit):
            return _const(self._value(node)(None))
        return self._value(node)

    def bool3(self, node: _Node) -> _Bool3:
        """Three-valued truth of a node."""
        f = self.value(node)
        if isinstance(node, _BOOLEAN_NODES) or (
            isinstance(node, _Lit) and (node.value is None or isinstance(node.value, bool))
        ):
            return f

        def truth(d: Any) -> bool | None:
            return _truth(f(d))

        return truth

    def pred(self, node: _Node) -> Predicate:
        """Two-valued 'matches' (TRUE only); NULL and FALSE both mean no match."""
        if node.const:
            return _const_pred(_truth(self.value(node)(None)) is True)
        if isinstance(node, _Logic):
            return self._logic_pred(node)
        if isinstance(node, _Not):
            f = self.bool3(node.operand)

            def not_pred(d: Any) -> bool:
                return f(d) is False

            return not_pred
        if isinstance(node, _Compare):
            return self._compare(node, pred=True)
        g = self.bool3(node)

        def is_true(d: Any) -> bool:
            return g(d) is True

        return is_true

    # -- node kinds ----------------------------------------------------------
    def _value(self, node: _Node) -> _Eval:
        if isinstance(node, _Lit):
            return _const(node.value)
        if isinstance(node, _Path):
            return _path_getter(node.steps)
        if isinstance(node, _Compare):
            return self._compare(node, pred=False)
        if isinstance(node, _Logic):
            return self._logic3(node)
        if isinstance(node, _Not):
            f = self.bool3(node.operand)

            def not3(d: Any) -> bool | None:
                r = f(d)
                return None if r is None else not r

            return not3
        if isinstance(node, _Arith):
            return self._arith(node)
        if isinstance(node, _Unary):
            return self._unary(node)
        if isinstance(node, _In):
            return self._in(node)
        if isinstance(node, _Between):
            return self._between(node)
        if isinstance(node, _Like):
            return self._like(node)
        if isinstance(node, _IsNull):
            return self._is_null(node)
        if isinstance(node, _Affix):
            return self._affix(node)
        if isinstance(node, _Call):
            return self._call(node)
        raise AssertionError(f"unknown node {node!r}")  # pragma: no cover

    def _compare(self, node: _Compare, *, pred: bool) -> _Eval:
        op_name, left, right = node.op, node.left, node.right
        if isinstance(left, _Lit) and not isinstance(right, _Lit):
            op_name, left, right = _MIRROR[op_name], right, left
        op = _OPS[op_name]
        compare = _compare
        if isinstance(right, _Lit):
            c = right.value
            if c is None:  # comparison with NULL is never true
                return _const(False if pred else None)
            get = self.value(left)
            if type(c) is int or type(c) is float:
                if pred:
                    return self._fast_num_pred(left, get, c, op)

                def num3(d: Any) -> bool | None:
                    v = get(d)
                    t = type(v)
                    if t is int or t is float:
                        return op(v, c)
                    return compare(v, c, op)

                return num3
            if type(c) is str:
                if pred:
                    return self._fast_str_pred(left, get, c, op)

                def str3(d: Any) -> bool | None:
                    v = get(d)
                    if type(v) is str and v:
                        return op(v, c)
                    return compare(v, c, op)

                return str3
            if pred:

                def lit_pred(d: Any) -> bool:
                    return compare(get(d), c, op) is True

                return lit_pred

            def lit3(d: Any) -> bool | None:
                return compare(get(d), c, op)

            return lit3
        lf = self.value(left)
        rf = self.value(right)
        if pred:

            def gen_pred(d: Any) -> bool:
                return compare(lf(d), rf(d), op) is True

            return gen_pred

        def gen3(d: Any) -> bool | None:
            return compare(lf(d), rf(d), op)

        return gen3

    @staticmethod
    def _fast_num_pred(left: _Node, get: _Eval, c: int | float, op: _Op) -> Predicate:
        compare = _compare
        if isinstance(left, _Path) and len(left.steps) == 1 and type(left.steps[0]) is str:
            key = left.steps[0]

            def key_num(d: Any) -> bool:
                v = d.get(key) if type(d) is dict else get(d)
                t = type(v)
                if t is int or t is float:
                    return op(v, c)
                return compare(v, c, op) is True

            return key_num

        def get_num(d: Any) -> bool:
            v = get(d)
            t = type(v)
            if t is int or t is float:
                return op(v, c)
            return compare(v, c, op) is True

        return get_num

    @staticmethod
    def _fast_str_pred(left: _Node, get: _Eval, c: str, op: _Op) -> Predicate:
        compare = _compare
        if isinstance(left, _Path) and len(left.steps) == 1 and type(left.steps[0]) is str:
            key = left.steps[0]
            if op is operator.eq:

                def key_eq(d: Any) -> bool:
                    v = d.get(key) if type(d) is dict else get(d)
                    if type(v) is str:
                        return v == c
                    return compare(v, c, op) is True

                return key_eq

            def key_str(d: Any) -> bool:
                v = d.get(key) if type(d) is dict else get(d)
                if type(v) is str and v:
                    return op(v, c)
                return compare(v, c, op) is True

            return key_str

        def get_str(d: Any) -> bool:
            v = get(d)
            if type(v) is str and v:
                return op(v, c)
            return compare(v, c, op) is True

        return get_str

    def _logic_pred(self, node: _Logic) -> Predicate:
        preds = [self.pred(item) for item in node.items]
        if node.op == "AND":
            if len(preds) == 2:
                a, b = preds

                def and2(d: Any) -> bool:
                    return a(d) and b(d)

                return and2

            def and_n(d: Any) -> bool:
                for p in preds:  # noqa: SIM110 - a loop beats all(<genexpr>) here
                    if not p(d):
                        return False
                return True

            return and_n
        if len(preds) == 2:
            a, b = preds

            def or2(d: Any) -> bool:
                return a(d) or b(d)

            return or2

        def or_n(d: Any) -> bool:
            for p in preds:  # noqa: SIM110 - a loop beats any(<genexpr>) here
                if p(d):
                    return True
            return False

        return or_n

    def _logic3(self, node: _Logic) -> _Eval:
        fs = [self.bool3(item) for item in node.items]
        if node.op == "AND":

            def and3(d: Any) -> bool | None:
                res: bool | None = True
                for f in fs:
                    r = f(d)
                    if r is False:
                        return False
                    if r is None:
                        res = None
                return res

            return and3

        def or3(d: Any) -> bool | None:
            res: bool | None = False
            for f in fs:
                r = f(d)
                if r is True:
                    return True
                if r is None:
                    res = None
            return res

        return or3

    def _arith(self, node: _Arith) -> _Eval:
        fn = _ARITH[node.op]
        lf = self.value(node.left)
        rf = self.value(node.right)

        def arith(d: Any) -> Any:
            a = _num(lf(d))
            if a is None:
                return None
            b = _num(rf(d))
            if b is None:
                return None
            try:
                return fn(a, b)
            except (ArithmeticError, ValueError):
                return None

        return arith

    def _unary(self, node: _Unary) -> _Eval:
        f = self.value(node.operand)
        negate = node.op == "-"

        def unary(d: Any) -> Any:
            n = _num(f(d))
            if n is None:
                return None
            return -n if negate else n

        return unary

    def _in(self, node: _In) -> _Eval:
        get = self.value(node.operand)
        negated = node.negated
        if all(item.const for item in node.items):
            consts = [_first(self.value(item)(None)) for item in node.items]
            has_null = any(v is None for v in consts)
            strs = frozenset(v for v in consts if isinstance(v, str))
            nums = frozenset(v for v in consts if v is not None and not isinstance(v, str))
            str_nums = frozenset(n for n in map(_parse_num, strs) if n is not None)
            miss: bool | None = None if has_null else False

            def member(x: Any) -> bool | None:
                if x is None:
                    return None
                if type(x) is str:
                    if x in strs:
                        return True
                    if nums:
                        n = _parse_num(x)
                        if n is not None and n == n and n in nums:
                            return True
                elif x == x and (x in nums or x in str_nums):
                    return True
                return miss

            test = member
        else:
            item_fns = [self.value(item) for item in node.items]

            def in_generic(d: Any) -> bool | None:
                values = [g(d) for g in item_fns]

                def member_of(x: Any) -> bool | None:
                    res: bool | None = False
                    for y in values:
                        r = _cmp_right(x, y, operator.eq)
                        if r is True:
                            return True
                        if r is None:
                            res = None
                    return res

                r = _each(get(d), member_of)
                return _not3(r) if negated else r

            return in_generic

        if negated:

            def not_in(d: Any) -> bool | None:
                r = _each(get(d), test)
                return None if r is None else not r

            return not_in

        def in_(d: Any) -> bool | None:
            return _each(get(d), test)

        return in_

    def _between(self, node: _Between) -> _Eval:
        get = self.value(node.operand)
        lo_f = self.value(node.low)
        hi_f = self.value(node.high)
        negated = node.negated
        ge, le = operator.ge, operator.le

        def between(d: Any) -> bool | None:
            lo = _first(lo_f(d))
            hi = _first(hi_f(d))

            def test(x: Any) -> bool | None:
                a = _cmp_scalar(x, lo, ge)
                if a is False:
                    return False
                b = _cmp_scalar(x, hi, le)
                if b is False:
                    return False
                return True if a is True and b is True else None

            r = _each(get(d), test)
            return _not3(r) if negated else r

        return between

    def _like(self, node: _Like) -> _Eval:
        if node.regex is None:  # LIKE '' : the pattern is NULL
            return _const(None)
        get = self.value(node.operand)
        search = node.regex.search
        negated = node.negated

        def test(x: Any) -> bool | None:
            s = _scalar_str(x)
            return None if s is None else search(s) is not None

        def like(d: Any) -> bool | None:
            v = get(d)
            if type(v) is str and v:
                r: bool | None = search(v) is not None
            else:
                r = _each(v, test)
            return _not3(r) if negated else r

        return like

    def _is_null(self, node: _IsNull) -> _Eval:
        get = self.value(node.operand)
        if node.negated:

            def is_not_null(d: Any) -> bool:
                return not _is_null(get(d))

            return is_not_null

        def is_null(d: Any) -> bool:
            return _is_null(get(d))

        return is_null

    def _affix(self, node: _Affix) -> _Eval:
        get = self.value(node.operand)
        affixes = node.affixes
        negated = node.negated
        if not affixes:
            return _const(None)

        def test(x: Any) -> bool | None:
            s = _scalar_str(x)
            if s is None:
                return None
            return s.startswith(affixes) if node.begins else s.endswith(affixes)

        def affix(d: Any) -> bool | None:
            r = _each(get(d), test)
            return _not3(r) if negated else r

        return affix

    def _call(self, node: _Call) -> _Eval:
        name = node.name
        if name == "IF":
            cond = self.pred(node.args[0])
            then_f = self.value(node.args[1])
            else_f = self.value(node.args[2])

            def if_(d: Any) -> Any:
                return then_f(d) if cond(d) else else_f(d)

            return if_
        fs = [self.value(a) for a in node.args]
        if name == "COALESCE":

            def coalesce(d: Any) -> Any:
                for f in fs:
                    v = _first(f(d))
                    if v is not None:
                        return v
                return None

            return coalesce
        if name == "CONCAT":

            def concat(d: Any) -> str | None:
                out = "".join(_str(f(d)) or "" for f in fs)
                return out if out else None

            return concat
        if name == "UNIX_TIMESTAMP":
            return lambda _d: time.time()
        if name == "TRUE_VALUE":
            return _const(True)
        if name == "FALSE_VALUE":
            return _const(False)
        if name == "NAN_VALUE":
            return _const(math.nan)
        if name == "CHAR_VALUE":
            arg = fs[0]
            return lambda d: _char_value(_num(arg(d)))
        if name in ("ABS", "ROUND"):
            return self._numeric_call(name, fs)
        return self._string_call(name, fs)

    @staticmethod
    def _numeric_call(name: str, fs: Sequence[_Eval]) -> _Eval:
        x_f = fs[0]
        if name == "ABS":

            def abs_(d: Any) -> Any:
                n = _num(x_f(d))
                return None if n is None else abs(n)

            return abs_
        digits_f = fs[1] if len(fs) > 1 else _const(0)

        def round_(d: Any) -> Any:
            n = _num(x_f(d))
            digits = _num(digits_f(d))
            if n is None or digits is None:
                return None
            try:
                return _round(n, int(digits))
            except (ValueError, OverflowError):
                return None

        return round_

    @staticmethod
    def _string_call(name: str, fs: Sequence[_Eval]) -> _Eval:
        s_f = fs[0]
        if name in ("UPPER", "LOWER", "REVERSE", "LENGTH", "LEN"):
            conv: Callable[[str], Any] = {
                "UPPER": _ascii_upper,
                "LOWER": _ascii_lower,
                "REVERSE": lambda s: s[::-1],
                "LENGTH": lambda s: len(s.encode("utf-8", "surrogatepass")),
                "LEN": lambda s: len(s.encode("utf-8", "surrogatepass")),
            }[name]

            def str1(d: Any) -> Any:
                s = _str(s_f(d))
                return None if s is None else conv(s)

            return str1
        if name == "SUBSTR":
            start_f = fs[1]
            len_f = fs[2] if len(fs) > 2 else None

            def substr(d: Any) -> str | None:
                s = _str(s_f(d))
                start = _num(start_f(d))
                if s is None or start is None:
                    return None
                length = None
                if len_f is not None:
                    length = _num(len_f(d))
                    if length is None:
                        return None
                return _substr(s, start, length)

            return substr
        # INSTR, INSTR_I, STREQUAL_I: two string arguments
        b_f = fs[1]
        fold = name != "INSTR"

        def str2(d: Any) -> int | None:
            a = _str(s_f(d))
            b = _str(b_f(d))
            if a is None or b is None:
                return None
            if fold:
                a, b = _ascii_lower(a), _ascii_lower(b)
            if name == "STREQUAL_I":
                return 1 if a == b else 0
            return a.find(b) + 1

        return str2


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _build(expression: str, *, predicate: bool) -> Any:
    """Parse and compile; a stack overflow (deep caller stack) is reported as a FilterError."""
    try:
        node = _Parser(expression).parse()
        compiler = _Compiler()
        return compiler.pred(node) if predicate else compiler.value(node)
    except RecursionError as exc:
        raise FilterError("expression nested too deeply") from exc


@functools.lru_cache(maxsize=1024)
def compile_filter(expression: str) -> Predicate:
    """Compile an AMPS filter expression once (results are cached).

    Args:
        expression: The filter text, e.g. ``/x > 10 AND /sym = 'IBM'``.

    Returns:
        A callable taking the parsed message payload (a dict from ``json.loads`` or
        ``msgpack.unpackb``, possibly nested, or any non-dict value) and returning True
        when the message matches. It never raises: type mismatches and missing fields
        follow AMPS NULL semantics.

    Raises:
        FilterError: The expression is empty, does not parse, names an unknown function
            or has an invalid LIKE pattern.
    """
    predicate: Predicate = _build(expression, predicate=True)
    return predicate


@functools.lru_cache(maxsize=1024)
def compile_expression(expression: str) -> Callable[[Any], Any]:
    """Compile a value expression (not a predicate), e.g. ``/qty * /price``.

    Args:
        expression: The expression text.

    Returns:
        A callable taking the parsed payload and returning the AMPS value: None for
        NULL, a bool for comparisons/logic, a number or a string; an identifier returns
        the raw field value (lists and dicts included). It never raises.

    Raises:
        FilterError: The expression does not parse.
    """
    evaluator: _Eval = _build(expression, predicate=False)
    return evaluator


@functools.lru_cache(maxsize=1024)
def _parse_identifier(path: str) -> tuple[_Step, ...]:
    tokens = _tokenize(path.strip())
    if len(tokens) != 2 or tokens[0].kind != _PATH:
        raise FilterError(f"not an identifier: {path!r}")
    steps: tuple[_Step, ...] = tokens[0].value
    return steps


def get_path(doc: Any, path: str) -> Any:
    """Value at an AMPS XPath-like identifier such as ``/a/b/c`` or ``/data[0]``.

    Args:
        doc: The parsed payload.
        path: The identifier.

    Returns:
        The raw value found there (dicts and lists included; stepping through an array
        without a subscript collects the values of every element), or None when absent.

    Raises:
        FilterError: ``path`` is not a valid identifier.
    """
    steps = _parse_identifier(path)
    if len(steps) == 1 and type(doc) is dict:
        return doc.get(steps[0])
    return _walk(doc, steps)
