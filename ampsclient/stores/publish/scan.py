"""Reading a file publish store's directory: the fsck-like scanner behind every open.

:func:`scan` reads every segment, verifies every record's CRC and rebuilds what the store
holds; :func:`inspect_store` is its read-only public face (``python -m
ampsclient.stores.publish <dir>``). Nothing here writes: repairing a torn tail is the
opening store's job (:mod:`.file`).
"""

from __future__ import annotations

import itertools
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ...exceptions import CorruptStoreError
from .base import StoredMessage
from .record import (
    KIND_DISCARD_UP_TO,
    KIND_STORE,
    RECORD_PREFIX_SIZE,
    SEGMENT_MAGIC,
    decode_body,
    decode_state,
    find_valid_record,
    read_prefix,
)

__all__ = [
    "LOCK_NAME",
    "SEGMENT_RE",
    "SPARE_NAME",
    "STATE_NAME",
    "STATE_TMP",
    "ScanResult",
    "SegmentInfo",
    "StoreInspection",
    "TornTail",
    "inspect_store",
    "read_state",
    "scan",
    "segment_name",
]

SEGMENT_RE: Final = re.compile(r"^seg-(\d{20})\.log$")
STATE_NAME: Final = "state"
"""The state file: last persisted and last used sequence numbers."""
STATE_TMP: Final = "state.tmp"
"""Where a new state file is written before it replaces the old one."""
LOCK_NAME: Final = "lock"
"""The file a store ``flock()``s while it has the directory open."""
SPARE_NAME: Final = "spare.tmp"
"""The next segment file made ahead of need (:mod:`.spare`): no part of the store until a
roll-over renames it; a scan ignores it and an open deletes it."""
_ZERO4: Final = bytes(4)


def segment_name(first_sequence: int) -> str:
    """The file name of the segment whose first sequence number is ``first_sequence``."""
    return f"seg-{first_sequence:020d}.log"


def _all_zero(data: bytes, start: int) -> bool:
    """Whether ``data[start:]`` is empty or all zero bytes."""
    return start >= len(data) or data.count(0, start) == len(data) - start


@dataclass(slots=True)
class SegmentInfo:
    """One segment file as found by a scan."""

    path: Path
    """The segment file."""
    first_sequence: int
    """The sequence number in the file name (the next sequence when it was created)."""
    size: int
    """Bytes of intact data (the file may be longer by a zero tail or a torn tail)."""
    records: int
    """Intact records (stores and discards)."""
    high: int
    """The highest sequence number used before the next segment was started (for the newest
    segment: the highest found so far)."""


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete or damaged last record at the end of the newest segment."""

    path: Path
    offset: int
    """Where the torn record starts (the file is cut or zeroed from here when a store opens
    it)."""
    length: int
    """How many bytes from ``offset`` to the last non-zero byte of the file."""


@dataclass(slots=True)
class StoreInspection:
    """What a read-only scan of a store directory found (see :func:`inspect_store`)."""

    directory: Path
    messages: list[StoredMessage]
    """Unpersisted messages in sequence order."""
    holes: list[int]
    """Sequence numbers inside ``messages``' range dropped by a single discard."""
    last_persisted: int
    next_sequence: int | None
    """The next sequence number the store would assign (``None``: a brand-new store)."""
    segments: list[SegmentInfo]
    torn_tail: TornTail | None
    state: tuple[int, int] | None
    """The state file's ``(last_persisted, last_sequence)``, or ``None`` if there is none."""
    header_torn: bool = False
    """The newest segment holds less than its 8-byte magic, possibly followed by zeros (a
    crash while creating it)."""
    unknown_files: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ScanResult:
    """What :func:`scan` returns: the inspection, and what a store loads from it."""

    inspection: StoreInspection
    live: list[tuple[int, bytes]]
    """The stored records above ``last_persisted``, in order (holes included)."""
    singles: set[int]
    """Sequence numbers dropped by single discards."""


@dataclass(slots=True)
class _Scan:
    """The running state of a scan across segments."""

    last_persisted: int
    high: int
    records: dict[int, bytes] = field(default_factory=dict)
    singles: set[int] = field(default_factory=set)
    previous: int = 0
    torn: TornTail | None = None
    header_torn: bool = False


