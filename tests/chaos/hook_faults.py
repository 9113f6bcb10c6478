"""The runner's side of the faults inside the server process (:mod:`tests.chaos.server_hooks`,
issue 32): ``--slow-disk`` and ``--clock-steps``.

* ``slow_disk``: every ``os.fsync`` of the server waits, for 1-3 s: half the episodes a
  stalled disk (the fsync waits until the episode ends), half a slow one (0.2-1 s per fsync).
  The episode lasts until an fsync was held and the subscribers' ledgers grew after that (a
  delivery while the disk was held), at most :data:`HOLD_WAIT` s: persisted acks wait for the
  disk, deliveries do not.
* ``clock_step``: the server's wall clock stepped 1 minute to 2 hours back or forward, held
  1-3 s, then stepped back to the machine's time (the opposite step).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ampsclient_server_stub.harness import ServerProcess
from tests.chaos.server_hooks import CLOCK_OFFSET, FSYNC_DELAY, FSYNC_HELD, write_atomic

HOLD_WAIT: Final = 15.0
"""At most this many seconds of slow disk while waiting for a held fsync and a delivery."""


class HookedServer(ServerProcess):
    """A :class:`ServerProcess` started through :mod:`tests.chaos.server_hooks`, its hooks
    read from the directory ``hooks`` (and in a memory cgroup with ``cgroup_procs``)."""

    def __init__(self, *, hooks: Path, cgroup_procs: Path | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.hooks = hooks
        self.cgroup_procs = cgroup_procs
        """``--memory-limit``: the process moves itself into this cgroup before Python starts
        (every restart too)."""
        hooks.mkdir(parents=True, exist_ok=True)
        write_atomic(hooks / FSYNC_DELAY, "0")
        write_atomic(hooks / CLOCK_OFFSET, "0")

    def command(self) -> list[str]:
        base = super().command()  # [python, -m, ampsclient_server_stub, *args]
        entry = Path(__file__).with_name("server_hooks.py")  # by path: any working directory
        command = [sys.executable, str(entry), str(self.hooks), *base[3:]]
        if self.cgroup_procs is None:
            return command
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.cgroup_procs), *command]


@dataclass
class HookReport:
    """Figures of the slow-disk and clock-step faults of one run."""

    slow_disk: int = 0
    stalled: int = 0
    slow_disk_s: float = 0.0
    fsync_held: int = 0
    """Episodes in which an fsync of the server was held."""
    delivered_while_held: int = 0
    """Episodes in which the subscribers' ledgers grew while an fsync was held."""
    acks_while_held: int = 0
    """Publisher ledger lines written while an fsync was held (figures only: an ack for what
    was durable before the hold may land just after it began)."""
    steps: list[float] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        if self.slow_disk:
            out += [
                f"slow disk: {self.slow_disk} episodes ({self.stalled} stalled), "
                f"{self.slow_disk_s:.1f} s in all; an fsync held in {self.fsync_held}, "
                f"deliveries while held in {self.delivered_while_held}; "
                f"publisher ledger lines while held: {self.acks_while_held}"
            ]
        if self.steps:
            steps = ", ".join(f"{s:+.0f} s" for s in self.steps)
            out.append(f"server wall clock steps (each undone 1-3 s later): {steps}")
        return out


def _total_size(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


def inject_slow_disk(
    hooks: Path,
    rng: random.Random,
    report: HookReport,
    *,
    sub_ledgers: list[Path],
    pub_ledgers: list[Path],
    lines: Callable[[Path], int],
) -> None:
    """One slow/stalled disk episode (blocks while it lasts). ``lines(path)``: the number of
    lines of a publisher ledger (acks counted while held)."""
    stalled = rng.random() < 0.5
    delay = float("inf") if stalled else rng.uniform(0.2, 1.0)
    held_marker = hooks / FSYNC_HELD
    held_marker.unlink(missing_ok=True)
    t0 = time.monotonic()
    hold_until = t0 + rng.uniform(1.0, 3.0)
    give_up = t0 + HOLD_WAIT
    write_atomic(hooks / FSYNC_DELAY, repr(delay))
    held = delivered = False
    subs_at_hold = acks_at_hold = 0
    try:
        while (now := time.monotonic()) < give_up:
            if not held and held_marker.exists():
                held = True
                subs_at_hold = _total_size(sub_ledgers)
                acks_at_hold = sum(lines(p) for p in pub_ledgers)
            if held and not delivered:
                delivered = _total_size(sub_ledgers) > subs_at_hold
            if delivered and now >= hold_until:
                break
            time.sleep(0.05)
    finally:
        write_atomic(hooks / FSYNC_DELAY, "0")
    report.slow_disk += 1
    report.stalled += stalled
    report.slow_disk_s += time.monotonic() - t0
    report.fsync_held += held
    report.delivered_while_held += delivered
    if held:
        report.acks_while_held += sum(lines(p) for p in pub_ledgers) - acks_at_hold


def inject_clock_step(hooks: Path, rng: random.Random, report: HookReport) -> None:
    """Step the server's wall clock back or forward, hold 1-3 s, step it back (blocks)."""
    step = rng.choice((-1.0, 1.0)) * rng.uniform(60.0, 7200.0)
    write_atomic(hooks / CLOCK_OFFSET, repr(step))
    try:
        time.sleep(rng.uniform(1.0, 3.0))
    finally:
        write_atomic(hooks / CLOCK_OFFSET, "0")
    report.steps.append(step)
