"""MemoryPublishStore: unacknowledged publishes kept in process memory.

The default store of an HA client. It survives reconnects but not a restart of the process.
``store`` is O(1) (a list append under a lock) and ``discard_up_to`` amortized O(1) (it moves
the start of the live part of the list, which is compacted now and then).
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import Build, IndexedPublishStore, join_seq_fast

__all__ = ["MemoryPublishStore"]


class MemoryPublishStore(IndexedPublishStore):
    """A thread-safe in-memory publish store.

    Args:
        error_on_publish_gap: raise :class:`~ampsclient.exceptions.PublishStoreGapError` when
            :meth:`discard_up_to` is called below :attr:`last_persisted` (see
            :meth:`PublishStore.discard_up_to`).
        next_sequence: the first sequence number (default ``epoch_ms * 1_000_000 + 1``).

    Example::

        store = MemoryPublishStore()
        s = store.store(lambda s: b'{"c":"p","t":"orders","a":"persisted","s":%d}{"id":1}' % s)
        store.discard_up_to(s)   # the persisted ack
        assert store.unpersisted_count == 0
    """

    def __init__(
        self, *, error_on_publish_gap: bool = False, next_sequence: int | None = None
    ) -> None:
        super().__init__(error_on_publish_gap=error_on_publish_gap, next_sequence=next_sequence)

    def store(self, build: Build) -> int:
        """Assign the next sequence number, build the payload with it, keep it; returns it."""
        with self._lock:
            if self._closed:
                self._check_open()
            s = self._next
            self._index_one(s, build(s))
            return s

    def store_parts(self, head: bytes, tail: bytes) -> tuple[int, bytes]:
        """:meth:`store` of ``head + b"<sequence>" + tail`` (the HA client's hot path)."""
        lock = self._lock
        lock.acquire()  # not ``with``: this runs once per publish and __exit__ costs a call
        try:
            if self._closed:
                self._check_open()
            s = self._next
            payload = join_seq_fast(head, s, tail)
            # _index_one inlined (the HA publish hot path)
            if not self._count:
                self._first = s
            elif self._pad:
                self._index_pad()
            self._buf.append(payload)
            self._count += 1
            self._next = s + 1
        finally:
            lock.release()
        return s, payload

    def store_many(self, builds: Iterable[Build]) -> list[int]:
        """Store several messages under one lock round; returns their sequence numbers."""
        with self._lock:
            self._check_open()
            s = self._next
            payloads: list[bytes] = []
            for build in builds:
                payloads.append(build(s + len(payloads)))
            if not payloads:
                return []
            self._index_extend(s, payloads)
            return list(range(s, s + len(payloads)))

    def close(self) -> None:
        """Mark the store closed: later stores and discards raise ``StoreError``.

        Threads blocked in :meth:`wait_for` wake up (and raise ``StoreError``).
        """
        with self._lock:
            self._closed = True
            self._cond.notify_all()
