"""SOW topic message enrichment: the ``<Preprocessing>`` and ``<Enrichment>`` stages of a
``<SOW>/<Topic>`` (AMPS User Guide, "State of the World Message Enrichment":
https://devnull.crankuptheamps.com/documentation/html/5.3.0.255/user-guide/html/chapters/enrichment.html).

Each stage is a list of ``<Field>expression AS /path</Field>``: the expression (any AMPS
expression the filter engine compiles, its functions included) is evaluated on the message
and its value written at ``/path`` (created, or replaced; NULL writes a null). Every field of
a stage is evaluated on the message as that stage received it, then all are written.

Preprocessing runs before the SOW key is computed (a preprocessed field may be the key);
enrichment runs after the key is computed. Both run before the message is stored in the
SOW, written to the transaction log or delivered, so subscribers, ``sow`` queries and
bookmark replays all see the processed message. Message data only: headers are untouched.

This module does no I/O; :meth:`Stage.apply` works on parsed documents.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import OptionError
from .filters import FilterError, compile_expression

__all__ = ["ENRICHABLE_TYPES", "EnrichmentError", "Stage", "compile_stage"]

ENRICHABLE_TYPES: Final = frozenset({"json", "msgpack"})
"""Message types whose documents the stages can rewrite."""

_FIELD: Final = re.compile(r"^(?P<expr>.+?)\s+AS\s+(?P<path>\S+)\s*$", re.I | re.S)
_PATH: Final = re.compile(r"(/[A-Za-z0-9_.\-]+)+")


class EnrichmentError(OptionError):
    """A ``<Field>`` of a stage that cannot be used (the message names it)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    parts: tuple[str, ...]
    evaluate: Callable[[Any], Any]


class Stage:
    """One compiled stage (``<Preprocessing>`` or ``<Enrichment>``)."""

    def __init__(self, rules: Sequence[_Rule], fields: Sequence[str]) -> None:
        self._rules: Final = tuple(rules)
        self.fields: Final = tuple(fields)
        """The ``<Field>`` texts, as configured."""

    def apply(self, doc: Any) -> Any:
        """``doc`` with every field written (a new document; ``doc`` is left alone). A message
        that is not an object (a JSON array, a scalar) is returned unchanged."""
        if not isinstance(doc, dict):
            return doc
        values = [(rule.parts, rule.evaluate(doc)) for rule in self._rules]
        out = copy.deepcopy(doc)
        for parts, value in values:
            node = out
            for part in parts[:-1]:
                child = node.get(part)
                if not isinstance(child, dict):
                    child = node[part] = {}
                node = child
            node[parts[-1]] = value
        return out


def compile_stage(fields: Sequence[str], *, stage: str) -> Stage:
    """Compile the ``<Field>`` texts of ``stage`` (``Preprocessing`` or ``Enrichment``).

    Raises:
        EnrichmentError: a field without ``AS /path``, a path that is not a plain field
            path, an expression that does not compile (an unknown function among them).
    """
    rules = []
    for text in fields:
        text = text.strip()
        if text.upper().startswith("REMOVE"):
            raise EnrichmentError(
                f"<{stage}> <Field> {text!r}: removing a field is not implemented by the "
                "reference server"
            )
        match = _FIELD.match(text)
        head, path = (match["expr"], match["path"]) if match else ("", "")
        if not head.strip():
            raise EnrichmentError(f"<{stage}> <Field> {text!r} needs 'expression AS /path'")
        path = path.strip()
        parts = tuple(path[1:].split("/")) if _PATH.fullmatch(path) else ()
        if not parts:
            raise EnrichmentError(f"<{stage}> <Field> {text!r}: {path!r} is not a field path")
        try:
            evaluate = compile_expression(head.strip())
        except FilterError as exc:
            raise EnrichmentError(f"<{stage}> <Field> {text!r}: {exc}") from None
        rules.append(_Rule(parts, evaluate))
    return Stage(rules, [f.strip() for f in fields])
