"""Opening a journal: its state, recovery of its files, new and preallocated segments, and
sealing (:class:`JournalBase`, which :class:`~.journal.Journal` extends with appends, reads and
management). See :mod:`.journal` for the layout and the threading rules.
"""

from __future__ import annotations

import logging
import os
import threading
import time
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

__all__ = ["JournalBase"]

_log = logging.getLogger("ampsclient_server_stub.engine.journal")

_MAX_PENDING_SEALS: Final = 1  # more than this and append() seals inline (bounds memory)


class JournalBase:
    """The journal's state and files; the arguments are :class:`~.journal.Journal`'s."""

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
        self._dir = Path(directory)
        self._names = FileNames(detect_prefix(self._dir) if name is None else name)
        self._archive = None if archive_directory is None else Path(archive_directory)
        if self._archive is not None and self._archive.resolve() == self._dir.resolve():
            raise ValueError(f"the archive directory must not be the journal directory {self._dir}")
        self._journal_size = int(journal_size)
        self._prealloc = preallocated_files
        self._spares: list[Path] = []
        self._policy: FsyncPolicy = fsync
        self._durable_io = fsync != "never"
        self._read_only = read_only
        table = self._table = SegmentTable()
        # aliases of the shared table's objects (never rebound)
        self._lock = table.lock  # in-memory state; never held across blocking I/O
        self._segments: list[Segment] = table.segments
        self._firsts: list[int] = table.firsts
        self._pending: list[MemSegment] = table.pending
        self._pins: set[JournalPin] = table.pins
        self._stats = table.stats
        self._handles = table.handles
        self._sync_lock = threading.Lock()  # one sync at a time (group commit)
        self._seal_lock = threading.Lock()  # one sealer at a time
        self._maint_lock = threading.Lock()  # remove / compress / archive
        self._buf = bytearray()
        self._last_seq: dict[int, int] = {}
        self._sealed_seq: dict[int, int] = {}  # over sealed segments (what <name>.clients holds)
        self._clients_through = 0
        self._last_index = 0
        self._last_ts = 0
        self._durable_index = 0
        self._dir_dirty = False
        self._closed = False
        self._lock_fd = -1
        self._active: MemSegment  # the last of _segments, set by _recover
        self._opened_at_index = 0
        if not read_only:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._take_lock()
        elif not self._dir.is_dir():
            raise FileNotFoundError(f"no journal directory {self._dir}")
        try:
            self._recover()
        except BaseException:
            for seg in self._segments:
                if isinstance(seg, MemSegment) and seg.wfd >= 0:
                    os.close(seg.wfd)
            self._release_lock()
            raise
        if self._dir_dirty and self._durable_io and not read_only:
            fsync_dir(self._dir)
            self._dir_dirty = False
        self._durable_index = self._last_index  # what survived recovery is on disk
        self._opened_at_index = self._last_index

    # ---------------------------------------------------------------- opening / recovery

    def _take_lock(self) -> None:
        path = self._dir / self._names.lock
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                raise JournalInUseError(
                    f"journal {self._dir} is open in another process (lock {path})"
                ) from exc
        self._lock_fd = fd

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, -1
        if fd >= 0:
            os.close(fd)  # releases the flock

    def _recover(self) -> None:
        listing = list_files(self._dir, self._archive, self._names, read_only=self._read_only)
        self._spares = sorted(listing.spares)
        clients = self._read_clients()
        if clients is not None:
            self._clients_through, self._sealed_seq = clients[0], dict(clients[1])
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
                self._dir / self._names.index(first),
                is_last=pos == len(firsts) - 1,
                read_only=self._read_only,
                durable=self._durable_io,
            )
            self._stats["truncated_bytes"] += torn
            self._segments.append(seg)
            self._firsts.append(first)
            expected = first + seg.count
        self._open_active(expected)
        # every sealed-but-unsealed (no sidecar) segment except the active one gets its seal now
        self._pending[:] = [s for s in self._segments[:-1] if isinstance(s, MemSegment)]
        for seg in self._pending:
            seg.sealing = True
        self._recover_publishers(clients is not None)
        active = self._active
        self._last_index = active.first_index + active.count - 1
        for seg in reversed(self._segments):
            if seg.count:
                self._last_ts = last_timestamp(seg)
                break
        if not self._read_only:
            if self._pending:
                self._complete_seals()
            self._top_up_spares()
        _log.info(
            "journal: opened %s (%s): records %d..%d in %d segment(s)",
            self._dir,
            self._names.prefix,
            self._segments[0].first_index,
            self._last_index,
            len(self._segments),
        )

    def _open_active(self, expected: int | None) -> None:
        """Make the newest segment the active one (or start a new one after a sealed one)."""
        if not self._segments or isinstance(self._segments[-1], DiskSegment):
            start = expected if expected is not None else self._clients_through + 1
            self._new_active(start)
            return
        last = self._segments[-1]
        assert isinstance(last, MemSegment)
        self._active = last
        if not self._read_only:
            last.wfd = self._open_write(last.path)
            if self._durable_io and last.count:
                # what a killed process left in the page cache becomes durable_index
                os.fsync(last.wfd)
                self._dir_dirty = True

    def _recover_publishers(self, have_clients: bool) -> None:
        """The per-publisher tables: ``<name>.clients`` + the sealed segments it does not
        cover + the segments not sealed yet."""
        stale = False
        for seg in self._segments:
            if not isinstance(seg, DiskSegment):
                continue
            view = self._handles.view(seg)
            self._table.pubdir.register(seg.first_index, view.pub_pids, view.pub_seqs)
            if seg.last_index > self._clients_through:
                for pid, seq in zip(view.pub_pids, view.pub_seqs, strict=True):
                    if seq > self._sealed_seq.get(pid, 0):
                        self._sealed_seq[pid] = seq
                self._clients_through = seg.last_index
                stale = True
        if not have_clients and self._segments and self._segments[0].first_index > 1:
            _log.warning(
                "journal: %s missing or damaged and records before %d were removed: the last "
                "sequence of publishers seen only in removed files is unknown",
                self._dir / self._names.clients,
                self._segments[0].first_index,
            )
        self._last_seq = dict(self._sealed_seq)
        for seg in self._segments:
            if isinstance(seg, MemSegment):
                for pid, (seqs, _) in seg.pubs.items():
                    if seqs[-1] > self._last_seq.get(pid, 0):
                        self._last_seq[pid] = seqs[-1]
        if stale and not self._read_only:
            self._write_clients()

    def _read_clients(self) -> tuple[int, dict[int, int]] | None:
        path = self._dir / self._names.clients
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
        path = self._dir / self._names.segment(first_index)
        wfd = -1
        if not self._read_only:
            if self._spares:  # a preallocated file becomes the segment
                os.rename(self._spares.pop(0), path)
            wfd = self._open_write(path)
        seg = MemSegment(path, first_index, None, wfd)
        self._active = seg
        self._segments.append(seg)
        self._firsts.append(first_index)
        self._dir_dirty = True
        return seg

    def _top_up_spares(self) -> None:
        """Create the missing preallocated files (never under the main lock)."""
        wanted = max(self._prealloc - 1, 0)
        with self._lock:
            missing = wanted - len(self._spares)
            taken = {p.name for p in self._spares}
        if missing <= 0:
            return
        made: list[Path] = []
        number = 1
        while len(made) < missing:
            path = self._dir / self._names.spare(number)
            number += 1
            if path.name in taken or path.exists():
                continue
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            made.append(path)
        with self._lock:
            self._spares.extend(made)
            self._dir_dirty = True

    # ---------------------------------------------------------------- sealing

    def _complete_seals(self) -> None:
        """Seal every pending segment (sidecar, clients table); never holds the main lock long."""
        with self._seal_lock:
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    seg = self._pending[0]
                self._seal(seg)

    def _seal(self, seg: MemSegment) -> None:
        durable = self._durable_io
        if seg.wfd >= 0:
            if durable:
                os.fsync(seg.wfd)
                with self._lock:
                    self._stats["fsyncs"] += 1
            os.close(seg.wfd)
            seg.wfd = -1
        index_path = self._dir / self._names.index(seg.first_index)
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
            if seqs[-1] > self._sealed_seq.get(pid, 0):
                self._sealed_seq[pid] = seqs[-1]
        self._clients_through = max(self._clients_through, seg.last_index)
        self._write_clients()
        if durable:
            fsync_dir(self._dir)
        archived = seg.path.parent != self._dir
        disk = DiskSegment(seg.path, index_path, header, False, archived=archived)
        pids = sorted(seg.pubs)
        last_seqs = [seg.pubs[pid][0][-1] for pid in pids]
        with self._lock:
            self._table.replace(seg, disk)
            self._pending.remove(seg)
            self._table.pubdir.register(seg.first_index, pids, last_seqs)
            self._stats["seals"] += 1
        _log.debug("journal: sealed %s (%d records)", seg.path, header.count)

    def _write_clients(self) -> None:
        write_atomic(
            self._dir / self._names.clients,
            encode_clients(self._clients_through, self._sealed_seq),
            durable=self._durable_io,
        )

    # ---------------------------------------------------------------- checks

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError("journal is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._read_only:
            raise JournalClosedError("journal is open read-only")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # ---------------------------------------------------------------- writing

    def _check_appendable(self) -> None:
        if self._closed or self._read_only:
            raise JournalClosedError(
                "journal is closed" if self._closed else "journal is open read-only"
            )

    def _write_out(self) -> None:
        """Write the append buffer to the active segment file (lock held)."""
        buf = self._buf
        if not buf:
            return
        seg = self._active
        written = 0
        view = memoryview(buf)
        try:
            while written < len(view):
                written += os.write(seg.wfd, view[written:])
        finally:
            view.release()
            del buf[:written]
        self._stats["writes"] += 1

    def _rotate(self) -> bool:
        """Seal the active segment (lock held): the heavy work is left to the next sync.

        Returns True when more segments await their seal than :data:`_MAX_PENDING_SEALS`.
        """
        self._write_out()
        old = self._active
        old.sealing = True
        self._pending.append(old)
        self._new_active(self._last_index + 1)
        self._stats["rotations"] += 1
        return len(self._pending) > _MAX_PENDING_SEALS

    def _fsync(self, fd: int) -> None:
        began = time.perf_counter_ns()
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        took = time.perf_counter_ns() - began
        with self._lock:
            self._stats["fsyncs"] += 1
            self._stats["fsync_ns"] += took
            self._stats["fsync_last_ns"] = took
