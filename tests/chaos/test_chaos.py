"""The chaos run (``tests/chaos/run.py``) as a bounded test: one round of faults (every kind
once, in the seed's order: ``--min-faults`` makes it whatever the timing), then the exact
ledger check (subscribers) and the queue audit (queue consumers). The script prints its
figures; they are shown when the test fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.chaos.chaos_outcome import ChaosRun

pytestmark = pytest.mark.integration

KINDS = ("kill_publisher", "kill_subscriber", "kill_consumer", "kill_server", "cut", "stall")


@pytest.mark.timeout(240)
def test_chaos_run_loses_and_repeats_nothing(
    run_chaos: Callable[..., ChaosRun], chaos_seed: int
) -> None:
    run = run_chaos(
        *("--seconds", "0", "--min-faults", str(len(KINDS))),
        *("--min-gap", "0.4", "--max-gap", "1.2"),
    )
    run.assert_ledger(chaos_seed)
    # the queue consumers: nothing lost, nothing redelivered once its ack was persisted
    assert "queue chaos_q: 3 consumers" in run.out
    assert "queue redeliveries (processings beyond a message's first): " in run.out
    faults = run.faults()
    assert all(faults.get(kind, 0) >= 1 for kind in KINDS), faults
