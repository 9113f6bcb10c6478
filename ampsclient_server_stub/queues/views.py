"""Views over queues (``<View>`` whose ``UnderlyingTopic`` is a queue; ``view_config``).

AMPS: "views and aggregates based on the current contents of a queue": a view over a queue
aggregates the messages **available** now. A leased message is not in it (it comes back when
the lease is returned), an acknowledged or expired one is gone; a view leases nothing and
acknowledges nothing. Here a view is recomputed from its queue once per turn of the event loop
after the queue changed (the engine calls :meth:`QueueViews.changed` when it delivered,
enqueued, acknowledged or expired something), and the difference goes to the view's
subscribers: a ``p`` for each new or changed group record, an ``oof`` (reason ``deleted``)
for each group that emptied, to subscriptions asking for ``oof`` (reason ``match`` when a
record left their filter). ``sow`` queries and ``sow_and_subscribe`` answer from the current
records, keyed (``k``) by the group's values.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from ampsclient.protocol.header import Header, encode_header

from ..engine.filters import compile_expression, compile_filter
from ..engine.payload import apply_select, encode
from ..engine.query_options import query_options
from ..engine.session import CallLater, TimerHandle
from ..engine.sow_index import HashIndex, equality_plan
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
    send_acks,
    text,
)
from ..views.aggregates import aggregate as aggregate_values
from .model import AVAILABLE, Queue
from .view_config import ViewConfig

__all__ = ["QueueViews"]

logger = logging.getLogger(__name__)

Record = tuple[bytes, Any]
"""A view record: its JSON body and the parsed document (for subscribers' filters)."""

_MISSING: Final = object()


class _View:
    """One view: its compiled projection and its current records by key."""

    def __init__(self, config: ViewConfig) -> None:
        self.config = config
        self.name = config.name
        self._group = [compile_expression(g) for g in config.grouping]
        self._fields = [
            (f.path.strip("/").split("/"), compile_expression(f.expression), f.aggregate)
            for f in config.projection
        ]
        self._filter = compile_filter(config.filter) if config.filter else None
        self.records: dict[str, Record] = {}
        self.subs: list[Subscription] = []
        self.indexes = tuple(HashIndex(paths) for paths in config.hash_indexes)
        """The view's hash indexes (``<HashIndex>``), brought up to date by :meth:`candidates` (the
        records are recomputed as a whole when the queue changes)."""
        self._indexed: dict[str, Record] | None = None  # the records the indexes hold

    def candidates(self, filter_text: str | None) -> list[str] | None:
        """The keys of the records that can match ``filter_text``, in record order, when a
        hash index answers it (:mod:`..engine.sow_index`); ``None``: scan every record."""
        plan = equality_plan(filter_text) if filter_text and self.indexes else None
        index = next((i for i in self.indexes if plan and i.fields == frozenset(plan)), None)
        if index is None or plan is None:
            return None
        if self._indexed is not self.records:
            for each in self.indexes:
                each.clear()
                for position, (key, (_body, doc)) in enumerate(self.records.items()):
                    each.add(key, doc, position)
            self._indexed = self.records
        return index.candidates(plan)

    def compute(self, queue: Queue) -> dict[str, Record]:
        """The records the queue's available messages make now."""
        groups: dict[str, list[Any]] = {}
        for msg in queue.messages.values():
            if msg.state != AVAILABLE or msg.lessee is not None:
                continue
            try:
                doc = json.loads(msg.data)
            except ValueError:
                continue
            if self._filter is not None and not self._filter(doc):
                continue
            values = [g(doc) for g in self._group]
            key = hashlib.blake2b(
                json.dumps(values, sort_keys=True, default=str).encode(), digest_size=8
            ).hexdigest()
            groups.setdefault(key, []).append(doc)
        out: dict[str, Record] = {}
        for key, docs in groups.items():
            record: dict[str, Any] = {}
            for path, expr, aggregate in self._fields:
                value = (
                    aggregate_values(aggregate, [expr(d) for d in docs])
                    if aggregate
                    else expr(docs[-1])
                )
                _put(record, path, value)
            out[key] = (json.dumps(record, separators=(",", ":")).encode(), record)
        return out


def _put(record: dict[str, Any], path: list[str], value: Any) -> None:
    node = record
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


class QueueViews:
    """The views over the queues of one broker.

    Args:
        configs: the views.
        queues: the queues by ``(message type, name)``.
        call_later: schedules the recomputation (``None``: at once).
    """

    def __init__(
        self,
        configs: Sequence[ViewConfig],
        *,
        queues: Mapping[tuple[str, str], Queue],
        call_later: CallLater | None,
    ) -> None:
        self._queues = queues
        self._call_later = call_later
        self.views: dict[tuple[str, str], _View] = {}
        self._of_queue: dict[str, list[_View]] = {}
        for cfg in configs:
            view = _View(cfg)
            self.views[(cfg.message_type, cfg.name)] = view
            self._of_queue.setdefault(cfg.underlying, []).append(view)
            view.records = view.compute(queues[(cfg.message_type, cfg.underlying)])
        self._dirty: set[str] = set()
        self._timer: TimerHandle | None = None

    def summaries(self) -> Iterator[tuple[tuple[str, str], ViewConfig, int, int]]:
        """Per view (read-only, for statistics): its ``(message type, name)``, definition,
        record count and pending updates (1 while its queue changed and the view is not yet
        recomputed, else 0)."""
        for key, view in self.views.items():
            yield key, view.config, len(view.records), int(view.config.underlying in self._dirty)

    def index_statistics(self, mt: str, name: str) -> list[dict[str, Any]]:
        """The hash indexes of view ``name`` (statistics: fields, records held, queries)."""
        return [index.statistics() for index in self.views[(mt, name)].indexes]

    def is_view(self, mt: str, topic: str) -> bool:
        """``topic`` is a view of message type ``mt``."""
        return (mt, topic) in self.views

    # ------------------------------------------------------------------ changes

    def changed(self, queue: Queue) -> None:
        """``queue`` may have changed: its views are brought up to date (this loop turn)."""
        if queue.name not in self._of_queue:
            return
        self._dirty.add(queue.name)
        if self._call_later is None:
            self.flush()
        elif self._timer is None:
            self._timer = self._call_later(0.0, self.flush)

    def flush(self) -> None:
        """Recompute the views of the queues that changed and publish the differences."""
        self._timer = None
        dirty, self._dirty = self._dirty, set()
        for name in dirty:
            for view in self._of_queue[name]:
                queue = self._queues[(view.config.message_type, name)]
                self._publish(view, view.compute(queue))

    def _publish(self, view: _View, new: dict[str, Record]) -> None:
        old = view.records
        view.records = new
        if not view.subs:
            return
        topic = view.name
        for key, (body, doc) in new.items():
            before = old.get(key)
            if before is not None and before[0] == body:
                continue
            for sub in view.subs:
                if sub.predicate is None or sub.predicate(doc):
                    head = {"c": "p", "t": topic, "sids": sub.sub_id, "k": key}
                    sub.conn.session.send(encode_header(head) + body)
                elif sub.oof and before is not None and _matched(sub, before[1]):
                    self._oof(sub, topic, key, before[0], "match")
        for key, (body, doc) in old.items():
            if key in new:
                continue
            for sub in view.subs:
                if sub.oof and _matched(sub, doc):
                    self._oof(sub, topic, key, body, "deleted")

    @staticmethod
    def _oof(sub: Subscription, topic: str, key: str, body: bytes, reason: str) -> None:
        head = {"c": "oof", "t": topic, "sids": sub.sub_id, "k": key, "reason": reason}
        sub.conn.session.send(encode_header(head) + body)

    # ------------------------------------------------------------------ commands

    def query(self, conn: Connection, hdr: Header, matcher: TopicMatcher) -> bool:
        """A ``sow`` query of a view: its current records (``False``: not a view).

        Raises:
            CommandFailure: ``bad filter``, ``invalid options`` (a bookmark: no history).
        """
        view = None if matcher.is_regex else self.views.get((conn.mt, matcher.topic))
        if view is None:
            return False
        if text(hdr.get("bm")) is not None:
            raise CommandFailure("invalid options", "a view of a queue keeps no history")
        self.flush()  # (a change of this turn first)
        filter_text, predicate = command_filter(hdr, message_type=conn.mt)
        spec = query_options(hdr, command_options(hdr))
        spec.refuse("a view of a queue")
        records = view.records
        keys = view.candidates(filter_text)
        found = [
            (key, body, doc)
            for key, (body, doc) in (
                records.items() if keys is None else ((k, records[k]) for k in keys)
            )
            if predicate is None or predicate(doc)
        ]
        matches = len(found)
        mt = view.config.message_type
        selected = [
            (key, body if spec.select is None else encode(mt, apply_select(doc, spec.select)))
            for key, body, doc in spec.arrange(found, lambda item: item[2])
        ]
        flags = ack_flags(hdr)
        query_id = text(hdr.get("query_id")) or text(hdr.get("cid")) or ""
        send = conn.session.send
        send_acks(send, hdr, flags & (RECEIVED | PROCESSED), query_id=query_id)
        send(encode_header({"c": "group_begin", "query_id": query_id}))
        for key, body in selected:
            inner = encode_header(spec.key_fields(key) | {"l": len(body)}) + body
            send(encode_header({"c": "sow", "t": view.name, "query_id": query_id, "bs": 1}) + inner)
        send(encode_header({"c": "group_end", "query_id": query_id}))
        stats = {
            "records_returned": len(selected),
            "topic_matches": len(view.records),
            "matches": matches,
        }
        send_acks(send, hdr, flags & (COMPLETED | STATS), query_id=query_id, extra=stats)
        return True

    def subscribe(
        self,
        conn: Connection,
        hdr: Header,
        sub: Subscription,
        replaced: Subscription | None,
        flags: int,
        remove: Callable[[Subscription], None],
    ) -> bool:
        """Take a subscription to a view (``False``: not a view): it gets every change."""
        view = None if sub.matcher.is_regex else self.views.get((conn.mt, sub.matcher.topic))
        if view is None:
            return False
        if replaced is not None:
            remove(replaced)
        self.flush()
        view.subs.append(sub)
        conn.subs[sub.sub_id] = sub
        send_acks(
            conn.session.send, hdr, flags & (RECEIVED | PROCESSED | COMPLETED), sub_id=sub.sub_id
        )
        return True

    def removed(self, sub: Subscription) -> bool:
        """A subscription ended; ``True`` when it was a view's."""
        for view in self.views.values():
            if sub in view.subs:
                view.subs.remove(sub)
                return True
        return False

    def close(self) -> None:
        """Stop the pending recomputation."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _matched(sub: Subscription, doc: Any) -> bool:
    return sub.predicate is None or bool(sub.predicate(doc))
