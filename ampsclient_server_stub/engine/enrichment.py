"""SOW topic message enrichment: the ``<Preprocessing>`` and ``<Enrichment>`` stages of a
``<SOW>/<Topic>`` (AMPS User Guide, "State of the World Message Enrichment":
https://devnull.crankuptheamps.com/documentation/html/5.3.0.255/user-guide/html/chapters/enrichment.html).

Each stage is a list of ``<Field>expression AS /path</Field>``: the expression (any AMPS
expression the filter engine compiles, its functions included) is evaluated on the message
and its value written at ``/path`` (created, or replaced; NULL writes a null). Every field of
a stage is evaluated on the message as that stage received it, then all are written.

Preprocessing runs before the SOW key is computed (a preprocessed field may be the key);
enrichment runs after the key is computed, and "has access to the previous state of the SOW":
``/path OF PREVIOUS`` is the value of ``/path`` in the record the message replaces (``NULL``
when there is none), as in the AMPS 5.2 announcement
(https://www.crankuptheamps.com/blog/posts/2017/04/06/preprocessing-and-enrichment/):
``IF(/qty < 0, /qty OF PREVIOUS, /qty) AS /qty``. Preprocessing "does not have access to the
previous state of the message in the SOW": ``OF PREVIOUS`` there is refused.

A field may end with a hint (our reading of the User Guide's "Constructing Fields",
https://docs.crankuptheamps.com/amps-user-guide/amps-functions/constructing-fields, whose hint
section lies past what the public copies this project can search hold: docs/configuration.md,
"<Preprocessing> and <Enrichment>"): ``HINT OPTIONAL`` removes the field when the value is
``NULL`` instead of writing a null (this is how AMPS removes a field: it has no ``REMOVE``
directive), ``HINT SET_CURRENT`` writes the value into the current message at once, so that
the later fields of the stage read it; ``HINT SET_CURRENT,OPTIONAL`` does both. ``/path OF
CURRENT`` in an enrichment field is ``/path`` of the incoming message.

Both run before the message is stored in the SOW, written to the transaction log or delivered,
so subscribers, ``sow`` queries and bookmark replays all see the processed message. Message
data only: headers are untouched.

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

__all__ = ["ENRICHABLE_TYPES", "PREVIOUS_KEY", "EnrichmentError", "Stage", "compile_stage"]

ENRICHABLE_TYPES: Final = frozenset({"json", "msgpack"})
"""Message types whose documents the stages can rewrite."""

_FIELD: Final = re.compile(
    r"^(?P<expr>.+?)\s+AS\s+(?P<path>\S+)"
    r"(?:\s+HINT\s+(?P<hints>[A-Za-z_]+(?:\s*,\s*[A-Za-z_]+)*))?\s*$",
    re.I | re.S,
)
_HINTS: Final = frozenset({"OPTIONAL", "SET_CURRENT"})
_OF_CURRENT: Final = re.compile(r"(?P<path>(?:/[A-Za-z0-9_.\-]+)+)\s+OF\s+CURRENT\b", re.I)
_PATH: Final = re.compile(r"(/[A-Za-z0-9_.\-]+)+")
_OF_PREVIOUS: Final = re.compile(r"(?P<path>(?:/[A-Za-z0-9_.\-]+)+)\s+OF\s+PREVIOUS\b", re.I)
PREVIOUS_KEY: Final = "__amps_of_previous__"
"""Where an enrichment that reads ``OF PREVIOUS`` finds the previous record while it runs (a
top-level field of that name in a message is hidden from such a stage)."""


class EnrichmentError(OptionError):
    """A ``<Field>`` of a stage that cannot be used (the message names it)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    parts: tuple[str, ...]
    evaluate: Callable[[Any], Any]
    optional: bool = False
    """``HINT OPTIONAL``: a ``NULL`` value removes the field."""
    set_current: bool = False
    """``HINT SET_CURRENT``: the value is written into the current message at once."""


def _put(doc: dict[str, Any], parts: Sequence[str], value: Any, *, optional: bool) -> None:
    """Write ``value`` at ``parts`` of ``doc`` (``optional`` and ``None``: remove it)."""
    node = doc
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            if value is None and optional:
                return
            child = node[part] = {}
        node = child
    if value is None and optional:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


