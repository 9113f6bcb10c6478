"""``<View>`` (synonym ``<ViewDefinition>``) of ``<SOW>`` over a queue (``shared/queues.md``
§8): an aggregation of the messages **available** in the queue.

The reference server builds views over queues only: ``UnderlyingTopic`` must name a queue of
the view's message type (json). ``Projection`` holds ``Field`` elements, each ``expr AS /path``
(a bare ``/path`` stands for ``/path AS /path``), where ``expr`` is an AMPS expression or one
aggregate over one (``views.aggregates``; ``NULL`` values are left out, as AMPS does);
``Grouping`` holds the ``Field`` expressions that make a group (required); ``Filter`` selects the
messages that count; ``HashIndex`` (``config_indexes``): hash indexes over the view's records
answer the ``sow`` queries they can (``engine.sow_index``). ``KeyDomain``, ``Conflation``,
``FileName`` and other message types are refused by name. A view whose ``UnderlyingTopic`` is
not a queue (a SOW topic, a ``Join``) is a view over SOW topics (``views.config``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ..config_indexes import parse_hash_indexes
from ..views.aggregates import AGGREGATES
from ..views.fields import (
    ANY_AGGREGATE,
    Fail,
    Field,
    check_children,
    check_compiles,
    field_elements,
    first_child,
    json_view_head,
    one_text,
    parse_field,
)
from .config import QueueConfig

__all__ = ["AGGREGATES", "VIEW_TAGS", "Field", "ViewConfig", "is_queue_view", "parse_views"]

VIEW_TAGS: Final = ("View", "ViewDefinition")
"""The ``<SOW>`` children that define a view."""

_REFUSED: Final = {
    "Join": "a view over a queue has one underlying queue",
    "KeyDomain": "view keys are the grouping values",
    "Conflation": "every change of the view is published",
    "ConflationInterval": "every change of the view is published",
    "FileName": "a view over a queue is computed from the queue, not stored",
}
_KNOWN: Final = frozenset(
    {
        "Name",
        "Topic",
        "MessageType",
        "UnderlyingTopic",
        "Projection",
        "Grouping",
        "Filter",
        "HashIndex",
    }
)


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
    hash_indexes: tuple[tuple[str, ...], ...] = ()
    """``<HashIndex>`` definitions, each its ``<Key>`` identifiers."""


def is_queue_view(elem: ET.Element, queues: Sequence[QueueConfig]) -> bool:
    """``elem`` (a ``<View>``) names a queue as its ``UnderlyingTopic``."""
    under = elem.find("UnderlyingTopic")
    if under is None or len(under):
        return False
    name = (under.text or "").strip()
    return any(q.name == name for q in queues)


def parse_views(
    section: ET.Element | None, queues: Sequence[QueueConfig], *, fail: Fail
) -> tuple[ViewConfig, ...]:
    """The views over queues of a ``<SOW>`` section (``()`` for ``None``).

    Raises:
        ConfigError: through ``fail``: an unknown, refused or invalid element, a duplicate
            name.
    """
    if section is None:
        return ()
    views: list[ViewConfig] = []
    for elem in section:
        if elem.tag in VIEW_TAGS and is_queue_view(elem, queues):
            view = _parse_view(elem, queues, fail)
            if any(v.name == view.name and v.message_type == view.message_type for v in views):
                fail(elem, f"duplicate view {view.name!r}")
            if any(q.name == view.name for q in queues):
                fail(elem, f"view {view.name!r} has the name of a queue")
            views.append(view)
    return tuple(views)


def _parse_view(elem: ET.Element, queues: Sequence[QueueConfig], fail: Fail) -> ViewConfig:
    from ..engine.filters import compile_expression, compile_filter

    check_children(elem, refused=_REFUSED, known=_KNOWN, what="view", fail=fail)
    name, label, mt = json_view_head(elem, fail)
    underlying = one_text(elem, "UnderlyingTopic", fail)
    if underlying is None:
        fail(elem, f"{label} has no <UnderlyingTopic>")
    if not any(q.name == underlying and q.message_type == mt for q in queues):
        fail(
            first_child(elem, "UnderlyingTopic"),
            f"{label}: <UnderlyingTopic> {underlying!r} is not a json queue",
        )
    projection = tuple(
        parse_field(child, label, fail, compile_expression)
        for child in field_elements(elem, "Projection", fail)
    )
    if not projection:
        fail(elem, f"{label} has no <Projection> fields")
    grouping: list[str] = []
    for child in field_elements(elem, "Grouping", fail):
        text = (child.text or "").strip()
        if ANY_AGGREGATE.search(text):
            fail(child, f"{label}: a <Grouping> field cannot aggregate: {text!r}")
        check_compiles(child, text, label, fail, compile_expression)
        grouping.append(text)
    if not grouping:
        fail(elem, f"{label} has no <Grouping> fields")
    filter_text = one_text(elem, "Filter", fail)
    if filter_text is not None:
        check_compiles(first_child(elem, "Filter"), filter_text, label, fail, compile_filter)
    return ViewConfig(
        name,
        mt,
        underlying,
        projection,
        tuple(grouping),
        filter_text,
        hash_indexes=parse_hash_indexes(elem, label, parseable=True, fail=fail),
    )
