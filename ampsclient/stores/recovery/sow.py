"""SOWRecoveryPointAdapter: recovery points in a SOW topic of an AMPS server.

Wire behaviour (the official adapter's, ``shared/protocol.md`` §8.1, re-checked black-box
against ``amps-python-client`` 5.3.5.14):

* construction runs, on the *store client* (a separate, logged-on connection), the query ::

      {"c":"sow","t":"/ADMIN/bookmark_store","filter":"/clientName='<tracked>'",
       "o":"select=[-/,+/subId,+/bookmark]","batch_size":10,...}

  (``use_timestamp`` adds ``,timestamp`` to the options and appends each record's ``ts``,
  the time of its last update, to the bookmark read back: ``22|1|,20261122T183421.812052Z``);
* :meth:`SOWRecoveryPointAdapter.update` publishes, without an ack, the compact JSON document
  ``{"clientName":"<tracked>","subId":"<sub id>","bookmark":"<bookmark>"}``;
* :meth:`SOWRecoveryPointAdapter.purge` runs ``sow_delete`` with the filter
  ``/clientName='<tracked>' and /subId='<sub id>'`` (or only the client name).

The topic must be a SOW topic keyed by the client-name and sub-id fields. Records are read by
field name (the official adapter reads them by position, which is why the ``select``
projection matters to it); either adapter reads what the other wrote.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from ...command import Command
from ...exceptions import AMPSError, StoreError, TimeoutError
from ...protocol.bookmarks import EPOCH, format_timestamp
from ...protocol.message import Message
from .base import RecoveryPoint, RecoveryPointCursor, make_point

if TYPE_CHECKING:
    from ...sync import Client

__all__ = ["DEFAULT_TOPIC", "SOWRecoveryPointAdapter"]

logger = logging.getLogger("ampsclient.stores.recovery")

DEFAULT_TOPIC: Final = "/ADMIN/bookmark_store"
"""The official adapter's default topic."""


