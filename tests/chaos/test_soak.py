"""The soak script (``benchmarks/soak.py``) in its short form, so it cannot rot: a few seconds
of the chaos run with resources sampled, the ledger check, and the per-window report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.chaos_outcome import ChaosRun

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_soak_short_form_reports_windows_and_loses_nothing(
    tmp_path: Path, chaos_seed: int, run_soak: Callable[..., ChaosRun]
) -> None:
    work = tmp_path / "soak"
    done = run_soak(
        *("--seconds", "5", "--window", "3", "--sample", "1"),
        *("--min-gap", "0.4", "--max-gap", "1.0"),
        *("--publishers", "2", "--subscribers", "2", "--consumers", "2"),
        # small journal files and a removal action (with an Age no file reaches here:
        # a removal under a subscriber's feet would be a loss; the 30-minute soak prunes)
        *("--journal-size", "64KB", "--remove-journal-age", "1h"),
    )
    out = done.out
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
    assert "amps-action-do-remove-journal" in (work / "server.xml").read_text()
    journal = result["journals"]["journal"]
    assert journal["files_seen"] >= 2, journal  # 64KB files: some were sealed
    assert journal["files_removed"] == 0, journal
    kinds = result["resources"]["per_kind"]
    assert {"server", "pub", "sub", "consumer", "soak"} <= set(kinds), kinds
    assert kinds["server"]["rss_mb_peak"] >= kinds["server"]["rss_mb_end"] > 0
