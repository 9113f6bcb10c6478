"""Ack types: the ``a`` header, a comma list of names (``shared/protocol.md`` §2, §5.1)."""

from __future__ import annotations

import enum
from functools import lru_cache

__all__ = ["AckType", "format_ack_types", "parse_ack_types"]


class AckType(enum.IntFlag):
    """Ack types, with the official client's numeric values."""

    NONE = 0
    RECEIVED = 1
    PARSED = 2
    PROCESSED = 4
    PERSISTED = 8
    COMPLETED = 16
    STATS = 32

    # official spellings
    none = 0
    received = 1
    parsed = 2
    processed = 4
    persisted = 8
    completed = 16
    stats = 32


_ORDER = (
    ("received", AckType.RECEIVED),
    ("parsed", AckType.PARSED),
    ("processed", AckType.PROCESSED),
    ("persisted", AckType.PERSISTED),
    ("completed", AckType.COMPLETED),
    ("stats", AckType.STATS),
)
_BY_NAME = {name: flag for name, flag in _ORDER}


@lru_cache(maxsize=256)
def parse_ack_types(text: str | None) -> AckType:
    """Parse ``"processed,completed"`` into flags; unknown names are ignored."""
    flags = AckType.NONE
    if not text:
        return flags
    for name in text.split(","):
        flags |= _BY_NAME.get(name.strip().lower(), AckType.NONE)
    return flags


def format_ack_types(flags: AckType | int) -> str:
    """Format flags as the wire's comma list, in the canonical order (``""`` for none)."""
    return ",".join(name for name, flag in _ORDER if flags & flag)
