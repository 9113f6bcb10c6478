"""``<View>`` (synonym ``<ViewDefinition>``) of ``<SOW>`` over a queue (``shared/queues.md``
§8): an aggregation of the messages **available** in the queue.

The reference server builds views over queues only: ``UnderlyingTopic`` must name a queue of
the view's message type (json). ``Projection`` holds ``Field`` elements, each ``expr AS /path``
(a bare ``/path`` stands for ``/path AS /path``), where ``expr`` is an AMPS expression or one
aggregate over one, ``COUNT``, ``SUM``, ``AVG``, ``MIN`` or ``MAX`` (``NULL`` values are left
out, as AMPS does); ``Grouping`` holds the ``Field`` expressions that make a group (required);
``Filter`` selects the messages that count. A view over a SOW topic, ``Join``,
``KeyDomain``, ``Conflation``, ``FileName``, ``HashIndex`` and other message types are refused
by name.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from .config import QueueConfig

__all__ = ["AGGREGATES", "VIEW_TAGS", "Field", "ViewConfig", "parse_views"]

VIEW_TAGS: Final = ("View", "ViewDefinition")
"""The ``<SOW>`` children that define a view."""

AGGREGATES: Final = ("COUNT", "SUM", "AVG", "MIN", "MAX")
"""The aggregate functions a projected field may use."""

_REFUSED: Final = {
    "Join": "views over several topics",
    "KeyDomain": "view keys are the grouping values",
    "Conflation": "every change of the view is published",
    "ConflationInterval": "every change of the view is published",
    "FileName": "a view over a queue is computed from the queue, not stored",
    "HashIndex": "view queries scan the view",
}
_KNOWN: Final = frozenset(
    {"Name", "Topic", "MessageType", "UnderlyingTopic", "Projection", "Grouping", "Filter"}
)
_FIELD: Final = re.compile(r"^(?P<expr>.+?)\s+AS\s+(?P<path>/\S+)\s*$", re.I | re.S)
_AGGREGATE: Final = re.compile(r"^\s*(?P<fn>[A-Za-z_]+)\s*\((?P<arg>.*)\)\s*$", re.S)
_ANY_AGGREGATE: Final = re.compile(r"\b(COUNT|SUM|AVG|MIN|MAX)\s*\(", re.I)

Fail = Callable[[ET.Element, str], NoReturn]


@dataclass(frozen=True, slots=True)
class Field:
    """One projected field: ``aggregate(expression) AS path`` (``aggregate`` ``None``: the
    expression's value on the group's newest message)."""

    path: str
    expression: str
    aggregate: str | None = None


@dataclass(frozen=True, slots=True)
class ViewConfig:
    """A view over a queue."""

    name: str
    message_type: str
    underlying: str
    """The queue."""
    projection: tuple[Field, ...]
    grouping: tuple[str, ...]
    filter: str | None = None


def parse_views(
    section: ET.Element | None, queues: Sequence[QueueConfig], *, fail: Fail
) -> tuple[ViewConfig, ...]:
    """The views of a ``<SOW>`` section (``()`` for ``None``).

    Raises:
        ConfigError: through ``fail``: an unknown, refused or invalid element, a view over
            something that is not a queue, a duplicate name.
    """
    if section is None:
        return ()
    views: list[ViewConfig] = []
    for elem in section:
        if elem.tag in VIEW_TAGS:
            view = _parse_view(elem, queues, fail)
            if any(v.name == view.name and v.message_type == view.message_type for v in views):
                fail(elem, f"duplicate view {view.name!r}")
            if any(q.name == view.name for q in queues):
                fail(elem, f"view {view.name!r} has the name of a queue")
            views.append(view)
    return tuple(views)


def _parse_view(elem: ET.Element, queues: Sequence[QueueConfig], fail: Fail) -> ViewConfig:
    from ..engine.filters import compile_expression, compile_filter

    for child in elem:
        if child.tag in _REFUSED:
            fail(
                child,
                f"<{child.tag}> in <{elem.tag}> is not implemented by the reference server "
                f"({_REFUSED[child.tag]})",
            )
        if child.tag not in _KNOWN:
            fail(child, f"<{child.tag}> is not a view element (in <{elem.tag}>)")
    name = _one(elem, "Name", fail) or _one(elem, "Topic", fail)
    if name is None:
        fail(elem, f"<{elem.tag}> has no <Name>")
    label = f"view {name!r}"
    mt = (_one(elem, "MessageType", fail) or "").lower()
    if not mt:
        fail(elem, f"{label} has no <MessageType>")
    if mt != "json":
        fail(_first(elem, "MessageType"), f"{label}: only json views are implemented")
    underlying = _one(elem, "UnderlyingTopic", fail)
    if underlying is None:
        fail(elem, f"{label} has no <UnderlyingTopic>")
    if not any(q.name == underlying and q.message_type == mt for q in queues):
        fail(
            _first(elem, "UnderlyingTopic"),
            f"{label}: <UnderlyingTopic> {underlying!r} is not a json queue; the reference "
            "server builds views over queues only",
        )
    projection = tuple(
        _field(child, label, fail, compile_expression)
        for child in _fields(elem, "Projection", fail)
    )
    if not projection:
        fail(elem, f"{label} has no <Projection> fields")
    grouping: list[str] = []
    for child in _fields(elem, "Grouping", fail):
        text = (child.text or "").strip()
        if _ANY_AGGREGATE.search(text):
            fail(child, f"{label}: a <Grouping> field cannot aggregate: {text!r}")
        _compile(child, text, label, fail, compile_expression)
        grouping.append(text)
    if not grouping:
        fail(elem, f"{label} has no <Grouping> fields")
    filter_text = _one(elem, "Filter", fail)
    if filter_text is not None:
        _compile(_first(elem, "Filter"), filter_text, label, fail, compile_filter)
    return ViewConfig(name, mt, underlying, projection, tuple(grouping), filter_text)


def _field(child: ET.Element, label: str, fail: Fail, compile_: Callable[[str], Any]) -> Field:
    text = (child.text or "").strip()
    match = _FIELD.match(text)
    if match is None:
        if not re.fullmatch(r"/[^\s()]+", text):
            fail(child, f"{label}: <Field> {text!r} needs 'AS /path'")
        expr, path = text, text
    else:
        expr, path = match["expr"].strip(), match["path"]
    aggregate = _AGGREGATE.match(expr)
    if aggregate is not None and aggregate["fn"].upper() in AGGREGATES:
        fn, arg = aggregate["fn"].upper(), aggregate["arg"].strip()
        if _ANY_AGGREGATE.search(arg):
            fail(child, f"{label}: nested aggregates are not implemented: {text!r}")
        _compile(child, arg, label, fail, compile_)
        return Field(path, arg, fn)
    if _ANY_AGGREGATE.search(expr):
        fail(
            child,
            f"{label}: <Field> {text!r}: an aggregate inside a larger expression is not "
            "implemented by the reference server (one aggregate per field)",
        )
    _compile(child, expr, label, fail, compile_)
    return Field(path, expr, None)


def _compile(
    elem: ET.Element, text: str, label: str, fail: Fail, compile_: Callable[[str], Any]
) -> None:
    try:
        compile_(text)
    except (ValueError, RecursionError) as exc:
        fail(elem, f"{label}: <{elem.tag}> {text!r}: {exc}")


def _fields(elem: ET.Element, tag: str, fail: Fail) -> list[ET.Element]:
    """The ``Field`` children of every ``tag`` element (``Projection`` may repeat)."""
    out = []
    for group in elem.findall(tag):
        for child in group:
            if child.tag != "Field":
                fail(child, f"<{child.tag}> in <{tag}> is not a <Field>")
            out.append(child)
    return out


def _first(elem: ET.Element, tag: str) -> ET.Element:
    found = elem.find(tag)
    assert found is not None
    return found


def _one(elem: ET.Element, tag: str, fail: Fail) -> str | None:
    found = elem.findall(tag)
    if len(found) > 1:
        fail(found[1], f"duplicate <{tag}> in <{elem.tag}>")
    if not found:
        return None
    value = (found[0].text or "").strip()
    if not value:
        fail(found[0], f"<{tag}> in <{elem.tag}> is empty")
    return value
