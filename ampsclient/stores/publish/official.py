"""The official client's file publish store: ``PublishStore(filename, ...)``.

``import ampsclient as AMPS; AMPS.PublishStore("pub.store")`` makes what the official
client's ``PublishStore`` makes: a store that keeps unacknowledged publishes on disk and
survives a crash of the process, with the official constructor arguments and its
durability (no fsync per message). It is a :class:`~.file.FilePublishStore` whose directory
is ``filename`` (the official store is one file; ours keeps its segment files and its state
file *inside* that name, see ``docs/publish-stores.md``).

The abstract contract of every publish store is :class:`ampsclient.stores.publish.PublishStore`
(exported from :mod:`ampsclient.stores` as ``BasePublishStore``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from ...exceptions import StoreError
from .base import Replayer, StoredMessage
from .file import FilePublishStore
from .scan import scan
from .sync import FsyncPolicy

__all__ = [
    "DEFAULT_FSYNC",
    "DEFAULT_FSYNC_INTERVAL",
    "ClientOwned",
    "HybridPublishStore",
    "PublishStore",
    "check_blocks",
]

DEFAULT_FSYNC: Final[FsyncPolicy] = "interval"
"""The official forms' policy: a background fsync, never one per message."""
DEFAULT_FSYNC_INTERVAL: Final = 1.0
"""Seconds between the background fsyncs of the official forms."""


def check_blocks(blocks_per_realloc: int, block_size: int) -> None:
    """Refuse non-positive official block arguments with ``ValueError`` naming them."""
    if not isinstance(blocks_per_realloc, int) or blocks_per_realloc <= 0:
        raise ValueError(f"blocksPerRealloc must be a positive int, not {blocks_per_realloc!r}")
    if not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"blockSize must be a positive int, not {block_size!r}")


class ClientOwned(FilePublishStore):
    """The official forms' lifetime: the official ``PublishStore`` and ``HybridPublishStore``
    have no ``close()``, so the ``HAClient`` using one releases it when the client closes
    (its file lock goes: the same path may be opened again in the process), and reopens it
    when it is given to a client again (the official objects stay usable after their
    client closed)."""

    __slots__ = ("_opened_with",)

    _opened_with: tuple[tuple[Any, ...], dict[str, Any]]

    def reopen(self) -> None:
        """Open the store again after :meth:`close`, with the arguments it was made with
        (nothing to do while it is open)."""
        if not self.closed:
            return
        args, kwargs = self._opened_with
        type(self).__init__(self, *args, **kwargs)


class PublishStore(ClientOwned):
    """A file-backed publish store with the official client's constructor.

    Args:
        filename: where the store lives: a directory of that name holds its segment files
            and its state file (created if missing; a regular file there is refused).
        errorOnPublishGap: raise :class:`~ampsclient.exceptions.PublishStoreGapError` when
            a server seems to miss messages the store already dropped.
        blocksPerRealloc: with ``blockSize``, how much the store grows at a time: each
            segment file is ``blocksPerRealloc * blockSize`` bytes (default 10000 * 2048,
            about 20 MB), and :meth:`set_resize_handler` is asked before each growth.
        blockSize: see ``blocksPerRealloc``.
        fsync: ``"interval"`` (default: a background fsync every ``fsync_interval``
            seconds; a process crash loses nothing, a machine crash at most the last
            interval), ``"never"``, or ``"always"`` (an fsync per message, as
            :class:`FilePublishStore`'s default).
        fsync_interval: seconds between background fsyncs.

    Raises:
        StoreError: ``filename`` is a regular file, or the store cannot be opened.
        CorruptStoreError: the store's files are damaged (see :class:`FilePublishStore`).
    """

    __slots__ = ()

    def __init__(
        self,
        filename: str | os.PathLike[str],
        errorOnPublishGap: bool = False,
        blocksPerRealloc: int = 10000,
        blockSize: int = 2048,
        *,
        fsync: FsyncPolicy = DEFAULT_FSYNC,
        fsync_interval: float = DEFAULT_FSYNC_INTERVAL,
    ) -> None:
        check_blocks(blocksPerRealloc, blockSize)
        self._opened_with = (
            (filename, errorOnPublishGap, blocksPerRealloc, blockSize),
            {"fsync": fsync, "fsync_interval": fsync_interval},
        )
        path = Path(filename)
        if path.exists() and not path.is_dir():
            raise StoreError(
                f"PublishStore({str(filename)!r}): that is a file; ampsclient's file publish "
                "store is a directory of that name (segments and a state file), and cannot "
                "read the official client's store file"
            )
        super().__init__(
            path,
            fsync=fsync,
            fsync_interval=fsync_interval,
            segment_size=max(64, blocksPerRealloc * blockSize),
            error_on_publish_gap=errorOnPublishGap,
        )

    def __repr__(self) -> str:
        return (
            f"PublishStore({str(self.path)!r}, fsync={self.fsync_policy!r}, "
            f"unpersisted={self.unpersisted_count}, next={self.next_sequence()})"
        )


_SPILLED: Final = bytes(bytearray(b"\x00<spilled to disk>\x00"))
"""Stands in the memory index for a payload kept only on disk (compared by identity)."""


