"""Subscription commands: ``subscribe``, ``delta_subscribe``, pause and resume, and the SOW
queries ``sow``, ``sow_and_subscribe``, ``sow_and_delta_subscribe``.

A command is validated completely (topic, filter, options, conflation, bookmark) before
anything is installed; ``sow_and_subscribe`` answers its query and installs its
subscription in the same call, so no publish can fall between the two.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ampsclient.protocol.header import Header, encode_header

from .command_options import check_queue_only_options, check_queue_options
from .conflation import ConflationError, ConflationSpec, LiveConflation, parse_conflation
from .hooks import BrokerHooks
from .pagination import Page
from .payload import apply_select, encode
from .query_options import QueryOptions, query_options
from .replay_scheduler import ReplayScheduler
from .sow import SowRecord, SowTopic
from .sow_history import HistoryError, historical_sows
from .sow_service import SowService
from .state import Connection, Subscription
from .subscriptions import SubscriptionTable
from .topics import TopicMatcher
from .txlog import Replay, TxLog
from .wire import (
    COMPLETED,
    PROCESSED,
    RECEIVED,
    STATS,
    CommandFailure,
    ack_flags,
    command_filter,
    command_matcher,
    command_options,
    int_field,
    send_acks,
    split_list,
    text,
)

__all__ = ["Subscribing"]

logger = logging.getLogger(__name__)

_PAUSE_SCOPE = (
    "pause and resume apply to bookmark subscriptions only (AMPS User Guide, transaction log "
    "chapter: AMPS keeps a paused subscription's position in the log and replays from it)"
)


def check_pause_scope(options: Mapping[str, str], *, bookmark: str | None) -> None:
    """Refuse ``pause``/``resume`` on a subscription that is not a bookmark subscription.

    A paused subscription resumes from its position in the transaction log, so only a
    bookmark subscription can be paused: a plain one would have to buffer, or drop, what
    arrives meanwhile. (``live`` with ``pause``/``resume``/``rate`` is refused by the replay
    itself, in :meth:`.txlog.Replay.start`.)

    Raises:
        CommandFailure: ``invalid options``.
    """
    if bookmark is None and ("pause" in options or "resume" in options):
        raise CommandFailure("invalid options", _PAUSE_SCOPE)


class Subscribing:
    """The subscription and SOW query commands."""

    def __init__(
        self,
        *,
        txlog: TxLog | None,
        hooks: BrokerHooks,
        sows: SowService,
        table: SubscriptionTable,
        scheduler: ReplayScheduler,
    ) -> None:
        self._txlog = txlog
        self._hooks = hooks
        self._sows = sows
        self._table = table
        self._scheduler = scheduler

    def prepare(
        self, conn: Connection, hdr: Header, options: Mapping[str, str], *, delta: bool
    ) -> tuple[Subscription, Subscription | None]:
        """Validate a subscribe-type command; return ``(new sub, sub it replaces or None)``."""
        topic = text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "subscribe without a topic")
        matcher = command_matcher(topic)
        if self._hooks.guard is not None:
            matcher = self._hooks.guard.matcher(conn, hdr, matcher)
        self._sows.check_type(conn.mt, matcher)
        filter_text, predicate = command_filter(hdr, message_type=conn.mt)
        sub_id = text(hdr.get("sub_id")) or text(hdr.get("cid"))
        if sub_id is None or "," in sub_id:
            raise CommandFailure("invalid subId", f"bad sub_id {sub_id!r}")
        existing = conn.subs.get(sub_id)
        if existing is not None and "replace" not in options:
            raise CommandFailure("subid in use", f"sub_id {sub_id!r} already exists")
        check_pause_scope(options, bookmark=text(hdr.get("bm")))
        for name in ("top_n", "skip_n", "max_backlog"):
            if name in options:
                value = int_field(options[name])
                if value is not None and value < 0:
                    raise CommandFailure("invalid options", f"{name} must be >= 0")
        conflation = self._conflation_spec(conn, matcher, options)
        sub = Subscription(
            conn,
            sub_id,
            matcher,
            filter_text=filter_text,
            predicate=predicate,
            options=options,
            delta=delta,
        )
        if conflation is not None:
            sub.conflation = LiveConflation(conflation)
        if existing is not None:
            sub.paused = existing.paused if "pause" not in options else True
        return sub, existing

    def _conflation_spec(
        self, conn: Connection, matcher: TopicMatcher, options: Mapping[str, str]
    ) -> ConflationSpec | None:
        """The conflation a subscription asks for (the SOW key is the default key, so a topic
        that is not a SOW topic needs ``conflation_key``)."""
        has_key = not matcher.is_regex and self._sows.topic(matcher.topic, conn.mt) is not None
        try:
            return parse_conflation(options, has_sow_key=has_key)
        except ConflationError as exc:
            raise CommandFailure(exc.reason, str(exc)) from None

    @staticmethod
    def _repeats(conn: Connection, hdr: Header, options: Mapping[str, str]) -> bool:
        """A pause or resume that repeats the topic of the existing subscriptions it names
        (as the clients send it): it pauses or resumes them, it does not replace them."""
        ids = split_list(hdr.get("sub_id"))
        if not ids or "replace" in options:
            return False
        topic = text(hdr.get("t"))
        subs = [conn.subs.get(sub_id) for sub_id in ids]
        return all(s is not None and s.matcher.topic == topic for s in subs)

    def _pause_resume(
        self, conn: Connection, hdr: Header, options: Mapping[str, str]
    ) -> str | None:
        ids = split_list(hdr.get("sub_id"))
        if not ids:
            raise CommandFailure("invalid subId", "pause/resume without sub_id")
        resumed: list[Replay[Subscription]] = []
        named: list[tuple[Subscription, Replay[Subscription]]] = []
        for sub in map(conn.subs.get, ids):
            if sub is None:
                continue
            if sub.replay is None:
                raise CommandFailure("invalid options", f"{sub.sub_id!r}: {_PAUSE_SCOPE}")
            if sub.replay.live:
                raise CommandFailure(
                    "invalid options", f"{sub.sub_id!r}: pause and resume do not go with live"
                )
            named.append((sub, sub.replay))
        for sub, replay in named:
            if "pause" in options:
                sub.paused = True
                heir = self._scheduler.ungroup(replay)
                if heir is not None:
                    self._scheduler.pump(heir)
            elif sub.paused:
                sub.paused = False
                resumed.append(replay)
        if resumed:
            self._scheduler.group_resumed(resumed)
        return ",".join(ids)

    def subscribe(self, conn: Connection, hdr: Header, *, delta: bool) -> None:
        """``subscribe``/``delta_subscribe`` (also pause and resume by ``sub_id``)."""
        options = command_options(hdr)
        flags = ack_flags(hdr)
        if ("pause" in options or "resume" in options) and (
            text(hdr.get("t")) is None or self._repeats(conn, hdr, options)
        ):
            sub_ids = self._pause_resume(conn, hdr, options)
            send_acks(
                conn.session.send, hdr, flags & (RECEIVED | PROCESSED | COMPLETED), sub_id=sub_ids
            )
            return
        bookmark = text(hdr.get("bm"))
        queues = self._hooks.queues
        topic = text(hdr.get("t"))
        if queues is not None and bookmark is None and topic is not None:
            if queues.is_queue(conn.mt, topic):
                check_queue_options(options, view=False)
            elif queues.is_view(conn.mt, topic):
                check_queue_options(options, view=True)
        if not (
            queues is not None
            and bookmark is None
            and topic is not None
            and queues.is_queue(conn.mt, topic)
        ):
            check_queue_only_options(options, topic=topic or "")
        sub, replaced = self.prepare(conn, hdr, options, delta=delta)
        if (
            queues is not None
            and bookmark is None
            and queues.subscribe(conn, hdr, sub, replaced, flags)
        ):
            return  # a queue subscription (its acks are sent)
        if queues is not None and bookmark is not None:  # of a queue: its underlying topics
            sub.matcher = queues.replay_matcher(conn.mt, sub.matcher)
        if bookmark is not None:
            if self._txlog is None:
                raise CommandFailure(
                    "invalid topic",
                    f"{sub.matcher.topic!r} is not recorded in the transaction log "
                    "(this instance has no transaction log)",
                )
            self._scheduler.prepare(conn, sub, bookmark, hdr, flags)
        self._table.install(sub, replaced)
        if "resume" in options and sub.paused:
            self._pause_resume(conn, {"sub_id": sub.sub_id}, {"resume": ""})
        send_acks(conn.session.send, hdr, flags & (RECEIVED | PROCESSED), sub_id=sub.sub_id)
        if sub.replay is not None:
            self._scheduler.pump(sub.replay)
            return
        send_acks(conn.session.send, hdr, flags & COMPLETED, sub_id=sub.sub_id)

    def sow(self, conn: Connection, hdr: Header, *, subscribe: bool, delta: bool) -> None:
        """``sow``, ``sow_and_subscribe``, ``sow_and_delta_subscribe`` (a ``sow`` with a
        timestamp bookmark is a historical query, :mod:`.sow_history`)."""
        options = command_options(hdr)
        topic = text(hdr.get("t"))
        if topic is None:
            raise CommandFailure("invalid topic", "sow without a topic")
        matcher = command_matcher(topic)
        if self._hooks.guard is not None:
            matcher = self._hooks.guard.matcher(conn, hdr, matcher)
        queues = self._hooks.queues
        if queues is not None and not subscribe and queues.query(conn, hdr, matcher):
            return  # a query of a queue's available messages (nothing leased)
        if (
            queues is not None
            and subscribe
            and (queues.is_queue(conn.mt, matcher.topic) or queues.is_view(conn.mt, matcher.topic))
        ):
            check_queue_options(options, view=not queues.is_queue(conn.mt, matcher.topic))
            sub, replaced = self.prepare(conn, hdr, options, delta=delta)
            queues.sow_and_subscribe(conn, hdr, matcher, sub, replaced)
            return  # the available messages, then a queue subscription (it leases)
        check_queue_only_options(options, topic=topic)
        aggregated = self._hooks.aggregated
        if aggregated is not None and aggregated.run(
            conn,
            hdr,
            options,
            matcher,
            subscribe=subscribe,
            prepare=lambda: self.prepare(conn, hdr, options, delta=delta),
            remove=self._table.remove,
        ):
            return  # an aggregated query or subscription (views.aggregated)
        sows = self._sows.for_query(conn.mt, matcher)
        bookmark = text(hdr.get("bm"))
        if bookmark is not None:  # a historical query: the SOW as it was at that time
            if subscribe:
                raise CommandFailure(
                    "invalid options",
                    "a historical query cannot subscribe (use sow, then a "
                    "bookmark subscription from the same time)",
                )
            journal = self._txlog.journal if self._txlog is not None else None
            try:
                history = historical_sows(sows, self._sows.history_of, journal, bookmark)
            except HistoryError as exc:
                raise CommandFailure(exc.reason, str(exc)) from None
            try:
                self._answer(conn, hdr, options, history, subscribe=False, delta=delta)
            finally:
                for copy in history:
                    copy.close()
            return
        self._answer(conn, hdr, options, sows, subscribe=subscribe, delta=delta)
        if self._hooks.client_status is not None:
            fields = {
                "query_id": text(hdr.get("query_id")),
                "topic": topic,
                "filter": text(hdr.get("filter")),
                "options": text(hdr.get("o")),
                "sub_id": text(hdr.get("sub_id")),
                "correlation_id": text(hdr.get("x")),
            }
            self._hooks.client_status(conn, "sow", fields)

    def _answer(
        self,
        conn: Connection,
        hdr: Header,
        options: Mapping[str, str],
        sows: list[SowTopic],
        *,
        subscribe: bool,
        delta: bool,
    ) -> None:
        """Run the query over ``sows``, send its results and acks, install the subscription."""
        flags = ack_flags(hdr)
        filter_text, predicate = command_filter(hdr, message_type=conn.mt)
        spec = query_options(hdr, options)
        order_by, top_n, skip_n = spec.order_by, spec.top_n, spec.skip_n
        batch_size = int_field(hdr.get("bs")) or 1
        if batch_size < 1:
            batch_size = 1
        keys = split_list(hdr.get("sow_keys")) if hdr.get("sow_keys") else None
        sub: Subscription | None = None
        replaced: Subscription | None = None
        if subscribe:
            sub, replaced = self.prepare(conn, hdr, options, delta=delta)
        cid = text(hdr.get("cid"))
        query_id = text(hdr.get("query_id")) or cid or (sub.sub_id if sub else None) or ""
        sub_id = sub.sub_id if sub is not None else None

        paginated = sub is not None and top_n is not None and options.get("skip_n") is not None
        if paginated:
            _check_paginated(sows, delta=delta, keys=keys, sub=sub)
        results, matches, topic_matches = self._sows.query(
            sows,
            predicate,
            keys=keys,
            order_by=order_by,
            top_n=top_n,
            skip_n=skip_n,
            filter_text=filter_text,
        )
        if paginated:
            assert sub is not None and top_n is not None
            sub.page = Page(
                sows[0],
                predicate=predicate,
                order_by=order_by,
                skip_n=skip_n,
                top_n=top_n,
                records=[record for _sow, record in results],
            )
        send = conn.session.send
        send_acks(send, hdr, flags & (RECEIVED | PROCESSED), sub_id=sub_id, query_id=query_id)
        send(encode_header({"c": "group_begin", "query_id": query_id}))
        for batch_topic, batch in self._sows.batches(results, batch_size):
            send(_sow_batch(batch_topic, batch, query_id, spec))
        send(encode_header({"c": "group_end", "query_id": query_id}))
        if sub is not None:
            self._table.install(sub, replaced)
        stats = {
            "records_returned": len(results),
            "topic_matches": topic_matches,
            "matches": matches,
        }
        send_acks(
            send, hdr, flags & (COMPLETED | STATS), sub_id=sub_id, query_id=query_id, extra=stats
        )


def _check_paginated(
    sows: list[SowTopic], *, delta: bool, keys: list[str] | None, sub: Subscription | None
) -> None:
    """Refuse what a paginated subscription (``top_n`` with ``skip_n``) cannot be here.

    Raises:
        CommandFailure: ``invalid options``, naming what is refused.
    """
    why = None
    if len(sows) != 1:
        why = "a paginated subscription (top_n with skip_n) needs exactly one SOW topic"
    elif delta:
        why = "a paginated subscription (top_n with skip_n) cannot be a delta subscription"
    elif keys:
        why = "a paginated subscription (top_n with skip_n) cannot name sow_keys"
    elif sub is not None and sub.conflation is not None:
        why = "a paginated subscription (top_n with skip_n) cannot be conflated"
    if why is not None:
        raise CommandFailure("invalid options", why)


def _sow_batch(
    topic: str,
    batch: list[tuple[SowTopic, SowRecord]],
    query_id: str,
    spec: QueryOptions,
) -> bytes:
    """One ``sow`` frame: a batch of records of one topic, each with its own header."""
    select = spec.select
    parts: list[bytes] = []
    with_x = any(r.correlation_id for _, r in batch)
    for sow, record in batch:
        data = record.data
        if select is not None:
            doc = sow.doc(record.key)
            if doc is not None:
                data = encode(sow.message_type, apply_select(doc, select))
        rh = spec.key_fields(record.key)
        rh["bm"] = record.bookmark
        if with_x:
            rh["x"] = record.correlation_id or ""
        if spec.timestamp:
            rh["ts"] = record.timestamp
        rh["l"] = len(data)
        parts.append(encode_header(rh))
        parts.append(data)
    outer = {"c": "sow", "t": topic, "query_id": query_id, "bs": len(batch)}
    return encode_header(outer) + b"".join(parts)
