"""A chaos run's outcome as the tests read it (:class:`ChaosRun`, made by the ``run_chaos``
fixture of ``tests/chaos/conftest.py``): the figures it printed and the ledger checks every
chaos test makes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SHORT_RUN = ("--publishers", "2", "--subscribers", "2", "--consumers", "2")
"""The fault-flag tests' workers: every role of the full run once (an fsyncing and a
non-fsyncing publisher, the slow and a normal subscriber, the slow and a normal consumer)."""


def fast(faults: int) -> tuple[str, ...]:
    """No fixed fault time: ``faults`` faults (``--min-faults``), the flagged (opt-in) kinds
    first in the runner's first round, so each of them happens whatever the timing."""
    return ("--seconds", "0", "--min-faults", str(faults), "--min-gap", "0.3", "--max-gap", "0.8")


@dataclass
class ChaosRun:
    """A finished chaos run: its exit status and everything it printed."""

    returncode: int
    out: str

    def figure(self, label: str) -> int:
        """The number on the ``label: N`` line."""
        match = re.search(rf"^{re.escape(label)}: (\d+)", self.out, re.MULTILINE)
        assert match, f"no {label!r} line in:\n{self.out}"
        return int(match.group(1))

    def assert_ledger(self, seed: int, *, queue: bool = True) -> None:
        """The run passed: every acknowledged publish delivered exactly once and in order
        to every subscriber (message by message), and with ``queue`` the queue audit."""
        assert self.returncode == 0, f"chaos run failed (seed {seed}):\n{self.out}"
        assert self.figure("losses") == 0, self.out
        assert self.figure("delivered twice to the application") == 0, self.out
        assert self.figure("out of order (per publisher)") == 0, self.out
        assert self.figure("deliveries checked (loss, duplicate, order; all subscribers)") > 0
        assert "result: PASS" in self.out, self.out
        if queue:
            assert self.figure("queue losses") == 0, self.out
            assert self.figure("queue redelivered (by the server) after its ack was persisted") == 0

    def faults(self) -> dict[str, int]:
        """The faults injected, by kind."""
        match = re.search(r"^faults injected: \d+ \((.*)\)$", self.out, re.MULTILINE)
        assert match, self.out
        return {k: int(v) for k, v in (p.rsplit(" ", 1) for p in match.group(1).split(", "))}
