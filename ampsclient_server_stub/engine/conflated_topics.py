"""Conflated topics (``<SOW>/<ConflatedTopic>``): a copy of a SOW topic that takes, at most once
per ``Interval``, the latest value of each record that changed in the underlying topic.

AMPS User Guide, "Conflated Topics"
(https://docs.crankuptheamps.com/amps-user-guide/conflated-topics): only the changed records
are copied, a record updated several times within an interval is copied once with its latest
value, and clients query and subscribe to the conflated topic as to any SOW topic
(``sow``, ``subscribe``, ``sow_and_subscribe``, ``delta_subscribe``, ``oof``) but cannot publish
to it. A record that leaves the ``Filter``, or is deleted or expires in the underlying topic,
is removed from the conflated topic at the next interval (``oof`` reason ``deleted``).

:class:`ConflatedTopic` is the core (what changed since the last interval, from the
underlying topic's write counter); :class:`ConflatedTopics` runs the timers, writes the copy and
delivers what it changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from ampsclient_server_stub.config_model import ConflatedTopicConfig

from .delivery import NO_PREVIOUS, Delivery
from .filters import compile_filter
from .routing import RoutingIndex
from .session import CallLater, TimerHandle
from .sow import SowRecord, SowTopic
from .sow_service import SowService

__all__ = ["ConflatedTopic", "ConflatedTopics"]

logger = logging.getLogger(__name__)


class ConflatedTopic:
    """One conflated topic: its own in-memory SOW, under the underlying records' keys.

    Args:
        config: the ``<ConflatedTopic>`` definition.
        underlying: the SOW topic it copies (of ``config.message_type``).
    """

    def __init__(self, config: ConflatedTopicConfig, *, underlying: SowTopic) -> None:
        self.config: Final = config
        self.underlying: Final = underlying
        self.sow: Final = SowTopic(
            config.name,
            keys=underlying.keys,  # delta messages keep the key fields, as on the underlying
            message_type=config.message_type,
            key_domain=underlying.key_domain,
            hash_indexes=config.hash_indexes,
        )
        """The conflated records (clients read it as a SOW topic)."""
        self._predicate: Final[Callable[[Any], bool] | None] = (
            None if config.filter is None else compile_filter(config.filter)
        )
        self._mark = 0  # the underlying write counter copied up to
        self._removals = -1  # the underlying delete count last seen (-1: scan once)
        self.intervals = 0
        """Intervals run (for statistics and tests)."""
        self.copied = 0
        """Records copied from the underlying topic (statistics: the conflation ratio)."""
        self._writes_at_start = self._underlying_writes()

    @property
    def name(self) -> str:
        return self.config.name

    def _underlying_writes(self) -> int:
        counters = self.underlying.counters
        return counters["insert_count"] + counters["update_count"]

    def updates_in(self) -> int:
        """Writes to the underlying topic since this topic started (statistics)."""
        return self._underlying_writes() - self._writes_at_start

    def changes(self) -> tuple[list[SowRecord], list[str]]:
        """``(records to copy, keys to remove)`` since the last call: the underlying records
        written since then that pass the filter; the conflated keys whose record left the
        filter or is no longer in the underlying topic."""
        under = self.underlying
        written = under.written_since(self._mark)
        if written:
            self._mark = written[-1].seq
        predicate = self._predicate
        copy: list[SowRecord] = []
        drop: list[str] = []
        mine = self.sow
        for record in written:
            if predicate is None:
                copy.append(record)
                continue
            doc = under.doc(record.key)
            if doc is not None and predicate(doc):
                copy.append(record)
            elif record.key in mine:
                drop.append(record.key)
        removals = under.counters["delete_count"]
        if removals != self._removals:  # only then can a conflated key be gone underneath
            self._removals = removals
            drop.extend(k for k in mine if k not in under)
        return copy, drop


class ConflatedTopics:
    """The conflated topics of a broker: registered as read-only SOW topics, copied on timers.

    Args:
        configs: the definitions (their underlying topics must be in ``sows``).
        sows: the broker's SOW topics.
        delivery: sends what each interval changes.
        index: the subscriptions' routing index.
    """

    def __init__(
        self,
        configs: Sequence[ConflatedTopicConfig],
        *,
        sows: SowService,
        delivery: Delivery,
        index: RoutingIndex,
    ) -> None:
        self._delivery = delivery
        self._index = index
        self._timers: dict[str, TimerHandle] = {}
        self._closed = False
        self.topics: list[ConflatedTopic] = []
        for config in configs:
            underlying = sows.topic(config.underlying, config.message_type)
            if underlying is None:  # the configuration reader checked it
                raise ValueError(
                    f"conflated topic {config.name!r}: no SOW topic {config.underlying!r}"
                )
            topic = ConflatedTopic(config, underlying=underlying)
            sows.add_read_only(
                topic.sow,
                f"{config.name!r} is a conflated topic: publish to its underlying topic "
                f"{config.underlying!r}",
            )
            self.topics.append(topic)

    def start(self, call_later: CallLater) -> None:
        """Copy each topic now, then every ``Interval``."""
        for topic in self.topics:
            self._tick(topic, call_later)

    def _tick(self, topic: ConflatedTopic, call_later: CallLater) -> None:
        if self._closed:
            return
        try:
            self.flush(topic)
        except Exception:  # pragma: no cover - a store failure; the next interval retries
            logger.exception("conflated topic %r: copy failed", topic.name)
        self._timers[topic.name] = call_later(
            topic.config.interval, lambda: self._tick(topic, call_later)
        )

    def flush(self, topic: ConflatedTopic) -> tuple[int, int]:
        """Copy what changed in ``topic``'s underlying topic and deliver it; return
        ``(records copied, records removed)``."""
        copy, drop = topic.changes()
        topic.intervals += 1
        topic.copied += len(copy)
        sow = topic.sow
        mt = sow.message_type
        for source in copy:
            key = source.key
            prev_doc = sow.doc(key) if key in sow else NO_PREVIOUS
            record, _previous = sow.publish(
                source.data,
                doc=None,
                sow_key=key,
                bookmark=source.bookmark,
                timestamp=source.timestamp,
                correlation_id=source.correlation_id,
            )
            route = self._index.route(mt, sow.topic)
            if route:
                self._delivery.deliver_sow(route, sow, record, sow.doc(key), prev_doc)
        removed: list[SowRecord] = []
        if drop:
            removed = sow.delete(keys=drop)
            self._delivery.sow_removed(sow, removed, "deleted")
        return len(copy), len(removed)

    def flush_all(self) -> None:
        """Copy every topic now (tests, and a broker without timers)."""
        for topic in self.topics:
            self.flush(topic)

    def close(self) -> None:
        """Stop the timers and close the conflated SOWs."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for topic in self.topics:
            topic.sow.close()
