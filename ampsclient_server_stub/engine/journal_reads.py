"""Reading the journal: raw blocks of consecutive records, time lookups, and cursors.

The journal takes a snapshot of its segment list under its lock and hands it here; the reads
themselves (sidecar columns, file bytes) run without the lock, so appends go on meanwhile.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Protocol, Self

from .journal_segments import MemSegment, Segment, SegmentHandles, last_timestamp
from .journal_types import (
    DEFAULT_MAX_BYTES,
    JournalClosedError,
    JournalPin,
    JournalRecord,
    RawBlock,
)

__all__ = ["CursorHost", "JournalCursor", "collect_blocks", "locate_time"]


def collect_blocks(
    handles: SegmentHandles,
    segments: Sequence[Segment],
    active: MemSegment,
    active_size: int,
    start: int,
    last: int,
    max_records: int,
    max_bytes: int,
) -> list[RawBlock]:
    """The raw blocks of records ``start..last`` (at most ``max_records``, about ``max_bytes``)
    from ``segments`` (the segment holding ``start`` and those after it)."""
    blocks: list[RawBlock] = []
    budget = max_bytes
    index = start
    got = 0
    for seg in segments:
        if index > last or got >= max_records or budget <= 0:
            break
        if seg is active:
            total = last - seg.first_index + 1
            data_end = active_size
        else:
            total = seg.count
            data_end = seg.size if isinstance(seg, MemSegment) else seg.header.data_size
        p = index - seg.first_index
        if p >= total:
            continue
        offsets, _ = handles.columns(seg)
        n = min(max_records - got, total - p)
        begin = offsets[p]
        end = offsets[p + n] if p + n < total else data_end
        limit = begin + budget
        if end > limit:
            # records p..p+k-1 fit when the start of record p+k is <= limit
            k = bisect_right(offsets, limit, p + 1, p + n) - p - 1
            n = max(k, 0 if got else 1)
            if n == 0:
                break
            end = offsets[p + n] if p + n < total else data_end
        data = handles.source(seg).read(begin, end)
        blocks.append((data, begin, seg.first_index + p, n, seg.path))
        got += n
        budget -= end - begin
        index += n
        if p + n < total:  # stopped inside this segment: by max_records or max_bytes
            break
    return blocks


def locate_time(
    handles: SegmentHandles, segments: Sequence[Segment], last_index: int, timestamp_us: int
) -> int:
    """Index of the first record of ``segments`` with ``timestamp >= timestamp_us``
    (``last_index + 1`` if none)."""
    # bisect over segments by their newest timestamp (empty active segment: +infinity)
    lo, hi = 0, len(segments)
    while lo < hi:
        mid = (lo + hi) // 2
        seg = segments[mid]
        if seg.count and last_timestamp(seg) < timestamp_us:
            lo = mid + 1
        else:
            hi = mid
    if lo == len(segments) or segments[lo].count == 0:
        return last_index + 1
    seg = segments[lo]
    _, timestamps = handles.columns(seg)
    return seg.first_index + bisect_left(timestamps, timestamp_us, 0, seg.count)


class CursorHost(Protocol):
    """What a :class:`JournalCursor` uses of the journal."""

    def read(
        self, from_index: int, *, max_records: int = ..., max_bytes: int = ...
    ) -> list[JournalRecord]:
        """A batch of records from ``from_index``."""

    def pin(self, index: int) -> JournalPin:
        """Keep the files holding ``index`` and later."""

    def unpin(self, token: object) -> None:
        """Release a pin."""


class JournalCursor:
    """Reads a journal in batches from a position, pinning what it has still to read.

    Iterating yields records up to the end of the log as it is when each batch is read;
    :meth:`read_batch` can be called again later to continue. Close it (or use ``with``) to
    release the pin.
    """

    def __init__(
        self,
        journal: CursorHost,
        from_index: int,
        *,
        max_records: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._journal = journal
        self._max_records = max_records
        self._max_bytes = max_bytes
        self.position = max(from_index, 1)
        """The index of the next record to read."""
        self._pin: JournalPin | None = journal.pin(self.position)

    def read_batch(self) -> list[JournalRecord]:
        """The next batch (empty at the end of the log) and advance past it."""
        if self._pin is None:
            raise JournalClosedError("cursor is closed")
        batch = self._journal.read(
            self.position, max_records=self._max_records, max_bytes=self._max_bytes
        )
        if batch:
            self.position = batch[-1].index + 1
            self._pin.index = self.position
        return batch

    def __iter__(self) -> Iterator[JournalRecord]:
        while True:
            batch = self.read_batch()
            if not batch:
                return
            yield from batch

    def close(self) -> None:
        """Release the pin. Idempotent."""
        if self._pin is not None:
            self._journal.unpin(self._pin)
            self._pin = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
