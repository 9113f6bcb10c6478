"""MemoryBookmarkStore: per-subscription, per-publisher bookmark tracking in process memory.

How the recovery point is computed
----------------------------------
A bookmark is ``<publisherId>|<sequence>|``; sequences of one publisher grow in journal
order, sequences of different publishers say nothing about each other. So the store keeps,
per subscription and per publisher, the messages received and not yet folded into the
recovery point, and the publisher's *point*: "the last discarded bookmark per publisher such
that everything before it from that publisher is discarded" (``shared/protocol.md`` §8, seed
003: "For a set of publishers, the last bookmark discarded by the application for each of
those publishers"). The recovery point returned by :meth:`MemoryBookmarkStore.get_most_recent`
is those points joined with ``,`` (``10620414156524534001|3|,17942185739103000009|1|``); the
server "begins replay at the oldest bookmark in the list" (seed 000), so every message not yet
discarded is replayed, and the per-publisher form stays correct after a failover to a replica
whose journal interleaves publishers differently.

Two refinements keep that promise in corner cases:

* A publisher whose first message is still undiscarded has no point yet. Its messages lie
  after whatever the recovery point was when that first message arrived, so that earlier
  point (its *floor*) stands in for it; if that was EPOCH the whole recovery point is EPOCH.
* A persisted ack (:meth:`MemoryBookmarkStore.persisted`) is adopted as the whole recovery
  point only when everything received on the subscription has been discarded (seed 003:
  "if the application goes for a long stretch of time without receiving messages (and all
  previously received messages have been discarded), it may be most helpful to start from the
  last bookmark that AMPS has provided as being fully persisted"), and only if it is not
  provably older than what the subscription already received: its sequence is below the
  highest one seen from that bookmark's publisher, or equal to it while a message of another
  publisher arrived later. The official client also adopts older ones (it then resubscribes
  from before messages it already processed); ``shared/protocol.md`` §8 asks servers to send
  only points ``>=`` everything delivered, and this store enforces the checks it can make.
  Adopting a point resets the per-publisher points (new messages build them again) but keeps
  duplicate detection.

Timestamps in recovery points (``use_timestamp``): see :mod:`.stamps`.

Cost: ``log`` + ``discard_message`` take about 1.1-1.25 µs per message together in CPython
3.11 without an adapter and 1.65-1.8 µs with one (one or three publishers; ``benchmarks/
test_bench_bookmark_store.py``). The hot paths read an :class:`~ampsclient.Message`'s decoded
header directly and inline the common case; an adapter offering ``update_bookmark(sub_id,
bookmark)`` is called with the two strings instead of a new :class:`RecoveryPoint`. With the
optional C speedups (``docs/speedups.md``) the client's receive path and ``HAClient.discard``
use :attr:`~MemoryBookmarkStore.log_lane`/:attr:`~MemoryBookmarkStore.discard_lane`, which do
that common case in C and call these methods for everything else.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from ... import _accel
from ...exceptions import InvalidBookmarkError, StoreError, UsageError
from ...protocol.bookmarks import (
    EPOCH,
    NOW,
    BookmarkId,
    BookmarkList,
    Timestamp,
    parse_bookmark,
)
from ...protocol.message import Message
from ..recovery.base import RecoveryPointAdapter, iter_recovery_points, make_point
from .base import BookmarkStore, MessageLike
from .live import capped
from .stamps import now_stamp

__all__ = ["MemoryBookmarkStore"]

logger = logging.getLogger("ampsclient.stores.bookmark")

# entry = [publisher, sequence, bookmark, seq_no, discarded]
_PUB: Final = 0
_SEQ: Final = 1
_BM: Final = 2
_NO: Final = 3
_DONE: Final = 4


class _Publisher(_accel.BookmarkPublisherFields):
    """One publisher seen on one subscription.

    Built on ``ampsclient._accel.BookmarkPublisherFields`` (the C speedups' own type when
    built, else its twin): ``queue``, ``high``, ``done``, ``point`` and ``slot`` are that
    type's public fields, which the store's C lane reads and writes through its own struct
    (documented below); ``floor`` is this class's own slot."""

    __slots__ = ("floor",)

    def __init__(self, slot: int, high: int = 0, point: str | None = None) -> None:
        self.queue: deque[list[Any]] = deque()
        """Logged entries not folded into :attr:`point` yet; the head is never discarded."""
        self.high = high
        """Highest sequence logged or recovered (duplicate detection)."""
        self.done = high
        """Highest sequence such that everything up to it is discarded."""
        self.point = point
        """This publisher's recovery item: the bookmark of :attr:`done` (or an earlier one
        recovered from a list); ``None`` when nothing of it was processed since the last
        persisted ack or ever."""
        self.floor: str | None = None
        """Recovery point in force when the first message of :attr:`queue` arrived."""
        self.slot = slot
        """Index of :attr:`point` in the subscription's ``points`` list."""


