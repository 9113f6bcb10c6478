"""Link shaping for the fault proxy: what Linux ``netem``/``tbf`` would do to a TCP stream.

A core with no I/O and no clock of its own (the time is passed in): :class:`LinkShape` says
how one direction of a proxied connection behaves, :class:`DirectionShaper` turns the bytes
read from the sender into timed writes for the receiver, :class:`TokenBucket` limits the rate.
:class:`~ampsclient_server_stub.testing.proxy.LoopbackProxy` does the reading, waiting and
writing.

What each setting does to one direction (``to_server``: client to server, ``to_client``: the
other way):

* ``latency`` / ``jitter``: every chunk read is held ``latency ± jitter`` seconds (uniform).
  Bytes never overtake each other (TCP does not reorder bytes): a chunk is never released
  before the chunk read ahead of it, so a long delay drawn for one chunk delays everything
  behind it.
* ``fragment``: every write is cut into pieces of 1..``fragment`` bytes (sizes drawn at
  random), each written on its own.
* ``coalesce``: up to ``coalesce`` chunks read from the sender (all that arrive within
  ``coalesce_window`` seconds of the first) are merged into one write.
* ``drop``: a one-way partition: the bytes are read and discarded; both sockets stay open.
* ``bandwidth``: a token bucket of ``burst`` bytes refilled at ``bandwidth`` bytes/s.

Every random draw comes from a :class:`random.Random` seeded per connection and direction
(see :func:`direction_rng`), so a run with the same seed and the same traffic shapes it the
same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "DIRECTIONS",
    "Direction",
    "DirectionShaper",
    "DirectionStats",
    "LinkShape",
    "TokenBucket",
    "direction_rng",
]

Direction = Literal["to_server", "to_client"]
"""One direction of a proxied connection: ``to_server`` (client to server) or ``to_client``."""

DIRECTIONS: Final[tuple[Direction, Direction]] = ("to_server", "to_client")

MAX_LATENCY: Final = 60.0
"""Seconds: the longest latency (plus jitter) a shape accepts; every wait stays bounded."""

MAX_COALESCE_WINDOW: Final = 10.0
"""Seconds: the longest a chunk may be held waiting for others to merge with."""


@dataclass(frozen=True)
class LinkShape:
    """How one direction of a proxied connection behaves (the default: a plain wire).

    Args:
        latency: seconds every chunk is held (0 to :data:`MAX_LATENCY`).
        jitter: ± seconds drawn uniformly around ``latency`` (at most ``latency``).
        fragment: cut writes into pieces of 1..``fragment`` bytes (0: no cutting).
        coalesce: merge up to this many chunks into one write (0 or 1: no merging).
        coalesce_window: seconds to wait for further chunks to merge (when ``coalesce``).
        bandwidth: bytes per second (0: unlimited).
        burst: the token bucket's size in bytes (0: a tenth of a second's worth, at least 1).
        drop: discard every byte (a one-way partition; the sockets stay open).

    Raises:
        ValueError: a setting out of range, named.
    """

    latency: float = 0.0
    jitter: float = 0.0
    fragment: int = 0
    coalesce: int = 0
    coalesce_window: float = 0.005
    bandwidth: float = 0.0
    burst: int = 0
    drop: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.latency <= MAX_LATENCY:
            raise ValueError(f"latency must be 0..{MAX_LATENCY:g} s, not {self.latency!r}")
        if not 0.0 <= self.jitter <= self.latency:
            raise ValueError(f"jitter must be 0..latency ({self.latency:g} s), not {self.jitter!r}")
        if self.fragment < 0:
            raise ValueError(f"fragment must be >= 0 bytes, not {self.fragment!r}")
        if self.coalesce < 0:
            raise ValueError(f"coalesce must be >= 0 chunks, not {self.coalesce!r}")
        if not 0.0 < self.coalesce_window <= MAX_COALESCE_WINDOW:
            raise ValueError(
                f"coalesce_window must be in (0, {MAX_COALESCE_WINDOW:g}] s, "
                f"not {self.coalesce_window!r}"
            )
        if self.bandwidth != 0.0 and self.bandwidth < 1.0:
            raise ValueError(
                f"bandwidth must be 0 (unlimited) or >= 1 byte/s, not {self.bandwidth!r}"
            )
        if self.burst < 0:
            raise ValueError(f"burst must be >= 0 bytes, not {self.burst!r}")

    @property
    def plain(self) -> bool:
        """Nothing to do: bytes go through as read."""
        return self == _PLAIN

    @property
    def bucket_size(self) -> int:
        """The token bucket's size in bytes (``burst``, or a tenth of a second's worth)."""
        return self.burst or max(1, int(self.bandwidth / 10.0))


_PLAIN: Final = LinkShape()


@dataclass
class DirectionStats:
    """What one direction of a proxy did, over all its connections."""

    forwarded: int = 0
    """Bytes written to the receiver."""
    writes: int = 0
    """Writes to the receiver (a fragmented chunk counts one per piece)."""
    dropped: int = 0
    """Bytes discarded by a one-way partition."""


def direction_rng(seed: int | None, connection: int, direction: Direction) -> random.Random:
    """The random source of one direction of one connection: seeded from the proxy's seed,
    the connection's number (1, 2, ... in accept order) and the direction; ``seed=None``
    draws a fresh seed."""
    if seed is None:
        return random.Random()
    return random.Random(f"{seed}:{connection}:{direction}")


class TokenBucket:
    """A token bucket: ``rate`` bytes/s, at most ``size`` bytes of credit.

    :meth:`reserve` takes ``n`` bytes' worth of tokens and says how long to wait before
    sending them; the credit may go negative (a debt paid back by the refill), so ``K`` bytes
    never leave faster than ``(K - size) / rate`` seconds.
    """

    __slots__ = ("_last", "rate", "size", "tokens")

    def __init__(self, rate: float, size: int, now: float) -> None:
        self.rate = rate
        self.size = size
        self.tokens = float(size)
        self._last = now

    def reserve(self, n: int, now: float) -> float:
        """Take ``n`` bytes' worth of tokens at ``now``; returns the seconds to wait first."""
        self.tokens = min(float(self.size), self.tokens + (now - self._last) * self.rate)
        self._last = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class DirectionShaper:
    """The shaping state of one direction of one connection (no I/O).

    Args:
        rng: its random source (:func:`direction_rng`).
    """

    __slots__ = ("_bucket", "_last_release", "rng")

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._last_release = 0.0
        self._bucket: TokenBucket | None = None

    def release_time(self, now: float, shape: LinkShape) -> float:
        """When a chunk read at ``now`` may be written: ``now + latency ± jitter``, never
        before the chunk read ahead of it (bytes keep their order)."""
        delay = shape.latency
        if shape.jitter:
            delay += self.rng.uniform(-shape.jitter, shape.jitter)
        release = max(now + delay, self._last_release)
        self._last_release = release
        return release

    def pieces(self, data: bytes, shape: LinkShape) -> list[bytes]:
        """``data`` cut into the writes to make: pieces of 1..``fragment`` bytes, and with a
        bandwidth limit none larger than the bucket (so the rate stays smooth)."""
        limit = shape.bucket_size if shape.bandwidth else 0
        if not shape.fragment and (not limit or len(data) <= limit):
            return [data]
        out: list[bytes] = []
        i, n = 0, len(data)
        while i < n:
            size = self.rng.randint(1, shape.fragment) if shape.fragment else n - i
            if limit:
                size = min(size, limit)
            out.append(data[i : i + size])
            i += size
        return out

    def send_delay(self, n: int, now: float, shape: LinkShape) -> float:
        """Seconds to wait before writing ``n`` bytes at ``now`` (the bandwidth limit)."""
        if not shape.bandwidth:
            self._bucket = None
            return 0.0
        bucket = self._bucket
        if bucket is None or bucket.rate != shape.bandwidth or bucket.size != shape.bucket_size:
            bucket = self._bucket = TokenBucket(shape.bandwidth, shape.bucket_size, now)
        return bucket.reserve(n, now)
