"""The journal's segments in memory: file names, the two segment kinds, the handle cache, the
per-publisher directory and the table that holds them all.

A segment is one journal file. The active one (and one awaiting its seal) is a
:class:`MemSegment` whose columns (record offsets, timestamps, per-publisher sequences) are
``array('Q')`` in memory; a sealed one is a :class:`DiskSegment`, a few numbers in memory and
its columns in a memory-mapped sidecar index opened on demand through :class:`SegmentHandles`
(a bounded number at a time). :class:`SegmentTable` is the state the journal's modules share,
guarded by its :attr:`SegmentTable.lock`.
"""

from __future__ import annotations

import re
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TypeAlias

from .journal_format import (
    FileSource,
    GzipSource,
    IndexHeader,
    IndexView,
    ScanResult,
    Source,
)
from .journal_types import JournalPin

__all__ = [
    "ABSENT",
    "MAX_OPEN",
    "NOT_HERE",
    "DiskSegment",
    "FileNames",
    "MemSegment",
    "PublisherDirectory",
    "Segment",
    "SegmentHandles",
    "SegmentTable",
    "seek_seq",
]

NOT_HERE: Final = -1
"""``find_seq``: look in older segments."""
ABSENT: Final = 0
"""``find_seq``: the bookmark is not in the journal."""
MAX_OPEN: Final = 32
"""Sealed segments with a mapped sidecar / open file at a time."""

_NAME_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+@=-]*")


class FileNames:
    """The names of one instance's journal files (seed 000: "The files for a specific instance
    are prefixed with the instance Name").

    ``<prefix>-<first index, 20 digits>.journal`` (``.journal.gz`` once compressed) and its
    sidecar ``.index``, ``<prefix>.clients`` (last sequence per publisher), ``<prefix>.lock``
    and the preallocated spares ``<prefix>.spare-<n>``. Files with another prefix belong to
    another instance and are left alone.

    Raises:
        ValueError: a prefix that is empty or not a plain file name.
    """

    __slots__ = ("clients", "index_re", "lock", "prefix", "segment_re", "spare_re")

    def __init__(self, prefix: str = "journal") -> None:
        if not _NAME_RE.fullmatch(prefix):
            raise ValueError(
                f"journal file prefix must be a plain file name (letters, digits, _.+@=-), "
                f"not {prefix!r}"
            )
        self.prefix = prefix
        quoted = re.escape(prefix)
        self.segment_re = re.compile(quoted + r"-(\d{20})\.journal(\.gz)?")
        self.index_re = re.compile(quoted + r"-(\d{20})\.index")
        self.spare_re = re.compile(quoted + r"\.spare-(\d+)")
        self.clients = f"{prefix}.clients"
        self.lock = f"{prefix}.lock"

    def segment(self, first_index: int) -> str:
        """The data file of the segment starting at ``first_index``."""
        return f"{self.prefix}-{first_index:020d}.journal"

    def index(self, first_index: int) -> str:
        """The sidecar index of the segment starting at ``first_index``."""
        return f"{self.prefix}-{first_index:020d}.index"

    def spare(self, number: int) -> str:
        """A preallocated file, renamed to the next segment at rotation."""
        return f"{self.prefix}.spare-{number}"

    def owns_leftover(self, name: str) -> bool:
        """Is ``name`` an interrupted write (``.tmp``/``.new``) of one of this prefix's files?"""
        if not name.endswith((".tmp", ".new")):
            return False
        base = name
        while base.endswith((".tmp", ".new")):
            base = base[:-4]
        return bool(
            self.segment_re.fullmatch(base)
            or self.index_re.fullmatch(base)
            or self.spare_re.fullmatch(base)
            or base == self.clients
        )


def seek_seq(seqs: Sequence[int], idxs: Sequence[int], lo: int, hi: int, sequence: int) -> int:
    """Look for ``sequence`` among ``seqs[lo:hi]`` (one publisher's, increasing)."""
    if lo >= hi or seqs[lo] > sequence:
        return NOT_HERE
    if seqs[hi - 1] < sequence:
        return ABSENT
    k = bisect_left(seqs, sequence, lo, hi)
    return int(idxs[k]) if seqs[k] == sequence else ABSENT


