"""Rebuilding one queue from its journal records at start-up (``queues.engine`` reads the
journal from the queue's ack point and hands each record to :class:`Replay`).

A record of an underlying topic (a name or a regular expression) that passes the queue's
``Filter`` enters the queue again (or waits, beyond ``TargetQueueDepth``), with its own
expiration (``queues.expiration``); a journaled removal (a ``sow_delete`` on the queue topic
marked ``queue``) takes its bookmarks out again, or, for a message not journaled before it
(an acknowledgement that arrived first), is a deferred acknowledgement again, until its
``DeferredAckExpiration`` counted from its record: it takes out a message journaled before
then, and is forgotten at the end of the replay when its time has passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..engine.filters import compile_filter
from ..engine.journal import Journal, JournalRecord
from ..engine.payload import decode
from ..engine.topics import compile_topic
from ..engine.wire import split_list
from .depth import Inactive, Waiting
from .expiration import MessageExpiry
from .model import Queue

if TYPE_CHECKING:  # pragma: no cover
    from .replicated import ReplicatedQueues

__all__ = ["Replay"]

_JSON: Final = "json"


class Replay:
    """Applies journal records to ``queue`` in order; counts what it did."""

    def __init__(
        self, queue: Queue, *, expiry: MessageExpiry | None, inactive: Inactive | None
    ) -> None:
        cfg = queue.config
        self._queue = queue
        self._mt = cfg.message_type
        self._matchers = [compile_topic(topic) for topic in cfg.topics()]
        self._names = {m.topic for m in self._matchers if not m.is_regex}
        self._regexes = [m for m in self._matchers if m.is_regex]
        self._predicate = compile_filter(cfg.filter) if cfg.filter else None
        self._expiry = expiry if cfg.expiration_model != "queue" else None
        self._inactive = inactive
        self._journal: Journal | None = None
        self.enqueued = 0
        """Messages that entered the queue (or wait to)."""
        self.removed = 0
        """Messages a journaled removal took out."""
        self.expired_acks = 0
        """Deferred acknowledgements past their expiration when the journal was read."""

    def apply(self, record: JournalRecord) -> None:
        """One journal record."""
        mt = self._mt
        if str(record.fields.get("mt", _JSON)) != mt:
            return
        queue = self._queue
        if record.command == "sow_delete":
            if record.topic == queue.name and "queue" in record.fields:
                inactive = self._inactive
                for bookmark in split_list(record.fields.get("bm")):
                    if queue.remove(bookmark) is not None or (
                        inactive is not None and inactive.remove(bookmark)
                    ):
                        self.removed += 1
                    elif self._arrives_later(bookmark, record.index):
                        # acknowledged before its message arrived here: deferred again
                        until = record.timestamp / 1e6 + queue.config.deferred_ack_expiration
                        queue.deferred[bookmark] = until
                        queue.deferred_index[bookmark] = record.index
            return
        topic = record.topic
        if topic not in self._names and not any(m.matches(topic) for m in self._regexes):
            return
        if self._predicate is not None:
            doc = decode(mt, record.payload)
            if doc is None or not self._predicate(doc):
                return
        x = record.fields.get("x")
        expires = None if self._expiry is None else self._expiry.recorded(mt, record)
        published = record.timestamp / 1e6
        text_x = None if x is None else str(x)
        if self._inactive is not None:
            entered = self._inactive.admit(
                Waiting(record.bookmark, record.payload, text_x, published, expires),
                record.index,
            )
        else:
            entered = queue.enqueue(
                record.bookmark, record.payload, text_x, published, expires=expires
            )
        if entered:
            self.enqueued += 1

    def _arrives_later(self, bookmark: str, index: int) -> bool:
        """The message ``bookmark`` was not journaled here before the record at ``index``
        (it comes later in the log, or has not arrived at all); one journaled before, since
        pruned, was (its publisher's sequence is past it)."""
        journal = self._journal
        pid, _, rest = bookmark.partition("|")
        try:
            publisher, sequence = int(pid), int(rest.partition("|")[0])
        except ValueError:
            return False  # not a bookmark of this log
        found = journal.find_bookmark(publisher, sequence) if journal is not None else None
        if found is not None:
            return found > index
        return journal is not None and sequence > journal.last_sequence(publisher)

    def scan(self, journal: Journal, position: int, replica: ReplicatedQueues | None) -> None:
        """Apply the records of ``journal`` from ``position`` to its end (``replica``: each
        one's ownership too)."""
        self._journal = journal
        queue = self._queue
        while position <= journal.last_index:
            batch = journal.read(position, max_records=4096)
            if not batch:
                break
            for record in batch:
                self.apply(record)
                if replica is not None:
                    replica.recovered(queue, record)
            position = batch[-1].index + 1

    def done(self, now: float) -> None:
        """The journal is read (at ``now``): forget the deferred acknowledgements rebuilt from
        their records whose ``DeferredAckExpiration`` has passed (their messages did not come
        in time: one that comes later is delivered), activate what the target depth allows."""
        self.expired_acks = self._queue.expire_deferred(now)
        if self._inactive is not None:
            self._inactive.refill()
