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
from ..engine.payload import decode
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
    oldest (or highest priority) first, in the usual ``group_begin`` / ``sow`` /
    ``group_end`` frames; nothing is leased.

    Raises:
        CommandFailure: ``bad filter``, ``invalid options`` (a bookmark: no history).
    """
    if text(hdr.get("bm")) is not None:
        raise CommandFailure("invalid options", "a queue keeps no history (bookmark on sow)")
    _text, predicate = command_filter(hdr)
    options = command_options(hdr)
    top_n = int_field(hdr.get("top_n"))
    if top_n is None:
        top_n = int_field(options.get("top_n"))
    batch = max(1, int_field(hdr.get("bs")) or 1)
    waiting = sorted(
        (m for m in queue.messages.values() if m.state == AVAILABLE),
        key=lambda m: (m.rank, m.order),
    )
    mt = queue.config.message_type
    selected = [m for m in waiting if predicate is None or _matches(mt, m, predicate)]
    matches = len(selected)
    if top_n is not None and top_n >= 0:
        selected = selected[:top_n]
    flags = ack_flags(hdr)
    query_id = text(hdr.get("query_id")) or text(hdr.get("cid")) or ""
    send = conn.session.send
    send_acks(send, hdr, flags & (RECEIVED | PROCESSED), query_id=query_id)
    send(encode_header({"c": "group_begin", "query_id": query_id}))
    for start in range(0, len(selected), batch):
        part = selected[start : start + batch]
        body = b"".join(
            encode_header({"k": m.bookmark, "bm": m.bookmark, "l": len(m.data)}) + m.data
            for m in part
        )
        outer = {"c": "sow", "t": queue.name, "query_id": query_id, "bs": len(part)}
        send(encode_header(outer) + body)
    send(encode_header({"c": "group_end", "query_id": query_id}))
    stats = {"records_returned": len(selected), "topic_matches": len(queue), "matches": matches}
    send_acks(send, hdr, flags & (COMPLETED | STATS), query_id=query_id, extra=stats)


def _matches(mt: str, msg: QueueMessage, predicate: Any) -> bool:
    doc = decode(mt, msg.data)
    return doc is not None and bool(predicate(doc))
