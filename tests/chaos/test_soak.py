"""The soak script (``benchmarks/soak.py``) in its short form, so it cannot rot: a few seconds
of the chaos run with resources sampled, the ledger check, and the per-window report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_soak_short_form_reports_windows_and_loses_nothing(tmp_path: Path, chaos_seed: int) -> None:
    work = tmp_path / "soak"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "soak.py"),
            *("--seconds", "5", "--window", "3", "--sample", "1", "--seed", str(chaos_seed)),
            *("--work", str(work), "--min-gap", "0.4", "--max-gap", "1.0"),
            *("--publishers", "2", "--subscribers", "2", "--consumers", "2"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    out = done.stdout + done.stderr
    print(out)
    assert done.returncode == 0, f"soak failed (seed {chaos_seed}):\n{out}"
    assert "losses: 0" in out and "delivered twice to the application: 0" in out
    result = json.loads((work / "soak.json").read_text())
    assert result["chaos_exit_status"] == 0
    windows = result["windows"]
    assert sum(w["deliveries"] for w in windows) > 0
    assert all(w["server_rss_mb_end"] >= 0 for w in windows)
    assert result["server_rss_mb"]["peak"] > 0
    samples = json.loads((work / "soak-samples.json").read_text())
    assert any("server" in s["procs"] for s in samples)
