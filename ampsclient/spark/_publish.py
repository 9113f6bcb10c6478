"""The executor side of a write: one task's rows published exactly once.

A task publishes through an :class:`~ampsclient.sync.HAClient` whose client name and sequence
numbers come from the task (``base + row index + 1``), so the server drops whatever an earlier
attempt already got persisted (see ``docs/spark.md``). Rows arrive as Arrow record batches
(:class:`~pyspark.sql.datasource.DataSourceArrowWriter`) or as Spark rows (Spark 4.0's
streaming writer); either way they are turned into column lists per batch, and the common
case (a ``data`` column, no ``correlation_id``/``sow_key``) is published with positional
arguments only, which the client's C publish lane takes without leaving C.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, Row, StringType, StructType

from ..exceptions import AMPSError
from ..ha.reconnect import ExponentialDelayStrategy
from ..stores.publish.memory import MemoryPublishStore
from ..sync import HAClient
from ._convert import encode_row
from ._core import AMPSSparkError, WriteOptions, describe

__all__ = ["AMPSCommitMessage", "Columns", "RowPublisher"]

log = logging.getLogger("ampsclient.spark")

ROWS_PER_CHUNK = 4096
"""Spark rows gathered into one :class:`Columns` on the row path."""


@dataclass
class AMPSCommitMessage(WriterCommitMessage):
    """What one write task did.

    Attributes:
        client_name: the publisher name (the server de-duplicates by it and the sequence).
        rows: rows the task saw.
        published: rows it published.
        skipped: rows it did not publish because the server already had them (an earlier
            attempt of the same task published them).
        first_sequence: the sequence number of its first row.
    """

    partition_id: int
    attempt: int
    client_name: str
    rows: int
    published: int
    skipped: int
    first_sequence: int


@dataclass(frozen=True, slots=True)
class Columns:
    """Consecutive rows of a task, column by column.

    Attributes:
        topics: one topic for every row (the ``topic`` option) or a topic per row.
        payloads: the message bodies.
        correlation_ids / sow_keys: per row, or ``None`` when the schema has no such column.
    """

    topics: str | list[Any]
    payloads: list[bytes]
    correlation_ids: list[str | None] | None
    sow_keys: list[str | None] | None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


class RowPublisher:
    """Publishes one task's rows with sequence numbers ``base + row index + 1``."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        names = schema.fieldNames()
        self.opts = opts
        data = schema["data"].dataType if "data" in names else None
        if data is not None and not isinstance(data, StringType | BinaryType):
            raise AMPSSparkError(f"column data must be STRING or BINARY, not {data.simpleString()}")
        self.has_data = data is not None
        self.topic_column = opts.topic is None
        if self.topic_column and "topic" not in names:
            raise AMPSSparkError('give option("topic", ...) or a topic column')
        self.correlation_id = "correlation_id" in names
        self.sow_key = "sow_key" in names

    # -- rows -> columns -------------------------------------------------------------------

    def _payload(self, row: Row) -> bytes:
        if self.has_data:
            value = row["data"]
            if value is None:
                return b""
            return value.encode() if isinstance(value, str) else bytes(value)
        return encode_row(row.asDict(recursive=True), self.opts.message_type)

    def row_columns(
        self, rows: Iterable[Row], *, chunk_rows: int = ROWS_PER_CHUNK
    ) -> Iterator[Columns]:
        """Spark rows, ``chunk_rows`` at a time."""
        it = iter(rows)
        topic = str(self.opts.topic)
        while chunk := list(islice(it, chunk_rows)):
            yield Columns(
                [_opt_str(r["topic"]) for r in chunk] if self.topic_column else topic,
                [self._payload(r) for r in chunk],
                [_opt_str(r["correlation_id"]) for r in chunk] if self.correlation_id else None,
                [_opt_str(r["sow_key"]) for r in chunk] if self.sow_key else None,
            )

    def batch_columns(self, batches: Iterable[Any]) -> Iterator[Columns]:
        """Arrow record batches (``pyarrow.RecordBatch``), one :class:`Columns` each."""
        import pyarrow as pa

        for batch in batches:
            if self.has_data:
                data = batch.column("data")
                if not pa.types.is_binary(data.type):
                    data = data.cast(pa.binary())
                payloads = [b"" if p is None else p for p in data.to_pylist()]
            else:
                rows = batch.to_pylist(maps_as_pydicts="strict")
                payloads = [encode_row(r, self.opts.message_type) for r in rows]
            yield Columns(
                self._strings(batch, "topic") if self.topic_column else str(self.opts.topic),
                payloads,
                self._strings(batch, "correlation_id") if self.correlation_id else None,
                self._strings(batch, "sow_key") if self.sow_key else None,
            )

    @staticmethod
    def _strings(batch: Any, name: str) -> list[str | None]:
        return [_opt_str(v) for v in batch.column(name).to_pylist()]

    # -- publishing ------------------------------------------------------------------------

    def publish(
        self, chunks: Iterable[Columns], name: str, base: int, partition: int, attempt: int
    ) -> AMPSCommitMessage:
        """Publish every row of ``chunks`` as ``name`` with sequences from ``base + 1``, skip
        the rows the server already persisted for ``name``, flush, report."""
        opts = self.opts
        store = MemoryPublishStore(next_sequence=base + 1)
        strategy = ExponentialDelayStrategy(maximum_retry_time=opts.connect_timeout_ms)
        client = HAClient(name, store, reconnect_delay_strategy=strategy)
        for uri in opts.uris:
            client.get_server_chooser().add(uri)
        ok = False
        counts = [0, 0]  # rows seen, rows skipped
        try:
            skip = self._logon(client, name, base)
            publish = client.async_client.publish  # thread-safe; the HA client's returns `s`
            for chunk in chunks:
                self._publish_chunk(publish, chunk, name, base, skip, counts, partition)
            client.publish_flush(opts.flush_timeout_ms)
            ok = True
        except AMPSSparkError:
            raise
        except AMPSError as exc:
            raise AMPSSparkError(f"publishing as {name!r}: {describe(exc)}") from exc
        finally:
            left = client.close(timeout=None if ok else -1)
            if ok and left:  # pragma: no cover - flushed above
                raise AMPSSparkError(f"{name}: {left} message(s) were not persisted")
        count, skipped = counts
        published = count - skipped
        log.info(
            "%s: %d row(s), %d published, %d already persisted", name, count, published, skipped
        )
        return AMPSCommitMessage(partition, attempt, name, count, published, skipped, base + 1)

    def _logon(self, client: HAClient, name: str, base: int) -> int:
        """Connect; returns how many leading rows an earlier attempt got persisted."""
        opts = self.opts
        try:
            client.connect_and_logon(timeout=opts.connect_timeout_ms)
        except Exception as exc:
            error = client.get_server_chooser().get_error() or ""
            raise AMPSSparkError(
                f"could not connect to AMPS ({', '.join(opts.uris)}) as {name!r}: "
                f"{error or describe(exc)}"
            ) from exc
        ack = client.logon_ack
        persisted = (ack.sequence if ack is not None else None) or 0
        return max(0, persisted - base)

    @staticmethod
    def _publish_chunk(
        publish: Any,
        chunk: Columns,
        name: str,
        base: int,
        skip: int,
        counts: list[int],
        partition: int,
    ) -> None:
        start = counts[0]
        payloads = chunk.payloads
        n = len(payloads)
        counts[0] += n
        first = min(n, max(0, skip - start))  # rows of this chunk an earlier attempt published
        counts[1] += first
        topics, cids, keys = chunk.topics, chunk.correlation_ids, chunk.sow_keys
        expected = base + start + first + 1
        for j in range(first, n):
            topic = topics if isinstance(topics, str) else topics[j]
            if not topic:
                raise AMPSSparkError(f"row {start + j} of partition {partition} has no topic")
            cid = cids[j] if cids is not None else None
            key = keys[j] if keys is not None else None
            if cid is None and key is None:
                seq = publish(topic, payloads[j])  # positional only: the C lane's case
            else:
                seq = publish(topic, payloads[j], correlation_id=cid, sow_key=key)
            if seq != expected:
                raise AMPSSparkError(
                    f"{name}: row {start + j} got sequence {seq}, expected {expected} "
                    "(is another writer using this client name?)"
                )
            expected += 1
