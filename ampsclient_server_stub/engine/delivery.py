"""Delivery: the frames a message becomes for the subscriptions its route reaches.

* plain publishes: one frame per connection whose ``sids`` lists its matching
  subscriptions (filters are evaluated on a payload decoded at most once);
* SOW publishes: full, delta (against the previous record) or ``oof`` frames;
* ``oof`` for records deleted or expired from a SOW topic;
* live conflation (options ``conflation``/``conflation_key``): frames are held per key and
  released by a timer (see :mod:`.conflation`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any, Final

from ampsclient.protocol.header import encode_header, escape

from .. import accel
from .conflation import LiveConflation, LiveHeld
from .payload import decode, encode, lookup_path, parse_path
from .routing import RoutingIndex
from .session import CallLater
from .sow import SowRecord, SowTopic
from .state import Connection, Route, Subscription
from .topic_counts import TopicCounts
from .wire import delivery_frames, format_timestamp, set_path

__all__ = ["NO_PREVIOUS", "Delivery"]

logger = logging.getLogger(__name__)

Run = tuple[int, str, bytes]
"""A publish of a run: ``(sequence, topic, body)``."""

_frames: Final = accel.delivery_frames or delivery_frames
"""The delivery frames of a stretch for one connection (C, or its Python twin)."""


_topic_of: Final = itemgetter(1)


NO_PREVIOUS: Final[Any] = object()
"""``prev_doc`` of a SOW publish that created its record (no previous document)."""


def _changed_fields(prev: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``new`` that ``prev`` lacks or holds with another value, in ``new``'s
    order."""
    return {name: value for name, value in new.items() if name not in prev or prev[name] != value}


