"""Test helpers shipped with the reference server: :class:`LoopbackProxy` (network faults) and
:class:`RecordingSession` (drive a broker without sockets), :func:`read_log` (an instance's log
for a topic), :func:`wait_for` (poll a condition until it holds, with a deadline)."""

from __future__ import annotations

from .log import read_log
from .proxy import LoopbackProxy
from .session import RecordingSession
from .wait import wait_for

__all__ = ["LoopbackProxy", "RecordingSession", "read_log", "wait_for"]
