"""One queue's state, with no I/O: messages, leases, queue subscriptions, fairness, limits.

A :class:`Queue` takes messages in (:meth:`Queue.enqueue`), chooses which subscription gets
which message (:meth:`Queue.offer`), and applies acknowledgements (:meth:`Queue.ack`), lease
expiry and message expiration (:meth:`Queue.tick`). The engine (:mod:`.engine`) turns what
it decides into frames and journal records.

Rules (``shared/queues.md`` §1, §4-§6):

* messages are offered oldest first (publication order; a returned message keeps its place),
  or highest ``Priority`` first (ties in publication order);
* a ``BarrierExpression`` message waits until every earlier message is acknowledged (and
  holds back every later one), then goes to every subscription it matches, backlogs ignored,
  and leaves the queue;
* a subscription never holds more than its backlog, ``min(max_backlog option (default 1),
  MaxPerSubscriptionBacklog)``; the queue never more than ``MaxBacklog`` leases in all;
* fairness: ``fast`` (first subscription with room), ``round-robin`` (the next one with room,
  rotating), ``proportional`` (the lowest leased/backlog ratio, ties to the first found);
* at-least-once: a message stays until acknowledged; lease expiry, cancel and the
  subscription's end return it (counting toward ``MaxDeliveries``/``MaxCancels``: it expires
  when a count reaches its limit, as the official example shows);
* at-most-once: a message leaves the queue when it is sent; the subscriber's ack (any form)
  only frees its backlog slot;
* ``Leasing`` ``strict``: an ack of a message leased to another connection does nothing.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from . import acking, leasing, speedups
from .arrivals import Arrivals
from .config import QueueConfig
from .expiration import deadline
from .leasing import FrameTargets, lease_arrivals, lowest_ratio
from .message import UNPARSED, AckResult, QueueMessage, QueueSub
from .priority import unsigned_priority
from .states import AVAILABLE, GONE, LEASED, REMOTE

__all__ = [
    "AVAILABLE",
    "GONE",
    "LEASED",
    "REMOTE",
    "AckResult",
    "Queue",
    "QueueMessage",
    "QueueSub",
]


_ack_run: Final = speedups.ack_run or acking.ack_run
"""Plain acks of leased messages, a run at a time (C when built, else its Python twin)."""

_lease_run: Final = speedups.lease_run or leasing.lease_run
"""The leases of a run of arrivals (C when built, else its Python twin)."""

_ACK_TIME_WEIGHT: Final = 0.1
"""Weight of the newest acknowledgement in :attr:`Queue.ack_time`."""

_SCAN_LIMIT: Final = 10_000
"""Messages skipped (no subscription with room matches them) before one offer gives up."""


_FULL: Final = QueueSub(None, None, 0, None)
"""``_choose``'s answer when no subscription has room (the offer stops there)."""


