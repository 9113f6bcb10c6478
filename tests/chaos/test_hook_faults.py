"""``--slow-disk`` and ``--clock-steps`` of the chaos runner (issue 32): the test-only hooks
inside the server process (:mod:`tests.chaos.server_hooks`) really move the server's wall
clock, and a short chaos run with both faults (each of them first, then one other) ends with
the exact ledger check; so does one with ``--memory-limit``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub.testing import wait_for
from tests.chaos.chaos_outcome import SHORT_RUN, ChaosRun, fast
from tests.chaos.hook_faults import HookedServer
from tests.chaos.server_hooks import CLOCK_OFFSET, write_atomic

pytestmark = pytest.mark.integration


def logged_on_at(lines: list[str], name: str) -> float | None:
    """Epoch seconds of the server's log line for ``name``'s logon (local time stamps)."""
    for line in lines:
        if f"'{name}'" in line and "logged on" in line:
            stamp = " ".join(line.split()[:2])
            return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


@pytest.mark.timeout(60)
def test_the_clock_hook_steps_the_server_wall_clock(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    server = HookedServer(hooks=hooks, data_dir=tmp_path / "data", name="hooked")
    server.start(30)
    try:
        for name, offset in (("before", 0.0), ("behind", -3600.0), ("after", 0.0)):
            write_atomic(hooks / CLOCK_OFFSET, repr(offset))
            time.sleep(0.2)  # the hook polls its file every 20 ms: 10x that
            with Client(name) as client:
                client.connect(server.uri())
                client.logon(10_000)
                now = time.time()
            wait_for(
                lambda n=name: logged_on_at(server.stderr_lines, n) is not None,
                timeout=20,
                what=f"{name}'s logon in the log",
            )
            stamped = logged_on_at(server.stderr_lines, name)
            assert stamped is not None
            assert abs(stamped - (now + offset)) < 60, (name, stamped, now)
    finally:
        server.stop()


@pytest.mark.timeout(240)
def test_slow_disk_and_clock_steps_lose_and_repeat_nothing(
    run_chaos: Callable[..., ChaosRun], chaos_seed: int
) -> None:
    """Both flagged faults first (``--min-faults 3``: whatever the timing), one other."""
    run = run_chaos(*fast(3), *SHORT_RUN, "--slow-disk", "--clock-steps")
    run.assert_ledger(chaos_seed)
    slow = re.search(
        r"slow disk: (\d+) episodes .* an fsync held in (\d+), deliveries while held in (\d+)",
        run.out,
    )
    assert slow is not None, run.out
    episodes, held, delivered = (int(g) for g in slow.groups())
    assert episodes >= 1 and held == episodes and delivered == episodes, run.out
    steps = r"server wall clock steps \(each undone 1-3 s later\): [+-]\d"
    assert re.search(steps, run.out), run.out


@pytest.mark.timeout(240)
def test_memory_squeezes_lose_and_repeat_nothing(
    run_chaos: Callable[..., ChaosRun], chaos_seed: int
) -> None:
    """``--memory-limit``: the server in a memory cgroup (checked at each squeeze), its limit
    squeezed to its RSS plus 8-32 MB at fault times; skipped where no cgroup can be made."""
    run = run_chaos(*fast(2), *SHORT_RUN, "--memory-limit", "200")
    if "--memory-limit: " in run.out and "cgroup" in run.out and run.returncode != 0:
        reason = next(line for line in run.out.splitlines() if "--memory-limit: " in line)
        if "cannot" in reason or "no cgroup" in reason:
            pytest.skip(reason)
    run.assert_ledger(chaos_seed)
    squeezes = re.search(r"memory squeezes: (\d+) \(limits MB: [\d, ]+; (\d+) refused", run.out)
    assert squeezes is not None and int(squeezes.group(1)) >= 1, run.out