class HybridPublishStore(ClientOwned):
    """The official ``HybridPublishStore(filename, maxMemoryCapacity, errorOnPublishGap,
    blockSize)``: messages in memory up to a byte budget, every message also on disk.

    Every stored message is written to the store directory ``filename`` as in
    :class:`PublishStore`; the memory index keeps payloads only while their total stays
    within ``maxMemoryCapacity`` bytes. Payloads beyond it are *spilled*: kept on disk only,
    and read back from the segment files when a replay (or :meth:`get`) needs them. Discards
    free budget for later messages. After a restart the store holds what it held before,
    the oldest payloads in memory up to the budget.

    Args:
        filename: the store directory (see :class:`PublishStore`).
        maxMemoryCapacity: bytes of payloads kept in memory at most.
        errorOnPublishGap: see :class:`PublishStore`.
        blockSize: with the official default of 10000 blocks, the segment size
            (``10000 * blockSize`` bytes).
        fsync: as :class:`PublishStore` (default ``"interval"``).
        fsync_interval: as :class:`PublishStore`.
    """

    __slots__ = ("_capacity", "_measured_at", "_mem_bytes", "_spilled_total")

    def __init__(
        self,
        filename: str | os.PathLike[str],
        maxMemoryCapacity: int,
        errorOnPublishGap: bool = False,
        blockSize: int = 2048,
        *,
        fsync: FsyncPolicy = DEFAULT_FSYNC,
        fsync_interval: float = DEFAULT_FSYNC_INTERVAL,
    ) -> None:
        check_blocks(10000, blockSize)
        self._opened_with = (
            (filename, maxMemoryCapacity, errorOnPublishGap, blockSize),
            {"fsync": fsync, "fsync_interval": fsync_interval},
        )
        if not isinstance(maxMemoryCapacity, int) or maxMemoryCapacity < 0:
            raise ValueError(
                f"maxMemoryCapacity must be a non-negative int, not {maxMemoryCapacity!r}"
            )
        self._capacity = maxMemoryCapacity
        self._mem_bytes = 0
        self._measured_at = -1
        self._spilled_total = 0
        path = Path(filename)
        if path.exists() and not path.is_dir():
            raise StoreError(f"HybridPublishStore({str(filename)!r}): that is a file, not a store")
        super().__init__(
            path,
            fsync=fsync,
            fsync_interval=fsync_interval,
            segment_size=10000 * blockSize,
            error_on_publish_gap=errorOnPublishGap,
        )
        with self.index_lock:  # a reopened store: spill what the budget does not hold
            self._measured_at = self._discarded_total  # counted below, oldest first
            buf = self.index_buf
            for i in range(self._head, len(buf)):
                payload = buf[i]
                if payload is not None and not self._fits(len(payload)):
                    buf[i] = _SPILLED
                    self._spilled_total += 1

    @property
    def max_memory_capacity(self) -> int:
        """The memory budget in bytes."""
        return self._capacity

    def _fits(self, size: int) -> bool:
        """Whether a payload of ``size`` bytes fits in the memory budget (then counted)."""
        if self._mem_bytes + size > self._capacity and self._measured_at != self._discarded_total:
            self._measured_at = self._discarded_total  # re-measure once per discard round
            self._mem_bytes = self.memory_bytes()
        if self._mem_bytes + size > self._capacity:
            return False
        self._mem_bytes += size
        return True

    def memory_bytes(self) -> int:
        """Bytes of payloads held in memory now (the lock held, or a moment's estimate)."""
        return sum(
            len(p) for p in self.index_buf[self._head :] if p is not None and p is not _SPILLED
        )

    def _index_extend(self, first: int, payloads: list[bytes]) -> None:
        kept = []
        for payload in payloads:
            if self._fits(len(payload)):
                kept.append(payload)
            else:
                kept.append(_SPILLED)
                self._spilled_total += 1
        super()._index_extend(first, kept)

    def _from_disk(self, sequences: set[int]) -> dict[int, bytes]:
        """The payloads of ``sequences`` read back from the segment files (once no segment
        is being deleted behind a roll)."""
        if self.index_log.spares is not None:
            self.index_log.spares.drain()
        found = scan(self.path)
        return {s: p for s, p in found.live if s in sequences}

    def replay(self, replayer: Replayer) -> int:
        """Call ``replayer`` for every unpersisted message in order (spilled payloads are
        read back from disk first)."""
        with self.index_lock:
            first, payloads = self.index_first, self.index_buf[self._head :]
            spilled = {first + i for i, p in enumerate(payloads) if p is _SPILLED}
            disk = self._from_disk(spilled) if spilled else {}
        n = 0
        for i, payload in enumerate(payloads):
            if payload is _SPILLED:
                payload = disk.get(first + i)
            if payload is not None:
                replayer(StoredMessage(first + i, payload))
                n += 1
        return n

    def get(self, sequence: int) -> StoredMessage | None:
        """The unpersisted message with this sequence number (from disk if spilled)."""
        with self.index_lock:
            message = super().get_unlocked(sequence)
            if message is None or message.payload is not _SPILLED:
                return message
            payload = self._from_disk({sequence}).get(sequence)
        return None if payload is None else StoredMessage(sequence, payload)

    def statistics(self) -> dict[str, int]:
        """The file store's counters plus ``memory_bytes``, ``spilled`` (payloads on disk
        only now) and ``spilled_total``."""
        stats = super().statistics()
        with self.index_lock:
            live = self.index_buf[self._head :]
            stats.update(
                memory_bytes=self.memory_bytes(),
                spilled=sum(1 for p in live if p is _SPILLED),
                spilled_total=self._spilled_total,
            )
            stats["bytes"] = stats["memory_bytes"]
        return stats
