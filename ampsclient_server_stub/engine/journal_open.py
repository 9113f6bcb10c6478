"""A journal's files and their state: opening and recovery, new and preallocated segments,
sealing, and writing the append buffer out (:class:`JournalFiles`, which :class:`~.journal.Journal`
holds and drives with appends, reads and management). See :mod:`.journal` for the layout and the
threading rules.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from bisect import bisect_right
from pathlib import Path
from typing import Final

from .journal_format import (
    CorruptJournalError,
    decode_clients,
    encode_clients,
    encode_index,
    fsync_dir,
    read_index,
    write_atomic,
)
from .journal_recovery import detect_prefix, list_files, load_segment
from .journal_segments import (
    DiskSegment,
    FileNames,
    MemSegment,
    Segment,
    SegmentTable,
    last_timestamp,
)
from .journal_types import (
    DEFAULT_JOURNAL_SIZE,
    FsyncPolicy,
    JournalClosedError,
    JournalInUseError,
    JournalPin,
)

try:  # POSIX advisory lock: one process owns a journal directory
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["JournalFiles"]

_log = logging.getLogger("ampsclient_server_stub.engine.journal")

_MAX_PENDING_SEALS: Final = 1  # more than this and append() seals inline (bounds memory)


class JournalFiles:
    """The state and files of one open journal; the arguments are :class:`~.journal.Journal`'s.

    Its attributes are the journal's state, read and written by the :class:`~.journal.Journal`
    that owns it under the rules of :mod:`.journal` (``lock`` guards the in-memory state).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        journal_size: int = DEFAULT_JOURNAL_SIZE,
        fsync: FsyncPolicy = "always",
        preallocated_files: int = 0,
        name: str | None = None,
        archive_directory: str | os.PathLike[str] | None = None,
        read_only: bool = False,
    ) -> None:
        if fsync not in ("always", "interval", "never"):
            raise ValueError(f"fsync must be 'always', 'interval' or 'never', not {fsync!r}")
        if journal_size <= 0:
            raise ValueError(f"journal_size must be positive, not {journal_size!r}")
        if preallocated_files < 0:
            raise ValueError(f"preallocated_files must be >= 0, not {preallocated_files!r}")
        self.directory = Path(directory)
        self.names = FileNames(detect_prefix(self.directory) if name is None else name)
        self.archive_directory = None if archive_directory is None else Path(archive_directory)
        if (
            self.archive_directory is not None
            and self.archive_directory.resolve() == self.directory.resolve()
        ):
            raise ValueError(
                f"the archive directory must not be the journal directory {self.directory}"
            )
        self.journal_size = int(journal_size)
        self.prealloc = preallocated_files
        self.spares: list[Path] = []
        self.fsync_policy: FsyncPolicy = fsync
        self.durable_io = fsync != "never"
        self.read_only = read_only
        table = self.table = SegmentTable()
        # aliases of the shared table's objects (never rebound)
        self.lock = table.lock  # in-memory state; never held across blocking I/O
        self.segments: list[Segment] = table.segments
        self.firsts: list[int] = table.firsts
        self.pending: list[MemSegment] = table.pending
        self.pins: set[JournalPin] = table.pins
        self.stats = table.stats
        self.handles = table.handles
        self.sync_lock = threading.Lock()  # one sync at a time (group commit)
        self.seal_lock = threading.Lock()  # one sealer at a time
        self.maint_lock = threading.Lock()  # remove / compress / archive
        self.buf = bytearray()
        self.last_seq: dict[int, int] = {}
        self.sealed_seq: dict[int, int] = {}  # over sealed segments (what <name>.clients holds)
        self.clients_through = 0
        self.last_index = 0
        self.last_ts = 0
        self.durable_index = 0
        self.dir_dirty = False
        self.closed = False
        self.lock_fd = -1
        self.active: MemSegment  # the last of segments, set by _recover
        self.opened_at_index = 0
        if not read_only:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._take_lock()
        elif not self.directory.is_dir():
            raise FileNotFoundError(f"no journal directory {self.directory}")
        try:
            self._recover()
        except BaseException:
            for seg in self.segments:
                if isinstance(seg, MemSegment) and seg.wfd >= 0:
                    os.close(seg.wfd)
            self.release_lock()
            raise
        if self.dir_dirty and self.durable_io and not read_only:
            fsync_dir(self.directory)
            self.dir_dirty = False
        self.durable_index = self.last_index  # what survived recovery is on disk
        self.opened_at_index = self.last_index

    # ---------------------------------------------------------------- opening / recovery

    def _take_lock(self) -> None:
        path = self.directory / self.names.lock
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                raise JournalInUseError(
                    f"journal {self.directory} is open in another process (lock {path})"
                ) from exc
        self.lock_fd = fd

    def release_lock(self) -> None:
        fd, self.lock_fd = self.lock_fd, -1
        if fd >= 0:
            os.close(fd)  # releases the flock

    def _recover(self) -> None:
        listing = list_files(
            self.directory, self.archive_directory, self.names, read_only=self.read_only
        )
        self.spares = sorted(listing.spares)
        clients = self._read_clients()
        if clients is not None:
            self.clients_through, self.sealed_seq = clients[0], dict(clients[1])
        expected: int | None = None
        firsts = sorted(listing.files)
        for pos, first in enumerate(firsts):
            found = listing.files[first]
            if expected is not None and first != expected:
                raise CorruptJournalError(
                    found.path, -1, f"gap in the journal: expected a segment starting at {expected}"
                )
            seg, torn = load_segment(
                found,
                first,
                self.directory / self.names.index(first),
                is_last=pos == len(firsts) - 1,
                read_only=self.read_only,
                durable=self.durable_io,
            )
            self.stats["truncated_bytes"] += torn
            self.segments.append(seg)
            self.firsts.append(first)
            expected = first + seg.count
        self._open_active(expected)
        # every sealed-but-unsealed (no sidecar) segment except the active one gets its seal now
        self.pending[:] = [s for s in self.segments[:-1] if isinstance(s, MemSegment)]
        for seg in self.pending:
            seg.sealing = True
        self._recover_publishers(clients is not None)
        active = self.active
        self.last_index = active.first_index + active.count - 1
        for seg in reversed(self.segments):
            if seg.count:
                self.last_ts = last_timestamp(seg)
                break
        if not self.read_only:
            if self.pending:
                self.complete_seals()
            self.top_up_spares()
        _log.info(
            "journal: opened %s (%s): records %d..%d in %d segment(s)",
            self.directory,
            self.names.prefix,
            self.segments[0].first_index,
            self.last_index,
            len(self.segments),
        )

    def _open_active(self, expected: int | None) -> None:
        """Make the newest segment the active one (or start a new one after a sealed one)."""
        if not self.segments or isinstance(self.segments[-1], DiskSegment):
            start = expected if expected is not None else self.clients_through + 1
            self._new_active(start)
            return
        last = self.segments[-1]
        assert isinstance(last, MemSegment)
        self.active = last
        if not self.read_only:
            last.wfd = self._open_write(last.path)
            if self.durable_io and last.count:
                # what a killed process left in the page cache becomes durable_index
                os.fsync(last.wfd)
                self.dir_dirty = True

    def _recover_publishers(self, have_clients: bool) -> None:
        """The per-publisher tables: ``<name>.clients`` + the sealed segments it does not
        cover + the segments not sealed yet."""
        stale = False
        for seg in self.segments:
            if not isinstance(seg, DiskSegment):
                continue
            view = self.handles.view(seg)
            self.table.pubdir.register(seg.first_index, view.pub_pids, view.pub_seqs)
            if seg.last_index > self.clients_through:
                for pid, seq in zip(view.pub_pids, view.pub_seqs, strict=True):
                    if seq > self.sealed_seq.get(pid, 0):
                        self.sealed_seq[pid] = seq
                self.clients_through = seg.last_index
                stale = True
        if not have_clients and self.segments and self.segments[0].first_index > 1:
            _log.warning(
                "journal: %s missing or damaged and records before %d were removed: the last "
                "sequence of publishers seen only in removed files is unknown",
                self.directory / self.names.clients,
                self.segments[0].first_index,
            )
        self.last_seq = dict(self.sealed_seq)
        for seg in self.segments:
            if isinstance(seg, MemSegment):
                for pid, (seqs, _) in seg.pubs.items():
                    if seqs[-1] > self.last_seq.get(pid, 0):
                        self.last_seq[pid] = seqs[-1]
        if stale and not self.read_only:
            self._write_clients()

    def _read_clients(self) -> tuple[int, dict[int, int]] | None:
        path = self.directory / self.names.clients
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        parsed = decode_clients(raw)
        if parsed is None:
            _log.warning("journal: %s is damaged; rebuilding it from the sidecars", path)
        return parsed

    def _open_write(self, path: Path) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        return os.open(path, flags, 0o644)

    def _new_active(self, first_index: int) -> MemSegment:
        path = self.directory / self.names.segment(first_index)
        wfd = -1
        if not self.read_only:
            if self.spares:  # a preallocated file becomes the segment
                os.rename(self.spares.pop(0), path)
            wfd = self._open_write(path)
        seg = MemSegment(path, first_index, None, wfd)
        self.table.topics[first_index] = set()  # empty: every topic appended is known
        self.active = seg
        self.segments.append(seg)
        self.firsts.append(first_index)
        self.dir_dirty = True
        return seg

    def top_up_spares(self) -> None:
        """Create the missing preallocated files (never under the main lock)."""
        wanted = max(self.prealloc - 1, 0)
        with self.lock:
            missing = wanted - len(self.spares)
            taken = {p.name for p in self.spares}
        if missing <= 0:
            return
        made: list[Path] = []
        number = 1
        while len(made) < missing:
            path = self.directory / self.names.spare(number)
            number += 1
            if path.name in taken or path.exists():
                continue
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            made.append(path)
        with self.lock:
            self.spares.extend(made)
            self.dir_dirty = True

    # ---------------------------------------------------------------- sealing

    def complete_seals(self) -> None:
        """Seal every pending segment (sidecar, clients table); never holds the main lock long."""
        with self.seal_lock:
            while True:
                with self.lock:
                    if not self.pending:
                        return
                    seg = self.pending[0]
                self._seal(seg)

    def _seal(self, seg: MemSegment) -> None:
        durable = self.durable_io
        if seg.wfd >= 0:
            if durable:
                os.fsync(seg.wfd)
                with self.lock:
                    self.stats["fsyncs"] += 1
            os.close(seg.wfd)
            seg.wfd = -1
        index_path = self.directory / self.names.index(seg.first_index)
        data = encode_index(
            first_index=seg.first_index,
            data_size=seg.size,
            offsets=seg.offsets,
            timestamps=seg.timestamps,
            pubs=seg.pubs,
        )
        write_atomic(index_path, data, durable=durable)
        header = read_index(index_path)
        if header is None:  # pragma: no cover - we just wrote it
            raise CorruptJournalError(index_path, -1, "sidecar unreadable right after writing")
        for pid, (seqs, _) in seg.pubs.items():
            if seqs[-1] > self.sealed_seq.get(pid, 0):
                self.sealed_seq[pid] = seqs[-1]
        self.clients_through = max(self.clients_through, seg.last_index)
        self._write_clients()
        if durable:
            fsync_dir(self.directory)
        archived = seg.path.parent != self.directory
        disk = DiskSegment(seg.path, index_path, header, False, archived=archived)
        pids = sorted(seg.pubs)
        last_seqs = [seg.pubs[pid][0][-1] for pid in pids]
        with self.lock:
            self.table.replace(seg, disk)
            self.pending.remove(seg)
            self.table.pubdir.register(seg.first_index, pids, last_seqs)
            self.stats["seals"] += 1
        _log.debug("journal: sealed %s (%d records)", seg.path, header.count)

    def _write_clients(self) -> None:
        write_atomic(
            self.directory / self.names.clients,
            encode_clients(self.clients_through, self.sealed_seq),
            durable=self.durable_io,
        )

    # ---------------------------------------------------------------- checks

    def check_open(self) -> None:
        if self.closed:
            raise JournalClosedError("journal is closed")

    def check_writable(self) -> None:
        self.check_open()
        if self.read_only:
            raise JournalClosedError("journal is open read-only")

    # ---------------------------------------------------------------- writing

    def check_appendable(self) -> None:
        if self.closed or self.read_only:
            raise JournalClosedError(
                "journal is closed" if self.closed else "journal is open read-only"
            )

    def write_out(self) -> None:
        """Write the append buffer to the active segment file (lock held)."""
        buf = self.buf
        if not buf:
            return
        seg = self.active
        written = 0
        view = memoryview(buf)
        try:
            while written < len(view):
                written += os.write(seg.wfd, view[written:])
        finally:
            view.release()
            del buf[:written]
        self.stats["writes"] += 1

    def written_through(self) -> tuple[int, int]:
        """``(last index, active segment bytes)`` of the records the files hold (lock held):
        after :meth:`write_out` failed, the records still buffered (all in the active
        segment: a rotation waits for the buffer to be written) are not readable yet."""
        seg = self.active
        on_file = seg.size - len(self.buf)
        if not self.buf:
            return self.last_index, seg.size
        offsets = seg.offsets
        whole = bisect_right(offsets, on_file) - 1  # records ending at or before on_file
        return seg.first_index + whole - 1, offsets[whole] if whole < len(offsets) else on_file

    def rotate(self) -> bool:
        """Seal the active segment (lock held): the heavy work is left to the next sync.

        Returns True when more segments await their seal than :data:`_MAX_PENDING_SEALS`.
        When the buffer cannot be written (a full disk), nothing changes: the active segment
        grows past its size, the records appended stay buffered, and the next append or
        sync tries again (a rotation never makes an append that already happened fail).
        """
        try:
            self.write_out()
        except OSError:
            return False
        old = self.active
        old.sealing = True
        self.pending.append(old)
        self._new_active(self.last_index + 1)
        self.stats["rotations"] += 1
        return len(self.pending) > _MAX_PENDING_SEALS

    def fsync(self, fd: int) -> None:
        began = time.perf_counter_ns()
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        took = time.perf_counter_ns() - began
        with self.lock:
            self.stats["fsyncs"] += 1
            self.stats["fsync_ns"] += took
            self.stats["fsync_last_ns"] = took
