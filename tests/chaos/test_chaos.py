"""The chaos run (``tests/chaos/run.py``) as a bounded test: about 20 s of faults, then the
exact ledger check (subscribers) and the queue audit (queue consumers). The script prints
its figures; they are shown when the test fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_chaos_run_loses_and_repeats_nothing(tmp_path: Path, chaos_seed: int) -> None:
    seed = chaos_seed
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.chaos.run",
            "--seconds",
            "20",
            "--seed",
            str(seed),
            "--min-gap",
            "0.4",
            "--max-gap",
            "1.2",
            "--work",
            str(tmp_path / "chaos"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    out = done.stdout + done.stderr
    print(out)
    assert done.returncode == 0, f"chaos run failed (seed {seed}):\n{out}"
    assert "losses: 0" in out and "delivered twice to the application: 0" in out
    # the queue consumers: nothing lost, nothing redelivered once its ack was persisted
    assert "queue chaos_q: 3 consumers" in out
    assert "queue losses: 0" in out
    assert "queue redelivered (by the server) after its ack was persisted: 0" in out
    assert "queue redeliveries (processings beyond a message's first): " in out
    for fault in ("kill_publisher", "kill_subscriber", "kill_consumer", "kill_server", "cut"):
        assert fault in out
    assert "stall" in out
