"""The engine's clocks: the wall clock for what AMPS stamps (timestamps, bookmarks, SOW
expiration), and a steady clock for intervals that must not jump.

A step of the wall clock (NTP correcting a drifted machine, an operator's ``date``) must not
expire every queue lease at once (a step forward) or hold them for an hour (a step back):
:func:`steady_clock` reads like the wall clock but advances with ``time.monotonic``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["steady_clock"]


def steady_clock(
    *,
    wall: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> Callable[[], float]:
    """A clock that reads ``wall()`` when made and advances with ``monotonic`` from then on:
    epoch seconds that a step of the wall clock does not move."""
    base = wall()
    start = monotonic()

    def now() -> float:
        return base + (monotonic() - start)

    return now
