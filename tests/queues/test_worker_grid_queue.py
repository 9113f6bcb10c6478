"""The worker grid in queue mode end to end (real processes): a worker killed with kill -9 and
restarted, the audit: 0 lost, every result right, nothing left in the queue, redeliveries
counted."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration
RUNNER = pathlib.Path(__file__).resolve().parents[2] / "examples" / "worker_grid" / "runner.py"


def test_queue_grid_loses_nothing() -> None:
    done = subprocess.run(
        [sys.executable, str(RUNNER), "--mode", "queue", "--orders", "600", "--workers", "3"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line.split() for line in done.stdout.replace("\r", "\n").splitlines()]
    assert ["lost", "0"] in lines
    assert ["wrong", "results", "0"] in lines
    assert ["left", "in", "the", "queue", "0"] in lines
    assert "orders processed      600 distinct results" in done.stdout
    again = next(line for line in lines if line[:2] == ["processed", "again"])
    # only the killed worker's leases (at most its max_backlog, 10) can be processed twice
    assert 0 <= int(again[2]) <= 10
    assert "kill -9 queue-worker-1" in done.stdout
