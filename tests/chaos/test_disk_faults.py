"""``--disk-full`` and ``--corrupt-at-restart`` of the chaos runner (issue 32): the flagged
fault first (``--min-faults``: it happens whatever the timing), then one other, then the
exact ledger check. ``--disk-full``: the server's transaction log on a small tmpfs the faults
fill; the server refuses publishes while the disk is full (the publishers' failed-write
handler records them as refused, not acknowledged); every acknowledged publish is delivered
exactly once, in order, and no refused one is delivered (skipped with the reason where a
tmpfs cannot be mounted). ``--corrupt-at-restart``: restarts over a torn journal tail."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.chaos.chaos_outcome import SHORT_RUN, ChaosRun, fast

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_disk_full_refused_publishes_are_not_acknowledged_nothing_lost(
    run_chaos: Callable[..., ChaosRun], chaos_seed: int
) -> None:
    run = run_chaos(*fast(2), *SHORT_RUN, "--disk-full", "--disk-full-size", "64m")
    if "cannot mount a tmpfs" in run.out:
        pytest.skip(next(line for line in run.out.splitlines() if "cannot mount a tmpfs" in line))
    run.assert_ledger(chaos_seed)
    assert run.faults().get("disk_full", 0) >= 1, run.out
    refused = run.figure("publishes refused by the server (not acknowledged, excluded)")
    assert refused > 0, run.out  # the path was exercised
    assert run.figure("refused publishes delivered to a subscriber") == 0, run.out


@pytest.mark.timeout(240)
def test_restarts_over_a_torn_journal_tail_lose_and_repeat_nothing(
    run_chaos: Callable[..., ChaosRun], chaos_seed: int
) -> None:
    """``--corrupt-at-restart``: the server killed, a torn record appended to its log, the
    server restarted: it cuts the tail off (logged) and nothing acknowledged is lost."""
    run = run_chaos(*fast(2), *SHORT_RUN, "--corrupt-at-restart")
    run.assert_ledger(chaos_seed)
    torn = re.search(
        r"server restarts over a torn journal tail: (\d+) \(tails the server logged cutting "
        r"off: (\d+)\)",
        run.out,
    )
    assert torn is not None, run.out
    restarts, cut = int(torn.group(1)), int(torn.group(2))
    assert restarts >= 1 and cut == restarts, run.out