class MemSegment:
    """The active segment (or one awaiting its seal): columns held in memory."""

    __slots__ = (
        "first_index",
        "offsets",
        "path",
        "pubs",
        "sealing",
        "size",
        "src",
        "timestamps",
        "wfd",
    )

    def __init__(self, path: Path, first_index: int, scan: ScanResult | None, wfd: int) -> None:
        self.path = path
        self.first_index = first_index
        self.wfd = wfd  # write descriptor (-1 when read-only)
        self.sealing = False
        self.src: FileSource | None = None
        if scan is None:
            scan = ScanResult()
        self.offsets: array[int] = scan.offsets
        self.timestamps: array[int] = scan.timestamps
        self.pubs: dict[int, tuple[array[int], array[int]]] = scan.pubs
        self.size = scan.size  # bytes of records, written or still buffered

    @property
    def count(self) -> int:
        """Records held."""
        return len(self.offsets)

    @property
    def last_index(self) -> int:
        """Index of the last record (``first_index - 1`` when empty)."""
        return self.first_index + len(self.offsets) - 1

    def source(self) -> Source:
        """A reader of the data file."""
        if self.src is None:
            self.src = FileSource(self.path)
        return self.src

    def find_seq(self, publisher_id: int, sequence: int) -> int:
        """The index of ``publisher_id``'s ``sequence`` here, or :data:`NOT_HERE`/:data:`ABSENT`."""
        pub = self.pubs.get(publisher_id)
        if pub is None:
            return NOT_HERE
        seqs, idxs = pub
        return seek_seq(seqs, idxs, 0, len(seqs), sequence)

    def add_run(
        self,
        publisher_id: int,
        offsets: bytes,
        seqs: bytes,
        indexes: bytes,
        ts: int,
        size: int,
    ) -> None:
        """Add a run of one publisher's records, all at ``ts``, to the columns (lock held);
        ``offsets``, ``seqs`` and ``indexes`` are ``array('Q')`` bytes, ``size`` is the
        segment's size after them."""
        n = len(offsets) // 8
        self.offsets.frombytes(offsets)
        self.timestamps.extend(array("Q", (ts,)) * n)
        pub = self.pubs.get(publisher_id)
        if pub is None:
            pub = self.pubs[publisher_id] = (array("Q"), array("Q"))
        pub[0].frombytes(seqs)
        pub[1].frombytes(indexes)
        self.size = size


class DiskSegment:
    """A sealed segment: a few numbers in memory; columns in its memory-mapped sidecar."""

    __slots__ = ("archived", "compressed", "header", "index_path", "path", "src", "view")

    def __init__(
        self,
        path: Path,
        index_path: Path,
        header: IndexHeader,
        compressed: bool,
        *,
        archived: bool = False,
    ) -> None:
        self.path = path
        self.index_path = index_path
        self.header = header
        self.compressed = compressed
        self.archived = archived
        self.view: IndexView | None = None
        self.src: Source | None = None

    @property
    def first_index(self) -> int:
        """Index of the first record."""
        return self.header.first_index

    @property
    def count(self) -> int:
        """Records held."""
        return self.header.count

    @property
    def last_index(self) -> int:
        """Index of the last record."""
        return self.header.first_index + self.header.count - 1

    def drop_handles(self) -> None:
        """Forget the mapped sidecar and the reader (closed when no reader holds them)."""
        self.view = None
        self.src = None


Segment: TypeAlias = MemSegment | DiskSegment


class SegmentHandles:
    """Memory-mapped sidecars and open readers of sealed segments, at most :data:`MAX_OPEN`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[int, DiskSegment] = OrderedDict()

    def view(self, seg: DiskSegment) -> IndexView:
        """The mapped sidecar of ``seg``."""
        with self._lock:
            view = seg.view
            if view is None:
                view = seg.view = IndexView(seg.index_path, seg.header)
            self._touch(seg)
            return view

    def source(self, seg: Segment) -> Source:
        """A reader of ``seg``'s data file (gzip members for a compressed one)."""
        if isinstance(seg, MemSegment):
            return seg.source()
        with self._lock:
            src = seg.src
            if src is None:
                if seg.compressed:
                    view = seg.view
                    if view is None:
                        view = seg.view = IndexView(seg.index_path, seg.header)
                    src = GzipSource(seg.path, view.block_uoffs, view.block_coffs)
                else:
                    src = FileSource(seg.path)
                seg.src = src
            self._touch(seg)
            return src

    def columns(self, seg: Segment) -> tuple[Sequence[int], Sequence[int]]:
        """``(offsets, timestamps)`` of ``seg``'s records."""
        if isinstance(seg, MemSegment):
            return seg.offsets, seg.timestamps
        view = self.view(seg)
        return view.offsets, view.timestamps

    def _touch(self, seg: DiskSegment) -> None:
        key = seg.first_index
        current = self._open.get(key)
        if current is not None and current is not seg:
            current.drop_handles()
        self._open[key] = seg
        self._open.move_to_end(key)
        while len(self._open) > MAX_OPEN:
            _, old = self._open.popitem(last=False)
            old.drop_handles()

    def forget(self, seg: DiskSegment) -> None:
        """Drop ``seg``'s handles (it was removed, compressed or moved)."""
        with self._lock:
            if self._open.get(seg.first_index) is seg:
                del self._open[seg.first_index]
            seg.drop_handles()

    def close(self) -> None:
        """Drop every handle."""
        with self._lock:
            for seg in self._open.values():
                seg.drop_handles()
            self._open.clear()


