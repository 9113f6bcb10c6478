"""Conflated subscriptions: the options ``conflation=<interval>`` and ``conflation_key=[/f,...]``.

A conflated subscription does not get every message: the server *holds* the latest message per
conflation key for the interval and delivers it at the end of the interval (AMPS "Conflated
Subscriptions"; seed 000, "Conflation and Bookmark Subscriptions"):

* the first message with a key that is not held starts a hold of ``interval`` for that key
  (each key has its own hold); a later message with the same key replaces the held one; when
  the interval is over the held message is delivered and the key is free again;
* the conflation key is the value at each ``conflation_key`` path of the message (plus the
  topic, so a regex subscription never mixes two topics' keys); without ``conflation_key`` it
  is the SOW key of the record, which only a SOW topic has (anything else is refused with
  ``invalid options``);
* memory is one held message per key, and unsubscribing or disconnecting drops the holds and
  cancels the timer.

For a **bookmark** subscription the holds live on the *journal's* timeline: a hold started by a
record received at ``t`` takes in the later records of the key received before
``t + interval`` and is released as soon as the replay reaches a record received at or after
that time, however fast the replay runs; the delivered message carries the bookmark of the
**first** record of its hold and the data (and ``k``, ``x``, ``ts``) of the last. Once the
replay has caught up, the journal's timeline is the wall clock, so the live part behaves like a
regular conflated subscription.

This module holds the data structures; the broker does the routing and the timers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from ampsclient.exceptions import InvalidOptionsError
from ampsclient.protocol.options import parse_duration

from ..errors import RequestError
from .journal import RecordRow
from .payload import decode, lookup_path, parse_path

__all__ = [
    "ConflationError",
    "ConflationSpec",
    "Holds",
    "LiveConflation",
    "LiveHeld",
    "ReplayConflation",
    "ReplayHeld",
    "parse_conflation",
]

_REASON: Final = "invalid options"

_V = TypeVar("_V")


class ConflationError(RequestError):
    """Conflation options that cannot be honoured; ``reason`` is the AMPS reason string."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.reason = _REASON


@dataclass(frozen=True, slots=True)
class ConflationSpec:
    """What a subscription asked for.

    Attributes:
        interval: the hold, in seconds (> 0).
        keys: the ``conflation_key`` paths, or ``None`` for the SOW key of the record.
    """

    interval: float
    keys: tuple[str, ...] | None

    @property
    def interval_us(self) -> int:
        """The interval in microseconds (the journal's unit), at least 1."""
        return max(1, round(self.interval * 1_000_000))

    def key(self, topic: str, doc: Any, sow_key: str | None) -> Hashable:
        """The conflation key of a message of ``topic`` (``doc``: its parsed payload, or
        ``None``; ``sow_key``: its SOW key when it has one)."""
        if self.keys is None:
            return (topic, sow_key)
        return (topic, *(_hashable(lookup_path(doc, path)) for path in self.keys))


def _hashable(value: Any) -> Hashable:
    """Key values as dictionary keys (objects and arrays by their ``repr``)."""
    if isinstance(value, dict | list):
        return repr(value)
    return value  # type: ignore[no-any-return]