def _quote(value: str) -> str:
    """A single-quoted AMPS filter string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class SOWRecoveryPointAdapter(RecoveryPointCursor):
    """Store recovery points in a SOW topic (the official ``SOWRecoveryPointAdapter``).

    The positional order of the arguments is the official one, so
    ``SOWRecoveryPointAdapter(client, "app", 5000, True)`` means the same in both clients.

    Args:
        store_client: a synchronous :class:`~ampsclient.Client` or
            :class:`~ampsclient.sync.HAClient`, connected and logged on (JSON message type),
            *not* the client whose subscriptions are tracked; it may be connected to another
            server than the tracked client.
        tracked_client_name: the name of the client whose recovery points are stored.
        timeout_millis: how long the initial SOW query and a purge may take.
        use_timestamp: read each point back with the time of its last update appended
            (journal-removal protection, seed 003).
        close_client: close ``store_client`` in :meth:`close`.
        update_failure_throws: :meth:`update` raises
            :class:`~ampsclient.exceptions.StoreError` when the publish fails; otherwise the
            failure is logged and passed to the exception listener.
        topic: the SOW topic.
        client_name_field: document field holding the tracked client name (a SOW key).
        sub_id_field: document field holding the sub id (a SOW key).
        bookmark_field: document field holding the bookmark.
        timestamp_field: also write the update time (client clock, ``YYYYmmddTHHMMSS.ffffffZ``)
            into this field; with ``use_timestamp`` it is preferred to the record's ``ts``.
            Not an official option; official readers ignore the extra field.

    Raises:
        StoreError: the initial query failed (chained to the client's error).
        ValueError: an empty tracked client name.

    Example::

        store_client = Client("orders-app-recovery")
        store_client.connect_and_logon("tcp://127.0.0.1:9007/amps/json")
        adapter = SOWRecoveryPointAdapter(store_client, "orders-app", close_client=True)
        bookmark_store = MemoryBookmarkStore(adapter)
    """

    def __init__(
        self,
        store_client: Client,
        tracked_client_name: str,
        timeout_millis: int = 5000,
        use_timestamp: bool = False,
        close_client: bool = False,
        update_failure_throws: bool = False,
        topic: str = DEFAULT_TOPIC,
        client_name_field: str = "clientName",
        sub_id_field: str = "subId",
        bookmark_field: str = "bookmark",
        *,
        timestamp_field: str | None = None,
    ) -> None:
        if not tracked_client_name:
            raise ValueError("tracked_client_name must not be empty")
        self._client: Client | None = store_client
        self._tracked = tracked_client_name
        self._timeout_ms = int(timeout_millis)
        self._use_ts = bool(use_timestamp)
        self._close_client = bool(close_client)
        self._throws = bool(update_failure_throws)
        self._topic = topic
        self._name_field = client_name_field
        self._sub_field = sub_id_field
        self._bm_field = bookmark_field
        self._ts_field = timestamp_field
        self._listener: Callable[[BaseException], Any] | None = None
        self._loaded: list[RecoveryPoint] = self._query()

    # ------------------------------------------------------------------ options

    @property
    def topic(self) -> str:
        """The SOW topic."""
        return self._topic

    @property
    def tracked_client_name(self) -> str:
        """The name of the client whose points are stored."""
        return self._tracked

    def set_exception_listener(self, listener: Callable[[BaseException], Any] | None) -> None:
        """Call ``listener(exc)`` for update failures that are not raised (official API)."""
        self._listener = listener

    def get_exception_listener(self) -> Callable[[BaseException], Any] | None:
        """The exception listener, if any (official API)."""
        return self._listener

    def _store_client(self) -> Client:
        if self._client is None:
            raise StoreError("the SOW recovery point adapter is closed")
        return self._client

    def _name_filter(self) -> str:
        return f"/{self._name_field}={_quote(self._tracked)}"

    # ------------------------------------------------------------------ loading

    def _query(self) -> list[RecoveryPoint]:
        client = self._store_client()
        fields = [self._sub_field, self._bm_field]
        if self._ts_field:
            fields.append(self._ts_field)
        options = "select=[-/," + ",".join(f"+/{f}" for f in fields) + "]"
        if self._use_ts:
            options += ",timestamp"
        command = (
            Command("sow")
            .set_topic(self._topic)
            .set_filter(self._name_filter())
            .set_options(options)
            .set_batch_size(10)
            .set_timeout(self._timeout_ms)
        )
        deadline = time.monotonic() + self._timeout_ms / 1000.0 if self._timeout_ms else None
        points: list[RecoveryPoint] = []
        try:
            stream = client.execute(command)
            with stream:
                while True:
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise TimeoutError(f"timed out reading {self._topic}")
                        stream.timeout(max(1, int(left * 1000)))
                    try:
                        message: Message | None = next(stream)
                    except StopIteration:
                        break
                    if message is None:
                        continue  # the per-read timeout; the deadline check above decides
                    if message.command == "sow":
                        point = self._record(message.data, message.timestamp)
                        if point is not None:
                            points.append(point)
        except AMPSError as exc:
            raise StoreError(f"cannot read recovery points from {self._topic}: {exc}") from exc
        logger.debug("loaded %d recovery points of %r", len(points), self._tracked)
        return points

    def _record(self, data: bytes, ts: str | None) -> RecoveryPoint | None:
        try:
            record = json.loads(data)
        except ValueError:
            logger.warning("skipping a %s record that is not JSON: %r", self._topic, data[:80])
            return None
        if not isinstance(record, dict):
            return None
        sub_id, bookmark = record.get(self._sub_field), record.get(self._bm_field)
        if not isinstance(sub_id, str) or not sub_id or not isinstance(bookmark, str):
            logger.warning("skipping a %s record without %s/%s", self._topic, *self._fields())
            return None
        if self._use_ts and bookmark and bookmark != EPOCH:
            stamp = record.get(self._ts_field) if self._ts_field else None
            if not isinstance(stamp, str) or not stamp:
                stamp = ts
            if stamp:
                bookmark = f"{bookmark},{stamp}"
        return make_point(sub_id, bookmark)

    def _fields(self) -> tuple[str, str]:
        return self._sub_field, self._bm_field

    def _points(self) -> list[RecoveryPoint]:
        # what the query at construction read (minus purged points): the store reads them once
        return list(self._loaded)

    # ------------------------------------------------------------------ adapter API

    def update(self, point: RecoveryPoint) -> None:
        """Publish ``point`` to the topic (no ack; see ``update_failure_throws``)."""
        doc: dict[str, str] = {
            self._name_field: self._tracked,
            self._sub_field: point.get_sub_id(),
            self._bm_field: point.get_bookmark(),
        }
        if self._ts_field:
            doc[self._ts_field] = format_timestamp(datetime.now(UTC))
        data = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        client = self._store_client()  # closed: a usage error, always raised
        try:
            client.publish(self._topic, data)
        except AMPSError as exc:
            if self._throws:
                raise StoreError(f"cannot store the recovery point of {point.sub_id!r}") from exc
            logger.warning("recovery point update of %r failed: %s", point.sub_id, exc)
            listener = self._listener
            if listener is not None:
                listener(exc)

    def purge(self, sub_id: str | None = None) -> None:
        """Delete the stored point of ``sub_id``, or every point of the tracked client.

        Raises:
            StoreError: the ``sow_delete`` failed (always raised: a purge is explicit).
        """
        flt = self._name_filter()
        if sub_id is not None:
            flt += f" and /{self._sub_field}={_quote(sub_id)}"
        client = self._store_client()
        try:
            client.sow_delete(self._topic, flt, self._timeout_ms)
        except AMPSError as exc:
            raise StoreError(f"cannot purge recovery points from {self._topic}") from exc
        if sub_id is None:
            self._loaded = []
        else:
            self._loaded = [p for p in self._loaded if p.sub_id != sub_id]

    def prune(self) -> None:
        """Nothing to prune in a SOW topic (official: "no effect")."""

    def close(self) -> None:
        """Stop using the store client (closing it with ``close_client``). Idempotent."""
        client, self._client = self._client, None
        if client is not None and self._close_client:
            client.close()

    def __enter__(self) -> SOWRecoveryPointAdapter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
