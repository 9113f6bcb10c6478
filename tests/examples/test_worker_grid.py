"""The worker grid example end to end: kill -9 of a worker, exact audit (lost 0)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration
RUNNER = pathlib.Path(__file__).resolve().parents[2] / "examples" / "worker_grid" / "runner.py"


def test_worker_grid_loses_nothing_and_bounds_duplicates() -> None:
    done = subprocess.run(
        [sys.executable, str(RUNNER), "--orders", "900", "--workers", "3", "--threshold", "5"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = done.stdout.splitlines()
    assert any(line.split() == ["lost", "0"] for line in summary)
    assert any("orders processed      900 distinct" in line for line in summary)
    twice = next(line for line in summary if line.strip().startswith("processed twice"))
    assert int(twice.split()[2]) <= 6  # the conflation threshold (+1 in flight)
    assert "kill -9 worker-1" in done.stdout
