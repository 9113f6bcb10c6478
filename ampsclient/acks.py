"""Queue acknowledgements from the client: ``ack``, auto-ack, batching (official behaviour).

A message delivered from an AMPS queue is leased to the subscriber until it is acknowledged.
The ack is a ``sow_delete`` on the message's topic naming its bookmark, sent with the fixed
command id ``AMPS-queue-ack`` and no ack request (``shared/queues.md`` §10)::

    {"c":"sow_delete","t":"q","cid":"AMPS-queue-ack","bookmark":"1|1|,1|2|"}
    {"c":"sow_delete","t":"q","cid":"AMPS-queue-ack","bookmark":"1|3|","o":"cancel"}

* :class:`QueueAcks` keeps one client's settings and pending batch: with
  ``ack_batch_size`` > 1, plain acks are grouped per topic and sent when a batch is full or
  ``ack_timeout`` ms after its first ack; an ack with options (``cancel``, ``expire``) goes
  out at once on its own. A batch is capped at the backlog the subscribe ack reported
  (``"o":"max_backlog=N"``), else it could never fill. ``flush()`` sends what is pending
  (the client does it before it disconnects).
* With ``auto_ack`` on, a handler's queue message (one with a lease period) is acked when
  the handler returns and returned to the queue (``cancel``) when it raises; a
  ``MessageStream`` acks a message when the application asks for the next one or once it
  has held it for the ack timeout (a quiet stream leaves nothing leased). An ack the
  application made itself since the message was handed out is not repeated.
* :func:`persisted_ack_writer`: the HA client's form, through its publish store.
* :class:`QueueAckMethods`: the official methods (``ack``, ``set_auto_ack``...), an abstract
  base for a client class that defines ``queue_acks``.
* :func:`bound_message_type`: the per-client :class:`Message` subclass whose
  :meth:`Message.ack` goes to that client.
"""

from __future__ import annotations

import abc
import logging
import re
import struct
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final

from . import _accel
from .exceptions import AMPSError, UsageError
from .protocol.header import encode_header, escape
from .protocol.message import Message

__all__ = [
    "ACK_COMMAND_ID",
    "AutoAckCall",
    "QueueAckMethods",
    "QueueAcks",
    "autoack_take",
    "bound_message_type",
    "delivery_fields",
    "parse_max_backlog",
    "persisted_ack_writer",
]

log = logging.getLogger("ampsclient.acks")

_pack_len = struct.Struct(">I").pack

ACK_COMMAND_ID = "AMPS-queue-ack"
"""The command id of every queue ack (as the official client sends it)."""

_ACK_HEAD: Final = b'{"c":"sow_delete","t":"'
_ACK_MID: Final = '","cid":"' + ACK_COMMAND_ID + '","bookmark":"'
"""A plain ack's header around its escaped topic and bookmarks (``encode_header``'s bytes for
``{"c":"sow_delete","t":T,"cid":ACK_COMMAND_ID,"bookmark":B}``)."""

Handler = Callable[[Message], Any]


def bound_message_type(
    ack: Callable[[str, str, str | None], None], sink: QueueAcks | None = None
) -> type[Message]:
    """A :class:`Message` subclass whose :meth:`~Message.ack` calls ``ack(topic, bm, opts)``.

    A client hands its deliveries out as instances of its own subclass, so that
    ``message.ack()`` reaches the client that received the message; ``sink`` (the client's
    :class:`QueueAcks`) lets :meth:`Message.processing` see what was already settled.
    """
    return type(
        "Message",
        (Message,),
        {"__slots__": (), "_ack_to": staticmethod(ack), "_ack_sink": sink},
    )


_MISSING = object()

_SETTLED_KEPT = 4096
"""Acks remembered to tell an application's own ack from auto-ack (oldest forgotten)."""


