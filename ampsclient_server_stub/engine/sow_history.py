"""Historical SOW queries: the SOW of a topic as it was at a point in time.

A ``sow`` command whose bookmark header holds a timestamp asks for the topic's State of the
World at that time (AMPS: "Historical SOW Topic Queries"). Topics opt in with
``<History><Window>`` (how far back) and ``<Granularity>`` (the spacing of the kept states: the
time is rounded down to a multiple of it). The reference server keeps no separate snapshots:
it rebuilds the state from the transaction log, which must record the topic (checked at
start-up) and still hold every record from the log's beginning (a log whose oldest files were
removed cannot answer, and says so).

:func:`historical_sows` returns in-memory SOW topics holding those states, for the usual query
path; the caller closes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

from ampsclient.protocol.bookmarks import Timestamp, parse_bookmark

from ..errors import RequestError
from .filters import compile_filter
from .journal import Journal, JournalRecord
from .payload import decode
from .sow import SowTopic
from .topics import TopicError, compile_topic
from .wire import format_timestamp, split_list

__all__ = ["HistoryError", "historical_sows"]

logger = logging.getLogger(__name__)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_BATCH: Final = 2000


class HistoryError(RequestError):
    """A historical query that cannot be answered; ``reason`` is the AMPS reason string."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _point_us(bookmark: str) -> int:
    try:
        parsed = parse_bookmark(bookmark)
    except Exception as exc:  # InvalidBookmarkError and friends
        raise HistoryError("invalid bookmark", str(exc)) from None
    if not isinstance(parsed, Timestamp):
        raise HistoryError(
            "invalid bookmark",
            f"a historical SOW query takes a timestamp as its bookmark, not {bookmark!r}",
        )
    return (parsed.when - _EPOCH) // timedelta(microseconds=1)


def historical_sows(
    sows: Sequence[SowTopic],
    history_of: Callable[[SowTopic], tuple[float, float] | None],
    journal: Journal | None,
    bookmark: str,
    *,
    now: float | None = None,
) -> list[SowTopic]:
    """In-memory copies of ``sows`` as they were at the time in ``bookmark``.

    Args:
        sows: the SOW topics the query matches.
        history_of: ``(window, granularity)`` of a topic's ``<History>`` in seconds, or
            ``None`` for a topic without history.
        journal: the transaction log (``None``: nothing is recorded).
        bookmark: the ``sow`` command's bookmark header (a timestamp).
        now: the current time (epoch seconds; default: now).

    Raises:
        HistoryError: ``invalid options`` for a topic without history or a log that cannot
            rebuild it, ``invalid bookmark`` for a point that is not a timestamp or is
            outside the window.
    """
    histories = [history_of(sow) for sow in sows]
    for sow, history in zip(sows, histories, strict=True):
        if history is None:
            raise HistoryError(
                "invalid options",
                f"historical SOW query: topic {sow.topic!r} keeps no history (no <History>)",
            )
    point = _point_us(bookmark)
    current = time.time() if now is None else now
    out: list[SowTopic] = []
    try:
        for sow, history in zip(sows, histories, strict=True):
            assert history is not None
            out.append(_rebuild(sow, history, journal, point, current))
    except BaseException:
        for copy in out:
            copy.close()
        raise
    return out


def _rebuild(
    sow: SowTopic,
    history: tuple[float, float],
    journal: Journal | None,
    point: int,
    now: float,
) -> SowTopic:
    window, granularity = history
    if point < int((now - window) * 1_000_000):
        raise HistoryError(
            "invalid bookmark",
            f"historical SOW query: {format_timestamp(point / 1e6)} is older than the "
            f"<History> <Window> of {sow.topic!r} ({window:g}s)",
        )
    step = int(granularity * 1_000_000)
    if step > 0:
        point -= point % step
    if journal is None or journal.first_index > 1:
        raise HistoryError(
            "invalid options",
            f"historical SOW query on {sow.topic!r}: the transaction log no longer holds the "
            "topic's whole history (its oldest files were removed)",
        )
    end = journal.find_time(point + 1) - 1  # the last record received at or before the point
    copy = SowTopic(
        sow.topic, keys=sow.keys, message_type=sow.message_type, key_domain=sow.key_domain
    )
    try:
        position = journal.first_index
        while position <= end:
            batch = journal.read(position, max_records=min(_BATCH, end - position + 1))
            if not batch:
                break
            for record in batch:
                if record.index > end:
                    break
                _apply(copy, record)
            position = batch[-1].index + 1
    except BaseException:
        copy.close()
        raise
    return copy


def _apply(copy: SowTopic, record: JournalRecord) -> None:
    """Apply one journaled publish, delta publish or ``sow_delete`` of the topic to ``copy``."""
    mt = str(record.fields.get("mt", "json"))
    if mt != copy.message_type:
        return
    fields = record.fields
    k = fields.get("k")
    if record.command == "sow_delete":
        try:
            if not compile_topic(record.topic).matches(copy.topic):
                return
        except TopicError:
            return
        filter_text = fields.get("filter")
        keys_text = fields.get("sow_keys")
        copy.delete(
            compile_filter(str(filter_text)) if filter_text else None,
            keys=split_list(keys_text) if keys_text else None,
            data_doc=decode(mt, record.payload) if record.payload else None,
            sow_key=str(k) if k is not None and (record.payload or k) else None,
        )
        return
    if record.topic != copy.topic:
        return
    doc = decode(mt, record.payload)
    copy.publish(
        record.payload,
        doc=doc,
        sow_key=str(k) if k is not None and doc is None else None,
        bookmark=record.bookmark,
        timestamp=format_timestamp(record.timestamp / 1_000_000),
    )
