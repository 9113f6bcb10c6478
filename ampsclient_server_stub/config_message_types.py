"""Message types a configuration may name, and the ``<MessageTypes>`` section.

``<MessageTypes>`` declares composite types as the AMPS User Guide describes them
("Composite Messages",
https://docs.crankuptheamps.com/amps-user-guide/messagetypes/composite-messages)::

    <MessageTypes>
      <MessageType>
        <Name>images</Name>
        <Module>composite-global</Module>
        <MessagePart>json</MessagePart>
        <MessagePart>binary</MessagePart>
      </MessageType>
    </MessageTypes>

Each declared type is registered (:func:`.engine.composite_codec.define_composite`) before
the rest of the configuration is read, so a topic, a transport or a transaction log
``<Filter>`` can name it. A part is one of the types the server parses or ``binary``.

Types the reference server cannot implement are refused at start-up by name, so that no
``<MessageType>`` is accepted and then ignored:

* ``bflat``: the AMPS User Guide ("BFlat Messages") lists BFlat's value types but not its
  byte encoding, which belongs to the BFlat project; the server does not parse it.
* ``protobuf``: AMPS reads the ``.proto`` files a ``<MessageTypes>`` declaration names; the
  server has no protobuf schema compiler (and takes no dependency for one), so it refuses
  the module and the type.
* ``composite-local`` / ``composite-global`` named directly where a message type is
  expected: they are modules; a type declared with them in ``<MessageTypes>`` is named.

Pure apart from the process-wide registry of composite types: walks the parsed document.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Final

from .config_xml import XmlDocument
from .engine.composite_codec import COMPOSITE_MODULES, CompositeType, define_composite
from .engine.payload import PARSEABLE_TYPES

__all__ = ["UNSUPPORTED_TYPES", "check_message_types", "read_message_types"]

UNSUPPORTED_TYPES: Final = {
    "bflat": "the reference server does not parse BFlat (the AMPS guide does not document "
    "its encoding); use json, msgpack, bson, xml, fix or nvfix, or binary for opaque payloads",
    "protobuf": "protobuf needs the .proto files a <MessageTypes> declaration names, and the "
    "reference server has no protobuf schema compiler; use json, msgpack, bson, xml, fix or "
    "nvfix, a composite type, or binary for opaque payloads",
    "composite-local": "composite-local is a module: declare a type in <MessageTypes> with "
    "<Module>composite-local</Module> and its <MessagePart>s, and name that type",
    "composite-global": "composite-global is a module: declare a type in <MessageTypes> with "
    "<Module>composite-global</Module> and its <MessagePart>s, and name that type",
}
"""Refused message type names (lower case) and why."""

_PART_TYPES: Final = frozenset({*PARSEABLE_TYPES, "binary"})
_RESERVED: Final = frozenset({*_PART_TYPES, *UNSUPPORTED_TYPES})


def check_message_types(doc: XmlDocument) -> None:
    """Refuse the first ``<MessageType>`` naming an unsupported type (anywhere in ``doc``
    outside ``<MessageTypes>``, whose declarations :func:`read_message_types` reads).

    Raises:
        ConfigError: naming the type, its line and the reason.
    """
    for elem in doc.root.iter("MessageType"):
        if len(elem):  # a <MessageTypes> declaration, not a name
            continue
        name = (elem.text or "").strip().lower()
        reason = UNSUPPORTED_TYPES.get(name)
        if reason is not None:
            doc.fail(elem, f"<MessageType> {name!r} is not supported: {reason}")


def _text(elem: ET.Element, tag: str) -> str | None:
    child = elem.find(tag)
    if child is None or child.text is None or not child.text.strip():
        return None
    return child.text.strip()


def read_message_types(doc: XmlDocument) -> tuple[CompositeType, ...]:
    """The composite types ``<MessageTypes>`` declares, each registered by name.

    Raises:
        ConfigError: a declaration without a name or module, a module other than the
            composite ones (``protobuf`` and any other named with the reason), a part of a
            type that cannot be a part, a name of a built-in type or declared twice.
    """
    section = doc.root.find("MessageTypes")
    if section is None:
        return ()
    if len(doc.root.findall("MessageTypes")) > 1:
        doc.fail(doc.root.findall("MessageTypes")[1], "<MessageTypes> appears more than once")
    declared: list[CompositeType] = []
    for elem in section.findall("MessageType"):
        raw_name = _text(elem, "Name")
        if raw_name is None:
            doc.fail(elem, "<MessageTypes> <MessageType> needs a <Name>")
        name = raw_name.lower()
        where = f"<MessageTypes> <MessageType> {name!r}"
        if name in _RESERVED:
            doc.fail(elem, f"{where}: {name!r} is a built-in message type name")
        if any(t.name == name for t in declared):
            doc.fail(elem, f"{where} is declared twice")
        module = (_text(elem, "Module") or "").lower()
        if not module:
            doc.fail(elem, f"{where} needs a <Module> (composite-local or composite-global)")
        if module not in COMPOSITE_MODULES:
            reason = UNSUPPORTED_TYPES.get(module) or (
                "the reference server implements only the composite-local and "
                "composite-global modules in <MessageTypes>"
            )
            doc.fail(elem, f"{where}: <Module> {module!r} is not supported: {reason}")
        parts: list[str] = []
        for part_elem in elem.findall("MessagePart"):
            part = (part_elem.text or "").strip().lower()
            if part not in _PART_TYPES:
                doc.fail(
                    part_elem,
                    f"{where}: <MessagePart> {part!r} is not supported: a part is one of "
                    f"{', '.join(sorted(_PART_TYPES))}",
                )
            parts.append(part)
        if not parts:
            doc.fail(elem, f"{where} needs at least one <MessagePart>")
        ctype = CompositeType(name, module, tuple(parts))
        try:
            define_composite(ctype)
        except ValueError as exc:
            doc.fail(elem, f"{where}: {exc}")
        declared.append(ctype)
    _refuse_global_views(doc, {t.name for t in declared if not t.local})
    return tuple(declared)


def _refuse_global_views(doc: XmlDocument, global_types: set[str]) -> None:
    """A view (or a queue view) of a composite-global type: the guide says views, joins and
    aggregation cannot project such a type (it may be a view's underlying topic)."""
    if not global_types:
        return
    for tag in ("View", "ViewDefinition"):
        for view in doc.root.findall(f"SOW/{tag}"):
            mt = (_text(view, "MessageType") or "").lower()
            if mt in global_types:
                doc.fail(
                    view,
                    f"<{tag}> of message type {mt!r} is not supported: views, joins and "
                    "aggregation cannot project a composite-global type (AMPS User Guide, "
                    "Composite Messages); it may be the view's underlying topic",
                )
