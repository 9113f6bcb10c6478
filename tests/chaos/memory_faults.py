"""The chaos run's memory pressure (``--memory-limit MB``, issue 32): the server in a memory
cgroup of its own (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``; root), limited to
``MB`` for its whole life, every restart included (the server's default
``MessageMemoryLimit`` follows the cgroup's limit; the run's XML sets its own). At fault times
(``memory_squeeze``) the limit drops to the server's RSS plus 8-32 MB for 1-3 s: the kernel
reclaims the group's page cache (the journal's pages count) and the server allocates against a
tight limit. Should it exceed the limit the kernel kills it: the run counts that and restarts
the server, as after ``kill_server``; the ledger check must pass either way.

Where no cgroup can be made the run fails with the reason (:func:`make_cgroup`).
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass
class MemoryCgroup:
    """A memory cgroup: its directory and the name of its limit file."""

    group: Path
    limit_file: str

    @property
    def procs(self) -> Path:
        return self.group / "cgroup.procs"

    def set_limit(self, limit: int) -> bool:
        """Set the limit; ``False`` when the kernel refused it (v1: usage above it that it
        could not reclaim)."""
        try:
            (self.group / self.limit_file).write_text(str(limit))
        except OSError:
            return False
        return True

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.group.rmdir()


def make_cgroup(limit: int) -> MemoryCgroup | str:
    """A new memory cgroup limited to ``limit`` bytes, or why none can be made."""
    name = f"ampsclient-chaos-{uuid.uuid4().hex[:8]}"
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        cgroup = MemoryCgroup(CGROUP_ROOT / name, "memory.max")
    elif (CGROUP_ROOT / "memory").is_dir():
        cgroup = MemoryCgroup(CGROUP_ROOT / "memory" / name, "memory.limit_in_bytes")
    else:
        return "no cgroup memory controller here"
    try:
        cgroup.group.mkdir()
    except OSError as exc:
        return f"cannot make a memory cgroup here ({exc})"
    if not cgroup.set_limit(limit):
        cgroup.remove()
        return f"cannot set a memory cgroup's limit here ({cgroup.limit_file})"
    return cgroup


def squeeze(cgroup: MemoryCgroup, rss_mb: float, limit: int, rng: random.Random) -> int:
    """Drop the limit to ``rss_mb`` plus 8-32 MB for 1-3 s, then back to ``limit`` (blocks);
    the squeezed limit in bytes (0: the kernel refused it and the limit did not change)."""
    tight = int((rss_mb + rng.uniform(8.0, 32.0)) * 1024 * 1024)
    tight = min(tight, limit)
    if not cgroup.set_limit(tight):
        return 0
    try:
        time.sleep(rng.uniform(1.0, 3.0))
    finally:
        cgroup.set_limit(limit)
    return tight