class QueueAcks:
    """One client's queue-ack settings and pending batch. Thread-safe.

    Args:
        send: queues one payload (a header) for writing; raises ``AMPSError`` when the
            client is not connected.
        call_later: ``call_later(seconds, fn)`` runs ``fn`` later on the client's loop.
    """

    def __init__(
        self,
        send: Callable[[bytes], None],
        call_later: Callable[[float, Callable[[], None]], None],
    ) -> None:
        self._send = send
        self._call_later = call_later
        # the C auto-ack reads whether this lock is held without taking it (StoreLock)
        self._lock: Any = threading.Lock() if _accel.StoreLock is None else _accel.StoreLock()
        self._take = _accel.autoack_take or autoack_take
        # the batches: pending (topic -> bookmarks), caps (topic -> smallest backlog of its
        # subscriptions), batch_size. A type of the C speedups when built (their AutoAck
        # reads its fields), else its twin; replaced only here, under the lock.
        self._batches = batches = _accel.AckBatches()
        batches.pending = {}
        batches.caps = {}
        batches.batch_size = 0
        self._timer_armed = False
        self._settled: dict[tuple[str, str], None] = {}  # acked since handed out (bounded)
        self._backlogs: dict[str, tuple[str, int]] = {}  # sub_id -> (topic, max_backlog)
        self._writer: Callable[[str, str, str | None], None] | None = None
        self.auto_ack = False
        """Ack queue messages when their handler returns (official default: off)."""
        self.timeout_ms = 1000
        """The longest a batched ack waits, in milliseconds (0: until the batch is full)."""

    @property
    def batch_size(self) -> int:
        """Plain acks per ``sow_delete`` (0 or 1: each ack at once)."""
        return self._batches.batch_size

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self._batches.batch_size = value

    # -- settings (official rules) ----------------------------------------------------------

    def set_batch_size(self, batch_size: int) -> None:
        """Group up to ``batch_size`` plain acks per topic."""
        if batch_size < 0:
            raise OverflowError("the ack batch size cannot be negative")
        self.batch_size = int(batch_size)
        if self.batch_size > 1 and self.timeout_ms == 0:
            self.timeout_ms = 1000
        if self.batch_size <= 1:
            self.flush()

    def set_timeout(self, timeout_ms: int) -> None:
        """Send a partial batch this many ms after its first ack."""
        if timeout_ms < 0:
            raise OverflowError("the ack timeout cannot be negative")
        if timeout_ms == 0 and self.batch_size > 1:
            raise AMPSError("Ack timeout must be > 0 when ack batch size > 1")
        self.timeout_ms = int(timeout_ms)

    # -- backlog caps ---------------------------------------------------------------------------

    def subscribed(self, sub_id: str, topic: str | None, options: str | None) -> None:
        """A subscription's processed ack arrived: remember the ``max_backlog=N`` it reports.

        A plain ack batch for ``topic`` is then capped at the smallest backlog reported for
        it: a subscription may hold only that many leased messages, so a bigger batch could
        never fill and would wait for the ack timer with the consumer stalled (the official
        client caps the same way).
        """
        backlog = parse_max_backlog(options)
        with self._lock:
            if backlog is None or not topic:
                self._backlogs.pop(sub_id, None)
            else:
                self._backlogs[sub_id] = (topic, backlog)
            self._recompute_caps()

    def unsubscribed(self, sub_id: str) -> None:
        """Forget the backlog of ``sub_id`` (``"all"``: of every subscription)."""
        with self._lock:
            if sub_id == "all":
                self._backlogs.clear()
            else:
                for one in sub_id.split(","):
                    self._backlogs.pop(one.strip(), None)
            self._recompute_caps()

    def _recompute_caps(self) -> None:
        caps: dict[str, int] = {}
        for topic, backlog in self._backlogs.values():
            old = caps.get(topic)
            caps[topic] = backlog if old is None else min(old, backlog)
        self._batches.caps = caps

    def batch_limit(self, topic: str) -> int:
        """The effective batch size for ``topic``: ``batch_size`` capped at its backlog."""
        limit = self.batch_size
        cap = self._batches.caps.get(topic)
        if cap is not None and cap < limit:
            limit = max(cap, 1)
        return limit

    # -- acking -------------------------------------------------------------------------------

    def ack(self, topic: str, bookmark: str, options: str | None = None) -> None:
        """Acknowledge ``bookmark`` on ``topic`` (batched unless ``options`` are given)."""
        if not topic or not bookmark:
            raise UsageError("a queue ack needs a topic and a bookmark")
        settled = self._settled
        settled[(topic, bookmark)] = None
        if len(settled) > _SETTLED_KEPT:
            try:  # the oldest goes; another thread may be changing the dict meanwhile
                del settled[next(iter(settled))]
            except (KeyError, RuntimeError, StopIteration):
                pass
        if options:
            self._write(topic, bookmark, options)
            return
        self._batch(topic, bookmark)

    def _batch(self, topic: str, bookmark: str) -> None:
        """A plain ack: into ``topic``'s batch (the bookmarks are joined once, when the batch
        is sent), or sent at once without batching."""
        limit = self.batch_size
        cap = self._batches.caps.get(topic)
        if cap is not None and cap < limit:
            limit = max(cap, 1)
        batches = self._batches
        pending = batches.pending
        if limit <= 1 and topic not in pending:
            self._write(topic, bookmark, None)
            return
        full: list[str] | None = None
        arm = False
        with self._lock:
            pending = batches.pending  # flush() may have swapped it meanwhile
            batch = pending.get(topic)
            if batch is None:
                batch = pending[topic] = []
            batch.append(bookmark)
            if len(batch) >= limit:
                full = pending.pop(topic)
            elif not self._timer_armed and self.timeout_ms:
                self._timer_armed = arm = True
        if full is not None:
            self._write(topic, ",".join(full), None)
        if arm:
            self._call_later(self.timeout_ms / 1000.0, self._on_timer)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer_armed = False
        self.flush()

    def flush(self) -> None:
        """Send every pending batched ack now."""
        with self._lock:
            batches = self._batches
            pending, batches.pending = batches.pending, {}
        for topic, bookmarks in pending.items():
            try:
                self._write(topic, ",".join(bookmarks), None)
            except AMPSError as exc:
                log.warning("queue acks for %s not sent: %s", topic, exc)

    @property
    def pending(self) -> int:
        """Acks waiting in batches."""
        with self._lock:
            return sum(len(b) for b in self._batches.pending.values())

    def set_writer(self, writer: Callable[[str, str, str | None], None] | None) -> None:
        """Send each ack frame with ``writer(topic, bookmarks, options)`` instead of as a plain
        ``sow_delete`` (the HA client stores acks in its publish store and asks for
        ``persisted`` acks, so that they are replayed after a reconnect)."""
        self._writer = writer

    def _write(self, topic: str, bookmark: str, options: str | None) -> None:
        if self._writer is not None:
            self._writer(topic, bookmark, options)
            return
        if options is None:  # the usual ack: encode_header's bytes, made directly
            self._send(_ACK_HEAD + (escape(topic) + _ACK_MID + escape(bookmark)).encode() + b'"}')
            return
        self._send(
            encode_header(
                {
                    "c": "sow_delete",
                    "t": topic,
                    "cid": ACK_COMMAND_ID,
                    "bookmark": bookmark,
                    "o": options,
                }
            )
        )

    # -- auto-ack ------------------------------------------------------------------------------

    def handed_out(self, topic: str, bookmark: str) -> None:
        """A delivery of ``bookmark`` reaches the application: not settled (yet)."""
        self._settled.pop((topic, bookmark), None)

    def is_settled(self, topic: str, bookmark: str) -> bool:
        """Whether ``bookmark`` was acked (or cancelled) since it was last handed out."""
        return (topic, bookmark) in self._settled

    def hand_out(self, message: Message) -> None:
        """:meth:`handed_out` for ``message`` (a stream gives it to the application)."""
        topic, bookmark = message.topic, message.bookmark
        if topic and bookmark:
            self._settled.pop((topic, bookmark), None)

    def settle(self, message: Message, failed: bool = False) -> None:
        """Auto-ack ``message`` if it is a queue message (``cancel`` when ``failed``), unless
        the application acked or cancelled it itself since it was handed out."""
        if not message.lease_period:
            return  # not leased: not a queue message (official behaviour)
        topic, bookmark = message.topic, message.bookmark
        if not topic or not bookmark:
            return
        key = (topic, bookmark)
        if self._settled.pop(key, _MISSING) is not _MISSING:
            return  # the application acked it itself
        self.ack(topic, bookmark, "cancel" if failed else None)
        self._settled.pop(key, None)

    def settle_idle(self, message: Message) -> None:
        """A stream's held message was not followed by a request for the next one within
        the ack timeout: ack it now and send what is pending (the stream is quiet)."""
        self.settle(message)
        self.flush()

    def idle_seconds(self) -> float:
        """How long a stream holds an auto-acked message before acking it anyway (the ack
        timeout; 0: until the next one is asked for)."""
        return self.timeout_ms / 1000.0

    def wrap(self, handler: Handler) -> Handler:
        """``handler`` with auto-ack: ack when it returns, ``cancel`` when it raises.

        With the C speedups the result is their ``AutoAck``, else :class:`AutoAckCall` (its
        twin). The hot path (the memory of settled acks is empty: the application acked
        nothing itself, which is the usual case with auto-ack) is one :func:`autoack_take`:
        the topic and the bookmark read from the payload's bytes instead of parsing the
        header, the bookmark added to the topic's batch, the batch joined once it is full.
        Anything else takes the general path (:meth:`settle`).
        """
        lane = _accel.AutoAck
        if lane is not None and _accel.StoreLock is not None:  # then self._lock is one
            return lane(  # type: ignore[no-any-return]
                handler,
                self._batches,
                self._settled,
                self._lock,
                self.hand_out,
                self.settle,
                self.after_handler,
                self._send_now,
                self._arm,
            )
        return AutoAckCall(handler, self).call

    def after_handler(self, message: Message) -> None:
        """Auto-ack ``message`` after its handler returned (the batches' lock taken here)."""
        if self._settled:  # the application acked something itself: the general path
            self.settle(message)
            return
        with self._lock:
            b = self._batches
            done = self._take(b.pending, b.caps, b.batch_size, message.raw_payload)
        if done is None:
            self.settle(message)
        elif done.__class__ is tuple:
            self._write(done[0], done[1], None)
        elif done == 1:
            self._arm()

    def _send_now(self, topic: str, bookmarks: str) -> None:
        self._write(topic, bookmarks, None)

    def _arm(self) -> None:
        """A new batch began: start the ack timer unless it runs already."""
        with self._lock:
            if self._timer_armed or not self.timeout_ms:
                return
            self._timer_armed = True
        self._call_later(self.timeout_ms / 1000.0, self._on_timer)


