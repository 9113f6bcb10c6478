"""Hash indexes over a SOW topic's records (AMPS User Guide, "Indexing SOW Topics",
https://docs.crankuptheamps.com/amps-user-guide/sow/sow_indexing).

A hash index covers a set of fields (XPath identifiers). AMPS uses one only for a filter that
is exact matches (``=``) or ``IN`` lists of *literal strings* over exactly the index's fields,
joined by ``AND``; anything else (another operator or function, a numeric literal, an extra
condition, a field left out) is answered by scanning the records. :func:`equality_plan` reads a
filter that way; :meth:`HashIndex.candidates` gives the records that can match it.

An index narrows the records the filter is evaluated on; it never decides a match: the query
still runs the filter over the candidates. So a query gives the same records in the same order
with and without an index. For that, the candidates are a superset of the matches under this
server's comparison rules: a field's value is indexed under every spelling a string literal
may equal, its text and, when the text is a number (or the value is one), that number
(``'5'`` equals ``5``, ``5.0`` and ``'5'``); an array under each of its elements.

Pure data structures, no I/O; :class:`~.sow.SowTopic` keeps its indexes current.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from .filter_syntax import (
    Compare,
    FilterError,
    In,
    Lit,
    Logic,
    Node,
    Path,
    parse_filter,
    parse_identifier as _parse_identifier,
)
from .filter_values import Step, parse_num, scalar
from .filters import compile_expression

__all__ = ["HashIndex", "IndexPlan", "equality_plan", "index_steps"]

MAX_ENTRIES: Final = 256
"""A record whose indexed fields hold arrays spelling more combinations than this is kept out
of the buckets and given to every lookup (the filter decides for it)."""

Token = tuple[str, Any]
"""One spelling of a scalar: ``("s", text)`` or ``("n", number)``."""

IndexPlan = dict[tuple[Step, ...], frozenset[str]]
"""Per identifier of a filter, the literal strings it must equal (one of)."""


def index_steps(path: str) -> tuple[Step, ...]:
    """The steps of the identifier ``path`` of a hash index.

    Raises:
        ValueError: ``path`` is not one XPath identifier (the message names it).
    """
    try:
        return _parse_identifier(path)
    except FilterError as exc:
        raise ValueError(f"invalid XPath {path!r}: {exc}") from None


_NUMBER_START: Final = frozenset("0123456789+-.")


def _literal_tokens(text: str) -> tuple[Token, ...]:
    number = parse_num(text) if text[:1] in _NUMBER_START else None
    return (("s", text),) if number is None else (("s", text), ("n", number))


def _value_tokens(value: Any) -> set[Token]:
    """Every spelling a string literal equal to ``value`` can have (none for NULL)."""
    t = type(value)
    if t is int or t is float:  # the common cases first
        return {("n", value)} if value == value else set()
    if t is str and value:
        return set(_literal_tokens(value))
    out: set[Token] = set()
    for item in value if t is list else (value,):
        if type(item) is str and not item:
            out.add(("s", ""))  # '' = '' holds for a top-level field
            continue
        v = scalar(item)
        if v is None:
            continue
        if type(v) is str:
            out.update(_literal_tokens(v))
        elif v == v:  # a number or a boolean (NaN equals nothing)
            out.add(("n", v))
    return out


class HashIndex:
    """A hash index over ``paths`` (in the order configured).

    :param paths: the indexed identifiers, e.g. ``("/address/postalCode", "/customerType")``.
    :param automatic: the index AMPS creates over the SOW key fields (listed as such).

    Raises:
        ValueError: no path, a path that is not one identifier, a path given twice.
    """

    def __init__(self, paths: Sequence[str], *, automatic: bool = False) -> None:
        if isinstance(paths, str):
            raise TypeError("paths must be a sequence of identifiers, not a string")
        if not paths:
            raise ValueError("a hash index needs at least one <Key>")
        steps = tuple(index_steps(p) for p in paths)
        if len(set(steps)) != len(steps):
            raise ValueError(f"a hash index names a field twice: {list(paths)!r}")
        self.paths: Final = tuple(paths)
        self.automatic: Final = automatic
        self.steps: Final = steps
        self.fields: Final = frozenset(steps)
        self._getters: Final[tuple[Callable[[Any], Any], ...]] = tuple(
            compile_expression(p) for p in paths
        )
        self._buckets: dict[tuple[Token, ...], dict[str, int]] = {}
        self._entries: dict[str, tuple[tuple[Token, ...], ...]] = {}
        self._wide: dict[str, int] = {}
        self.queries = 0
        """Queries this index answered (the admin interface lists it)."""

    def __len__(self) -> int:
        return len(self._entries) + len(self._wide)

    def add(self, key: str, doc: Any, seq: int) -> None:
        """Index record ``key`` (write counter ``seq``) as ``doc``; replaces its old entry."""
        if key in self._entries or key in self._wide:
            self.remove(key)
        if doc is None:
            return  # an unparseable record matches no filter
        getters = self._getters
        if len(getters) == 1:
            entries: tuple[tuple[Token, ...], ...] = tuple(
                (token,) for token in _value_tokens(getters[0](doc))
            )
            if not entries:
                return  # NULL: no exact match can hold
        else:
            spellings = [_value_tokens(get(doc)) for get in getters]
            count = 1
            for tokens in spellings:
                count *= len(tokens)
            if count == 0:
                return  # a NULL field: no exact match can hold
            if count > MAX_ENTRIES:
                self._wide[key] = seq
                return
            entries = tuple(itertools.product(*spellings))
        buckets = self._buckets
        for entry in entries:
            bucket = buckets.get(entry)
            if bucket is None:
                buckets[entry] = {key: seq}
            else:
                bucket[key] = seq
        self._entries[key] = entries

    def remove(self, key: str) -> None:
        """Forget record ``key`` (nothing if it is not indexed)."""
        self._wide.pop(key, None)
        for entry in self._entries.pop(key, ()):
            bucket = self._buckets[entry]
            del bucket[key]
            if not bucket:
                del self._buckets[entry]

    def clear(self) -> None:
        """Forget every record."""
        self._buckets.clear()
        self._entries.clear()
        self._wide.clear()

    def candidates(self, plan: IndexPlan) -> list[str]:
        """The records that can match ``plan`` (its fields are :attr:`fields`), in write order.

        Counts one query in :attr:`queries`."""
        self.queries += 1
        choices = [
            [t for text in sorted(plan[steps]) for t in _literal_tokens(text)]
            for steps in self.steps
        ]
        found: dict[str, int] = dict(self._wide)
        buckets = self._buckets
        for entry in itertools.product(*choices):
            bucket = buckets.get(entry)
            if bucket:
                found.update(bucket)
        return sorted(found, key=found.__getitem__)

    def statistics(self) -> dict[str, Any]:
        """What the admin interface shows of the index."""
        return {
            "keys": list(self.paths),
            "automatic": self.automatic,
            "records": len(self),
            "queries": self.queries,
        }


def _string_literals(items: Iterable[Node]) -> frozenset[str] | None:
    out: set[str] = set()
    for item in items:
        if not isinstance(item, Lit) or type(item.value) is not str:
            return None
        out.add(item.value)
    return frozenset(out)


def _condition(node: Node) -> tuple[tuple[Step, ...], frozenset[str]] | None:
    if isinstance(node, Compare) and node.op == "=":
        left, right = node.left, node.right
        if isinstance(left, Lit):
            left, right = right, left
        if isinstance(left, Path) and isinstance(right, Lit) and type(right.value) is str:
            return left.steps, frozenset((right.value,))
        return None
    if isinstance(node, In) and not node.negated and isinstance(node.operand, Path):
        literals = _string_literals(node.items)
        return None if literals is None else (node.operand.steps, literals)
    return None


def _conjuncts(node: Node) -> Iterable[Node]:
    if isinstance(node, Logic) and node.op == "AND":
        for item in node.items:
            yield from _conjuncts(item)
    else:
        yield node


@functools.lru_cache(maxsize=1024)
def equality_plan(filter_text: str) -> IndexPlan | None:
    """The fields and literal strings of a filter a hash index may answer, or ``None``.

    Such a filter is one condition or an ``AND`` of conditions, each ``/field = 'text'``
    (either side) or ``/field IN ('text', ...)``, each field once. A filter that does not
    parse gives ``None`` (the query reports it).
    """
    try:
        root = parse_filter(filter_text)
    except (FilterError, RecursionError, ValueError):
        return None
    plan: IndexPlan = {}
    for item in _conjuncts(root):
        condition = _condition(item)
        if condition is None or condition[0] in plan:
            return None
        plan[condition[0]] = condition[1]
    return plan
