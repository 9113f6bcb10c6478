"""Replicated queues: message ownership, its transfer, proxied transfer (seed ch. 25).

A ``<Queue>`` (or ``<GroupLocalQueue>``) on an instance with ``<Replication>`` is one queue
spread over the instances that replicate its topic. Every instance holds every message (the
publishes to the underlying topics replicate as usual) but exactly one instance *owns* a
message, and only the owner delivers it:

* **Initial owner.** ``Queue``: the instance that received the client's publish (the first
  hop of the record's replication path, ``rp``; no path: this instance). ``GroupLocalQueue``:
  its ``InitialOwner``, wherever the message was published.
* **Acknowledgements** are journaled as ``sow_delete`` records on the queue topic (field
  ``queue``, see :mod:`.engine`) and replicate like any record of the queue topic; an
  instance applies the acknowledgements of the others when they are durable in its own
  journal (:meth:`ReplicatedQueues.scan`), and again on a restart (journal recovery), so
  every instance and every restart agrees. An acknowledgement that arrives before its
  message is kept as a deferred acknowledgement.
* **Transfer.** An instance with a local queue subscription that has room, and messages of
  another (reachable) instance that have waited longer than the typical ack time (the
  moving average of lease-to-ack times of this instance's subscribers, within
  :data:`MIN_WAIT`..:data:`MAX_WAIT`; :data:`TRANSFER_WAIT` before any ack was measured),
  asks the owner for them: a point-to-point frame on
  the replication link, ``rqxfer`` (header ``q``: the queue, ``mt``; body: the
  bookmarks). The owner decides: it grants a message when it still owns it, has not leased
  it, and no local subscription with room would take it (so a second request for the same
  message finds it owned elsewhere and is refused). A grant is a journaled ``sow_delete``
  record on the queue topic with fields ``qown`` (the new owner) and ``qfrom`` (the old
  one), so ordinary replication carries the transfer notice to every instance that
  receives the queue topic, and a restart replays it. The requester becomes the owner when
  that record is applied there.
* **Proxied transfer** (``enable_proxied_transfer``, off by default, an operator's
  decision): the instance takes over the messages owned by instances it has no replication
  link with, journaling the same kind of record (with ``proxy``). The risk AMPS documents:
  when the owner is in fact alive (only the link failed), or comes back and serves its
  consumers before it has received the transfer records, a message is delivered twice.

Barrier messages are released by every instance to its own subscribers (per instance),
whoever owns them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..config import ServerConfig
from ..engine.journal import Journal, JournalError, JournalRecord
from .config import QueueConfig
from .model import AVAILABLE, REMOTE, Queue, QueueMessage
from .replicated_actions import ProxiedAction, proxied_actions
from .transfer_relay import forward, requester, routes

if TYPE_CHECKING:  # pragma: no cover
    from .depth import Inactive

__all__ = [
    "MAX_WAIT",
    "MIN_WAIT",
    "REQUEST_FRAME",
    "TRANSFER_WAIT",
    "EnginePort",
    "LinkPort",
    "ManagerPort",
    "ReplicatedQueues",
]

logger = logging.getLogger(__name__)

REQUEST_FRAME: Final = "rqxfer"
"""The replication frame asking an owner to transfer messages (see the module docstring)."""

TRANSFER_WAIT: Final = 0.5
"""Seconds a message owned elsewhere waits before this instance asks for it, until this
instance has measured its subscribers' typical ack time."""

MIN_WAIT: Final = 0.05
MAX_WAIT: Final = 5.0
"""Bounds of the measured wait (seconds)."""

_CHECK_INTERVAL: Final = 0.1
"""Seconds between two looks for messages to request or to take over."""

_REREQUEST: Final = 1.0
"""Seconds before a message requested without an answer is requested again."""

_SCAN_BATCH: Final = 4096

PATH_FIELD: Final = "rp"
"""The journal field holding a replicated record's path, origin first (the same as
``replication.rules.PATH_FIELD``: that package imports the broker, which imports this)."""


def origin(fields: Mapping[str, Any] | None) -> str | None:
    """The instance that received a journal record's original publish (``None``: this one,
    or an unreadable path)."""
    raw = fields.get(PATH_FIELD) if fields else None
    if not isinstance(raw, str) or not raw:
        return None
    try:
        path = json.loads(raw)
        return str(path[0][0])
    except (ValueError, LookupError, TypeError):
        return None


