"""Message-type codecs and document helpers for the reference server.

Pure functions, no I/O:

* :func:`decode` / :func:`encode`: payload bytes <-> parsed document for the
  message types the server understands (``json``, ``msgpack``, ``fix``/``nvfix``
  through :mod:`.fix_codec`, ``xml`` through :mod:`.xml_codec`, ``bson`` through
  :mod:`.bson_codec`, and the composite types a ``<MessageTypes>`` declared through
  :mod:`.composite_codec`).  Every other type (``binary``, ``bflat``, ...) is opaque:
  :func:`decode` returns ``None`` ("not parseable") and :func:`encode` only passes
  bytes through.
* :func:`delta_merge`: the ``delta_publish`` merge (amps-semantics.md 2.2).
* :func:`parse_select` / :func:`apply_select`: ``select=[...]`` projection (2.4).
* :func:`parse_order_by`: ``/field [ASC|DESC] [TEXT]`` sort specification (2.3).
* :func:`parse_options`: AMPS option strings (``o`` header), bracket aware.
* :func:`lookup_path`: the XPath-like ``/a/b`` field lookup shared with the
  SOW engine (delegates to ``filters.get_path`` when that module provides it).
"""

from __future__ import annotations

import importlib
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from ..errors import OptionError
from .bson_codec import decode_bson, encode_bson
from .composite_codec import composite_type, decode_composite, encode_composite
from .filter_values import parse_num
from .fix_codec import FIX_TYPES, decode_fix, encode_fix
from .xml_codec import decode_xml, encode_xml

__all__ = [
    "PARSEABLE_TYPES",
    "OrderBy",
    "OrderByError",
    "OrderField",
    "Select",
    "SelectDirective",
    "SelectError",
    "apply_select",
    "decode",
    "delta_merge",
    "encode",
    "is_parseable",
    "lookup_path",
    "parse_options",
    "parse_order_by",
    "parse_path",
    "parse_select",
    "unparsed_refusal",
]

_log = logging.getLogger(__name__)

#: Message types whose payloads :func:`decode` can parse (lower case).
PARSEABLE_TYPES: Final = frozenset({"json", "msgpack", "xml", "bson", *FIX_TYPES})


# --------------------------------------------------------------------------- codecs


def is_parseable(message_type: str) -> bool:
    """Return whether payloads of ``message_type`` can be decoded into documents (a
    composite type when one of its parts can)."""
    mtype = message_type.lower()
    if mtype in PARSEABLE_TYPES:
        return True
    ctype = composite_type(mtype)
    return ctype is not None and any(part in PARSEABLE_TYPES for part in ctype.parts)


def unparsed_refusal(message_type: str, what: str) -> str | None:
    """Why ``what`` (``select``, ``orderby``, ``delta publish``, ...) is refused on
    ``message_type``, or ``None`` when the server parses that type: the AMPS User Guide
    ("Message Types") says that for ``binary``, with no set format, "none of the capabilities
    that rely on parsing data are supported"; a type the server does not parse is opaque the
    same way."""
    if is_parseable(message_type):
        return None
    return (
        f"{what} reads the message's fields, and {message_type!r} messages are opaque here "
        f"(the server parses {', '.join(sorted(PARSEABLE_TYPES))} and composite types with a "
        "parsed part; AMPS User Guide, Message Types: binary supports no capability that "
        "relies on parsing data)"
    )


def decode(message_type: str, data: bytes) -> Any:
    """Parse ``data`` according to ``message_type``.

    Returns the parsed document, or ``None`` when the type is opaque (``binary``
    and anything not in :data:`PARSEABLE_TYPES`) or the payload is malformed.  Never
    raises for bad input: a malformed payload is logged at debug level.
    """
    mtype = message_type.lower()
    if mtype not in PARSEABLE_TYPES or not data:
        ctype = composite_type(mtype) if data else None
        if ctype is None:
            return None
        try:
            return decode_composite(ctype, bytes(data), decode)
        except ValueError as exc:  # CompositeFormatError is a PayloadError (a ValueError)
            _log.debug("unparseable %s payload (%d bytes): %s", mtype, len(data), exc)
            return None
    try:
        if mtype == "json":
            return json.loads(data)
        if mtype == "msgpack":
            return msgpack.unpackb(data, raw=False)
        if mtype == "xml":
            return decode_xml(data)
        if mtype == "bson":
            return decode_bson(data)
        return decode_fix(data, numeric_tags=mtype == "fix")
    except Exception as exc:  # json: ValueError/UnicodeDecodeError; msgpack: many kinds
        _log.debug("unparseable %s payload (%d bytes): %s", mtype, len(data), exc)
        return None