class _Subscription(_accel.BookmarkSubscriptionFields):
    """Everything the store knows about one subscription.

    Built on ``ampsclient._accel.BookmarkSubscriptionFields`` (the C speedups' own type when
    built, else its twin): ``pubs``, ``next_no``, ``loaded_ts``, ``recent``, ``last_pub``,
    ``points`` and ``inflight`` are that type's public fields, which the store's C lane
    reads and writes through its own struct (documented below); the others are this
    class's own slots."""

    __slots__ = ("base", "floating", "live", "pending", "pointless")

    def __init__(self, base: str = EPOCH) -> None:
        self.pubs: dict[str, _Publisher] = {}
        """Publishers by id text, in first-seen order."""
        self.pending: dict[str, list[Any]] = {}
        """Undiscarded entries by bookmark string, in log order."""
        self.next_no = 1
        """The next number :meth:`MemoryBookmarkStore.log` hands out."""
        self.base = base
        """Recovery point when no publisher contributes one (EPOCH, recovered, persisted)."""
        self.loaded_ts: str | None = None
        """Timestamp item recovered from the adapter (dropped at the next change)."""
        self.recent: str | None = None
        """Cached recovery point (``None`` = recompute)."""
        self.floating = 0
        """Publishers with a floor (no point yet, messages pending)."""
        self.last_pub: str | None = None
        """Publisher of the last message logged (the furthest one delivered)."""
        self.points: list[str] = []
        """Every publisher's point by slot (``""`` for none): joined in the common case."""
        self.pointless = 0
        """Publishers without a point."""
        self.inflight: list[Any] | None = None
        """The common case kept out of :attr:`pending` and the publisher's queue: the one
        logged, undiscarded entry of a subscription whose publisher had nothing else pending
        and already had a point. Discarding it only moves that point; anything else first
        moves it into the queue (:meth:`settle`)."""
        self.live: str | None = None
        """A ``live`` subscription's last persisted point (see :mod:`.live`); ``None``: not live."""

    def settle(self) -> None:
        """Move :attr:`inflight` into :attr:`pending` and its publisher's queue."""
        entry = self.inflight
        if entry is not None:
            self.inflight = None
            entry[_PUB].queue.append(entry)
            self.pending[entry[_BM]] = entry

    def add(self, key: str, high: int = 0, point: str | None = None) -> _Publisher:
        """Register a publisher."""
        pub = self.pubs[key] = _Publisher(len(self.points), high, point)
        self.points.append(point or "")
        if point is None:
            self.pointless += 1
        return pub

    def set_point(self, pub: _Publisher, point: str | None) -> None:
        """Change a publisher's point, keeping :attr:`points` and :attr:`pointless` right."""
        if (pub.point is None) != (point is None):
            self.pointless += 1 if point is None else -1
        pub.point = point
        self.points[pub.slot] = point or ""


def _lift_stand_ins(sub: _Subscription) -> None:
    """Once every publisher of ``sub`` has a point again, move each recovered stand-in point
    up to what its publisher has processed.

    A point recovered from a list that names a publisher twice (``A|2|,A|1|``: A processed up
    to 2, but ``A|1|`` stood in for a publisher whose first message was not processed) keeps
    the earlier item so that message comes again. When no publisher is left without a point
    (the one it stood in for has been processed, or has a point of its own), the list's
    earliest item no longer depends on the stand-in, so it can be A's own point: otherwise A's
    later messages, already processed, would be replayed at every restart.
    """
    if sub.floating or sub.pointless:
        return
    for key, pub in sub.pubs.items():
        point = pub.point
        if pub.queue or point is None or (sub.inflight is not None and sub.inflight[0] is pub):
            continue
        if int(point.split("|")[1]) < pub.done:
            sub.set_point(pub, f"{key}|{pub.done}|")


