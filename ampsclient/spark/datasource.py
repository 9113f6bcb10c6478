"""The ``amps`` PySpark data source: batch and streaming reads of topics, idempotent writes.

Where things run (Spark never calls these in the user's Python process, see ``docs/spark.md``):
``partitions()``, ``initialOffset()``, ``latestOffset()`` and ``commit()`` run in driver-side
Python workers; ``read()`` and ``write()`` run in executor tasks. Every object here is pickled
between them, so clients are created inside those methods and never kept on a pickled object
(the stream reader caches its planning client only in its long-lived runner process).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..exceptions import AMPSError, DisconnectedError, InvalidBookmarkError
from ..protocol.bookmarks import EPOCH, NOW
from ..protocol.message import Message
from ..sync import Client
from ._convert import RowBuilder, output_schema
from ._core import (
    REPLAY_OPTIONS,
    UNTIMED_REPLAY_OPTIONS,
    AMPSSparkError,
    Bound,
    Position,
    ReadOptions,
    Reconnect,
    WriteOptions,
    after_data_loss,
    bookmark_micros,
    client_name,
    connect,
    describe,
    fence,
    first_micros,
    format_micros,
    last_micros,
    offset_bounds,
    plan_ranges,
    range_text,
    scan,
    split_filter,
)
from ._feed import replay_payloads
from ._microbatches import MicroBatches, count_into
from ._publish import AMPSCommitMessage, RowPublisher
from ._queue import AMPSQueueStreamReader
from ._sow import sow_records

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0 / 4.1
    ReadAllAvailable = ReadLimit = ReadMaxRows = ReadMaxBytes = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: the mixin does not exist before Spark 4.2."""


try:  # Spark 4.1+: streaming writes receive Arrow record batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _ARROW_STREAM_WRITER = True
except ImportError:  # pragma: no cover - Spark 4.0
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[assignment,misc]
    _ARROW_STREAM_WRITER = False

__all__ = [
    "AMPSBatchReader",
    "AMPSBatchWriter",
    "AMPSCommitMessage",
    "AMPSDataSource",
    "AMPSStreamReader",
    "AMPSStreamWriter",
    "ReplayPartition",
    "SowPartition",
]

log = logging.getLogger("ampsclient.spark")

SEQUENCE_BATCH_SHIFT = 32
"""A streaming write's sequence numbers are ``(batchId << 32) + row index + 1``."""