def encode(message_type: str, doc: Any) -> bytes:
    """Serialise ``doc`` as ``message_type``.

    ``json`` is compact (``separators=(",", ":")``); ``msgpack`` uses the bin
    type for bytes.  For opaque types only ``bytes``/``bytearray``/``memoryview``
    are accepted (passed through); anything else raises :class:`ValueError`, as
    does a document the codec cannot represent.
    """
    mtype = message_type.lower()
    try:
        if mtype == "json":
            return json.dumps(doc, separators=(",", ":")).encode("utf-8")
        if mtype == "msgpack":
            packed: bytes = msgpack.packb(doc, use_bin_type=True)
            return packed
        if mtype in FIX_TYPES:
            return encode_fix(doc)
        if mtype == "xml":
            return encode_xml(doc)
        if mtype == "bson":
            return encode_bson(doc)
        ctype = composite_type(mtype)
        if ctype is not None:
            return encode_composite(ctype, doc, encode)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"cannot encode document as {message_type}: {exc}") from exc
    if isinstance(doc, bytes | bytearray | memoryview):
        return bytes(doc)
    raise ValueError(f"message type {message_type!r} cannot encode a {type(doc).__name__}")


# --------------------------------------------------------------------------- paths


def parse_path(path: str) -> tuple[str, ...]:
    """Split an identifier such as ``/a/b`` into ``("a", "b")``; ``/`` is ``()``.

    Raises :class:`ValueError` when ``path`` does not start with ``/`` or has an
    empty segment (``/a//b``, ``/a/``).
    """
    if not path.startswith("/"):
        raise ValueError(f"path must start with '/': {path!r}")
    if path == "/":
        return ()
    parts = tuple(path[1:].split("/"))
    if any(not p for p in parts):
        raise ValueError(f"empty segment in path {path!r}")
    return parts


def _walk(doc: Any, parts: tuple[str, ...]) -> Any:
    cur = doc
    for part in parts:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
        if cur is None:
            return None
    return cur


def _fallback_get_path(doc: Any, path: str) -> Any:
    """Local stand-in for ``filters.get_path``: walk nested objects, ``None`` if absent."""
    try:
        parts = parse_path(path)
    except ValueError:
        return None
    return _walk(doc, parts)


_get_path_impl: Callable[[Any, str], Any] | None = None


def _resolve_get_path() -> Callable[[Any, str], Any]:
    # ampsclient_server_stub/engine/filters.py (written separately) owns the
    # canonical ``get_path(doc, "/a/b") -> Any | None``.  It is looked up lazily,
    # on first use, so that filters.py may itself import this module without a
    # cycle, and so that this module works while filters.py does not exist yet.
    try:
        module = importlib.import_module(".filters", __package__)
        impl = module.get_path
    except (ImportError, AttributeError):
        _log.debug("engine.filters.get_path unavailable; using local path lookup")
        return _fallback_get_path
    if not callable(impl):
        return _fallback_get_path
    return impl  # type: ignore[no-any-return]


def lookup_path(doc: Any, path: str) -> Any:
    """Return the value at ``path`` (``/a/b``) in ``doc``, or ``None`` when absent."""
    global _get_path_impl
    if _get_path_impl is None:
        _get_path_impl = _resolve_get_path()
    return _get_path_impl(doc, path)


# --------------------------------------------------------------------------- delta merge


def delta_merge(old: Any, delta: Any) -> Any:
    """Merge a ``delta_publish`` document into the stored one (amps-semantics.md 2.2).

    Objects merge recursively by field name: fields present in ``delta``
    overwrite, absent fields are kept, new fields are appended.  Arrays and
    scalars are replaced whole (arrays are never merged element-wise); a JSON
    ``null`` in the delta is stored as ``null``.  When either side is not an
    object the delta replaces the old value.  Neither input is mutated.
    """
    if not isinstance(old, dict) or not isinstance(delta, dict):
        return delta
    merged = dict(old)
    for name, value in delta.items():
        prior = merged.get(name)
        if isinstance(prior, dict) and isinstance(value, dict):
            merged[name] = delta_merge(prior, value)
        else:
            merged[name] = value
    return merged


# --------------------------------------------------------------------------- select


class SelectError(OptionError):
    """A ``select=[...]`` specification could not be parsed."""


