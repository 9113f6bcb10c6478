"""``sow_and_subscribe`` (and ``sow_and_delta_subscribe``) on a queue topic.

The AMPS guide documents the two halves: a ``sow`` query of a queue is a read-only view of the
messages available now, leasing nothing ("Querying Queues as a View"), and a
``sow_and_subscribe`` behaves as if the query and the subscription were placed at the same
moment, the query's results sent before anything of the subscription ("Query and Subscribe").
So, on a queue:

1. the ``received`` / ``processed`` acks (the processed ack carries the effective backlog,
   ``"o":"max_backlog=N"``, as for a ``subscribe``);
2. ``group_begin``, the available messages in ``sow`` frames (no ``lp``: nothing is leased,
   nothing is to be acknowledged), ``group_end``, then the ``completed`` / ``stats`` acks;
3. the queue subscription is placed: from then on it is leased messages as any ``subscribe``
   with the same ``max_backlog`` and filter would be (deliveries with ``bm`` and ``lp``).

The whole command runs in one turn of the event loop: no message is published, leased or
acknowledged between the snapshot and the subscription.

On a view over a queue (``queues.views``) the same command is the view's records, then a
subscription to its changes (no backlog, nothing leased). :func:`answer_query` answers a
``sow`` query of a queue.
"""

from __future__ import annotations

from typing import Any

from ampsclient.protocol.header import Header, encode_header

from ..engine.hooks import QueueHooks
from ..engine.payload import apply_select, decode, encode
from ..engine.query_options import QueryOptions, query_options
from ..engine.state import Connection, Subscription
from ..engine.topics import TopicMatcher
from ..engine.wire import (
    COMPLETED,
    PROCESSED,
    RECEIVED,
    STATS,
    CommandFailure,
    ack_flags,
    command_filter,
    command_options,
    int_field,
    send_ack,
    send_acks,
    text,
)
from .model import AVAILABLE, Queue, QueueMessage

__all__ = ["answer_query", "queue_sow_and_subscribe"]


def queue_sow_and_subscribe(
    queues: QueueHooks,
    conn: Connection,
    hdr: Header,
    matcher: TopicMatcher,
    sub: Subscription,
    replaced: Subscription | None,
) -> None:
    """Answer a ``sow_and_subscribe`` on the queue ``matcher.topic`` (see the module doc).

    Raises:
        CommandFailure: ``invalid options`` (``max_backlog`` below 1, or a bookmark: a queue
            keeps no history); nothing is sent or placed then.
    """
    if text(hdr.get("bm")) is not None:
        raise CommandFailure("invalid options", "a queue keeps no history (bookmark on sow)")
    query_options(hdr, command_options(hdr))  # a bad orderby... refused before any ack
    backlog: int | None = None
    if queues.is_queue(conn.mt, matcher.topic):  # (else a view over a queue)
        queue = queues.queues[(conn.mt, matcher.topic)]
        requested = int_field(sub.options.get("max_backlog")) if sub.options else None
        if requested is not None and requested < 1:
            raise CommandFailure("invalid options", "max_backlog must be >= 1")
        backlog = min(requested or 1, queue.config.max_per_subscription_backlog)
    flags = ack_flags(hdr)
    query_id = text(hdr.get("query_id")) or text(hdr.get("cid")) or sub.sub_id
    base: Header = {k: v for k, v in hdr.items() if k != "a"}
    base["sub_id"] = sub.sub_id
    base["query_id"] = query_id
    send = conn.session.send
    if flags & RECEIVED:
        send_ack(send, base, "received", sub_id=sub.sub_id, query_id=query_id)
    if flags & PROCESSED:
        send_ack(
            send,
            base,
            "processed",
            sub_id=sub.sub_id,
            query_id=query_id,
            extra=None if backlog is None else {"o": f"max_backlog={backlog}"},
        )
    later = [name for name, bit in (("completed", COMPLETED), ("stats", STATS)) if flags & bit]
    query = dict(base)
    if later:
        query["a"] = ",".join(later)
    queues.query(conn, query, matcher)  # the view: group_begin, sow..., group_end, acks
    queues.subscribe(conn, base, sub, replaced, 0)  # then the leases start


def answer_query(queue: Queue, conn: Connection, hdr: Header) -> None:
    """A ``sow`` query of ``queue``: the messages available now (leased ones are not shown),
    oldest (or highest priority) first unless ``orderby`` says otherwise, with ``filter``,
    ``skip_n``, ``top_n`` and ``select`` as on a SOW topic, in the usual ``group_begin`` /
    ``sow`` / ``group_end`` frames; nothing is leased.

    Raises:
        CommandFailure: ``bad filter``, ``invalid order by``, ``invalid options`` (a
            bookmark: no history; ``top_n``/``skip_n`` below 0; a bad ``select``).
    """
    if text(hdr.get("bm")) is not None:
        raise CommandFailure("invalid options", "a queue keeps no history (bookmark on sow)")
    _text, predicate = command_filter(hdr, message_type=conn.mt)
    spec = query_options(hdr, command_options(hdr))
    spec.refuse("a queue")
    batch = max(1, int_field(hdr.get("bs")) or 1)
    waiting = sorted(
        (m for m in queue.messages.values() if m.state == AVAILABLE),
        key=lambda m: (m.rank, m.order),
    )
    mt = queue.config.message_type
    selected = [m for m in waiting if predicate is None or _matches(mt, m, predicate)]
    matches = len(selected)
    selected = spec.arrange(selected, lambda m: decode(mt, m.data))
    flags = ack_flags(hdr)
    query_id = text(hdr.get("query_id")) or text(hdr.get("cid")) or ""
    send = conn.session.send
    send_acks(send, hdr, flags & (RECEIVED | PROCESSED), query_id=query_id)
    send(encode_header({"c": "group_begin", "query_id": query_id}))
    for start in range(0, len(selected), batch):
        part = selected[start : start + batch]
        datas = [_projected(mt, m.data, spec) for m in part]
        body = b"".join(
            encode_header(spec.key_fields(m.bookmark) | {"bm": m.bookmark, "l": len(data)}) + data
            for m, data in zip(part, datas, strict=True)
        )
        outer = {"c": "sow", "t": queue.name, "query_id": query_id, "bs": len(part)}
        send(encode_header(outer) + body)
    send(encode_header({"c": "group_end", "query_id": query_id}))
    stats = {"records_returned": len(selected), "topic_matches": len(queue), "matches": matches}
    send_acks(send, hdr, flags & (COMPLETED | STATS), query_id=query_id, extra=stats)


def _projected(mt: str, data: bytes, spec: QueryOptions) -> bytes:
    """``data`` as the query's ``select`` projects it (as it is without one)."""
    if spec.select is None:
        return data
    doc = decode(mt, data)
    return data if doc is None else encode(mt, apply_select(doc, spec.select))


def _matches(mt: str, msg: QueueMessage, predicate: Any) -> bool:
    doc = decode(mt, msg.data)
    return doc is not None and bool(predicate(doc))
