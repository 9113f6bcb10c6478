"""Expanding a configuration document: environment variables and ``<Include>``.

AMPS "fully expands any environment variables in the file and fully processes any include
directives" when it reads its configuration, and what it keeps (and shows) is that expanded
document (AMPS Configuration Guide, "AMPS Configuration Basics",
https://docs.crankuptheamps.com/amps-configuration-guide/basics).  This module does the same
on a parsed :class:`~.config_xml.XmlDocument`, before any section is read:

* ``${NAME}`` and ``$NAME`` in element texts and attribute values are replaced by the value of
  the environment variable ``NAME`` (comments are never expanded).  A variable that is not
  defined is an error naming it and its line: the server never runs with a silently empty
  value.
* ``<Include>path</Include>`` is replaced by the elements of the file at ``path`` (a relative
  path is relative to the directory of the file that holds the ``<Include>``).  The included
  file holds one or more elements (an XML declaration is allowed) and may itself include
  files; a file that includes itself, directly or not, a missing file and an empty
  ``<Include>`` are errors naming the file and the line.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from .config_model import DEFAULT_JOURNAL_SIZE, DEFAULT_PREALLOCATED_JOURNAL_FILES
from .config_values import ConfigError
from .config_xml import XmlDocument, read_xml

__all__ = [
    "INCLUDE_TAG",
    "SAMPLE_CONFIG",
    "add_defaults",
    "expand_document",
    "expand_variables",
    "expanded_xml",
]

INCLUDE_TAG = "Include"

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_XML_DECL = re.compile(rb"^\s*(?:\xef\xbb\xbf)?<\?xml[^>]*\?>")
_FRAGMENT_ROOT = "AMPSConfigFragment"
_MAX_DEPTH = 16


def expand_variables(text: str, env: Mapping[str, str], where: str) -> str:
    """``text`` with every ``${NAME}`` / ``$NAME`` replaced from ``env``.

    Raises:
        ConfigError: naming the first undefined variable and ``where``.
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        value = env.get(name)
        if value is None:
            raise ConfigError(f"{where}: environment variable {name} is not defined")
        return value

    return _VARIABLE.sub(replace, text)


def _where(doc: XmlDocument, elem: ET.Element, source: Path | None, top: Path | None) -> str:
    """``line N`` in the top file (its name prefixes every error), ``FILE, line N`` in an
    included one."""
    line = doc.line(elem)
    place = f"line {line}" if line is not None else "unknown line"
    return f"{source}, {place}" if source is not None and source != top else place


def _expand_element(
    doc: XmlDocument,
    elem: ET.Element,
    env: Mapping[str, str],
    source: Path | None,
    top: Path | None,
) -> None:
    where = _where(doc, elem, source, top)
    if elem.text and "$" in elem.text:
        elem.text = expand_variables(elem.text, env, f"{where}: <{elem.tag}>")
    for key, value in list(elem.attrib.items()):
        if "$" in value:
            elem.attrib[key] = expand_variables(value, env, f"{where}: <{elem.tag} {key}>")


def _read_fragment(file: Path, where: str) -> XmlDocument:
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read included file {file}: {exc.strerror}") from exc
    data = _XML_DECL.sub(b"", data, count=1)
    # The wrapper shares the first line, so line numbers stay those of the file.
    wrapped = f"<{_FRAGMENT_ROOT}>".encode() + data + f"</{_FRAGMENT_ROOT}>".encode()
    try:
        return read_xml(wrapped)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from exc


