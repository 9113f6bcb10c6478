"""MemoryPublishStore: unacknowledged publishes kept in process memory.

The default store of an HA client. It survives reconnects but not a restart of the process.
``store`` is O(1) (a list append under a lock) and ``discard_up_to`` amortized O(1) (it moves
the start of the live part of the list, which is compacted now and then).
"""

from __future__ import annotations

from collections.abc import Iterable

from ...exceptions import UsageError
from .base import Build, IndexedPublishStore, StorableMessage, as_build, join_seq_fast

__all__ = ["MemoryPublishStore"]


class MemoryPublishStore(IndexedPublishStore):
    """A thread-safe in-memory publish store.

    Args:
        blocksPerRealloc: official argument, checked (a positive int); the official store
            preallocates ``blocksPerRealloc`` blocks of ``blockSize`` bytes at a time, this
            one stores each payload as a Python ``bytes`` object, so neither changes
            anything observable.
        errorOnPublishGap: official name of ``error_on_publish_gap``.
        blockSize: see ``blocksPerRealloc``.
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
        self,
        blocksPerRealloc: int = 10000,
        errorOnPublishGap: bool = False,
        blockSize: int = 2048,
        *,
        error_on_publish_gap: bool | None = None,
        next_sequence: int | None = None,
    ) -> None:
        if not isinstance(blocksPerRealloc, int) or blocksPerRealloc <= 0:
            raise ValueError(f"blocksPerRealloc must be a positive int, not {blocksPerRealloc!r}")
        if not isinstance(blockSize, int) or blockSize <= 0:
            raise ValueError(f"blockSize must be a positive int, not {blockSize!r}")
        gap = errorOnPublishGap if error_on_publish_gap is None else error_on_publish_gap
        super().__init__(error_on_publish_gap=gap, next_sequence=next_sequence)

    def set_resize_handler(self, handler: object) -> None:
        """Official name; refused: this store has no fixed capacity to resize.

        The official memory store calls its resize handler when its preallocated blocks run
        out; this one keeps each payload as a Python object and grows without a step to
        approve. Bound it with ``publish_flush`` or :attr:`unpersisted_count`, or use a file
        store (:class:`~ampsclient.stores.PublishStore`), whose resize handler works.
        """
        raise UsageError(
            "MemoryPublishStore.set_resize_handler: this store has no fixed capacity (it "
            "grows one Python object per message), so there is no resize to approve; bound "
            "it with publish_flush()/get_unpersisted_count(), or use PublishStore(filename), "
            "whose resize handler is called before its files grow"
        )

    def store(self, build: Build | StorableMessage) -> int:
        """Assign the next sequence number, build the payload with it, keep it; returns it."""
        make = as_build(build)
        with self.index_lock:
            if self.index_closed:
                self._check_open()
            s = self.index_next
            self._index_one(s, make(s))
            return s

    def store_parts(self, head: bytes, tail: bytes) -> tuple[int, bytes]:
        """:meth:`store` of ``head + b"<sequence>" + tail`` (the HA client's hot path)."""
        lock = self.index_lock
        lock.acquire()  # not ``with``: this runs once per publish and __exit__ costs a call
        try:
            if self.index_closed:
                self._check_open()
            s = self.index_next
            payload = join_seq_fast(head, s, tail)
            # _index_one inlined (the HA publish hot path)
            if not self.index_count:
                self.index_first = s
            elif self.index_pad:
                self._index_pad()
            self.index_buf.append(payload)
            self.index_count += 1
            self.index_next = s + 1
        finally:
            lock.release()
        return s, payload

    def store_many(self, builds: Iterable[Build]) -> list[int]:
        """Store several messages under one lock round; returns their sequence numbers."""
        with self.index_lock:
            self._check_open()
            s = self.index_next
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
        with self.index_lock:
            self.index_closed = True
            self._cond.notify_all()
