"""``<SOW>/<ConflatedTopic>`` (synonym ``<ReplicaDefinition>``): a copy of a SOW topic updated
at most once per ``Interval`` with the latest value of each record that changed.

Follows the AMPS configuration reference, SOW/ConflatedTopic
(https://docs.crankuptheamps.com/amps-configuration-guide/sow/conflatedtopic): ``Name``
(``Topic`` accepted as a synonym), ``UnderlyingTopic`` (must name a SOW topic), ``MessageType``
(must be the underlying topic's), ``Interval`` (default 5s, minimum 100ms), ``Filter``,
``HashIndex`` ("created on startup, and kept up to date": ``config_indexes``,
``engine.sow_index``). ``TopicFormat`` is refused by name; the underlying topic must be a SOW
``Topic`` (not a view or another conflated topic).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from typing import Final, NoReturn

from .config_indexes import parse_hash_indexes
from .config_model import ConflatedTopicConfig, SowTopicConfig
from .config_values import parse_duration
from .views.fields import check_children

__all__ = [
    "CONFLATED_TAGS",
    "MIN_INTERVAL",
    "ConflatedTopicConfig",
    "parse_conflated_topics",
]

CONFLATED_TAGS: Final = ("ConflatedTopic", "ReplicaDefinition")
"""The ``<SOW>`` children that define a conflated topic."""

MIN_INTERVAL: Final = 0.1
"""The smallest ``Interval`` AMPS accepts, seconds."""

_KNOWN: Final = (
    "Name",
    "Topic",
    "UnderlyingTopic",
    "MessageType",
    "Interval",
    "Filter",
    "HashIndex",
)
_REFUSED: Final = {
    "TopicFormat": "regular-expression underlying topics are not supported",
}

Fail = Callable[[ET.Element, str], NoReturn]


def parse_conflated_topics(
    section: ET.Element | None, sow_topics: Sequence[SowTopicConfig], *, fail: Fail
) -> tuple[ConflatedTopicConfig, ...]:
    """The conflated topics of a ``<SOW>`` section (``()`` for ``None``).

    Raises:
        ConfigError: through ``fail``: an unknown or refused element, a missing or unknown
            ``UnderlyingTopic``, a message type that is not the underlying topic's, an
            ``Interval`` under 100ms, a bad ``Filter``, a duplicate name.
    """
    if section is None:
        return ()
    out: list[ConflatedTopicConfig] = []
    for elem in section:
        if elem.tag not in CONFLATED_TAGS:
            continue
        topic = _parse(elem, sow_topics, fail)
        if any(t.name == topic.name and t.message_type == topic.message_type for t in out):
            fail(elem, f"duplicate conflated topic {topic.name!r}")
        if any(s.topic == topic.name and s.message_type == topic.message_type for s in sow_topics):
            fail(elem, f"conflated topic {topic.name!r} has the name of a SOW topic")
        out.append(topic)
    return tuple(out)


def _text(elem: ET.Element, tag: str, fail: Fail) -> str | None:
    found = elem.findall(tag)
    if len(found) > 1:
        fail(found[1], f"<{tag}> given twice in <{elem.tag}>")
    if not found:
        return None
    return (found[0].text or "").strip() or None


def _parse(
    elem: ET.Element, sow_topics: Sequence[SowTopicConfig], fail: Fail
) -> ConflatedTopicConfig:
    from .engine.filter_syntax import FilterError
    from .engine.filters import compile_filter
    from .engine.payload import PARSEABLE_TYPES, is_parseable
    from .engine.wire import opaque_filter_refusal

    check_children(elem, refused=_REFUSED, known=_KNOWN, what="conflated topic", fail=fail)
    name = _text(elem, "Name", fail) or _text(elem, "Topic", fail)
    if name is None:
        fail(elem, f"<{elem.tag}> has no <Name>")
    label = f"conflated topic {name!r}"
    underlying = _text(elem, "UnderlyingTopic", fail)
    if underlying is None:
        fail(elem, f"{label}: <UnderlyingTopic> is required")
    message_type = _text(elem, "MessageType", fail)
    if message_type is None:
        fail(elem, f"{label}: <MessageType> is required")
    message_type = message_type.lower()
    candidates = [s for s in sow_topics if s.topic == underlying]
    if not candidates:
        fail(elem, f"{label}: <UnderlyingTopic> {underlying!r} is not a SOW topic")
    if not any(s.message_type == message_type for s in candidates):
        types = ", ".join(sorted(s.message_type for s in candidates))
        fail(
            elem,
            f"{label}: <MessageType> {message_type!r} is not the message type of "
            f"<UnderlyingTopic> {underlying!r} ({types})",
        )
    interval = 5.0  # AMPS default
    interval_text = _text(elem, "Interval", fail)
    if interval_text is not None:
        try:
            interval = parse_duration(interval_text)
        except ValueError as exc:
            fail(elem, f"{label}: bad <Interval> {interval_text!r}: {exc}")
        if interval < MIN_INTERVAL:
            fail(elem, f"{label}: <Interval> {interval_text!r} is under the minimum of 100ms")
    filter_text = _text(elem, "Filter", fail)
    if filter_text is not None and not is_parseable(message_type):
        fail(
            elem,
            f"{label}: a <Filter> needs a message type the server parses "
            f"({', '.join(sorted(PARSEABLE_TYPES))}, a composite type with a parsed part), "
            f"not {message_type!r}",
        )
    if filter_text is not None:
        try:
            compile_filter(filter_text)
        except FilterError as exc:
            fail(elem, f"{label}: bad <Filter> {filter_text!r}: {exc}")
        opaque = opaque_filter_refusal(message_type, filter_text)
        if opaque is not None:
            fail(elem, f"{label}: <Filter>: {opaque}")
    return ConflatedTopicConfig(
        name=name,
        message_type=message_type,
        underlying=underlying,
        interval=interval,
        filter=filter_text,
        hash_indexes=parse_hash_indexes(
            elem, label, parseable=is_parseable(message_type), fail=fail
        ),
    )
