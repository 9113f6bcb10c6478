"""The chaos run in replicated mode (``tests/chaos/run.py --replicated``) as a bounded test:
a hot-hot sync pair A/B, about 15 s of faults with every kind at least once (kill -9 of a
publisher, of a subscriber, of A and of B, a partition of the A-B link, proxy cuts and
stalls), WebSocket publishers and subscribers among the clients; then the exact ledger check
message by message and the comparison of both instances' journals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _figure(out: str, label: str) -> int:
    match = re.search(rf"^{re.escape(label)}: (\d+)", out, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{out}"
    return int(match.group(1))


@pytest.mark.timeout(240)
def test_replicated_chaos_run_loses_and_repeats_nothing(tmp_path: Path, chaos_seed: int) -> None:
    seed = chaos_seed
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.chaos.run",
            "--replicated",
            "--seconds",
            "15",
            "--seed",
            str(seed),
            "--min-gap",
            "0.3",
            "--max-gap",
            "0.8",
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
    assert done.returncode == 0, f"replicated chaos run failed (seed {seed}):\n{out}"
    # the ledger, message by message (the script checks every delivery of every subscriber)
    assert _figure(out, "losses") == 0
    assert _figure(out, "delivered twice to the application") == 0
    assert _figure(out, "out of order (per publisher)") == 0
    assert _figure(out, "messages acknowledged to publishers") > 0
    assert _figure(out, "deliveries checked (loss, duplicate, order; all subscribers)") > 0
    # both journals hold the same messages under the same bookmarks
    journals = re.search(
        r"^journals \(EPOCH replays\): A (\d+) records, B (\d+) records, (\w+)", out, re.MULTILINE
    )
    assert journals and journals.group(3) == "equal" and journals.group(1) == journals.group(2)
    assert int(journals.group(1)) > 0
    # every kind of fault happened, both instances were killed, WebSocket clients took part
    faults = re.search(r"^faults injected: \d+ \((.*)\)$", out, re.MULTILINE)
    assert faults
    counts = {k: int(v) for k, v in (p.rsplit(" ", 1) for p in faults.group(1).split(", "))}
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
    assert _figure(out, "WebSocket clients (ws:// through the proxy)") >= 2
    assert "result: PASS" in out
