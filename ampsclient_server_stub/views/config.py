"""``<SOW>/<View>`` (synonym ``<ViewDefinition>``) over SOW topics, with joins.

AMPS Configuration Guide, "SOW/View"
(https://docs.crankuptheamps.com/amps-configuration-guide/sow/views) and User Guide, "Defining
Views and Aggregations" (https://docs.crankuptheamps.com/amps-user-guide/views/defining-views):

* ``MessageType`` (required), ``Name`` (``Topic`` is accepted as its synonym); the view's type
  need not be its topics' ("you can join topics of different message types, and you can project
  messages of a different type than the underlying topic"): json, msgpack, xml, bson, fix and
  nvfix here, and a composite-local type (its fields begin with their part's position,
  ``/0/total``; a composite-global type may be an underlying topic, not a view's type: AMPS User
  Guide, "Composite Messages"); ``binary`` is refused with the guide's reason, other types by
  name;
* ``UnderlyingTopic`` (required): one SOW topic (or an earlier view), or "any number of
  ``Join`` elements", each relating two topics: ``[Orders].[/customer]=[Customers].[/id]``
  (a topic may carry its message type, ``[nvfix].[Orders].[/customer]``, which it must when
  topics of several types share its name; the brackets around the topic and the field are
  optional: ``[Orders]./customer``, ``Orders./customer``); every ``Join`` after the
  first adds one topic to those already joined, or relates the same two topics as an earlier
  one by another field (multi-field join, the ``Join`` elements combined with ``AND``).
  The rules are in the User Guide's "Multiple Topic Aggregation: Join" (Defining Views and
  Aggregations, above) and SOW/View's ``Join`` and ``JoinNullEquivalency``, past what the
  public copies this project can search hold (docs/views.md, "Joins"): *our reading* is that
  a ``Join`` is an equality whose values are compared as strings; a record of the topic on the
  left of ``=`` with no partner is projected with ``NULL`` for the other topic, one of the
  right-hand topic is not (a LEFT OUTER JOIN); ``NULL``, missing and empty values match nothing
  unless ``JoinNullEquivalency`` is ``enabled``. ``=`` is the only operator: ``LEFT/RIGHT/FULL
  OUTER JOIN``, ``INNER JOIN`` and the like are refused naming the keyword;
* ``Projection/Field`` and ``Grouping/Field`` (both required), ``views.fields``; in a join every
  field names its topic, ``[Orders].[/qty]`` (or ``[Orders]./qty``, ``[nvfix].[Orders]./qty``);
* ``Filter``: only with a single underlying topic (as the guide says);
* ``KeyDomain``: the seed of the view's record keys (default: the view's name);
* ``Conflation``: it "accepts two values" (SOW/View); ``none`` (default) and ``inline`` are
  our reading of their names; the reference server processes every update in order for both
  (the final state is the same);
* ``JoinNullEquivalency``: ``enabled`` makes ``NULL``, missing and empty values join each other.

``HashIndex`` (``config_indexes``): hash indexes over the view's records (its output fields),
kept current as the view changes, used by ``sow`` queries it answers (``engine.sow_index``).

Refused by name: ``FileName``, ``Key``, a topic joined with itself (AMPS names a
join's topics by ``[type].[topic]`` only: no public AMPS page found gives an alias to tell the
two sides apart), a ``Join`` relating no topic already joined, or two topics joined through
others.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from ..config_indexes import parse_hash_indexes
from ..engine.composite_codec import composite_record_refusal, composite_type, opaque_slot
from .fields import (
    ANY_AGGREGATE,
    Fail,
    Field,
    check_children,
    check_compiles,
    field_elements,
    first_child,
    one_text,
    parse_field,
    view_head,
)


class UnderlyingSow(Protocol):
    """What a view reads of an underlying SOW topic's config (``config_model.SowTopicConfig``
    has it; named here so that ``config_model``, which holds the views, is not imported)."""

    @property
    def topic(self) -> str: ...

    @property
    def message_type(self) -> str: ...


__all__ = [
    "JOIN_KINDS",
    "VIEW_TYPES",
    "JoinSpec",
    "SowViewConfig",
    "parse_sow_views",
    "qualify",
]

JOIN_KINDS: Final = ("INNER", "LEFT", "RIGHT", "FULL")

VIEW_TYPES: Final = ("json", "msgpack", "xml", "bson", "fix", "nvfix")
"""The message types of views and of their underlying topics (those the server parses)."""

_GUIDE_TYPES: Final = {
    "binary": "binary message types cannot be the underlying topic for a view or the type "
    "of a view",
}
"""The AMPS User Guide's restrictions ("Defining Views and Aggregations")."""

