"""The chaos tests' seed: fixed by default, so a run can be repeated; printed with the run.

``AMPSCLIENT_CHAOS_SEED=<n>`` picks another seed, ``AMPSCLIENT_CHAOS_SEED=random`` a fresh
one each run (exploration).
"""

from __future__ import annotations

import os
import random

import pytest

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
