"""The hot-hot failover demo end to end (kill -9 of A, failover to B, resync of A)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration
DEMO = pathlib.Path(__file__).resolve().parents[2] / "examples" / "failover_demo.py"


def test_failover_demo_delivers_exactly_once_and_resyncs() -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO), "--messages", "1500", "--kill-at", "600"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "exactly once, in order    yes" in out
    assert "A's log equals B's        yes" in out
    assert "kill -9 A after message 600" in out
