"""Output flow control: resource pools, slow-client offlining to disk, age and capacity limits.

Follows AMPS' model (seed: *Slow Client Management and Capacity Limits*):

* A **resource pool** has a ``MessageMemoryLimit`` (bytes queued in memory towards clients) and
  a ``MessageDiskLimit`` (bytes of offline files). One pool serves the whole instance; a
  transport that sets either limit gets a pool of its own.
* When a client's queued bytes pass ``ClientMaxCapacity`` of the memory limit, or the pool's
  total passes the memory limit (the biggest user is chosen), the client is **offlined**: from
  then on its deliveries are appended to a file under ``MessageDiskPath`` (one file per
  connection) and fed back to the socket only as fast as the client reads, so its backlog no
  longer takes the server's memory. Once the file is drained the client is online again.
* A client is **disconnected** (its offline file removed) when its file passes
  ``ClientMaxCapacity`` of the disk limit, when the pool's disk total passes the disk limit
  (the biggest user is chosen), or when the oldest message waiting for it is older than
  ``ClientMessageAgeLimit``.

The message age of an online client is the time since its queue was last (nearly) empty; for an
offlined client it is the enqueue time stored with the oldest unsent record.

Offline file records: ``>I`` payload length, ``>d`` enqueue time, payload.

Ages are measured on the monotonic clock (``time.monotonic``: an offline file lives only as
long as its connection, within one process), so a step of the wall clock neither ages every
waiting message at once (a jump forward would disconnect every slow client for
``ClientMessageAgeLimit``) nor rejuvenates them.

Offline files hold other clients' messages, so they are private: each pool makes its own
directory under ``MessageDiskPath`` at first use (``ampsclient-offline-<pid>-<random>``, made
by :func:`tempfile.mkdtemp`, mode 0700), and creates every file in it with
``O_CREAT|O_EXCL|O_NOFOLLOW`` and mode 0600: a file or symbolic link planted in advance is
never opened or followed. The clean-up removes only such directories (of server processes that
are gone) and only the ``*.offline`` regular files inside them; other programs' files under
``MessageDiskPath`` are never touched.

The configuration (which pool a transport uses, its limits) comes from the security policy
(:class:`~ampsclient_server_stub.security.policy.PoolLimits`,
:class:`~ampsclient_server_stub.security.policy.ClientLimits`); this module holds the running
state: :class:`FlowControl` makes one :class:`ResourcePool` per configured pool, and a
:class:`SlowClient` per connection works on the session only through its public
:class:`OutputQueue` interface.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import stat
import struct
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final, Protocol

from ampsclient_server_stub.security.policy import ClientLimits, PoolLimits

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "DRAIN_HIGH_WATER",
    "LOW_WATER",
    "FlowControl",
    "OutputQueue",
    "ResourcePool",
    "SlowClient",
    "create_private_file",
    "remove_stale_files",
]

logger = logging.getLogger(__name__)

_now = time.monotonic
"""The clock of message ages (see the module docstring)."""

_REC: Final = struct.Struct(">Id")
LOW_WATER: Final = 64 * 1024
"""Queued bytes under which a client counts as caught up."""
DRAIN_HIGH_WATER: Final = 1024 * 1024
"""An offlined client's socket buffer is refilled from disk up to this many bytes."""
DRAIN_INTERVAL: Final = 0.005
SWEEP_INTERVAL: Final = 0.1
_READ_CHUNK: Final = 256 * 1024
_SAFE_NAME: Final = re.compile(r"[^A-Za-z0-9_.-]+")
_file_ids = itertools.count(1)


class OutputQueue(Protocol):
    """The output side of a connection, as flow control sees it (``NetSession`` fits)."""

    loop: asyncio.AbstractEventLoop
    peer: str
    """The client's address, for log messages."""
    transport_name: str

    @property
    def closing(self) -> bool:
        """True once the connection is closing or closed."""

    def client_identity(self) -> tuple[str, int]:
        """``(client name, connection id)``: names the offline file."""

    def pending_bytes(self) -> int:
        """Bytes queued for the next write and not yet handed to the transport."""

    def buffered_bytes(self) -> int:
        """Bytes handed to the transport and not yet taken by the OS."""

    def held_bytes(self) -> int:
        """Bytes held for the client's conflated subscriptions (part of its memory)."""

    def take_pending(self) -> list[bytes]:
        """Remove and return the queued payloads not yet handed to the transport."""

    def write_now(self, payloads: list[bytes]) -> None:
        """Hand ``payloads`` to the transport at once, in order."""

    def abort(self, reason: str) -> None:
        """Drop the connection without writing what is queued."""


