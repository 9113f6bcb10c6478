"""Time the test moves by hand: :class:`ManualTime` (a clock and ``call_later`` timers for a
broker) and :class:`ReceiveClock` (the journal's nanosecond receive clock, pinned)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = ["ManualTime", "ManualTimer", "ReceiveClock"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ManualTimer:
    """One scheduled callback of :class:`ManualTime` (``asyncio.TimerHandle``'s ``cancel``)."""

    __slots__ = ("callback", "cancelled", "delay", "when")

    def __init__(self, when: float, delay: float, callback: Callable[[], None]) -> None:
        self.when = when
        """The :meth:`ManualTime.clock` time it is due at."""
        self.delay = delay
        """The delay it was scheduled with."""
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback."""
        self.cancelled = True


class ManualTime:
    """A clock and a timer list that move only when the test says so.

    Pass :meth:`clock` and :meth:`call_later` to the broker (``clock=``, ``call_later=``).

    Args:
        now: the clock's start value (seconds).
    """

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now
        """The clock's value."""
        self.timers: list[ManualTimer] = []
        """Timers not run yet (cancelled ones included)."""

    def clock(self) -> float:
        """The current time."""
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> ManualTimer:
        """Schedule ``callback`` ``delay`` seconds from :attr:`now`."""
        timer = ManualTimer(self.now + delay, delay, callback)
        self.timers.append(timer)
        return timer

    @property
    def pending(self) -> list[ManualTimer]:
        """Timers neither run nor cancelled, in the order they were scheduled."""
        return [t for t in self.timers if not t.cancelled]

    def advance_to(self, target: float) -> None:
        """Move the clock to ``target``, running every timer due by then in time order (the
        clock reads each timer's due time while it runs; timers they schedule run too if due)."""
        while True:
            due = [t for t in self.pending if t.when <= target]
            if not due:
                break
            timer = min(due, key=lambda t: t.when)
            self.timers.remove(timer)
            self.now = max(self.now, timer.when)
            timer.callback()
        self.now = max(self.now, target)

    def advance(self, seconds: float) -> None:
        """:meth:`advance_to` ``now + seconds``."""
        self.advance_to(self.now + seconds)

    def fire(self) -> None:
        """Run every pending timer now, whatever its due time, without moving the clock;
        timers they schedule wait for the next call."""
        timers, self.timers = self.timers, []
        for timer in timers:
            if not timer.cancelled:
                timer.callback()


class ReceiveClock:
    """A nanosecond clock pinned where the test says (the journal's receive clock, replaced
    with ``monkeypatch.setattr(journal_module, "_time_ns", clock)`` or passed as a clock).

    Args:
        us: the start value in microseconds since the epoch.
        step_us: how far each reading moves the clock (1: every record a microsecond apart).
    """

    def __init__(self, us: int = 0, *, step_us: int = 0) -> None:
        self.us = us
        """The next reading, in microseconds since the epoch."""
        self.step_us = step_us

    def at(self, when: datetime) -> None:
        """Pin the next reading to ``when`` (an aware datetime)."""
        self.us = (when - _EPOCH) // timedelta(microseconds=1)

    def __call__(self) -> int:
        now = self.us
        self.us += self.step_us
        return now * 1000