class Stage:
    """One compiled stage (``<Preprocessing>`` or ``<Enrichment>``)."""

    def __init__(
        self, rules: Sequence[_Rule], fields: Sequence[str], *, previous: bool = False
    ) -> None:
        self._rules: Final = tuple(rules)
        self.fields: Final = tuple(fields)
        """The ``<Field>`` texts, as configured."""
        self.reads_previous: Final = previous
        """Whether a field reads ``OF PREVIOUS`` (the caller passes the previous record)."""

    def apply(self, doc: Any, previous: Any = None) -> Any:
        """``doc`` with every field written (a new document; ``doc`` is left alone), ``OF
        PREVIOUS`` read from ``previous`` (the record ``doc`` replaces; ``None``: none). A
        message that is not an object (a JSON array, a scalar) is returned unchanged."""
        if not isinstance(doc, dict):
            return doc
        seen = doc
        current = any(rule.set_current for rule in self._rules)
        if current:
            seen = copy.deepcopy(doc)
        elif self.reads_previous:
            seen = dict(doc)
        if self.reads_previous:
            seen[PREVIOUS_KEY] = previous if isinstance(previous, dict) else None
        values = []
        for rule in self._rules:
            value = rule.evaluate(seen)
            values.append((rule, value))
            if rule.set_current:
                _put(seen, rule.parts, value, optional=rule.optional)
        out = copy.deepcopy(doc)
        for rule, value in values:
            _put(out, rule.parts, value, optional=rule.optional)
        return out


def compile_stage(fields: Sequence[str], *, stage: str) -> Stage:
    """Compile the ``<Field>`` texts of ``stage`` (``Preprocessing`` or ``Enrichment``).

    Raises:
        EnrichmentError: a field without ``AS /path``, a path that is not a plain field
            path, an expression that does not compile (an unknown function among them).
    """
    rules = []
    previous = False
    for text in fields:
        text = text.strip()
        if text.upper().startswith("REMOVE"):
            raise EnrichmentError(
                f"<{stage}> <Field> {text!r}: AMPS has no REMOVE directive: a field is removed "
                "with 'NULL AS /path HINT OPTIONAL' (a NULL value of an OPTIONAL field is not "
                "serialized; User Guide, 'Using HINT to Control Field Construction')"
            )
        match = _FIELD.match(text)
        head, path, hint_text = (
            (match["expr"], match["path"], match["hints"] or "") if match else ("", "", "")
        )
        if not head.strip():
            raise EnrichmentError(f"<{stage}> <Field> {text!r} needs 'expression AS /path'")
        path = path.strip()
        parts = tuple(path[1:].split("/")) if _PATH.fullmatch(path) else ()
        if not parts:
            raise EnrichmentError(f"<{stage}> <Field> {text!r}: {path!r} is not a field path")
        hints = {h.strip().upper() for h in hint_text.split(",") if h.strip()}
        unknown = sorted(hints - _HINTS)
        if unknown:
            raise EnrichmentError(
                f"<{stage}> <Field> {text!r}: unknown HINT {', '.join(unknown)} (AMPS documents "
                "OPTIONAL and SET_CURRENT)"
            )
        head, current = _OF_CURRENT.subn(lambda m: m["path"], head)
        if current and stage != "Enrichment":
            raise EnrichmentError(
                f"<{stage}> <Field> {text!r}: OF CURRENT is an <Enrichment> modifier (User "
                "Guide, 'Constructing Enrichment Fields')"
            )
        head, count = _OF_PREVIOUS.subn(lambda m: f"/{PREVIOUS_KEY}{m['path']}", head)
        if count and stage != "Enrichment":
            raise EnrichmentError(
                f"<{stage}> <Field> {text!r}: OF PREVIOUS reads the record in the SOW, which "
                "only <Enrichment> has (preprocessing runs before the SOW key is known)"
            )
        previous = previous or count > 0
        try:
            evaluate = compile_expression(head.strip())
        except FilterError as exc:
            raise EnrichmentError(f"<{stage}> <Field> {text!r}: {exc}") from None
        rules.append(
            _Rule(parts, evaluate, optional="OPTIONAL" in hints, set_current="SET_CURRENT" in hints)
        )
    return Stage(rules, [f.strip() for f in fields], previous=previous)