class AMPSDataSource(DataSource):
    """The ``amps`` format: ``spark.read.format("amps")``, ``readStream``, ``write`` and
    ``writeStream``. Options are documented in ``docs/spark.md``."""

    @classmethod
    def name(cls) -> str:
        """``"amps"``."""
        return "amps"

    def schema(self) -> StructType | str:
        """The default columns, or metadata + payload columns with ``parse``."""
        return output_schema(ReadOptions.parse_options(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader (a bounded replay of the transaction log)."""
        return AMPSBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch reader whose offsets are log positions (with ``command=queue``:
        batches of leased queue messages, acknowledged at commit)."""
        if (self.options.get("command") or "").strip().lower() == "queue":
            return AMPSQueueStreamReader(self.options, schema)
        return AMPSStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer (``mode("append")``)."""
        return AMPSBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming writer."""
        return AMPSStreamWriter(self.options, schema, overwrite)


# ======================================================================================
# reading


@dataclass(frozen=True)
class ReplayPartition(InputPartition):
    """One Spark task's share of a read: a bookmark range (``None``: nothing to read), with
    its content filter (the ``filter`` option, ANDed with one of ``splits``)."""

    index: int
    bookmark: str | None
    filter: str | None = None


@dataclass(frozen=True)
class SowPartition(InputPartition):
    """One Spark task's share of a ``command=sow`` read: a SOW query with this filter."""

    index: int
    filter: str | None


def _partitions(opts: ReadOptions, ranges: Sequence[str | None]) -> list[InputPartition]:
    """One task per range, times one per split (each range read once with each split's
    filter)."""
    splits: Sequence[str | None] = opts.splits or (None,)
    filters = [split_filter(opts.filter, s) for s in splits]
    pairs = [(r, f) for r in ranges for f in filters]
    return [ReplayPartition(i, r, f) for i, (r, f) in enumerate(pairs)]


def _split(
    client: Client, opts: ReadOptions, start: Bound, end: Bound, *, end_is_last: bool = False
) -> list[str]:
    """The sub-ranges of ``start``..``end`` (one unless ``numPartitions`` > 1).

    The span is cut evenly in server time between the first message of the range and the last
    one: that is the end's own time when ``end_is_last`` (a streaming offset names the batch's
    last message), otherwise found by a few probes (the end may be a fence or a time well after
    the topic's last message).
    """
    if opts.num_partitions <= 1:
        return [range_text(start, end)]
    topic, filter = opts.topic, opts.filter
    lo = first_micros(client, topic, filter, range_text(start, end))
    if lo is None:  # nothing to read
        return [range_text(start, end)]
    hi = end.micros
    if hi is None:  # a bookmark id of ours: the time of that message, if it is on this topic
        hi = bookmark_micros(client, topic, end.text)
        if hi is None:
            log.info("the time of range end %s is unknown: reading one partition", end.text)
            return [range_text(start, end)]
    elif not end_is_last and hi > lo:
        hi = last_micros(client, topic, filter, end, lo, hi, steps=8)
    return plan_ranges(start, end, opts.num_partitions, lo, hi)


def _log_end(client: Client, opts: ReadOptions, start: Bound) -> Position | None:
    """A fixed end for an open read: a fence, or (``fenceTopic=''``) the topic's last message."""
    if opts.fence_topic:
        return fence(client, opts.fence_topic, opts.connect_timeout_ms * 3)
    return scan(client, opts.topic, opts.filter, range_text(start, Bound(NOW, True)), None)[1]


def _read_partition(
    opts: ReadOptions, schema: StructType, partition: InputPartition
) -> Iterator[Any]:
    """Executor side: replay one range with a client of its own, chunk by chunk."""
    assert isinstance(partition, ReplayPartition)
    if partition.bookmark is None:
        return
    builder = RowBuilder(schema, opts)
    chunks = _chunks(opts, partition, partition.bookmark, builder.replay_options)
    try:
        if builder.arrow:
            yield from builder.arrow_batches(chunks)
        else:
            yield from builder.rows(chunks)
    except AMPSSparkError:
        raise
    except AMPSError as exc:
        raise AMPSSparkError(
            f"reading {opts.topic!r} range {partition.bookmark} failed: {describe(exc)}"
        ) from exc
    finally:
        chunks.close()


def _chunks(
    opts: ReadOptions, partition: ReplayPartition, bookmark: str, options: str
) -> Generator[list[bytes], None, None]:
    """The payload chunks of the range; a start the log no longer holds is data loss
    (``failOnDataLoss``: fail, or read from the oldest message the log holds)."""

    def replay(text: str) -> Generator[list[bytes], None, None]:
        return replay_payloads(
            opts.uris,
            client_name(opts.client_name_prefix, "read"),
            opts.connect_timeout_ms,
            topic=opts.topic,
            filter=partition.filter,
            bookmark=text,
            options=options,
            reconnect_ms=opts.reconnect_timeout_ms,
            wait_ms=opts.read_timeout_ms,
        )

    chunks = replay(bookmark)
    try:
        try:
            first = next(chunks, None)
        except InvalidBookmarkError as exc:
            chunks.close()
            chunks = replay(after_data_loss(opts, bookmark, exc))
            first = next(chunks, None)
            if first:
                log.warning(
                    "%r: the oldest message read is %s", opts.topic, Message(first[0]).bookmark
                )
        if first is None:
            return
        yield first
        yield from chunks
    finally:
        chunks.close()


class AMPSBatchReader(DataSourceReader):
    """A bounded replay, split by server time into ``numPartitions`` sub-ranges."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = ReadOptions.parse_options(options)
        self.schema = schema
        if self.opts.command == "queue":
            raise AMPSSparkError(
                "command=queue is a streaming read (messages are acknowledged when a "
                "micro-batch commits): use spark.readStream; a batch read of a queue's "
                "current contents is command=sow"
            )

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve the range on the driver: an open end becomes a fixed log position.
        A ``command=sow`` read needs no planning: one SOW query per split."""
        opts = self.opts
        if opts.command == "sow":
            splits: Sequence[str | None] = opts.splits or (None,)
            return [SowPartition(i, split_filter(opts.filter, f)) for i, f in enumerate(splits)]
        start, end = opts.start, opts.end
        if (
            end is not None
            and opts.num_partitions <= 1
            and not (end.micros is not None and opts.fence_topic and _recent(end.micros))
        ):
            return _partitions(opts, [range_text(start, end)])  # fixed already: nothing to ask
        client = connect(
            opts.uris,
            client_name(opts.client_name_prefix, "plan"),
            opts.connect_timeout_ms,
            schedule=Reconnect(opts.uris, opts.reconnect_timeout_ms, f"planning {opts.topic!r}"),
        )
        try:
            if end is None:
                pos = _log_end(client, opts, start)
                if pos is None:
                    return _partitions(opts, [None])
                end = Bound(pos.bookmark, True, pos.micros)
            elif end.micros is not None and opts.fence_topic and _recent(end.micros):
                # an end in the (near) future: stop at the log's end now rather than wait
                pos = fence(client, opts.fence_topic, opts.connect_timeout_ms * 3)
                if pos.micros < end.micros:
                    end = Bound(pos.bookmark, True, pos.micros)
            ranges = _split(client, opts, start, end)
        except AMPSSparkError:
            raise
        except AMPSError as exc:
            raise AMPSSparkError(f"planning the read of {opts.topic!r}: {describe(exc)}") from exc
        finally:
            client.close()
        log.info("reading %r in %d partition(s): %s", opts.topic, len(ranges), ranges)
        return _partitions(opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor side: replay this partition's range (or run its SOW query)."""
        if isinstance(partition, SowPartition):
            return _read_sow(self.opts, self.schema, partition)
        return _read_partition(self.opts, self.schema, partition)


def _read_sow(opts: ReadOptions, schema: StructType, partition: SowPartition) -> Iterator[Any]:
    """Executor side: one SOW query (this split's filter), a row per record."""
    builder = RowBuilder(schema, opts)
    what = f"the sow query of {opts.topic!r}"
    client = connect(
        opts.uris,
        client_name(opts.client_name_prefix, f"sow{partition.index}"),
        opts.connect_timeout_ms,
        schedule=Reconnect(opts.uris, opts.reconnect_timeout_ms, what),
    )
    try:
        records = sow_records(
            client,
            opts.topic,
            partition.filter,
            top_n=opts.top_n,
            order_by=opts.order_by,
            as_of=opts.as_of,
            timestamps=builder.replay_options == REPLAY_OPTIONS,
        )
        try:
            for message in records:
                yield builder.row(message)
        finally:
            records.close()
    except AMPSSparkError:
        raise
    except AMPSError as exc:
        raise AMPSSparkError(f"{what} (filter {partition.filter!r}): {describe(exc)}") from exc
    finally:
        client.close()


def _recent(micros: int) -> bool:
    return micros > (time.time() - 300) * 1_000_000


class AMPSStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches ``(start:end]`` between two log positions.

    Offsets are ``{"bookmark": "<publisherId>|<seq>|", "timestamp": "<server time>"}``: the
    journal bookmark of the last message of a micro-batch (the first offset may also be EPOCH
    ``"0"`` or a timestamp). ``latestOffset`` replays the new messages on the driver to find the
    last one (or the ``maxRowsPerBatch``-th), so every offset names a message that exists and
    every micro-batch is a fixed range that replays identically. The micro-batches counted
    ahead are kept between triggers (:class:`MicroBatches`), so a trigger replays only the
    messages that came after the last one counted.

    Attributes:
        replayed: messages the planning replays sent the driver since this reader was made
            (what ``latestOffset`` counted; for tests and diagnostics).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = ReadOptions.parse_options(options, streaming=True)
        self.schema = schema
        self._client: Client | None = None
        self._target: Bound | None = None
        self._last: dict[str, Any] | None = None
        self._report: dict[str, Any] | None = None
        self._warned = False
        self._batches: MicroBatches | None = None
        self.replayed = 0

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the driver's client."""
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _conn(self, schedule: Reconnect) -> Client:
        client = self._client
        if client is not None and client.logged_on:
            return client
        self._drop()
        opts = self.opts
        self._client = connect(
            opts.uris,
            client_name(opts.client_name_prefix, "stream"),
            opts.connect_timeout_ms,
            schedule=schedule,
        )
        return self._client

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _call(self, what: str, fn: Any) -> Any:
        """``fn(client)`` on the planning client; while ``reconnectTimeout`` lasts, a server
        that cannot be reached or a connection that drops is retried (every URI in turn,
        with back-off): planning steps only read the log (or publish a fence), so a retry
        finds the same answer."""
        opts = self.opts
        schedule = Reconnect(opts.uris, opts.reconnect_timeout_ms, f"{what} of {opts.topic!r}")
        while True:
            try:
                return fn(self._conn(schedule))
            except DisconnectedError as exc:
                self._drop()
                schedule.dropped(exc)
                time.sleep(schedule.pause())
            except AMPSError as exc:
                self._drop()
                if isinstance(exc, AMPSSparkError):
                    raise
                raise AMPSSparkError(f"{what} of {opts.topic!r}: {describe(exc)}") from exc

    def initialOffset(self) -> dict[str, Any]:
        """The starting point: EPOCH by default, ``bookmark``/``begin`` otherwise. NOW is
        pinned to a concrete position (a fence, or the current time without fences)."""
        start = self.opts.start
        if start.is_now:
            if self.opts.fence_topic:
                topic = self.opts.fence_topic
                pos: Position = self._call("fencing", lambda c: fence(c, topic))
                return pos.offset()
            now = int(time.time() * 1_000_000)
            return {"bookmark": format_micros(now), "timestamp": format_micros(now)}
        ts = format_micros(start.micros) if start.micros is not None else None
        return {"bookmark": start.text, "timestamp": ts}

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxRecordsPerTrigger)`` when that option (or its old name
        ``maxRowsPerBatch``) is set, else ``ReadMaxBytes(maxBytesPerTrigger)`` when that is;
        with both, the byte cap is applied with the row limit."""
        opts = self.opts
        if ReadMaxRows is not None and opts.max_rows_per_batch is not None:
            return ReadMaxRows(opts.max_rows_per_batch)
        if ReadMaxBytes is not None and opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """For ``StreamingQueryProgress.sources[].latestOffset``: the log's end as the last
        ``latestOffset`` saw it past its caps (``bookmark`` of the topic's last message, and
        ``messagesBehind``/``bytesBehind``: what the caps left for later micro-batches)."""
        return self._report

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: stop at the log's end as of now."""
        opts = self.opts
        if opts.fence_topic:
            topic = opts.fence_topic
            pos: Position = self._call("fencing", lambda c: fence(c, topic))
            self._target = Bound(pos.bookmark, True, pos.micros)
        else:
            now = int(time.time() * 1_000_000)
            self._target = Bound(format_micros(now), True, now)
        self._batches = None  # counted up to NOW, not to the target
        log.info("available-now target of %r: %s", opts.topic, self._target.text)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """The position of the last new message (at most ``maxRecordsPerTrigger`` messages
        or ``maxBytesPerTrigger`` bytes after ``start``); ``start`` itself when there is
        nothing new. With a cap, the rest of the log is counted too (``reportLatestOffset``),
        once: the next trigger counts only the messages after it."""
        opts = self.opts
        cap: int | None = None
        max_bytes: int | None = None
        if start is None:
            # Spark 4.0/4.1 call latestOffset() without the start: any earlier position finds
            # the same last message, but a row cap needs the real start, so none is applied
            start = self._last if self._last is not None else self.initialOffset()
            capped = opts.max_rows_per_batch is not None or opts.max_bytes_per_trigger is not None
            if capped and not self._warned:
                self._warned = True
                log.warning(
                    "maxRecordsPerTrigger/maxBytesPerTrigger need Spark 4.2+ (admission "
                    "control); ignored"
                )
        elif ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            cap = int(limit.max_rows)
            max_bytes = opts.max_bytes_per_trigger
        elif ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            max_bytes = int(limit.max_bytes)
        found: tuple[tuple[str, int, int] | None, Position | None] = self._call(
            "finding new messages", lambda c: self._next_batch(c, start, cap, max_bytes)
        )
        batch, pos = found
        plan = self._batches
        assert plan is not None
        messages, size = (batch[1], batch[2]) if batch is not None else (0, 0)
        self._report = {
            "bookmark": plan.end or start["bookmark"],
            "messagesBehind": plan.messages - messages,
            "bytesBehind": plan.size - size if plan.sizing else 0,
        }
        if pos is None:
            return start
        offset = pos.offset()
        self._last = offset
        log.debug("%r: %d new message(s) up to %s", opts.topic, messages, offset)
        return offset

    def _next_batch(
        self, client: Client, start: dict[str, Any], cap: int | None, max_bytes: int | None
    ) -> tuple[tuple[str, int, int] | None, Position | None]:
        """The micro-batch after ``start``: ``((bookmark, messages, bytes), position)`` of
        its last message, or ``(None, None)`` when nothing is new.

        The micro-batches ahead are kept (:class:`MicroBatches`) from one trigger to the
        next: when ``start`` is where the previous trigger's batch ended, only the messages
        after the last one counted are replayed; otherwise (the first trigger, a restart,
        other caps) everything from ``start`` is counted. A count that fails leaves nothing
        kept, so a retry counts from ``start``.
        """
        opts = self.opts
        plan, self._batches = self._batches, None
        bookmark = str(start["bookmark"])
        if plan is not None and (
            plan.caps() != (cap, max_bytes)
            or not plan.advance(bookmark)
            or (not plan.exact and not plan.cuts)  # past the batches kept: count again
        ):
            plan = None
        end = self._target or Bound(NOW, True)
        if plan is not None and plan.end is not None:
            tail = range_text(Bound(plan.end, False), end)
            try:
                self.replayed += self._count(client, tail, plan)
            except InvalidBookmarkError:  # the last message counted left the log
                plan = None
        if plan is None or plan.end is None:
            plan = MicroBatches(bookmark, cap, max_bytes)
            whole = range_text(offset_bounds(start, start)[0], end)
            try:
                self.replayed += self._count(client, whole, plan)
            except InvalidBookmarkError as exc:
                rest = after_data_loss(opts, whole, exc, start.get("timestamp"))
                plan = MicroBatches(bookmark, cap, max_bytes)
                self.replayed += self._count(client, rest, plan)
        batch = plan.next_end()
        pos: Position | None = None
        if batch is not None:
            micros = bookmark_micros(client, opts.topic, batch[0])
            if micros is None:
                raise AMPSSparkError(
                    f"message {batch[0]} of {opts.topic!r} left the log while it was planned"
                )
            pos = Position(batch[0], micros)
        self._batches = plan
        return batch, pos

    def _count(self, client: Client, bookmark: str, plan: MicroBatches) -> int:
        opts = self.opts
        return count_into(
            client,
            opts.topic,
            opts.filter,
            bookmark,
            plan,
            options=UNTIMED_REPLAY_OPTIONS,
            wait_ms=opts.read_timeout_ms,
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The micro-batch ``(start:end]``, split by time into ``numPartitions`` ranges."""
        if start == end:
            return []
        begin, stop = offset_bounds(start, end)
        opts = self.opts

        def split(client: Client) -> list[str]:
            try:
                return _split(client, opts, begin, stop, end_is_last=True)
            except InvalidBookmarkError as exc:
                after_data_loss(opts, range_text(begin, stop), exc, start.get("timestamp"))
                return _split(client, opts, Bound(EPOCH, True), stop, end_is_last=True)

        ranges: list[str] = self._call("planning", split)
        return _partitions(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor side: replay this partition's range."""
        return _read_partition(self.opts, self.schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: the position lives in Spark's checkpoint."""
        log.debug("%r: committed up to %s", self.opts.topic, end)
        if self._last is None:
            self._last = dict(end)

    def stop(self) -> None:
        """Close the planning client (Spark may kill the runner without calling this)."""
        if self._client is not None:
            self._client.close()
            self._client = None


# ======================================================================================
# writing


def _task() -> TaskContext:
    tc = TaskContext.get()
    if tc is None:  # pragma: no cover - write() always runs in a task
        raise AMPSSparkError("write() must run in a Spark task")
    return tc


def _summary(messages: Sequence[WriterCommitMessage | None]) -> str:
    done = [m for m in messages if isinstance(m, AMPSCommitMessage)]
    return (
        f"{len(done)}/{len(messages)} task(s), {sum(m.rows for m in done)} row(s), "
        f"{sum(m.published for m in done)} published, {sum(m.skipped for m in done)} skipped"
    )


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise AMPSSparkError('AMPS topics are append-only: use mode("append")')


class AMPSBatchWriter(DataSourceArrowWriter):
    """``df.write.format("amps")``: each task publishes as ``<prefix>-<writeId>-p<partition>``
    with sequence numbers ``row index + 1``, so a retried task (or a re-run with the same
    ``writeId``) is de-duplicated by the server."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        _no_overwrite(overwrite)
        self.opts = WriteOptions.parse_options(options)
        self.publisher = RowPublisher(self.opts, schema)
        self.write_id = self.opts.write_id or uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Executor side: publish this partition's rows (Arrow record batches), flush,
        report."""
        tc = _task()
        partition = tc.partitionId()
        name = f"{self.opts.client_name_prefix}-{self.write_id}-p{partition}"
        chunks = self.publisher.batch_columns(iterator)
        return self.publisher.publish(chunks, name, 0, partition, tc.attemptNumber())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        """Log what was written."""
        log.info("write %s committed: %s", self.write_id, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        """A log cannot be rolled back: re-run with the same ``writeId`` to complete it."""
        log.warning(
            "write %s aborted (%s); published rows stay in the log: re-run with "
            'option("writeId", %r) to complete it without duplicates',
            self.write_id,
            _summary(messages),
            self.write_id,
        )


class AMPSStreamWriter(_StreamWriterBase):
    """``writeStream.format("amps")``: each task publishes as ``<prefix>-<queryId>-p<partition>``
    with sequence numbers ``(batchId << 32) + row index + 1``; a replayed micro-batch (after a
    failure or a restart from the checkpoint) is de-duplicated by the server."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        _no_overwrite(overwrite)
        self.opts = WriteOptions.parse_options(options)
        self.publisher = RowPublisher(self.opts, schema)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Executor side: publish this partition's rows of the micro-batch (Arrow record
        batches on Spark 4.1+, rows on 4.0)."""
        tc = _task()
        batch = tc.getLocalProperty("streaming.sql.batchId")
        query = self.opts.write_id or tc.getLocalProperty("sql.streaming.queryId")
        if batch is None or query is None:  # pragma: no cover - set by the micro-batch engine
            raise AMPSSparkError("no streaming batch id / query id in the task context")
        partition = tc.partitionId()
        name = f"{self.opts.client_name_prefix}-{query}-p{partition}"
        base = int(batch) << SEQUENCE_BATCH_SHIFT
        publisher = self.publisher
        chunks = (
            publisher.batch_columns(iterator)
            if _ARROW_STREAM_WRITER
            else publisher.row_columns(iterator)
        )
        return publisher.publish(chunks, name, base, partition, tc.attemptNumber())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        """Log what was written."""
        log.info("micro-batch %d committed: %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        """Published rows stay; the replay of this batch after a restart completes it."""
        log.warning("micro-batch %d aborted: %s", batchId, _summary(messages))
