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

The engine is four modules under this facade: ``filter_values`` (the value model above),
``filter_syntax`` (tokenizer, AST, parser, ``FilterError``), ``filter_functions`` (the
function table) and ``filter_compile`` (tree to closures, with the fast paths).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .filter_compile import Compiler
from .filter_syntax import FilterError, parse_filter, parse_identifier
from .filter_values import Eval, Predicate, walk_steps

__all__ = ["FilterError", "Predicate", "compile_expression", "compile_filter", "get_path"]


def _build(expression: str, *, predicate: bool) -> Any:
    """Parse and compile; a stack overflow (deep caller stack) is reported as a FilterError."""
    try:
        node = parse_filter(expression)
        compiler = Compiler()
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
    evaluator: Eval = _build(expression, predicate=False)
    return evaluator


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
    steps = parse_identifier(path)
    if len(steps) == 1 and type(doc) is dict:
        return doc.get(steps[0])
    return walk_steps(doc, steps)
