"""``command=queue``: a streaming read of an AMPS queue, at least once, tied to Spark's commits.

The driver's source process holds the queue subscription (:class:`~._leases.QueueLeases`):
``latestOffset`` makes a batch of what AMPS leased since the last micro-batch, ``partitions``
carries those messages to the executors (they never subscribe: a lease held by an executor's
connection would end with it), and ``commit`` acknowledges exactly the committed batches. A
micro-batch that fails is never committed: the query stops, the source process and its
connection end, and AMPS delivers the messages again (to this query when it restarts, or to
another consumer of the queue). Offsets are ``{"lease": <session>, "batch": <n>}``; a batch
planned by an earlier run of the query is read as empty on restart, since its messages come
again as new leases.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ..exceptions import AMPSError
from ._convert import RowBuilder
from ._core import AMPSSparkError, ReadOptions, describe
from ._leases import QueueLeases

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0 / 4.1
    ReadAllAvailable = ReadMaxRows = ReadMaxBytes = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: the mixin does not exist before Spark 4.2."""


__all__ = ["AMPSQueueStreamReader", "QueuePartition"]

log = logging.getLogger("ampsclient.spark")


@dataclass(frozen=True)
class QueuePartition(InputPartition):
    """One Spark task's share of a queue micro-batch: the leased messages' delivery payloads
    (leased and acknowledged by the driver; the task only turns them into rows)."""

    index: int
    payloads: tuple[bytes, ...]


class AMPSQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the messages AMPS leased to the query, acknowledged at commit."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = ReadOptions.parse_options(options, streaming=True)
        self.schema = schema
        self._leases: QueueLeases | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the driver's subscription."""
        state = dict(self.__dict__)
        state["_leases"] = None
        return state

    def _holder(self) -> QueueLeases:
        if self._leases is None:
            opts = self.opts
            self._leases = QueueLeases(
                uris=opts.uris,
                topic=opts.topic,
                filter=opts.filter,
                max_backlog=opts.max_backlog,
                ack_batch_size=opts.ack_batch_size,
                options="",  # no server times: "not implemented" for a queue subscription
                prefix=opts.client_name_prefix,
                connect_timeout_ms=opts.connect_timeout_ms,
                reconnect_timeout_ms=opts.reconnect_timeout_ms,
                wait_ms=opts.read_timeout_ms,
            )
        return self._leases

    def initialOffset(self) -> dict[str, Any]:
        """Before any batch (no session: nothing leased yet)."""
        return {"lease": "", "batch": 0}

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxRecordsPerTrigger)``, else ``ReadMaxBytes(maxBytesPerTrigger)``,
        else everything leased (at most ``maxBacklog``)."""
        opts = self.opts
        if ReadMaxRows is not None and opts.max_rows_per_batch is not None:
            return ReadMaxRows(opts.max_rows_per_batch)
        if ReadMaxBytes is not None and opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: micro-batches until one finds nothing leased (and
        nothing left to commit)."""
        log.info("queue %r: reading what is available now", self.opts.topic)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """A new batch of what AMPS leased since the last one; ``start`` when nothing is new
        (and nothing is left to commit)."""
        opts = self.opts
        max_rows = opts.max_rows_per_batch
        max_bytes = opts.max_bytes_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = int(limit.max_rows)
        elif ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            max_bytes = int(limit.max_bytes)
        leases = self._holder()
        try:
            number = leases.take(max_rows, max_bytes)
        except AMPSSparkError:
            raise
        except AMPSError as exc:
            leases.close()
            raise AMPSSparkError(f"leasing from queue {opts.topic!r}: {describe(exc)}") from exc
        if number is None:
            return start if start is not None else self.initialOffset()
        return {"lease": leases.session, "batch": number}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """For the progress's ``latestOffset``: messages leased and in no batch yet, and the
        backlog AMPS granted."""
        leases = self._leases
        if leases is None:
            return None
        return {
            "lease": leases.session,
            "batch": leases.last,
            "leasedNotBatched": leases.pending(),
            "grantedBacklog": leases.granted,
        }

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The messages of the batches ``(start:end]``, in ``numPartitions`` tasks."""
        if start == end:
            return []
        leases = self._leases
        if leases is None or end.get("lease") != leases.session:
            log.warning(
                "queue %r: micro-batch up to %s was planned by an earlier run of the query; "
                "its leases ended with that run's connection and AMPS delivers its messages "
                "again, so it is read as empty",
                self.opts.topic,
                end,
            )
            return []
        after = int(start["batch"]) if start.get("lease") == leases.session else 0
        payloads = leases.payloads(after, int(end["batch"]))
        if not payloads:
            return []
        n = min(self.opts.num_partitions, len(payloads))
        size = -(-len(payloads) // n)
        return [
            QueuePartition(i, tuple(payloads[i * size : (i + 1) * size]))
            for i in range(n)
            if payloads[i * size : (i + 1) * size]
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor side: the partition's messages as rows (nothing to fetch or acknowledge)."""
        assert isinstance(partition, QueuePartition)
        builder = RowBuilder(self.schema, self.opts)
        chunks = [list(partition.payloads)]
        if builder.arrow:
            return builder.arrow_batches(chunks)
        return builder.rows(chunks)

    def commit(self, end: dict[str, Any]) -> None:
        """Acknowledge the messages of every batch up to ``end`` (AMPS removes them from the
        queue); an offset of an earlier run holds no lease of ours."""
        leases = self._leases
        if leases is None or end.get("lease") != leases.session:
            log.debug("queue %r: nothing of this run to acknowledge at %s", self.opts.topic, end)
            return
        try:
            count = leases.commit(int(end["batch"]))
        except AMPSSparkError:
            raise
        except AMPSError as exc:
            raise AMPSSparkError(
                f"acknowledging queue {self.opts.topic!r} up to {end}: {describe(exc)}"
            ) from exc
        log.info("queue %r: %d message(s) acknowledged up to %s", self.opts.topic, count, end)

    def stop(self) -> None:
        """Close the subscription: AMPS returns what was not acknowledged (Spark may kill the
        source process without calling this; the connection's end does the same)."""
        if self._leases is not None:
            self._leases.close()
            self._leases = None