class Delivery:
    """Sends what a route reaches.

    Args:
        index: the routing index (for ``oof`` deliveries).
        clock: wall clock (epoch seconds) for ``timestamp``.
        monotonic: the clock of conflation intervals (a step of the wall clock must not hold
            a conflated message for the length of the step).
        call_later: timers for conflation; ``None``: conflated frames go out at once.
    """

    def __init__(
        self,
        index: RoutingIndex,
        *,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        call_later: CallLater | None,
    ) -> None:
        self._index = index
        self.clock = clock
        self.monotonic = monotonic
        self.call_later = call_later
        self.topics = TopicCounts()
        """Per-topic publish and delivery counts (admin statistics; ingest counts publishes)."""

    def deliver_plain(
        self,
        route: Route,
        topic: str,
        data: bytes,
        x: str | None,
        mt: str,
        bm: str | None = None,
    ) -> None:
        head = '{"c":"p","t":"' + escape(topic) + '","sids":"'
        tail = (
            '"'
            + (',"bm":"' + bm + '"' if bm else "")
            + (',"x":"' + escape(x) + '"' if x else "")
            + "}"
        )
        doc: Any = NO_PREVIOUS
        ts_tail: str | None = None
        sent = 0
        for conn, subs in route:
            sids: list[str] = []
            ts_sids: list[str] | None = None
            for sub in subs:
                pred = sub.predicate
                if pred is not None:
                    if doc is NO_PREVIOUS:
                        doc = decode(mt, data)
                    if doc is None or not pred(doc):
                        continue
                if sub.conflation is not None:
                    if doc is NO_PREVIOUS:
                        doc = decode(mt, data)
                    sub_tail = tail
                    if sub.timestamp:
                        if ts_tail is None:
                            ts_tail = tail[:-1] + ',"ts":"' + format_timestamp(self.clock()) + '"}'
                        sub_tail = ts_tail
                    frame = (head + sub.sid + sub_tail).encode() + data
                    key = sub.conflation.spec.key(topic, doc, None)
                    self._conflate(sub, key, LiveHeld(frame))
                    continue
                if sub.timestamp:
                    if ts_sids is None:
                        ts_sids = []
                    if ts_tail is None:
                        ts_tail = tail[:-1] + ',"ts":"' + format_timestamp(self.clock()) + '"}'
                    ts_sids.append(sub.sid)
                else:
                    sids.append(sub.sid)
            send = conn.session.send
            if sids:
                send((head + ",".join(sids) + tail).encode() + data)
                sent += 1
            if ts_sids:
                assert ts_tail is not None
                send((head + ",".join(ts_sids) + ts_tail).encode() + data)
                sent += 1
        if sent:
            self.topics.delivered(topic, sent)

    def deliver_run(
        self,
        routes: Callable[[str, str], Route],
        mt: str,
        pid: int,
        batch: Sequence[Run],
        topics: list[str] | None = None,
    ) -> None:
        """Deliver a journaled run of plain publishes ``(sequence, topic, body)`` of publisher
        ``pid`` (bookmarks ``pid|sequence|``), in order: what :meth:`deliver_plain` does for
        each, with one list of frames per connection and stretch of one topic when none of
        the connection's subscriptions needs more than its ``sids`` (no filter, conflation,
        timestamp or pause). ``topics``: the run's topics in order, when the caller has them
        already."""
        if type(batch) is not list:
            batch = list(batch)
        n = len(batch)
        if topics is None:
            topics = list(map(_topic_of, batch))
        i = 0
        while i < n:
            topic = topics[i]
            if i == 0 and topics.count(topic) == n:  # the usual run: one topic
                j = n
            else:
                j = i + 1
                while j < n and topics[j] == topic:
                    j += 1
            route = routes(mt, topic)
            if route:
                stretch = batch if i == 0 and j == n else batch[i:j]
                self._deliver_stretch(route, topic, mt, pid, stretch)
            i = j

    def _deliver_stretch(
        self, route: Route, topic: str, mt: str, pid: int, stretch: list[Run]
    ) -> None:
        head = '{"c":"p","t":"' + escape(topic) + '","sids":"'
        tail = f'","bm":"{pid}|'
        sent = 0
        for conn, subs in route:
            if all(s.predicate is None and s.conflation is None and not s.timestamp for s in subs):
                sink = conn.run_sink
                if sink is not None:
                    sink(pid, stretch)
                else:
                    conn.session.send_many(
                        _frames((head + ",".join(s.sid for s in subs) + tail).encode(), stretch)
                    )
                sent += len(stretch)
                continue
            one = ((conn, subs),)
            for seq, _topic, data in stretch:  # filters, conflation, ...: one by one
                self.deliver_plain(one, topic, data, None, mt, f"{pid}|{seq}|")
        if sent:
            self.topics.delivered(topic, sent)

    def delta_body(self, sow: SowTopic, prev_doc: Any, new_doc: Any) -> tuple[bytes, bool] | None:
        """``(delta payload, changed)``, or ``None`` when a delta cannot be computed."""
        if not isinstance(prev_doc, dict) or not isinstance(new_doc, dict):
            return None
        out = _changed_fields(prev_doc, new_doc)
        if sow.message_type == "xml" and len(new_doc) == 1 and new_doc.keys() == prev_doc.keys():
            # an xml message is one root element: its fields are the root's children and
            # attributes, so the delta is taken under the root (else it is always whole)
            root = next(iter(new_doc))
            old_root, new_root = prev_doc[root], new_doc[root]
            if isinstance(old_root, dict) and isinstance(new_root, dict):
                out = {root: _changed_fields(old_root, new_root)}
                changed = bool(out[root])
            else:
                changed = bool(out)
        else:
            changed = bool(out)
        for path in sow.keys:
            parts = parse_path(path)
            if parts and lookup_path(out, path) is None:
                value = lookup_path(new_doc, path)
                if value is not None:
                    set_path(out, parts, value)
        if sow.message_type == "xml" and len(out) == 1:
            root = next(iter(out))
            inner = out[root]
            if isinstance(inner, dict) and isinstance(new_doc.get(root), dict):
                out = {root: {name: inner[name] for name in new_doc[root] if name in inner}}
        ordered = {name: out[name] for name in new_doc if name in out}
        try:
            return encode(sow.message_type, ordered), changed
        except ValueError:
            return None

    def deliver_sow(
        self,
        route: Route,
        sow: SowTopic,
        record: SowRecord,
        new_doc: Any,
        prev_doc: Any,
    ) -> None:
        base: dict[str, Any] = {"c": "p", "t": sow.topic, "sids": None, "k": record.key}
        if record.bookmark:
            base["bm"] = record.bookmark
        if record.correlation_id:
            base["x"] = record.correlation_id
        delta_info: Any = NO_PREVIOUS
        sent = 0
        for conn, subs in route:
            # (kind, timestamp) -> sub ids; kind: "p" full, "d" delta, "o" oof
            groups: dict[tuple[str, bool], list[Subscription]] = {}
            for sub in subs:
                if sub.page is not None:
                    self.page_changed(conn, sub, {record.key}, "deleted")
                    continue
                pred = sub.predicate
                matches = pred is None or (new_doc is not None and pred(new_doc))
                if matches and sub.conflation is not None:
                    self._conflate_sow(sub, sow, record, new_doc, prev_doc)
                    continue
                if matches:
                    kind = "p"
                    if sub.delta and prev_doc is not NO_PREVIOUS:
                        if delta_info is NO_PREVIOUS:
                            delta_info = self.delta_body(sow, prev_doc, new_doc)
                        if delta_info is not None:
                            if not delta_info[1] and sub.no_empties:
                                continue
                            kind = "d"
                elif (
                    sub.oof
                    and pred is not None
                    and prev_doc is not NO_PREVIOUS
                    and prev_doc is not None
                    and pred(prev_doc)
                ):
                    kind = "o"
                    if sub.conflation is not None:  # what is held no longer matches
                        sub.conflation.holds.pop(
                            sub.conflation.spec.key(sow.topic, prev_doc, record.key)
                        )
                else:
                    continue
                groups.setdefault((kind, sub.timestamp and kind != "o"), []).append(sub)
            for (kind, with_ts), group in groups.items():
                if kind == "o":
                    fields: dict[str, Any] = {
                        "c": "oof",
                        "t": sow.topic,
                        "sids": None,
                        "k": record.key,
                        "reason": "match",
                    }
                    body = record.data
                else:
                    fields = dict(base)
                    if with_ts:
                        fields["ts"] = record.timestamp
                    body = delta_info[0] if kind == "d" else record.data
                self.send_group(conn, group, fields, body)
            sent += len(groups)
        if sent:
            self.topics.delivered(sow.topic, sent)

    def page_changed(
        self, conn: Connection, sub: Subscription, changed: set[str], removed_reason: str
    ) -> None:
        """The records ``changed`` of a paginated subscription's topic were written or removed:
        send what entered or changed in its page, and ``oof`` what left it (``removed_reason``
        for a record gone from the SOW, ``match`` for one moved out; :mod:`.pagination`)."""
        page = sub.page
        assert page is not None
        publish, left = page.refresh(changed)
        topic = page.sow.topic
        if sub.oof:
            for record in left:
                reason = "match" if record.key in page.sow else removed_reason
                fields: dict[str, Any] = {
                    "c": "oof",
                    "t": topic,
                    "sids": None,
                    "k": record.key,
                    "reason": reason,
                }
                self.send_group(conn, (sub,), fields, record.data)
        for record in publish:
            fields = {"c": "p", "t": topic, "sids": None, "k": record.key}
            if record.bookmark:
                fields["bm"] = record.bookmark
            if record.correlation_id:
                fields["x"] = record.correlation_id
            if sub.timestamp:
                fields["ts"] = record.timestamp
            self.send_group(conn, (sub,), fields, record.data)
        if publish:
            self.topics.delivered(topic, len(publish))

    @staticmethod
    def send_group(
        conn: Connection, group: Sequence[Subscription], fields: dict[str, Any], body: bytes
    ) -> None:
        fields["sids"] = ",".join(s.sub_id for s in group)
        conn.session.send(encode_header(fields) + body)

    def sow_removed(self, sow: SowTopic, records: Sequence[SowRecord], reason: str) -> None:
        """Send oof ``reason`` (``deleted``/``expired``) for removed records to oof subscribers."""
        if not records:
            return
        route = self._index.route(sow.message_type, sow.topic)
        removed = {r.key for r in records}
        for paged_conn, route_subs in route:
            for paged in route_subs:
                if paged.page is not None:
                    self.page_changed(paged_conn, paged, removed, reason)
        targets = [(conn, [s for s in subs if s.oof and s.page is None]) for conn, subs in route]
        targets = [(conn, subs) for conn, subs in targets if subs]
        if not targets:
            return
        for record in records:
            doc: Any = NO_PREVIOUS
            for conn, subs in targets:
                group: list[Subscription] = []
                for sub in subs:
                    pred = sub.predicate
                    if pred is not None:
                        if doc is NO_PREVIOUS:
                            doc = decode(sow.message_type, record.data)
                        if doc is None or not pred(doc):
                            continue
                    if sub.conflation is not None:
                        if doc is NO_PREVIOUS:
                            doc = decode(sow.message_type, record.data)
                        spec = sub.conflation.spec
                        sub.conflation.holds.pop(spec.key(sow.topic, doc, record.key))
                    group.append(sub)
                if group:
                    fields: dict[str, Any] = {
                        "c": "oof",
                        "t": sow.topic,
                        "sids": None,
                        "k": record.key,
                        "reason": reason,
                    }
                    if record.correlation_id:
                        fields["x"] = record.correlation_id
                    self.send_group(conn, group, fields, record.data)

    # ------------------------------------------------------------------ live conflation

    def _conflate(self, sub: Subscription, key: Any, held: LiveHeld) -> None:
        """Hold ``held`` for ``key`` on a conflated subscription: a new hold of the interval,
        or the replacement of what is held for that key."""
        conf = sub.conflation
        assert conf is not None
        if self.call_later is None:  # no timers (unit tests): nothing could release it later
            self.send_held(sub, [held])
            return
        started = conf.holds.hold(key, held, self.monotonic() + conf.spec.interval)
        if started and conf.timer is None:
            self._arm_conflation(sub, conf)

    def _arm_conflation(self, sub: Subscription, conf: LiveConflation) -> None:
        """Schedule the release of the oldest hold (if any)."""
        deadline = conf.holds.next_deadline()
        if deadline is None or self.call_later is None:
            return
        delay = max(0.0, deadline - self.monotonic())
        conf.timer = self.call_later(delay, lambda: self._conflation_due(sub, conf))

    def _conflation_due(self, sub: Subscription, conf: LiveConflation) -> None:
        """A hold's interval is over: deliver what is due, wait for the next one."""
        conf.timer = None
        if sub.conflation is not conf or sub.conn.closed:
            conf.close()
            return
        self.send_held(sub, conf.holds.release(self.monotonic()))
        self._arm_conflation(sub, conf)

    @staticmethod
    def send_held(sub: Subscription, held: Iterable[LiveHeld]) -> None:
        """Deliver released holds."""
        send = sub.conn.session.send
        for item in held:
            send(item.frame)

    def _conflate_sow(
        self,
        sub: Subscription,
        sow: SowTopic,
        record: SowRecord,
        new_doc: Any,
        prev_doc: Any,
    ) -> None:
        """Hold a SOW update for a conflated subscription. A delta subscription gets, at the
        end of the interval, the delta from the record's state before the hold started."""
        conf = sub.conflation
        assert conf is not None
        key = conf.spec.key(sow.topic, new_doc, record.key)
        held = conf.holds.get(key)
        base = held.base if held is not None else prev_doc
        body = record.data
        if sub.delta and base is not NO_PREVIOUS:
            info = self.delta_body(sow, base, new_doc)
            if info is not None:
                if not info[1] and sub.no_empties:
                    conf.holds.pop(key)  # back to what the subscriber has: nothing to send
                    return
                body = info[0]
        fields: dict[str, Any] = {"c": "p", "t": sow.topic, "sids": sub.sub_id, "k": record.key}
        if record.bookmark:
            fields["bm"] = record.bookmark
        if record.correlation_id:
            fields["x"] = record.correlation_id
        if sub.timestamp:
            fields["ts"] = record.timestamp
        self._conflate(sub, key, LiveHeld(encode_header(fields) + body, base))
