"""The ``/amps/host`` part of the statistics tree: this machine's CPUs, memory, disks and
network interfaces, read from Linux' ``/proc`` (and ``statvfs`` for free space).

:class:`HostSampler` keeps the previous reading of each cumulative ``/proc`` counter, so that
interval figures (CPU percentages, disk wait times, network rates) are the change between two
samples, as the AMPS monitoring guide describes them ("Statistics reported are based on the
statistics monitoring update frequency"). Before a second sample exists, or where a file
cannot be read (another operating system, a restricted container), the figures that need it
are left out, never guessed.

The readers are pure functions of the files' text (:func:`parse_cpu_times`,
:func:`parse_diskstats`, :func:`parse_net_dev`, :func:`parse_meminfo`), tested on their own.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from .tree import Entries

__all__ = [
    "HostSampler",
    "parse_cpu_times",
    "parse_diskstats",
    "parse_meminfo",
    "parse_net_dev",
    "process_memory",
]

PROC: Final = Path("/proc")

_NET_FIELDS: Final = (
    "bytes_in",
    "packets_in",
    "errors_in",
    "drops_in",
    "bytes_out",
    "packets_out",
    "errors_out",
    "drops_out",
)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def parse_cpu_times(text: str) -> dict[str, tuple[int, ...]]:
    """``/proc/stat``'s ``cpu`` lines: per CPU (``all`` for the aggregate line), its times
    ``(user, nice, system, idle, iowait, irq, softirq, steal)`` in clock ticks."""
    out: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        ticks = tuple(int(v) for v in values[:8])
        ticks += (0,) * (8 - len(ticks))
        out["all" if name == "cpu" else name] = ticks
    return out


def parse_diskstats(text: str) -> dict[str, tuple[int, ...]]:
    """``/proc/diskstats``: per device name, ``(reads completed, ms reading, writes
    completed, ms writing, I/Os in progress)``."""
    out: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        values = [int(v) for v in parts[3:14]]
        out[parts[2]] = (values[0], values[3], values[4], values[7], values[8])
    return out


def parse_net_dev(text: str) -> dict[str, tuple[int, ...]]:
    """``/proc/net/dev``: per interface, ``(bytes in, packets in, errors in, drops in,
    bytes out, packets out, errors out, drops out)``."""
    out: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        values = [int(v) for v in rest.split()]
        if len(values) < 12:
            continue
        out[name.strip()] = (*values[0:4], *values[8:12])
    return out


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo``: each field in bytes (the file gives kB)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and parts and parts[0].isdigit():
            scale = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
            out[name.strip()] = int(parts[0]) * scale
    return out


def process_memory(proc: Path = PROC) -> dict[str, int]:
    """``rss`` and ``vmsize`` (bytes) of this process, from ``/proc/self/status`` (``{}``
    where it cannot be read)."""
    text = _read(proc / "self" / "status")
    if text is None:
        return {}
    fields = parse_meminfo(text)
    out = {}
    if "VmRSS" in fields:
        out["rss"] = fields["VmRSS"]
    if "VmSize" in fields:
        out["vmsize"] = fields["VmSize"]
    return out


@dataclass(slots=True)
class _Reading:
    at: float
    cpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    disks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    network: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _mounts(text: str) -> list[tuple[str, str]]:
    """``(device, mount point)`` of the block-device file systems in ``/proc/mounts``."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith("/dev/"):
            continue
        mount = parts[1].replace("\\040", " ")
        if mount in seen:
            continue
        seen.add(mount)
        out.append((parts[0], mount))
    return out