PRIVATE_PREFIX: Final = "ampsclient-offline-"
"""Start of the name of a pool's private directory under ``MessageDiskPath``."""

_PRIVATE_DIR: Final = re.compile(re.escape(PRIVATE_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")


def _remove_private_dir(directory: Path) -> int:
    """Remove the ``*.offline`` regular files of one private directory, then the directory
    (left in place if anything else is in it). Returns the number of files removed."""
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if entry.name.endswith(".offline") and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed += 1
    with contextlib.suppress(OSError):
        os.rmdir(directory)
    return removed


def remove_stale_files(directory: Path) -> int:
    """Remove the private offline directories (and their files) that server processes which
    are gone (killed, crashed) left under ``directory``. Returns the number of files removed.

    Only directories named ``ampsclient-offline-<pid>-...`` that are real directories (not
    symbolic links), owned by this user, of a process that no longer runs are touched;
    nothing else under ``directory`` is.
    """
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        match = _PRIVATE_DIR.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        pid = int(match[1])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # that server is still running
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        removed += _remove_private_dir(Path(entry.path))
    if removed:
        logger.info("removed %d stale offline file(s) from %s", removed, directory)
    return removed


def create_private_file(path: Path) -> BinaryIO:
    """Create ``path`` for reading and writing, mode 0600; refuses (``OSError``) when anything,
    a symbolic link included, already has that name."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        return os.fdopen(fd, "w+b")
    except BaseException:
        os.close(fd)
        raise


class ResourcePool:
    """Memory and disk budget shared by the clients of one or more transports.

    Args:
        limits: the pool's configuration (name, ``MessageMemoryLimit``, ``MessageDiskLimit``,
            ``MessageDiskPath``).
    """

    def __init__(self, limits: PoolLimits) -> None:
        self.name = limits.name
        self.memory_limit = limits.memory_limit
        self.disk_limit = limits.disk_limit
        self.disk_path = limits.disk_path
        self.clients: set[SlowClient] = set()
        self.disk_total = 0
        self.memory_total = 0
        """Bytes queued in memory at the last sweep."""
        self.counters: dict[str, int] = {"offlined": 0, "disconnected": 0, "spilled": 0}
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.swept = False
        self._private: Path | None = None

    def private_dir(self) -> Path:
        """This pool's own directory for offline files (made at first use, mode 0700)."""
        if self._private is not None and self._private.is_dir():
            return self._private
        self.disk_path.mkdir(parents=True, exist_ok=True)
        if not self.swept:
            self.swept = True
            remove_stale_files(self.disk_path)
        self._private = Path(
            tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-", dir=self.disk_path)
        )
        mode = stat.S_IMODE(os.lstat(self._private).st_mode)
        if mode != 0o700:  # mkdtemp makes 0700; a umask can only remove bits
            os.chmod(self._private, 0o700)
        return self._private

    def add(self, client: SlowClient) -> None:
        """Track ``client`` (and start the periodic sweep)."""
        self.clients.add(client)
        if self._timer is None:
            self._loop = client.session.loop
            self._timer = self._loop.call_later(SWEEP_INTERVAL, self.sweep)

    def remove(self, client: SlowClient) -> None:
        """Stop tracking ``client``."""
        self.clients.discard(client)
        if not self.clients and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def sweep(self) -> None:
        """Periodic check: totals, age limits, pool-level offlining and disconnection."""
        self._timer = None
        now = _now()
        total = 0
        for client in list(self.clients):
            if client.check_age(now):
                total += client.memory()
        self.memory_total = total
        if total > self.memory_limit:
            for client in sorted(self.clients, key=lambda c: c.memory(), reverse=True):
                if total <= self.memory_limit:
                    break
                if client.offline or client.closed:
                    continue
                used = client.memory()
                if client.go_offline(f"resource pool {self.name!r} memory limit"):
                    total -= used
        self.check_disk()
        if self.clients and self._loop is not None and not self._loop.is_closed():
            self._timer = self._loop.call_later(SWEEP_INTERVAL, self.sweep)

    def check_disk(self) -> None:
        """Disconnect the biggest offline files while the pool is over its disk limit."""
        while self.disk_total > self.disk_limit:
            offline = [c for c in self.clients if c.disk_bytes > 0 and not c.closed]
            if not offline:
                return
            biggest = max(offline, key=lambda c: c.disk_bytes)
            biggest.disconnect(f"resource pool {self.name!r} disk limit")

    def close(self) -> None:
        """Stop the sweep and drop every client's offline file."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for client in list(self.clients):
            client.close()
        private, self._private = self._private, None
        if private is not None:
            _remove_private_dir(private)


class SlowClient:
    """Slow-client state of one connection (``NetSession.slow``)."""

    def __init__(self, session: OutputQueue, pool: ResourcePool, limits: ClientLimits) -> None:
        self.session = session
        self.pool = pool
        self.limits = limits
        self.offline = False
        self.closed = False
        self.disk_bytes = 0
        self.last_clear = _now()
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._write_pos = 0
        self._read_pos = 0
        self._drain_timer: asyncio.TimerHandle | None = None
        pool.add(self)

    # ------------------------------------------------------------------ limits

    @property
    def memory_cap(self) -> int:
        """Bytes this client may queue in memory before it is offlined."""
        return max(LOW_WATER, int(self.pool.memory_limit * self.limits.max_capacity))

    @property
    def disk_cap(self) -> int:
        """Bytes of offline file after which this client is disconnected."""
        return max(1, int(self.pool.disk_limit * self.limits.max_capacity))

    def memory(self) -> int:
        """Bytes queued towards the client in memory (pending output, socket buffer, and
        conflation holds)."""
        session = self.session
        try:
            return session.pending_bytes() + session.buffered_bytes() + session.held_bytes()
        except Exception:  # pragma: no cover - a transport already gone
            return 0

    def _held(self) -> int:
        try:
            return self.session.held_bytes()
        except Exception:  # pragma: no cover - a connection already gone
            return 0

    def oldest(self, now: float) -> float:
        """Age in seconds of the oldest message waiting for this client."""
        if self.offline and self._read_pos < self._write_pos and self._file is not None:
            try:
                self._file.flush()
                head = os.pread(self._file.fileno(), _REC.size, self._read_pos)
            except OSError:
                return 0.0
            if len(head) == _REC.size:
                stamp: float = _REC.unpack(head)[1]
                return max(0.0, now - stamp)
        if self.memory() - self._held() <= LOW_WATER:  # the age is the output queue's
            self.last_clear = now
            return 0.0
        return max(0.0, now - self.last_clear)

    def check_age(self, now: float) -> bool:
        """Apply ``ClientMessageAgeLimit``; ``False`` when the client was disconnected."""
        if self.closed:
            return False
        age = self.oldest(now)
        limit = self.limits.age_limit
        if limit is not None and age > limit:
            self.disconnect(f"message age limit ({age:.1f} s > {limit:g} s)")
            return False
        return True

    # ------------------------------------------------------------------ offlining

    def _open_file(self) -> BinaryIO:
        directory = self.pool.private_dir()
        name, conn_id = self.session.client_identity()
        safe = _SAFE_NAME.sub("_", name or "client")[:64] or "client"
        path = directory / f"{safe}-{conn_id}-{next(_file_ids)}.offline"
        handle = create_private_file(path)
        self._path = path
        return handle

    def go_offline(self, reason: str) -> bool:
        """Offline the client: its queued-but-unwritten output and everything after go to disk.

        Returns ``False`` when no offline file could be made (the caller disconnects).
        """
        if self.closed:
            return False
        if self.offline:
            return True
        try:
            self._file = self._open_file()
        except OSError as exc:
            logger.error("cannot offline %s: %s", self.session.peer, exc)
            return False
        self.offline = True
        self._write_pos = self._read_pos = 0
        self.pool.counters["offlined"] += 1
        logger.warning(
            "%s client %s offlined (%s): buffering its messages to %s",
            self.session.transport_name,
            self.session.peer,
            reason,
            self._path,
        )
        for payload in self.session.take_pending():
            self.spill(payload)
        self._schedule_drain()
        return True

    def spill(self, payload: bytes) -> None:
        """Append one delivery to the offline file (enforcing the disk limits)."""
        handle = self._file
        if handle is None or self.closed:
            return
        record = _REC.pack(len(payload), _now())
        try:
            handle.write(record)
            handle.write(payload)
        except OSError as exc:
            logger.error("offline file for %s failed: %s", self.session.peer, exc)
            self.disconnect("offline file write failed")
            return
        size = _REC.size + len(payload)
        self._write_pos += size
        self.disk_bytes += size
        self.pool.disk_total += size
        self.pool.counters["spilled"] += 1
        if self.disk_bytes > self.disk_cap:
            self.disconnect(f"offline file over its capacity ({self.disk_bytes} bytes)")
        elif self.pool.disk_total > self.pool.disk_limit:
            self.pool.check_disk()

    def _schedule_drain(self) -> None:
        if self._drain_timer is None and not self.closed:
            self._drain_timer = self.session.loop.call_later(DRAIN_INTERVAL, self.drain)

    def drain(self) -> None:
        """Refill the socket from the offline file while the client keeps reading."""
        self._drain_timer = None
        handle = self._file
        if self.closed or not self.offline or handle is None:
            return
        session = self.session
        if session.closing:
            return
        try:
            handle.flush()
            fd = handle.fileno()
            while self._read_pos < self._write_pos:
                room = DRAIN_HIGH_WATER - session.buffered_bytes()
                if room <= 0:
                    break
                chunk = os.pread(fd, max(_READ_CHUNK, min(room, 4 * _READ_CHUNK)), self._read_pos)
                payloads: list[bytes] = []
                pos = 0
                while pos + _REC.size <= len(chunk):
                    n, _ = _REC.unpack_from(chunk, pos)
                    if pos + _REC.size + n > len(chunk):
                        if not payloads:  # one record larger than the chunk
                            whole = os.pread(fd, _REC.size + n, self._read_pos)
                            payloads.append(whole[_REC.size :])
                            pos = len(whole)
                        break
                    payloads.append(chunk[pos + _REC.size : pos + _REC.size + n])
                    pos += _REC.size + n
                if not payloads:
                    break
                self._read_pos += pos
                session.write_now(payloads)
        except OSError as exc:
            logger.error("reading the offline file of %s failed: %s", session.peer, exc)
            self.disconnect("offline file read failed")
            return
        if self._read_pos >= self._write_pos:
            self._back_online()
        else:
            self._schedule_drain()

    def _back_online(self) -> None:
        self._drop_file()
        self.offline = False
        self.last_clear = _now()
        logger.info(
            "%s client %s caught up: back online", self.session.transport_name, self.session.peer
        )

    def _drop_file(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()
        if self._path is not None:
            with contextlib.suppress(OSError):
                self._path.unlink()
            self._path = None
        self.pool.disk_total -= self.disk_bytes
        self.disk_bytes = 0
        self._write_pos = self._read_pos = 0

    # ------------------------------------------------------------------ ending

    def disconnect(self, reason: str) -> None:
        """Drop the connection (and its offline file) as too slow."""
        if self.closed:
            return
        self.pool.counters["disconnected"] += 1
        logger.warning(
            "%s client %s disconnected as too slow: %s",
            self.session.transport_name,
            self.session.peer,
            reason,
        )
        self.close()
        self.session.abort("slow consumer: " + reason)

    def close(self) -> None:
        """The connection ended: remove the offline file, leave the pool (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self.offline = False
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        self._drop_file()
        self.pool.remove(self)

    @property
    def pending_disk(self) -> int:
        """Offline bytes not yet handed to the socket."""
        return self._write_pos - self._read_pos

    @property
    def path(self) -> Path | None:
        """The offline file while offline."""
        return self._path


class FlowControl:
    """The running resource pools of one server: one :class:`ResourcePool` per configured
    :class:`~ampsclient_server_stub.security.policy.PoolLimits` (transports that share a
    pool's configuration share its budget)."""

    def __init__(self) -> None:
        self._pools: dict[PoolLimits, ResourcePool] = {}

    @property
    def pools(self) -> list[ResourcePool]:
        """The pools made so far."""
        return list(self._pools.values())

    def pool_for(self, limits: PoolLimits) -> ResourcePool:
        """The running pool of ``limits`` (made at first use; pools compare by identity)."""
        pool = self._pools.get(limits)
        if pool is None:
            pool = self._pools[limits] = ResourcePool(limits)
        return pool

    def attach(self, session: OutputQueue, limits: PoolLimits, client: ClientLimits) -> SlowClient:
        """Slow-client state for a new connection of a transport whose pool is ``limits``."""
        return SlowClient(session, self.pool_for(limits), client)

    def statistics(self) -> dict[str, int]:
        """Offlined/disconnected slow clients, deliveries spilled, offline bytes on disk."""
        stats = {"offline_bytes": 0}
        for pool in self.pools:
            for key, value in pool.counters.items():
                stats[f"slow_{key}"] = stats.get(f"slow_{key}", 0) + value
            stats["offline_bytes"] += pool.disk_total
        return stats

    def close(self) -> None:
        """Stop every pool's sweep and drop every offline file."""
        for pool in self.pools:
            pool.close()
