"""The ``fix`` and ``nvfix`` message types: ``name=value`` fields, each ended by SOH (0x01).

AMPS loads both types by default, with SOH as the field separator and ``=`` between a
field's name and its value (AMPS Configuration Guide, "Message Types"); a ``fix`` name is a
numeric tag (``35``, ``55``), an ``nvfix`` name any text (``Symbol``). Filters, SOW keys,
``select`` and ``orderby`` address a field by its name: ``/35 = 'D'``, ``<Key>/55</Key>``.

A document is a ``dict`` from name to value (a ``str``) in message order. A name that occurs
more than once (a repeating group) maps to the list of its values, which a filter treats as
it treats an array. Header and trailer tags (``8``, ``9``, ``10``) are ordinary fields: the
server neither checks nor recomputes ``BodyLength`` and ``CheckSum``.

The last field may lack its SOH (AMPS accepts such messages, FAQ "How does AMPS handle
invalid FIX/NVFIX?"); :func:`encode_fix` ends every field with one, so a ``delta_publish`` of
``5=TEST1\\x012=BAR`` over ``1=FOO\\x015=TEST1`` stores ``1=FOO\\x015=TEST1\\x012=BAR\\x01``, as
that FAQ shows. Empty fields (two SOHs in a row) are skipped.

Pure functions: bytes in, documents out, and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..errors import PayloadError

__all__ = ["FIX_TYPES", "FixFormatError", "decode_fix", "encode_fix"]

FIX_TYPES: Final = frozenset({"fix", "nvfix"})
"""The message types of this codec (lower case)."""

_SOH: Final = "\x01"

FixDocument = dict[str, "str | list[str]"]


class FixFormatError(PayloadError):
    """A payload or a document that is not ``name=value`` fields."""


def decode_fix(data: bytes, *, numeric_tags: bool) -> FixDocument:
    """Parse a ``fix`` (``numeric_tags=True``) or ``nvfix`` payload.

    Raises:
        FixFormatError: a field with no ``=`` or an empty name; with ``numeric_tags``, a
            name that is not a decimal tag.
        UnicodeDecodeError: a payload that is not UTF-8 (a ``ValueError`` too).
    """
    doc: FixDocument = {}
    for field in data.decode("utf-8").split(_SOH):
        if not field:
            continue
        name, sep, value = field.partition("=")
        if not sep or not name:
            raise FixFormatError(f"field {field[:40]!r} is not name=value")
        if numeric_tags and not (name.isascii() and name.isdigit()):
            raise FixFormatError(f"fix tag {name[:40]!r} is not a number")
        prior = doc.get(name)
        if prior is None:
            doc[name] = value
        elif isinstance(prior, list):
            prior.append(value)
        else:
            doc[name] = [prior, value]
    return doc


def _text(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, str | int | float):
        text = str(value)
        if _SOH in text:
            raise FixFormatError(f"the value of {name!r} contains the field separator")
        return text
    raise FixFormatError(f"the value of {name!r} is a {type(value).__name__}, not a scalar")


def encode_fix(doc: object) -> bytes:
    """Serialise a document: ``name=value`` and SOH for each field (each value of a list).

    Raises:
        FixFormatError: not a mapping, a name with ``=`` or SOH, or a value that is not a
            scalar (or a list of scalars) or contains SOH.
    """
    if not isinstance(doc, Mapping):
        raise FixFormatError(f"a fix/nvfix document is a mapping, not a {type(doc).__name__}")
    parts: list[str] = []
    for name, value in doc.items():
        name = str(name)
        if not name or "=" in name or _SOH in name:
            raise FixFormatError(f"field name {name!r} cannot be written")
        for item in value if isinstance(value, list) else (value,):
            parts.append(f"{name}={_text(name, item)}{_SOH}")
    return "".join(parts).encode("utf-8")