def _ids(message: MessageLike) -> tuple[Any, Any]:
    """``(bookmark, sub id)`` of a message: a :class:`Message` of any class (a client hands
    out its own subclass) through its properties, which read what the receive path set
    (:meth:`Message.refill`) before parsing the header; anything else through the official
    accessors."""
    if isinstance(message, Message):
        return message.bookmark, message.sub_id
    return message.get_bookmark(), message.get_sub_id()


class MemoryBookmarkStore(BookmarkStore):
    """A thread-safe in-memory bookmark store, optionally backed by a recovery point adapter.

    Args:
        adapter: persists recovery points (:class:`~ampsclient.stores.recovery.
            FileRecoveryPointAdapter`, :class:`~ampsclient.stores.recovery.
            SOWRecoveryPointAdapter`, a :class:`~ampsclient.stores.recovery.
            ConflatingRecoveryPointAdapter` around one, or any duck-typed object). Its stored
            points are read at construction and become the initial recovery points; after
            that it gets ``update(RecoveryPoint(sub_id, bookmark))`` on every change of a
            subscription's recovery point, ``purge()`` on :meth:`purge` and ``close()`` on
            :meth:`close`. It is called while the store's lock is held.
        use_timestamp: append the time the recovery point was produced to it (see the module
            docstring of :mod:`.stamps`).

    Example::

        store = MemoryBookmarkStore()
        for message in client.bookmark_subscribe("orders", MOST_RECENT, sub_id="orders-1"):
            if store.log(message) == 0:
                continue                       # a redelivery: already seen
            process(message)
            store.discard_message(message)
        store.get_most_recent("orders-1")      # e.g. "10620414156524534001|3836|"

    Messages are read with ``get_sub_id()``/``get_bookmark()`` (an :class:`~ampsclient.Message`
    is read directly). Only bookmarks of the form ``publisherId|sequence|`` are tracked.
    """

    def __init__(
        self, adapter: RecoveryPointAdapter | None = None, *, use_timestamp: bool = False
    ) -> None:
        lane = _accel.BookmarkLane
        # with the C lane, a lock whose acquire() first writes the lane's state back
        self._lock: Any = threading.Lock() if lane is None else _accel.StoreLock()  # type: ignore[misc]
        self._subs: dict[str, _Subscription] = {}
        self._adapter = adapter
        self._use_ts = bool(use_timestamp)
        self._server_version: int | str | None = None
        self._closed = False
        self._update_bookmark: Callable[[str, str], None] | None = getattr(
            adapter, "update_bookmark", None
        )
        if adapter is not None:
            for point in iter_recovery_points(adapter):
                self._recover(point.sub_id, point.bookmark)
        self._lane: Any = None
        if lane is not None:
            self._lane = lane(
                self._subs,
                self._lock,
                self.log,
                self.discard_message,
                _Subscription,
                _Publisher,
                Message,
                adapter is None,
            )

    # ------------------------------------------------------------------ properties

    @property
    def log_lane(self) -> Callable[[MessageLike], int]:
        """:attr:`BookmarkStore.log_lane`: the C speedups' lane when they are built."""
        return self.log if self._lane is None else self._lane.log

    @property
    def discard_lane(self) -> Callable[[MessageLike], None]:
        """:attr:`BookmarkStore.discard_lane`: the C speedups' lane when they are built."""
        return self.discard_message if self._lane is None else self._lane.discard

    @property
    def adapter(self) -> RecoveryPointAdapter | None:
        """The recovery point adapter, if any."""
        return self._adapter

    @property
    def use_timestamp(self) -> bool:
        """Whether recovery points end with the time they were produced."""
        return self._use_ts

    def get_server_version(self) -> int | str | None:
        """What :meth:`set_server_version` was given."""
        return self._server_version

    def set_server_version(self, version: int | str) -> None:
        """Remember the server version (kept for API parity; it changes nothing here)."""
        self._server_version = version

    def subscriptions(self) -> list[str]:
        """The sub ids the store knows."""
        with self._lock:
            return list(self._subs)

    # ------------------------------------------------------------------ recovery

    def _recover(self, sub_id: str, bookmark: str) -> None:
        """Install a point read from the adapter as if its bookmarks were logged and discarded."""
        sub = _Subscription()
        self._subs[sub_id] = sub
        text = bookmark.strip()
        try:
            parsed = parse_bookmark(text) if text else None
        except InvalidBookmarkError:
            parsed = None
        items: tuple[BookmarkId | Timestamp, ...]
        if isinstance(parsed, BookmarkList):
            items = parsed.items
        elif isinstance(parsed, BookmarkId):
            items = (parsed,)
        elif isinstance(parsed, Timestamp):
            sub.base = sub.recent = text  # e.g. an adopted persisted ack that was a timestamp
            return
        else:
            if text != EPOCH:  # NOW, a range, junk: nothing this store could have written
                logger.warning("recovered point %r of %r is not usable; using EPOCH", text, sub_id)
            sub.recent = EPOCH
            return
        stamps: list[Timestamp] = []
        for item in items:
            if isinstance(item, Timestamp):
                stamps.append(item)
                continue
            key = str(item.publisher_id)
            pub = sub.pubs.get(key)
            if pub is None:
                sub.add(key, item.sequence, str(item))
                continue
            # A publisher listed twice: the later item is its point, the earlier one stood in
            # for a publisher whose first message was not processed. Resume from the earlier
            # one (that message comes again); everything up to the later one counts as seen.
            if item.sequence > pub.high:
                pub.high = pub.done = item.sequence
            elif pub.point is not None and item.sequence < int(pub.point.split("|")[1]):
                sub.set_point(pub, str(item))
        if stamps:
            oldest = min(stamps)
            if sub.pubs:
                sub.loaded_ts = str(oldest)
            else:
                sub.base = str(oldest)
        sub.recent = self._compute(sub)

    # ------------------------------------------------------------------ the hot path

    def log(self, message: MessageLike) -> int:
        """Record a received message; returns its sequence number, ``0`` for a duplicate.

        See :meth:`BookmarkStore.log`.
        """
        # Hot path: literal indexes instead of the _PUB/_SEQ/... names (no global lookups).
        bm: Any
        sid: Any
        if isinstance(message, Message):  # the client's own subclass too (_ids, inlined)
            bm = message.bookmark  # set by the receive path when it read it (no header parse)
            sid = message.sub_id  # the routed sub id, when the client set one
        else:
            bm, sid = _ids(message)
        if not bm or not sid:
            return 0
        key, _, rest = bm.partition("|")
        if rest[-1:] != "|":
            return 0
        try:
            seq = int(rest[:-1])
        except ValueError:
            return 0
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise StoreError("the bookmark store is closed")
            sub = self._subs.get(sid)
            if sub is None:
                sub = self._subs[sid] = _Subscription()
            pub = sub.pubs.get(key)
            if pub is None:
                if not key.isdigit() or seq < 0 or bm == NOW:
                    return 0  # not a publisherId|sequence| bookmark
                pub = sub.add(key)
                pub.floor = self._items(sub)
                sub.floating += 1
            elif seq <= pub.high:
                return 0
            elif pub.point is None and not pub.queue:
                pub.floor = self._items(sub)
                sub.floating += 1
            pub.high = seq
            sub.last_pub = key
            no = sub.next_no
            sub.next_no = no + 1
            entry = [pub, seq, bm, no, False]
            if sub.inflight is None:
                if not pub.queue and pub.point is not None:
                    sub.inflight = entry  # the common case: see _Subscription.inflight
                    return no
            else:
                sub.settle()
            pub.queue.append(entry)
            sub.pending[bm] = entry
            return no
        finally:
            lock.release()

    def discard_message(self, message: MessageLike) -> None:
        """Mark ``message`` as processed (unknown or already discarded: ignored)."""
        bm: Any
        sid: Any
        if isinstance(message, Message):  # the client's own subclass too (_ids, inlined)
            bm = message.bookmark  # set by the receive path when it read it (no header parse)
            sid = message.sub_id  # the routed sub id, when the client set one
        else:
            bm, sid = _ids(message)
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise StoreError("the bookmark store is closed")
            sub = self._subs.get(sid)
            if sub is None:
                return
            pub: _Publisher
            entry = sub.inflight
            if entry is not None and entry[2] == bm:
                # the common case: the publisher's only pending message, and it has a point
                sub.inflight = None
                pub = entry[0]
                pub.done = entry[1]
                pub.point = sub.points[pub.slot] = bm
            else:
                if entry is not None:
                    sub.settle()
                entry = sub.pending.pop(bm, None)
                if entry is None:
                    return
                # inlined _discard (same logic, see there)
                entry[4] = True
                pub = entry[0]
                queue = pub.queue
                if queue[0] is not entry:
                    return
                queue.popleft()
                while queue and queue[0][4]:
                    entry = queue.popleft()
                pub.done = entry[1]
                bm = entry[2]
                if pub.point is None:
                    sub.pointless -= 1
                pub.point = sub.points[pub.slot] = bm
                if pub.floor is not None:
                    pub.floor = None
                    sub.floating -= 1
                    _lift_stand_ins(sub)
            adapter = self._adapter
            if adapter is None:
                sub.loaded_ts = None
                sub.recent = None
                return
            if not (sub.loaded_ts or self._use_ts or sub.floating or sub.pointless or sub.live):
                points = sub.points
                # the common case: every publisher has a point, no timestamps
                text = bm if len(points) == 1 else ",".join(points)
            else:
                sub.loaded_ts = None
                text = self._compute(sub)
            if text != sub.recent:
                sub.recent = text
                fast = self._update_bookmark
                if fast is not None:
                    fast(sid, text)
                else:
                    adapter.update(make_point(sid, text))
        finally:
            lock.release()

    def discard_seq_no(self, sub_id: str, bookmark_seq_no: int) -> None:
        """Mark the message :meth:`log` numbered ``bookmark_seq_no`` as processed."""
        with self._lock:
            self._check_open()
            sub = self._subs.get(sub_id)
            if sub is None:
                return
            sub.settle()
            for entry in sub.pending.values():  # O(outstanding): rare, official-API path
                if entry[_NO] == bookmark_seq_no:
                    del sub.pending[entry[_BM]]
                    self._discard(sub_id, sub, entry)
                    return

    def persisted_index(self, sub_id: str, bookmark_index: int) -> bool:
        """Official: :meth:`persisted` of the bookmark that :meth:`log` numbered
        ``bookmark_index``, looked up among the messages not yet discarded. Returns whether
        it was found (a discarded message's bookmark is no longer kept: nothing happens)."""
        with self._lock:
            self._check_open()
            sub = self._subs.get(sub_id)
            if sub is None:
                return False
            sub.settle()
            bookmark = next(
                (e[_BM] for e in sub.pending.values() if e[_NO] == bookmark_index), None
            )
        if bookmark is None:
            return False
        self.persisted(sub_id, bookmark)
        return True

    def set_resize_handler(self, handler: object) -> None:
        """Official name; refused: this store has no fixed size to grow (it keeps what it
        tracks in Python objects, and a file-backed one compacts its file by itself)."""
        raise UsageError(
            f"{type(self).__name__}.set_resize_handler: this store has no fixed size (it "
            "keeps its entries as Python objects; a file-backed one compacts its file to one "
            "line per subscription), so there is no resize to approve"
        )

    def _discard(self, sub_id: str, sub: _Subscription, entry: list[Any]) -> None:
        """Mark ``entry`` discarded and fold the publisher's discarded prefix into its point."""
        entry[_DONE] = True
        pub: _Publisher = entry[_PUB]
        queue = pub.queue
        if queue[0] is not entry:
            return  # an earlier message of this publisher is still being processed
        queue.popleft()
        while queue and queue[0][_DONE]:
            entry = queue.popleft()
        pub.done = entry[_SEQ]
        sub.set_point(pub, entry[_BM])
        if pub.floor is not None:
            pub.floor = None
            sub.floating -= 1
            _lift_stand_ins(sub)
        sub.loaded_ts = None
        self._changed(sub_id, sub)

    def _changed(self, sub_id: str, sub: _Subscription) -> None:
        adapter = self._adapter
        if adapter is None:
            sub.recent = None
            return
        text = self._compute(sub)
        if text != sub.recent:
            sub.recent = text
            fast = self._update_bookmark
            if fast is not None:
                fast(sub_id, text)
            else:
                adapter.update(make_point(sub_id, text))

    # ------------------------------------------------------------------ recovery point

    def _items(self, sub: _Subscription) -> str:
        """The bookmark part of the recovery point (no timestamp the store adds itself)."""
        pubs = sub.pubs
        if len(pubs) == 1:
            for pub in pubs.values():
                if pub.point is not None:
                    return pub.point
                if pub.queue:
                    return pub.floor or EPOCH
            return sub.base
        items: list[str] = []
        floors = False
        uncovered = False
        for pub in pubs.values():
            if pub.point is not None:
                items.append(pub.point)
            elif pub.queue:
                items.append(pub.floor or EPOCH)
                floors = True
            else:
                uncovered = True  # nothing of it processed since a persisted ack was adopted
        if not items:
            return sub.base
        if uncovered and sub.base != EPOCH:
            # the adopted ack stands in for the publishers it covers until each has a point
            # again: without it, a failover to an instance whose journal interleaves them
            # differently resumes after their messages not processed yet
            items.append(sub.base)
            floors = True
        if floors:
            flat: dict[str, None] = {}
            for item in items:
                for part in item.split(","):
                    flat[part] = None
            if EPOCH in flat:
                return EPOCH
            items = list(flat)
        return ",".join(items)

    def _compute(self, sub: _Subscription) -> str:
        text = self._items(sub)
        if sub.live is not None:
            text = capped(text, sub.live)
        if text == EPOCH:
            return text
        if sub.loaded_ts is not None:
            return text + "," + sub.loaded_ts
        if self._use_ts:
            return text + "," + now_stamp()
        return text

    def get_most_recent(self, sub_id: str) -> str:
        """The recovery point of ``sub_id`` (``"0"``, EPOCH, when unknown)."""
        with self._lock:
            sub = self._subs.get(sub_id)
            if sub is None:
                return EPOCH
            text = sub.recent
            if text is None:
                text = sub.recent = self._compute(sub)
            return text

    def persisted(self, sub_id: str, bookmark: str) -> None:
        """A persisted ack: adopt ``bookmark`` as the recovery point when that is safe.

        It is adopted when every message logged on ``sub_id`` has been discarded and, for a
        ``publisherId|sequence|`` bookmark, it is not provably older than what was delivered:
        its sequence is above the highest one logged from that publisher, or equal to it when
        no other publisher's message arrived later. Timestamps are accepted (like the official
        client); EPOCH, NOW, lists and ranges are ignored. An unknown ``sub_id`` (a
        subscription that has received nothing yet) adopts it too.

        Args:
            sub_id: the ack's ``sub_id``.
            bookmark: the ack's ``bm``.

        Raises:
            StoreError: the store is closed.
        """
        text = bookmark.strip() if isinstance(bookmark, str) else ""
        if not text or "," in text or text == NOW:
            return
        parts = text.split("|")
        with self._lock:
            self._check_open()
            sub = self._subs.get(sub_id)
            if sub is not None and sub.live is not None:
                sub.live = text  # the recovery point never passes it (see set_live)
                self._changed(sub_id, sub)
                return
            if sub is not None and (sub.pending or sub.inflight is not None):
                return  # a message is still being processed: the discard points rule
            if len(parts) == 3 and not parts[2]:
                if not parts[0].isdigit() or not parts[1].isdigit():
                    return
                seq = int(parts[1])
                pub = sub.pubs.get(parts[0]) if sub is not None else None
                # older than delivered: below that publisher's last message, or equal to it
                # while a message of another publisher arrived later
                if pub is not None and (
                    seq < pub.high or (seq == pub.high and sub.last_pub != parts[0])  # type: ignore[union-attr]
                ):
                    logger.debug(
                        "persisted %s for %r is older than delivered; ignored", text, sub_id
                    )
                    return
            else:
                try:
                    if not isinstance(parse_bookmark(text), Timestamp):
                        return
                except InvalidBookmarkError:
                    return
            if sub is None:
                sub = self._subs[sub_id] = _Subscription()
            sub.base = text
            for pub in sub.pubs.values():
                sub.set_point(pub, None)
                pub.floor = None
            sub.loaded_ts = None
            self._changed(sub_id, sub)

    def set_live(self, sub_id: str) -> None:
        """``sub_id`` is a ``live`` bookmark subscription: its recovery point never lies after
        the last persisted ack (:mod:`.live`); a recovered one is rewound (:meth:`rewind_live`)."""
        with self._lock:
            self._check_open()
            sub = self._subs.get(sub_id) or self._subs.setdefault(sub_id, _Subscription())
            if sub.live is None:
                sub.live = self._compute(sub)
                sub.recent = None
                if sub.next_no == 1 and sub.pubs:  # recovered, nothing received since
                    self._rewind(sub_id, sub)

    def rewind_live(self, sub_id: str) -> None:
        """A ``live`` subscription is placed again (failover): what it received after its
        recovery point counts as unseen, since the server may have lost it (:mod:`.live`)."""
        with self._lock:
            sub = self._subs.get(sub_id)
            if sub is not None and sub.live is not None:
                self._rewind(sub_id, sub)

    def _rewind(self, sub_id: str, sub: _Subscription) -> None:
        self._recover(sub_id, self._compute(sub))
        new = self._subs[sub_id]
        new.live = new.recent
        for pub in new.pubs.values():
            pub.high = pub.done = int(pub.point.split("|")[1]) if pub.point else 0

    # ------------------------------------------------------------------ queries

    @staticmethod
    def _read(message: MessageLike) -> tuple[str | None, str | None, int]:
        bm = message.get_bookmark()
        sid = message.get_sub_id()
        if not bm or not sid:
            return None, None, 0
        parts = bm.split("|")
        if len(parts) != 3 or parts[2]:
            return None, None, 0
        try:
            return sid, parts[0], int(parts[1])
        except ValueError:
            return None, None, 0

    def is_duplicate(self, message: MessageLike) -> bool:
        """Whether ``message``'s sequence is ``<=`` the highest seen from its publisher."""
        sid, key, seq = self._read(message)
        if sid is None:
            return False
        with self._lock:
            sub = self._subs.get(sid)
            pub = sub.pubs.get(key) if sub is not None else None  # type: ignore[arg-type]
            return pub is not None and seq <= pub.high

    def is_discarded(self, message: MessageLike) -> bool:
        """Whether ``message`` was discarded (or lies at or before a recovered point)."""
        sid, key, seq = self._read(message)
        if sid is None:
            return False
        with self._lock:
            sub = self._subs.get(sid)
            if sub is None:
                return False
            pub = sub.pubs.get(key)  # type: ignore[arg-type]
            if pub is None or seq > pub.high:
                return False
            sub.settle()
            return seq <= pub.done or message.get_bookmark() not in sub.pending

    def get_oldest_bookmark_seq(self, sub_id: str) -> int:
        """Sequence number of the oldest undiscarded message of ``sub_id`` (0: none)."""
        with self._lock:
            sub = self._subs.get(sub_id)
            if sub is None:
                return 0
            sub.settle()
            heads = [pub.queue[0][_NO] for pub in sub.pubs.values() if pub.queue]
            return min(heads) if heads else 0

    def get_oldest_bookmark(self, sub_id: str) -> str | None:
        """The bookmark of the oldest message of ``sub_id`` logged and not yet discarded."""
        with self._lock:
            sub = self._subs.get(sub_id)
            if sub is None:
                return None
            sub.settle()
            heads = [pub.queue[0] for pub in sub.pubs.values() if pub.queue]
            if not heads:
                return None
            return str(min(heads, key=lambda entry: entry[_NO])[_BM])

    def get_unprocessed_count(self, sub_id: str) -> int:
        """How many logged messages of ``sub_id`` are not discarded yet."""
        with self._lock:
            sub = self._subs.get(sub_id)
            return 0 if sub is None else len(sub.pending) + (sub.inflight is not None)

    # ------------------------------------------------------------------ purge / close

    def purge(self, sub_id: str | None = None) -> None:
        """Forget ``sub_id`` (or everything); the adapter is purged the same way."""
        with self._lock:
            self._check_open()
            if sub_id is None:
                self._subs.clear()
            else:
                self._subs.pop(sub_id, None)
            if self._adapter is not None:
                self._adapter.purge(sub_id)

    def close(self) -> None:
        """Close the store and its adapter (which flushes a conflating one). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._lane is not None:
                self._lane.disable()
            adapter = self._adapter
        if adapter is not None:
            adapter.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the bookmark store is closed")
