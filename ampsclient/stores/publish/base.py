"""The publish store contract, and the in-memory index both implementations share.

A publish store keeps every message a reliable publisher has sent until the server's
*persisted* ack covers it, so that the client can replay the unacknowledged ones after a
reconnect or a restart (protocol §7; the official client's ``PublishStore`` API).

Store methods are sync-coloured (local, bounded) and thread-safe: the publisher thread calls
:meth:`PublishStore.store` while the client's event-loop thread calls
:meth:`PublishStore.discard_up_to` for each persisted ack. Each store guards its state with one
:class:`threading.Lock`; the only blocking call is :meth:`PublishStore.wait_for`.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol, Self, runtime_checkable

from ... import _accel
from ...exceptions import PublishStoreGapError, StoreError
from ...protocol.header import encode_header


def join_seq(head: bytes, sequence: int, tail: bytes) -> bytes:
    """A stored payload: ``head``, the sequence number in decimal, ``tail``.

    ``ampsclient/_speedups_src/publish_frame.c`` has the same function in C
    (:mod:`ampsclient._accel`).
    """
    return head + b"%d" % sequence + tail


join_seq_fast: Final = _accel.join_seq or join_seq
""":func:`join_seq`, in C when the speedups are built."""

__all__ = [
    "Build",
    "PublishStore",
    "Replayer",
    "StorableMessage",
    "StoredMessage",
    "as_build",
    "initial_sequence",
]

Build = Callable[[int], bytes]
"""``build(sequence) -> payload``: encodes the complete message with ``sequence`` in its header."""


@runtime_checkable
class StorableMessage(Protocol):
    """A message built by the application (``Message()`` + ``set_*``), as the official
    ``store(message)`` takes it: its header fields and its data."""

    @property
    def header(self) -> Mapping[str, Any]: ...

    def get_data_raw(self) -> bytes: ...


def as_build(item: Build | StorableMessage) -> Build:
    """``item`` itself when it is a ``build`` callable; for a message, the ``build`` that
    encodes its header with ``"s"`` set to the sequence number, then its data."""
    if callable(item):
        return item
    if not isinstance(item, StorableMessage):
        raise TypeError(
            f"store() takes build(sequence) -> bytes or a Message, not {type(item).__name__}"
        )
    fields = {k: v for k, v in item.header.items() if k != "s"}
    data = item.get_data_raw() or b""

    def build(sequence: int) -> bytes:
        return encode_header({**fields, "s": sequence}) + data

    return build


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message held by a publish store.

    Attributes:
        sequence: the publisher sequence number (the ``s`` header field).
        payload: the complete AMPS payload (header + body) exactly as sent, with its ``s``
            already in the header.
    """

    sequence: int
    payload: bytes


Replayer = Callable[[StoredMessage], None]
"""Called once per message by :meth:`PublishStore.replay`, in sequence order."""


