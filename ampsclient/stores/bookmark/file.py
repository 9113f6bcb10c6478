"""File-backed bookmark stores with the official constructors: ``MMapBookmarkStore`` and
``RingBookmarkStore``.

Both are a :class:`~.memory.MemoryBookmarkStore` (duplicate detection, per-publisher
recovery points, ``persisted`` acks) whose recovery points live in a local file: a
:class:`~ampsclient.stores.recovery.FileRecoveryPointAdapter` at ``filename`` written with
``fsync="never"``. Each change of a subscription's recovery point (a discard that moves it, a
persisted ack adopted) is one ``write()`` of a line before the call returns, so a ``kill -9``
of the process loses nothing (the line is in the OS page cache); a crash of the machine can
lose what the OS had not written back, as with the official memory-mapped stores.

After a restart the store starts from the saved points: the subscription resumes from them,
and the messages the server sends again that the points already cover (a recovery point
with several publishers replays from the oldest of them) go to the client's duplicate
handler, not to the subscription's. See ``docs/bookmark-stores.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..recovery.base import RecoveryPoint, RecoveryPointAdapter, iter_recovery_points
from ..recovery.file import FileRecoveryPointAdapter
from .memory import MemoryBookmarkStore

__all__ = ["MMapBookmarkStore", "RingBookmarkStore"]


class _Both:
    """The file adapter first, then the user's ``adapter``: both get every update, purge and
    close; at start the file's points win, the adapter's fill in subscriptions the file
    does not know."""

    def __init__(self, primary: FileRecoveryPointAdapter, secondary: Any) -> None:
        self.primary = primary
        self.secondary = secondary

    def __iter__(self) -> Iterator[RecoveryPoint]:
        known: set[str] = set()
        for point in iter_recovery_points(self.primary):
            known.add(point.sub_id)
            yield point
        for point in iter_recovery_points(self.secondary):
            if point.sub_id not in known:
                yield point

    def update(self, point: RecoveryPoint) -> None:
        self.primary.update(point)
        self.secondary.update(point)

    def purge(self, sub_id: str | None = None) -> None:
        self.primary.purge(sub_id)
        if sub_id is None:
            self.secondary.purge()
        else:
            self.secondary.purge(sub_id)

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            self.secondary.close()


class _FileBookmarkStore(MemoryBookmarkStore):
    """A :class:`MemoryBookmarkStore` whose recovery points are kept in ``filename``."""

    def __init__(
        self,
        filename: str | os.PathLike[str],
        use_last_modified_time: bool,
        adapter: RecoveryPointAdapter | None,
        compact_after: int,
    ) -> None:
        self._file = FileRecoveryPointAdapter(
            filename,
            fsync="never",
            use_timestamp=use_last_modified_time,
            compact_after=compact_after,
        )
        try:
            backing: Any = self._file if adapter is None else _Both(self._file, adapter)
            super().__init__(backing)
        except BaseException:
            self._file.close()
            raise

    @property
    def filename(self) -> str:
        """The file that holds the recovery points."""
        return str(self._file.path)


class MMapBookmarkStore(_FileBookmarkStore):
    """The official ``MMapBookmarkStore(filename, use_last_modified_time=False, adapter=None)``.

    Args:
        filename: the file of recovery points (created if missing; its directory must exist).
        use_last_modified_time: at start, append the time each point was last written to it
            as a timestamp bookmark, so a subscription whose bookmarks left the server's
            journal restarts at that time rather than at the end of the journal.
        adapter: a recovery point adapter that also gets every update (for instance a
            :class:`~ampsclient.stores.recovery.SOWRecoveryPointAdapter`); at start it
            supplies the subscriptions the file does not know.

    Raises:
        CorruptStoreError: the file is not a recovery point file.
        StoreError: it cannot be read or written.
    """

    def __init__(
        self,
        filename: str | os.PathLike[str],
        use_last_modified_time: bool = False,
        adapter: RecoveryPointAdapter | None = None,
    ) -> None:
        super().__init__(filename, use_last_modified_time, adapter, compact_after=1000)

    def prune(self, tmp_file_name: str | os.PathLike[str] | None = None) -> None:
        """Official: rewrite the file with one line per subscription now.

        Args:
            tmp_file_name: where the new file is written before it replaces the old one
                (default ``<filename>.tmp``).
        """
        self._file.prune(tmp_file_name)


class RingBookmarkStore(_FileBookmarkStore):
    """The official ``RingBookmarkStore(filename)``: recovery points only, in a small file.

    The official ring store keeps a fixed number of slots, one per subscription, each with
    its most recent bookmark. This one keeps the same information: its file is compacted to
    one line per subscription every 64 changes, so it stays small.

    Args:
        filename: the file (created if missing; its directory must exist).
    """

    def __init__(self, filename: str | os.PathLike[str]) -> None:
        super().__init__(filename, False, None, compact_after=64)
