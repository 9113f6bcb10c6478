"""The ``xml`` message type: one XML element per message, addressed with AMPS identifiers.

AMPS identifiers are an XPath subset (AMPS User Guide, "AMPS Expressions / Identifiers"):
``/Order/Symbol`` is the ``Symbol`` element of an ``Order`` message, ``/Order/@update`` its
``update`` attribute; no wildcards, relative paths, predicates or functions. A document is
therefore a nested ``dict``:

* the root element is the one key of the document: ``{"Order": {...}}``;
* an attribute is the key ``"@name"``; a child element is its tag; both in document order;
* an element with only text (or nothing) is that text (``""`` when empty); an element with
  attributes or children is a ``dict``; a repeated child is the list of its values, which a
  filter treats as an array (as AMPS treats repeated FIX tags);
* text beside child elements or attributes is kept under ``"#text"`` (whitespace-only text
  between child elements is layout and dropped).

Namespace prefixes are part of a name, as written (``ns:Order``, ``@xmlns:ns``): address
them with the bracketed identifier syntax, ``[/ns:Order/ns:Symbol]``.

XML from clients is hostile: a DOCTYPE (so every DTD and entity declaration) is refused,
only the five predefined entities and character references are expanded, and a payload
larger than :data:`MAX_XML_BYTES` or nested deeper than :data:`MAX_XML_DEPTH` is refused.
Parsing uses the stdlib's expat directly (no ElementTree), so nothing is fetched or expanded.

Pure functions: bytes in, documents out, and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from xml.parsers import expat
from xml.sax.saxutils import escape, quoteattr

from ..errors import PayloadError

__all__ = ["MAX_XML_BYTES", "MAX_XML_DEPTH", "XmlFormatError", "decode_xml", "encode_xml"]

MAX_XML_BYTES: Final = 4 * 1024 * 1024
"""The largest ``xml`` payload the server parses."""

MAX_XML_DEPTH: Final = 64
"""The deepest element nesting the server parses."""

TEXT_KEY: Final = "#text"


class XmlFormatError(PayloadError):
    """A payload that is not one well-formed, DTD-free XML element, or a document that
    cannot be written as one."""


class _Builder:
    """expat handlers building the nested-dict document."""

    def __init__(self) -> None:
        # each frame: (tag, attributes/children dict, text parts)
        self.stack: list[tuple[str, dict[str, Any], list[str]]] = []
        self.root: dict[str, Any] | None = None

    def start(self, tag: str, attrs: list[str]) -> None:
        if len(self.stack) >= MAX_XML_DEPTH:
            raise XmlFormatError(f"elements nested deeper than {MAX_XML_DEPTH}")
        node: dict[str, Any] = {}
        for i in range(0, len(attrs), 2):
            node["@" + attrs[i]] = attrs[i + 1]
        self.stack.append((tag, node, []))

    def end(self, tag: str) -> None:
        _, node, texts = self.stack.pop()
        text = "".join(texts)
        value: Any
        if not node:
            value = text
        else:
            if text.strip():
                node[TEXT_KEY] = text
            value = node
        if not self.stack:
            self.root = {tag: value}
            return
        parent = self.stack[-1][1]
        prior = parent.get(tag)
        if tag not in parent:
            parent[tag] = value
        elif isinstance(prior, list):
            prior.append(value)
        else:
            parent[tag] = [prior, value]

    def chars(self, data: str) -> None:
        if self.stack:
            self.stack[-1][2].append(data)


def _refuse(what: str) -> Any:
    def handler(*_: Any) -> None:
        raise XmlFormatError(f"{what} is not accepted in an xml message")

    return handler


def decode_xml(data: bytes) -> dict[str, Any]:
    """Parse an ``xml`` payload into ``{root tag: value}``.

    Raises:
        XmlFormatError: too large, too deep, a DOCTYPE/entity declaration, or not
            well-formed (expat's message).
    """
    if len(data) > MAX_XML_BYTES:
        raise XmlFormatError(f"an xml message larger than {MAX_XML_BYTES} bytes")
    builder = _Builder()
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse("a DOCTYPE")
    parser.EntityDeclHandler = _refuse("an entity declaration")
    parser.ExternalEntityRefHandler = _refuse("an external entity")
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.chars
    parser.ordered_attributes = True
    parser.buffer_text = True
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise XmlFormatError(f"not well-formed xml: {exc}") from None
    if builder.root is None:
        raise XmlFormatError("an xml message has one root element")
    return builder.root


def _scalar(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, str | int | float):
        return str(value)
    raise XmlFormatError(f"the value of {name!r} is a {type(value).__name__}, not a scalar")


def _check_name(name: str) -> str:
    if not name or any(c in name for c in "<>&\"' \t\r\n/=") or name[0] in "-.0123456789":
        raise XmlFormatError(f"{name!r} is not an xml name")
    return name


def _element(tag: str, value: object, out: list[str]) -> None:
    _check_name(tag)
    if isinstance(value, list):
        for item in value:
            _element(tag, item, out)
        return
    if not isinstance(value, Mapping):
        text = _scalar(tag, value)
        out.append(f"<{tag}>{escape(text)}</{tag}>" if text else f"<{tag}/>")
        return
    attrs = "".join(
        f" {_check_name(str(k)[1:])}={quoteattr(_scalar(str(k), v))}"
        for k, v in value.items()
        if str(k).startswith("@")
    )
    body: list[str] = []
    for k, v in value.items():
        key = str(k)
        if key == TEXT_KEY:
            body.append(escape(_scalar(key, v)))
        elif not key.startswith("@"):
            _element(key, v, body)
    out.append(f"<{tag}{attrs}>{''.join(body)}</{tag}>" if body else f"<{tag}{attrs}/>")


def encode_xml(doc: object) -> bytes:
    """Serialise a document (``{root tag: value}``) as one XML element, no declaration.

    Raises:
        XmlFormatError: not a mapping with exactly one key, a name that is not an XML name,
            or a value that is not a scalar, mapping or list.
    """
    if not isinstance(doc, Mapping) or len(doc) != 1:
        raise XmlFormatError("an xml document is a mapping with one root element")
    out: list[str] = []
    for tag, value in doc.items():
        _element(str(tag), value, out)
    return "".join(out).encode("utf-8")
