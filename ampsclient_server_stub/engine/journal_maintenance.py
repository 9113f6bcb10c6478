"""Journal file management: describe, remove, compress and archive sealed segments while the
journal is in use (seed 000, "Managing Journal Files"; the AMPS actions
``amps-action-do-remove-journal``, ``-compress-journal`` and ``-archive-journal``).

Every operation works on sealed segments whose newest record is older than a cutoff, never on
the active segment or one awaiting its seal. Compressed and archived files stay part of the
log: replays, bookmark lookups and recovery read them. Removal goes strictly from the oldest
end (a gap would break recovery) and stops at the first file a pin still needs (a bookmark
replay, a cursor, a replication destination that has not acknowledged it).

The caller (:class:`~.journal.Journal`) serializes these operations (one at a time) and passes
its :class:`~.journal_segments.SegmentTable`; the table's lock is taken only for the short
in-memory swaps, never across file I/O.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from .journal_format import fsync_dir, gzip_segment, index_with_blocks, write_atomic
from .journal_segments import DiskSegment, MemSegment, SegmentTable
from .journal_types import SegmentInfo

__all__ = ["archive_segments", "compress_segments", "describe", "remove_segments"]

_log = logging.getLogger("ampsclient_server_stub.engine.journal")


def describe(table: SegmentTable) -> list[SegmentInfo]:
    """Describe every segment, oldest first."""
    with table.lock:
        segments = list(table.segments)
    active = segments[-1]
    out = []
    for seg in segments:
        try:
            file_bytes = seg.path.stat().st_size
        except OSError:
            file_bytes = 0
        archived = False
        if isinstance(seg, MemSegment):
            state = "active" if seg is active else "sealing"
            data_bytes = seg.size
            first_ts = int(seg.timestamps[0]) if seg.count else 0
            last_ts = int(seg.timestamps[-1]) if seg.count else 0
        else:
            state = "compressed" if seg.compressed else "sealed"
            data_bytes = seg.header.data_size
            first_ts, last_ts = seg.header.first_ts, seg.header.last_ts
            archived = seg.archived
        out.append(
            SegmentInfo(
                path=seg.path,
                state=state,
                first_index=seg.first_index,
                last_index=seg.first_index + seg.count - 1,
                records=seg.count,
                data_bytes=data_bytes,
                file_bytes=file_bytes,
                first_timestamp=first_ts,
                last_timestamp=last_ts,
                archived=archived,
            )
        )
    return out


def _sealed_before(table: SegmentTable, cutoff: int) -> list[DiskSegment]:
    with table.lock:
        return [
            s for s in table.segments if isinstance(s, DiskSegment) and s.header.last_ts < cutoff
        ]


def remove_segments(table: SegmentTable, cutoff: int, *, durable: bool) -> list[Path]:
    """Remove the oldest sealed segments whose newest record is before ``cutoff`` (µs).

    Stops at the first segment a pin still needs (logged). Returns the removed data files.
    """
    removed: list[Path] = []
    dirs: set[Path] = set()
    while True:
        with table.lock:
            seg = table.segments[0]
            if not isinstance(seg, DiskSegment) or seg.header.last_ts >= cutoff:
                break
            lowest = table.lowest_pin()
            if lowest is not None and lowest <= seg.last_index:
                _log.info(
                    "journal: not removing %s (records %d..%d): still needed from index %d "
                    "(a replay or a replication destination)",
                    seg.path,
                    seg.first_index,
                    seg.last_index,
                    lowest,
                )
                break
            del table.segments[0]
            del table.firsts[0]
            table.topics.pop(seg.first_index, None)
        table.handles.forget(seg)
        os.unlink(seg.path)
        try:
            os.unlink(seg.index_path)
        except FileNotFoundError:  # pragma: no cover
            pass
        dirs.update((seg.path.parent, seg.index_path.parent))
        removed.append(seg.path)
        with table.lock:
            table.stats["pruned_segments"] += 1
        _log.info("journal: removed %s (records %d..%d)", seg.path, seg.first_index, seg.last_index)
    if removed:
        with table.lock:
            table.pubdir.unregister_before(table.firsts[0])
        if durable:
            for directory in sorted(dirs):
                fsync_dir(directory)
    return removed


def compress_segments(table: SegmentTable, cutoff: int, *, durable: bool) -> list[Path]:
    """Compress the sealed segments whose newest record is before ``cutoff`` (µs), in place
    (archived ones in the archive directory). Pins do not prevent it. Returns the new files."""
    todo = [s for s in _sealed_before(table, cutoff) if not s.compressed]
    return [_compress_one(table, seg, durable) for seg in todo]


def _compress_one(table: SegmentTable, seg: DiskSegment, durable: bool) -> Path:
    gz_path = seg.path.with_name(seg.path.name + ".gz")
    gz_tmp = gz_path.with_name(gz_path.name + ".tmp")
    view = table.handles.view(seg)
    source = table.handles.source(seg)
    uoffs, coffs = gzip_segment(source, view.offsets, seg.header.data_size, gz_tmp, durable=durable)
    header, data = index_with_blocks(seg.index_path, seg.header, uoffs, coffs)
    new_index = seg.index_path.with_name(seg.index_path.name + ".new")
    write_atomic(new_index, data, durable=durable)
    os.replace(gz_tmp, gz_path)
    os.replace(new_index, seg.index_path)
    if durable:
        fsync_dir(gz_path.parent)
        fsync_dir(seg.index_path.parent)
    new = DiskSegment(gz_path, seg.index_path, header, True, archived=seg.archived)
    with table.lock:
        table.replace(seg, new)
        table.stats["compressed_segments_made"] += 1
    table.handles.forget(seg)
    os.unlink(seg.path)
    if durable:
        fsync_dir(seg.path.parent)
    _log.info(
        "journal: compressed %s -> %s (%d -> %d bytes)",
        seg.path.name,
        gz_path.name,
        seg.header.data_size,
        coffs[-1],
    )
    return gz_path


def archive_segments(
    table: SegmentTable, cutoff: int, archive: Path, *, durable: bool
) -> list[Path]:
    """Move the sealed segments whose newest record is before ``cutoff`` (µs) to ``archive``
    (their sidecar indexes stay in the journal directory). Pins do not prevent it: an archived
    file is still read by replays. Returns the files now in the archive directory."""
    todo = [s for s in _sealed_before(table, cutoff) if not s.archived]
    if todo:
        archive.mkdir(parents=True, exist_ok=True)
    return [_archive_one(table, seg, archive, durable) for seg in todo]


def _archive_one(table: SegmentTable, seg: DiskSegment, archive: Path, durable: bool) -> Path:
    target = archive / seg.path.name
    try:
        os.link(seg.path, target)  # same file system: no copy, and never a moment without it
    except FileExistsError:
        os.unlink(target)  # a copy left by an interrupted archive: the original wins
        return _archive_one(table, seg, archive, durable)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP):
            raise
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(seg.path, tmp)
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, target)
    if durable:
        fsync_dir(archive)
    new = DiskSegment(target, seg.index_path, seg.header, seg.compressed, archived=True)
    with table.lock:
        table.replace(seg, new)
        table.stats["archived_segments_made"] += 1
    table.handles.forget(seg)
    os.unlink(seg.path)
    if durable:
        fsync_dir(seg.path.parent)
    _log.info("journal: archived %s to %s", seg.path.name, archive)
    return target
