"""Test helpers shipped with the reference server: :class:`LoopbackProxy` (network faults)."""

from __future__ import annotations

from .proxy import LoopbackProxy

__all__ = ["LoopbackProxy"]
