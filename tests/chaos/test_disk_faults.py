"""``--disk-full`` and ``--corrupt-at-restart`` of the chaos runner (issue 32): a few seconds
of chaos each, then the exact ledger check. ``--disk-full``: the server's transaction log on a
small tmpfs the faults fill; the server refuses publishes while the disk is full (the
publishers' failed-write handler records them as refused, not acknowledged); every
acknowledged publish is delivered exactly once, in order, and no refused one is delivered
(skipped with the reason where a tmpfs cannot be mounted). ``--corrupt-at-restart``: restarts
over a torn journal tail."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def chaos(tmp_path: Path, seed: int, *flags: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.chaos.run",
            *("--seconds", "6", "--seed", str(seed), "--min-gap", "0.3", "--max-gap", "0.8"),
            *("--work", str(tmp_path / "chaos"), *flags),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    out = done.stdout + done.stderr
    print(out)
    if "cannot mount a tmpfs" in out:
        pytest.skip(next(line for line in out.splitlines() if "cannot mount a tmpfs" in line))
    assert done.returncode == 0, f"chaos run failed (seed {seed}):\n{out}"
    assert "losses: 0" in out and "delivered twice to the application: 0" in out
    assert "out of order (per publisher): 0" in out
    assert "queue losses: 0" in out
    assert "queue redelivered (by the server) after its ack was persisted: 0 " in out
    return out


@pytest.mark.timeout(240)
def test_disk_full_refused_publishes_are_not_acknowledged_nothing_lost(
    tmp_path: Path, chaos_seed: int
) -> None:
    out = chaos(tmp_path, chaos_seed, "--disk-full", "--disk-full-size", "64m")
    assert re.search(r"faults injected: .*disk_full [1-9]", out), out
    refused = re.search(
        r"publishes refused by the server \(not acknowledged, excluded\): (\d+)", out
    )
    assert refused is not None and int(refused.group(1)) > 0, out  # the path was exercised
    assert "refused publishes delivered to a subscriber: 0" in out


@pytest.mark.timeout(240)
def test_restarts_over_a_torn_journal_tail_lose_and_repeat_nothing(
    tmp_path: Path, chaos_seed: int
) -> None:
    """``--corrupt-at-restart``: the server killed, a torn record appended to its log, the
    server restarted: it cuts the tail off (logged) and nothing acknowledged is lost."""
    out = chaos(tmp_path, chaos_seed, "--corrupt-at-restart")
    torn = re.search(
        r"server restarts over a torn journal tail: (\d+) \(tails the server logged cutting "
        r"off: (\d+)\)",
        out,
    )
    assert torn is not None, out
    restarts, cut = int(torn.group(1)), int(torn.group(2))
    assert restarts >= 1 and cut == restarts, out
