"""A queue's ``Priority`` value as AMPS reads it (``shared/queues.md`` §7)."""

from __future__ import annotations

from typing import Any

__all__ = ["unsigned_priority"]


def unsigned_priority(value: Any) -> int:
    """A priority value as AMPS treats it: an unsigned long; NULL, negative and non-numeric
    values are the lowest priority (0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if value != value or value <= 0:  # NaN, negative
        return 0
    return int(min(value, 2**64 - 1))