class AutoAckCall:
    """A queue subscription's handler with auto-ack (:meth:`QueueAcks.wrap`): the Python
    twin of the C speedups' ``AutoAck``."""

    __slots__ = ("__wrapped__", "_acks", "_batches", "_lock", "_settled", "_take")

    def __init__(self, handler: Handler, acks: QueueAcks) -> None:
        self.__wrapped__ = handler
        self._acks = acks
        self._settled = acks._settled  # never replaced (unlike the batches' fields)
        self._batches = acks._batches
        self._lock = acks._lock
        self._take = acks._take

    def call(self, message: Message) -> Any:
        """Run the handler, then ack ``message`` (``cancel`` it when the handler raises)."""
        acks = self._acks
        if self._settled:
            acks.hand_out(message)
        try:
            result = self.__wrapped__(message)
        except BaseException:
            acks.settle(message, True)
            raise
        if self._settled:
            acks.settle(message)
            return result
        with self._lock:  # QueueAcks.after_handler, inline
            b = self._batches
            done = self._take(b.pending, b.caps, b.batch_size, message.raw_payload)
        if done is None:
            acks.settle(message)
        elif done.__class__ is tuple:
            acks._write(done[0], done[1], None)
        elif done == 1:
            acks._arm()
        return result

    __call__ = call