@dataclass(frozen=True, slots=True)
class SelectDirective:
    """One ``+/path`` (``include=True``) or ``-/path`` directive; ``path=()`` is ``/``."""

    include: bool
    path: tuple[str, ...]

    def __str__(self) -> str:
        return ("+" if self.include else "-") + "/" + "/".join(self.path)


@dataclass(frozen=True, slots=True)
class Select:
    """A parsed ``select`` list; directives are applied left to right."""

    directives: tuple[SelectDirective, ...]

    def apply(self, doc: Any) -> Any:
        """Shorthand for :func:`apply_select`."""
        return apply_select(doc, self)

    def __str__(self) -> str:
        return "[" + ",".join(str(d) for d in self.directives) + "]"


def parse_select(spec: str) -> Select:
    """Parse ``[-/,+/a/b]`` (brackets optional) into a :class:`Select`.

    Each comma separated directive is ``+`` or ``-`` immediately followed by an
    identifier; ``-/`` / ``+/`` address the whole message.  Raises
    :class:`SelectError` for an empty list or a malformed directive.
    """
    text = spec.strip()
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")):
            raise SelectError(f"unbalanced brackets in select {spec!r}")
        text = text[1:-1]
    directives: list[SelectDirective] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if item[0] not in "+-":
            raise SelectError(f"select directive must start with '+' or '-': {item!r}")
        try:
            path = parse_path(item[1:])
        except ValueError as exc:
            raise SelectError(f"bad select directive {item!r}: {exc}") from None
        directives.append(SelectDirective(item[0] == "+", path))
    if not directives:
        raise SelectError(f"empty select {spec!r}")
    return Select(tuple(directives))


def _copy_along(result: dict[str, Any], parts: tuple[str, ...]) -> dict[str, Any] | None:
    """Return the parent dict of ``parts[-1]`` inside ``result``, copying each dict on
    the way (they may be shared with the source document); ``None`` if not a dict path."""
    cur = result
    for part in parts[:-1]:
        child = cur.get(part)
        if not isinstance(child, dict):
            return None
        child = dict(child)
        cur[part] = child
        cur = child
    return cur


def _reorder(result: Any, source: Any) -> Any:
    if not isinstance(result, dict) or not isinstance(source, dict):
        return result
    return {k: _reorder(result[k], source[k]) for k in source if k in result}


def apply_select(doc: Any, select: Select) -> Any:
    """Project ``doc`` through ``select`` (amps-semantics.md 2.4).

    Starts from the full document; ``-/path`` removes, ``+/path`` adds the
    source value back (creating parent objects as needed), left to right.  The
    output keeps the source document's field order at every level, so
    ``[-/,+/subId,+/bookmark]`` on ``{"clientName":..,"subId":..,"bookmark":..}``
    yields ``{"subId":..,"bookmark":..}``.  Paths that do not exist in the
    source are ignored.  Non-object documents (``None`` for opaque payloads,
    arrays, scalars) are returned unchanged.  ``doc`` is not mutated.
    """
    if not isinstance(doc, dict):
        return doc
    result: dict[str, Any] = dict(doc)
    for directive in select.directives:
        path = directive.path
        if not path:
            result = dict(doc) if directive.include else {}
            continue
        if directive.include:
            if not _has_path(doc, path):
                continue
            value = _walk(doc, path)
            cur = result
            for part in path[:-1]:
                child = cur.get(part)
                child = dict(child) if isinstance(child, dict) else {}
                cur[part] = child
                cur = child
            cur[path[-1]] = value
        else:
            parent = _copy_along(result, path)
            if parent is not None:
                parent.pop(path[-1], None)
    ordered: dict[str, Any] = _reorder(result, doc)
    return ordered


def _has_path(doc: Any, parts: tuple[str, ...]) -> bool:
    cur = doc
    for part in parts:
        if not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return True


# --------------------------------------------------------------------------- order_by


class OrderByError(OptionError):
    """An ``order_by`` specification could not be parsed."""


@dataclass(frozen=True, slots=True)
class OrderField:
    """One ``/field [ASC|DESC] [TEXT]`` element of an ``order_by`` list."""

    path: str
    descending: bool = False
    text: bool = False


# Mixed-type ranks: NULL/absent < booleans < numbers < strings < anything else.
_RANK_NULL: Final = 0
_RANK_BOOL: Final = 1
_RANK_NUMBER: Final = 2
_RANK_STRING: Final = 3
_RANK_OTHER: Final = 4


