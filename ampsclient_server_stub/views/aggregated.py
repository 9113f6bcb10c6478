"""Aggregated subscriptions: a ``sow`` or ``sow_and_subscribe`` of a SOW topic with the options
``projection=[...]`` and ``grouping=[...]`` gets aggregated records, as from a private view.

AMPS User Guide, "Aggregated Subscriptions"
(https://docs.crankuptheamps.com/amps-user-guide/views/aggregated-subscriptions): the
subscriber gives the fields to project and the grouping, with the syntax of a view's
``Projection``/``Grouping`` fields (``projection=[MAX(/price) AS /max,/tickerId AS /ticker],
grouping=[/tickerId]``); supported for ``sow``, ``sow_and_subscribe`` and
``sow_and_delta_subscribe``.

Here the command's ``filter`` selects the underlying records that are aggregated (as a view's
``Filter`` does); ``top_n``, ``skip_n`` and ``orderby`` apply to the aggregated records of the
query. A subscription is kept up to date on every change of the topic (the groups it touches):
each changed record is sent (``p``; to a ``sow_and_delta_subscribe``, only the top-level fields
that changed, the record identified by its ``k``), an emptied group goes out as ``oof`` (reason
``deleted``) when the subscription asked for ``oof``.
Refused (``invalid options``): only one of the two options, a regex topic, a bookmark, a field
that does not parse. On a ``composite-local`` topic the records are written part by part: each
projected field begins with its part's position (``MAX(/0/price) AS /0/max``); on a
``composite-global`` one aggregation is refused (AMPS User Guide, "Composite Messages").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ampsclient.protocol.header import Header, encode_header

from ..engine.composite_codec import composite_record_refusal, composite_type, opaque_slot
from ..engine.filters import compile_expression
from ..engine.payload import encode
from ..engine.query_options import query_options
from ..engine.sow import SowTopic
from ..engine.sow_service import SowService
from ..engine.state import Connection, Subscription
from ..engine.topics import TopicMatcher
from ..engine.wire import (
    COMPLETED,
    PROCESSED,
    RECEIVED,
    STATS,
    CommandFailure,
    ack_flags,
    opaque_filter_refusal,
    send_acks,
    text,
)
from .fields import ANY_AGGREGATE, Field, FieldError, parse_field_text
from .groups import GroupTable, Touched

__all__ = ["Aggregated", "split_list_option"]

logger = logging.getLogger(__name__)


def split_list_option(value: str, name: str) -> list[str]:
    """``[a,b(c,d),'e,f']`` -> ``["a", "b(c,d)", "'e,f'"]``.

    Raises:
        CommandFailure: ``invalid options`` when ``value`` is not a bracketed list.
    """
    value = value.strip()
    if not (value.startswith("[") and value.endswith("]")):
        raise CommandFailure("invalid options", f"{name} must be a list in brackets: {value!r}")
    items: list[str] = []
    depth = 0
    quote: str | None = None
    start = 1
    for pos, char in enumerate(value[1:-1], start=1):
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(value[start:pos].strip())
            start = pos + 1
    items.append(value[start:-1].strip())
    return [item for item in items if item]


class _Private:
    """One aggregated subscription: its groups, kept up to date (a ``SowWatcher``)."""

    def __init__(self, sub: Subscription, table: GroupTable, sow: SowTopic) -> None:
        self.sub = sub
        self.table = table
        self.sow = sow
        self.bodies: dict[str, bytes] = {}
        self.records: dict[str, Any] = {}

    def alive(self) -> bool:
        """The subscription still exists (not unsubscribed, replaced or disconnected)."""
        sub = self.sub
        return sub.conn.subs.get(sub.sub_id) is sub

    def record_changed(self, sow: SowTopic, key: str, before: Any, after: Any) -> None:
        if not self.alive():
            sow.watchers.remove(self)
            return
        touched = self.table.drop(key) if after is None else self.table.put(key, after)
        self._send(touched)

    def records_reloaded(self, sow: SowTopic) -> None:
        if not self.alive():
            sow.watchers.remove(self)
            return
        old: Touched = dict.fromkeys(self.table.groups)
        for key in old_rows(self.table):
            self.table.drop(key)
        for key in list(sow):
            doc = sow.doc(key)
            if doc is not None:
                self.table.put(key, doc)
        self._send(old | dict.fromkeys(self.table.groups))

    def _send(self, touched: Touched) -> None:
        sub = self.sub
        send = sub.conn.session.send
        for key in touched:
            record = self.table.record(key)
            if record is None:
                body = self.bodies.pop(key, None)
                self.records.pop(key, None)
                if body is not None and sub.oof:
                    head = {"c": "oof", "t": self.sow.topic, "sids": sub.sub_id, "k": key}
                    head["reason"] = "deleted"
                    send(encode_header(head) + body)
                continue
            body = encode(self.sow.message_type, record)
            before = self.bodies.get(key)
            if before == body:
                continue
            self.bodies[key] = body
            prev = self.records.get(key)
            self.records[key] = record
            head = {"c": "p", "t": self.sow.topic, "sids": sub.sub_id, "k": key}
            if sub.delta and prev is not None:  # only the fields that changed
                changed = {n: v for n, v in record.items() if n not in prev or prev[n] != v}
                body = encode(self.sow.message_type, changed)
            send(encode_header(head) + body)


def old_rows(table: GroupTable) -> list[Any]:
    """Every row id of ``table``."""
    return [row for group in table.groups.values() for row in group.members]


class Aggregated:
    """The aggregated queries and subscriptions of a broker (an ``AggregatedQueries``).

    Args:
        sows: the broker's SOW topics.
    """

    def __init__(self, sows: SowService) -> None:
        self._sows = sows

    def run(
        self,
        conn: Connection,
        hdr: Header,
        options: Mapping[str, str],
        matcher: TopicMatcher,
        *,
        subscribe: bool,
        prepare: Callable[[], tuple[Subscription, Subscription | None]],
        remove: Callable[[Subscription], None],
    ) -> bool:
        """Answer an aggregated ``sow``/``sow_and_subscribe`` (``False``: not aggregated).

        Raises:
            CommandFailure: ``invalid options`` (see the module), ``invalid topic`` (not a
                SOW topic), ``bad filter``.
        """
        projection_text = options.get("projection")
        grouping_text = options.get("grouping")
        if projection_text is None and grouping_text is None:
            return False
        if projection_text is None or grouping_text is None:
            raise CommandFailure(
                "invalid options",
                "an aggregated query needs both projection=[...] and grouping=[...]",
            )
        if matcher.is_regex:
            raise CommandFailure(
                "invalid options", "an aggregated query needs one SOW topic, not a regex"
            )
        if text(hdr.get("bm")) is not None:
            raise CommandFailure("invalid options", "an aggregated query cannot take a bookmark")
        sow = self._sows.topic(matcher.topic, conn.mt)
        if sow is None:
            raise CommandFailure("invalid topic", f"{matcher.topic!r} is not a SOW topic")
        projection = _projection(projection_text)
        ctype = composite_type(sow.message_type)
        if ctype is not None:  # a record is written part by part (composite-local)
            refusal = composite_record_refusal(ctype, [f.path for f in projection])
            if refusal is not None:
                raise CommandFailure("invalid options", f"projection: {refusal}")
        grouping = _grouping(grouping_text)
        if ctype is not None:  # nothing reads inside an opaque part (a copy of one whole may)
            for field in projection:
                whole = field.aggregate is None and opaque_slot(ctype, field.path)
                opaque = opaque_filter_refusal(sow.message_type, field.expression, whole_part=whole)
                if opaque is not None:
                    raise CommandFailure("invalid options", f"projection: {opaque}")
            for item in grouping:
                opaque = opaque_filter_refusal(sow.message_type, item)
                if opaque is not None:
                    raise CommandFailure("invalid options", f"grouping: {opaque}")
        filter_text = text(hdr.get("filter"))
        try:
            table = GroupTable(
                projection, grouping, filter_text=filter_text, key_domain=matcher.topic
            )
        except ValueError as exc:
            raise CommandFailure("bad filter", f"{filter_text!r}: {exc}") from None
        for key in list(sow):
            doc = sow.doc(key)
            if doc is not None:
                table.put(key, doc)
        sub: Subscription | None = None
        if subscribe:
            sub, replaced = prepare()
            if replaced is not None:
                remove(replaced)
        self._answer(conn, hdr, options, sow, table, sub)
        if sub is not None:
            conn.subs[sub.sub_id] = sub
            private = _Private(sub, table, sow)
            private.records = dict(table.records())
            private.bodies = {
                key: encode(sow.message_type, record) for key, record in private.records.items()
            }
            # (an ended subscription leaves at the topic's next change; sweep them here too)
            sow.watchers[:] = [w for w in sow.watchers if not isinstance(w, _Private) or w.alive()]
            sow.watchers.append(private)
        return True

    @staticmethod
    def _answer(
        conn: Connection,
        hdr: Header,
        options: Mapping[str, str],
        sow: SowTopic,
        table: GroupTable,
        sub: Subscription | None,
    ) -> None:
        spec = query_options(hdr, options)
        spec.refuse("an aggregated query", select=True)
        found = list(table.records())
        selected = spec.arrange(found, lambda item: item[1])
        flags = ack_flags(hdr)
        sub_id = sub.sub_id if sub is not None else None
        query_id = text(hdr.get("query_id")) or text(hdr.get("cid")) or sub_id or ""
        send = conn.session.send
        send_acks(send, hdr, flags & (RECEIVED | PROCESSED), sub_id=sub_id, query_id=query_id)
        send(encode_header({"c": "group_begin", "query_id": query_id}))
        for key, record in selected:
            body = encode(sow.message_type, record)
            inner = encode_header(spec.key_fields(key) | {"l": len(body)}) + body
            send(encode_header({"c": "sow", "t": sow.topic, "query_id": query_id, "bs": 1}) + inner)
        send(encode_header({"c": "group_end", "query_id": query_id}))
        stats = {
            "records_returned": len(selected),
            "topic_matches": len(found),
            "matches": len(found),
        }
        send_acks(
            send, hdr, flags & (COMPLETED | STATS), sub_id=sub_id, query_id=query_id, extra=stats
        )


def _projection(value: str) -> list[Field]:
    fields = []
    for item in split_list_option(value, "projection"):
        try:
            fields.append(parse_field_text(item, compile_expression))
        except FieldError as exc:
            raise CommandFailure("invalid options", f"projection: {exc}") from None
    if not fields:
        raise CommandFailure("invalid options", "projection=[] projects nothing")
    return fields


def _grouping(value: str) -> list[str]:
    items = split_list_option(value, "grouping")
    if not items:
        raise CommandFailure("invalid options", "grouping=[] groups nothing")
    for item in items:
        if ANY_AGGREGATE.search(item):
            raise CommandFailure("invalid options", f"grouping: {item!r} cannot aggregate")
        try:
            compile_expression(item)
        except (ValueError, RecursionError) as exc:
            raise CommandFailure("invalid options", f"grouping: {item!r}: {exc}") from None
    return items
