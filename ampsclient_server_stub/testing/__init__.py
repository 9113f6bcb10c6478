"""Test helpers shipped with the reference server: :class:`LoopbackProxy` (network faults) and
:class:`RecordingSession` (drive a broker without sockets)."""

from __future__ import annotations

from .proxy import LoopbackProxy
from .session import RecordingSession

__all__ = ["LoopbackProxy", "RecordingSession"]
