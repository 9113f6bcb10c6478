"""Heartbeat timing: when to beat, when the server has been silent too long (no clock: the
time is passed in)."""

from __future__ import annotations

from typing import Final

__all__ = ["HEARTBEAT_BEAT", "Heartbeat"]

HEARTBEAT_BEAT: Final = b'{"c":"heartbeat","o":"beat"}'
"""The payload of a heartbeat beat (sent on schedule and in reply to the server's)."""


class Heartbeat:
    """The heartbeat settings of a connection and its schedule.

    The core owns one; it sends what :meth:`start` and :meth:`tick` ask for and turns a
    silence into a ``HeartbeatTimedOut`` event.
    """

    __slots__ = ("_last_rx", "_next_beat", "interval", "timeout")

    def __init__(self) -> None:
        self.interval = 0.0
        """Seconds between heartbeats (0: none)."""
        self.timeout = 0.0
        """Seconds of silence from the server after which the connection is dead."""
        self._last_rx = 0.0
        self._next_beat = 0.0

    def set(self, interval: float, timeout: float | None = None) -> None:
        """Heartbeats every ``interval`` s; dead after ``timeout`` s (default ``2*interval``)."""
        self.interval = float(interval)
        self.timeout = float(timeout) if timeout else 2.0 * float(interval)

    def start(self, now: float) -> tuple[str, float] | None:
        """Start the schedule at ``now``. Returns the options of the heartbeat command to send
        (``start,<interval>``) and how often
        (seconds) :meth:`tick` should be called, or ``None`` when no heartbeat is set."""
        interval = self.interval
        if not interval:
            return None
        iv = int(interval) if interval.is_integer() else interval
        self._last_rx = now
        self._next_beat = now + interval
        # a tenth of the shorter period: a silent server is noticed within ~10 % of the
        # timeout (ten wake-ups a second for a 1 s heartbeat)
        timeout = self.timeout
        every = min(interval, timeout) / 10.0 if timeout else interval / 10.0
        return f"start,{iv}", every

    def tick(self, now: float, traffic: bool) -> tuple[float | None, bool]:
        """The time is ``now``; ``traffic`` when something arrived since the last tick.

        Returns:
            ``(silence, beat)``: the seconds of silence when longer than the timeout (else
            ``None``), and whether a beat is due (it is then scheduled for the next interval).
        """
        if traffic:
            self._last_rx = now
        elif now - self._last_rx > self.timeout:
            return now - self._last_rx, False
        if now >= self._next_beat:
            self._next_beat = now + self.interval
            return None, True
        return None, False