def _parse_keys(text: str) -> tuple[str, ...]:
    """``[/a,/b]`` or ``/a`` or ``/a,/b`` -> ``("/a", "/b")``."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    paths = tuple(part.strip() for part in body.split(",") if part.strip())
    if not paths:
        raise ConflationError(f"conflation_key={text!r}: no field")
    for path in paths:
        try:
            if not parse_path(path):
                raise ValueError("'/' is not a field")
        except ValueError as exc:
            raise ConflationError(f"conflation_key={text!r}: {exc}") from None
    return paths


def parse_conflation(options: Mapping[str, str], *, has_sow_key: bool) -> ConflationSpec | None:
    """The conflation a subscription asked for in its options, or ``None``.

    Args:
        options: the parsed ``o`` header.
        has_sow_key: whether the subscribed topic is a SOW topic (whose key is the default).

    Raises:
        ConflationError: a malformed or non-positive interval, a malformed key, or no key for a
            topic that has no SOW key.
    """
    text = options.get("conflation")
    if text is None:
        return None
    try:
        interval = parse_duration(text)
    except InvalidOptionsError as exc:
        raise ConflationError(f"conflation={text!r}: {exc}") from None
    if interval <= 0:
        raise ConflationError(f"conflation={text!r}: the interval must be above 0")
    key_text = options.get("conflation_key")
    keys = _parse_keys(key_text) if key_text else None
    if keys is None and not has_sow_key:
        raise ConflationError(
            "conflation needs conflation_key=[/field,...] on a topic that is not a SOW topic"
        )
    return ConflationSpec(interval, keys)


class Holds(Generic[_V]):
    """The held messages of one subscription: one value per key, released in the order their
    holds started, each at its own deadline (a number on whatever timeline the caller uses).

    A key that was dropped (:meth:`pop`) and held again is not released early by its old
    deadline: each entry remembers its own.
    """

    __slots__ = ("_entries", "_order")

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[float, _V]] = {}
        self._order: deque[tuple[float, Hashable]] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def values(self) -> list[_V]:
        """Every held value (in no particular order)."""
        return [value for _deadline, value in self._entries.values()]

    def get(self, key: Hashable) -> _V | None:
        """The value held for ``key``, if any."""
        entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def hold(self, key: Hashable, value: _V, deadline: float) -> bool:
        """Hold ``value`` for ``key``: a new hold until ``deadline`` (returns ``True``), or, when
        ``key`` is already held, a replacement that keeps the hold's deadline (``False``)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries[key] = (entry[0], value)
            return False
        self._entries[key] = (deadline, value)
        self._order.append((deadline, key))
        return True

    def pop(self, key: Hashable) -> _V | None:
        """Drop the hold of ``key`` and return its value (``None`` if it had none)."""
        entry = self._entries.pop(key, None)
        return None if entry is None else entry[1]

    def _trim(self) -> None:
        """Forget order entries of holds that were dropped or restarted."""
        order, entries = self._order, self._entries
        while order:
            deadline, key = order[0]
            entry = entries.get(key)
            if entry is not None and entry[0] == deadline:
                return
            order.popleft()

    def next_deadline(self) -> float | None:
        """The deadline of the oldest hold (``None`` when nothing is held)."""
        self._trim()
        return self._order[0][0] if self._order else None

    def first(self) -> _V | None:
        """The value of the oldest hold (``None`` when nothing is held)."""
        self._trim()
        return self._entries[self._order[0][1]][1] if self._order else None

    def release(self, now: float) -> list[_V]:
        """Remove and return, oldest first, the values whose deadline is at or before ``now``."""
        out: list[_V] = []
        order, entries = self._order, self._entries
        while True:
            self._trim()
            if not order or order[0][0] > now:
                return out
            _deadline, key = order.popleft()
            out.append(entries.pop(key)[1])

    def release_all(self) -> list[_V]:
        """Remove and return every held value, oldest first."""
        return self.release(float("inf"))

    def clear(self) -> None:
        """Drop everything."""
        self._entries.clear()
        self._order.clear()


@dataclass(slots=True)
class LiveHeld:
    """A message held for a regular subscription: the frame to send and, for a delta
    subscription, the record's state before the hold started (deltas are taken from it)."""

    frame: bytes
    base: Any = None


class LiveConflation:
    """Conflation state of a regular (routed) subscription; deadlines are wall-clock seconds."""

    __slots__ = ("holds", "spec", "timer")

    def __init__(self, spec: ConflationSpec) -> None:
        self.spec = spec
        self.holds: Holds[LiveHeld] = Holds()
        self.timer: Any = None
        """The pending release timer (one per subscription, for the oldest hold)."""

    def held_bytes(self) -> int:
        """Bytes of the frames held (they count toward the client's memory)."""
        return sum(len(held.frame) for held in self.holds.values())

    def close(self) -> None:
        """Cancel the timer and drop every held message."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.holds.clear()


@dataclass(slots=True)
class ReplayHeld:
    """A record held for a bookmark subscription: the first record of the hold (whose bookmark
    the delivery carries), the bookmark of the record before it (a persisted ack must not go
    past an undelivered hold), and the latest record (whose data is delivered)."""

    first_publisher: int
    first_sequence: int
    before_bm: str | None
    latest: RecordRow


class ReplayConflation:
    """Conflation state of a bookmark subscription; deadlines are journal microseconds."""

    __slots__ = ("holds", "spec", "timer")

    def __init__(self, spec: ConflationSpec) -> None:
        self.spec = spec
        self.holds: Holds[ReplayHeld] = Holds()
        self.timer: Any = None
        """Wakes the caught-up replay when the oldest hold's time has come."""

    def held_bytes(self) -> int:
        """Bytes of the records held (they count toward the client's memory)."""
        return sum(len(held.latest[6]) for held in self.holds.values())

    def offer(self, row: RecordRow, before_bm: str | None) -> None:
        """Hold a matching record (``before_bm``: the bookmark of the record before it)."""
        _index, pid, seq, ts, _command, topic, payload, fields, _size = row
        spec = self.spec
        if spec.keys is None:
            k = fields.get("k")
            key = spec.key(topic, None, None if k is None else str(k))
        else:
            key = spec.key(topic, decode(str(fields.get("mt", "json")), payload), None)
        held = self.holds.get(key)
        if held is None:
            self.holds.hold(key, ReplayHeld(pid, seq, before_bm, row), ts + spec.interval_us)
        else:
            held.latest = row

    def ack_bookmark(self, last_bm: str | None) -> str | None:
        """The bookmark a persisted ack may carry: ``last_bm`` (where the replay has read to)
        unless a hold is pending, then the record just before the oldest hold."""
        first = self.holds.first()
        return last_bm if first is None else first.before_bm

    def close(self) -> None:
        """Cancel the timer and drop every held record."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.holds.clear()
