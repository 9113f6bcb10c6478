"""Walking the statistics tree by path and writing it in AMPS' output forms (no I/O).

The tree is built of plain dicts and :class:`Entries` (collections whose entries
AMPS lists with an ``id``). The AMPS monitoring guide ("Output Formatting") serves a node
"along with all child nodes" as a JSON document when ``.json`` is appended to its URI, and as
an XML document with ``.xml``; its example (``/amps/host/cpus.json``) shows the document
rooted at ``amps`` with the path down to the node, and collections as lists of objects each
carrying an ``id``::

    {"amps": {"host": {"cpus": [{"id": "all", "idle_percent": ...}, {"id": "cpu0", ...}]}}}

:func:`find` walks a path (a collection's entries are found by id), :func:`amps_document`
builds that rooted document, :func:`to_xml` writes it as XML.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final
from xml.sax.saxutils import escape, quoteattr

from ..errors import ServerError

__all__ = ["Entries", "NotFound", "amps_document", "amps_form", "find", "to_xml"]

_NAME_BAD: Final = re.compile(r"[^A-Za-z0-9_.-]")


class Entries(dict[str, Any]):
    """A collection of the tree whose entries AMPS lists with an ``id`` (clients, cpus,
    processors, sow topics...): a dict keyed by id here, a list of ``{"id": ..., ...}`` in
    AMPS' JSON and XML forms (see :func:`amps_form`)."""


class NotFound(ServerError, LookupError):
    """No node at that path."""


def find(root: Any, path: Sequence[str]) -> tuple[Any, list[bool]]:
    """The node at ``path`` below ``root``, and for each step whether it chose an entry of a
    collection (by id).

    Raises:
        NotFound: a step names nothing.
    """
    node = root
    steps: list[bool] = []
    for segment in path:
        if not isinstance(node, dict) or segment not in node:
            raise NotFound("/".join(path))
        steps.append(isinstance(node, Entries))
        node = node[segment]
    return node, steps


def amps_form(node: Any, name: str = "value") -> Any:
    """``node`` (named ``name``) with every collection as a list of ``{"id": ..., ...}``
    (AMPS' form)."""
    if isinstance(node, Entries):
        return [_entry(key, amps_form(value, name), name) for key, value in node.items()]
    if isinstance(node, dict):
        return {key: amps_form(value, key) for key, value in node.items()}
    return node


def _entry(key: str, value: Any, name: str) -> dict[str, Any]:
    """An entry of the collection ``name``: its fields with its ``id``; an entry that is not
    an object (a collection in a collection, such as a client's subscriptions) under
    ``name``."""
    if isinstance(value, dict):
        return {"id": key, **{k: v for k, v in value.items() if k != "id"}}
    return {"id": key, name: value}


def amps_document(path: Sequence[str], node: Any, steps: Sequence[bool]) -> dict[str, Any]:
    """The document AMPS serves for ``path`` (``path[0]`` is ``amps``): the node in AMPS'
    form, wrapped in the path from the root; an entry of a collection stays in a one-entry
    list with its ``id``."""
    names = ["amps", *path[1:]]
    value = amps_form(node, names[-1])
    for depth in range(len(path) - 1, 0, -1):
        segment = path[depth]  # in a collection: an entry of the one named a step up
        value = [_entry(segment, value, names[depth - 1])] if steps[depth] else {segment: value}
    return {"amps": value}


def _tag(name: str) -> str:
    tag = _NAME_BAD.sub("_", name) or "_"
    return tag if tag[0].isalpha() or tag[0] == "_" else f"_{tag}"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return escape(str(value))


def _xml(name: str, value: Any, out: list[str]) -> None:
    tag = _tag(name)
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and "id" in item:
                out.append(f"<{tag} id={quoteattr(str(item['id']))}>")
                for key, child in item.items():
                    if key != "id":
                        _xml(key, child, out)
                out.append(f"</{tag}>")
            else:
                _xml(name, item, out)
    elif isinstance(value, dict):
        out.append(f"<{tag}>")
        for key, child in value.items():
            _xml(str(key), child, out)
        out.append(f"</{tag}>")
    else:
        out.append(f"<{tag}>{_text(value)}</{tag}>")


def to_xml(document: dict[str, Any]) -> str:
    """An :func:`amps_document` as XML: one element per field, an entry of a collection as an
    element named after the collection with an ``id`` attribute, booleans ``true``/``false``."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>']
    for key, value in document.items():
        _xml(key, value, out)
    return "\n".join(out) + "\n"
