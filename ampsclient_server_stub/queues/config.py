"""The queue elements of ``<SOW>``: ``<Queue>`` (synonym ``<QueueDefinition>``),
``<LocalQueue>`` and ``<GroupLocalQueue>`` (``shared/queues.md`` §2).

:func:`parse_queues` turns the queue elements of a ``<SOW>`` section into
:class:`QueueConfig` values. Everything the AMPS configuration reference lists is recognised;
what the reference server does not implement yet is refused with an error naming the
element (never accepted and ignored), and so are invalid combinations (for example
``Priority`` with ``BarrierExpression``) and unknown elements.

Defaults follow the AMPS configuration reference: ``Semantics`` ``at-least-once``,
``UnderlyingTopic`` the queue's own name, ``LeasePeriod`` unset (leases never time out),
``MaxPerSubscriptionBacklog`` 1, ``MaxBacklog`` unlimited, ``Priority`` unset (publication
order), ``FairnessModel`` ``proportional`` (``round-robin`` for at-most-once, the only
model it supports), ``Leasing`` ``sublet``, ``MaxDeliveries``/``MaxCancels`` 0 (no limit),
``RecoveryPoint`` ``epoch``, ``DeferredAckExpiration`` one day, ``ExpirationModel``
``default``, ``TargetQueueDepth`` unset (every message active), ``GroupLocalQueueDomain``
unset (the instance's group), ``FileBackedMetadata`` unset (``disabled``: in memory).

``UnderlyingTopic`` may be a regular expression (several journaled topics feed the queue);
it then needs ``DefaultPublishTarget``, a literal topic the expression matches, where a
publish to the queue's own name goes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, NoReturn

from ..config_values import ConfigError, parse_duration

__all__ = [
    "EXPIRATION_MODELS",
    "QUEUE_TAGS",
    "TARGET_QUEUE_DEPTH_MIN",
    "QueueConfig",
    "parse_queue",
    "parse_queues",
]

QUEUE_TAGS: Final = ("Queue", "QueueDefinition", "LocalQueue", "GroupLocalQueue")
"""The ``<SOW>`` children that define a queue."""

Kind = Literal["Queue", "LocalQueue", "GroupLocalQueue"]
Semantics = Literal["at-least-once", "at-most-once"]
Fairness = Literal["fast", "round-robin", "proportional"]
Leasing = Literal["sublet", "strict"]
ExpirationModel = Literal["default", "queue", "latest", "earliest"]

EXPIRATION_MODELS: Final = ("default", "queue", "latest", "earliest")
"""``ExpirationModel`` values: ``default`` (the message's own expiration when it has one,
else the queue's ``Expiration``), ``queue`` (always the queue's), ``latest`` (the later of
the two), ``earliest`` (the earlier of the two)."""

TARGET_QUEUE_DEPTH_MIN: Final = 1000
"""The smallest ``TargetQueueDepth`` AMPS accepts."""

_KNOWN: Final = frozenset(
    {
        "Name",
        "MessageType",
        "UnderlyingTopic",
        "DefaultPublishTarget",
        "LeasePeriod",
        "Semantics",
        "MaxBacklog",
        "MaxPerSubscriptionBacklog",
        "Expiration",
        "ExpirationModel",
        "Filter",
        "RecoveryPoint",
        "FairnessModel",
        "Leasing",
        "MaxDeliveries",
        "MaxCancels",
        "Priority",
        "BarrierExpression",
        "FileBackedMetadata",
        "TargetQueueDepth",
        "DeferredAckExpiration",
        "InitialOwner",
        "GroupLocalQueueDomain",
    }
)

_EXCLUSIVE: Final = (
    ("Priority", "BarrierExpression"),
    ("Priority", "TargetQueueDepth"),
    ("BarrierExpression", "TargetQueueDepth"),
)

_REGEX_CHARS: Final = re.compile(r"[\\^$.|?*+()\[\]{}]")

Fail = Callable[[ET.Element, str], NoReturn]
"""Reports a configuration error at an element (the configuration reader's ``fail``)."""


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """One queue of the ``<SOW>`` section (defaults: the module docstring)."""

    name: str
    """The queue topic."""
    message_type: str
    """Message type, lower case."""
    kind: Kind = "Queue"
    """``Queue`` (also ``QueueDefinition``), ``LocalQueue`` or ``GroupLocalQueue``."""
    underlying: tuple[str, ...] = ()
    """The underlying topics (the queue's own name when none is configured)."""
    semantics: Semantics = "at-least-once"
    lease_period: float | None = None
    """Seconds a subscriber holds a lease; ``None``: leases never expire."""
    max_backlog: int | None = None
    """Unacknowledged messages of the whole queue; ``None``: no limit."""
    max_per_subscription_backlog: int = 1
    expiration: float | None = None
    """Seconds after which a queued message is removed (``time_limit``); ``None``: never."""
    filter: str | None = None
    """Only messages matching this AMPS filter enter the queue."""
    recovery_point: Literal["epoch", "now", "creation"] = "epoch"
    """Where the queue starts in the transaction log when it has no saved state."""
    fairness: Fairness = "proportional"
    leasing: Leasing = "sublet"
    max_deliveries: int = 0
    """Deliveries after which a message is expired (``max_deliveries``); 0: no limit."""
    max_cancels: int = 0
    """Cancels after which a message is expired (``max_cancels``); 0: no limit."""
    deferred_ack_expiration: float = 86400.0
    """Seconds an acknowledgement of a message not (yet) in the queue is remembered."""
    initial_owner: str | None = None
    """``GroupLocalQueue``: the instance that owns every new message."""
    barrier: str | None = None
    """``BarrierExpression``: a matching message waits until every earlier one is
    acknowledged, then goes to every subscription (backlogs ignored) and leaves the queue."""
    priority: str | None = None
    """A field or expression; messages are offered highest value first (unsigned; a NULL,
    negative or non-numeric value is the lowest priority, 0); ties in publication order."""
    default_publish_target: str | None = None
    """``DefaultPublishTarget``: where a publish to the queue's name goes (a literal topic
    that an underlying topic matches); ``None``: publishes to the name stay there."""
    expiration_model: ExpirationModel = "default"
    """How ``Expiration`` and a message's own expiration combine (:data:`EXPIRATION_MODELS`)."""
    target_queue_depth: int | None = None
    """``TargetQueueDepth``: at most this many messages are active (deliverable, queryable,
    acknowledgeable by filter); later ones wait, in order; ``None``: all are active."""
    domain: str | None = None
    """``GroupLocalQueueDomain``: the queue's identity is ``(name, domain)`` instead of
    ``(name, group)`` (``GroupLocalQueue`` only)."""
    file_backed_metadata: bool = False
    """``FileBackedMetadata`` ``enabled``: the queue's messages are kept as journal positions
    (bodies read back from the journal) and its live set in a ``.queue.cache`` file in the
    journal directory (:mod:`.metadata_file`)."""

    def topics(self) -> tuple[str, ...]:
        """The underlying topics, with the default (the queue's name) applied."""
        return self.underlying or (self.name,)


def parse_queues(section: ET.Element | None, *, fail: Fail) -> tuple[QueueConfig, ...]:
    """The queues defined in a ``<SOW>`` section (``()`` for ``None``).

    Raises:
        ConfigError: through ``fail``: an invalid, unknown or not implemented element, a
            duplicate queue, a queue that shares its name with a SOW topic.
    """
    if section is None:
        return ()
    queues: list[QueueConfig] = []
    seen: set[tuple[str, str]] = set()
    sow_names = {
        (_child_text(c, "Name", fail) or "", (_child_text(c, "MessageType", fail) or "").lower())
        for c in section
        if c.tag in ("Topic", "TopicDefinition")
    }
    for elem in section:
        if elem.tag not in QUEUE_TAGS:
            continue
        queue = parse_queue(elem, fail=fail)
        key = (queue.name, queue.message_type)
        if key in seen:
            fail(elem, f"duplicate queue {queue.name!r} of message type {queue.message_type!r}")
        if key in sow_names:
            fail(elem, f"queue {queue.name!r} has the name of a SOW topic of the same type")
        seen.add(key)
        queues.append(queue)
    return tuple(queues)


def parse_queue(elem: ET.Element, *, fail: Fail) -> QueueConfig:
    """One ``<Queue>``/``<QueueDefinition>``/``<LocalQueue>``/``<GroupLocalQueue>``.

    Raises:
        ConfigError: through ``fail`` (see :func:`parse_queues`).
    """
    name, mt, kind = _check_structure(elem, fail)
    label = f"queue {name!r}"
    underlying = tuple(_texts(elem, "UnderlyingTopic", fail))
    target = _publish_target(elem, underlying, label, fail)
    semantics = _choice(elem, "Semantics", ("at-least-once", "at-most-once"), label, fail)
    sem: Semantics = "at-least-once" if semantics is None else semantics  # type: ignore[assignment]
    fairness = _choice(elem, "FairnessModel", ("fast", "round-robin", "proportional"), label, fail)
    if sem == "at-most-once":
        if fairness not in (None, "round-robin"):
            fail(
                _first(elem, "FairnessModel"),
                f"{label}: an at-most-once queue supports only FairnessModel round-robin",
            )
        fairness = "round-robin"
    leasing = _choice(elem, "Leasing", ("sublet", "strict"), label, fail) or "sublet"
    recovery = _text(elem, "RecoveryPoint", fail)
    if recovery is not None and recovery.lower() not in ("epoch", "now", "creation"):
        fail(
            _first(elem, "RecoveryPoint"),
            f"{label}: <RecoveryPoint> {recovery!r}: only epoch, now and creation are "
            "implemented by the reference server (a bookmark or timestamp is not)",
        )
    filter_text = _text(elem, "Filter", fail)
    if filter_text is not None:
        _check_parsed(elem, mt, label, fail, tag="Filter", text=filter_text)
        _check_filter(elem, filter_text, label, fail)
    barrier = _text(elem, "BarrierExpression", fail)
    if barrier is not None:
        _check_parsed(elem, mt, label, fail, tag="BarrierExpression", text=barrier)
        _check_filter(elem, barrier, label, fail, tag="BarrierExpression")
    priority = _text(elem, "Priority", fail)
    if priority is not None:
        _check_parsed(elem, mt, label, fail, tag="Priority", text=priority)
        _check_expression(elem, priority, label, fail)
    return QueueConfig(
        name=name,
        message_type=mt.lower(),
        kind=kind,
        underlying=underlying,
        semantics=sem,
        lease_period=_duration(elem, "LeasePeriod", label, fail),
        max_backlog=_integer(elem, "MaxBacklog", 1, label, fail),
        max_per_subscription_backlog=_integer(elem, "MaxPerSubscriptionBacklog", 1, label, fail)
        or 1,
        expiration=_duration(elem, "Expiration", label, fail),
        filter=filter_text,
        recovery_point="epoch" if recovery is None else recovery.lower(),  # type: ignore[arg-type]
        fairness=fairness or "proportional",  # type: ignore[arg-type]
        leasing=leasing,  # type: ignore[arg-type]
        max_deliveries=_integer(elem, "MaxDeliveries", 0, label, fail) or 0,
        max_cancels=_integer(elem, "MaxCancels", 0, label, fail) or 0,
        deferred_ack_expiration=_duration(elem, "DeferredAckExpiration", label, fail) or 86400.0,
        initial_owner=_text(elem, "InitialOwner", fail),
        barrier=barrier,
        priority=priority,
        default_publish_target=target,
        expiration_model=_choice(elem, "ExpirationModel", EXPIRATION_MODELS, label, fail)
        or "default",  # type: ignore[arg-type]
        target_queue_depth=_integer(elem, "TargetQueueDepth", TARGET_QUEUE_DEPTH_MIN, label, fail),
        domain=_text(elem, "GroupLocalQueueDomain", fail),
        file_backed_metadata=_choice(
            elem, "FileBackedMetadata", ("enabled", "disabled"), label, fail
        )
        == "enabled",
    )


def _publish_target(
    elem: ET.Element, underlying: tuple[str, ...], label: str, fail: Fail
) -> str | None:
    """``DefaultPublishTarget``, checked: required when an ``UnderlyingTopic`` is a regular
    expression, a literal topic name, and one of the queue's underlying topics."""
    from ..engine.topics import TopicError, compile_topic

    target = _text(elem, "DefaultPublishTarget", fail)
    regexes = [topic for topic in underlying if _REGEX_CHARS.search(topic)]
    for topic in regexes:
        try:
            compile_topic(topic)
        except TopicError as exc:
            fail(_first(elem, "UnderlyingTopic"), f"{label}: <UnderlyingTopic>: {exc}")
    if target is None:
        if regexes:
            fail(
                _first(elem, "UnderlyingTopic"),
                f"{label}: a regular expression <UnderlyingTopic> {regexes[0]!r} needs "
                "<DefaultPublishTarget> (where a publish to the queue's name goes)",
            )
        return None
    where = _first(elem, "DefaultPublishTarget")
    if _REGEX_CHARS.search(target):
        fail(where, f"{label}: <DefaultPublishTarget> {target!r} must be a topic name, not a regex")
    name = _child_text(elem, "Name", fail)
    if target == name:
        fail(where, f"{label}: <DefaultPublishTarget> cannot be the queue's own name")
    if not any(compile_topic(topic).matches(target) for topic in underlying):
        fail(
            where,
            f"{label}: <DefaultPublishTarget> {target!r} is not one of the queue's underlying "
            "topics (no <UnderlyingTopic> matches it)",
        )
    return target


def _check_structure(elem: ET.Element, fail: Fail) -> tuple[str, str, Kind]:
    """``(name, message type, kind)`` of a queue element whose children are all queue
    elements, in a valid combination, none of them refused as not implemented."""
    tag = elem.tag
    for child in elem:
        if child.tag not in _KNOWN:
            fail(child, f"<{child.tag}> is not a queue element (in <{tag}>)")
        if len(child):
            fail(child, f"<{child.tag}> in <{tag}> must contain text, not elements")
    name = _child_text(elem, "Name", fail)
    if name is None:
        fail(elem, f"<{tag}> has no <Name>")
    label = f"queue {name!r}"
    mt = _child_text(elem, "MessageType", fail)
    if mt is None:
        fail(elem, f"{label} has no <MessageType>")
    present = {child.tag for child in elem}
    for first, second in _EXCLUSIVE:
        if first in present and second in present:
            fail(elem, f"{label}: <{first}> cannot be combined with <{second}>")
    kind: Kind = "Queue" if tag == "QueueDefinition" else tag  # type: ignore[assignment]
    for element in ("InitialOwner", "GroupLocalQueueDomain"):
        if element in present and kind != "GroupLocalQueue":
            fail(_first(elem, element), f"{label}: <{element}> is for <GroupLocalQueue> only")
    if kind == "GroupLocalQueue" and "InitialOwner" not in present:
        fail(elem, f"{label}: <GroupLocalQueue> requires <InitialOwner>")
    return name, mt, kind


# --------------------------------------------------------------------------- helpers


def _first(elem: ET.Element, tag: str) -> ET.Element:
    found = elem.find(tag)
    assert found is not None
    return found


def _texts(elem: ET.Element, tag: str, fail: Fail) -> list[str]:
    out = []
    for child in elem.findall(tag):
        value = (child.text or "").strip()
        if not value:
            fail(child, f"<{tag}> in <{elem.tag}> is empty")
        out.append(value)
    return out


def _text(elem: ET.Element, tag: str, fail: Fail) -> str | None:
    found = elem.findall(tag)
    if len(found) > 1:
        fail(found[1], f"duplicate <{tag}> in <{elem.tag}>")
    values = _texts(elem, tag, fail)
    return values[0] if values else None


def _child_text(elem: ET.Element, tag: str, fail: Fail) -> str | None:
    child = elem.find(tag)
    if child is None:
        return None
    return (child.text or "").strip() or None


def _choice(
    elem: ET.Element, tag: str, allowed: Sequence[str], label: str, fail: Fail
) -> str | None:
    value = _text(elem, tag, fail)
    if value is None:
        return None
    if value.lower() not in allowed:
        fail(
            _first(elem, tag),
            f"{label}: <{tag}> must be one of {', '.join(allowed)}, got {value!r}",
        )
    return value.lower()


def _duration(elem: ET.Element, tag: str, label: str, fail: Fail) -> float | None:
    value = _text(elem, tag, fail)
    if value is None or value.lower() in ("disabled", "none", "0"):
        return None
    try:
        seconds = parse_duration(value)
    except ConfigError as exc:
        fail(_first(elem, tag), f"{label}: <{tag}>: {exc}")
    return seconds if seconds > 0 else None


def _integer(elem: ET.Element, tag: str, minimum: int, label: str, fail: Fail) -> int | None:
    value = _text(elem, tag, fail)
    if value is None:
        return None
    if not re.fullmatch(r"[0-9]{1,18}", value) or int(value) < minimum:
        fail(_first(elem, tag), f"{label}: <{tag}> must be an integer >= {minimum}, got {value!r}")
    return int(value)


_NON_DETERMINISTIC: Final = re.compile(r"\b(LAST_READ|UNIX_TIMESTAMP|VALUE_LOOKUP)\s*\(", re.I)


def _check_parsed(
    elem: ET.Element, mt: str, label: str, fail: Fail, *, tag: str, text: str
) -> None:
    """A ``<Filter>``, ``<BarrierExpression>`` or ``<Priority>`` reads the messages' fields:
    on a type the server carries as opaque (``binary``), or inside an opaque part of a
    composite-local type, it could only match nothing, so it is refused (as a transaction
    log's ``<Filter>`` is)."""
    from ..engine.filter_syntax import FilterError
    from ..engine.payload import PARSEABLE_TYPES, is_parseable  # the types the engine parses
    from ..engine.wire import opaque_filter_refusal

    if not is_parseable(mt.lower()):
        fail(
            _first(elem, tag),
            f"{label}: a <{tag}> needs a message type the server parses "
            f"({', '.join(sorted(PARSEABLE_TYPES))}, a composite type with a parsed part), "
            f"not {mt!r}",
        )
    try:
        opaque = opaque_filter_refusal(mt.lower(), text)
    except (FilterError, ValueError, RecursionError):
        return  # reported where it is compiled
    if opaque is not None:
        fail(_first(elem, tag), f"{label}: <{tag}>: {opaque}")


def _check_filter(
    elem: ET.Element, text: str, label: str, fail: Fail, *, tag: str = "Filter"
) -> None:
    from ..engine.filters import compile_filter  # the filter language lives in the engine

    if _NON_DETERMINISTIC.search(text):
        fail(_first(elem, tag), f"{label}: <{tag}> uses a non-deterministic function")
    try:
        compile_filter(text)
    except (ValueError, RecursionError) as exc:
        fail(_first(elem, tag), f"{label}: <{tag}> {text!r}: {exc}")


def _check_expression(elem: ET.Element, text: str, label: str, fail: Fail) -> None:
    from ..engine.filters import compile_expression  # the expression language of filters

    if _NON_DETERMINISTIC.search(text):
        fail(_first(elem, "Priority"), f"{label}: <Priority> uses a non-deterministic function")
    try:
        compile_expression(text)
    except (ValueError, RecursionError) as exc:
        fail(_first(elem, "Priority"), f"{label}: <Priority> {text!r}: {exc}")
