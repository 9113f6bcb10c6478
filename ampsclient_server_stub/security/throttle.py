"""Failed logons: a lockout against password guessing (issue #31: 261 wrong logons in 15 s
were answered as fast as they came).

After ``limit`` failed logons for one user name within ``lockout`` seconds, that user is
locked out for ``lockout`` seconds: every logon with the name is refused with AMPS' reason
``auth failure`` without the password being checked, so guessing gains nothing while it
lasts. The peer's host is counted the same way with four times the limit, so trying many
names from one place is bounded too. A successful logon clears the user's count.

The configuration (instance level, extensions: the AMPS guide documents no such setting):
``<LogonFailureLimit>`` (default 5; ``0`` turns the lockout off) and ``<LogonLockout>``
(default ``30s``). Pure state with an injected monotonic clock; memory is bounded (the
oldest entries go first).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_LOCKOUT", "DEFAULT_LOGON_FAILURE_LIMIT", "HOST_FACTOR", "LogonThrottle"]

DEFAULT_LOGON_FAILURE_LIMIT: Final = 5
DEFAULT_LOCKOUT: Final = 30.0
HOST_FACTOR: Final = 4
"""A host may fail this many times the per-user limit before it is locked out."""
_MAX_KEYS: Final = 10_000


class LogonThrottle:
    """Counts failed logons per user name and per host, and says who is locked out.

    Args:
        limit: failures within ``lockout`` seconds that lock a user out (``0``: never).
        lockout: the length of a lockout, and the window failures are counted in.
        clock: a monotonic clock (seconds).
    """

    def __init__(
        self,
        *,
        limit: int = DEFAULT_LOGON_FAILURE_LIMIT,
        lockout: float = DEFAULT_LOCKOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.lockout = lockout
        self._clock = clock
        self._failures: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        """``(kind, key)`` -> times of recent failures (kind ``user`` or ``host``)."""
        self._locked: dict[tuple[str, str], float] = {}
        """``(kind, key)`` -> the end of its lockout."""

    def locked(self, user: str, host: str | None) -> float | None:
        """Seconds left of the lockout of ``user`` or ``host`` (``None``: unknown, not
        counted); ``None`` when neither is locked out."""
        if not self.limit:
            return None
        now = self._clock()
        left = 0.0
        for key in (("user", user), ("host", host or "")):
            if key == ("host", ""):
                continue
            until = self._locked.get(key)
            if until is None:
                continue
            if until <= now:  # over: its failures are forgotten with it
                del self._locked[key]
                self._failures.pop(key, None)
            else:
                left = max(left, until - now)
        return left or None

    def failed(self, user: str, host: str | None) -> list[str]:
        """Count a failed logon; returns what it locked out now (``user 'x'``, ``host h``)."""
        if not self.limit:
            return []
        now = self._clock()
        started: list[str] = []
        limits = [("user", user, self.limit)]
        if host:
            limits.append(("host", host, self.limit * HOST_FACTOR))
        for kind, key, limit in limits:
            times = self._failures.pop((kind, key), [])
            times = [t for t in times if now - t < self.lockout]
            times.append(now)
            self._failures[(kind, key)] = times
            if len(times) >= limit and (kind, key) not in self._locked:
                self._locked[(kind, key)] = now + self.lockout
                started.append(f"{kind} {key!r}")
        while len(self._failures) > _MAX_KEYS:
            self._failures.popitem(last=False)
        return started

    def succeeded(self, user: str) -> None:
        """A successful logon clears the user's failures."""
        self._failures.pop(("user", user), None)
