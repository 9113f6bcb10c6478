"""Which implementation of the per-message loops runs: the C speedups or pure Python.

``ampsclient/_speedups.c`` is an optional extension built at install time (a C compiler is
needed; without one the install still succeeds). It has the client's two per-message loops,
splitting the TCP stream into payloads and routing deliveries to handlers, and the common
case of :class:`~ampsclient.stores.bookmark.MemoryBookmarkStore`'s ``log`` and
``discard_message``, the publish stores' payload and record building, and the common cases
of ``AsyncHAClient.publish`` (``PublishLane``) and ``AsyncClient.publish``
(``PlainPublishLane``). The Python code
they replace stays next to them and is the reference, tested with the same cases. The
receive loops look their function up here on each call (tests switch them); the publish
stores bind theirs at import. Set
``AMPSCLIENT_PUREPYTHON=1`` before importing ampsclient to run the pure-Python code (the way
``MSGPACK_PUREPYTHON`` works for msgpack).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = [
    "SPEEDUPS",
    "BookmarkLane",
    "PlainPublishLane",
    "PublishLane",
    "deliver",
    "join_seq",
    "split_frames",
    "write_record",
    "ws_encode",
]

split_frames: Callable[[bytes, int, int, list[bytes]], int] | None = None
deliver: Callable[..., None] | None = None
BookmarkLane: Callable[..., Any] | None = None
PublishLane: Callable[..., Any] | None = None
PlainPublishLane: Callable[..., Any] | None = None
join_seq: Callable[[bytes, int, bytes], bytes] | None = None
write_record: Callable[[Any, int, int, bytes], int] | None = None
ws_encode: Callable[[bytes, bool], bytes | None] | None = None

if not os.environ.get("AMPSCLIENT_PUREPYTHON"):
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - built without a compiler
        _speedups = None
    if _speedups is not None:
        split_frames = _speedups.split_frames
        deliver = _speedups.deliver
        BookmarkLane = getattr(_speedups, "BookmarkLane", None)  # not on free-threaded builds
        PublishLane = getattr(_speedups, "PublishLane", None)  # nor these
        PlainPublishLane = getattr(_speedups, "PlainPublishLane", None)
        join_seq = _speedups.join_seq
        write_record = _speedups.write_record
        ws_encode = _speedups.ws_encode

SPEEDUPS: bool = deliver is not None
"""``True`` when the C speedups are in use."""


def implementations() -> dict[str, Any]:
    """The C module when built (for tests that run both implementations), else ``{}``."""
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover
        return {}
    return {"c": _speedups}