def initial_sequence(now_ns: int | None = None) -> int:
    """The first sequence number of a brand-new store: ``epoch_ms * 1_000_000 + 1``.

    Args:
        now_ns: the current time in nanoseconds since the epoch (default: ``time.time_ns()``).

    Returns:
        The sequence number the store's first message gets (protocol §7.1).
    """
    ns = time.time_ns() if now_ns is None else now_ns
    return (ns // 1_000_000) * 1_000_000 + 1


class PublishStore(abc.ABC):
    """What a publish store does; :class:`MemoryPublishStore` and :class:`FilePublishStore`.

    Sequence numbers start at ``epoch_ms * 1_000_000 + 1`` for a new store and rise by one per
    stored message; a number is never reused, not even after a restart of a file store.
    """

    @abc.abstractmethod
    def next_sequence(self) -> int:
        """The sequence number the next :meth:`store` will assign (a peek; nothing changes)."""

    @abc.abstractmethod
    def store(self, build: Build | StorableMessage) -> int:
        """Assign the next sequence number, build the payload with it, and keep the message.

        ``build`` may also be a message built by the application (the official
        ``store(message)``): its header is encoded with ``"s"`` set to the sequence number,
        followed by its data.

        ``build(s)`` runs while the store's lock is held (so that sequence order and storage
        order agree): it must be quick and must not call back into the store. If it raises,
        nothing is stored and the sequence number is not used up.

        Args:
            build: ``build(sequence) -> payload``.

        Returns:
            The sequence number assigned to the message.

        Raises:
            StoreError: the store is closed, or the message could not be recorded.
        """

    def store_parts(self, head: bytes, tail: bytes) -> tuple[int, bytes]:
        """Store the payload ``head + b"<sequence>" + tail``; returns the sequence and payload.

        The HA client's publish path: the same as :meth:`store` with
        ``build = lambda s: head + str(s).encode() + tail``, which is what this default does.
        The bundled stores override it without the closure and the extra call.
        """
        payload = b""

        def build(sequence: int) -> bytes:
            nonlocal payload
            payload = head + str(sequence).encode() + tail
            return payload

        return self.store(build), payload

    def store_many(self, builds: Iterable[Build]) -> list[int]:
        """Store several messages at once (one lock round, and one fsync for a file store).

        Args:
            builds: one ``build(sequence) -> payload`` per message, in publish order.

        Returns:
            The assigned sequence numbers, in order.

        Raises:
            StoreError: as :meth:`store`. A file store records all or none of the batch.
        """
        return [self.store(build) for build in builds]

    @abc.abstractmethod
    def discard_up_to(self, sequence: int) -> int:
        """Drop every message whose sequence number is ``<= sequence`` (a persisted ack).

        ``sequence`` above every stored number (a logon ack from a server that has seen more)
        also moves :meth:`next_sequence` past it. ``sequence`` below :attr:`last_persisted`
        (a server that lost messages this store has already dropped) is ignored, or raises
        :class:`~ampsclient.exceptions.PublishStoreGapError` when
        :attr:`error_on_publish_gap` is set. ``0`` is always ignored (fresh logon).

        Args:
            sequence: the ``s`` of the persisted ack.

        Returns:
            How many stored messages were dropped.

        Raises:
            PublishStoreGapError: see above.
            StoreError: the store is closed.
        """

    @abc.abstractmethod
    def discard(self, sequence: int) -> bool:
        """Drop one message (a publish that failed before it reached the wire).

        Args:
            sequence: the message's sequence number.

        Returns:
            ``True`` if the message was in the store.

        Raises:
            StoreError: the store is closed.
        """

    @abc.abstractmethod
    def replay(self, replayer: Replayer) -> int:
        """Call ``replayer`` for every unpersisted message, in sequence order.

        The store takes a snapshot under its lock and calls ``replayer`` without holding it,
        so the replayer may call the store (for instance :meth:`discard_up_to` when an ack
        arrives meanwhile). A message discarded during the replay may still be replayed;
        the server treats it as a duplicate.

        Args:
            replayer: called once per message.

        Returns:
            How many messages were replayed.
        """

    @abc.abstractmethod
    def replay_single(self, replayer: Replayer, sequence: int) -> bool:
        """Call ``replayer`` for one unpersisted message.

        Args:
            replayer: called at most once.
            sequence: the message's sequence number.

        Returns:
            ``True`` if the message was in the store (and was replayed).
        """

    @abc.abstractmethod
    def get(self, sequence: int) -> StoredMessage | None:
        """The unpersisted message with this sequence number, or ``None``."""

    @property
    @abc.abstractmethod
    def unpersisted_count(self) -> int:
        """How many messages are stored and not yet discarded."""

    @property
    @abc.abstractmethod
    def lowest_unpersisted(self) -> int | None:
        """The smallest stored sequence number, or ``None`` when the store is empty."""

    @property
    @abc.abstractmethod
    def last_persisted(self) -> int:
        """The highest sequence number discarded by :meth:`discard_up_to` (0 if none yet)."""

    @property
    @abc.abstractmethod
    def error_on_publish_gap(self) -> bool:
        """Whether :meth:`discard_up_to` raises on a publish gap (see there)."""

    @error_on_publish_gap.setter
    @abc.abstractmethod
    def error_on_publish_gap(self, value: bool) -> None: ...

    @abc.abstractmethod
    def wait_for(self, sequence: int, timeout: float | None = None) -> bool:
        """Block until every message ``<= sequence`` has been discarded (used by publish_flush).

        Args:
            sequence: typically the last sequence number stored.
            timeout: seconds to wait at most; ``None`` waits forever.

        Returns:
            ``True`` once everything ``<= sequence`` is discarded, ``False`` on timeout.

        Raises:
            StoreError: the store was closed while waiting.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's resources; idempotent. Later mutations raise ``StoreError``."""

    @abc.abstractmethod
    def statistics(self) -> dict[str, int]:
        """Counters for monitoring: ``stored``, ``bytes``, ``stored_total``... (see docs)."""

    # ------------------------------------------------------------------ official names

    def get_unpersisted_count(self) -> int:
        """Official name of :attr:`unpersisted_count`."""
        return self.unpersisted_count

    def get_lowest_unpersisted(self) -> int | None:
        """Official name of :attr:`lowest_unpersisted`."""
        return self.lowest_unpersisted

    def get_last_persisted(self) -> int:
        """Official name of :attr:`last_persisted`."""
        return self.last_persisted

    def get_error_on_publish_gap(self) -> bool:
        """Official name of the :attr:`error_on_publish_gap` getter."""
        return self.error_on_publish_gap

    def set_error_on_publish_gap(self, value: bool) -> None:
        """Official name of the :attr:`error_on_publish_gap` setter."""
        self.error_on_publish_gap = value

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_COMPACT_MIN: Final = 4096
"""The index list is compacted once this many dropped slots sit at its front (and they are
at least half of it), which keeps :meth:`discard_up_to` amortized O(1)."""


class IndexedPublishStore(PublishStore, _accel.PublishIndexFields):
    """The in-memory index shared by both stores (internal base class).

    Stored sequence numbers are contiguous from ``index_first`` (the lowest unpersisted one):
    the index is a list ``index_buf`` of payloads whose live part starts at ``_head``; slot
    ``i`` holds sequence ``index_first + i - _head``. A message dropped singly by
    :meth:`discard` leaves a ``None`` hole, except at either end, which is trimmed, so the
    first and last live slots always hold a message (``index_pad`` remembers how many were
    trimmed from the end, so that the next store can restore the holes before appending).
    Dropping a prefix only moves ``_head``; the list is compacted when the dead prefix is at
    least half of it.

    The index's fields that the C speedups' ``PublishLane`` reads and writes are those of its
    base ``ampsclient._accel.PublishIndexFields`` (the extension's own type when built, else
    its twin), public and documented below: ``index_closed``, ``index_next``,
    ``index_count``, ``index_first``, ``index_pad``, ``index_buf``, ``index_lock`` and
    ``index_log``. They are the store's internals, written only by this module and the two
    store modules (under ``index_lock``); applications read the store through its methods.
    """

    __slots__ = (
        "_cond",
        "_discarded_total",
        "_error_on_publish_gap",
        "_head",
        "_holes",
        "_last_persisted",
        "_waiters",
    )

    def __init__(self, *, error_on_publish_gap: bool = False, next_sequence: int | None = None):
        self.index_lock = threading.Lock()
        """Guards every field below; the critical sections are a few statements long."""
        self.index_log: Any = None
        """The segment files records are written to (a file store), else ``None``."""
        self._cond = threading.Condition(self.index_lock)
        """Wakes :meth:`wait_for` callers after a discard or a close."""
        self._waiters = 0
        """How many threads sit in :meth:`wait_for` (notify only when someone listens)."""
        self.index_buf: list[bytes | None] = []
        self._head = 0
        self.index_first = 0
        self.index_count = 0
        """Live messages (slots that are not holes)."""
        self._holes = 0
        """``None`` slots inside the live part."""
        self.index_pad = 0
        """Sequence numbers dropped from the end by :meth:`discard` since the last store: the
        next store first appends this many holes so that slots stay contiguous."""
        self.index_next = initial_sequence() if next_sequence is None else next_sequence
        self._last_persisted = 0
        self._error_on_publish_gap = error_on_publish_gap
        self.index_closed = False
        self._discarded_total = 0

    # ------------------------------------------------------------------ index helpers
    # All helpers below expect self.index_lock to be held.

    def _index_reset(self) -> None:
        self.index_buf.clear()
        self._head = 0
        self.index_count = 0
        self._holes = 0
        self.index_pad = 0

    def _index_pad(self) -> None:
        """Re-insert the holes left by single discards at the end (before a store)."""
        self.index_buf.extend([None] * self.index_pad)
        self._holes += self.index_pad
        self.index_pad = 0

    def _index_drop_through(self, sequence: int) -> tuple[int, int]:
        """Drop every slot ``<= sequence``; returns ``(dropped messages, highest dropped seq)``.

        ``sequence`` must be ``>= self.index_first`` and the index must not be empty.
        """
        buf = self.index_buf
        head = self._head
        span = len(buf) - head
        k = sequence - self.index_first + 1
        if k >= span:
            dropped = self.index_count
            top = self.index_first + span - 1
            self._index_reset()
            return dropped, top
        holes = 0
        if self._holes:
            holes = buf[head : head + k].count(None)
            self._holes -= holes
        dropped = k - holes
        head += k
        first = sequence + 1
        while buf[head] is None:  # the last live slot is never a hole, so this stops
            head += 1
            first += 1
            self._holes -= 1
        self.index_first = first
        self.index_count -= dropped
        if head >= _COMPACT_MIN and head * 2 >= len(buf):
            del buf[:head]
            head = 0
        self._head = head
        return dropped, sequence

    def _index_drop_one(self, sequence: int) -> bool:
        """Drop a single slot; returns whether it held a message."""
        if not self.index_count:
            return False
        buf = self.index_buf
        idx = self._head + sequence - self.index_first
        if idx < self._head or idx >= len(buf) or buf[idx] is None:
            return False
        self.index_count -= 1
        if not self.index_count:
            self._index_reset()
        elif idx == len(buf) - 1:
            buf.pop()
            self.index_pad += 1
            while buf[-1] is None:
                buf.pop()
                self._holes -= 1
                self.index_pad += 1
        elif idx == self._head:
            idx += 1
            while buf[idx] is None:
                idx += 1
                self._holes -= 1
            self.index_first += idx - self._head
            self._head = idx
        else:
            buf[idx] = None
            self._holes += 1
        return True

    def _index_one(self, sequence: int, payload: bytes) -> None:
        """Index one ``payload`` stored with ``sequence`` (lock held). ``store_parts`` of the
        memory and file stores inline this: it runs once per HA publish."""
        if not self.index_count:
            self.index_first = sequence
        elif self.index_pad:
            self._index_pad()
        self.index_buf.append(payload)
        self.index_count += 1
        self.index_next = sequence + 1

    def _index_extend(self, first: int, payloads: list[bytes]) -> None:
        """Index ``payloads``, stored with sequences from ``first`` (lock held)."""
        if not self.index_count:
            self.index_first = first
        elif self.index_pad:
            self._index_pad()
        self.index_buf.extend(payloads)
        self.index_count += len(payloads)
        self.index_next = first + len(payloads)

    def _check_open(self) -> None:
        if self.index_closed:
            raise StoreError(f"{type(self).__name__} is closed")

    def _gap(self, sequence: int) -> None:
        """Called for ``0 < sequence < last_persisted``: raise when configured to."""
        if self._error_on_publish_gap:
            raise PublishStoreGapError(
                f"Server last saw {sequence} from this client but the store has already "
                f"discarded up to {self._last_persisted}, which would leave a gap of "
                "unreceived messages"
            )

    def _wake(self) -> None:
        if self._waiters:
            self._cond.notify_all()

    # ------------------------------------------------------------------ read side

    def _record_discard(self, kind: bytes, sequence: int) -> None:
        """Hook: a discard happened (``b"d"``: up to ``sequence``; ``b"x"``: that one
        message). The file store records it; the memory store has nothing to do. Lock held."""

    def discard_up_to(self, sequence: int) -> int:
        """Drop every message ``<= sequence`` (a persisted ack); returns how many."""
        with self.index_lock:
            if self.index_closed:
                self._check_open()
            if sequence <= self._last_persisted:
                if 0 < sequence < self._last_persisted:
                    self._gap(sequence)
                return 0
            self._record_discard(b"d", sequence)
            self._last_persisted = sequence
            if sequence >= self.index_next:
                self.index_next = sequence + 1
            dropped = 0
            if self.index_count and sequence >= self.index_first:
                dropped = self._index_drop_through(sequence)[0]
                self._discarded_total += dropped
                if self._waiters:
                    self._cond.notify_all()
            return dropped

    def discard(self, sequence: int) -> bool:
        """Drop one message (a failed publish); ``True`` if it was stored."""
        with self.index_lock:
            self._check_open()
            if not self._index_drop_one(sequence):
                return False
            self._record_discard(b"x", sequence)
            self._discarded_total += 1
            self._wake()
            return True

    def next_sequence(self) -> int:
        """The sequence number the next :meth:`store` will assign (a peek)."""
        return self.index_next

    def _snapshot(self) -> tuple[int, list[bytes | None]]:
        with self.index_lock:
            return self.index_first, self.index_buf[self._head :]

    def replay(self, replayer: Replayer) -> int:
        """Call ``replayer`` for every unpersisted message in sequence order (see base)."""
        first, payloads = self._snapshot()
        n = 0
        for i, payload in enumerate(payloads):
            if payload is not None:
                replayer(StoredMessage(first + i, payload))
                n += 1
        return n

    def replay_single(self, replayer: Replayer, sequence: int) -> bool:
        """Call ``replayer`` for one unpersisted message (see base)."""
        message = self.get(sequence)
        if message is None:
            return False
        replayer(message)
        return True

    def get(self, sequence: int) -> StoredMessage | None:
        """The unpersisted message with this sequence number, or ``None``."""
        with self.index_lock:
            return self.get_unlocked(sequence)

    def get_unlocked(self, sequence: int) -> StoredMessage | None:
        """:meth:`get` for a caller that holds the store's lock (subclasses)."""
        if not self.index_count:
            return None
        idx = self._head + sequence - self.index_first
        if idx < self._head or idx >= len(self.index_buf):
            return None
        payload = self.index_buf[idx]
        return None if payload is None else StoredMessage(sequence, payload)

    @property
    def unpersisted_count(self) -> int:
        """How many messages are stored and not yet discarded."""
        return self.index_count

    @property
    def lowest_unpersisted(self) -> int | None:
        """The smallest stored sequence number, or ``None`` when empty."""
        with self.index_lock:
            return self.index_first if self.index_count else None

    @property
    def last_persisted(self) -> int:
        """The highest sequence number discarded by :meth:`discard_up_to` (0 if none)."""
        return self._last_persisted

    @property
    def error_on_publish_gap(self) -> bool:
        """Whether :meth:`discard_up_to` raises :class:`PublishStoreGapError` on a gap."""
        return self._error_on_publish_gap

    @error_on_publish_gap.setter
    def error_on_publish_gap(self, value: bool) -> None:
        self._error_on_publish_gap = bool(value)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self.index_closed

    def wait_for(self, sequence: int, timeout: float | None = None) -> bool:
        """Block until every message ``<= sequence`` is discarded; ``False`` on timeout."""
        with self._cond:
            self._waiters += 1
            try:
                self._cond.wait_for(
                    lambda: (
                        self.index_closed or not self.index_count or self.index_first > sequence
                    ),
                    timeout,
                )
                if not self.index_count or self.index_first > sequence:
                    return True
                if self.index_closed:
                    raise StoreError(f"{type(self).__name__} was closed during wait_for")
                return False
            finally:
                self._waiters -= 1

    def statistics(self) -> dict[str, int]:
        """Counters: ``stored``, ``bytes``, ``next_sequence``, ``last_persisted``,
        ``stored_total`` (stored or loaded by this instance), ``discarded_total``, ``waiters``."""
        with self.index_lock:
            live = self.index_buf[self._head :]
            return {
                "stored": self.index_count,
                "bytes": sum(len(p) for p in live if p is not None),
                "next_sequence": self.index_next,
                "last_persisted": self._last_persisted,
                "stored_total": self.index_count + self._discarded_total,
                "discarded_total": self._discarded_total,
                "waiters": self._waiters,
            }