def _normalise(value: Any, text: bool) -> tuple[int, Any]:
    """Map a field value to a totally ordered ``(rank, comparable)`` pair."""
    if value is None:
        return (_RANK_NULL, 0)
    if text:
        return (_RANK_STRING, _as_text(value))
    if isinstance(value, bool):
        return (_RANK_BOOL, int(value))
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return (_RANK_NUMBER, -math.inf)
        return (_RANK_NUMBER, value)
    if isinstance(value, str):
        number = parse_num(value.strip())
        if number is not None:  # a number written as text (every fix/nvfix value is text)
            return (_RANK_NUMBER, number)
        return (_RANK_STRING, value)
    return (_RANK_OTHER, _as_text(value))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


class _SortItem:
    """Comparable wrapper for one sort field, honouring ``DESC``."""

    __slots__ = ("descending", "value")

    def __init__(self, value: tuple[int, Any], descending: bool) -> None:
        self.value = value
        self.descending = descending

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SortItem) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __lt__(self, other: _SortItem) -> bool:
        if self.descending:
            return bool(other.value < self.value)
        return bool(self.value < other.value)

    def __repr__(self) -> str:
        return f"_SortItem({self.value!r}, desc={self.descending})"


@dataclass(frozen=True, slots=True)
class OrderBy:
    """A parsed ``order_by``; use :meth:`key` as a ``sorted`` key over documents.

    Default (non-``TEXT``) ordering is a mixed-type sort: ``null``/absent first
    (for ``ASC``), then booleans, numbers (a string that spells a number counts as
    that number, as the filter language compares it), strings, then other values by
    their JSON text.  ``TEXT`` compares the string form.  ``DESC`` reverses a field.
    Python's sort is stable, so ties keep the input order.
    """

    fields: tuple[OrderField, ...]

    def key(self, doc: Any) -> tuple[_SortItem, ...]:
        """Sort key of ``doc`` (``None`` docs sort as all fields absent)."""
        return tuple(
            _SortItem(_normalise(lookup_path(doc, f.path), f.text), f.descending)
            for f in self.fields
        )

    def __str__(self) -> str:
        return ", ".join(
            f.path + (" DESC" if f.descending else " ASC") + (" TEXT" if f.text else "")
            for f in self.fields
        )


def parse_order_by(text: str) -> OrderBy:
    """Parse ``"/orderDate DESC, /customerName ASC"`` style specifications.

    Each comma separated element is a path starting with ``/`` followed by at
    most one of ``ASC``/``DESC`` and optionally ``TEXT`` (case insensitive, any
    order).  Raises :class:`OrderByError` on anything else, including an empty
    specification.
    """
    fields: list[OrderField] = []
    for element in text.split(","):
        tokens = element.split()
        if not tokens:
            raise OrderByError(f"empty element in order_by {text!r}")
        path = tokens[0]
        try:
            if not parse_path(path):
                raise ValueError("the whole message is not a sort field")
        except ValueError as exc:
            raise OrderByError(f"bad order_by field {path!r}: {exc}") from None
        direction: str | None = None
        is_text = False
        for token in tokens[1:]:
            upper = token.upper()
            if upper in ("ASC", "DESC"):
                if direction is not None:
                    raise OrderByError(f"duplicate direction for {path!r} in {text!r}")
                direction = upper
            elif upper == "TEXT":
                if is_text:
                    raise OrderByError(f"duplicate TEXT for {path!r} in {text!r}")
                is_text = True
            else:
                raise OrderByError(f"unexpected {token!r} in order_by {text!r}")
        fields.append(OrderField(path, direction == "DESC", is_text))
    return OrderBy(tuple(fields))


# --------------------------------------------------------------------------- options

_OPEN: Final = {"[": "]", "(": ")", "{": "}"}
_CLOSE: Final = frozenset(_OPEN.values())


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_options(o: str) -> dict[str, str]:
    """Parse an AMPS options string into ``{name: value}``.

    Options are comma separated; commas inside ``[...]``, ``(...)`` or
    ``{...}`` do not split, so ``select=[-/,+/subId]`` stays one option whose
    value keeps its brackets.  ``name=value`` splits at the first ``=``;
    flags such as ``oof`` map to ``""``.  Names and values are stripped of
    surrounding whitespace, names are lower-cased, empty items are skipped and
    a repeated name keeps the last value.
    """
    options: dict[str, str] = {}
    for item in _split_top_level(o):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not name:
            _log.debug("ignoring option without a name: %r", item)
            continue
        options[name] = value.strip() if sep else ""
    return options
