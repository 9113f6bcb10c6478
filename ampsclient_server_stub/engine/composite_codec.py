"""Composite message types: a message made of parts, each of an existing message type.

AMPS User Guide, "Composite Messages"
(https://docs.crankuptheamps.com/amps-user-guide/messagetypes/composite-messages): a type is
declared in ``<MessageTypes>`` with its name, the module ``composite-local`` or
``composite-global`` and its parts in order (``<MessagePart>json</MessagePart>``, ...).

On the wire each part is preceded by its length, a 4-byte big-endian unsigned integer: the
layout the official clients' ``CompositeMessageBuilder`` writes and their
``CompositeMessageParser`` reads (``tests/server/test_composite_types.py`` compares bytes
with the official Python client's builder). Bytes after the last declared part are the
message's unparsed payload (the guide: every composite type has one, undeclared): carried
unchanged, never parsed. A message with fewer parts than declared lacks the missing ones; a
length that runs past the end of the message makes the message malformed.

A document is a ``dict``:

* ``composite-local`` keeps the parts apart, keyed by their position: ``/0/id`` is the
  ``id`` field of the first part. A ``binary`` part (and the unparsed payload, at the
  position after the last declared part) is an :class:`OpaquePart`: it can be projected
  (``select=[-/,+/0,+/1]``) but no filter matches inside it. Projection and ``delta_publish``
  merge work part by part and the message is written back part by part.
* ``composite-global`` merges the identifiers of every parsable part into one document
  (``/id``); an identifier found in two parts has both values, which a filter treats as an
  array. Binary parts have no identifiers. As the guide restricts it, such messages are never
  rebuilt from a document: no ``delta_publish``, no delta subscription, no projection.

The registry (:func:`define_composite`, :func:`composite_type`) holds the types the
configurations read in this process; a name defined twice differently is refused.

Pure functions and an in-memory registry: no I/O.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import PayloadError

__all__ = [
    "COMPOSITE_MODULES",
    "CompositeFormatError",
    "CompositeType",
    "OpaquePart",
    "composite_record_refusal",
    "composite_refusal",
    "composite_type",
    "decode_composite",
    "define_composite",
    "encode_composite",
    "opaque_part_refusal",
    "opaque_slot",
    "split_composite",
    "stats_ack_refusal",
]

COMPOSITE_MODULES: Final = frozenset({"composite-local", "composite-global"})
"""The ``<Module>`` values of a composite ``<MessageType>``."""

_LEN: Final = struct.Struct(">I")


class CompositeFormatError(PayloadError):
    """A composite payload whose part lengths run past its end, or a document that cannot be
    written as its composite type."""


@dataclass(frozen=True, slots=True)
class CompositeType:
    """One composite ``<MessageType>`` of ``<MessageTypes>``."""

    name: str
    """The type's name, lower case (what a transport, a topic and a connection URI name)."""
    module: str
    """``composite-local`` or ``composite-global``."""
    parts: tuple[str, ...]
    """The message type of each part, in order (lower case)."""

    @property
    def local(self) -> bool:
        """Whether parts are addressed by position (``composite-local``)."""
        return self.module == "composite-local"


@dataclass(frozen=True, slots=True)
class OpaquePart:
    """An uninterpreted part (``binary``, or the unparsed payload) inside a document: whole,
    it can be projected; no filter compares it with anything."""

    data: bytes


def split_composite(data: bytes, count: int) -> tuple[list[bytes], bytes]:
    """``(parts, unparsed payload)`` of ``data`` for a type of ``count`` declared parts.

    Raises:
        CompositeFormatError: a length prefix cut short, or a part longer than what follows.
    """
    parts: list[bytes] = []
    pos = 0
    size = len(data)
    while len(parts) < count and pos < size:
        if pos + 4 > size:
            raise CompositeFormatError(f"part {len(parts)}: a length prefix cut short")
        (length,) = _LEN.unpack_from(data, pos)
        pos += 4
        if pos + length > size:
            raise CompositeFormatError(
                f"part {len(parts)}: {length} bytes announced, {size - pos} left"
            )
        parts.append(data[pos : pos + length])
        pos += length
    return parts, data[pos:]