def persisted_ack_writer(
    store_parts: Callable[[bytes, bytes], tuple[int, bytes]],
    lock: AbstractContextManager[Any],
    queue_frame: Callable[[bytes], object],
) -> Callable[[str, str, str | None], None]:
    """The HA client's ack writer (:meth:`QueueAcks.set_writer`): each ack is stored in the
    publish store (``store_parts(head, tail)`` numbers it) with a ``persisted`` ack request
    and queued (``queue_frame``, under the publish ``lock``; dropped while disconnected).
    Like the official HAClient, it is replayed after a reconnect until persisted, but with
    its options: the official client drops them on replay (a ``cancel`` became an ack).
    Never blocks: acks are made on the loop thread (auto-ack)."""

    def write(topic: str, bookmarks: str, options: str | None) -> None:
        fields = {
            "t": topic,
            "cid": ACK_COMMAND_ID,
            "a": "persisted",
            "bookmark": bookmarks,
            "o": options,
        }
        tail = b"," + encode_header(fields)[1:]
        with lock:
            _seq, payload = store_parts(b'{"c":"sow_delete","s":', tail)
            queue_frame(_pack_len(len(payload)) + payload)

    return write


_DELIVERY: Final = re.compile(
    rb'\{"c":"p","t":"([^"\\]+)","sids":"[^"\\]*","bm":"([^"\\]+)","lp":"[^"\\]'
)
"""The start of a leased delivery's header as the reference server writes it."""


def delivery_fields(payload: bytes) -> tuple[str, str] | None:
    """``(topic, bookmark)`` of a leased queue delivery read from its bytes, or ``None``
    when the payload is not in the form this reads (then parse the header).

    The form is the reference server's delivery header, starting ``{"c":"p","t":"<topic>",
    "sids":"<ids>","bm":"<bookmark>","lp":"<lease>`` with a non-empty lease and no quote or
    backslash inside those values: with no escapes, every quote there delimits a string, so
    the fields matched are the header's own (one regular expression match, one C call).
    """
    found = _DELIVERY.match(payload)
    if found is None:
        return None
    topic, bookmark = found.groups()
    return topic.decode(), bookmark.decode()


