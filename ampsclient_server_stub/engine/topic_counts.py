"""Per-topic traffic counts for the admin interface: publishes taken in and messages delivered.

Bounded: at most :data:`TOPIC_LIMIT` topics are counted one by one; traffic on further topics
is added to :attr:`TopicCounts.other_publishes` / :attr:`TopicCounts.other_deliveries`, so a
server with a topic per order does not grow a dictionary without end.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Final

__all__ = ["TOPIC_LIMIT", "TopicCounts"]

TOPIC_LIMIT: Final = 10_000
"""Topics counted one by one."""

_topic_of: Final = itemgetter(1)


class TopicCounts:
    """Publishes and deliveries per topic (a delivery: one message frame sent to one
    connection, however many of its subscriptions it matched)."""

    __slots__ = ("deliveries", "limit", "other_deliveries", "other_publishes", "publishes")

    def __init__(self, limit: int = TOPIC_LIMIT) -> None:
        self.limit = limit
        self.publishes: dict[str, int] = {}
        self.deliveries: dict[str, int] = {}
        self.other_publishes = 0
        """Publishes to topics beyond :attr:`limit`."""
        self.other_deliveries = 0
        """Deliveries of topics beyond :attr:`limit`."""

    def published(self, topic: str, count: int = 1) -> None:
        """``count`` publishes to ``topic`` were taken in."""
        counts = self.publishes
        if topic in counts:
            counts[topic] += count
        elif len(counts) < self.limit:
            counts[topic] = count
        else:
            self.other_publishes += count

    def published_run(
        self, batch: Sequence[tuple[Any, str, Any]], topics: list[str] | None = None
    ) -> None:
        """A run of publishes ``(sequence, topic, data)``, counted in C-speed passes (one
        :meth:`published` call per message would cost the batched publish path ~5%);
        ``topics``: the run's topics in order, when the caller has them already."""
        if not batch:
            return
        if topics is None:
            topics = list(map(_topic_of, batch))
        first = topics[0]
        if topics.count(first) == len(topics):  # the usual run: one topic
            self.published(first, len(topics))
            return
        last = first
        run = 0
        for topic in topics:  # stretches of one topic
            if topic == last:
                run += 1
                continue
            self.published(last, run)
            last, run = topic, 1
        self.published(last, run)

    def delivered(self, topic: str, count: int) -> None:
        """A message of ``topic`` went to ``count`` connections."""
        counts = self.deliveries
        if topic in counts:
            counts[topic] += count
        elif len(counts) < self.limit:
            counts[topic] = count
        else:
            self.other_deliveries += count

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """``{topic: (publishes, deliveries)}`` of every counted topic."""
        topics = self.publishes.keys() | self.deliveries.keys()
        return {t: (self.publishes.get(t, 0), self.deliveries.get(t, 0)) for t in topics}
