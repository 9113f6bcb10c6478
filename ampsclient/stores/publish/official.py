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
from typing import Final

from ...exceptions import StoreError
from .file import FilePublishStore
from .sync import FsyncPolicy

__all__ = ["DEFAULT_FSYNC", "DEFAULT_FSYNC_INTERVAL", "PublishStore", "check_blocks"]

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


class PublishStore(FilePublishStore):
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
