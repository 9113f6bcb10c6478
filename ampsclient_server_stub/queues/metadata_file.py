"""``FileBackedMetadata``: a queue's metadata kept in the journal directory instead of memory
(``shared/queues.md`` §2, §11).

With ``<FileBackedMetadata>enabled</FileBackedMetadata>`` a queue

* keeps each message as its journal position: the body is not held in memory but read back
  from the transaction log when it is delivered, queried or filtered (:func:`message_class`);
* keeps its live set in ``<instance>.<queue>.<message type>.queue.cache`` in the journal
  directory: the journal position of every message in the queue (active or waiting beyond
  ``TargetQueueDepth``) and its owner (replicated queues), as of a journal index ``P``.
  A restart reads those records back and scans the journal only after ``P`` (instead of from
  the ``queues.ack`` point), so a queue whose ack point is far back restarts faster.
* on a replicated queue, also keeps the ownership transfers still pending at ``P``: a
  transfer record applied to a message that is not in the queue (it has not arrived here
  yet, or it waits beyond ``TargetQueueDepth``) takes effect when the message enters
  (:meth:`.replicated.ReplicatedQueues.pending`). Its record may lie at or before ``P``,
  where the scan of a restart never looks, so the file has to carry it: restored before the
  file's messages are replayed, it makes a restart from the file end with the owners the
  instance had when it wrote the file. (Not writing the file while a transfer is pending
  would do too, but a message can wait beyond the target depth for long, and a transfer for
  a message that never enters here stays pending for good: the file would stop following
  the queue. A rebuild from the transaction log starts at the ``queues.ack`` point, which
  stays at the oldest pending transfer's record for ``DeferredAckExpiration``:
  :meth:`.replicated.ReplicatedQueues.oldest_pending_index`.)

The file is rewritten (a temporary file, ``fsync``, then renamed over it, with a CRC-32 over
the contents) at most once a second, and only when everything the journal holds is durable
and no acknowledgement waits for its message (deferred), so its contents are always exactly
the queue at ``P``. A missing, damaged or stale file (``P`` beyond the journal's end) is
ignored: the queue is rebuilt from the transaction log at the ``queues.ack`` point, as
without the file, and a new file is written. Statistics and lease state are not in the file
(leases return on a restart, as always).

The format (``AQC2``): magic, ``P``, the number of messages, the number of pending transfers;
per message its journal index and owner; per pending transfer its bookmark and new owner; a
CRC-32 over all of it. A file of the first format (``AQC1``, no pending transfers) is still
read for a queue that is not replicated, and ignored (the queue rebuilt from the transaction
log) for a replicated one: it cannot say whether a transfer was pending when it was written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import time
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..engine.journal import Journal, JournalError
from ..engine.storage_faults import StorageFaults
from .config import QueueConfig
from .model import Queue, QueueMessage

if TYPE_CHECKING:  # pragma: no cover
    from .depth import Inactive
    from .recovery import Replay
    from .replicated import ReplicatedQueues

__all__ = ["CACHE_SUFFIX", "MetadataFiles", "cache_path", "message_class"]

logger = logging.getLogger(__name__)

CACHE_SUFFIX: Final = "queue.cache"
"""The file name ending of a queue's metadata file."""

_MAGIC: Final = b"AQC2"
_MAGIC_V1: Final = b"AQC1"
"""The first format: no pending transfers."""
_HEAD: Final = struct.Struct(">4sQII")  # magic, position P, entry count, pending count
_HEAD_V1: Final = struct.Struct(">4sQI")  # magic, position P, entry count
_ENTRY: Final = struct.Struct(">QH")  # journal index, owner length (owner bytes follow)
_PENDING: Final = struct.Struct(">HH")  # bookmark length, owner length (both follow)
_WRITE_INTERVAL: Final = 1.0
"""Seconds between two rewrites of a queue's file, at most."""

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


def cache_path(journal: Journal, config: QueueConfig) -> Path:
    """Where the metadata file of the queue ``config`` lives."""
    name = _UNSAFE.sub("_", f"{config.name}.{config.message_type}")
    return Path(journal.directory) / f"{journal.name}.{name}.{CACHE_SUFFIX}"


