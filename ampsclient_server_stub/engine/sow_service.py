"""The SOW service: the broker's SOW topics, their queries, expiry, recovery and checkpoints.

Writes (publish, delta publish, delete) come through the ingest pipeline (:mod:`.ingest`),
which journals them and delivers what they change; this module owns the topics themselves:

* the registry (by name and message type; opened from the configuration or passed in; a
  damaged SOW file is set aside and what is whole of it kept, :mod:`.sow_salvage`);
* queries across one or several topics (``sow``, ``sow_and_subscribe``), batched by topic;
* expiration sweeps (``oof`` ``expired`` through :class:`~.delivery.Delivery`);
* recovery from the journal at start, and the periodic recovery checkpoints.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ampsclient.protocol.header import Header
from ampsclient_server_stub.config import ServerConfig, SowTopicConfig

from .delivery import Delivery
from .enrichment import Stage, compile_stage
from .journal import Journal, JournalRecord
from .payload import OrderBy
from .sow import SowRecord, SowTopic, table_name
from .sow_salvage import quarantine, salvage
from .storage_faults import StorageFaults
from .topics import TopicError, TopicMatcher, compile_topic
from .txlog import REPLAY_BATCH
from .wire import CommandFailure

__all__ = ["SowService"]

logger = logging.getLogger(__name__)

QueryResult = tuple[list[tuple[SowTopic, SowRecord]], int, int]
"""``(records, matches, topic_matches)`` of a query."""


_NO_STAGES: tuple[None, None] = (None, None)


def _stage(fields: Sequence[str], name: str) -> Stage | None:
    return compile_stage(fields, stage=name) if fields else None


def _new_sow(cfg: SowTopicConfig) -> SowTopic:
    return SowTopic(
        cfg.topic,
        keys=cfg.keys,
        message_type=cfg.message_type,
        filename=cfg.file_name,
        key_domain=cfg.key_domain,
        hash_indexes=cfg.hash_indexes,
        memo_indexes=cfg.memo_indexes,
    )


def _open_sow(cfg: SowTopicConfig, damaged: dict[Path, tuple[Path, str]]) -> SowTopic:
    """Open a configured SOW topic. A file SQLite cannot read is set aside
    (:mod:`.sow_salvage`), its whole records are written to a new file, and the error says
    what was kept and what was dropped; ``damaged`` (file -> (set-aside name, damage))
    serves the other topics of a shared file."""
    if cfg.file_name is None:
        return _new_sow(cfg)
    cfg.file_name.parent.mkdir(parents=True, exist_ok=True)
    found = damaged.get(cfg.file_name)
    if found is None:
        try:
            return _new_sow(cfg)
        except sqlite3.DatabaseError as exc:
            found = damaged[cfg.file_name] = (quarantine(cfg.file_name), str(exc))
    moved, damage = found
    rescue = salvage(moved, table_name(cfg.topic), cfg.message_type)
    sow = _new_sow(cfg)
    with sow.batch():
        for record in rescue.records:
            sow.publish(
                record.data,
                doc=None,
                sow_key=record.key,
                bookmark=record.bookmark,
                timestamp=record.timestamp,
                correlation_id=record.correlation_id,
                expiration=record.expiration,
            )
    logger.error(
        "SOW %r: %s is damaged (%s) and was moved to %s; %d record(s) salvaged, %d damaged "
        "record(s) dropped%s; records in the transaction log are re-applied from its start",
        cfg.topic,
        cfg.file_name,
        damage,
        moved.name,
        len(rescue.records),
        rescue.rejected,
        "" if rescue.stopped is None else f", unreadable past the damage ({rescue.stopped})",
    )
    return sow


class SowService:
    """The SOW topics of one broker.

    Args:
        config: SOW topics are opened from it (and closed by :meth:`close`).
        sow_topics: extra, already opened SOW topics (tests).
        delivery: sends ``oof`` for expired records.
        clock: wall clock (epoch seconds) for expiration.
    """

    def __init__(
        self,
        config: ServerConfig | None,
        sow_topics: Iterable[SowTopic],
        *,
        delivery: Delivery,
        clock: Callable[[], float],
        faults: StorageFaults | None = None,
    ) -> None:
        self._delivery = delivery
        self.faults = faults if faults is not None else StorageFaults()
        """Write failures of the SOW files (and the server's other files), reported once."""
        self._clock = clock
        self.by_name: dict[str, list[SowTopic]] = {}
        """SOW topics by name (one per message type); read-only for callers."""
        self._expiration: dict[int, float] = {}
        self._history: dict[int, tuple[float, float]] = {}
        self._owned: list[SowTopic] = []
        self._read_only: dict[int, str] = {}
        self._stages: dict[int, tuple[Stage | None, Stage | None]] = {}
        if config is not None:
            damaged: dict[Path, tuple[Path, str]] = {}
            for topic_config in config.sow_topics:
                opened = _open_sow(topic_config, damaged)
                self._owned.append(opened)
                self.add(opened, expiration=topic_config.expiration)
                if topic_config.preprocessing or topic_config.enrichment:
                    self._stages[id(opened)] = (
                        _stage(topic_config.preprocessing, "Preprocessing"),
                        _stage(topic_config.enrichment, "Enrichment"),
                    )
                if topic_config.history_window is not None:
                    window = topic_config.history_window
                    self._history[id(opened)] = (window, topic_config.history_granularity)
        for sow in sow_topics:
            self.add(sow)

    # ------------------------------------------------------------------ registry

    def add(self, sow: SowTopic, *, expiration: float | None = None) -> None:
        """Make ``sow`` a SOW topic (``expiration``: default record lifetime, s)."""
        self.by_name.setdefault(sow.topic, []).append(sow)
        if expiration is not None:
            self._expiration[id(sow)] = expiration

    def add_read_only(self, sow: SowTopic, why: str) -> None:
        """Make ``sow`` a SOW topic that clients query and subscribe to but never write (a
        conflated topic): their publish and ``sow_delete`` fail ``invalid topic`` with ``why``."""
        self.add(sow)
        self._read_only[id(sow)] = why

    def check_writable(self, sows: Iterable[SowTopic]) -> None:
        """Refuse a client's write to a read-only SOW topic (:meth:`add_read_only`).

        Raises:
            CommandFailure: ``invalid topic``, with the topic's reason.
        """
        for sow in sows:
            why = self._read_only.get(id(sow))
            if why is not None:
                raise CommandFailure("invalid topic", why)

    def stages_of(self, sow: SowTopic) -> tuple[Stage | None, Stage | None]:
        """``(preprocessing, enrichment)`` of a topic (``engine.enrichment``; ``None``: none)."""
        return self._stages.get(id(sow), _NO_STAGES)

    def history_of(self, sow: SowTopic) -> tuple[float, float] | None:
        """``(window, granularity)`` in seconds of a topic's ``<History>``, or ``None``."""
        return self._history.get(id(sow))

    @property
    def topics(self) -> list[SowTopic]:
        """Every SOW topic."""
        return [s for group in self.by_name.values() for s in group]

    def topic(self, topic: str, message_type: str = "json") -> SowTopic | None:
        """The SOW topic called ``topic`` for ``message_type``, or ``None``."""
        for sow in self.by_name.get(topic, ()):
            if sow.message_type == message_type:
                return sow
        return None

    def for_publish(self, mt: str, topic: str) -> SowTopic | None:
        """The SOW topic a publish of type ``mt`` to ``topic`` writes to (``None``: none).

        Raises:
            CommandFailure: ``invalid message type`` for a SOW topic of another type;
                ``invalid topic`` for a read-only one (a conflated topic).
        """
        group = self.by_name.get(topic)
        if group is None:
            return None
        for sow in group:
            if sow.message_type == mt:
                if self._read_only:
                    self.check_writable((sow,))
                return sow
        raise CommandFailure(
            "invalid message type", f"topic {topic!r} is a SOW topic of another message type"
        )

    def matching(self, mt: str, matcher: TopicMatcher) -> list[SowTopic]:
        """SOW topics of type ``mt`` that ``matcher`` selects (no error when none)."""
        return [
            s
            for name, group in self.by_name.items()
            if matcher.matches(name)
            for s in group
            if s.message_type == mt
        ]

    def for_query(self, mt: str, matcher: TopicMatcher) -> list[SowTopic]:
        """SOW topics selected by ``matcher`` for message type ``mt``.

        Raises:
            CommandFailure: ``invalid topic`` (none) or ``invalid message type``.
        """
        if not matcher.is_regex:
            group = self.by_name.get(matcher.topic)
            if not group:
                raise CommandFailure("invalid topic", f"{matcher.topic!r} is not a SOW topic")
            found = [s for s in group if s.message_type == mt]
            if not found:
                raise CommandFailure(
                    "invalid message type", f"{matcher.topic!r} is a SOW topic of another type"
                )
            return found
        found = self.matching(mt, matcher)
        if not found:
            raise CommandFailure("invalid topic", f"no SOW topic matches {matcher.topic!r}")
        return found

    def check_type(self, mt: str, matcher: TopicMatcher) -> None:
        """Refuse a subscription of type ``mt`` to a SOW topic of another type only.

        Raises:
            CommandFailure: ``invalid message type``.
        """
        if matcher.is_regex:
            return
        group = self.by_name.get(matcher.topic)
        if group and all(s.message_type != mt for s in group):
            raise CommandFailure(
                "invalid message type",
                f"topic {matcher.topic!r} is a SOW topic of another message type",
            )

    def expiration(self, sow: SowTopic, hdr: Header, now: float) -> float | None:
        """When a record published with ``hdr`` expires (``e``, else the topic's default).

        Raises:
            CommandFailure: ``invalid options`` for a bad ``e``.
        """
        e = hdr.get("e")
        if e is not None and e != "":
            try:
                seconds = float(e)
            except (TypeError, ValueError):
                raise CommandFailure("invalid options", f"bad expiration {e!r}") from None
            return now + seconds if seconds > 0 else None
        default = self._expiration.get(id(sow))
        return now + default if default else None

    # ------------------------------------------------------------------ queries

    @staticmethod
    def query(
        sows: Sequence[SowTopic],
        predicate: Callable[[Any], bool] | None,
        *,
        keys: list[str] | None,
        order_by: OrderBy | None,
        top_n: int | None,
        skip_n: int,
        filter_text: str | None = None,
    ) -> QueryResult:
        """``(records, matches, topic_matches)`` of a query over ``sows``; ``filter_text``
        (the text ``predicate`` was compiled from) lets a hash index answer it."""
        topic_matches = sum(len(s) for s in sows)
        if len(sows) == 1:
            sow = sows[0]
            records, matches = sow.query(
                predicate,
                keys=keys,
                order_by=order_by,
                top_n=top_n,
                skip_n=skip_n,
                filter_text=filter_text,
            )
            return [(sow, r) for r in records], matches, topic_matches
        combined: list[tuple[SowTopic, SowRecord]] = []
        matches = 0
        for sow in sows:
            records, count = sow.query(predicate, keys=keys, filter_text=filter_text)
            matches += count
            combined.extend((sow, r) for r in records)
        if order_by is not None:
            combined.sort(key=lambda item: order_by.key(item[0].doc(item[1].key)))
        stop = None if top_n is None else skip_n + top_n
        return combined[skip_n:stop], matches, topic_matches

    @staticmethod
    def batches(
        results: list[tuple[SowTopic, SowRecord]], size: int
    ) -> Iterator[tuple[str, list[tuple[SowTopic, SowRecord]]]]:
        """Query results in batches of at most ``size`` records of one topic each."""
        batch: list[tuple[SowTopic, SowRecord]] = []
        current: str | None = None
        for item in results:
            topic = item[0].topic
            if batch and (topic != current or len(batch) >= size):
                assert current is not None
                yield current, batch
                batch = []
            current = topic
            batch.append(item)
        if batch:
            assert current is not None
            yield current, batch

    # ------------------------------------------------------------------ expiry

    def expire(self, now: float | None = None) -> int:
        """Remove expired SOW records (oof ``expired``); return how many. Call periodically."""
        when = self._clock() if now is None else now
        total = 0
        for sow in self.topics:
            try:
                gone = sow.expire(when)
            except Exception:  # pragma: no cover - storage trouble must not stop the loop
                logger.exception("SOW %r: expiration failed", sow.topic)
                continue
            total += len(gone)
            self._delivery.sow_removed(sow, gone, "expired")
        return total

    # ------------------------------------------------------------------ recovery

    def recover(self, journal: Journal, apply: Callable[[JournalRecord], int]) -> tuple[int, int]:
        """Re-apply the journal records the SOW files do not reflect yet (after a restart).

        Each SOW topic stores the journal index its state reflects
        (:attr:`SowTopic.journal_index`, updated with every recorded write and by
        :meth:`checkpoint`): the replay starts after the lowest one, and ``apply`` (the
        ingest pipeline) applies a record only to the topics still behind it. A SOW whose
        file was lost, or that lives in memory, is at 0 and is rebuilt from the whole
        journal. Publishes are upserts and deletes are re-run in log order, so re-applying
        what a SOW already holds is harmless. Writes are grouped in one transaction per
        journal batch; a storage error aborts the recovery (and the server's start) rather
        than leave a SOW behind its checkpoint.

        Returns:
            ``(records read, records applied to a SOW topic)``.
        """
        if not self.by_name:
            return 0, 0
        start = max(journal.first_index, min(s.journal_index for s in self.topics) + 1)
        started = time.perf_counter()
        read = applied = 0
        position = start
        sow_names = self.by_name
        while position <= journal.last_index:
            rows = journal.read_rows(position, max_records=REPLAY_BATCH)
            if not rows:
                break
            read += len(rows)
            with ExitStack() as batch:  # one SOW transaction per journal batch
                for sow in self.topics:
                    batch.enter_context(sow.batch())
                for row in rows:
                    position = row[0] + 1
                    if row[4] != "sow_delete" and row[5] not in sow_names:
                        continue  # most of a log: not a SOW topic (no record object built)
                    applied += apply(JournalRecord(*row[:8]))
        self.checkpoint(journal)  # everything up to the end of the log is in now
        logger.info(
            "SOW recovery: %d journal record(s) read from index %d, %d applied, in %.3f s",
            read,
            start,
            applied,
            time.perf_counter() - started,
        )
        return read, applied

    def checkpoint(self, journal: Journal) -> None:
        """Record in every SOW topic's file that its state reflects the whole journal.

        True whenever the broker is between two commands (each recorded write reaches its SOW
        in the command that journals it), so the server calls this periodically and at
        shutdown: a restart then re-reads only what came after, even for SOW topics that are
        rarely written while other topics fill the log. After a crash that lost the journal's
        last unsynced records it moves the mark back to what the journal holds.
        """
        last = journal.last_index
        for sow in self.topics:
            if sow.closed or sow.journal_index == last:
                continue
            store = sow_store(sow)
            try:
                sow.set_journal_index(last)
            except Exception as exc:  # storage trouble (a full disk): recovery just reads more
                self.faults.failed(store, sow.filename or ":memory:", exc)
            else:
                if self.faults.active:
                    self.faults.succeeded(store)

    def hold_checkpoints(self, topic: str, index: int) -> None:
        """Journal record ``index`` could not be applied to the SOW topics it concerns
        (``topic`` is a name, or a sow_delete's pattern): keep their checkpoints below it so
        that the next start re-applies it (:meth:`SowTopic.hold_checkpoint`)."""
        try:
            matcher = compile_topic(topic)
        except TopicError:
            matcher = None
        for name, group in self.by_name.items():
            if name == topic or (matcher is not None and matcher.matches(name)):
                for sow in group:
                    sow.hold_checkpoint(index)

    def close(self) -> None:
        """Close the SOW topics opened from the configuration."""
        for sow in self._owned:
            try:
                sow.close()
            except Exception:  # pragma: no cover - best effort on shutdown
                logger.exception("closing SOW topic %r", sow.topic)


def sow_store(sow: SowTopic) -> str:
    """The name of ``sow``'s file in :class:`.storage_faults.StorageFaults`: ``sow/<topic>``
    (``sow/<topic>/<message type>`` for a name shared by several message types)."""
    return f"sow/{sow.topic}/{sow.message_type}"
