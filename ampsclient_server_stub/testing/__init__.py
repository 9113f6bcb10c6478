"""Test helpers shipped with the reference server.

* :class:`LoopbackProxy`: network faults between a client and a server;
* :class:`RecordingSession`: drive a broker without sockets;
* :class:`ManualTime`, :class:`ReceiveClock`: time that moves when the test says so;
* :class:`Inbox`: a thread-safe message handler to wait on;
* :class:`RawClient`: AMPS over a raw TCP socket, framed by hand;
* :func:`read_log` (an instance's log for a topic), :func:`wait_for` (poll a condition until
  it holds, with a deadline);
* :class:`AmpsServer`, :class:`ReplicatedPair`, :class:`FaultProxy`: what the pytest plugin's
  fixtures yield (``ampsclient_server_stub.pytest_plugin``, docs/testing-your-app.md).
"""

from __future__ import annotations

from .amps_server import AmpsServer
from .clock import ManualTime, ManualTimer, ReceiveClock
from .collect import Inbox
from .fault_proxy import FaultProxy
from .log import read_log
from .pair import ReplicatedPair
from .proxy import LoopbackProxy
from .raw import RawClient
from .session import RecordingSession
from .wait import wait_for, wait_for_async

__all__ = [
    "AmpsServer",
    "FaultProxy",
    "Inbox",
    "LoopbackProxy",
    "ManualTime",
    "ManualTimer",
    "RawClient",
    "ReceiveClock",
    "RecordingSession",
    "ReplicatedPair",
    "read_log",
    "wait_for",
    "wait_for_async",
]