def _merge_global(into: dict[str, Any], doc: Mapping[str, Any]) -> None:
    """Add ``doc``'s identifiers to ``into``: objects merge, a repeated leaf holds both."""
    for name, value in doc.items():
        prior = into.get(name)
        if name not in into:
            into[name] = value
        elif isinstance(prior, dict) and isinstance(value, Mapping):
            merged = dict(prior)
            _merge_global(merged, value)
            into[name] = merged
        else:
            into[name] = [*(prior if isinstance(prior, list) else [prior]), value]


def decode_composite(
    ctype: CompositeType, data: bytes, decode_part: Callable[[str, bytes], Any]
) -> dict[str, Any]:
    """The document of a composite payload (see the module docstring for its shape).

    ``decode_part(message_type, bytes)`` parses one part (``None``: not parseable).

    Raises:
        CompositeFormatError: a malformed layout, or a parsable part that does not parse.
    """
    parts, rest = split_composite(data, len(ctype.parts))
    doc: dict[str, Any] = {}
    for index, raw in enumerate(parts):
        part_type = ctype.parts[index]
        if not raw:
            continue  # an empty part has no identifiers
        if part_type == "binary":
            if ctype.local:
                doc[str(index)] = OpaquePart(raw)
            continue
        part_doc = decode_part(part_type, raw)
        if part_doc is None:
            raise CompositeFormatError(f"part {index} is not a valid {part_type} message")
        if ctype.local:
            doc[str(index)] = part_doc
        elif isinstance(part_doc, Mapping):
            _merge_global(doc, part_doc)
        else:
            raise CompositeFormatError(
                f"part {index} ({part_type}) is not an object: composite-global merges objects"
            )
    if rest and ctype.local:
        doc[str(len(ctype.parts))] = OpaquePart(rest)
    return doc


def encode_composite(
    ctype: CompositeType, doc: Any, encode_part: Callable[[str, Any], bytes]
) -> bytes:
    """A ``composite-local`` document written back as its type, part by part: a part the
    document lacks is written empty, the unparsed payload (if kept) follows the parts.

    Raises:
        CompositeFormatError: a ``composite-global`` type (never rebuilt from a document, as
            the guide restricts it), a document that is not an object, or a binary part that
            is not an :class:`OpaquePart`.
    """
    if not ctype.local:
        raise CompositeFormatError(
            f"{ctype.name!r} is composite-global: its messages are not rebuilt from a document "
            "(AMPS supports neither delta publish nor projection for composite-global)"
        )
    if not isinstance(doc, Mapping):
        raise CompositeFormatError(f"a {ctype.name} document must be an object")
    out = bytearray()
    for index, part_type in enumerate(ctype.parts):
        value = doc.get(str(index))
        if value is None:
            raw = b""
        elif part_type == "binary" or isinstance(value, OpaquePart):
            if not isinstance(value, OpaquePart):
                raise CompositeFormatError(f"part {index} is binary: it is kept whole")
            raw = value.data
        else:
            raw = encode_part(part_type, value)
        out += _LEN.pack(len(raw))
        out += raw
    rest = doc.get(str(len(ctype.parts)))
    if isinstance(rest, OpaquePart):
        out += rest.data
    return bytes(out)


# --------------------------------------------------------------------------- registry

_lock = threading.Lock()
_defined: dict[str, CompositeType] = {}


def define_composite(ctype: CompositeType) -> None:
    """Make ``ctype`` known by its name in this process (idempotent for an equal type).

    Raises:
        ValueError: the name is already defined with another module or other parts.
    """
    with _lock:
        prior = _defined.get(ctype.name)
        if prior is not None and prior != ctype:
            raise ValueError(
                f"message type {ctype.name!r} is already defined differently in this process "
                f"({prior.module}: {', '.join(prior.parts)})"
            )
        _defined[ctype.name] = ctype


def composite_type(name: str) -> CompositeType | None:
    """The composite type called ``name`` (lower case), or ``None``."""
    return _defined.get(name)


def composite_refusal(message_type: str, what: str) -> str | None:
    """Why ``what`` (``delta publish``, ``delta subscribe``, ``select``) is refused on
    ``message_type``, or ``None`` when it is not: the guide supports neither delta publish,
    delta subscribe nor projection for ``composite-global`` types."""
    ctype = _defined.get(message_type.lower())
    if ctype is None or ctype.local:
        return None
    return (
        f"{what} is not supported for {ctype.name!r}, a composite-global message type "
        "(AMPS User Guide, Composite Messages)"
    )


