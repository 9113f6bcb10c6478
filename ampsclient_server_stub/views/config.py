"""``<SOW>/<View>`` (synonym ``<ViewDefinition>``) over SOW topics, with joins.

AMPS Configuration Guide, "SOW/View"
(https://docs.crankuptheamps.com/amps-configuration-guide/sow/views) and User Guide, "Defining
Views and Aggregations" (https://docs.crankuptheamps.com/amps-user-guide/views/defining-views):

* ``MessageType`` (required), ``Name`` (``Topic`` is accepted as its synonym);
* ``UnderlyingTopic`` (required): one SOW topic (or an earlier view), or ``Join`` elements
  relating several: ``[Orders].[/customer] = [Customers].[/id]`` (a topic may carry its message
  type, ``[json].[Orders].[/customer]``); the outer forms replace ``=`` by ``LEFT OUTER JOIN``,
  ``RIGHT OUTER JOIN`` or ``FULL OUTER JOIN``: the side(s) kept without a partner project
  ``NULL`` for the other topic's fields;
* ``Projection/Field`` and ``Grouping/Field`` (both required), ``views.fields``; in a join every
  field names its topic, ``[Orders].[/qty]``;
* ``Filter``: only with a single underlying topic (as the guide says);
* ``KeyDomain``: the seed of the view's record keys (default: the view's name).

The reference server implements json views over json topics: other message types, ``Conflation``,
``FileName``, ``HashIndex``, ``Key`` and joins of more than two topics are refused by name.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from .fields import (
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


class UnderlyingSow(Protocol):
    """What a view reads of an underlying SOW topic's config (``config_model.SowTopicConfig``
    has it; named here so that ``config_model``, which holds the views, is not imported)."""

    @property
    def topic(self) -> str: ...

    @property
    def message_type(self) -> str: ...


__all__ = ["JOIN_KINDS", "JoinSpec", "SowViewConfig", "parse_sow_views", "qualify"]

JOIN_KINDS: Final = ("INNER", "LEFT", "RIGHT", "FULL")

_REFUSED: Final = {
    "Conflation": "every change of the view is published",
    "ConflationInterval": "every change of the view is published",
    "FileName": "a view is computed in memory from its underlying topics at start",
    "HashIndex": "view queries scan the view",
    "Key": "a view's records are keyed by its <Grouping> fields",
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
        "KeyDomain",
    }
)
_SIDE: Final = (
    r"(?:\[(?P<{p}mt>[^\[\]]+)\]\.)?"
    r"\[(?P<{p}topic>[^\[\]]+)\]\.\[(?P<{p}path>/[^\[\]]*)\]"
)
_JOIN: Final = re.compile(
    r"^\s*"
    + _SIDE.format(p="l")
    + r"\s*(?P<op>=|(?:LEFT|RIGHT|FULL)\s+OUTER\s+JOIN)\s*"
    + _SIDE.format(p="r")
    + r"\s*$",
    re.I,
)
_QUALIFIED: Final = re.compile(
    r"(?:\[(?P<mt>[^\[\]/]+)\]\.)?\[(?P<topic>[^\[\]/]+)\]\.\[(?P<path>/[^\[\]]*)\]"
)


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """``[left].[/left_path] op [right].[/right_path]``."""

    left: str
    left_path: str
    right: str
    right_path: str
    kind: str = "INNER"
    """``INNER``, ``LEFT``, ``RIGHT`` or ``FULL`` (outer)."""


@dataclass(frozen=True, slots=True)
class SowViewConfig:
    """A view over one or two SOW topics."""

    name: str
    message_type: str
    topics: tuple[str, ...]
    """The underlying topics (one, or the two of the join)."""
    projection: tuple[Field, ...]
    grouping: tuple[str, ...]
    join: JoinSpec | None = None
    filter: str | None = None
    key_domain: str | None = None


def qualify(text: str, topics: Sequence[str]) -> str:
    """Rewrite ``[topic].[/path]`` (and ``[json].[topic].[/path]``) into the path of that
    topic's document inside a joined row, ``/<index>/path`` (a row is ``{"0": doc, "1": doc}``);
    with a single topic (no join) the row is the record itself: ``/path``.

    Raises:
        ValueError: a topic that is not one of ``topics``, a message type other than json.
    """

    def one(match: re.Match[str]) -> str:
        mt, topic, path = match["mt"], match["topic"], match["path"]
        if mt is not None and mt.lower() != "json":
            raise ValueError(f"[{mt}].[{topic}]: only json topics can be joined")
        if topic not in topics:
            raise ValueError(f"[{topic}] is not an underlying topic of the view")
        if len(topics) == 1:
            return f" {path} "
        return f" /{topics.index(topic)}{path.rstrip('/')} "

    return _QUALIFIED.sub(one, text)


def parse_sow_views(
    section: ET.Element | None,
    sow_topics: Sequence[UnderlyingSow],
    *,
    skip: Callable[[ET.Element], bool],
    fail: Fail,
) -> tuple[SowViewConfig, ...]:
    """The views over SOW topics of a ``<SOW>`` section (``skip``: a view over a queue).

    Raises:
        ConfigError: through ``fail``: an unknown, refused or invalid element, an underlying
            topic that is not a SOW topic (or an earlier view), a duplicate name.
    """
    if section is None:
        return ()
    views: list[SowViewConfig] = []
    for elem in section:
        if elem.tag not in ("View", "ViewDefinition") or skip(elem):
            continue
        view = _parse(elem, sow_topics, views, fail)
        if any(v.name == view.name for v in views) or any(t.topic == view.name for t in sow_topics):
            fail(elem, f"duplicate topic {view.name!r}: a view needs a name of its own")
        views.append(view)
    return tuple(views)


def _parse(
    elem: ET.Element,
    sow_topics: Sequence[UnderlyingSow],
    earlier: Sequence[SowViewConfig],
    fail: Fail,
) -> SowViewConfig:
    from ..engine.filters import compile_expression, compile_filter

    check_children(elem, refused=_REFUSED, known=_KNOWN, what="view", fail=fail)
    name, label, mt = json_view_head(elem, fail)
    unders = elem.findall("UnderlyingTopic")
    if not unders:
        fail(elem, f"{label} has no <UnderlyingTopic>")
    if len(unders) > 1:
        fail(unders[1], f"duplicate <UnderlyingTopic> in <{elem.tag}>")
    under = unders[0]
    known = {t.topic: t.message_type for t in sow_topics}
    known |= {v.name: v.message_type for v in earlier}
    join: JoinSpec | None = None
    if len(under):
        join = _join(under, label, fail)
        topics: tuple[str, ...] = (join.left, join.right)
    else:
        text = (under.text or "").strip()
        if not text:
            fail(under, f"<UnderlyingTopic> in <{elem.tag}> is empty")
        topics = (text,)
    for topic in topics:
        if topic not in known:
            fail(
                under,
                f"{label}: <UnderlyingTopic> {topic!r} is not a json queue or SOW topic "
                "(a view's underlying topics keep a SOW)",
            )
        if known[topic] != "json":
            fail(
                under,
                f"{label}: underlying topic {topic!r} is {known[topic]}; only json "
                "topics are implemented",
            )

    def compile_(text: str) -> Any:
        if join is None:
            if _QUALIFIED.search(text):
                text = qualify(text, topics)
            return compile_expression(text)
        rewritten = qualify(text, topics)
        if re.search(r"(?<![\w\]])/(?=[A-Za-z_])", rewritten):
            raise ValueError("in a join, name each field's topic: [topic].[/path]")
        return compile_expression(rewritten)

    projection = tuple(
        parse_field(child, label, fail, compile_)
        for child in field_elements(elem, "Projection", fail)
    )
    if not projection:
        fail(elem, f"{label} has no <Projection> fields")
    grouping: list[str] = []
    for child in field_elements(elem, "Grouping", fail):
        text = (child.text or "").strip()
        if ANY_AGGREGATE.search(text):
            fail(child, f"{label}: a <Grouping> field cannot aggregate: {text!r}")
        check_compiles(child, text, label, fail, compile_)
        grouping.append(text)
    if not grouping:
        fail(elem, f"{label} has no <Grouping> fields")
    filter_text = one_text(elem, "Filter", fail)
    if filter_text is not None:
        if join is not None:
            fail(
                first_child(elem, "Filter"),
                f"{label}: <Filter> is only valid for a view over a single underlying topic",
            )
        check_compiles(first_child(elem, "Filter"), filter_text, label, fail, compile_filter)
    return SowViewConfig(
        name,
        mt,
        topics,
        projection,
        tuple(grouping),
        join=join,
        filter=filter_text,
        key_domain=one_text(elem, "KeyDomain", fail),
    )


def _join(under: ET.Element, label: str, fail: Fail) -> JoinSpec:
    joins = list(under)
    for child in joins:
        if child.tag != "Join":
            fail(child, f"<{child.tag}> in <UnderlyingTopic> is not a <Join>")
    if (under.text or "").strip():
        fail(under, f"{label}: <UnderlyingTopic> holds a topic name or <Join> elements, not both")
    if len(joins) > 1:
        fail(
            joins[1],
            f"{label}: a join of more than two topics is not implemented by the reference server",
        )
    text = (joins[0].text or "").strip()
    match = _JOIN.match(text)
    if match is None:
        fail(
            joins[0],
            f"{label}: <Join> {text!r} is not '[topic].[/field] = [topic].[/field]' "
            "(or LEFT/RIGHT/FULL OUTER JOIN in place of '=')",
        )
    for side in ("l", "r"):
        mt = match[f"{side}mt"]
        if mt is not None and mt.lower() != "json":
            fail(joins[0], f"{label}: <Join> {text!r}: only json topics can be joined")
    if match["ltopic"] == match["rtopic"]:
        fail(joins[0], f"{label}: <Join> {text!r}: a topic joined with itself is not implemented")
    op = match["op"].upper().split()[0]
    return JoinSpec(
        match["ltopic"],
        match["lpath"],
        match["rtopic"],
        match["rpath"],
        "INNER" if op == "=" else op,
    )
