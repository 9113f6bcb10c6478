"""The chaos run's full disk (``--disk-full``, issue 32): the server's transaction log on a
small tmpfs that the runner fills (one filler file written until ``ENOSPC``), holds full for
1-3 s (and until a publish was refused: see :func:`inject_disk_full`), and frees again.

While the disk is full the server acknowledges nothing as persisted and refuses what it
cannot keep (a ``failure`` persisted ack, ``tx store failure``); the publishers' failed-write
handler writes each refused sequence to their ledger (``{"refused": s}``). A refused publish
is not acknowledged: the ledger check excludes it from what must be delivered and counts it
as a problem if a subscriber got it anyway (the server never delivers what it refused).
Everything acknowledged, before, during and after, must be delivered exactly once.

Mounting needs root (``mount -t tmpfs``); where it is not permitted the run says why and
stops (:func:`mount_tmpfs` returns the reason).
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

FILLER = "chaos-filler"
"""The filler file's name in the tmpfs (the server never writes a file of that name)."""


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` (``128m``) at ``path``; ``None``, or why it cannot."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot mount a tmpfs at {path}: {exc}"
    if done.returncode != 0:
        return f"cannot mount a tmpfs at {path}: {done.stderr.strip() or done.returncode}"
    return None


def unmount(path: Path) -> None:
    """Lazily unmount ``path`` (the server may still hold a file open)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False, timeout=30)


def fill(directory: Path) -> int:
    """Fill the filesystem of ``directory`` with :data:`FILLER`; the bytes written."""
    written = 0
    fd = os.open(directory / FILLER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        block = b"\0" * 65536
        with contextlib.suppress(OSError):
            while n := os.write(fd, block):
                written += n
        small = b"\0" * 512  # the last partial block
        with contextlib.suppress(OSError):
            while n := os.write(fd, small):
                written += n
    finally:
        os.close(fd)
    return written


def free(directory: Path) -> None:
    """Remove the filler: space returns."""
    with contextlib.suppress(FileNotFoundError):
        (directory / FILLER).unlink()


REFUSAL_WAIT: Final = 15.0
"""At most this many seconds full while waiting for the first refusal of an episode."""


def inject_disk_full(
    directory: Path, rng: random.Random, refusals: Callable[[], int]
) -> tuple[float, bool]:
    """Fill the filesystem of ``directory``, hold it full for 1-3 s and until ``refusals()``
    (the publishers' refusals so far) grew, at most :data:`REFUSAL_WAIT` s, then free it
    (blocks while it lasts). The server buffers a while before it refuses (its journal's
    append buffer must fill first), so a short hold alone might refuse nothing.

    Returns:
        The seconds the disk was full, and whether a refusal came.
    """
    before = refusals()
    t0 = time.monotonic()
    try:
        fill(directory)
        hold_until = t0 + rng.uniform(1.0, 3.0)
        give_up = t0 + REFUSAL_WAIT
        refused = False
        while (now := time.monotonic()) < give_up:
            refused = refused or refusals() > before
            if refused and now >= hold_until:
                break
            time.sleep(0.05)
    finally:
        free(directory)
    return time.monotonic() - t0, refused


def refused_sequences(lines: list[dict[str, object]]) -> set[int]:
    """The sequences a publisher's ledger lines record as refused by the server."""
    return {int(str(line["refused"])) for line in lines if "refused" in line}


def tear_journal_tail(journal: Path, rng: random.Random) -> int:
    """``corrupt_at_restart`` (``--corrupt-at-restart``, with the server killed): append a torn
    record to the active segment of the transaction log in ``journal``, as a write cut by the
    crash leaves it: half the time the first 1..n-1 bytes of a copy of the last record (a
    valid frame header, a body cut short), else 512-4096 zero bytes (blocks the filesystem
    extended but never wrote). Nothing acknowledged is touched: the bytes go after the last
    whole record. The server must cut them off when it opens the log again
    (``truncating a torn tail``). Returns the bytes appended (0: no segment yet)."""
    from ampsclient_server_stub.engine.journal_format import scan_records

    segments = sorted(journal.glob("*.journal"))
    if not segments:
        return 0
    active = segments[-1]
    first_index = int(active.stem.rsplit("-", 1)[-1])
    scan = scan_records(active, first_index, tolerate_tail=True)
    data = active.read_bytes()[: scan.size]
    if scan.count and rng.random() < 0.5:
        last = data[scan.offsets[-1] :]
        torn = last[: rng.randint(1, len(last) - 1)]
    else:
        torn = b"\0" * rng.randint(512, 4096)
    with open(active, "ab") as fh:
        fh.write(torn)
    return len(torn)
