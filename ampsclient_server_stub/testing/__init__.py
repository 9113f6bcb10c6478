"""Test helpers shipped with the reference server.

* :class:`LoopbackProxy`: network faults between a client and a server;
* :class:`RecordingSession`: drive a broker without sockets;
* :class:`ManualTime`, :class:`ReceiveClock`: time that moves when the test says so;
* :class:`Inbox`: a thread-safe message handler to wait on;
* :class:`RawClient`: AMPS over a raw TCP socket, framed by hand;
* :func:`read_log` (an instance's log for a topic), :func:`wait_for` (poll a condition until
  it holds, with a deadline).
"""

from __future__ import annotations

from .clock import ManualTime, ManualTimer, ReceiveClock
from .collect import Inbox
from .log import read_log
from .proxy import LoopbackProxy
from .raw import RawClient
from .session import RecordingSession
from .wait import wait_for, wait_for_async

__all__ = [
    "Inbox",
    "LoopbackProxy",
    "ManualTime",
    "ManualTimer",
    "RawClient",
    "ReceiveClock",
    "RecordingSession",
    "read_log",
    "wait_for",
    "wait_for_async",
]
