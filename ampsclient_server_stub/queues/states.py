"""The states of a queued message (:class:`.model.QueueMessage`'s ``state``)."""

from __future__ import annotations

from typing import Final

__all__ = ["AVAILABLE", "GONE", "LEASED", "REMOTE"]

AVAILABLE: Final = 0
"""Waiting to be leased."""
LEASED: Final = 1
"""Leased to a subscription, not acknowledged yet."""
GONE: Final = 2
"""Left the queue (acknowledged, expired, or sent at-most-once)."""
REMOTE: Final = 3
"""Replicated queues: another instance owns the message (it is tracked, never offered)."""