class HostSampler:
    """Reads ``/proc`` once per statistics interval and builds ``/amps/host``.

    Args:
        proc: the ``/proc`` directory (a test may point it at a copy).
        paths: directories the server writes (journal, SOW...): their file systems are
            listed under ``disks`` even when ``/proc/mounts`` shows no block device for them.
    """

    def __init__(self, *, proc: Path = PROC, paths: Iterable[Path] = ()) -> None:
        self.proc = proc
        self.paths = [Path(p) for p in paths]
        self._previous: _Reading | None = None
        self._latest: _Reading | None = None

    def sample(self) -> None:
        """Read the cumulative counters (a few small files)."""
        reading = _Reading(time.monotonic())
        text = _read(self.proc / "stat")
        if text is not None:
            reading.cpus = parse_cpu_times(text)
        text = _read(self.proc / "diskstats")
        if text is not None:
            reading.disks = parse_diskstats(text)
        text = _read(self.proc / "net" / "dev")
        if text is not None:
            reading.network = parse_net_dev(text)
        self._previous, self._latest = self._latest, reading

    # ------------------------------------------------------------------ parts

    def tree(self) -> dict[str, Any]:
        """The whole ``/amps/host`` node."""
        return {
            "name": socket.gethostname(),
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "cpus": self.cpus(),
            "memory": self.memory(),
            "disks": self.disks(),
            "network": self.network(),
        }

    def cpus(self) -> Entries:
        """``cpus``: ``all`` and each CPU, with ``user_percent``, ``system_percent``,
        ``idle_percent``, ``iowait_percent`` over the last interval."""
        out = Entries()
        new, old = self._latest, self._previous
        if new is None:
            return out
        for name, ticks in new.cpus.items():
            entry: dict[str, Any] = {}
            before = old.cpus.get(name) if old is not None else None
            if before is not None:
                delta = [max(0, a - b) for a, b in zip(ticks, before, strict=True)]
                total = sum(delta)
                if total > 0:
                    user, nice, system, idle, iowait, irq, softirq, _steal = delta
                    entry = {
                        "user_percent": round(100 * (user + nice) / total, 3),
                        "system_percent": round(100 * (system + irq + softirq) / total, 3),
                        "idle_percent": round(100 * idle / total, 3),
                        "iowait_percent": round(100 * iowait / total, 3),
                    }
            out[name] = entry
        return out

    def memory(self) -> dict[str, Any]:
        """``memory``: ``/proc/meminfo``'s totals, in bytes."""
        text = _read(self.proc / "meminfo")
        if text is None:
            return {}
        fields = parse_meminfo(text)
        names = {
            "MemTotal": "total",
            "MemFree": "free",
            "MemAvailable": "available",
            "Buffers": "buffers",
            "Cached": "cached",
            "SwapTotal": "swap_total",
            "SwapFree": "swap_free",
        }
        out: dict[str, Any] = {
            ours: fields[theirs] for theirs, ours in names.items() if theirs in fields
        }
        if fields.get("MemTotal") and "MemAvailable" in fields:
            out["in_use_percent"] = round(
                100 * (1 - fields["MemAvailable"] / fields["MemTotal"]), 3
            )
        return out

    def disks(self) -> Entries:
        """``disks``: per block-device file system (and the file systems of the server's
        directories), ``mount_point``, ``filesystem_free_percent``, and from
        ``/proc/diskstats`` ``in_progress``, ``read_await`` and ``write_await`` (ms)."""
        out = Entries()
        text = _read(self.proc / "mounts") or ""
        mounts = _mounts(text)
        listed = {mount for _, mount in mounts}
        for path in self.paths:
            mount = _mount_point(path)
            if mount is not None and mount not in listed:
                listed.add(mount)
                mounts.append((mount, mount))
        new, old = self._latest, self._previous
        for device, mount in mounts:
            try:
                st = os.statvfs(mount)
            except OSError:
                continue
            key = device.removeprefix("/dev/")
            entry: dict[str, Any] = {"mount_point": mount}
            if st.f_blocks:
                entry["filesystem_free_percent"] = round(100 * st.f_bavail / st.f_blocks, 3)
            stats = new.disks.get(os.path.basename(key)) if new is not None else None
            if stats is not None:
                entry["in_progress"] = stats[4]
                before = old.disks.get(os.path.basename(key)) if old is not None else None
                if before is not None:
                    reads, writes = stats[0] - before[0], stats[2] - before[2]
                    entry["read_await"] = round((stats[1] - before[1]) / reads, 3) if reads else 0.0
                    entry["write_await"] = (
                        round((stats[3] - before[3]) / writes, 3) if writes else 0.0
                    )
            out[key] = entry
        return out

    def network(self) -> Entries:
        """``network``: per interface, ``bytes_in``/``bytes_out``, ``packets_in``/
        ``packets_out``, ``errors_in``/``errors_out``, ``drops_in``/``drops_out`` (since boot)
        and ``bytes_in_per_sec``/``bytes_out_per_sec`` over the last interval."""
        out = Entries()
        new, old = self._latest, self._previous
        if new is None:
            return out
        names = _NET_FIELDS
        for iface, values in new.network.items():
            entry: dict[str, Any] = dict(zip(names, values, strict=True))
            before = old.network.get(iface) if old is not None else None
            if old is not None and before is not None and new.at > old.at:
                dt = new.at - old.at
                entry["bytes_in_per_sec"] = round(max(0, values[0] - before[0]) / dt, 1)
                entry["bytes_out_per_sec"] = round(max(0, values[4] - before[4]) / dt, 1)
            out[iface] = entry
        return out


def _mount_point(path: Path) -> str | None:
    """The mount point of the file system holding ``path`` (``None`` if it does not exist)."""
    try:
        current = path.resolve()
        if not current.exists():
            return None
        while not os.path.ismount(current) and current != current.parent:
            current = current.parent
        return str(current)
    except OSError:
        return None
