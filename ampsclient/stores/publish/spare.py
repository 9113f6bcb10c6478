"""The file publish store's spare segment, and the work done behind a roll-over: the next
segment file is made ahead of need on the store's own thread, so that a roll on the
publisher's thread is a rename and a swap of mappings; the full segment's mapping and the
segments whose messages are all persisted are released on that thread too.

Making a segment costs a file creation, a preallocation, an ``fdatasync`` and a directory
fsync; storing into a fresh mapping then costs a page fault per 4 KiB page (about 2 µs on
ext4, where the first write to a preallocated block also marks it written: 50-70 ns per
small message). The spare needs no fsync (see :func:`make_spare`), and its pages are
faulted in for writing ahead (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+, without the
GIL): a store into it takes no fault. The pages are only dirtied in memory, not written: a
segment is written to disk once, by the syncs that write its records.

The spare lives at ``<dir>/spare.tmp`` (:data:`~.scan.SPARE_NAME`), which a scan ignores and
an open deletes: until :meth:`.segments.SegmentLog.roll` renames it to ``seg-<next>.log`` it
is no part of the store. One is kept at a time; a roll that finds none ready makes its
segment itself, as before. The first error (a full disk, typically) stops the spares for
the store's life, logged once: the roll's own path then reports what it meets.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, cast

from .record import SEGMENT_MAGIC
from .scan import SPARE_NAME

__all__ = [
    "Spare",
    "SpareMaker",
    "fsync_dir",
    "make_spare",
    "populate",
    "preallocate",
    "unmap",
]

logger = logging.getLogger("ampsclient.stores.publish")


def preallocate(fd: int, size: int) -> None:
    """Make the file at least ``size`` bytes long, with its blocks allocated if possible.

    ``posix_fallocate`` reserves the disk blocks, so storing into the mapping cannot hit
    ``ENOSPC`` (which a memory-mapped write would turn into ``SIGBUS``); where it is missing
    or unsupported the file is extended sparsely with ``ftruncate``.
    """
    if os.fstat(fd).st_size >= size:
        return
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, 0, size)
            return
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
    os.ftruncate(fd, size)


def fsync_dir(directory: Path) -> None:
    """fsync a directory (its entries: created, renamed, deleted files)."""
    if sys.platform == "win32":  # pragma: no cover - directories cannot be fsynced there
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(slots=True)
class Spare:
    """A ready segment file: the magic, zeros up to its size, mapped."""

    path: Path
    fd: int
    mm: mmap.mmap

    def discard(self) -> None:
        """Unmap, close and delete it (best effort)."""
        self.mm.close()
        os.close(self.fd)
        try:
            self.path.unlink()
        except OSError:
            pass


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` through ctypes (which releases the GIL during the call), or
    ``None`` off Linux (CPython's ``mmap.madvise`` keeps the GIL for the whole call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # pragma: no cover - a libc without madvise
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return cast("Callable[[int, int, int], int]", function)


_MADVISE: Final = _libc_madvise()
_MADV_DONTNEED: Final = 4
"""Drop the range's page table entries (of a shared file mapping: the pages stay cached)."""
_MADV_POPULATE_WRITE: Final = 23
"""Linux 5.14+: fault the range in as if written (``EINVAL`` on older kernels)."""
_POPULATE_CHUNK: Final = 32 * 1024 * 1024
"""Bytes populated per call (the maker checks for a stop between calls; each call takes
the GIL back once, which makes the publisher give it up: few, large calls)."""


def populate(mm: mmap.mmap, stopped: threading.Event | None = None) -> bool:
    """Fault every page of the shared mapping ``mm`` in for writing
    (``madvise(MADV_POPULATE_WRITE)``), so that stores into it take no page fault; without
    the GIL. ``False`` where that is not supported or refused (nothing is lost: stores then
    fault the pages in themselves), or when ``stopped`` is set meanwhile (the maker then
    discards the spare).
    """
    if _MADVISE is None:
        return False
    address = ctypes.addressof(ctypes.c_char.from_buffer(mm))  # (the export ends here)
    size = len(mm)
    for offset in range(0, size, _POPULATE_CHUNK):
        if stopped is not None and stopped.is_set():
            return False  # stopped: the maker discards the spare
        if _MADVISE(address + offset, min(_POPULATE_CHUNK, size - offset), _MADV_POPULATE_WRITE):
            return False
    return True


def make_spare(directory: Path, size: int, *, stopped: threading.Event | None = None) -> Spare:
    """Make ``<directory>/spare.tmp``: the segment magic, preallocated to ``size`` bytes (a
    full disk fails here), mapped, its pages faulted in for writing (:func:`populate`).

    Nothing is fsynced: until a roll renames it the spare is no part of the store (a crash
    leaves a file the next open deletes); after the rename, the sync that covers the first
    records written into it also syncs the file and the directory entry.

    Raises:
        OSError: the file could not be made (nothing is left behind).
    """
    path = directory / SPARE_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, SEGMENT_MAGIC)
        preallocate(fd, size)
        mm = mmap.mmap(fd, size)
        try:
            populate(mm, stopped)
        except BaseException:
            mm.close()
            raise
    except BaseException:
        os.close(fd)
        try:
            path.unlink()
        except OSError:
            pass
        raise
    return Spare(path, fd, mm)