def message_class(journal: Journal) -> type[QueueMessage]:
    """A :class:`~.model.QueueMessage` whose body stays in ``journal``: it holds the record's
    index and reads the body back on each use (a message whose record cannot be found, a
    bookmark of another log, keeps its body)."""

    class FileBackedMessage(QueueMessage):
        __slots__ = ("_body", "index")

        @property
        def data(self) -> bytes:
            body = self._body
            if body is not None:
                return body
            rows = journal.read_rows(self.index, max_records=1)
            if rows and rows[0][0] == self.index:
                payload: bytes = rows[0][6]
                return payload
            logger.error("queue message %s: journal record %d gone", self.bookmark, self.index)
            return b""

        @data.setter
        def data(self, value: bytes) -> None:
            pid, _, rest = self.bookmark.partition("|")
            try:
                index = journal.find_bookmark(int(pid), int(rest.partition("|")[0]))
            except (ValueError, JournalError):
                index = None
            self.index = index or 0
            self._body = None if index else value

    return FileBackedMessage


class MetadataFiles:
    """The metadata files of the queues with ``FileBackedMetadata`` of one engine."""

    def __init__(self, journal: Journal, *, faults: StorageFaults | None = None) -> None:
        self._journal = journal
        self._faults = faults if faults is not None else StorageFaults()
        self._written: dict[str, tuple[int, float]] = {}
        """Queue file -> (position, monotonic time) of its last write."""
        self._any = False
        """A queue is file-backed (else :meth:`save` returns at once)."""
        self._replicas: dict[str, ReplicatedQueues | None] = {}
        """Queue file -> the ownership layer of its queue (``None``: not replicated), for
        every file-backed queue :meth:`load` saw (:meth:`save` writes only those)."""

    def attach(self, queue: Queue) -> None:
        """``queue``'s messages keep their bodies in the journal when it is file-backed
        (:meth:`load` does it, before the queue gets any message)."""
        if queue.config.file_backed_metadata:
            queue.message_class = message_class(self._journal)
            self._any = True

    # ------------------------------------------------------------------ restart

    def load(
        self,
        queue: Queue,
        replay: Replay,
        replica: ReplicatedQueues | None,
        start: int,
    ) -> int:
        """Before the journal scan of ``queue`` from ``start`` (its ack point): make it
        file-backed (:meth:`attach`), hand the messages of its file to ``replay`` and return
        where the scan continues (``start`` when there is no usable file)."""
        if not queue.config.file_backed_metadata:
            return start
        self.attach(queue)
        journal = self._journal
        path = cache_path(journal, queue.config)
        self._replicas[str(path)] = replica
        snapshot = _read(path)
        if snapshot is None:
            logger.info("queue %r: no %s: rebuilt from the transaction log", queue.name, path.name)
            return start
        position, entries, pending = snapshot
        if pending is None and replica is not None:
            logger.warning(
                "queue %r: %s has the first format (no pending ownership transfers): "
                "rebuilt from the transaction log",
                queue.name,
                path.name,
            )
            return start
        if position > journal.last_index:
            logger.warning(
                "queue %r: %s is ahead of the journal (%d > %d): rebuilt from the journal",
                queue.name,
                path.name,
                position,
                journal.last_index,
            )
            return start
        if replica is not None and pending:
            replica.restore_pending(queue, pending)  # before the messages enter
        owners: dict[str, str] = {}
        for index, owner in entries:
            if index < start:  # before the ack point: acknowledged since
                continue
            records = journal.read(index, max_records=1)
            if not records or records[0].index != index:
                continue
            record = records[0]
            replay.apply(record)
            if replica is not None:
                replica.recovered(queue, record)
                if owner:
                    owners[record.bookmark] = owner
        if replica is not None:
            for bookmark, owner in owners.items():
                msg = queue.messages.get(bookmark)
                if msg is not None and msg.owner != owner:
                    replica.apply_transfer(queue, [bookmark], owner)
        self._written[str(path)] = (position, time.monotonic())
        logger.info(
            "queue %r: %d message(s) from %s (journal index %d), %d transfer(s) pending",
            queue.name,
            len(entries),
            path.name,
            position,
            len(pending or ()),
        )
        return max(start, position + 1)

    # ------------------------------------------------------------------ writing

    def save(
        self,
        queues: Iterable[Queue],
        inactive: Mapping[str, Inactive],
        *,
        force: bool = False,
    ) -> None:
        """Rewrite the files of the file-backed ``queues`` that changed, when the journal is
        all durable (else later); at most once a second each unless ``force``."""
        if not self._any:
            return
        journal = self._journal
        try:
            position = journal.last_index
            if journal.durable_index < position:
                return  # the in-memory state is ahead of what a crash would keep
        except JournalError:
            return
        now = time.monotonic()
        for queue in queues:
            if not queue.config.file_backed_metadata or queue.deferred:
                continue
            path = cache_path(journal, queue.config)
            if str(path) not in self._replicas:
                continue  # never loaded: its ownership layer is unknown
            last = self._written.get(str(path))
            if last is not None and (
                last[0] == position or (not force and now - last[1] < _WRITE_INTERVAL)
            ):
                continue
            entries = _entries(queue, inactive.get(queue.name))
            if entries is None:
                continue
            replica = self._replicas[str(path)]
            pending = replica.pending(queue) if replica is not None else {}
            store = f"queue/{queue.name}/{queue.config.message_type}"
            try:
                _write(path, position, entries, pending)
            except OSError as exc:  # a full disk: reported once; tried again the next second
                self._faults.failed(store, str(path), exc)
                self._written[str(path)] = (-1, now)
                continue
            except struct.error:  # a name too long for the format
                logger.exception("writing %s", path)
                continue
            if self._faults.active:
                self._faults.succeeded(store)
            self._written[str(path)] = (position, now)