def last_timestamp(seg: Segment) -> int:
    """The newest record's timestamp (the segment must hold a record)."""
    if isinstance(seg, MemSegment):
        return int(seg.timestamps[-1])
    return seg.header.last_ts


class PublisherDirectory:
    """Per publisher: the first indexes of the sealed segments holding it, and its last
    sequence in each (increasing): bookmark lookups bisect it to pick the one segment to search.
    """

    def __init__(self) -> None:
        self._pubs: dict[int, tuple[list[int], list[int]]] = {}

    def register(self, first_index: int, pids: Sequence[int], last_seqs: Sequence[int]) -> None:
        """Add a sealed segment (kept sorted by first index)."""
        for pid, seq in zip(pids, last_seqs, strict=True):
            entry = self._pubs.get(pid)
            if entry is None:
                entry = self._pubs[pid] = ([], [])
            firsts, seqs = entry
            if not firsts or first_index > firsts[-1]:
                firsts.append(first_index)
                seqs.append(int(seq))
            else:  # only when recovery seals an older segment late
                at = bisect_left(firsts, first_index)
                firsts.insert(at, first_index)
                seqs.insert(at, int(seq))

    def unregister_before(self, first_index: int) -> None:
        """Drop the entries of segments before ``first_index`` (removed)."""
        for pid in list(self._pubs):
            firsts, seqs = self._pubs[pid]
            cut = bisect_left(firsts, first_index)
            if cut == len(firsts):
                del self._pubs[pid]
            elif cut:
                del firsts[:cut], seqs[:cut]

    def candidate(self, publisher_id: int, sequence: int) -> int | None:
        """First index of the one sealed segment that can hold this bookmark, if any."""
        entry = self._pubs.get(publisher_id)
        if entry is None:
            return None
        k = bisect_left(entry[1], sequence)
        return entry[0][k] if k < len(entry[1]) else None


class SegmentTable:
    """What the journal's modules share, guarded by :attr:`lock` (never held across I/O).

    Attributes:
        lock: the journal's main lock.
        segments: every segment in log order (the last one is the active segment).
        firsts: their first indexes (bisected to find a segment).
        pending: rotated segments awaiting their seal.
        pins: the live pins (files holding records at or after a pin are kept).
        stats: the journal's counters.
        pubdir: the per-publisher directory of sealed segments.
        handles: the sealed segments' open handles.
        topics: the topics of each segment started since opening, by its first index (a
            segment recovered from disk is absent: its topics are unknown); a replay passes
            the segments known to hold none of its topic (:meth:`.Journal.next_for_topic`).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.segments: list[Segment] = []
        self.firsts: list[int] = []
        self.pending: list[MemSegment] = []
        self.pins: set[JournalPin] = set()
        self.stats: dict[str, int] = {
            "writes": 0,
            "syncs": 0,
            "fsyncs": 0,
            "rotations": 0,
            "seals": 0,
            "truncated_bytes": 0,
            "pruned_segments": 0,
            "compressed_segments_made": 0,
            "archived_segments_made": 0,
            "fsync_ns": 0,  # time spent in the group commits' fsync calls (admin statistics)
            "fsync_last_ns": 0,
            "read_bytes": 0,  # record bytes read by read_blocks/read_rows/read (replays)
            "skipped_segments": 0,  # segments passed by next_for_topic (none of the topic)
        }
        self.topics: dict[int, set[str]] = {}
        self.pubdir = PublisherDirectory()
        self.handles = SegmentHandles()

    def replace(self, old: Segment, new: Segment) -> bool:
        """Put ``new`` in ``old``'s place (lock held); False if ``old`` is gone."""
        pos = bisect_left(self.firsts, old.first_index)
        if pos < len(self.segments) and self.segments[pos] is old:
            self.segments[pos] = new
            return True
        return False

    def lowest_pin(self) -> int | None:
        """The lowest pinned index (lock held), ``None`` without pins."""
        return min(p.index for p in self.pins) if self.pins else None
