"""The syntax of the AMPS filter language: tokenizer, AST and Pratt parser.

``parse_filter`` turns the text of a filter or value expression into a tree of the node
classes below; ``parse_identifier`` reads one XPath-like identifier (``/a/b[0]``). Both
raise ``FilterError`` with the offset of the problem. The language itself is described in
``filters.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, Final

from ..errors import OptionError
from ..regexes import RegexError, SafeRegex, compile_regex
from .filter_functions import FUNCTION_ARITY, VOLATILE_FUNCTIONS
from .filter_values import Step, scalar, scalar_str

__all__ = [
    "BOOLEAN_NODES",
    "Affix",
    "Arith",
    "Between",
    "Binary",
    "Call",
    "Compare",
    "FilterError",
    "In",
    "IsNull",
    "Like",
    "Lit",
    "Logic",
    "Node",
    "Not",
    "Path",
    "Unary",
    "identifiers",
    "parse_filter",
    "parse_identifier",
]

_MAX_NESTING: Final = 100
"""Deepest recursion the parser accepts (parentheses, NOT, unary minus)."""
_MAX_AST_DEPTH: Final = 128
"""Deepest expression tree the parser builds (also bounds compiler and evaluation recursion)."""
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


def _scan_subscripts(text: str, i: int, steps: list[Step]) -> int:
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


def _scan_path(text: str, i: int) -> tuple[tuple[Step, ...], int]:
    """Scan ``/a/b[0]`` or ``[/any name]`` (plus subscripts and further ``/steps``)."""
    n = len(text)
    steps: list[Step] = []
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


class Node:
    __slots__ = ("const", "depth")

    def __init__(self, *children: Node, const: bool | None = None) -> None:
        self.depth: int = 1 + max((c.depth for c in children), default=0)
        self.const: bool = all(c.const for c in children) if const is None else const


class Lit(Node):
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        super().__init__(const=True)
        self.value = value


class Path(Node):
    __slots__ = ("steps",)

    def __init__(self, steps: tuple[Step, ...]) -> None:
        super().__init__(const=False)
        self.steps = steps


class Unary(Node):
    __slots__ = ("op", "operand")

    def __init__(self, op: str, operand: Node) -> None:
        super().__init__(operand)
        self.op = op
        self.operand = operand


class Not(Node):
    __slots__ = ("operand",)

    def __init__(self, operand: Node) -> None:
        super().__init__(operand)
        self.operand = operand


class Binary(Node):
    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: Node, right: Node) -> None:
        super().__init__(left, right)
        self.op = op
        self.left = left
        self.right = right


class Arith(Binary):
    __slots__ = ()


class Compare(Binary):
    __slots__ = ()


class Logic(Node):
    __slots__ = ("items", "op")

    def __init__(self, op: str, items: tuple[Node, ...]) -> None:
        super().__init__(*items)
        self.op = op
        self.items = items


class In(Node):
    __slots__ = ("items", "negated", "operand")

    def __init__(self, operand: Node, items: tuple[Node, ...], negated: bool) -> None:
        super().__init__(operand, *items)
        self.operand = operand
        self.items = items
        self.negated = negated


class Between(Node):
    __slots__ = ("high", "low", "negated", "operand")

    def __init__(self, operand: Node, low: Node, high: Node, negated: bool) -> None:
        super().__init__(operand, low, high)
        self.operand = operand
        self.low = low
        self.high = high
        self.negated = negated


class Like(Node):
    __slots__ = ("negated", "operand", "regex")

    def __init__(self, operand: Node, regex: SafeRegex | None, negated: bool) -> None:
        super().__init__(operand)
        self.operand = operand
        self.regex = regex
        self.negated = negated


class IsNull(Node):
    __slots__ = ("negated", "operand")

    def __init__(self, operand: Node, negated: bool) -> None:
        super().__init__(operand)
        self.operand = operand
        self.negated = negated


class Affix(Node):
    __slots__ = ("affixes", "begins", "negated", "operand")

    def __init__(
        self, operand: Node, affixes: tuple[str, ...], begins: bool, negated: bool
    ) -> None:
        super().__init__(operand)
        self.operand = operand
        self.affixes = affixes
        self.begins = begins
        self.negated = negated


class Call(Node):
    __slots__ = ("args", "name")

    def __init__(self, name: str, args: tuple[Node, ...]) -> None:
        super().__init__(*args, const=False if name in VOLATILE_FUNCTIONS else None)
        self.name = name
        self.args = args


BOOLEAN_NODES: Final = (Compare, Logic, Not, In, Between, Like, IsNull, Affix)
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


def _compile_regex(pattern: str, pos: int) -> SafeRegex:
    """Compile a LIKE pattern (AMPS' PCRE syntax, matched in bounded time) or raise."""
    try:
        return compile_regex(pattern)
    except RegexError as exc:
        raise FilterError(f"invalid LIKE pattern {pattern!r}: {exc}", pos) from None


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

    def node(self, node: Node, pos: int) -> Node:
        if node.depth > _MAX_AST_DEPTH:
            raise FilterError("expression nested too deeply", pos)
        return node

    # -- grammar -------------------------------------------------------
    def parse(self) -> Node:
        if self.peek().kind == _EOF:
            raise FilterError("empty filter", 0)
        result = self.expr(0)
        tok = self.peek()
        if tok.kind != _EOF:
            raise FilterError(f"unexpected {tok.describe()}", tok.pos)
        return result

    def expr(self, min_bp: int) -> Node:
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

    def prefix(self) -> Node:
        tok = self.advance()
        kind = tok.kind
        if kind == _NUM:
            return Lit(tok.value)
        if kind == _STR:
            return Lit(tok.value if tok.value else None)  # '' is NULL
        if kind == _PATH:
            return Path(tok.value)
        if kind == _OPR:
            if tok.value == "(":
                inner = self.expr(0)
                self.expect_op(")")
                return inner
            if tok.value in ("-", "+"):
                operand = self.expr(_BP_UNARY)
                if isinstance(operand, Lit) and type(operand.value) in (int, float):
                    return Lit(-operand.value if tok.value == "-" else operand.value)
                return self.node(Unary(tok.value, operand), tok.pos)
        elif kind == _WORD:
            word = tok.value
            if word == "NOT":
                return self.node(Not(self.expr(_BP_NOT)), tok.pos)
            if word in _LITERAL_WORDS:
                return Lit(True if word == "TRUE" else False if word == "FALSE" else None)
            if self.is_op("("):
                return self.call(tok)
            raise FilterError(f"unknown identifier {tok.text!r} (fields start with '/')", tok.pos)
        raise FilterError(f"unexpected {tok.describe()}", tok.pos)

    def call(self, tok: _Token) -> Node:
        name = tok.value
        arity = FUNCTION_ARITY.get(name)
        if arity is None:
            raise FilterError(f"unknown function {tok.text}()", tok.pos)
        self.expect_op("(")
        args: list[Node] = []
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
        return self.node(Call(name, tuple(args)), tok.pos)

    def infix(self, left: Node, bp: int) -> Node:
        tok = self.advance()
        pos = tok.pos
        if tok.kind == _OPR:
            if tok.value in _CMP_OPS:
                return self.node(Compare(_CMP_OPS[tok.value], left, self.expr(bp)), pos)
            return self.node(Arith(tok.value, left, self.expr(bp)), pos)
        word = tok.value
        if word in ("AND", "OR"):
            right = self.expr(bp)
            items = (
                (*left.items, right)
                if isinstance(left, Logic) and left.op == word
                else (left, right)
            )
            return self.node(Logic(word, items), pos)
        if word == "MOD":
            return self.node(Arith("%", left, self.expr(bp)), pos)
        if word == "IS":
            negated = self.is_word("NOT")
            if negated:
                self.advance()
            self.expect_word("NULL")
            return self.node(IsNull(left, negated), pos)
        negated = word == "NOT"
        if negated:
            word = self.advance().value
        if word == "IN":
            return self.node(In(left, tuple(self.paren_list()), negated), pos)
        if word == "BETWEEN":
            low = self.expr(_BP_CMP)
            self.expect_word("AND")
            high = self.expr(_BP_CMP)
            return self.node(Between(left, low, high, negated), pos)
        if word == "LIKE":
            pat = self.advance()
            if pat.kind != _STR:
                raise FilterError("LIKE needs a string literal pattern", pat.pos)
            regex = _compile_regex(pat.value, pat.pos) if pat.value else None
            return self.node(Like(left, regex, negated), pos)
        # BEGINS WITH / ENDS WITH
        self.expect_word("WITH")
        affixes: list[str] = []
        for item in self.affix_list():
            s = scalar_str(scalar(item))
            if s is not None:
                affixes.append(s)
        return self.node(Affix(left, tuple(affixes), word == "BEGINS", negated), pos)

    def paren_list(self) -> list[Node]:
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


def parse_filter(text: str) -> Node:
    """Parse a filter or value expression into its tree.

    Args:
        text: The expression, e.g. ``/x > 10 AND /sym = 'IBM'``.

    Returns:
        The root node; its ``depth`` is at most 128.

    Raises:
        FilterError: The text is empty or does not parse, names an unknown function, calls
            one with the wrong number of arguments, has an invalid LIKE pattern or nests too
            deeply.
    """
    return _Parser(text).parse()


@functools.lru_cache(maxsize=1024)
def parse_identifier(path: str) -> tuple[Step, ...]:
    """The steps of one identifier such as ``/a/b/c``, ``/data[0]`` or ``[/odd name]``.

    Raises:
        FilterError: ``path`` is not exactly one identifier.
    """
    tokens = _tokenize(path.strip())
    if len(tokens) != 2 or tokens[0].kind != _PATH:
        raise FilterError(f"not an identifier: {path!r}")
    steps: tuple[Step, ...] = tokens[0].value
    return steps


def identifiers(node: Node) -> Iterator[tuple[Step, ...]]:
    """The steps of every identifier in the tree ``node`` (depth first, repeats kept)."""
    if isinstance(node, Path):
        yield node.steps
        return
    for cls in type(node).__mro__:
        for name in getattr(cls, "__slots__", ()):
            value = getattr(node, name, None)
            children = value if isinstance(value, tuple | list) else (value,)
            for child in children:
                if isinstance(child, Node):
                    yield from identifiers(child)