def _process(
    doc: XmlDocument,
    parent: ET.Element,
    env: Mapping[str, str],
    source: Path | None,
    chain: tuple[Path, ...],
    lines: dict[int, int],
    top: Path | None,
) -> None:
    index = 0
    while index < len(parent):
        child = parent[index]
        line = doc.line(child)
        if line is not None:
            lines[id(child)] = line
        _expand_element(doc, child, env, source, top)
        if child.tag != INCLUDE_TAG:
            _process(doc, child, env, source, chain, lines, top)
            index += 1
            continue
        where = _where(doc, child, source, top)
        if len(child) or not (child.text or "").strip():
            raise ConfigError(f"{where}: <Include> must contain a file name")
        target = Path((child.text or "").strip()).expanduser()
        if not target.is_absolute():
            base = source.parent if source is not None else Path.cwd()
            target = base / target
        target = target.absolute()
        if target in chain:
            cycle = " -> ".join(str(p) for p in (*chain, target))
            raise ConfigError(f"{where}: <Include> of {target} is a cycle ({cycle})")
        if len(chain) >= _MAX_DEPTH:
            raise ConfigError(f"{where}: <Include> nested more than {_MAX_DEPTH} deep")
        fragment = _read_fragment(target, where)
        _process(fragment, fragment.root, env, target, (*chain, target), lines, top)
        included = list(fragment.root)
        parent.remove(child)
        for offset, elem in enumerate(included):
            parent.insert(index + offset, elem)
        index += len(included)


def expand_document(
    doc: XmlDocument, source: Path | None, env: Mapping[str, str] | None = None
) -> XmlDocument:
    """``doc`` with its environment variables expanded and its ``<Include>`` files inlined.

    ``source`` is the configuration file (relative includes resolve against its directory;
    the current directory when ``None``); ``env`` defaults to :data:`os.environ`.  Elements
    that came from an included file keep that file's line numbers.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    start = source.absolute() if source is not None else None
    lines: dict[int, int] = {}
    root_line = doc.line(doc.root)
    if root_line is not None:
        lines[id(doc.root)] = root_line
    _expand_element(doc, doc.root, environ, start, start)
    chain = (start,) if start is not None else ()
    _process(doc, doc.root, environ, start, chain, lines, start)
    return XmlDocument(doc.root, lines)


_DEFAULT_PROTOCOL_TYPES: Final = ("tcp", "tcps", "ws", "wss")


def _default(parent: ET.Element, tag: str, value: str) -> None:
    if parent.find(tag) is None:
        ET.SubElement(parent, tag).text = value


def add_defaults(doc: XmlDocument) -> None:
    """Write the defaults the server applies into ``doc`` where the file leaves them out:
    ``<Group>`` (the instance ``<Name>``), a client transport's ``<Protocol>`` (``amps``), the
    transaction log's ``<JournalSize>`` and ``<PreallocatedJournalFiles>``."""
    root = doc.root
    name = root.find("Name")
    if name is not None and name.text and root.find("Group") is None:
        group = ET.Element("Group")
        group.text = name.text.strip()
        root.insert(list(root).index(name) + 1, group)
    for transport in root.iterfind("Transports/Transport"):
        if (transport.findtext("Type") or "").strip().lower() in _DEFAULT_PROTOCOL_TYPES:
            _default(transport, "Protocol", "amps")
    for txlog in root.iterfind("TransactionLog"):
        _default(txlog, "JournalSize", str(DEFAULT_JOURNAL_SIZE))
        _default(txlog, "PreallocatedJournalFiles", str(DEFAULT_PREALLOCATED_JOURNAL_FILES))


def expanded_xml(doc: XmlDocument) -> str:
    """The expanded document as XML text (what ``--dump-config`` prints)."""
    root = doc.root
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


SAMPLE_CONFIG = """\
<!-- Sample ampsclient-server configuration, as printed by its sample-config option.

     An instance that provides publish and subscribe, topic and content filtering for JSON
     messages over TCP on port 9007 of 127.0.0.1, and the administrative interface on port
     8085 of 127.0.0.1.  Like AMPS' own sample, it configures no SOW topics, transaction
     log, queues, replication, authentication or entitlement: see docs/configuration.md.
  -->
<AMPSConfig>
    <Name>AMPS-Sample</Name>
    <Admin>
        <InetAddr>127.0.0.1:8085</InetAddr>
    </Admin>
    <Transports>
        <Transport>
            <Name>json-tcp</Name>
            <Type>tcp</Type>
            <InetAddr>127.0.0.1:9007</InetAddr>
            <MessageType>json</MessageType>
            <Protocol>amps</Protocol>
        </Transport>
    </Transports>
</AMPSConfig>
"""