def unmap(mm: mmap.mmap) -> None:
    """Close a mapping, its page table entries dropped first without the GIL
    (``madvise(MADV_DONTNEED)``: the pages stay in the page cache, dirty ones too), which
    leaves ``mmap.close()`` (which keeps the GIL) next to nothing to do: about 1 ms for a
    20 MB segment otherwise."""
    if _MADVISE is not None and not mm.closed:
        _MADVISE(ctypes.addressof(ctypes.c_char.from_buffer(mm)), len(mm), _MADV_DONTNEED)
    mm.close()


class SpareMaker:
    """A thread that keeps one :class:`Spare` ready for a :class:`~.segments.SegmentLog`,
    and releases what the log is done with behind it: the full segments' mappings
    (:meth:`release`), the segments whose messages are all persisted (:meth:`submit`).

    Started by the log when its active segment is half full or at its first roll; stopped
    by :meth:`stop` (the store's ``close()``), which deletes an unused spare. :meth:`take`
    and :meth:`release` never block on the thread's I/O.

    Args:
        directory: the store directory.
        size: the spare's size (the log's ``segment_size``).
        name: the thread's name.
    """

    __slots__ = (
        "_cond",
        "_directory",
        "_failed",
        "_jobs",
        "_ready",
        "_running",
        "_size",
        "_stop",
        "_thread",
    )

    def __init__(self, directory: Path, size: int, *, name: str) -> None:
        self._directory = directory
        self._size = size
        self._cond = threading.Condition(threading.Lock())
        self._ready: Spare | None = None
        self._failed: str | None = None
        self._jobs: list[Callable[[], None]] = []
        self._running = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def ready(self) -> bool:
        """Whether a spare is ready now."""
        return self._ready is not None

    @property
    def failed(self) -> str | None:
        """Why no more spares are made (``None`` while they are)."""
        return self._failed

    def take(self, target: Path) -> Spare | None:
        """The ready spare, renamed to ``target``, or ``None`` if none is ready yet, the
        maker failed or was stopped, or the rename failed (logged; that spare is deleted).
        The thread starts the next one at the next :meth:`kick`.
        """
        with self._cond:
            spare, self._ready = self._ready, None
            if spare is None:
                return None
            try:
                if target.exists():  # (names only grow) a rename would replace it
                    raise FileExistsError(f"{target} exists")
                os.rename(spare.path, target)
            except OSError as exc:
                logger.warning(
                    "publish store %s: could not use the spare segment: %s", self._directory, exc
                )
                spare.discard()
                return None
            spare.path = target
        return spare

    def release(self, mm: mmap.mmap) -> None:
        """Unmap ``mm`` (a full segment's mapping nobody uses any more) on the thread."""
        self.submit(partial(unmap, mm))

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the thread after the next :meth:`kick`, before the next spare
        (jobs run in order; one that raises is logged); at once, here, if the thread is
        stopping."""
        with self._cond:
            if not self._stop.is_set():
                self._jobs.append(job)
                return
        self._run_jobs([job])

    def kick(self) -> None:
        """Wake the thread for what :meth:`take` and :meth:`submit` left it: once per roll,
        at its end (a thread woken earlier would take the GIL and the lock back and forth
        with the publisher in the middle of it)."""
        with self._cond:
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every submitted job has run."""
        with self._cond:
            self._cond.notify_all()
            while (self._jobs or self._running) and self._thread.is_alive():
                self._cond.wait()

    def _run_jobs(self, jobs: list[Callable[[], None]]) -> None:
        for job in jobs:
            try:
                job()
            except Exception:
                logger.exception("publish store %s: a background job failed", self._directory)

    def _idle(self) -> bool:
        """Nothing to do (``_cond`` held)."""
        if self._jobs or self._stop.is_set():
            return False
        return self._ready is not None or self._failed is not None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._idle():
                    self._cond.wait()
                stopping = self._stop.is_set()
                wanted = not stopping and self._ready is None and self._failed is None
                jobs: list[Callable[[], None]] = []
                if not wanted:  # the spare first: a roll may be waiting for it
                    jobs, self._jobs = self._jobs, []
                    self._running = bool(jobs)
            if wanted:
                self._make()
                continue
            if jobs:
                self._run_jobs(jobs)
                with self._cond:
                    self._running = False
                    self._cond.notify_all()
            if stopping:
                return

    def _make(self) -> None:
        """Make the next spare (a failure turns the spares off; jobs go on)."""
        try:
            spare = make_spare(self._directory, self._size, stopped=self._stop)
        except Exception as exc:
            self._failed = str(exc)
            logger.info(
                "publish store %s: no spare segment ahead from now on (%s): new segments "
                "are made when needed",
                self._directory,
                exc,
            )
            return
        with self._cond:
            if not self._stop.is_set():
                self._ready = spare
                return
        spare.discard()

    def stop(self) -> None:
        """Stop the thread, wait for it (it runs the jobs queued first) and delete an unused
        spare (idempotent)."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._cond:
            spare, self._ready = self._ready, None
            jobs, self._jobs = self._jobs, []
        self._run_jobs(jobs)
        if spare is not None:
            spare.discard()