class EnginePort(Protocol):
    """What :class:`ReplicatedQueues` uses of its :class:`~.engine.QueueEngine` (declared here
    so that this module does not import the engine, which imports it)."""

    queues: dict[tuple[str, str], Queue]
    inactive: dict[str, Inactive]

    def in_journal(self, bookmark: str) -> bool: ...

    def pump(self, queue: Queue) -> None: ...

    def record(
        self, queue: Queue, bookmarks: Sequence[str], *, urgent: bool = False, extra: Any = None
    ) -> int | None: ...


class LinkPort(Protocol):
    """What the replicated queues need of the replication manager."""

    @property
    def config(self) -> ServerConfig:
        """The instance's configuration (its proxied-transfer actions)."""

    def peers_up(self) -> set[str]:
        """Instances this one has a working replication link with."""

    def send_to(self, peer: str, fields: dict[str, Any], body: Any) -> bool:
        """Send a frame to ``peer`` (``False``: no link with it)."""


class ManagerPort:
    """A :class:`LinkPort` over a replication manager's links (its public ``links``, each
    with ``peer_name``, ``is_up`` and ``send``)."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    @property
    def config(self) -> ServerConfig:
        config: ServerConfig = self._manager.config
        return config

    def peers_up(self) -> set[str]:
        return {link.peer_name for link in self._manager.links if link.is_up}

    def send_to(self, peer: str, fields: dict[str, Any], body: Any) -> bool:
        for link in self._manager.links:
            if link.peer_name == peer and link.is_up:
                link.send(fields, body)
                return True
        return False


class ReplicatedQueues:
    """Ownership for the replicated queues of one :class:`~.engine.QueueEngine`.

    Args:
        engine: the queue engine (its queues, its journal records, its delivery).
        journal: the transaction log.
        configs: the queues (checked).
        instance: this instance's name.
        own_pid: the publisher id of this instance's queue records (skipped by the scan).
        clock: epoch seconds.

    ``TargetQueueDepth`` on a replicated queue: each instance keeps its own active set (in
    publication order); a waiting message gets its owner when it becomes active here, and an
    acknowledgement or transfer of another instance applies to it whether it is active or
    still waiting.
    """

    def __init__(
        self,
        engine: EnginePort,
        journal: Journal,
        configs: Sequence[QueueConfig],
        *,
        instance: str,
        own_pid: int,
        clock: Callable[[], float],
    ) -> None:
        self._engine = engine
        self._journal = journal
        self.instance = instance
        self._pid = own_pid
        self._clock = clock
        self._cursor = journal.last_index + 1
        self._pending: dict[tuple[str, str], str] = {}
        self._pending_at: dict[tuple[str, str], tuple[int, float]] = {}
        """Pending transfers whose record's journal index is known: ``(index, until)``; the
        queue's ``queues.ack`` point stays at or before that index (a rebuild from the
        transaction log reads the record again) until ``until`` (``DeferredAckExpiration``
        after it arrived: a transfer whose message never comes does not pin the log for
        ever)."""
        self._requested: dict[str, float] = {}
        self.proxied: set[str] = set()
        """Queue names with proxied transfer enabled."""
        self.port: LinkPort | None = None
        self._timer: Any = None
        self._actions: dict[int, Any] = {}

    # ------------------------------------------------------------------ ownership

    def initial_owner(self, queue: Queue, fields: Mapping[str, Any] | None) -> str:
        """Who owns a new message whose journal record has ``fields``."""
        owner = queue.config.initial_owner
        if owner is not None:
            return owner
        return origin(fields) or self.instance

    def enqueue(
        self,
        queue: Queue,
        bookmark: str,
        data: bytes,
        x: str | None,
        now: float,
        *,
        expires: float | None = None,
    ) -> bool:
        """A message entering ``queue`` (intake): enqueued with its owner."""
        fields: dict[str, Any] | None = None
        if queue.config.initial_owner is None:
            pid, _, rest = bookmark.partition("|")
            index = self._journal.find_bookmark(int(pid), int(rest.partition("|")[0]))
            if index is not None:
                rows = self._journal.read_rows(index, max_records=1)
                if rows:
                    fields = rows[0][7]
        owner = self._take_pending(queue, bookmark) or self.initial_owner(queue, fields)
        if owner != self.instance:
            return queue.enqueue(bookmark, data, x, now, owner=owner, expires=expires)
        if not queue.enqueue(bookmark, data, x, now, expires=expires):
            return False
        queue.messages[bookmark].owner = owner
        return True

    def recovered(self, queue: Queue, record: JournalRecord) -> None:
        """Recovery, after the record was replayed into ``queue``: a transfer record moves
        ownership; a message that entered the queue gets its owner."""
        if record.command == "sow_delete":
            if record.topic == queue.name and "qown" in record.fields:
                new_owner = str(record.fields["qown"])
                bookmarks = split(record.fields.get("bm"))
                self.apply_transfer(queue, bookmarks, new_owner, index=record.index)
            return
        msg = queue.messages.get(record.bookmark)
        if msg is None or msg.owner is not None:
            return
        owner = self._take_pending(queue, record.bookmark) or self.initial_owner(
            queue, record.fields
        )
        if owner == self.instance or msg.barrier:
            msg.owner = owner
        else:
            queue.disown(msg, owner)

    def apply_transfer(
        self, queue: Queue, bookmarks: Iterable[str], owner: str, *, index: int | None = None
    ) -> int:
        """``owner`` owns ``bookmarks`` from now on (a transfer record, at journal ``index``
        when known); the number that became deliverable here. A transfer of a message not in
        the queue (yet) waits for it (:meth:`pending`); a transfer of a message that already
        went through the queue here (journaled before the record, and acknowledged or
        expired since) has nothing left to move and is dropped: kept pending, it would pin
        the journal at the record for ``DeferredAckExpiration`` (issue #32: no journal file
        of a 30-minute replicated soak was ever removed)."""
        gained = 0
        inactive = self._engine.inactive.get(queue.name) if self._engine.inactive else None
        for bookmark in bookmarks:
            msg = queue.messages.get(bookmark)
            if msg is None:
                if index is not None and self._went_through(bookmark, index, inactive):
                    continue
                key = (queue.name, bookmark)
                self._pending[key] = owner
                if index is not None:
                    until = self._clock() + queue.config.deferred_ack_expiration
                    self._pending_at[key] = (index, until)
                continue
            if owner == self.instance:
                if queue.own(msg, owner):
                    gained += 1
            else:
                queue.disown(msg, owner)
        return gained

    def _went_through(self, bookmark: str, index: int, inactive: Inactive | None) -> bool:
        """Whether the message ``bookmark``, not in its queue, was journaled here before the
        record at ``index`` and is not waiting beyond ``TargetQueueDepth``: it entered the
        queue and left it (acknowledged, expired), so a transfer of it is moot. Its record
        since pruned counts (only files before every queue's ack point are removed); a
        message journaled after ``index`` (a replay meets the transfer first) does not."""
        if inactive is not None and bookmark in inactive:
            return False
        pid, _, rest = bookmark.partition("|")
        try:
            publisher, sequence = int(pid), int(rest.partition("|")[0])
        except ValueError:
            return False
        if sequence > self._journal.last_sequence(publisher):
            return False  # not arrived here yet: the transfer waits for it
        found = self._journal.find_bookmark(publisher, sequence)
        return found is None or found < index

    def pending(self, queue: Queue) -> dict[str, str]:
        """The transfers applied to messages that are not in ``queue`` (yet): bookmark -> new
        owner. Each takes effect when its message enters (:meth:`enqueue`, :meth:`recovered`);
        a message waiting beyond ``TargetQueueDepth`` is one of them until it is active."""
        name = queue.name
        return {bookmark: owner for (q, bookmark), owner in self._pending.items() if q == name}

    def oldest_pending_index(self, queue: Queue) -> int | None:
        """The journal index of the oldest transfer record still pending for ``queue`` (the
        queue's ``queues.ack`` point must not pass it); ``None``: none. Pins older than
        ``DeferredAckExpiration`` are dropped (the transfer itself stays pending)."""
        if not self._pending_at:
            return None
        now = self._clock()
        oldest: int | None = None
        for key, (index, until) in list(self._pending_at.items()):
            if key[0] != queue.name:
                continue
            if until <= now:
                del self._pending_at[key]
            elif oldest is None or index < oldest:
                oldest = index
        return oldest

    def _take_pending(self, queue: Queue, bookmark: str) -> str | None:
        """The owner a pending transfer gives ``bookmark`` (taken out), ``None``: none."""
        key = (queue.name, bookmark)
        self._pending_at.pop(key, None)
        return self._pending.pop(key, None)

    def restore_pending(self, queue: Queue, transfers: Mapping[str, str]) -> None:
        """Transfers pending for ``queue`` as :meth:`pending` gave them (a restart from a
        ``FileBackedMetadata`` file, before its messages are replayed)."""
        for bookmark, owner in transfers.items():
            self._pending[(queue.name, bookmark)] = owner

    # ------------------------------------------------------------------ the others' records

    def scan(self, durable: int) -> None:
        """Apply the queue records of other instances (acknowledgements, transfers) that
        became durable here since the last scan (none once the journal is closed)."""
        try:
            self._scan(durable)
        except JournalError:
            logger.debug("journal closed: replicated queue records not scanned")

    def _scan(self, durable: int) -> None:
        journal = self._journal
        engine = self._engine
        position = max(self._cursor, journal.first_index)
        touched: set[Queue] = set()
        now = self._clock()
        while position <= durable:
            rows = journal.read_rows(position, max_records=min(_SCAN_BATCH, durable - position + 1))
            if not rows:
                break
            for index, pid, _seq, _ts, command, topic, _payload, fields, _size in rows:
                if index > durable:
                    break
                position = index + 1
                if command != "sow_delete" or pid == self._pid:
                    continue
                queue = engine.queues.get((str(fields.get("mt", "json")), topic))
                if queue is None:
                    continue
                bookmarks = split(fields.get("bm"))
                if "qown" in fields:
                    owner = str(fields["qown"])
                    gained = self.apply_transfer(queue, bookmarks, owner, index=index)
                    queue.counters["transferred_in"] += gained
                    touched.add(queue)
                elif "queue" in fields:
                    self._remote_acks(queue, bookmarks, now, index)
                    touched.add(queue)
        self._cursor = max(self._cursor, position)
        for queue in touched:
            engine.pump(queue)

    def _remote_acks(self, queue: Queue, bookmarks: list[str], now: float, index: int) -> None:
        expiry = now + queue.config.deferred_ack_expiration
        inactive = self._engine.inactive.get(queue.name) if self._engine.inactive else None
        for bookmark in bookmarks:
            msg = queue.messages.get(bookmark)
            if msg is not None and msg.barrier:
                continue  # released per instance: another's release is not ours
            if inactive is not None and inactive.remove(bookmark):
                pass  # still waiting here (TargetQueueDepth): it never becomes active
            elif queue.remove(bookmark) is None and not self._engine.in_journal(bookmark):
                queue.deferred[bookmark] = expiry  # acknowledged before it arrived here
                queue.deferred_index[bookmark] = index  # (its record: kept for a restart)
            self._requested.pop(bookmark, None)

    # ------------------------------------------------------------------ requests and grants

    def attach(
        self, port: LinkPort, call_later: Callable[[float, Callable[[], None]], Any]
    ) -> None:
        """Replication is running: start looking for messages to request or take over."""
        self.port = port
        self._call_later = call_later
        self._timer = call_later(_CHECK_INTERVAL, self._check)
        for action in proxied_actions(port.config):
            self._schedule(action)

    def _schedule(self, action: ProxiedAction) -> None:
        def run() -> None:
            if self.port is None:
                return
            logger.warning(
                "queue %r: proxied transfer %s by a scheduled action",
                action.queue,
                "enabled" if action.enable else "disabled",
            )
            self.set_proxied(action.queue, action.enable)
            self._schedule(action)

        self._actions[id(action)] = self._call_later(action.schedule.next_delay(), run)

    def detach(self) -> None:
        """Replication stopped."""
        self.port = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for handle in self._actions.values():
            handle.cancel()
        self._actions.clear()

    def _check(self) -> None:
        self._timer = None
        port = self.port
        if port is None:
            return
        try:
            self.check(port.peers_up(), self._clock())
        except Exception:  # pragma: no cover - logged, the next check runs anyway
            logger.exception("replicated queues: ownership check failed")
        self._timer = self._call_later(_CHECK_INTERVAL, self._check)

    def check(self, up: set[str], now: float) -> None:
        """Request messages for local subscribers with room; take over (proxied transfer)
        the messages of instances that are down."""
        for queue in self._engine.queues.values():
            if not queue.remote:
                continue
            if queue.name in self.proxied:
                self._take_over(queue, up)
            room = sum(max(0, s.room) for s in queue.subs)
            if room <= 0 or self.port is None:
                continue
            wanted: dict[str, list[str]] = {}
            wait = transfer_wait(queue)
            for msg in queue.messages.values():
                if room <= 0:
                    break
                if msg.state != REMOTE or not up:  # (owner not linked: through a relay)
                    continue
                if now - msg.enqueued < wait:
                    break  # publication order: the later ones waited less
                asked = self._requested.get(msg.bookmark)
                if asked is not None and now - asked < _REREQUEST:
                    continue
                if not _local_taker(queue, msg):
                    continue
                assert msg.owner is not None
                wanted.setdefault(msg.owner, []).append(msg.bookmark)
                queue.counters["transfer_requested"] += 1
                self._requested[msg.bookmark] = now
                room -= 1
            for owner, bookmarks in wanted.items():
                header = {"c": REQUEST_FRAME, "q": queue.name, "mt": queue.config.message_type}
                for peer, fields in routes(owner, header, up, self.instance):
                    self.port.send_to(peer, fields, bookmarks)

    def _take_over(self, queue: Queue, up: set[str]) -> None:
        taken: dict[str, list[str]] = {}
        for msg in list(queue.messages.values()):
            if msg.state == REMOTE and msg.owner not in up and msg.owner != self.instance:
                assert msg.owner is not None
                taken.setdefault(msg.owner, []).append(msg.bookmark)
                queue.own(msg, self.instance)
        for previous, bookmarks in taken.items():
            queue.counters["transferred_in"] += len(bookmarks)
            logger.warning(
                "queue %r: proxied transfer: %d message(s) owned by %r (down) taken over",
                queue.name,
                len(bookmarks),
                previous,
            )
            self._engine.record(
                queue,
                bookmarks,
                extra={"qown": self.instance, "qfrom": previous, "proxy": 1},
                urgent=True,
            )
        if taken:
            self._engine.pump(queue)

    def on_request(self, peer: str, header: dict[str, Any], body: Any) -> None:
        """``rqxfer`` from ``peer``: grant what may be granted (see the module docstring)."""
        queue = self._engine.queues.get((str(header.get("mt", "json")), str(header.get("q"))))
        if queue is None or not isinstance(body, list):
            logger.warning("queue transfer request from %r for an unknown queue ignored", peer)
            return
        if self.port is not None:
            onward = forward(peer, header, self.port.peers_up(), self.instance)
            if onward is not None:  # for another owner: relayed (transfer_relay)
                queue.counters["transfer_relayed"] += 1
                for target, fields in onward:
                    self.port.send_to(target, fields, body)
                return
        peer = requester(peer, header)
        granted: list[str] = []
        for bookmark in body:
            msg = queue.messages.get(str(bookmark))
            if (
                msg is None
                or msg.owner != self.instance
                or msg.state != AVAILABLE
                or msg.barrier
                or _local_taker(queue, msg)
            ):
                queue.counters["transfer_refused"] += 1
                continue
            queue.disown(msg, peer)
            granted.append(msg.bookmark)
        if granted:
            queue.counters["transferred_out"] += len(granted)
            logger.debug(
                "queue %r: %d message(s) transferred to %r", queue.name, len(granted), peer
            )
            self._engine.record(
                queue, granted, extra={"qown": peer, "qfrom": self.instance}, urgent=True
            )

    def set_proxied(self, name: str, enabled: bool) -> bool:
        """Enable or disable proxied transfer for queue ``name``; whether it changed."""
        before = name in self.proxied
        if enabled:
            self.proxied.add(name)
            logger.warning(
                "queue %r: proxied transfer enabled: messages owned by unreachable instances "
                "are taken over (duplicates when such an instance is in fact alive)",
                name,
            )
            if self.port is not None:
                for queue in self._engine.queues.values():
                    if queue.name == name:
                        self._take_over(queue, self.port.peers_up())
        else:
            self.proxied.discard(name)
            logger.info("queue %r: proxied transfer disabled", name)
        return before != enabled


def transfer_wait(queue: Queue) -> float:
    """How long a message owned elsewhere waits before this instance asks for it: the
    typical ack time of this instance's subscribers."""
    if not queue.ack_times:
        return TRANSFER_WAIT
    return min(MAX_WAIT, max(MIN_WAIT, queue.ack_time))


def _local_taker(queue: Queue, msg: QueueMessage) -> bool:
    """A local subscription with room would take ``msg``."""
    for qsub in queue.subs:
        if qsub.room <= 0:
            continue
        if qsub.matches is None:
            return True
        doc = queue.decode_doc(msg)
        if doc is not None and qsub.matches(doc):
            return True
    return False


def split(value: object) -> list[str]:
    """A comma list of bookmarks."""
    return [b for b in str(value or "").split(",") if b]
