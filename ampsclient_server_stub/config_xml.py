"""Reading the configuration's XML: a safe parser and element helpers.

:func:`read_xml` parses with expat, refuses ``DOCTYPE`` and entity declarations (so entity
expansion attacks are impossible) and records each element's line; :class:`ElementReader`
holds the generic helpers the section readers (:mod:`.config_reader`) build on: single
children, texts, sizes, durations, paths, each failing with a :class:`ConfigError` that names
the element and its line.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn, TypeVar
from xml.parsers import expat

from .config_values import ConfigError, parse_duration, parse_size, shorten

__all__ = ["ElementReader", "XmlDocument", "flatten", "read_xml"]

logger = logging.getLogger("ampsclient_server_stub.config")

_T = TypeVar("_T")

_MAX_EXTRA_DEPTH = 8


class XmlDocument:
    """A parsed element tree plus the source line of every element."""

    def __init__(self, root: ET.Element, lines: dict[int, int]) -> None:
        self.root = root
        self._lines = lines

    def line(self, elem: ET.Element) -> int | None:
        return self._lines.get(id(elem))

    def fail(self, elem: ET.Element, message: str) -> NoReturn:
        line = self.line(elem)
        raise ConfigError(f"line {line}: {message}" if line is not None else message)


def _reject_doctype(*_args: object) -> None:
    raise ConfigError("DOCTYPE declarations are not allowed in the configuration")


def _reject_entity(*_args: object) -> None:
    raise ConfigError("entity declarations are not allowed in the configuration")


def read_xml(data: str | bytes) -> XmlDocument:
    """Parse ``data`` with expat into an ElementTree, recording element line numbers."""
    builder = ET.TreeBuilder()
    lines: dict[int, int] = {}
    parser = expat.ParserCreate()
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def start(tag: str, attrs: dict[str, str]) -> None:
        elem = builder.start(tag, attrs)
        lines[id(elem)] = parser.CurrentLineNumber

    parser.StartElementHandler = start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.StartDoctypeDeclHandler = _reject_doctype
    parser.EntityDeclHandler = _reject_entity
    parser.UnparsedEntityDeclHandler = _reject_entity
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise ConfigError(
            f"malformed XML at line {exc.lineno}, column {exc.offset + 1}: "
            f"{expat.ErrorString(exc.code)}"
        ) from exc
    except (UnicodeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"unreadable XML: {exc}") from exc
    root = builder.close()
    return XmlDocument(root, lines)


class ElementReader:
    """Generic element helpers; every failure names the element and its line."""

    def __init__(self, doc: XmlDocument, data_dir: Path) -> None:
        self.doc = doc
        self.data_dir = data_dir

    # -- generic helpers ---------------------------------------------------------------

    def fail(self, elem: ET.Element, message: str) -> NoReturn:
        self.doc.fail(elem, message)

    def single(self, parent: ET.Element, tag: str) -> ET.Element | None:
        found = parent.findall(tag)
        if len(found) > 1:
            self.fail(found[1], f"duplicate <{tag}> in <{parent.tag}>")
        return found[0] if found else None

    def text(self, parent: ET.Element, tag: str) -> str | None:
        elem = self.single(parent, tag)
        if elem is None:
            return None
        return self.elem_text(elem, parent)

    def elem_text(self, elem: ET.Element, parent: ET.Element) -> str:
        if len(elem):
            self.fail(elem, f"<{elem.tag}> in <{parent.tag}> must contain text, not elements")
        value = (elem.text or "").strip()
        if not value:
            self.fail(elem, f"<{elem.tag}> in <{parent.tag}> is empty")
        return value

    def required(self, parent: ET.Element, tag: str, what: str) -> str:
        value = self.text(parent, tag)
        if value is None:
            self.fail(parent, f"{what} has no <{tag}>")
        return value

    def convert(self, elem: ET.Element, func: Callable[[str], _T], text: str) -> _T:
        try:
            return func(text)
        except ConfigError as exc:
            self.fail(elem, f"<{elem.tag}>: {exc}")

    def duration(self, parent: ET.Element, tag: str) -> float | None:
        value = self.text(parent, tag)
        if value is None:
            return None
        return self.convert(self.child(parent, tag), parse_duration, value)

    def size(self, parent: ET.Element, tag: str) -> int | None:
        value = self.text(parent, tag)
        if value is None:
            return None
        return self.convert(self.child(parent, tag), parse_size, value)

    def integer(self, parent: ET.Element, tag: str, minimum: int) -> int | None:
        value = self.text(parent, tag)
        if value is None:
            return None
        if not re.fullmatch(r"[0-9]{1,18}", value) or int(value) < minimum:
            self.fail(
                self.child(parent, tag),
                f"<{tag}> must be an integer >= {minimum}, got {value!r}",
            )
        return int(value)

    def path(self, parent: ET.Element, tag: str, value: str) -> Path:
        try:
            path = Path(value).expanduser()
        except RuntimeError as exc:  # "~user" for an unknown user
            self.fail(self.child(parent, tag), f"<{tag}>: cannot expand {shorten(value)}: {exc}")
        return path if path.is_absolute() else self.data_dir / path

    @staticmethod
    def child(parent: ET.Element, tag: str) -> ET.Element:
        elem = parent.find(tag)
        assert elem is not None
        return elem

    def ignore_unknown(self, parent: ET.Element, known: Iterable[str]) -> None:
        known_set = set(known)
        for child in parent:
            if child.tag not in known_set:
                logger.debug(
                    "config: ignoring unknown element <%s> in <%s> (line %s)",
                    child.tag,
                    parent.tag,
                    self.doc.line(child),
                )

    def extras(self, parent: ET.Element, known: Iterable[str], prefix: str = "") -> dict[str, str]:
        known_set = set(known)
        out: dict[str, str] = {}
        for child in parent:
            if child.tag not in known_set:
                logger.debug(
                    "config: keeping <%s> in <%s> (line %s) as a raw extra",
                    child.tag,
                    parent.tag,
                    self.doc.line(child),
                )
                flatten(child, prefix + child.tag, out, 0)
        return out


def flatten(elem: ET.Element, key: str, out: dict[str, str], depth: int) -> None:
    """Store ``elem``'s text (or its descendants' texts) under ``/``-joined keys."""
    if depth >= _MAX_EXTRA_DEPTH:
        return
    if len(elem) == 0:
        value = (elem.text or "").strip()
        out[key] = f"{out[key]},{value}" if key in out else value
        return
    for child in elem:
        flatten(child, f"{key}/{child.tag}", out, depth + 1)
