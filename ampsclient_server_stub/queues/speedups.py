"""Which implementation of the queue engine's per-message loops and message type runs: C or
pure Python.

``ampsclient_server_stub/queues/_queue_speedups.c`` is an optional extension built at install
time, like the server's (:mod:`ampsclient_server_stub.accel`, which this follows); without a C
compiler the install still succeeds and the Python twins run. ``AMPSCLIENT_PUREPYTHON=1``
(set before the import) forces the Python twins.

Each C function, and the C ``QueueMessage`` type, has exactly one Python twin, the reference
(:data:`TWINS`); ``tests/queues/test_queue_speedups.py`` runs both on the same cases. The
callers bind the function at import: ``speedups.plain_run or intake.plain_run`` (and
:mod:`.message` binds ``QueueMessage`` the same way).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "SPEEDUPS",
    "TWINS",
    "UNPARSED",
    "QueueMessage",
    "ack_run",
    "frame_run",
    "lease_run",
    "plain_run",
    "run_pairs",
    "split_bookmarks",
]

TWINS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "plain_run": "ampsclient_server_stub.queues.intake.plain_run",
        "run_pairs": "ampsclient_server_stub.queues.intake.run_pairs",
        "frame_run": "ampsclient_server_stub.queues.framing.frame_run",
        "ack_run": "ampsclient_server_stub.queues.acking.ack_run",
        "split_bookmarks": "ampsclient_server_stub.queues.acking.split_bookmarks",
        "lease_run": "ampsclient_server_stub.queues.leasing.lease_run",
        "QueueMessage": "ampsclient_server_stub.queues.message.PyQueueMessage",
    }
)
"""Each C function (and type) -> its pure-Python twin (the reference)."""

plain_run: Callable[[Sequence[bytes], int, bool], tuple[int, list[tuple[str, bytes]]]] | None = None
run_pairs: Callable[[str, list[tuple[int, str, bytes]]], list[tuple[str, bytes]]] | None = None
frame_run: Callable[[Sequence[Any], int, dict[Any, Any], float | None, bytes], int] | None = None
ack_run: (
    Callable[[dict[str, Any], Sequence[str], int, object, bool, list[str]], tuple[int, int]] | None
) = None
lease_run: Callable[..., None] | None = None
split_bookmarks: Callable[[object], list[str] | None] | None = None
QueueMessage: type[Any] | None = None
"""The C message type (``None``: the Python class, :class:`.message.PyQueueMessage`)."""

_module: Any = None
if not os.environ.get("AMPSCLIENT_PUREPYTHON"):
    try:
        _module = importlib.import_module("ampsclient_server_stub.queues._queue_speedups")
    except ImportError:  # pragma: no cover - built without a compiler
        _module = None
    if _module is not None:
        plain_run = _module.plain_run
        run_pairs = _module.run_pairs
        frame_run = _module.frame_run
        ack_run = _module.ack_run
        lease_run = _module.lease_run
        split_bookmarks = _module.split_bookmarks
        QueueMessage = _module.QueueMessage

UNPARSED: Final[object] = object() if _module is None else _module.UNPARSED
"""A message's ``doc`` until its payload is parsed (the C type's default, when it is used)."""
SPEEDUPS: Final = _module is not None
"""True when the C speedups are in use."""
