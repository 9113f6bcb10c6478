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
"""

from __future__ import annotations

from ampsclient.protocol.header import Header

from ..engine.hooks import QueueHooks
from ..engine.state import Connection, Subscription
from ..engine.topics import TopicMatcher
from ..engine.wire import (
    COMPLETED,
    PROCESSED,
    RECEIVED,
    STATS,
    CommandFailure,
    ack_flags,
    int_field,
    send_ack,
    text,
)

__all__ = ["queue_sow_and_subscribe"]


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
            extra={"o": f"max_backlog={backlog}"},
        )
    later = [name for name, bit in (("completed", COMPLETED), ("stats", STATS)) if flags & bit]
    query = dict(base)
    if later:
        query["a"] = ",".join(later)
    queues.query(conn, query, matcher)  # the view: group_begin, sow..., group_end, acks
    queues.subscribe(conn, base, sub, replaced, 0)  # then the leases start
