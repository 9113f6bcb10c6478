"""FileRecoveryPointAdapter: recovery points in a local append-only JSON-lines file.

File format (UTF-8, one JSON object per line, ``\\n``-terminated)::

    {"format":"ampsclient.recovery-points","version":1}
    {"subId":"orders-1","bookmark":"10620414156524534001|3|","time":1795334494.549}
    {"subId":"orders-2","bookmark":"10620414156524534001|9|,17942185739103000009|1|","time":...}
    {"purge":"orders-2"}

The first line is the header. Each later line is either an update (the point of ``subId`` is
now ``bookmark``; ``time`` is the POSIX time of the update) or the purge of one subscription.
The last line of a sub id wins. Purging everything rewrites the file with the header only.

Crash safety:

* every update is one ``write()`` of one whole line to a file opened with ``O_APPEND``;
* a crash (even a power loss) can at worst leave a *torn* last line, which is ignored when
  the file is read back (and removed by the compaction that follows);
* any other damage (a bad header, a complete line that is not a valid record) raises
  :class:`~ampsclient.exceptions.CorruptStoreError` instead of silently losing points;
* the file is compacted (rewritten with one line per subscription) when it is opened and
  whenever it holds ``compact_after`` more lines than live points: the new content goes to
  ``<path>.tmp``, which is fsynced and then renamed over the file with :func:`os.replace`
  (atomic), and the directory is fsynced; a crash leaves either the old or the new file.

``fsync`` policy: ``"always"`` (default) fsyncs after each update, so an acknowledged update
survives a power loss; ``"never"`` leaves the flush to the OS, which is enough for process
crashes (``kill -9``) but not for a machine crash. Wrap the adapter in a
:class:`~ampsclient.stores.recovery.ConflatingRecoveryPointAdapter` to bound the fsync rate.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, get_args

from ...exceptions import CorruptStoreError, InvalidBookmarkError, StoreError
from ...protocol.bookmarks import EPOCH, Timestamp, format_timestamp, parse_bookmark
from .base import RecoveryPoint, RecoveryPointCursor, make_point

__all__ = ["FILE_FORMAT", "FileRecoveryPointAdapter", "RecoveryFsyncPolicy"]

logger = logging.getLogger("ampsclient.stores.recovery")

FILE_FORMAT: Final = "ampsclient.recovery-points"
"""The ``format`` value of the header line."""
_VERSION: Final = 1
_HEADER: Final = (
    json.dumps({"format": FILE_FORMAT, "version": _VERSION}, separators=(",", ":")) + "\n"
).encode()

RecoveryFsyncPolicy = Literal["always", "never"]
"""When a :class:`FileRecoveryPointAdapter` forces updates to stable storage."""
_POLICIES: Final = frozenset(get_args(RecoveryFsyncPolicy))


def _fsync_dir(directory: Path) -> None:
    if sys.platform == "win32":  # pragma: no cover - directories cannot be fsynced there
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _dumps(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def _has_timestamp(bookmark: str) -> bool:
    for part in bookmark.split(","):
        if "T" in part:
            try:
                if isinstance(parse_bookmark(part), Timestamp):
                    return True
            except InvalidBookmarkError:
                continue
    return False


class FileRecoveryPointAdapter(RecoveryPointCursor):
    """Recovery points in a local file: one point per subscription, crash-safe.

    Args:
        path: the file (created with its header when missing; the directory must exist).
        fsync: ``"always"`` or ``"never"`` (see the module docstring).
        use_timestamp: when reading points back, append the time of each point's last
            update as a timestamp bookmark (``1|5|,20261122T183421.812052Z``) unless the
            bookmark already has one: the journal-removal protection of seed 003, like the
            official ``MMapBookmarkStore(use_last_modified_time=True)`` and
            ``SOWRecoveryPointAdapter(use_timestamp=True)``.
        compact_after: rewrite the file once it holds this many lines more than live points.

    Raises:
        CorruptStoreError: the file exists but is not a recovery point file, or a line other
            than the last one is damaged.
        StoreError: the file cannot be read or written.

    Example::

        adapter = FileRecoveryPointAdapter("orders.points")
        store = MemoryBookmarkStore(adapter)   # loads the points saved by the last run
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: RecoveryFsyncPolicy = "always",
        use_timestamp: bool = False,
        compact_after: int = 1000,
    ) -> None:
        if fsync not in _POLICIES:
            raise ValueError(f"fsync must be one of {sorted(_POLICIES)}, not {fsync!r}")
        if compact_after < 1:
            raise ValueError("compact_after must be >= 1")
        self.path = Path(path)
        """The file."""
        self._fsync = fsync == "always"
        self._use_ts = bool(use_timestamp)
        self._compact_after = compact_after
        self._lock = threading.Lock()
        self._table: dict[str, tuple[str, float]] = {}
        self._lines = 0
        self._size = 0
        """The file's length after the last whole line (a failed write is cut back to it)."""
        self._failed = 0
        """Writes that failed since the last one that succeeded (a full disk)."""
        self._fd: int | None = None
        try:
            self._table = self._read()
            self._compact()
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open the recovery point file ({exc})") from exc

    # ------------------------------------------------------------------ reading

    def _read(self) -> dict[str, tuple[str, float]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        points: dict[str, tuple[str, float]] = {}
        if not data:
            return points
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline, else a torn last line
        if tail:
            logger.warning("%s: ignoring a torn last line (%d bytes)", self.path, len(tail))
        if not lines:
            if _HEADER.startswith(tail):
                return points  # a torn header: the file was never completed
            raise CorruptStoreError(f"{self.path}: not a recovery point file (no header)")
        try:
            header = json.loads(lines[0])
        except (ValueError, RecursionError):  # deep nesting is a damaged line too
            header = None
        if not isinstance(header, dict) or header.get("format") != FILE_FORMAT:
            raise CorruptStoreError(f"{self.path}: not a recovery point file (bad header)")
        if header.get("version") != _VERSION:
            raise CorruptStoreError(
                f"{self.path}: unsupported recovery point file version {header.get('version')!r}"
            )
        for number, raw in enumerate(lines[1:], start=2):
            record = self._parse_line(raw, number)
            if "purge" in record:
                points.pop(record["purge"], None)
            else:
                points[record["subId"]] = (record["bookmark"], float(record.get("time", 0.0)))
        return points

    def _parse_line(self, raw: bytes, number: int) -> dict[str, Any]:
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):  # deep nesting is a damaged line too
            record = None
        if isinstance(record, dict):
            if isinstance(record.get("purge"), str):
                return record
            sub_id, bookmark, stamp = (
                record.get("subId"),
                record.get("bookmark"),
                record.get("time"),
            )
            if (
                isinstance(sub_id, str)
                and sub_id
                and isinstance(bookmark, str)
                and (stamp is None or isinstance(stamp, int | float))
            ):
                return record
        raise CorruptStoreError(f"{self.path}: line {number} is not a valid record: {raw!r:.80}")

    # ------------------------------------------------------------------ writing

    def _compact(self, tmp_path: str | os.PathLike[str] | None = None) -> None:
        """Rewrite the file with one line per live point (temp file + fsync + rename); the
        temp file is ``tmp_path`` (default ``<file>.tmp``, same file system)."""
        tmp = (
            Path(tmp_path) if tmp_path is not None else self.path.with_name(self.path.name + ".tmp")
        )
        body = [_HEADER]
        for sub_id, (bookmark, stamp) in self._table.items():
            body.append(_dumps({"subId": sub_id, "bookmark": bookmark, "time": stamp}))
        data = b"".join(body)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):  # (a full disk) no half-written file is left
                os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, self.path)
        self._size = len(data)
        _fsync_dir(self.path.parent)
        self._lines = len(self._table)
        new_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        old_fd, self._fd = self._fd, new_fd
        if old_fd is not None:
            os.close(old_fd)

    def _append(self, line: bytes) -> None:
        fd = self._fd
        if fd is None:
            raise StoreError(f"{self.path}: the recovery point adapter is closed")
        try:
            view = memoryview(line)
            while view:  # one write() in practice; a short write continues the same line
                view = view[os.write(fd, view) :]
            if self._fsync:
                os.fsync(fd)
        except OSError as exc:
            # a full disk: cut a partly written line off (truncating needs no space), so the
            # file keeps whole lines and later ones do not glue onto it
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            self._failed += 1
            if self._failed == 1:  # once per condition, not per update
                logger.warning(
                    "%s: cannot write recovery points (%s); each update raises StoreError "
                    "until a write succeeds again",
                    self.path,
                    exc,
                )
            raise StoreError(f"{self.path}: cannot write a recovery point ({exc})") from exc
        self._size += len(line)
        self._lines += 1
        if self._failed:
            logger.warning(
                "%s: recovery points are written again after %d failed update(s)",
                self.path,
                self._failed,
            )
            self._failed = 0
        if self._lines - len(self._table) >= self._compact_after:
            try:
                self._compact()
            except OSError as exc:  # the appended line stands; compaction is tried later
                logger.debug("%s: compaction failed: %s", self.path, exc)

    # ------------------------------------------------------------------ adapter API

    def update(self, point: RecoveryPoint) -> None:
        """Store ``point`` (one appended line; fsynced with ``fsync="always"``)."""
        sub_id, bookmark = point.get_sub_id(), point.get_bookmark()
        if not sub_id:
            return
        now = time.time()
        with self._lock:
            self._table[sub_id] = (bookmark, now)
            self._append(_dumps({"subId": sub_id, "bookmark": bookmark, "time": round(now, 6)}))

    def purge(self, sub_id: str | None = None) -> None:
        """Forget one subscription's point (a purge line) or all of them (a rewrite)."""
        with self._lock:
            if self._fd is None:
                raise StoreError(f"{self.path}: the recovery point adapter is closed")
            if sub_id is None:
                self._table.clear()
                try:
                    self._compact()
                except OSError as exc:
                    raise StoreError(f"{self.path}: cannot purge ({exc})") from exc
            elif self._table.pop(sub_id, None) is not None:
                self._append(_dumps({"purge": sub_id}))

    def prune(self, tmp_path: str | os.PathLike[str] | None = None) -> None:
        """Compact the file now (``tmp_path``: where the new file is written before it
        replaces the old one; default ``<file>.tmp``)."""
        with self._lock:
            if self._fd is None:
                return
            try:
                self._compact(tmp_path)
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot compact ({exc})") from exc

    def close(self) -> None:
        """Close the file. Idempotent."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _points(self) -> list[RecoveryPoint]:
        with self._lock:
            items = list(self._table.items())
        out: list[RecoveryPoint] = []
        for sub_id, (bookmark, stamp) in items:
            if (
                self._use_ts
                and stamp
                and bookmark not in ("", EPOCH)
                and not _has_timestamp(bookmark)
            ):
                bookmark += "," + format_timestamp(datetime.fromtimestamp(stamp, UTC))
            out.append(make_point(sub_id, bookmark))
        return out

    def get(self, sub_id: str) -> str | None:
        """The stored bookmark of ``sub_id`` (without any added timestamp), or ``None``."""
        with self._lock:
            entry = self._table.get(sub_id)
        return None if entry is None else entry[0]

    def __len__(self) -> int:
        return len(self._table)

    def __enter__(self) -> FileRecoveryPointAdapter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
