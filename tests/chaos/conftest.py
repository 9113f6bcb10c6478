"""The chaos tests' seed: fixed by default, so a run can be repeated; printed with the run.

``AMPSCLIENT_CHAOS_SEED=<n>`` picks another seed, ``AMPSCLIENT_CHAOS_SEED=random`` a fresh
one each run (exploration). ``run_chaos`` runs the chaos runner as a subprocess, ``run_soak``
the soak script; their :class:`~tests.chaos.chaos_outcome.ChaosRun` holds the output and the
ledger checks.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.chaos_outcome import ROOT, ChaosRun

DEFAULT_SEED = 20_261_123
"""The seed every run uses unless ``AMPSCLIENT_CHAOS_SEED`` says otherwise."""


@pytest.fixture
def chaos_seed() -> int:
    """The seed of this run (printed, and named in the failure message by the tests)."""
    raw = os.environ.get("AMPSCLIENT_CHAOS_SEED", "").strip()
    if raw.lower() == "random":
        seed = random.randrange(1 << 30)
    elif raw:
        seed = int(raw)
    else:
        seed = DEFAULT_SEED
    print(f"chaos seed {seed} (AMPSCLIENT_CHAOS_SEED={raw or '<unset>'})")
    return seed


def run_python(*args: str) -> ChaosRun:
    """``python *args`` in the repository (230 s at most): its exit status and everything it
    printed (printed here too, so a failure shows the figures)."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    out = done.stdout + done.stderr
    print(out)
    return ChaosRun(done.returncode, out)


@pytest.fixture
def run_chaos(tmp_path: Path, chaos_seed: int) -> Callable[..., ChaosRun]:
    """Run ``python -m tests.chaos.run`` with this test's seed and work directory plus the
    given arguments."""

    def run(*args: str) -> ChaosRun:
        return run_python(
            *("-m", "tests.chaos.run", "--seed", str(chaos_seed)),
            *("--work", str(tmp_path / "chaos"), *args),
        )

    return run


@pytest.fixture
def run_soak(tmp_path: Path, chaos_seed: int) -> Callable[..., ChaosRun]:
    """Run ``benchmarks/soak.py`` with this test's seed and work directory
    (``tmp_path / "soak"``) plus the given arguments."""

    def run(*args: str) -> ChaosRun:
        return run_python(
            *(str(ROOT / "benchmarks" / "soak.py"), "--seed", str(chaos_seed)),
            *("--work", str(tmp_path / "soak"), *args),
        )

    return run
