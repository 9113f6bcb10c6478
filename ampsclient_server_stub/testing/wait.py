"""Poll a condition until it holds, with a deadline: the tests' replacement for bare sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["wait_for", "wait_for_async"]

_POLL_INTERVAL = 0.005


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Call ``condition`` every 5 ms until it returns true.

    Args:
        condition: checked first immediately, then after each poll interval.
        timeout: seconds (measured with :func:`time.monotonic`) before giving up.
        what: what is being waited for, named in the failure message.

    Raises:
        AssertionError: ``condition`` still false ``timeout`` seconds after the first check.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(_POLL_INTERVAL)


async def wait_for_async(
    condition: Callable[[], bool],
    timeout: float = 10.0,
    what: str = "condition",
    *,
    poll: float = 0.001,
) -> None:
    """:func:`wait_for` for a coroutine: the event loop keeps running between the checks.

    Args:
        condition: checked first immediately, then after each ``poll`` seconds.
        timeout: seconds (measured with :func:`time.monotonic`) before giving up.
        what: what is being waited for, named in the failure message.
        poll: seconds between checks (``asyncio.sleep``, so the loop's other tasks run).

    Raises:
        AssertionError: ``condition`` still false ``timeout`` seconds after the first check.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(poll)