def _entries(queue: Queue, inactive: Inactive | None) -> list[tuple[int, str]] | None:
    """``(journal index, owner)`` of every message of ``queue``, active or waiting; ``None``
    when one has no journal index (a message of another log: not restorable from a file)."""
    out: list[tuple[int, str]] = []
    for msg in queue.messages.values():
        index = getattr(msg, "index", 0)
        if not index:
            return None
        out.append((index, msg.owner or ""))
    if inactive is not None:
        for held in inactive.waiting.values():
            if isinstance(held, int):
                out.append((held, ""))
            elif isinstance(held, tuple) and isinstance(held[0], int):
                out.append((held[0], ""))
            else:
                return None
    out.sort()
    return out


def _write(
    path: Path, position: int, entries: list[tuple[int, str]], pending: Mapping[str, str]
) -> None:
    parts = [_HEAD.pack(_MAGIC, position, len(entries), len(pending))]
    for index, owner in entries:
        raw = owner.encode()
        parts.append(_ENTRY.pack(index, len(raw)) + raw)
    for bookmark, owner in pending.items():
        raw_bm, raw_owner = bookmark.encode(), owner.encode()
        parts.append(_PENDING.pack(len(raw_bm), len(raw_owner)) + raw_bm + raw_owner)
    body = b"".join(parts)
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(body + struct.pack(">I", zlib.crc32(body)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:  # (a full disk) the old file stands; a part-written one is not left
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _read(path: Path) -> tuple[int, list[tuple[int, str]], dict[str, str] | None] | None:
    """``(P, entries, pending transfers)`` of a metadata file (pending ``None``: the first
    format, which has none); ``None``: missing or damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("%s unreadable (%s)", path, exc)
        return None
    body, tail = data[:-4], data[-4:]
    if len(data) < _HEAD_V1.size + 4 or struct.unpack(">I", tail)[0] != zlib.crc32(body):
        logger.warning("%s damaged (bad length or CRC): ignored", path)
        return None
    try:
        return _parse(body)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        logger.warning("%s damaged (%s): ignored", path, exc)
        return None


def _parse(body: bytes) -> tuple[int, list[tuple[int, str]], dict[str, str] | None]:
    magic = body[:4]
    if magic == _MAGIC:
        _, position, count, pending_count = _HEAD.unpack_from(body)
        offset = _HEAD.size
    elif magic == _MAGIC_V1:
        _, position, count = _HEAD_V1.unpack_from(body)
        offset, pending_count = _HEAD_V1.size, 0
    else:
        raise ValueError("not a queue metadata file")
    entries: list[tuple[int, str]] = []
    for _ in range(count):
        index, size = _ENTRY.unpack_from(body, offset)
        offset += _ENTRY.size
        entries.append((index, body[offset : offset + size].decode()))
        offset += size
    pending: dict[str, str] = {}
    for _ in range(pending_count):
        bm_size, owner_size = _PENDING.unpack_from(body, offset)
        offset += _PENDING.size
        bookmark = body[offset : offset + bm_size].decode()
        offset += bm_size
        pending[bookmark] = body[offset : offset + owner_size].decode()
        offset += owner_size
    if offset != len(body):
        raise ValueError("its records do not fill it exactly")
    return position, entries, (pending if magic == _MAGIC else None)
