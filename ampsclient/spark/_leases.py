"""A queue's leases held for Spark micro-batches, on the driver.

AMPS leases a queue message to the subscription it delivered it to, until that subscription
acknowledges it (a ``sow_delete`` naming its bookmark), cancels it, its lease period ends or
its connection closes; then the message is delivered again (``docs/spark.md`` cites the user
guide's *Message Queues* chapter). A Spark micro-batch is processed by executors while its
offsets are committed on the driver, so the lease must live on the driver: :class:`QueueLeases`
holds the one queue subscription of a streaming query in the driver's long-lived source
process, groups what it leased into numbered batches (one per micro-batch) and acknowledges a
batch only when Spark commits it. A query that fails or stops never commits its open batches:
its connection closes with the source process, and AMPS delivers those messages again.

Nothing here imports pyspark.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..acks import parse_max_backlog
from ..client import ConnectionEvent, ConnectionState
from ..command import Command
from ..exceptions import AMPSError, TimeoutError as AMPSTimeoutError, error_for_reason
from ..protocol.acks import AckType
from ..protocol.message import Message
from ..sync import Client
from ._core import AMPSSparkError, Reconnect, client_name, connect, describe

__all__ = ["QueueLeases"]

log = logging.getLogger("ampsclient.spark")

_DELIVERY = b'{"c":"p"'


@dataclass
class _Batch:
    """The messages of one micro-batch: their delivery payloads and bookmarks, in order."""

    payloads: list[bytes] = field(default_factory=list)
    bookmarks: list[str] = field(default_factory=list)
    size: int = 0


@dataclass
class _Arrived:
    """Deliveries of the current subscription that no batch holds yet."""

    payloads: list[bytes] = field(default_factory=list)
    bookmarks: list[str] = field(default_factory=list)


class QueueLeases:
    """The queue subscription of one streaming query and its leases, batch by batch.

    Args:
        uris: the servers (the first that answers; the others after a drop).
        topic: the queue topic.
        filter: a content filter of the subscription, or ``None``.
        max_backlog: the ``max_backlog`` the subscription asks for (AMPS grants at most the
            queue's ``MaxPerSubscriptionBacklog``): the most messages leased at once.
        ack_batch_size: bookmarks per acknowledgement (``sow_delete``) at a commit.
        options: more subscription options (``timestamp``), or ``""``.
        prefix: the client name's prefix.
        connect_timeout_ms: per connection attempt.
        reconnect_timeout_ms: how long to keep trying the URIs (with back-off) when none
            answers, at the start or after a drop.
        wait_ms: how long a round trip to the server (a subscription's ack, a flush, the
            acks of a commit) may take before a timeout naming it is raised.
    """

    def __init__(
        self,
        *,
        uris: Sequence[str],
        topic: str,
        filter: str | None,
        max_backlog: int,
        ack_batch_size: int,
        options: str,
        prefix: str,
        connect_timeout_ms: int,
        reconnect_timeout_ms: int,
        wait_ms: int,
    ) -> None:
        self.uris = tuple(uris)
        self.topic = topic
        self.filter = filter
        self.max_backlog = max_backlog
        self.ack_batch_size = ack_batch_size
        self.options = options
        self.prefix = prefix
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect_timeout_ms = reconnect_timeout_ms
        self.wait_ms = wait_ms
        self.session = uuid.uuid4().hex
        """Names this holder's batches in offsets: an offset of another session (an earlier
        run of the query) holds leases that ended with that run's connection."""
        self.granted: int | None = None
        """The backlog AMPS granted the subscription (its processed ack's ``max_backlog``)."""
        self.last = 0
        """The number of the last batch made."""
        self._client: Client | None = None
        self._lock = threading.Lock()
        self._arrived = _Arrived()
        self._batches: dict[int, _Batch] = {}
        self._error: AMPSError | None = None

    # -- the subscription ------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        """The subscription's handler (on the client's thread)."""
        raw = message.raw_payload
        if raw.startswith(_DELIVERY) or message.command == "publish":
            bookmark = message.bookmark or ""
            with self._lock:
                self._arrived.payloads.append(raw)
                self._arrived.bookmarks.append(bookmark)
            return
        if message.command != "ack":
            return
        if message.status == "failure":
            self._error = error_for_reason(message.reason, ack=message)
        elif message.ack_type & AckType.PROCESSED:
            self.granted = parse_max_backlog(message.options)

    def _failure(self) -> AMPSError | None:
        """The failure ack the subscription received, if any."""
        return self._error

    def _on_state(self, event: ConnectionEvent) -> None:
        """A dropped connection ended every lease of the subscription: AMPS delivers those
        messages again, so what no batch holds yet is forgotten (the batches stay: their
        commit still acknowledges them)."""
        if event.state is ConnectionState.DISCONNECTED:
            with self._lock:
                self._arrived = _Arrived()

    def _connection(self) -> Client:
        """The logged-on client with the subscription (made again after a drop)."""
        client = self._client
        if client is not None and client.logged_on:
            return client
        self.close()
        what = f"subscribing to queue {self.topic!r}"
        client = connect(
            self.uris,
            client_name(self.prefix, "queue"),
            self.connect_timeout_ms,
            schedule=Reconnect(self.uris, self.reconnect_timeout_ms, what),
        )
        client.add_connection_state_listener(self._on_state)
        options = ",".join(o for o in (f"max_backlog={self.max_backlog}", self.options) if o)
        cmd = (
            Command("subscribe")
            .set_topic(self.topic)
            .set_filter(self.filter)
            .set_options(options)
            .add_ack_type("processed")
            .set_timeout(self.wait_ms)
        )
        self._error = None
        try:
            client.execute_async(cmd, self._on_message)
        except AMPSError as exc:
            client.close()
            raise AMPSSparkError(f"{what}: {describe(exc)}") from exc
        failure = self._failure()
        if failure is not None:
            client.close()
            raise AMPSSparkError(f"{what}: {describe(failure)}")
        self._client = client
        if self.granted is not None and self.granted < self.max_backlog:
            log.warning(
                "queue %r grants this subscription a backlog of %d message(s), not the %d "
                "asked for (the queue's MaxPerSubscriptionBacklog): a micro-batch holds at "
                "most %d",
                self.topic,
                self.granted,
                self.max_backlog,
                self.granted,
            )
        log.info("subscribed to queue %r (backlog %s)", self.topic, self.granted)
        return client

    def _round_trip(self, client: Client, what: str) -> None:
        """Wait until the server processed everything sent before (a ``flush``)."""
        try:
            client.flush(self.wait_ms)
        except AMPSTimeoutError as exc:
            raise AMPSTimeoutError(
                f"no answer within {self.wait_ms} ms to a flush while {what} of queue "
                f"{self.topic!r}"
            ) from exc

    # -- batches ---------------------------------------------------------------------------

    def take(self, max_rows: int | None = None, max_bytes: int | None = None) -> int | None:
        """A new batch of what is leased and in no batch yet (at most ``max_rows`` messages
        and ``max_bytes`` bytes of payload, one message always), after a round trip that
        lets the server deliver what earlier acks freed. With nothing new but a batch that
        holds messages not yet committed, an empty batch: Spark commits a micro-batch only
        when it plans the next one.

        Returns:
            The new batch's number, or ``None`` when there is nothing to plan.
        """
        client = self._connection()
        self._round_trip(client, "finding leased messages")
        failure = self._failure()
        if failure is not None:
            raise AMPSSparkError(f"queue {self.topic!r}: {describe(failure)}")
        with self._lock:
            arrived = self._arrived
            count = len(arrived.payloads)
            if max_rows is not None:
                count = min(count, max_rows)
            size = 0
            if max_bytes is not None:
                for i in range(count):
                    size += len(arrived.payloads[i])
                    if size > max_bytes and i > 0:
                        count = i
                        size -= len(arrived.payloads[i])
                        break
            else:
                size = sum(len(p) for p in arrived.payloads[:count])
            if count == 0 and not any(b.bookmarks for b in self._batches.values()):
                return None
            batch = _Batch(arrived.payloads[:count], arrived.bookmarks[:count], size)
            del arrived.payloads[:count]
            del arrived.bookmarks[:count]
            self.last += 1
            self._batches[self.last] = batch
        log.debug("queue %r: batch %d holds %d message(s)", self.topic, self.last, count)
        return self.last

    def payloads(self, after: int, upto: int) -> list[bytes]:
        """The delivery payloads of the batches numbered ``after`` (excluded) to ``upto``."""
        out: list[bytes] = []
        for number in range(after + 1, upto + 1):
            batch = self._batches.get(number)
            if batch is not None:
                out.extend(batch.payloads)
        return out

    def pending(self) -> int:
        """Messages leased and in no batch yet."""
        return len(self._arrived.payloads)

    def commit(self, upto: int) -> int:
        """Acknowledge every message of the batches up to ``upto`` (``ack_batch_size``
        bookmarks per ``sow_delete``), wait until the server processed them, forget them.

        Returns:
            How many messages were acknowledged.
        """
        numbers = sorted(n for n in self._batches if n <= upto)
        bookmarks = [bm for n in numbers for bm in self._batches[n].bookmarks]
        if bookmarks:
            client = self._connection()
            step = self.ack_batch_size
            try:
                for i in range(0, len(bookmarks), step):
                    cmd = (
                        Command("sow_delete")
                        .set_topic(self.topic)
                        .set_bookmark(",".join(bookmarks[i : i + step]))
                        .set_timeout(self.wait_ms)
                    )
                    client.execute_async(cmd)
            except AMPSError as exc:
                raise AMPSSparkError(
                    f"acknowledging {len(bookmarks)} message(s) of queue {self.topic!r}: "
                    f"{describe(exc)}"
                ) from exc
            self._round_trip(client, "acknowledging a micro-batch")
            done = set(bookmarks)
            with self._lock:  # a drop made AMPS deliver them again: they are done now
                arrived = self._arrived
                if any(bm in done for bm in arrived.bookmarks):
                    keep = [i for i, bm in enumerate(arrived.bookmarks) if bm not in done]
                    self._arrived = _Arrived(
                        [arrived.payloads[i] for i in keep], [arrived.bookmarks[i] for i in keep]
                    )
        for n in numbers:
            del self._batches[n]
        return len(bookmarks)

    def close(self) -> None:
        """Close the connection: AMPS returns every lease not acknowledged."""
        client, self._client = self._client, None
        if client is not None:
            client.close()
