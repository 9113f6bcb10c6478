"""``<HashIndex>`` and ``<Index>``: the indexes of a SOW topic, view or conflated topic.

AMPS User Guide, "Indexing SOW Topics" (https://docs.crankuptheamps.com/amps-user-guide/sow/
sow_indexing) and the SOW topic and conflated topic configuration references: a
``<HashIndex>`` holds one ``<Key>`` per indexed field (any XPath identifier; any number of hash
indexes, any combination of fields); ``<Index>`` names a field AMPS pre-creates a memo index
for (SOW topics). The indexes themselves are :mod:`.engine.sow_index`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import NoReturn

from .engine.sow_index import index_steps

__all__ = ["parse_hash_indexes", "parse_memo_indexes"]

Fail = Callable[[ET.Element, str], NoReturn]


def _identifier(elem: ET.Element, label: str, where: str, fail: Fail) -> str:
    if len(elem):
        fail(elem, f"{label}: {where} must contain an XPath identifier, not elements")
    path = (elem.text or "").strip()
    if not path:
        fail(elem, f"{label}: {where} is empty")
    try:
        index_steps(path)
    except ValueError as exc:
        fail(elem, f"{label}: {where}: {exc}")
    return path


def parse_hash_indexes(
    elem: ET.Element, label: str, *, parseable: bool, fail: Fail
) -> tuple[tuple[str, ...], ...]:
    """The ``<HashIndex>`` children of ``elem`` (a topic, view or conflated topic called
    ``label`` in errors), each as its ``<Key>`` identifiers in order.

    Raises:
        ConfigError: through ``fail``: a ``<HashIndex>`` without ``<Key>``, with another
            child, an empty or invalid identifier, a field named twice, two indexes over the
            same fields, or a message type whose payloads the server does not parse
            (``parseable`` false).
    """
    out: list[tuple[str, ...]] = []
    for index in elem.findall("HashIndex"):
        if not parseable:
            fail(index, f"{label}: a <HashIndex> needs a message type the server parses")
        for child in index:
            if child.tag != "Key":
                fail(child, f"{label}: <HashIndex> accepts only <Key>, not <{child.tag}>")
        keys = tuple(
            _identifier(key, label, "<Key> of <HashIndex>", fail) for key in index.findall("Key")
        )
        if not keys:
            fail(index, f"{label}: <HashIndex> has no <Key> (name at least one field)")
        steps = [index_steps(key) for key in keys]
        if len(set(steps)) != len(steps):
            fail(index, f"{label}: <HashIndex> names a field twice: {', '.join(keys)}")
        if any({index_steps(k) for k in other} == set(steps) for other in out):
            fail(index, f"{label}: two <HashIndex> over the same fields: {', '.join(keys)}")
        out.append(keys)
    return tuple(out)


def parse_memo_indexes(
    elem: ET.Element, label: str, *, parseable: bool, fail: Fail
) -> tuple[str, ...]:
    """The ``<Index>`` identifiers of a SOW topic ``elem``.

    Raises:
        ConfigError: through ``fail``: an empty or invalid identifier, or a message type the
            server does not parse.
    """
    out: list[str] = []
    for index in elem.findall("Index"):
        if not parseable:
            fail(index, f"{label}: an <Index> needs a message type the server parses")
        out.append(_identifier(index, label, "<Index>", fail))
    return tuple(out)