def stats_ack_refusal(message_type: str) -> str | None:
    """Why a ``stats`` ack is refused on a connection of ``message_type``, or ``None`` when it
    is not: the guide says composite types, whatever their module, do not support features
    that construct messages, "such as subscriptions to the AMPS/.* topics and stats acks"."""
    if message_type.lower() not in _defined:
        return None
    return (
        f"a stats ack is not delivered as {message_type!r}, a composite message type: "
        "composite types do not support stats acks (AMPS User Guide, Composite Messages)"
    )


def composite_record_refusal(ctype: CompositeType, paths: Sequence[str]) -> str | None:
    """Why projected fields written at ``paths`` (``/0/total``, ...) cannot make a record of
    ``ctype`` built by a view or an aggregated query, or ``None`` when they can.

    A ``composite-local`` record is built as its messages are read (module docstring): an
    identifier begins with the position of its part, so ``/0/total`` is the ``total`` field of
    the first part and ``/1`` a whole part (a binary part, or the unparsed payload at the
    position after the last declared part, is only projected whole: it is opaque); each part
    is then written as its own type (a fix or nvfix part has no nested fields, an xml part one
    root element). The guide lets views and aggregation project ``composite-local`` types, not
    ``composite-global`` ones (AMPS User Guide, Composite Messages).
    """
    if not ctype.local:
        return (
            f"views, joins and aggregation cannot project {ctype.name!r}, a composite-global "
            "type (AMPS User Guide, Composite Messages)"
        )
    count = len(ctype.parts)
    roots: dict[int, set[str]] = {}
    for path in paths:
        steps = path.strip("/").split("/")
        head = steps[0]
        if not head.isdigit() or int(head) > count:
            return (
                f"{path!r}: an identifier of {ctype.name!r} (composite-local) begins with the "
                f"position of its part, /0/ to /{count - 1}/ (/{count}: the unparsed payload)"
            )
        index = int(head)
        part = ctype.parts[index] if index < count else "binary"
        if part == "binary" and len(steps) > 1:
            what = "the unparsed payload" if index == count else f"part {index} is binary"
            return f"{path!r}: {what}: it is opaque, only projected whole (/{index})"
        if part in ("fix", "nvfix") and len(steps) > 2:
            return f"{path!r}: part {index} is {part}, which has no nested fields (/{index}/name)"
        if part == "xml" and len(steps) > 1:
            roots.setdefault(index, set()).add(steps[1])
            if len(roots[index]) > 1 or len(steps) < 3:
                return (
                    f"{path!r}: part {index} is xml, one root element: project its fields as "
                    f"/{index}/Root/name (the same Root for every field)"
                )
    return None


def opaque_slot(ctype: CompositeType | None, path: str) -> bool:
    """Whether ``path`` of a record of type ``ctype`` is a whole binary part or the unparsed
    payload of a composite-local type: the only place a copy of an opaque part can go."""
    step = path.strip("/")
    if ctype is None or not ctype.local or not step.isdigit():
        return False
    index, parts = int(step), ctype.parts
    return index == len(parts) or (index < len(parts) and parts[index] == "binary")


def opaque_part_refusal(ctype: CompositeType, steps: Sequence[str | int]) -> str | None:
    """Why an identifier (its ``steps``) that reads inside a binary part, or the unparsed
    payload, of the ``composite-local`` type ``ctype`` is refused in a filter or an ``orderby``
    (``None``: it does not): such a part is opaque, it has no identifiers (``select`` may still
    keep it whole)."""
    if not ctype.local or not steps or not isinstance(steps[0], str) or not steps[0].isdigit():
        return None
    index, count = int(steps[0]), len(ctype.parts)
    if (index < count and ctype.parts[index] != "binary") or index > count:
        return None
    what = "the unparsed payload" if index == count else f"part {index} is binary"
    path = "/" + "/".join(str(step) for step in steps)
    return f"{path!r}: {what} of {ctype.name!r}: it is opaque, nothing in it is read"
