"""The chaos run's network faults beyond cut and stall (``--net-faults``, issue 32): what
``netem`` would do, done by the loopback proxy (this machine's kernel has no netem).

Each fault is switched on on the proxies (open connections included), held a while, and
switched off again:

* ``latency``: 20-100 ms each way, jitter a quarter of it, for 1-3 s;
* ``fragment``: writes cut into pieces of 1..N bytes (N one of 3, 16, 256), for 1-3 s;
* ``coalesce``: up to 4-32 chunks merged into one write (5 ms window), for 1-3 s;
* ``bandwidth``: 50 or 200 kB/s each way, for 1-3 s;
* ``half_open``: a one-way partition: one direction of ONE proxy (one with clients on it)
  dropped (bytes discarded, sockets open) for twice the clients' heartbeat interval plus
  0.5-1.5 s, then healed (connections that lost bytes are aborted). The run measures the
  detection (every connection open at the start closed: by the client's heartbeat timeout
  for ``to_client``, by the server's for ``to_server``) and the recovery: in replicated mode
  the failover (as many connections open through the other proxies), with one server the
  reconnection after the heal (the clients cannot log on through a partitioned path).
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # not imported at run time: every chaos worker process imports this module
    # (through tests.chaos.run), and ampsclient_server_stub.testing imports the whole server
    from ampsclient_server_stub.testing.netem import Direction
    from ampsclient_server_stub.testing.proxy import LoopbackProxy

NET_FAULTS: Final = ("latency", "fragment", "coalesce", "bandwidth", "half_open")
"""The kinds ``--net-faults`` accepts (``all``: every one)."""

_RECOVERY_WAIT: Final = 15.0
"""Seconds to wait for the connections to come back after a partition."""


def parse_net_faults(raw: str) -> list[str]:
    """``--net-faults latency,half_open`` (or ``all``) -> the kinds, checked."""
    if not raw:
        return []
    kinds = list(NET_FAULTS) if raw.strip() == "all" else [k.strip() for k in raw.split(",")]
    unknown = [k for k in kinds if k not in NET_FAULTS]
    if unknown:
        raise SystemExit(f"--net-faults: unknown kind(s) {unknown}; known: {', '.join(NET_FAULTS)}")
    return kinds


@dataclass
class NetReport:
    """Figures of the network faults of one run."""

    partitions: Counter[str] = field(default_factory=Counter)
    detect_s: list[float] = field(default_factory=list)
    """Per partition: seconds until every connection open at its start was closed."""
    undetected: int = 0
    """Partitions healed before every connection open at their start was closed."""
    recover_s: list[float] = field(default_factory=list)
    """Per partition: seconds until the connections were back. Replicated mode (failover):
    from the detection until as many connections were open through the other proxies; one
    server: from the heal until as many were open through the healed proxy."""
    unrecovered: int = 0
    failover: bool = False

    def lines(self) -> list[str]:
        if not self.partitions:
            return []

        def spread(values: list[float]) -> str:
            if not values:
                return "none"
            return (
                f"min {min(values):.2f} s, median {statistics.median(values):.2f} s, "
                f"max {max(values):.2f} s"
            )

        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.partitions.items()))
        return [
            f"one-way partitions: {sum(self.partitions.values())} ({kinds})",
            f"half-open connections detected (all closed) in: {spread(self.detect_s)}"
            f" ({self.undetected} partitions healed first)",
            (
                "failover (as many connections open through the other proxies), from the"
                " detection: "
                if self.failover
                else "connections back through the healed proxy, from the heal: "
            )
            + f"{spread(self.recover_s)} ({self.unrecovered} not back in time)",
        ]


def _hold(rng: random.Random) -> float:
    return rng.uniform(1.0, 3.0)


def inject(
    fault: str,
    proxies: list[LoopbackProxy],
    rng: random.Random,
    report: NetReport,
    *,
    heartbeat: float,
    failover: bool,
) -> None:
    """Inject one network fault on ``proxies`` and end it (blocks while it lasts).

    Args:
        failover: the clients of a partitioned proxy reconnect through another one
            (replicated mode), so recovery does not wait for the heal.
    """
    if fault == "half_open":
        _partition(proxies, rng, report, heartbeat=heartbeat, failover=failover)
        return
    if fault == "latency":
        delay = rng.uniform(0.02, 0.1)
        for proxy in proxies:
            proxy.latency(delay, jitter=delay / 4)
    elif fault == "fragment":
        size = rng.choice((3, 16, 256))
        for proxy in proxies:
            proxy.fragment(size)
    elif fault == "coalesce":
        chunks = rng.randint(4, 32)
        for proxy in proxies:
            proxy.coalesce(chunks, window=0.005)
    elif fault == "bandwidth":
        rate = rng.choice((50_000.0, 200_000.0))
        for proxy in proxies:
            proxy.bandwidth(rate)
    else:
        raise ValueError(f"unknown network fault {fault!r}")
    time.sleep(_hold(rng))
    for proxy in proxies:
        proxy.clear_shapes()


def _partition(
    proxies: list[LoopbackProxy],
    rng: random.Random,
    report: NetReport,
    *,
    heartbeat: float,
    failover: bool,
) -> None:
    wait_until = time.monotonic() + _RECOVERY_WAIT  # clients may be reconnecting (a cut)
    while not (busy := [p for p in proxies if p.open_connections]):
        if time.monotonic() > wait_until:
            break
        time.sleep(0.02)
    proxy = rng.choice(busy or proxies)  # one with clients to cut off
    others = [p for p in proxies if p is not proxy]
    direction: Direction = rng.choice(("to_client", "to_server"))
    before = proxy.connection_numbers
    expected = sum(p.open_connections for p in proxies)  # through the others, after
    t0 = time.monotonic()
    proxy.partition(direction)
    report.partitions[direction] += 1
    end = t0 + 2 * heartbeat + rng.uniform(0.5, 1.5)
    detected: float | None = None
    moved: float | None = None
    while time.monotonic() < end:
        if detected is None and not before & proxy.connection_numbers:
            detected = time.monotonic() - t0
        # the failover: after the detection, as many connections through the others
        others_open = sum(p.open_connections for p in others) if failover else 0
        if failover and detected is not None and moved is None and others_open >= expected:
            moved = time.monotonic() - t0 - detected
        time.sleep(0.02)
    healed = time.monotonic()
    proxy.heal()
    if not before:
        return  # nobody was connected through it (restarting): nothing to measure
    if detected is None:
        report.undetected += 1
    else:
        report.detect_s.append(detected)
    if failover:
        deadline = time.monotonic() + _RECOVERY_WAIT  # not moved before the heal: any proxy
        while moved is None and detected is not None and time.monotonic() < deadline:
            if sum(p.open_connections for p in proxies) >= expected:
                moved = time.monotonic() - t0 - detected
            time.sleep(0.02)
        if moved is None:
            report.unrecovered += 1
        else:
            report.recover_s.append(moved)
        return
    deadline = healed + _RECOVERY_WAIT
    while time.monotonic() < deadline and proxy.open_connections < len(before):
        time.sleep(0.02)
    if proxy.open_connections >= len(before):
        report.recover_s.append(time.monotonic() - healed)
    else:
        report.unrecovered += 1