_REFUSED: Final = {
    "ConflationInterval": "every change of the view is published",
    "FileName": "a view is computed in memory from its underlying topics at start",
    "Key": "a view's records are keyed by its <Grouping> fields",
}
_KNOWN: Final = frozenset(
    {
        "Name",
        "Topic",
        "MessageType",
        "UnderlyingTopic",
        "Projection",
        "HashIndex",
        "Grouping",
        "Filter",
        "KeyDomain",
        "Conflation",
        "JoinNullEquivalency",
    }
)
_SIDE: Final = (
    r"(?:\[(?P<{p}mt>[^\[\]]+)\]\.)?"
    r"(?:\[(?P<{p}topic>[^\[\]]+)\]|(?P<{p}bare>[^\[\]\s=/.]+))\.?"
    r"(?:\[(?P<{p}path>/[^\[\]]*)\]|(?P<{p}upath>/[^\[\]\s=]*))"
)
"""One side of a ``<Join>``: ``[mt].[topic].[/path]``; the brackets around the topic and the
path are optional (our reading: without them the first ``/`` starts the field), those around
the message type are not."""
_JOIN: Final = re.compile(
    r"^\s*" + _SIDE.format(p="l") + r"\s*=\s*" + _SIDE.format(p="r") + r"\s*$", re.I
)
_JOIN_WORD: Final = re.compile(
    r"\b((?:(?:LEFT|RIGHT|FULL|INNER|CROSS|NATURAL)\s+)?(?:OUTER\s+)?JOIN)\b", re.I
)
_QUALIFIED: Final = re.compile(
    r"(?:\[(?P<mt>[^\[\]/]+)\]\.)?\[(?P<topic>[^\[\]/]+)\]\."
    r"(?:\[(?P<path>/[^\[\]]*)\]|(?P<upath>/[\w@/]*))"
)
"""A field of an underlying topic: ``[topic].[/path]``, ``[topic]./path`` (the guide's
``[COMPANIES]./Name``), with ``[mt].`` in front when the type is named
(``[nvfix].[orders]./quantity``)."""


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """``[left].[/left_path] op [right].[/right_path]``, each side an index into the view's
    ``topics``."""

    left: str
    left_path: str
    right: str
    right_path: str
    kind: str = "LEFT"
    """``LEFT``: AMPS's ``=`` (the left-hand topic's records are kept without a partner);
    ``INNER``, ``RIGHT`` and ``FULL`` are known to the row engine (``views.joins``), which the
    configuration does not produce (AMPS has no syntax for them)."""
    left_index: int = 0
    right_index: int = 1
    more: tuple[tuple[str, str], ...] = ()
    """Further ``(left_path, right_path)`` pairs of a multi-field join (later ``<Join>``
    elements relating the same two topics): the records join when every pair is equal."""


@dataclass(frozen=True, slots=True)
class SowViewConfig:
    """A view over one or more SOW topics."""

    name: str
    message_type: str
    topics: tuple[str, ...]
    """The underlying topics (one, or those of the joins in the order they join)."""
    projection: tuple[Field, ...]
    grouping: tuple[str, ...]
    joins: tuple[JoinSpec, ...] = ()
    filter: str | None = None
    key_domain: str | None = None
    topic_types: tuple[str, ...] = ()
    """The message type of each of ``topics`` (empty: all json)."""
    join_null_equivalency: bool = False
    """``<JoinNullEquivalency>enabled``: ``NULL``, missing and empty join values match."""
    conflation: str = "none"
    """``<Conflation>``: ``none`` or ``inline`` (processed alike here)."""
    hash_indexes: tuple[tuple[str, ...], ...] = ()
    """``<HashIndex>`` definitions over the view's fields, each its ``<Key>`` identifiers."""

    @property
    def join(self) -> JoinSpec | None:
        """The first join (``None``: a view over one topic)."""
        return self.joins[0] if self.joins else None

    @property
    def types(self) -> tuple[str, ...]:
        """The message type of each underlying topic."""
        return self.topic_types or ("json",) * len(self.topics)