class Queue:
    """The state of one queue (see the module docstring).

    Args:
        config: the queue's configuration.
        decode: parses a payload for filters (``None`` when it cannot be parsed).
        owner: this instance owns new messages (``GroupLocalQueue`` with another
            ``InitialOwner``: it keeps them but never delivers them).
    """

    def __init__(
        self,
        config: QueueConfig,
        *,
        decode: Callable[[bytes], Any],
        owner: bool = True,
        priority: Callable[[Any], Any] | None = None,
        barrier: Callable[[Any], bool] | None = None,
    ) -> None:
        self.config = config
        self._priority = priority
        self._barrier = barrier
        self.name = config.name
        self.at_most_once = config.semantics == "at-most-once"
        self.owner = owner
        self._decode = decode
        self._messages: dict[str, QueueMessage] = {}
        """The tracked messages that are objects, by bookmark, in publication order (those in
        :attr:`_arrivals` are all newer: :attr:`messages` has them all)."""
        self._arrivals = Arrivals()
        """New messages of :meth:`enqueue_run` not made objects yet (:mod:`.arrivals`): after
        :attr:`_fresh` in the FIFO."""
        self._heap: list[tuple[int, int, QueueMessage]] = []
        self._fresh: deque[QueueMessage] = deque()
        """Without ``Priority``: new messages in publication order (a FIFO costs O(1) where
        the heap costs O(log depth)); :meth:`offer` merges it with :attr:`_heap`, which then
        holds only the messages that went back (returned, skipped)."""
        self._order = 0
        self.subs: list[QueueSub] = []
        self._rr = 0
        self.leased = 0
        """Leases outstanding (at-most-once: backlog slots held)."""
        self.deferred: dict[str, float] = {}
        """Acks of messages not in the queue yet: bookmark -> when to forget it."""
        self.deferred_index: dict[str, int] = {}
        """The journal index of a deferred ack's record (``queues.ack`` stays at or before
        it while the ack waits, so a restart rebuilds it); stale entries are dropped there."""
        self._lease_heap: list[tuple[float, int, QueueMessage]] = []
        self._expiry_heap: list[tuple[float, int, QueueMessage]] = []
        self.remote = 0
        """Messages another instance owns (state :data:`REMOTE`)."""
        self.ack_time = 0.0
        """Seconds from a lease to its acknowledgement, a moving average over the acks."""
        self.ack_times = 0
        """Acknowledgements of leased messages measured in :attr:`ack_time`."""
        self.measure_acks = False
        """Measure :attr:`ack_time` (replicated queues only: plain ones do not pay for it)."""
        self.message_class: type[QueueMessage] = QueueMessage
        """What a message is made of (``FileBackedMetadata``: :mod:`.metadata_file`'s)."""
        self.counters: dict[str, int] = {
            "enqueued": 0,
            "delivered": 0,
            "acked": 0,
            "cancelled": 0,
            "expired": 0,
            "expired_leases": 0,
            "returned": 0,
            "deferred_acks_applied": 0,
            "barriers": 0,
            "transferred_in": 0,
            "transferred_out": 0,
            "transfer_requested": 0,
            "transfer_refused": 0,
            "transfer_relayed": 0,
        }
        """Running totals since the start (statistics)."""

    # ------------------------------------------------------------------ intake

    @property
    def messages(self) -> dict[str, QueueMessage]:
        """Every tracked message by bookmark (available and leased), in publication order.

        Looking turns the queue's arrivals into objects (:mod:`.arrivals`): the hot paths
        use the table without them."""
        if self._arrivals.count:
            self._materialize()
        return self._messages

    def __contains__(self, bookmark: str) -> bool:
        return bookmark in self.messages

    def __len__(self) -> int:
        return len(self._messages) + self._arrivals.count

    def _materialize(self) -> None:
        """Every arrival becomes an object at the FIFO's end (they are the newest)."""
        new = self.message_class
        messages = self._messages
        fresh = self._fresh.append
        for bookmark, data, order, enqueued in self._arrivals.drain():
            msg = new(bookmark, data, None, order, enqueued)
            messages[bookmark] = msg
            fresh(msg)

    def enqueue(
        self,
        bookmark: str,
        data: bytes,
        x: str | None,
        now: float,
        owner: str | None = None,
        *,
        expires: float | None = None,
    ) -> bool:
        """A new message (``False``: already here, or acknowledged before it arrived).

        ``now``: its publication, ``expires``: its own expiration (``queues.expiration``);
        ``owner``: replicated queues only, the instance that owns it; :meth:`own` then says
        whether this instance may deliver it (until then it is :data:`REMOTE`)."""
        if bookmark in self.messages:  # (arrivals made objects: this one comes after them)
            return False
        if self.deferred and self._deferred_applies(bookmark, now):
            self.counters["deferred_acks_applied"] += 1
            return False
        self._order += 1
        msg = self.message_class(bookmark, data, x, self._order, now)
        if expires is not None or self.config.expiration is not None:
            msg.expires = deadline(self.config, now, expires)
        if msg.expires is not None:
            heapq.heappush(self._expiry_heap, (msg.expires, msg.order, msg))
        if self._barrier is not None:
            msg.doc = self._decode(data)
            msg.barrier = msg.doc is not None and bool(self._barrier(msg.doc))
        if self._priority is not None:
            msg.doc = self._decode(data)
            msg.rank = -unsigned_priority(self._priority(msg.doc) if msg.doc is not None else None)
        self._messages[bookmark] = msg
        self.counters["enqueued"] += 1
        if owner is not None:
            msg.owner = owner
            if not msg.barrier:  # a barrier is released by every instance (per instance)
                msg.state = REMOTE
                self.remote += 1
                return True
        if self._priority is None:
            self._fresh.append(msg)
        else:
            heapq.heappush(self._heap, (msg.rank, msg.order, msg))
        return True

    def enqueue_run(self, items: Sequence[tuple[str, bytes]], now: float) -> int:
        """:meth:`enqueue` for a run of new messages ``(bookmark, body)`` from the queue's
        intake, without ``x`` or an expiration of their own, published at ``now``, owned
        here; how many were added.

        A queue without ``Priority``, ``BarrierExpression`` and ``Expiration``, with one
        underlying topic (its intake sees each journaled message once: no bookmark of a run
        is in the queue already) and messages kept in memory keeps the run as it is, a list
        it owns from now on (:mod:`.arrivals`); with more underlying topics, or
        ``FileBackedMetadata``, it makes the messages in one loop (what :meth:`enqueue` does
        for such a message, inline); any other queue calls :meth:`enqueue` for each."""
        cfg = self.config
        if self._priority is not None or self._barrier is not None or cfg.expiration is not None:
            return sum(self.enqueue(bookmark, data, None, now) for bookmark, data in items)
        deferred = self.deferred
        counters = self.counters
        if self.message_class is QueueMessage and len(cfg.topics()) == 1:
            run = items if type(items) is list else list(items)
            if deferred:
                kept = [item for item in run if not self._deferred_applies(item[0], now)]
                if len(kept) < len(run):
                    counters["deferred_acks_applied"] += len(run) - len(kept)
                run = kept
            self._arrivals.add(run, now, self._order + 1)
            self._order += len(run)
            counters["enqueued"] += len(run)
            return len(run)
        messages = self.messages
        fresh = self._fresh.append
        order = self._order
        new = self.message_class
        added = applied = 0
        for bookmark, data in items:
            if bookmark in messages:
                continue
            if deferred and self._deferred_applies(bookmark, now):
                applied += 1
                continue
            order += 1
            msg = new(bookmark, data, None, order, now)
            messages[bookmark] = msg
            fresh(msg)
            added += 1
        self._order = order
        counters["enqueued"] += added
        if applied:
            counters["deferred_acks_applied"] += applied
        return added

    def _deferred_applies(self, bookmark: str, now: float) -> bool:
        """Whether an acknowledgement that came before ``bookmark`` takes it out as it arrives,
        published at ``now``: one kept until after ``now`` does; one that expired first
        (``DeferredAckExpiration``) is forgotten, as :meth:`tick` would have (``now`` is the
        journal time in a recovery, so a replay decides as the live run did)."""
        until = self.deferred.pop(bookmark, None)
        if until is None or until > now:
            return until is not None
        self.deferred_index.pop(bookmark, None)  # (its record holds nothing now)
        return False

    def expire_deferred(self, now: float) -> int:
        """Forget the acknowledgements kept for messages that did not come by ``now``
        (:meth:`tick` does it too; a recovery calls it once the journal is read, since a
        deferred acknowledgement rebuilt from its record may be past its time); how many."""
        gone = [b for b, when in self.deferred.items() if when <= now]
        for bookmark in gone:
            del self.deferred[bookmark]
            self.deferred_index.pop(bookmark, None)  # (its record holds nothing now)
        return len(gone)

    def decode_doc(self, msg: QueueMessage) -> Any:
        """``msg``'s parsed payload (``None`` when it cannot be parsed), parsed once."""
        if msg.doc is UNPARSED:
            msg.doc = self._decode(msg.data)
        return msg.doc

    def own(self, msg: QueueMessage, owner: str) -> bool:
        """``owner`` (this instance) owns ``msg`` from now on: it becomes available here.
        ``False`` when it was not :data:`REMOTE`."""
        msg.owner = owner
        if msg.state != REMOTE:
            return False
        msg.state = AVAILABLE
        self.remote -= 1
        heapq.heappush(self._heap, (msg.rank, msg.order, msg))
        return True

    def disown(self, msg: QueueMessage, owner: str) -> bool:
        """Another instance, ``owner``, owns ``msg`` from now on (an available or leased
        message stops being offered here; a lease in progress ends without a return).
        ``False`` when it was already :data:`REMOTE` or gone."""
        msg.owner = owner
        if msg.state in (REMOTE, GONE):
            return False
        if msg.lessee is not None:
            qsub = msg.lessee
            if qsub.leased.pop(msg.bookmark, None) is not None:
                self.leased -= 1
            msg.lessee = None
            msg.lease_deadline = None
        msg.state = REMOTE
        self.remote += 1
        return True

    def remove(self, bookmark: str) -> QueueMessage | None:
        """Take a message out for good (recovery of a journaled ack)."""
        msg = self.messages.get(bookmark)
        if msg is None:
            return None
        self._drop(msg)
        return msg

    # ------------------------------------------------------------------ subscriptions

    def add(self, qsub: QueueSub) -> None:
        """A new queue subscription."""
        self.subs.append(qsub)

    def take_over(self, old: QueueSub, new: QueueSub) -> None:
        """``replace``: ``new`` keeps the leases of ``old`` (its backlog is recomputed)."""
        new.leased = old.leased
        for msg in new.leased.values():
            msg.lessee = new
        index = self.subs.index(old)
        self.subs[index] = new

    def discard(self, qsub: QueueSub, now: float) -> list[QueueMessage]:
        """The subscription ended: its leases come back (at-least-once); what expired."""
        if qsub in self.subs:
            self.subs.remove(qsub)
        expired: list[QueueMessage] = []
        for msg in list(qsub.leased.values()):
            if self._release(msg, qsub):
                expired.extend(self._returned(msg, now, cancel=False))
        qsub.leased.clear()
        return expired

    # ------------------------------------------------------------------ delivery

    def offer(
        self, now: float, frames: FrameTargets | None = None
    ) -> list[tuple[QueueSub, QueueMessage]]:
        """Lease what can be leased now; returns ``(subscription, message)`` in order (the
        leases share one ``lease_deadline`` object: :mod:`.framing` relies on it).

        ``frames``: new messages leased when nothing was leased before them in this offer
        are framed there as they are leased (:func:`.leasing.lease_run`) and are not in the
        list returned; everything else is."""
        out: list[tuple[QueueSub, QueueMessage]] = []
        heap = self._heap
        fresh = self._fresh
        if not (heap or fresh or self._arrivals.count) or not self.owner:
            return out
        subs = self.subs
        if not subs:
            return out
        if (
            not heap
            and self._barrier is None
            and (len(subs) == 1 or self.config.fairness == "proportional")
            and all(qsub.matches is None for qsub in subs)
        ):
            return self._offer_fresh(now, frames)
        return self._offer_scan(now)

    def _offer_scan(self, now: float) -> list[tuple[QueueSub, QueueMessage]]:
        """:meth:`offer` in general: the FIFO and the heap of returned messages merged in
        order, barriers, each message's choice of subscription (:meth:`_choose`)."""
        out: list[tuple[QueueSub, QueueMessage]] = []
        heap = self._heap
        fresh = self._fresh
        if self._arrivals.count:
            self._materialize()
        first = fresh[0] if fresh and (not heap or fresh[0].order < heap[0][1]) else heap[0][2]
        if not first.barrier:
            for candidate in self.subs:
                if len(candidate.leased) < candidate.backlog:
                    break
            else:
                return out  # no subscription has room
        limit = self.config.max_backlog
        lease_period = self.config.lease_period
        lease_deadline = None if lease_period is None else now + lease_period  # one object
        skipped: list[tuple[int, int, QueueMessage]] = []
        choose = self._choose
        heappop = heapq.heappop
        popleft = fresh.popleft
        item: tuple[int, int, QueueMessage] | None
        while (heap or fresh) and (limit is None or self.leased < limit):
            if fresh and (not heap or fresh[0].order < heap[0][1]):
                msg = popleft()
                item = None  # made only if it goes back
            else:
                item = heappop(heap)
                msg = item[2]
            if msg.state != AVAILABLE:
                continue  # acknowledged or expired while waiting
            if msg.barrier:
                if next(iter(self._messages)) != msg.bookmark:
                    # earlier messages are not all acknowledged yet: it waits, and so
                    # does everything after it
                    skipped.append(item or _item(msg))
                    break
                out.extend(self._release_barrier(msg))
                continue
            qsub = choose(msg)
            if qsub is None:
                # no subscription with room takes this one
                skipped.append(item or _item(msg))
                if len(skipped) >= _SCAN_LIMIT:
                    break
                continue
            if qsub is _FULL:
                skipped.append(item or _item(msg))
                break
            msg.deliveries += 1
            self.leased += 1
            qsub.leased[msg.bookmark] = msg
            msg.lessee = qsub
            msg.leased_at = now
            if self.at_most_once:
                msg.state = GONE  # gone from the queue; the slot stays until acknowledged
                del self._messages[msg.bookmark]
            else:
                msg.state = LEASED
            if lease_deadline is not None:
                msg.lease_deadline = lease_deadline
                heapq.heappush(self._lease_heap, (lease_deadline, msg.order, msg))
            out.append((qsub, msg))
        self.counters["delivered"] += len(out)
        for item in skipped:
            heapq.heappush(heap, item)
        return out

    def _offer_fresh(
        self, now: float, frames: FrameTargets | None
    ) -> list[tuple[QueueSub, QueueMessage]]:
        """:meth:`offer` when only the FIFO holds messages (none went back), without a
        ``BarrierExpression`` or subscription filters, by one subscription or ``proportional``
        fairness: the same choice as :meth:`_choose` in one loop, and a message no one has
        room for stays at the FIFO's front (no heap entry). The FIFO is :attr:`_fresh`, then
        :attr:`_arrivals` (made objects here, as they are leased: :func:`.leasing.lease_run`)."""
        out: list[tuple[QueueSub, QueueMessage]] = []
        subs = self.subs
        # without filters every message goes to a subscription with room while one has it
        single = subs[0] if len(subs) == 1 else None
        if single is not None:
            room = single.backlog - len(single.leased)
        else:
            room = sum(max(0, qsub.backlog - len(qsub.leased)) for qsub in subs)
        config = self.config
        if config.max_backlog is not None:
            room = min(room, config.max_backlog - self.leased)
        if room <= 0:
            return out
        lease_period = config.lease_period
        lease_deadline = None if lease_period is None else now + lease_period  # one object
        at_most_once = self.at_most_once
        state = GONE if at_most_once else LEASED
        messages = self._messages
        lease_heap = self._lease_heap
        fresh = self._fresh
        arrivals = self._arrivals
        if arrivals.count and self.message_class is not QueueMessage:
            self._materialize()  # (kept for the plain class: the class changed since)
        append = out.append
        while room > 0 and fresh:
            msg = fresh.popleft()
            if msg.state != AVAILABLE:
                continue  # acknowledged or expired while waiting
            if at_most_once:
                del messages[msg.bookmark]  # gone; the slot stays until acknowledged
            qsub = single or lowest_ratio(subs)
            msg.deliveries += 1
            qsub.leased[msg.bookmark] = msg
            msg.lessee = qsub
            msg.leased_at = now
            msg.state = state
            if lease_deadline is not None:
                msg.lease_deadline = lease_deadline
                heapq.heappush(lease_heap, (lease_deadline, msg.order, msg))
            append((qsub, msg))
            room -= 1
        kept = None if at_most_once else messages  # (at-most-once: gone as they are sent)
        # framed as leased: only when nothing is in ``out`` (each session's frames in order),
        # and not at-most-once (the caller journals those as they go)
        direct = frames if frames is not None and not out and not at_most_once else None
        framed = lease_arrivals(
            _lease_run,
            self._arrivals,
            room,
            self.subs,
            kept,
            now,
            state,
            lease_deadline,
            self._lease_heap,
            out,
            direct,
        )
        self.leased += len(out) + framed
        self.counters["delivered"] += len(out) + framed
        return out

    def _release_barrier(self, msg: QueueMessage) -> list[tuple[QueueSub, QueueMessage]]:
        """A barrier message whose turn came: to every subscription it matches (backlogs
        ignored), and out of the queue at once."""
        msg.state = GONE
        del self._messages[msg.bookmark]
        self.counters["barriers"] += 1
        out = []
        for qsub in self.subs:
            if qsub.matches is not None and (msg.doc is None or not qsub.matches(msg.doc)):
                continue
            out.append((qsub, msg))
        return out

    def _choose(self, msg: QueueMessage) -> QueueSub | None:
        """The subscription that gets ``msg`` by the fairness model; ``None`` when no
        subscription with room matches it, :data:`_FULL` when none has room at all."""
        subs = self.subs
        n = len(subs)
        if n == 1:  # one subscription: no choice to make
            only = subs[0]
            if len(only.leased) >= only.backlog:
                return _FULL
            if only.matches is not None:
                if msg.doc is UNPARSED:
                    msg.doc = self._decode(msg.data)
                if msg.doc is None or not only.matches(msg.doc):
                    return None
            return only
        fairness = self.config.fairness
        best: QueueSub | None = None
        best_ratio = 2.0
        room = False
        if fairness == "proportional":  # the default: the same rule in a plainer loop
            for qsub in subs:
                leased = len(qsub.leased)
                if leased >= qsub.backlog:
                    continue
                room = True
                if qsub.matches is not None:
                    if msg.doc is UNPARSED:
                        msg.doc = self._decode(msg.data)
                    if msg.doc is None or not qsub.matches(msg.doc):
                        continue
                ratio = leased / qsub.backlog
                if ratio < best_ratio:
                    best, best_ratio = qsub, ratio
            return _FULL if best is None and not room else best
        start = self._rr if fairness == "round-robin" else 0
        for i in range(n):
            k = (start + i) % n if start else i
            qsub = subs[k]
            if len(qsub.leased) >= qsub.backlog:
                continue
            room = True
            if qsub.matches is not None:
                if msg.doc is UNPARSED:
                    msg.doc = self._decode(msg.data)
                if msg.doc is None or not qsub.matches(msg.doc):
                    continue
            if fairness == "round-robin":
                self._rr = (k + 1) % n
            return qsub  # round-robin, fast: the first with room that takes it
        return None if room else _FULL

    # ------------------------------------------------------------------ acknowledgements

    def ack(
        self,
        bookmarks: Iterable[str],
        *,
        option: str | None,
        owner: object,
        now: float,
        known: Callable[[str], bool],
    ) -> AckResult:
        """Apply an acknowledgement (``option``: ``None``, ``cancel`` or ``expire``).

        ``known(bookmark)``: the transaction log holds that message (then a bookmark not in
        the queue was acknowledged or expired before, or never entered it: ignored; else the
        ack is deferred until it arrives).
        """
        result = AckResult()
        strict = self.config.leasing == "strict"
        messages = self._messages
        removed = result.removed
        acked = 0  # plain acks of leased messages, the hot path: counted once at the end
        run = option is None and not self.measure_acks  # (replicated: measured below)
        bookmarks = bookmarks if isinstance(bookmarks, list) else list(bookmarks)
        pos, count = 0, len(bookmarks)
        while pos < count:
            if run:
                start = pos
                pos, freed = _ack_run(messages, bookmarks, pos, owner, strict, removed)
                self.leased -= freed
                acked += pos - start
                if pos == count:
                    break
            bookmark = bookmarks[pos]
            pos += 1
            msg = messages.get(bookmark)
            if msg is None and self._arrivals.count:
                self._materialize()  # not leased: maybe a message that just arrived
                msg = messages.get(bookmark)
            if msg is None:
                self._ack_missing(bookmark, owner, option, now, known, result)
                continue
            lessee = msg.lessee
            if strict and lessee is not None and lessee.owner is not owner:
                result.ignored += 1
                continue
            if option == "cancel":
                if lessee is None:
                    result.ignored += 1
                    continue
                self._release(msg, lessee)
                self.counters["cancelled"] += 1
                result.returned += 1
                for gone in self._returned(msg, now, cancel=True):
                    result.expired.append((gone, _reason(gone, self.config)))
                    result.removed.append(gone.bookmark)
                continue
            if lessee is not None:
                self._release(msg, lessee)
                if self.measure_acks and option is None:  # replicated queues' transfers
                    took = now - msg.leased_at
                    weight = _ACK_TIME_WEIGHT if self.ack_times else 1.0
                    self.ack_time += (took - self.ack_time) * weight
                    self.ack_times += 1
            self._drop(msg)
            result.removed.append(bookmark)
            if option == "expire":
                self.counters["expired"] += 1
                result.expired.append((msg, "forced_expire"))
            else:
                self.counters["acked"] += 1
        if acked:
            self.counters["acked"] += acked
        return result

    def _ack_missing(
        self,
        bookmark: str,
        owner: object,
        option: str | None,
        now: float,
        known: Callable[[str], bool],
        result: AckResult,
    ) -> None:
        # at-most-once (or an expired lease's message): the ack frees the sender's slot
        for qsub in self.subs:
            msg = qsub.leased.get(bookmark)
            if msg is not None:
                del qsub.leased[bookmark]
                self.leased -= 1
                msg.lessee = None
                if option is None:
                    self.counters["acked"] += 1
                result.ignored += 1 if option is not None else 0
                return
        if option is None and not known(bookmark):
            self.deferred[bookmark] = now + self.config.deferred_ack_expiration
            result.deferred.append(bookmark)
            return
        result.ignored += 1

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> tuple[list[tuple[QueueMessage, str]], int]:
        """Expire leases and messages whose time has come.

        Returns:
            ``(expired messages with their reason, leases returned)``.
        """
        expired: list[tuple[QueueMessage, str]] = []
        returned = 0
        leases = self._lease_heap
        while leases and leases[0][0] <= now:
            deadline, _order, msg = heapq.heappop(leases)
            qsub = msg.lessee
            if qsub is None or msg.lease_deadline != deadline:
                continue  # acknowledged, cancelled or leased again since
            self._release(msg, qsub)
            self.counters["expired_leases"] += 1
            if self.at_most_once:
                continue  # the slot is free again; the message was gone already
            returned += 1
            for gone in self._returned(msg, now, cancel=False):
                expired.append((gone, "max_deliveries"))
        timed = self._expiry_heap
        while timed and timed[0][0] <= now:
            _when, _order, msg = heapq.heappop(timed)
            if msg.state == GONE:
                continue
            if msg.lessee is not None:
                self._release(msg, msg.lessee)
            self._drop(msg)
            self.counters["expired"] += 1
            expired.append((msg, "time_limit"))
        if self.deferred:
            self.expire_deferred(now)
        return expired, returned

    def next_deadline(self) -> float | None:
        """When :meth:`tick` has something to do next (``None``: nothing timed)."""
        times = [h[0][0] for h in (self._lease_heap, self._expiry_heap) if h]
        return min(times) if times else None

    # ------------------------------------------------------------------ statistics

    def oldest_lease_age(self, now: float) -> float:
        """Seconds since the oldest outstanding lease was granted (0: none)."""
        period = self.config.lease_period
        oldest = 0.0
        for qsub in self.subs:
            for msg in qsub.leased.values():
                if msg.lease_deadline is not None and period is not None:
                    oldest = max(oldest, now - (msg.lease_deadline - period))
        return oldest

    def oldest_bookmark(self) -> str | None:
        """The bookmark of the oldest message still tracked (its arrivals stay as they are)."""
        first = next(iter(self._messages), None)
        return first if first is not None else self._arrivals.first_bookmark()

    # ------------------------------------------------------------------ internals

    def _release(self, msg: QueueMessage, qsub: QueueSub) -> bool:
        """End ``msg``'s lease by ``qsub``; ``True`` when the message is still queued."""
        if qsub.leased.pop(msg.bookmark, None) is not None:
            self.leased -= 1
        msg.lessee = None
        msg.lease_deadline = None
        if msg.state == LEASED:
            msg.state = AVAILABLE
            return True
        return False

    def _returned(self, msg: QueueMessage, now: float, *, cancel: bool) -> list[QueueMessage]:
        """``msg`` is available again, unless a limit expires it (returned in the list)."""
        if msg.state != AVAILABLE:
            return []
        self.counters["returned"] += 1
        cfg = self.config
        if cancel:
            msg.cancels += 1
        if (cancel and cfg.max_cancels and msg.cancels >= cfg.max_cancels) or (
            cfg.max_deliveries and msg.deliveries >= cfg.max_deliveries
        ):
            self._drop(msg)
            self.counters["expired"] += 1
            return [msg]
        heapq.heappush(self._heap, (msg.rank, msg.order, msg))
        return []

    def _drop(self, msg: QueueMessage) -> None:
        if msg.lessee is not None:
            self._release(msg, msg.lessee)
        if msg.state == REMOTE:
            self.remote -= 1
        msg.state = GONE
        self._messages.pop(msg.bookmark, None)


def _item(msg: QueueMessage) -> tuple[int, int, QueueMessage]:
    """``msg``'s entry in the offer heap (a message from the FIFO going back)."""
    return (msg.rank, msg.order, msg)


def _reason(msg: QueueMessage, config: QueueConfig) -> str:
    """Why a cancelled message expired."""
    if config.max_cancels and msg.cancels >= config.max_cancels:
        return "max_cancels"
    return "max_deliveries"
