"""The rate and count line on stderr, and the summary at the end of a run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress"]

_BAR = 24


class Progress:
    """Counts messages and shows a rate line (a bar when the total is known) on ``stream``.

    The line is drawn once per ``interval`` seconds, and not at all for runs shorter than
    that. On a terminal it is redrawn in place; otherwise one line is written per interval.

    Args:
        label: the command's name, at the start of each line.
        stream: where to write (stderr).
        enabled: ``False`` for ``--quiet``: nothing is written.
        total: the end of the run in ``unit``s, when known (a bar is drawn).
        unit: what ``total`` and :meth:`advance` count: ``"msgs"`` or ``"bytes"``.
        interval: seconds between two lines.
        clock: a monotonic clock in seconds.
    """

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO,
        enabled: bool = True,
        total: int | None = None,
        unit: str = "msgs",
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.count = 0
        """Messages so far."""
        self.done = 0
        """Progress towards ``total`` (in ``unit``s)."""
        self.total = total
        self.unit = unit
        self._stream = stream
        self._enabled = enabled
        self._tty = enabled and stream.isatty()
        self._interval = interval
        self._clock = clock
        self.started = clock()
        self._next = self.started + interval
        self._drawn = False

    def restart(self) -> None:
        """Count time from now (once connected, so that rates are about messages)."""
        self.started = self._clock()
        self._next = self.started + self._interval

    @property
    def elapsed(self) -> float:
        """Seconds since the start."""
        return self._clock() - self.started

    def tick(self, advance: int = 1) -> None:
        """One more message; ``advance`` units towards the total (bytes for file input)."""
        self.count += 1
        self.done += advance
        if self._enabled:
            now = self._clock()
            if now >= self._next:
                self._next = now + self._interval
                self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = now - self.started
        rate = self.count / elapsed if elapsed > 0 else 0.0
        line = f"{self.label}: {self.count:,} msgs, {rate:,.0f} msg/s, {elapsed:.1f} s"
        if self.total:
            share = min(1.0, self.done / self.total)
            filled = int(share * _BAR)
            bar = "#" * filled + "-" * (_BAR - filled)
            line = f"{self.label}: [{bar}] {share:4.0%} {line[len(self.label) + 2 :]}"
        if self._tty:
            self._stream.write("\r" + line + "\x1b[K")
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
        self._drawn = True

    def summary(self, what: str = "", *, interrupted: bool = False) -> str:
        """Write and return the final line: count, time, rate, and ``what`` (extra facts)."""
        elapsed = self.elapsed
        rate = self.count / elapsed if elapsed > 0 else 0.0
        line = f"{self.label}: {self.count:,} messages in {elapsed:.2f} s ({rate:,.0f} msg/s)"
        if what:
            line += f", {what}"
        if interrupted:
            line += ", interrupted"
        if self._enabled:
            if self._tty and self._drawn:
                self._stream.write("\r\x1b[K")
            self._stream.write(line + "\n")
            self._stream.flush()
        return line
