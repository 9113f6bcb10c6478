"""Message types a configuration may name: those the reference server cannot implement are
refused at start-up by name, so that no ``<MessageType>`` is accepted and then ignored.

* ``bflat``: the AMPS User Guide ("BFlat Messages") lists BFlat's value types but not its
  byte encoding, which belongs to the BFlat project; the server does not parse it.
* ``protobuf``: AMPS needs the ``.proto`` files that a ``<MessageTypes>`` definition names;
  the server does not implement ``<MessageTypes>`` (refused as an unknown element).
* ``composite-local`` / ``composite-global`` (and any name AMPS only knows through a
  ``<MessageTypes>`` definition): the same.

Pure: walks the parsed document, does no I/O.
"""

from __future__ import annotations

from typing import Final

from .config_xml import XmlDocument

__all__ = ["UNSUPPORTED_TYPES", "check_message_types"]

UNSUPPORTED_TYPES: Final = {
    "bflat": "the reference server does not parse BFlat (the AMPS guide does not document "
    "its encoding); use json, msgpack, bson, xml, fix or nvfix, or binary for opaque payloads",
    "protobuf": "protobuf needs a <MessageTypes> definition naming .proto files, which the "
    "reference server does not implement",
    "composite-local": "composite message types need a <MessageTypes> definition, which the "
    "reference server does not implement",
    "composite-global": "composite message types need a <MessageTypes> definition, which the "
    "reference server does not implement",
}
"""Refused message type names (lower case) and why."""


def check_message_types(doc: XmlDocument) -> None:
    """Refuse the first ``<MessageType>`` (anywhere in ``doc``) naming an unsupported type.

    Raises:
        ConfigError: naming the type, its line and the reason.
    """
    for elem in doc.root.iter("MessageType"):
        name = (elem.text or "").strip().lower()
        reason = UNSUPPORTED_TYPES.get(name)
        if reason is not None:
            doc.fail(elem, f"<MessageType> {name!r} is not supported: {reason}")
