"""Which implementation of the server's per-message loops runs: the C speedups or pure Python.

``ampsclient_server_stub/_speedups.c`` is an optional extension built at install time, like
the client's (``ampsclient/_accel.py``); without a C compiler the install still succeeds and
the Python twins run. ``AMPSCLIENT_PUREPYTHON=1`` (set before the import) forces the Python
twins, for the server as for the client, so the suite's pure-Python pass covers the server's
paths too.

Each C function has exactly one Python twin, the reference (:data:`TWINS`);
``tests/server/test_server_speedups.py`` runs both on the same cases. The callers bind the
function at import: ``accel.scan_publishes or wire.scan_publishes``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "SPEEDUPS",
    "TWINS",
    "delivery_frames",
    "frame_join",
    "journal_frames",
    "journal_runs",
    "journal_walk",
    "replay_frames",
    "scan_publishes",
    "ws_client_commands",
    "ws_client_frames",
    "ws_commands",
    "ws_server_frames",
]

TWINS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "scan_publishes": "ampsclient_server_stub.engine.wire.scan_publishes",
        "delivery_frames": "ampsclient_server_stub.engine.wire.delivery_frames",
        "frame_join": "ampsclient_server_stub.net.tcp.frame_join",
        "replay_frames": "ampsclient_server_stub.engine.wire.replay_frames",
        "ws_client_frames": "ampsclient_server_stub.net.ws.client_frames",
        "ws_server_frames": "ampsclient_server_stub.net.ws.server_frames",
        "ws_commands": "ampsclient_server_stub.net.ws.ws_commands",
        "ws_client_commands": "ampsclient_server_stub.net.ws.client_commands",
        "journal_frames": "ampsclient_server_stub.engine.journal_append.journal_frames",
        "journal_runs": "ampsclient_server_stub.replication.blocks.journal_runs",
        "journal_walk": "ampsclient_server_stub.replication.blocks.journal_walk",
    }
)
"""Each C function -> its pure-Python twin (the reference)."""

scan_publishes: Callable[..., tuple[int, list[tuple[int, str, bytes]]]] | None = None
delivery_frames: Callable[[bytes, list[tuple[int, str, bytes]]], list[bytes]] | None = None
frame_join: Callable[[list[bytes]], bytes] | None = None
replay_frames: Callable[..., tuple[int, int, int]] | None = None
ws_client_frames: Callable[[bytes, int], tuple[int, list[tuple[bytes, bool]], bool]] | None = None
ws_server_frames: Callable[[list[bytes], bool], bytes | None] | None = None
ws_commands: Callable[[list[tuple[bytes, bool]], int, int], tuple[int, list[bytes]]] | None = None
ws_client_commands: Callable[[bytes, int, int], tuple[int, list[bytes]]] | None = None
journal_frames: Callable[..., tuple[int, int, bytes, bytes, bytes]] | None = None
journal_runs: Callable[..., tuple[int, int]] | None = None
journal_walk: Callable[..., tuple[int, int, int]] | None = None

_module: Any = None
if not os.environ.get("AMPSCLIENT_PUREPYTHON"):
    try:
        _module = importlib.import_module("ampsclient_server_stub._speedups")
    except ImportError:  # pragma: no cover - built without a compiler
        _module = None
    if _module is not None:
        scan_publishes = _module.scan_publishes
        delivery_frames = _module.delivery_frames
        frame_join = _module.frame_join
        replay_frames = _module.replay_frames
        ws_client_frames = _module.ws_client_frames
        ws_server_frames = _module.ws_server_frames
        ws_commands = _module.ws_commands
        ws_client_commands = _module.ws_client_commands
        journal_frames = _module.journal_frames
        journal_runs = _module.journal_runs
        journal_walk = _module.journal_walk

SPEEDUPS: Final = _module is not None
"""True when the C speedups are in use."""