def qualify(text: str, topics: Sequence[str], types: Sequence[str] | None = None) -> str:
    """Rewrite ``[topic].[/path]`` (and ``[type].[topic].[/path]``) into the path of that
    topic's document inside a joined row, ``/<index>/path`` (a row is ``{"0": doc, "1": doc,
    ...}``); with a single topic (no join) the row is the record itself: ``/path``.

    Raises:
        ValueError: a topic that is not one of ``topics`` (of that type), a topic name that
            several underlying topics of different types share without its type.
    """
    kinds = list(types) if types is not None else ["json"] * len(topics)

    def one(match: re.Match[str]) -> str:
        mt, topic, path = match["mt"], match["topic"], match["path"] or match["upath"]
        found = [
            n
            for n, (name, kind) in enumerate(zip(topics, kinds, strict=True))
            if name == topic and (mt is None or kind == mt.lower())
        ]
        if not found:
            what = f"[{mt}].[{topic}]" if mt is not None else f"[{topic}]"
            raise ValueError(f"{what} is not an underlying topic of the view")
        if len(found) > 1:
            raise ValueError(
                f"[{topic}] names underlying topics of several message types: write "
                f"[type].[{topic}].[{path}]"
            )
        if len(topics) == 1:
            return f" {path} "
        return f" /{found[0]}{path.rstrip('/')} "

    return _QUALIFIED.sub(one, text)


