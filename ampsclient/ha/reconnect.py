"""Reconnect delay strategies, on tenacity's wait functions.

Times are in **milliseconds** like the official client's. A strategy keeps state per URI: the
first attempt at a URI (or the first after a success) has no delay; each failure at that URI
grows the next delay; after ``maximum_retry_time`` ms without a success,
:meth:`get_connect_wait_duration` raises :class:`~ampsclient.exceptions.RetryLimitError`.
"""

from __future__ import annotations

import abc
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import tenacity

from ..exceptions import AMPSConnectionError

__all__ = [
    "ExponentialDelayStrategy",
    "FixedDelayStrategy",
    "ReconnectDelayStrategy",
    "RetryLimitError",
]


class RetryLimitError(AMPSConnectionError):
    """The strategy's maximum retry time passed without a successful connection."""


@dataclass(slots=True)
class _UriState:
    attempts: int = 0
    first_failure: float | None = None


class ReconnectDelayStrategy(abc.ABC):
    """How long to wait before the next connection attempt at a URI."""

    def __init__(
        self, *, maximum_retry_time: float = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.maximum_retry_time = maximum_retry_time
        """Give up after this many ms without success (0 = never)."""
        self._clock = clock
        self._state: dict[str, _UriState] = {}
        self._started: float | None = None

    @abc.abstractmethod
    def _delay(self, attempts: int) -> float:
        """Delay in ms before attempt number ``attempts`` (1 = the first retry)."""

    def get_connect_wait_duration(self, uri: str) -> int:
        """Milliseconds to wait before connecting to ``uri`` now (official name).

        Raises:
            RetryLimitError: ``maximum_retry_time`` has passed since the first failure.
        """
        now = self._clock()
        if self._started is None:
            self._started = now
        elif self.maximum_retry_time and (now - self._started) * 1000 >= self.maximum_retry_time:
            raise RetryLimitError(
                f"gave up reconnecting after {self.maximum_retry_time:.0f} ms without success"
            )
        state = self._state.setdefault(uri, _UriState())
        attempts = state.attempts
        state.attempts += 1
        if attempts == 0:
            return 0
        return round(self._delay(attempts))

    def reset(self) -> None:
        """A connection succeeded: forget every failure."""
        self._state.clear()
        self._started = None

    get_connect_wait_time = get_connect_wait_duration
    """Earlier name of :meth:`get_connect_wait_duration`."""


class ExponentialDelayStrategy(ReconnectDelayStrategy):
    """Exponential backoff per URI with jitter (official defaults: 200 ms, 20 s, x2, no limit).

    Args:
        initial_delay: ms before the first retry of a URI.
        maximum_delay: cap on any delay (ms).
        backoff_exponent: each retry multiplies the delay by this.
        maximum_retry_time: give up after this many ms without success (0 = never).
        jitter: random extra delay of up to ``jitter * initial_delay`` ms.
    """

    def __init__(
        self,
        initial_delay: float = 200,
        maximum_delay: float = 20_000,
        backoff_exponent: float = 2.0,
        maximum_retry_time: float = 0,
        jitter: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(maximum_retry_time=maximum_retry_time, clock=clock)
        self.initial_delay = initial_delay
        self.maximum_delay = maximum_delay
        self.backoff_exponent = backoff_exponent
        self.jitter = jitter
        self._wait = tenacity.wait_exponential(
            multiplier=initial_delay, max=maximum_delay, exp_base=backoff_exponent
        )
        self._rng = rng or random.Random()

    def _delay(self, attempts: int) -> float:
        state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]
        state.attempt_number = attempts
        base = float(self._wait(state))
        extra = self._rng.uniform(0, self.jitter * self.initial_delay) if self.jitter else 0.0
        return min(self.maximum_delay, base + extra)


class FixedDelayStrategy(ReconnectDelayStrategy):
    """The same delay before every retry (official defaults: 200 ms, no limit).

    Args:
        initial_delay: ms between attempts at a URI.
        maximum: give up after this many ms without success (0 = never).
    """

    def __init__(
        self,
        initial_delay: float = 200,
        maximum: float = 0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(maximum_retry_time=maximum, clock=clock)
        self.initial_delay = initial_delay
        self._wait = tenacity.wait_fixed(initial_delay)

    def _delay(self, attempts: int) -> float:
        state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]
        state.attempt_number = attempts
        return float(self._wait(state))
