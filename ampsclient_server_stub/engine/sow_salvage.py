"""A SOW file SQLite cannot read (torn by a crash, a bad disk, a copy cut short): set it
aside and read what can still be read of it.

:func:`quarantine` renames the file, with its ``-wal`` and ``-shm`` companions, to
``<name>.damaged-<UTC time>`` beside it, so the evidence is kept and a new file can take
its place. :func:`salvage` then reads one topic's table of the set-aside file from both ends
(rowid order, then reversed) until SQLite reports the damage, and keeps only records that are
whole: a key, a payload, and, for a message type the server parses, a payload that parses. A
record is never half read: a row either comes out of SQLite entire or not at all.

The caller (:class:`~.sow_service.SowService`) opens a new file, writes the salvaged records
back and lets the transaction log's recovery re-apply the journal from its start (the new
file has no recovery checkpoint), so a topic that is recorded loses nothing the journal
still holds.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .payload import decode, is_parseable

__all__ = ["Salvage", "SalvagedRecord", "quarantine", "salvage"]

logger = logging.getLogger(__name__)

_COMPANIONS: Final = ("", "-wal", "-shm")


@dataclass(frozen=True, slots=True)
class SalvagedRecord:
    """One whole record read back from a damaged file."""

    key: str
    data: bytes
    bookmark: str
    timestamp: str
    correlation_id: str | None
    expiration: float | None
    seq: int


@dataclass(slots=True)
class Salvage:
    """What :func:`salvage` could read of one topic's table."""

    records: list[SalvagedRecord] = field(default_factory=list)
    """Whole records, in their original write order."""
    rejected: int = 0
    """Rows read whose key or payload was not whole (not kept)."""
    stopped: str | None = None
    """The damage the scans stopped at (``None``: the table was read to its end)."""


def quarantine(path: Path, *, now: float | None = None) -> Path:
    """Move ``path`` (and its ``-wal``/``-shm`` files) aside; return the new name of ``path``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while any(Path(f"{target}{suffix}").exists() for suffix in _COMPANIONS):
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in reversed(_COMPANIONS):  # the main file last: it names the set
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, f"{target}{suffix}")
    return target


def _scan(
    conn: sqlite3.Connection, table: str, order: str, found: dict[int, tuple[Any, ...]]
) -> str | None:
    """Read rows in ``order`` into ``found`` until the end or the damage (returned)."""
    sql = (
        "SELECT rowid, k, data, bookmark, timestamp, correlation_id, expiration, seq "
        f'FROM "{table}" ORDER BY rowid {order}'
    )
    try:
        for row in conn.execute(sql):
            found.setdefault(int(row[0]), row[1:])
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return None


def salvage(path: Path, table: str, message_type: str) -> Salvage:
    """Read the whole records of ``table`` in the damaged file ``path`` (never raises for
    damage: a file SQLite cannot open at all gives no records and says why)."""
    result = Salvage()
    found: dict[int, tuple[Any, ...]] = {}
    try:
        conn = sqlite3.connect(path)  # the set-aside copy: SQLite may recover its WAL
    except sqlite3.Error as exc:
        result.stopped = str(exc)
        return result
    try:
        forward = _scan(conn, table, "ASC", found)
        backward = _scan(conn, table, "DESC", found) if forward is not None else None
        result.stopped = forward if forward is not None else backward
    finally:
        conn.close()
    parses = is_parseable(message_type)
    for k, data, bookmark, timestamp, correlation_id, expiration, seq in found.values():
        whole = (
            isinstance(k, str)
            and k != ""
            and isinstance(data, bytes | memoryview)
            and isinstance(seq, int)
            and (not parses or decode(message_type, bytes(data)) is not None)
        )
        if not whole:
            result.rejected += 1
            continue
        result.records.append(
            SalvagedRecord(
                key=k,
                data=bytes(data),
                bookmark=bookmark if isinstance(bookmark, str) else "",
                timestamp=timestamp if isinstance(timestamp, str) else "",
                correlation_id=correlation_id if isinstance(correlation_id, str) else None,
                expiration=float(expiration) if isinstance(expiration, int | float) else None,
                seq=seq,
            )
        )
    result.records.sort(key=lambda record: record.seq)
    return result
