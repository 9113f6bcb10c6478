"""The chaos run in replicated mode (``tests/chaos/run.py --replicated``) as a bounded test:
a hot-hot sync pair A/B, one round of faults, every kind once (kill -9 of a publisher, of a
subscriber, of A and of B, a partition of the A-B link, proxy cuts and stalls), WebSocket
publishers and subscribers among the clients; then the exact ledger check message by message
and the comparison of both instances' journals."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.chaos.chaos_outcome import ChaosRun

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_replicated_chaos_run_loses_and_repeats_nothing(
    run_chaos: Callable[..., ChaosRun], chaos_seed: int
) -> None:
    # --seconds 0: one full round (the replicated runner completes its first round)
    run = run_chaos("--replicated", "--seconds", "0", "--min-gap", "0.3", "--max-gap", "0.8")
    # the ledger, message by message (the script checks every delivery of every subscriber)
    run.assert_ledger(chaos_seed, queue=False)
    assert run.figure("messages acknowledged to publishers") > 0
    # both journals hold the same messages under the same bookmarks
    journals = re.search(
        r"^journals \(EPOCH replays\): A (\d+) records, B (\d+) records, (\w+)",
        run.out,
        re.MULTILINE,
    )
    assert journals and journals.group(3) == "equal" and journals.group(1) == journals.group(2)
    assert int(journals.group(1)) > 0
    # every kind of fault happened, both instances were killed, WebSocket clients took part
    counts = run.faults()
    for fault in (
        "kill_publisher",
        "kill_subscriber",
        "kill_A",
        "kill_B",
        "partition",
        "cut",
        "stall",
    ):
        assert counts.get(fault, 0) >= 1, f"no {fault} in {counts}"
    assert run.figure("WebSocket clients (ws:// through the proxy)") >= 2