def autoack_take(
    pending: dict[str, list[str]], caps: dict[str, int], batch_size: int, payload: bytes
) -> tuple[str, str] | int | None:
    """Add a leased delivery's bookmark to its topic's pending ack batch (the caller holds
    the batches' lock); the Python twin of the C ``autoack_take``.

    ``pending`` maps a topic to its batch (a list of bookmarks); the batch limit is
    ``batch_size`` capped at ``caps[topic]`` (at least 1). Returns ``None`` when the payload
    is not in the form :func:`delivery_fields` reads (or not UTF-8 there): parse the header
    instead; ``(topic, bookmarks)`` when an ack is to be sent now (the batch is full: it
    leaves ``pending``, its bookmarks joined with ``,``; or no batching: the one bookmark);
    else the number of bookmarks now in the topic's batch.
    """
    found = _DELIVERY.match(payload)
    if found is None:
        return None
    try:
        topic = found[1].decode()
        bookmark = found[2].decode()
    except UnicodeDecodeError:
        return None
    limit = batch_size
    cap = caps.get(topic)
    if cap is not None and cap < limit:
        limit = max(cap, 1)
    batch = pending.get(topic)
    if batch is None:
        if limit <= 1:
            return topic, bookmark
        batch = pending[topic] = []
    batch.append(bookmark)
    if len(batch) >= limit:
        del pending[topic]
        return topic, ",".join(batch)
    return len(batch)


def parse_max_backlog(options: str | None) -> int | None:
    """The ``N`` of ``max_backlog=N`` in a subscribe ack's options (``None`` if absent)."""
    if not options:
        return None
    for part in options.split(","):
        key, sep, value = part.strip().partition("=")
        if sep and key.strip() == "max_backlog":
            try:
                return int(value.strip())
            except ValueError:
                log.warning("subscribe ack with a max_backlog that is not a number: %r", value)
                return None
    return None


class QueueAckMethods(abc.ABC):
    """The official client's queue-ack methods, on the :class:`QueueAcks` a client defines
    as :attr:`queue_acks`: an abstract base that keeps no state (every method forwards)."""

    @property
    @abc.abstractmethod
    def queue_acks(self) -> QueueAcks:
        """The client's queue acknowledgements."""

    def ack(
        self,
        message_or_topic: Message | str,
        bookmark: str | None = None,
        options: str | None = None,
    ) -> None:
        """Acknowledge a queue message: ``ack(message, options=None)`` or
        ``ack(topic, bookmark, options=None)``.

        ``options``: e.g. ``"cancel"`` (return the message to the queue) or ``"expire"``.
        """
        if isinstance(message_or_topic, Message):
            if options is None and bookmark is not None:
                options, bookmark = bookmark, None  # ack(message, "cancel")
            topic, bm = message_or_topic.topic, message_or_topic.bookmark
            if not topic or not bm:
                raise UsageError("ack(message): the message has no topic or no bookmark")
            self.queue_acks.ack(topic, bm, options)
            return
        if bookmark is None:
            raise UsageError("ack(topic, bookmark, options=None): the bookmark is missing")
        self.queue_acks.ack(message_or_topic, bookmark, options)

    def set_auto_ack(self, enabled: bool) -> None:
        """Ack queue messages when their handler returns (applies to later subscriptions)."""
        if not isinstance(enabled, bool):
            raise TypeError("set_auto_ack takes a bool")
        self.queue_acks.auto_ack = enabled

    def get_auto_ack(self) -> bool:
        """Whether auto-ack is on."""
        return self.queue_acks.auto_ack

    def set_ack_batch_size(self, batch_size: int) -> None:
        """Group up to ``batch_size`` plain acks per topic (0 or 1: send each at once)."""
        self.queue_acks.set_batch_size(batch_size)

    def get_ack_batch_size(self) -> int:
        """The ack batch size."""
        return self.queue_acks.batch_size

    def set_ack_timeout(self, timeout: int) -> None:
        """The longest (ms) a batched ack waits before it is sent."""
        self.queue_acks.set_timeout(timeout)

    def get_ack_timeout(self) -> int:
        """The ack timeout in milliseconds."""
        return self.queue_acks.timeout_ms

    def flush_acks(self) -> None:
        """Send every pending batched ack now (the C++ client's ``flushAcks``)."""
        self.queue_acks.flush()