def parse_sow_views(
    section: ET.Element | None,
    sow_topics: Sequence[UnderlyingSow],
    *,
    skip: Callable[[ET.Element], bool] = lambda _elem: False,
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
    # sow_topics: the section's <Topic>s in order, then those of a pre-5.0 <TopicMetaData>
    in_section = sum(1 for c in section if c.tag in ("Topic", "TopicDefinition"))
    before = 0
    for elem in section:
        if elem.tag in ("Topic", "TopicDefinition"):
            before += 1
        if elem.tag not in ("View", "ViewDefinition") or skip(elem):
            continue
        defined = [*sow_topics[:before], *sow_topics[in_section:]]
        later = frozenset(t.topic for t in sow_topics[before:in_section])
        view = _parse(elem, defined, views, fail, later=later)
        if any(v.name == view.name for v in views) or any(t.topic == view.name for t in sow_topics):
            fail(elem, f"duplicate topic {view.name!r}: a view needs a name of its own")
        views.append(view)
    return tuple(views)


def _type_refusal(mt: str, *, underlying: bool = False) -> str | None:
    """Why ``mt`` cannot be a view's type (``underlying``: an underlying topic's); ``None``: it
    can. A composite-local type can be both, a composite-global type only an underlying topic
    (AMPS User Guide, Composite Messages: views, joins and aggregation cannot project it)."""
    if mt in VIEW_TYPES:
        return None
    ctype = composite_type(mt)
    if ctype is not None:
        return None if underlying else composite_record_refusal(ctype, ())
    if mt in _GUIDE_TYPES:
        return _GUIDE_TYPES[mt]
    return (
        f"{mt} views are not implemented by the reference server (views and their underlying "
        f"topics are {', '.join(VIEW_TYPES)})"
    )


def _parse(
    elem: ET.Element,
    sow_topics: Sequence[UnderlyingSow],
    earlier: Sequence[SowViewConfig],
    fail: Fail,
    *,
    later: frozenset[str] = frozenset(),
) -> SowViewConfig:
    """``later``: the SOW topics defined after the view (AMPS: "the underlying topic for the
    view must be defined in the AMPS configuration file before the view itself is defined",
    User Guide, Understanding Views)."""
    from ..engine.filters import compile_expression, compile_filter

    check_children(elem, refused=_REFUSED, known=_KNOWN, what="view", fail=fail)
    name, label, mt = view_head(elem, fail)
    refusal = _type_refusal(mt)
    if refusal is not None:
        fail(first_child(elem, "MessageType"), f"{label}: {refusal}")
    unders = elem.findall("UnderlyingTopic")
    if not unders:
        fail(elem, f"{label} has no <UnderlyingTopic>")
    if len(unders) > 1:
        fail(unders[1], f"duplicate <UnderlyingTopic> in <{elem.tag}>")
    under = unders[0]
    known: dict[str, list[str]] = {}
    for t in sow_topics:
        known.setdefault(t.topic, []).append(t.message_type.lower())
    for v in earlier:
        known.setdefault(v.name, []).append(v.message_type)
    topics: list[tuple[str, str]] = []
    joins: tuple[JoinSpec, ...] = ()
    if len(under):
        joins = _joins(under, label, known, topics, fail, later=later)
    else:
        text = (under.text or "").strip()
        if not text:
            fail(under, f"<UnderlyingTopic> in <{elem.tag}> is empty")
        topics.append((text, _resolve(under, label, known, text, None, mt, fail, later=later)))
    names = tuple(t for t, _ in topics)
    types = tuple(k for _, k in topics)

    def compile_(text: str) -> Any:
        if not joins:
            if _QUALIFIED.search(text):
                text = qualify(text, names, types)
            return compile_expression(text)
        rewritten = qualify(text, names, types)
        if re.search(r"(?<![\w\]])/(?=[A-Za-z_])", rewritten):
            raise ValueError("in a join, name each field's topic: [topic].[/path]")
        return compile_expression(rewritten)

    projection = tuple(
        parse_field(child, label, fail, compile_)
        for child in field_elements(elem, "Projection", fail)
    )
    if not projection:
        fail(elem, f"{label} has no <Projection> fields")
    _check_shape(elem, label, mt, projection, fail)
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
        if joins:
            fail(
                first_child(elem, "Filter"),
                f"{label}: <Filter> is only valid for a view over a single underlying topic",
            )
        check_compiles(first_child(elem, "Filter"), filter_text, label, fail, compile_filter)
    _check_opaque_parts(elem, label, (names, types), mt, projection, grouping, filter_text, fail)
    conflation = (one_text(elem, "Conflation", fail) or "none").lower()
    if conflation not in ("none", "inline"):
        fail(
            first_child(elem, "Conflation"),
            f"{label}: <Conflation> is none or inline, not {conflation!r}",
        )
    equivalency = (one_text(elem, "JoinNullEquivalency", fail) or "disabled").lower()
    if equivalency not in _SWITCH:
        fail(
            first_child(elem, "JoinNullEquivalency"),
            f"{label}: <JoinNullEquivalency> is enabled or disabled, not {equivalency!r}",
        )
    return SowViewConfig(
        name,
        mt,
        names,
        projection,
        tuple(grouping),
        joins=joins,
        filter=filter_text,
        key_domain=one_text(elem, "KeyDomain", fail),
        topic_types=types,
        join_null_equivalency=_SWITCH[equivalency],
        conflation=conflation,
        hash_indexes=parse_hash_indexes(elem, label, parseable=True, fail=fail),
    )


_SWITCH: Final = {"enabled": True, "true": True, "disabled": False, "false": False}


def _check_opaque_parts(
    elem: ET.Element,
    label: str,
    topics: tuple[Sequence[str], Sequence[str]],
    mt: str,
    projection: Sequence[Field],
    grouping: Sequence[str],
    filter_text: str | None,
    fail: Fail,
) -> None:
    """Over a composite-local topic nothing reads inside a binary part or the unparsed payload
    (it is opaque): a projected field may copy such a part whole (``/2``, ``[topic].[/2]``)
    into a binary part (or the unparsed payload) of the view's composite-local type ``mt``, no
    more (a part of another type cannot hold it). ``topics``: the view's underlying topics'
    names and types (several: a join, whose fields name their topic, ``[topic].[/path]``)."""
    checks = [
        (
            f.expression,
            f.aggregate is None and opaque_slot(composite_type(mt), f.path),
            "Projection",
        )
        for f in projection
    ]
    checks += [(g, False, "Grouping") for g in grouping]
    if filter_text is not None:
        checks.append((filter_text, False, "Filter"))
    for text, whole, tag in checks:
        opaque = _opaque_refusal(text, topics, whole_part=whole)
        if opaque is not None:
            fail(first_child(elem, tag), f"{label}: <{tag}>: {opaque}")


def _opaque_refusal(
    text: str, topics: tuple[Sequence[str], Sequence[str]], *, whole_part: bool
) -> str | None:
    """Why the expression ``text`` of a view over ``topics`` (names, types) reads inside an
    opaque part of a composite-local topic (``whole_part``: a bare path of a whole part is a
    copy, allowed); ``None``: it does not."""
    from ..engine.composite_codec import opaque_part_refusal
    from ..engine.filter_syntax import Path, identifiers, parse_filter

    names, types = topics
    if not any((c := composite_type(t)) is not None and c.local for t in types):
        return None
    joined = len(names) > 1
    source = qualify(text, names, types) if joined or _QUALIFIED.search(text) else text
    node = parse_filter(source)
    if whole_part and isinstance(node, Path) and len(node.steps) == 1 + joined:
        return None
    for steps in identifiers(node):
        index = 0
        if joined:  # /<topic's position>/<path in the topic's record>
            if not steps or not str(steps[0]).isdigit() or int(steps[0]) >= len(types):
                continue
            index, steps = int(steps[0]), steps[1:]
        ctype = composite_type(types[index])
        refusal = None if ctype is None else opaque_part_refusal(ctype, steps)
        if refusal is not None:
            return f"[{names[index]}]: {refusal}"
    return None


def _check_shape(
    elem: ET.Element, label: str, mt: str, projection: Sequence[Field], fail: Fail
) -> None:
    """A view record must be writable as its message type: fix/nvfix have no nesting, an xml
    message has one root element, a composite-local record's fields begin with their part's
    position (:func:`.composite_codec.composite_record_refusal`)."""
    ctype = composite_type(mt)
    if ctype is not None:
        refusal = composite_record_refusal(ctype, [f.path for f in projection])
        if refusal is not None:
            fail(first_child(elem, "Projection"), f"{label}: {refusal}")
        return
    paths = [f.path.strip("/").split("/") for f in projection]
    if mt in ("fix", "nvfix") and any(len(p) > 1 for p in paths):
        fail(
            first_child(elem, "Projection"),
            f"{label}: a {mt} message has no nested fields: project each field AS /name",
        )
    if mt == "xml" and (len({p[0] for p in paths}) > 1 or any(len(p) < 2 for p in paths)):
        fail(
            first_child(elem, "Projection"),
            f"{label}: an xml message has one root element: project each field AS "
            "/Root/name (the same /Root for every field)",
        )


def _resolve(
    at: ET.Element,
    label: str,
    known: dict[str, list[str]],
    topic: str,
    mt: str | None,
    view_mt: str | None,
    fail: Fail,
    *,
    later: frozenset[str] = frozenset(),
) -> str:
    """The message type of underlying topic ``topic`` (written ``[mt].[topic]`` when ``mt``;
    ``view_mt``: the type preferred when several share the name, ``None`` in a join;
    ``later``: SOW topics defined after the view)."""
    kinds = known.get(topic, [])
    if mt is not None:
        kinds = [k for k in kinds if k == mt.lower()]
    if not kinds:
        what = topic if mt is None else f"[{mt}].[{topic}]"
        if topic in later:
            fail(
                at,
                f"{label}: <UnderlyingTopic> {what!r} is defined after the view: the underlying "
                "topic of a view must be defined before the view itself (User Guide, "
                "'Understanding Views')",
            )
        fail(
            at,
            f"{label}: <UnderlyingTopic> {what!r} is not a queue, SOW topic or earlier view "
            "(a view's underlying topics keep a SOW)",
        )
    if len(kinds) > 1:
        if view_mt in kinds and mt is None:
            kinds = [view_mt]
        else:
            fail(
                at,
                f"{label}: SOW topics of several message types are called {topic!r} "
                f"({', '.join(kinds)}): name one as [type].[{topic}]",
            )
    refusal = _type_refusal(kinds[0], underlying=True)
    if refusal is not None:
        fail(at, f"{label}: underlying topic {topic!r} is {kinds[0]}: {refusal}")
    return kinds[0]


def _joins(
    under: ET.Element,
    label: str,
    known: dict[str, list[str]],
    topics: list[tuple[str, str]],
    fail: Fail,
    *,
    later: frozenset[str] = frozenset(),
) -> tuple[JoinSpec, ...]:
    """The ``<Join>`` elements of ``under``; ``topics`` receives the joined topics in order."""
    elements = list(under)
    for child in elements:
        if child.tag != "Join":
            fail(child, f"<{child.tag}> in <UnderlyingTopic> is not a <Join>")
    if (under.text or "").strip():
        fail(under, f"{label}: <UnderlyingTopic> holds a topic name or <Join> elements, not both")
    specs: list[JoinSpec] = []
    for n, join in enumerate(elements):
        text = (join.text or "").strip()
        match = _JOIN.match(text)
        if match is None:
            word = _JOIN_WORD.search(text)
            if word is not None:
                fail(
                    join,
                    f"{label}: <Join> {text!r}: AMPS has no {' '.join(word[1].upper().split())!r}: "
                    "a <Join> is the equality '[topic].[/field]=[topic].[/field]', which AMPS "
                    "evaluates as a LEFT OUTER JOIN (the left-hand topic's records are kept "
                    "without a partner; User Guide, 'Multiple Topic Aggregation: Join')",
                )
            fail(join, f"{label}: <Join> {text!r} is not '[topic].[/field]=[topic].[/field]'")
        sides = []
        paths = []
        for side in ("l", "r"):
            topic = match[f"{side}topic"] or match[f"{side}bare"]
            kind = _resolve(join, label, known, topic, match[f"{side}mt"], None, fail, later=later)
            sides.append((topic, kind))
            paths.append(match[f"{side}path"] or match[f"{side}upath"])
        for (topic, kind), path in zip(sides, paths, strict=True):
            opaque = _opaque_refusal(path, ((topic,), (kind,)), whole_part=False)
            if opaque is not None:
                fail(join, f"{label}: <Join> {text!r}: {opaque}")
        if sides[0] == sides[1]:
            fail(
                join,
                f"{label}: <Join> {text!r}: a topic joined with itself is not supported: AMPS "
                "names a join's topics by [type].[topic] only, and the User Guide gives no "
                "alias to tell the two sides apart",
            )
        joined = [s in topics for s in sides]
        if n and not any(joined):
            fail(join, f"{label}: <Join> {text!r} relates no topic of the <Join>s before it")
        if n and all(joined):
            pair = (topics.index(sides[0]), topics.index(sides[1]))
            same = [
                i
                for i, spec in enumerate(specs)
                if {spec.left_index, spec.right_index} == set(pair)
            ]
            if not same:
                fail(
                    join,
                    f"{label}: <Join> {text!r} relates two topics joined through others: "
                    "each <Join> adds one topic, or relates the two topics of an earlier "
                    "<Join> by another field",
                )
            earlier = specs[same[0]]
            extra = (paths[0], paths[1]) if pair[0] == earlier.left_index else (paths[1], paths[0])
            specs[same[0]] = replace(earlier, more=(*earlier.more, extra))
            continue
        for s in sides:
            if s not in topics:
                topics.append(s)
        specs.append(
            JoinSpec(
                sides[0][0],
                paths[0],
                sides[1][0],
                paths[1],
                "LEFT",
                topics.index(sides[0]),
                topics.index(sides[1]),
            )
        )
    return tuple(specs)
