"""The journal's value types, errors and constants (shared by the journal's modules).

:class:`JournalRecord` is one journaled message, :class:`SegmentInfo` describes one file,
:class:`JournalPin` keeps files from being removed. The journal itself is
:class:`~ampsclient_server_stub.engine.journal.Journal`, which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, TypeVar

from ..errors import StorageError

__all__ = [
    "COMMANDS",
    "DEFAULT_JOURNAL_SIZE",
    "DEFAULT_MAX_BYTES",
    "FsyncPolicy",
    "JournalClosedError",
    "JournalError",
    "JournalInUseError",
    "JournalPin",
    "JournalRecord",
    "RawBlock",
    "RecordRow",
    "SegmentInfo",
    "SequenceOrderError",
    "make_record",
    "retry_pruned",
]

FsyncPolicy: TypeAlias = Literal["always", "interval", "never"]
RecordRow: TypeAlias = tuple[int, int, int, int, str, str, bytes, dict[str, str | int], int]
"""A record as :meth:`Journal.read_rows` returns it: ``(index, publisher_id, sequence,
timestamp, command, topic, payload, fields, size on disk)``."""

RawBlock: TypeAlias = tuple[bytes, int, int, int, Path]
"""Undecoded records as :meth:`Journal.read_blocks` returns them: ``(data, offset in the
segment, first index, record count, segment path)``."""

DEFAULT_JOURNAL_SIZE: Final = 64 * 1024 * 1024
COMMANDS: Final = frozenset({"p", "delta_publish", "sow_delete"})
"""The commands a journal records."""

DEFAULT_MAX_BYTES: Final = 4 * 1024 * 1024
"""Default byte budget of one read batch."""

_T = TypeVar("_T")


def retry_pruned(read: Callable[..., _T], *args: Any) -> _T:
    """``read(*args)``, again (up to three more times) when a segment it looked up was pruned,
    compressed, archived or renamed before it was opened (``FileNotFoundError``)."""
    for _attempt in range(3):
        try:
            return read(*args)
        except FileNotFoundError:
            continue
    return read(*args)


class JournalError(StorageError):
    """Base class of the journal's own errors."""


class JournalClosedError(JournalError, ValueError):
    """The journal was used after :meth:`Journal.close`."""


class JournalInUseError(JournalError, OSError):
    """Another process has the journal directory open for writing."""


class SequenceOrderError(JournalError, ValueError):
    """An append whose sequence is not above the publisher's last stored sequence.

    Duplicates are the broker's business (it must not journal them); the journal refuses them so
    that each publisher's sequences stay strictly increasing, which bookmark lookups rely on.
    """


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One journaled message.

    Attributes:
        index: this instance's log position: 1-based, +1 per record, never reused.
        publisher_id: unsigned 64-bit hash of the publisher's client name
            (:func:`ampsclient.protocol.bookmarks.publisher_id_for`).
        sequence: the publisher's sequence number (strictly increasing per publisher).
        timestamp: server receive time, integer microseconds since the epoch (UTC);
            non-decreasing along the log.
        command: ``"p"``, ``"delta_publish"`` or ``"sow_delete"``.
        topic: the topic.
        payload: the message body as delivered to subscribers.
        fields: extra header fields to restore on replay (``k``, ``x``, ``e``, ``mt``,
            ``client_name``, ``filter``/``sow_keys`` of a sow_delete, ...).
    """

    index: int
    publisher_id: int
    sequence: int
    timestamp: int
    command: str
    topic: str
    payload: bytes
    fields: Mapping[str, str | int]

    @property
    def bookmark(self) -> str:
        """The AMPS bookmark of this record, ``"<publisher_id>|<sequence>|"``."""
        return f"{self.publisher_id}|{self.sequence}|"


_new_object = object.__new__
(_set_index, _set_pid, _set_seq, _set_ts, _set_cmd, _set_topic, _set_payload, _set_fields) = (
    getattr(JournalRecord, name).__set__
    for name in (
        "index",
        "publisher_id",
        "sequence",
        "timestamp",
        "command",
        "topic",
        "payload",
        "fields",
    )
)


def make_record(
    index: int,
    publisher_id: int,
    sequence: int,
    timestamp: int,
    command: str,
    topic: str,
    payload: bytes,
    fields: Mapping[str, str | int],
) -> JournalRecord:
    """``JournalRecord(...)`` at half the cost (the frozen dataclass __init__ is slow).

    Sets the slots through their descriptors, which a frozen dataclass's ``__setattr__`` does
    not intercept. Used on the append and read hot paths only.
    """
    record: JournalRecord = _new_object(JournalRecord)
    _set_index(record, index)
    _set_pid(record, publisher_id)
    _set_seq(record, sequence)
    _set_ts(record, timestamp)
    _set_cmd(record, command)
    _set_topic(record, topic)
    _set_payload(record, payload)
    _set_fields(record, fields)
    return record


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A description of one segment, for tools and the admin interface.

    Attributes:
        path: the data file (``.journal`` or ``.journal.gz``; in the archive directory once
            archived).
        state: ``"active"`` (being written), ``"sealing"`` (full, sidecar not yet written),
            ``"sealed"`` or ``"compressed"``.
        first_index, last_index: the records it holds (``last_index = first_index - 1`` when
            empty).
        records: ``last_index - first_index + 1``.
        data_bytes: uncompressed size of its records.
        file_bytes: size on disk of the data file.
        first_timestamp, last_timestamp: microseconds since the epoch (0 when empty).
        archived: the data file is in the journal's archive directory.
    """

    path: Path
    state: str
    first_index: int
    last_index: int
    records: int
    data_bytes: int
    file_bytes: int
    first_timestamp: int
    last_timestamp: int
    archived: bool = False


class JournalPin:
    """A pin: the journal keeps every segment holding records at or after :attr:`index`.

    Returned by :meth:`Journal.pin`; a :class:`JournalCursor` moves its pin forward as it reads.
    """

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"JournalPin({self.index})"
