"""Opening a journal: which files are this instance's, and loading each one as a segment.

:func:`list_files` finds the instance's segment files in the journal directory and in the
archive directory (an archived file is still part of the log), removes what interrupted writes
left behind (``.tmp``/``.new`` files, a ``.journal.gz`` next to its ``.journal``, an archive
copy next to its original) and leaves other instances' files alone. :func:`load_segment` turns
one file into a segment: a sealed file whose sidecar index matches it is a
:class:`~.journal_segments.DiskSegment` (its header read, nothing scanned); anything else is
scanned record by record, CRCs verified, and a torn tail of the newest file truncated.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .journal_format import (
    CorruptJournalError,
    IndexView,
    encode_index,
    read_index,
    scan_gzip,
    scan_records,
    write_atomic,
)
from .journal_segments import DiskSegment, FileNames, MemSegment, Segment

__all__ = [
    "Listing",
    "SegmentFile",
    "detect_prefix",
    "list_files",
    "load_segment",
]

_log = logging.getLogger("ampsclient_server_stub.engine.journal")


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One segment's data file as found on disk."""

    path: Path
    compressed: bool
    archived: bool


@dataclass(slots=True)
class Listing:
    """This instance's files in the journal (and archive) directory."""

    files: dict[int, SegmentFile] = field(default_factory=dict)
    """First index -> the segment's data file."""
    indexes: dict[int, Path] = field(default_factory=dict)
    """First index -> its sidecar index."""
    spares: list[Path] = field(default_factory=list)
    """Preallocated files not yet used."""
    foreign: int = 0
    """Segment-like files of other instances (left alone)."""


def _remove(path: Path | str, why: str, read_only: bool, level: int = logging.INFO) -> None:
    if not read_only:
        _log.log(level, "journal: removing %s (%s)", path, why)
        os.unlink(path)


def _scan_dir(
    directory: Path, names: FileNames, read_only: bool, listing: Listing, archived: bool
) -> dict[int, SegmentFile]:
    plain: dict[int, Path] = {}
    gz: dict[int, Path] = {}
    for entry in os.scandir(directory):
        name = entry.name
        if names.owns_leftover(name):
            _remove(entry.path, "left over by an interrupted write", read_only)
            continue
        m = names.segment_re.fullmatch(name)
        if m:
            (gz if m.group(2) else plain)[int(m.group(1))] = Path(entry.path)
            continue
        if archived:
            continue
        m = names.index_re.fullmatch(name)
        if m:
            listing.indexes[int(m.group(1))] = Path(entry.path)
        elif names.spare_re.fullmatch(name):
            listing.spares.append(Path(entry.path))
        elif name.endswith((".journal", ".journal.gz")):
            listing.foreign += 1
    for first in sorted(set(plain) & set(gz)):
        # compression wrote the .gz but did not remove the original: keep the original (the
        # .gz may be incomplete if its rename was not durable yet)
        _remove(gz[first], "an interrupted compression", read_only, logging.WARNING)
        del gz[first]
    found = {f: SegmentFile(p, False, archived) for f, p in plain.items()}
    found.update({f: SegmentFile(p, True, archived) for f, p in gz.items()})
    return found


def list_files(
    directory: Path, archive: Path | None, names: FileNames, *, read_only: bool
) -> Listing:
    """This instance's files (see the module docstring); repairs unless ``read_only``."""
    listing = Listing()
    listing.files = _scan_dir(directory, names, read_only, listing, archived=False)
    if archive is not None and archive.is_dir():
        for first, found in _scan_dir(archive, names, read_only, listing, archived=True).items():
            if first in listing.files:
                # archiving copied the file but did not remove the original: keep the original
                _remove(found.path, "an interrupted archive", read_only, logging.WARNING)
                continue
            listing.files[first] = found
    for first in sorted(set(listing.indexes) - set(listing.files)):
        _remove(listing.indexes[first], "an orphan sidecar", read_only)
        del listing.indexes[first]
    if listing.foreign:
        _log.info(
            "journal: %s holds %d journal file(s) of other instances (not %r): ignored",
            directory,
            listing.foreign,
            names.prefix,
        )
    return listing


_ANY_SEGMENT_RE = re.compile(r"(.+)-\d{20}\.journal(?:\.gz)?")


def detect_prefix(directory: Path, default: str = "journal") -> str:
    """The file prefix of the journal in ``directory``: ``default`` if it has files with that
    prefix or none at all, else the one other prefix found (tools opening a server's journal
    without knowing the instance name). Several other prefixes: ``default`` (logged)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return default
    prefixes = {m.group(1) for n in names if (m := _ANY_SEGMENT_RE.fullmatch(n))}
    if not prefixes or default in prefixes:
        return default
    if len(prefixes) == 1:
        return prefixes.pop()
    _log.info(
        "journal: %s holds the journals of %s; opening %r (pass the name to choose)",
        directory,
        ", ".join(sorted(prefixes)),
        default,
    )
    return default


def load_segment(
    found: SegmentFile,
    first: int,
    index_path: Path,
    *,
    is_last: bool,
    read_only: bool,
    durable: bool,
) -> tuple[Segment, int]:
    """Load one segment file; returns it and the torn bytes truncated from its end.

    Raises:
        CorruptJournalError: damage other than a torn tail of the newest file.
    """
    path, compressed = found.path, found.compressed
    header = read_index(index_path)
    if header is not None and header.first_index == first and header.count > 0:
        try:
            size = path.stat().st_size
        except OSError:
            size = -1
        if compressed:
            if header.nblocks:
                seg = DiskSegment(path, index_path, header, True, archived=found.archived)
                view = IndexView(index_path, header)
                if view.block_coffs[header.nblocks] == size:
                    return seg, 0
        elif size == header.data_size:
            return DiskSegment(path, index_path, header, False, archived=found.archived), 0
        _log.warning("journal: sidecar %s does not match %s; rebuilding it", index_path, path)
    if compressed:
        return _rebuild_compressed(found, first, index_path, read_only, durable), 0
    res = scan_records(path, first, tolerate_tail=is_last)
    torn = 0
    if res.torn:
        if read_only:
            _log.warning("journal: %s ends with %d torn bytes (ignored, read-only)", path, res.torn)
        else:
            _log.warning(
                "journal: %s: truncating a torn tail of %d bytes at offset %d",
                path,
                res.torn,
                res.size,
            )
            os.truncate(path, res.size)
            torn = res.torn
    return MemSegment(path, first, res, -1), torn


def _rebuild_compressed(
    found: SegmentFile, first: int, index_path: Path, read_only: bool, durable: bool
) -> DiskSegment:
    res, uoffs, coffs = scan_gzip(found.path, first)
    if read_only:
        raise CorruptJournalError(
            found.path, -1, "compressed segment without a valid sidecar; open read-write once"
        )
    data = encode_index(
        first_index=first,
        data_size=res.size,
        offsets=res.offsets,
        timestamps=res.timestamps,
        pubs=res.pubs,
        blocks=(uoffs, coffs),
    )
    write_atomic(index_path, data, durable=durable)
    header = read_index(index_path)
    assert header is not None
    return DiskSegment(found.path, index_path, header, True, archived=found.archived)
