"""The result-set options of a SOW query (AMPS User Guide, "Managing Result Sets":
https://docs.crankuptheamps.com/amps-user-guide/sow-queries/managing-result-sets): the
``orderby`` header, the ``top_n`` and ``skip_n`` options (``top_n`` also as a header) and the
``select`` projection, ``no_sowkey`` (results without their SOW key) and ``timestamp``.
One reading for every kind of topic a ``sow`` may query (a SOW topic, a
queue, a view over a queue), so a bad value is refused the same way everywhere and a good one
works everywhere."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ampsclient.protocol.header import Header

from .payload import (
    OrderBy,
    OrderByError,
    Select,
    SelectError,
    parse_order_by,
    parse_select,
)
from .wire import CommandFailure, int_field, text

__all__ = ["QueryOptions", "query_options"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class QueryOptions:
    """What a query asked of its result set."""

    order_by: OrderBy | None = None
    top_n: int | None = None
    skip_n: int = 0
    select: Select | None = None
    no_sowkey: bool = False
    """Results carry no ``k`` (AMPS Command Reference, ``sow`` options)."""
    timestamp: bool = False
    """Results carry ``ts``."""

    def key_fields(self, key: str) -> dict[str, Any]:
        """The start of a result's header: ``{"k": key}``, or nothing with ``no_sowkey``."""
        return {} if self.no_sowkey else {"k": key}

    def refuse(self, where: str, *, select: bool = False) -> None:
        """Refuse what a query of ``where`` cannot do: ``timestamp`` (its records have no
        processing time), and ``select`` when ``select`` is true.

        Raises:
            CommandFailure: ``invalid options`` naming the option.
        """
        if self.timestamp:
            raise CommandFailure(
                "invalid options", f"option 'timestamp': not implemented for a query of {where}"
            )
        if select and self.select is not None:
            raise CommandFailure(
                "invalid options", f"option 'select': not implemented for a query of {where}"
            )

    def arrange(self, items: Sequence[_T], doc: Callable[[_T], Any]) -> list[_T]:
        """``items`` (already filtered) ordered by ``orderby`` (ties keep their order), then
        ``skip_n`` skipped and at most ``top_n`` kept; ``doc`` gives an item's document."""
        out = list(items)
        order_by = self.order_by
        if order_by is not None:
            out.sort(key=lambda item: order_by.key(doc(item)))
        if self.skip_n:
            out = out[self.skip_n :]
        if self.top_n is not None:
            out = out[: self.top_n]
        return out


def query_options(hdr: Header, options: Mapping[str, str]) -> QueryOptions:
    """The result-set options of the query ``hdr`` (``options``: its parsed ``o`` field).

    Raises:
        CommandFailure: ``invalid order by`` (an ``orderby`` that does not parse),
            ``invalid options`` (``top_n``/``skip_n`` below 0, a bad ``select``).
    """
    order_by: OrderBy | None = None
    order_text = text(hdr.get("orderby")) or options.get("orderby") or None
    if order_text:
        try:
            order_by = parse_order_by(order_text)
        except OrderByError as exc:
            raise CommandFailure("invalid order by", str(exc)) from None
    top_n = int_field(hdr.get("top_n"))
    if top_n is None:
        top_n = int_field(options.get("top_n"))
    skip_n = int_field(options.get("skip_n")) or 0
    if (top_n is not None and top_n < 0) or skip_n < 0:
        raise CommandFailure("invalid options", "top_n/skip_n must be >= 0")
    select: Select | None = None
    if options.get("select"):
        try:
            select = parse_select(options["select"])
        except SelectError as exc:
            raise CommandFailure("invalid options", str(exc)) from None
    return QueryOptions(
        order_by=order_by,
        top_n=top_n,
        skip_n=skip_n,
        select=select,
        no_sowkey="no_sowkey" in options,
        timestamp="timestamp" in options,
    )