def read_state(path: Path) -> tuple[int, int] | None:
    """The state file's ``(last_persisted, last_sequence)``; ``None`` if it does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_state(data, str(path))


def _list_directory(directory: Path) -> tuple[list[tuple[int, Path]], list[str]]:
    """The segments (first sequence, path) in order, and the names of unknown files."""
    segment_paths: list[tuple[int, Path]] = []
    unknown: list[str] = []
    for entry in os.scandir(directory):
        m = SEGMENT_RE.match(entry.name)
        if m:
            segment_paths.append((int(m.group(1)), Path(entry.path)))
        elif entry.name not in (STATE_NAME, STATE_TMP, LOCK_NAME, SPARE_NAME):
            unknown.append(entry.name)
    segment_paths.sort()
    return segment_paths, sorted(unknown)


def _header_torn(data: bytes) -> bool:
    """Whether ``data`` is a prefix of the magic followed by zeros (not the whole magic)."""
    head = data[: len(SEGMENT_MAGIC)]
    return (
        head != SEGMENT_MAGIC
        and SEGMENT_MAGIC.startswith(head.rstrip(b"\0"))
        and _all_zero(data, len(SEGMENT_MAGIC))
    )


def _apply(
    run: _Scan, kind: int, sequence: int, payload: bytes | None, first: int, where: str
) -> None:
    """Fold one decoded record into the scan."""
    if kind == KIND_STORE:
        assert payload is not None
        if sequence <= run.previous or sequence < first:
            raise CorruptStoreError(f"{where}: sequence {sequence} out of order")
        if sequence > run.previous + 1 and run.previous:
            # Sequence numbers only jump when discard_up_to() went past the next one:
            # everything below the jump was persisted (even if that "d" record was lost).
            run.last_persisted = max(run.last_persisted, sequence - 1)
        run.records[sequence] = payload
        run.previous = sequence
        run.high = max(run.high, sequence)
    elif kind == KIND_DISCARD_UP_TO:
        run.last_persisted = max(run.last_persisted, sequence)
    else:
        run.singles.add(sequence)


def _read_segments(
    segment_paths: list[tuple[int, Path]],
) -> Iterator[tuple[int, Path, bytes, bool]]:
    """Each segment's bytes, and whether it is the newest (two in memory at most). A
    segment that is gone by the time it is read is left out: an open store deletes the
    segments whose messages are all persisted behind its roll-overs (on its own thread), so
    a read-only scan beside it (:func:`inspect_store`) can list one and then miss it;
    leaving it out is what the store does too."""
    pending: tuple[int, Path, bytes] | None = None
    for first, path in segment_paths:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        if pending is not None:
            yield (*pending, False)
        pending = (first, path, data)
    if pending is not None:
        yield (*pending, True)


def _scan_segment(
    run: _Scan, path: Path, first: int, data: bytes, last_segment: bool
) -> SegmentInfo:
    """Read one segment's records (``data``) into ``run``; returns what was found."""
    size = len(data)
    run.high = max(run.high, first - 1)
    if last_segment and _header_torn(data):
        run.header_torn = True
        return SegmentInfo(path, first, 0, 0, run.high)
    if data[: len(SEGMENT_MAGIC)] != SEGMENT_MAGIC:
        raise CorruptStoreError(f"{path}: not a publish store segment (bad magic)")
    view = memoryview(data)
    offset = len(SEGMENT_MAGIC)
    count = 0
    while offset < size:
        if size - offset < RECORD_PREFIX_SIZE or data[offset : offset + 4] == _ZERO4:
            if _all_zero(data, offset):
                break  # the preallocated zero tail: end of the data
            bad = True
        else:
            length, crc = read_prefix(data, offset)
            end = offset + RECORD_PREFIX_SIZE + length
            body = view[offset + RECORD_PREFIX_SIZE : end]
            bad = end > size or zlib.crc32(body) != crc
        if bad:
            if not last_segment or find_valid_record(data, offset + 1) is not None:
                raise CorruptStoreError(
                    f"{path}: damaged record at offset {offset} followed by intact data"
                    if last_segment
                    else f"{path}: damaged record at offset {offset} in a closed segment"
                )
            run.torn = TornTail(path, offset, len(data.rstrip(b"\0")) - offset)
            break
        where = f"{path} offset {offset}"
        kind, sequence, payload = decode_body(body, where)
        _apply(run, kind, sequence, payload, first, where)
        count += 1
        offset = end
    return SegmentInfo(path, first, offset, count, run.high)


def _live(run: _Scan) -> list[tuple[int, bytes]]:
    """The records above ``last_persisted``, without single discards at either end."""
    live = [(s, p) for s, p in run.records.items() if s > run.last_persisted]
    while live and live[-1][0] in run.singles:
        live.pop()
    start = 0
    while start < len(live) and live[start][0] in run.singles:
        start += 1
    return live[start:]


def scan(directory: Path) -> ScanResult:
    """Read every segment, verify every record and rebuild the store's state (read-only).

    Raises:
        CorruptStoreError: a damaged record that is not a torn tail, a bad file name or
            magic, or a garbage state file.
    """
    segment_paths, unknown = _list_directory(directory)
    state = read_state(directory / STATE_NAME)
    run = _Scan(last_persisted=state[0] if state else 0, high=state[1] if state else 0)
    segments = [
        _scan_segment(run, path, first, data, last)
        for first, path, data, last in _read_segments(segment_paths)
    ]
    for older, newer in itertools.pairwise(segments):
        older.high = newer.first_sequence - 1  # exactly next - 1 when the store rolled over
    high = max(run.high, run.last_persisted)
    live = _live(run)
    inspection = StoreInspection(
        directory=directory,
        messages=[StoredMessage(s, p) for s, p in live if s not in run.singles],
        holes=[s for s, _ in live if s in run.singles],
        last_persisted=run.last_persisted,
        next_sequence=high + 1 if (segments or state) else None,
        segments=segments,
        torn_tail=run.torn,
        state=state,
        header_torn=run.header_torn,
        unknown_files=unknown,
    )
    return ScanResult(inspection, live, run.singles)


def inspect_store(path: str | os.PathLike[str]) -> StoreInspection:
    """Scan a :class:`~ampsclient.stores.publish.FilePublishStore` directory without
    changing anything.

    Safe to run while a store has the directory open (a record being written may then show
    up as a torn tail).

    Args:
        path: the store directory.

    Returns:
        What the store would load.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CorruptStoreError: the store could not be opened either.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory")
    return scan(directory).inspection
