"""The ``<Projection>``/``<Grouping>`` ``<Field>`` syntax shared by every view definition
(over queues, ``queues.view_config``; over SOW topics, ``views.config``) and by aggregated
subscriptions' ``projection=[...]`` option.

A field is ``expr AS /path`` (a bare ``/path`` stands for ``/path AS /path``), where ``expr``
is an AMPS expression or one aggregate function (``views.aggregates``) over one.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from ..errors import OptionError
from .aggregates import AGGREGATES

__all__ = [
    "Field",
    "FieldError",
    "check_children",
    "check_compiles",
    "field_elements",
    "first_child",
    "json_view_head",
    "one_text",
    "parse_field",
    "parse_field_text",
    "view_head",
]

_FIELD: Final = re.compile(r"^(?P<expr>.+?)\s+AS\s+(?P<path>/\S+)\s*$", re.I | re.S)
_AGGREGATE: Final = re.compile(r"^\s*(?P<fn>[A-Za-z_]+)\s*\((?P<arg>.*)\)\s*$", re.S)
ANY_AGGREGATE: Final = re.compile(r"\b(" + "|".join(AGGREGATES) + r")\s*\(", re.I)

Fail = Callable[[ET.Element, str], NoReturn]


class FieldError(OptionError):
    """A field that does not parse (the message names it)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One projected field: ``aggregate(expression) AS path`` (``aggregate`` ``None``: the
    expression's value on the group's newest message)."""

    path: str
    expression: str
    aggregate: str | None = None


_BARE: Final = re.compile(
    r"(?:(?:\[[^\[\]/]+\]\.)?\[[^\[\]/]+\]\.(?:\[(?P<path>/[^\[\]]*)\]|(?P<upath>/[\w@/]+)))"
    r"|/[^\s()]+"
)
"""A field projected under its own name: ``/path``, or a field of a joined topic,
``[Orders].[/CustomerID]`` or ``[COMPANIES]./Name`` (the guide's examples), projected as
``/CustomerID``, ``/Name``."""


def parse_field_text(text: str, compile_: Callable[[str], Any]) -> Field:
    """One field from its text.

    Raises:
        FieldError: no ``AS /path`` where one is needed, a nested aggregate, an aggregate
            inside a larger expression, an expression that does not compile.
    """
    text = text.strip()
    match = _FIELD.match(text)
    if match is None:
        bare = _BARE.fullmatch(text)
        if bare is None:
            raise FieldError(f"<Field> {text!r} needs 'AS /path'")
        expr, path = text, bare["path"] or bare["upath"] or text
    else:
        expr, path = match["expr"].strip(), match["path"]
    aggregate = _AGGREGATE.match(expr)
    if aggregate is not None and aggregate["fn"].upper() in AGGREGATES:
        fn, arg = aggregate["fn"].upper(), aggregate["arg"].strip()
        if ANY_AGGREGATE.search(arg):
            raise FieldError(f"nested aggregates are not implemented: {text!r}")
        _compiles(arg, compile_)
        return Field(path, arg, fn)
    if ANY_AGGREGATE.search(expr):
        raise FieldError(
            f"<Field> {text!r}: an aggregate inside a larger expression is not "
            "implemented by the reference server (one aggregate per field)"
        )
    _compiles(expr, compile_)
    return Field(path, expr, None)


def _compiles(text: str, compile_: Callable[[str], Any]) -> None:
    try:
        compile_(text)
    except (ValueError, RecursionError) as exc:
        raise FieldError(f"{text!r}: {exc}") from None


def parse_field(child: ET.Element, label: str, fail: Fail, compile_: Callable[[str], Any]) -> Field:
    """One ``<Field>`` element (a failure names the view)."""
    try:
        return parse_field_text(child.text or "", compile_)
    except FieldError as exc:
        fail(child, f"{label}: {exc}")


def check_compiles(
    elem: ET.Element, text: str, label: str, fail: Fail, compile_: Callable[[str], Any]
) -> None:
    """Fail (naming ``elem`` and the view) when ``text`` does not compile."""
    try:
        compile_(text)
    except (ValueError, RecursionError) as exc:
        fail(elem, f"{label}: <{elem.tag}> {text!r}: {exc}")


def field_elements(elem: ET.Element, tag: str, fail: Fail) -> list[ET.Element]:
    """The ``Field`` children of every ``tag`` element (``Projection`` may repeat)."""
    out = []
    for group in elem.findall(tag):
        for child in group:
            if child.tag != "Field":
                fail(child, f"<{child.tag}> in <{tag}> is not a <Field>")
            out.append(child)
    return out


def first_child(elem: ET.Element, tag: str) -> ET.Element:
    found = elem.find(tag)
    assert found is not None
    return found


def one_text(elem: ET.Element, tag: str, fail: Fail) -> str | None:
    """The text of the one ``tag`` child (``None``: absent; a duplicate or empty one fails)."""
    found = elem.findall(tag)
    if len(found) > 1:
        fail(found[1], f"duplicate <{tag}> in <{elem.tag}>")
    if not found:
        return None
    value = (found[0].text or "").strip()
    if not value:
        fail(found[0], f"<{tag}> in <{elem.tag}> is empty")
    return value


def check_children(
    elem: ET.Element,
    *,
    refused: Mapping[str, str],
    known: Collection[str],
    what: str,
    fail: Fail,
) -> None:
    """Every child of ``elem`` is an element of a ``what``: one in ``refused`` fails saying
    why the reference server does not implement it, an unknown one fails naming it."""
    for child in elem:
        if child.tag in refused:
            fail(
                child,
                f"<{child.tag}> in <{elem.tag}> is not implemented by the reference server "
                f"({refused[child.tag]})",
            )
        if child.tag not in known:
            fail(child, f"<{child.tag}> is not a {what} element (in <{elem.tag}>)")


def view_head(elem: ET.Element, fail: Fail) -> tuple[str, str, str]:
    """A view's name (``<Name>`` or ``<Topic>``), its label for messages and its message type
    (lower case; required, not checked here)."""
    name = one_text(elem, "Name", fail) or one_text(elem, "Topic", fail)
    if name is None:
        fail(elem, f"<{elem.tag}> has no <Name>")
    label = f"view {name!r}"
    mt = (one_text(elem, "MessageType", fail) or "").lower()
    if not mt:
        fail(elem, f"{label} has no <MessageType>")
    return name, label, mt


def json_view_head(elem: ET.Element, fail: Fail) -> tuple[str, str, str]:
    """:func:`view_head` of a view whose message type must be json (views over queues and
    conflated topics: the only type they are implemented for)."""
    name, label, mt = view_head(elem, fail)
    if mt != "json":
        fail(first_child(elem, "MessageType"), f"{label}: only json views are implemented")
    return name, label, mt
