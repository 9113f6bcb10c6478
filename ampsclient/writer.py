"""FrameWriter: how an :class:`~ampsclient.client.AsyncClient` queues and writes frames.

An object the client holds (``AsyncClient._writer``; the wrappers reach it through the
client's :class:`~ampsclient.wiring.Wiring`), not a base class: it alone owns the write
state. Its flags are a :data:`~ampsclient._accel.WriterFields` it holds
(:attr:`FrameWriter.fields`), a type the C speedups own: their publish lanes read those
flags, and are given what else they use as values (:meth:`FrameWriter.lane_arguments`).
It holds the write queue (the core's ``outq``), wakes the writer on the loop, applies
back-pressure to publisher threads, batches publishes (``set_publish_batching``), and
queues the frames of a store-and-forward wrapper (the HA client, whose publish gate and lock
are its own: :mod:`ampsclient.ha.store_forward`). The bodies of the client's ``publish`` and
``delta_publish`` live here: they only build and queue frames.

The loop thread writes the queue. A publisher on another thread that finds
:data:`CALLER_WRITE_FRAMES` frames queued writes them itself
(:meth:`FrameWriter.write_from_caller`): while it publishes it holds the GIL, and the loop
thread gets it only every switch interval (5 ms), so without this the frames would reach the
server in a few large bursts, most of them after the publishing loop ended, and the server
would wait meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable, Generator
from typing import Any, Final

from . import _accel
from .core.connection import ClientCore
from .core.publish import publish_frame, publish_header
from .core.values import encode_data
from .exceptions import AMPSError, DisconnectedError, UsageError
from .observer import ClientObserver
from .protocol.header import unencodable
from .transport.base import Transport

__all__ = [
    "CALLER_WRITE_FRAMES",
    "PUBLISHED",
    "WRITE_LINGER",
    "FrameWriter",
    "Published",
    "send_nowait",
]

WRITE_LINGER: Final = 0.0005
"""After a write, the writer looks for more queued frames this many seconds later."""

CALLER_WRITE_FRAMES: Final = 256
"""A publish that leaves this many frames queued writes them from its own thread
(:meth:`FrameWriter.write_from_caller`; the C lanes' ``CALLER_WRITE_FRAMES`` is the same)."""

CALLER_SEND_MAX: Final = 256 * 1024
"""A publisher thread's send takes queued frames up to about this many bytes (what the
socket does not take is copied back to the queue: the copy stays small)."""

log = logging.getLogger("ampsclient.client")


class Published(int):
    """What a plain client's ``publish`` returns: the official ``0``, which ``await`` also
    accepts. ``publish`` queues the message before it returns (as nats.py's ``publish``
    buffers), so ``await client.publish(...)`` returns at once, with 0; :meth:`flush` (or a
    persisted-ack flush) waits for the server. One shared instance: the hot path allocates
    nothing."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, int]:
        yield from ()
        return int(self)


PUBLISHED: Final = Published(0)
"""The one :class:`Published` value publish returns."""


def send_nowait(fd: int, data: bytes) -> int:
    """Send ``data`` on the non-blocking socket ``fd``: the bytes it took, 0 when it is full.

    The C speedups' ``send_nowait`` does the same and keeps the GIL meanwhile (this twin
    releases it, as every ``os.write`` does).

    Raises:
        OSError: the connection broke (any error but a full socket).
    """
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


_send_nowait: Final = _accel.send_nowait or send_nowait
_publish_frame: Final = _accel.publish_frame or publish_frame


class FrameWriter:
    """Queueing and writing frames for one connection (see the module docstring).

    Args:
        core: the connection's core: its ``outq`` is the write queue; what it queues (commands)
            wakes the writer and ends a publish batch.
        message_type: returns the message type the connection speaks (``json``...), which
            decides how publish data that is not ``bytes``/``str`` is encoded.
    """

    def __init__(self, core: ClientCore, message_type: Callable[[], str]) -> None:
        self._writer_core = core
        self._message_type_of = message_type
        core.on_send = self._after_enqueue
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_tid: int | None = None
        self.fields: Final[_accel.PyWriterFields] = _accel.WriterFields()
        """The writer's flags (see :class:`ampsclient._accel.PyWriterFields`): this writer
        alone writes them; the C publish lanes read them."""
        fields = self.fields
        fields.transport = None
        self.send_retry: Callable[[], bool] | None = None
        """Asked (on the sender's thread, never the loop's) when a send finds no connection:
        ``True`` once it connected again, and the send goes on (the sync client's official
        ``retry_on_disconnect``); ``None``: the send raises ``DisconnectedError``."""
        self._pub_prefix: dict[str, tuple[bytes, int]] = {}
        self._outq = core.outq
        self._enqueue = self._outq.append
        fields.blocked = False
        fields.wake_pending = False
        self._writable = threading.Event()
        self._writable.set()
        self._batch_bytes = 0
        self._batch_timeout = 0.0
        self._batch_since: float | None = None
        self._urgent = False
        self._write_lock = threading.Lock()
        """Held by whoever moves frames from the queue to the socket: the loop (never waiting
        for it) or a publisher thread in :meth:`write_from_caller`."""
        self._sender: socket.socket | None = None
        """The transport's :meth:`~.Transport.caller_socket` while connected (plain TCP)."""
        self._caller_writes_allowed = True
        """See :meth:`set_caller_writes`."""
        fields.caller_writes = False  # allowed, a caller socket is open, no publish batching
        self._caller_paused = False
        """A caller's send found the socket full: callers leave writing to the loop until it
        wrote the rest (so a full socket does not make every publish join the queue again)."""
        self.observer: ClientObserver | None = None
        """Opt-in instrumentation (:mod:`ampsclient.observer`, :mod:`ampsclient.tracing`;
        the client's ``set_observer`` sets it); ``None``: each publish pays one
        ``is not None`` check, nothing else."""

    # ---------------------------------------------------------------------- the transport

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop of the current or last connection."""
        return self._loop

    @property
    def transport(self) -> Transport | None:
        """The open transport (``None`` while disconnected)."""
        return self.fields.transport

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Use ``loop`` (called on it, before connecting)."""
        self._loop = loop
        self._loop_tid = threading.get_ident()

    def attach(self, transport: Transport) -> None:
        """Write to ``transport`` from now on (an empty queue, not blocked)."""
        self.fields.transport = transport
        self.fields.wake_pending = False
        self.fields.blocked = False
        self._caller_paused = False
        self._writable.set()
        self._sender = transport.caller_socket() if self._caller_writes_allowed else None
        self._update_caller_writes()

    def detach(self) -> Transport | None:
        """The transport closed: stop writing (publisher threads waiting for room return)."""
        fields = self.fields
        transport, fields.transport = fields.transport, None
        fields.blocked = False
        self._writable.set()
        sender, self._sender = self._sender, None
        fields.caller_writes = False
        if sender is not None:
            with self._write_lock:  # (held at most for one non-blocking send)
                sender.close()
        return transport

    def drain_now(self) -> None:
        """Write everything queued at once, publishes held by batching included (loop only)."""
        self._urgent = True
        self._drain()

    # ------------------------------------------------------------- store-and-forward support

    def queue_frame(self, frame: bytes) -> bool:
        """Queue one frame (length prefix included) when a transport is open, and schedule the
        writer, without waiting for the socket (a store-and-forward wrapper, the HA client's
        :class:`~ampsclient.ha.store_forward.StoreAndForward`, calls it holding its lock and
        with its publish gate open; it must not block: it calls :meth:`wait_writable` once the
        lock is released). Returns whether the frame was queued."""
        fields = self.fields
        if fields.transport is None:
            return False
        self._outq.append(frame)
        if not fields.wake_pending:
            self.schedule_drain()
        return True

    # ------------------------------------------------------------------------ the C lanes

    def lane_arguments(self) -> dict[str, Any]:
        """What a C publish lane built on this writer is given at construction, as keyword
        arguments of ``PublishLane`` and ``PlainPublishLane`` (values: the lanes look no
        attribute up): the writer's flags (:attr:`fields`), the write queue and its append,
        and what a publish calls after it queued a frame, as :meth:`publish` does (wake the
        writer, wait while the socket is full, write the queue from the calling thread)."""
        return {
            "fields": self.fields,
            "outq": self._outq,
            "enqueue": self._enqueue,
            "wake": self._wake,
            "wait_writable": self.wait_writable,
            "caller_write": self.write_from_caller,
        }

    def plain_publish_lane(self) -> Any:
        """A C ``PlainPublishLane`` on this writer: :meth:`publish`'s common case (a cached
        topic's head from the core encoder, ``bytes`` or ASCII ``str`` data), calling
        :meth:`publish` for the rest; ``None`` without the C speedups."""
        lane = _accel.PlainPublishLane
        if lane is None:
            return None
        return lane(
            publish=self.publish,
            result=PUBLISHED,
            prefixes=self._pub_prefix,
            **self.lane_arguments(),
        )

    @property
    def writable(self) -> threading.Event:
        """Set while the socket takes writes (cleared while its buffer is over the high-water
        mark); the same object for the client's lifetime."""
        return self._writable

    # ---------------------------------------------------------------------------- writing

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the client's loop; any thread (nothing before the first connect)."""
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_tid:
            loop.call_soon(fn)
        else:
            loop.call_soon_threadsafe(fn)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop after ``delay`` seconds; any thread."""
        self.call_soon(lambda: self._loop.call_later(delay, fn))  # type: ignore[union-attr]

    def _after_enqueue(self) -> None:
        """The core queued a command: it goes out at the next write, with any publishes held
        by batching; wake the writer if it sleeps, else wait while the socket is full."""
        self._urgent = True
        fields = self.fields
        if not fields.wake_pending:
            self._wake()
        elif fields.blocked:
            self._wait_writable()

    def queue_frame_now(self, frame: bytes) -> bool:
        """:meth:`queue_frame`, then, on the loop thread, write the queue at once (the HA
        client's queue acknowledgements: see :meth:`send_now`)."""
        if self._writes_now():
            self._outq.append(frame)
            self._write_queued()
            return True
        queued = self.queue_frame(frame)
        if queued and threading.get_ident() == self._loop_tid:
            self._write_queued()
        return queued

    def send_now(self, payload: bytes) -> None:
        """Queue one command payload and, on the loop thread, write the queue at once.

        For queue acknowledgements: an auto-ack made in a handler would otherwise go out
        after the rest of the read's messages and the writer's linger, and the server, which
        leases the next messages when the ack arrives, would wait idle meanwhile (the two
        sides then take turns instead of working at the same time). Elsewhere as
        :meth:`~ampsclient.core.connection.ClientCore.send_payload`.

        Raises:
            DisconnectedError: no transport is open.
        """
        if self._writes_now():  # written below: the writer need not be woken for it
            self._writer_core.send_payload(payload, notify=False)
            self._write_queued()
            return
        self._writer_core.send_payload(payload)
        if threading.get_ident() == self._loop_tid:
            self._write_queued()

    def _writes_now(self) -> bool:
        """On the loop thread with an open transport that takes writes: a frame queued now
        can be written at once (otherwise the writer is scheduled as usual)."""
        fields = self.fields
        return (
            threading.get_ident() == self._loop_tid
            and fields.transport is not None
            and not fields.blocked
        )

    def _write_queued(self) -> None:
        """Write everything queued now (loop only); the writer's schedule is left as it is
        (a drain already scheduled finds the queue empty)."""
        fields = self.fields
        transport = fields.transport
        if self._outq and transport is not None and not fields.blocked:
            self._write_all(transport)

    def _write_all(self, transport: Transport) -> None:
        """Hand every queued frame to ``transport`` in one write (a batch ends here), unless a
        publisher thread is writing the queue (then the loop comes back for what it leaves).

        With a caller socket and nothing in the transport's buffer the loop sends on it with
        ``send_nowait``, keeping the GIL as a publisher thread does: ``socket.send`` would let
        go of it for a few microseconds, long enough for the process's other threads (other
        clients' loops) to take it and make this one wait, which cost a process with four
        queue consumers about a tenth of its drain rate. What the socket leaves goes to the
        transport, which buffers it."""
        lock = self._write_lock
        if not lock.acquire(blocking=False):
            if not self.fields.wake_pending:
                self.schedule_drain()
            return
        try:
            q = self._outq
            n = len(q)
            self._batch_since = None
            self._urgent = False
            self._caller_paused = False
            pop = q.popleft
            data = pop() if n == 1 else b"".join([pop() for _ in range(n)])
            self._writer_core.stats["frames_sent"] += n
            try:
                tf = self._writer_core.transport_filter
                if tf is not None:
                    tf(data, False)
                sender = self._sender
                if sender is not None and not transport.write_buffer_size:
                    # the GIL kept (send_nowait); the transport buffers what the socket leaves
                    try:
                        sent = _send_nowait(sender.fileno(), data)
                    except OSError:
                        sent = 0  # (the transport's write meets the error and reports it)
                    if sent < len(data):
                        transport.write(data[sent:] if sent else data)
                else:
                    transport.write(data)
            except AMPSError as exc:
                log.debug("write after close dropped: %s", exc)
        finally:
            lock.release()

    def write_from_caller(self) -> None:
        """Write the queued frames now, from the calling thread (see the module docstring).

        The publish paths (the C lanes' too) call it when a publish leaves
        :data:`CALLER_WRITE_FRAMES` frames queued on a connection with a caller socket
        (plain TCP) and publishes are not batched. On the loop thread it writes through the
        transport. On another thread it sends them with one non-blocking send on the
        transport's :meth:`~.Transport.caller_socket` (keeping the GIL: :meth:`_send_queue`);
        what the socket does not take goes back to the head of the queue for the loop, and
        callers leave writing to the loop until it has written that. It does nothing while
        the socket is full, a transport filter is set, the transport holds unwritten bytes
        (its buffer must go first), or another thread is writing.
        """
        if (
            self._batch_bytes
            or self.fields.blocked
            or self._writer_core.transport_filter is not None
        ):
            return
        if threading.get_ident() == self._loop_tid:
            self._write_queued()
            return
        sender = self._sender
        if sender is None or self._caller_paused or not self._write_lock.acquire(blocking=False):
            return
        try:
            transport = self.fields.transport
            if transport is not None and self._sender is sender and not transport.write_buffer_size:
                self._send_queue(sender)
        finally:
            self._write_lock.release()

    def _send_queue(self, sender: socket.socket) -> None:
        """:meth:`write_from_caller`'s send (the write lock held): the queued frames up to
        :data:`CALLER_SEND_MAX` bytes in one non-blocking send that keeps the GIL
        (``send_nowait``: letting go of it would hand it to the client's other threads and
        make this one wait to get it back)."""
        q = self._outq
        pop = q.popleft
        frames: list[bytes] = []
        size = 0
        while q and size < CALLER_SEND_MAX:
            frame = pop()
            frames.append(frame)
            size += len(frame)
        if not frames:
            return
        n = len(frames)
        data = frames[0] if n == 1 else b"".join(frames)
        try:
            sent = _send_nowait(sender.fileno(), data)
        except OSError as exc:  # the connection broke: the loop reads that and reports it
            log.debug("a publisher thread's write failed: %s", exc)
            sent = 0
        if sent < len(data):
            q.appendleft(data[sent:] if sent else data)  # one frame for the loop to count
            n -= 1
            self._caller_paused = True
            if not self.fields.wake_pending:  # the loop's drain may have found the queue empty
                self.schedule_drain()
        stats = self._writer_core.stats
        stats["frames_sent"] += n
        stats["caller_writes"] += 1

    def set_caller_writes(self, enabled: bool) -> None:
        """Let publisher threads write the queue themselves (the default) or leave all writing
        to the loop; from the next connection on (the HA client turns it off: see
        docs/design.md, "A busy publisher writes for itself")."""
        self._caller_writes_allowed = bool(enabled)

    def _update_caller_writes(self) -> None:
        self.fields.caller_writes = self._sender is not None and not self._batch_bytes

    def _wake(self) -> None:
        """Schedule the writer (the queue went from idle to busy), then apply back-pressure."""
        self.schedule_drain()
        if not self._writable.is_set():
            self._wait_writable()

    def schedule_drain(self) -> None:
        """Have the loop write what is queued (any thread; never blocks)."""
        self.fields.wake_pending = True
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_tid:
            loop.call_soon(self._drain)
            return
        try:
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            raise DisconnectedError("the client's event loop is closed") from None

    def wait_writable(self) -> None:
        """Block the calling thread while the socket's write buffer is full (returns at once
        on the loop thread, which must never block)."""
        if not self._writable.is_set():
            self._wait_writable()

    def _wait_writable(self) -> None:
        # backpressure for publishers on other threads: block while the socket buffer is full
        if threading.get_ident() == self._loop_tid:
            return  # the loop itself must never block
        while not self._writable.wait(0.5):
            if self.fields.transport is None:
                return

    @property
    def wake_pending(self) -> bool:
        """``True`` while the writer is scheduled (frames queued now go out without a wake)."""
        return self.fields.wake_pending

    def _drain(self) -> None:
        """Write everything queued. While frames keep coming, stay awake: drain again after
        :data:`WRITE_LINGER` seconds instead of being woken per burst, so a publisher thread
        does not pay a wake-up (a syscall and a GIL hand-off) for every few messages."""
        q = self._outq
        n = len(q)
        fields = self.fields
        if not n:
            fields.wake_pending = False
            if q:  # appended after the check by a publisher that saw the flag still set
                fields.wake_pending = True
                self._loop.call_soon(self._drain)  # type: ignore[union-attr]
            return
        transport = fields.transport
        if transport is None:
            q.clear()
            fields.wake_pending = False
            return
        if self._batch_bytes and not self._urgent and self._hold_batch():
            self._loop.call_later(WRITE_LINGER, self._drain)  # type: ignore[union-attr]
            return
        self._write_all(transport)
        self._loop.call_later(WRITE_LINGER, self._drain)  # type: ignore[union-attr]

    def set_publish_batching(self, batch_size: int, batch_timeout: int) -> None:
        """Hold publishes until ``batch_size`` bytes are queued or the oldest has waited
        ``batch_timeout`` ms (0: no time bound), then write them in one call (official API).

        ``(0, 0)``, the default, writes as soon as the loop runs (publishes made meanwhile
        still share one write). Commands (``flush``, subscriptions, acks...) are never held:
        one takes the held publishes with it, so ``flush`` and ``publish_flush`` end a batch.
        """
        if batch_size < 0 or batch_timeout < 0:
            raise UsageError("set_publish_batching: the limits cannot be negative")
        self._batch_bytes = int(batch_size)
        self._batch_timeout = batch_timeout / 1000.0
        self._update_caller_writes()

    def _hold_batch(self) -> bool:
        """``True`` while the queued publishes are under the batch's size and time bounds."""
        now = self._loop.time()  # type: ignore[union-attr]
        if self._batch_since is None:
            self._batch_since = now
        if sum(map(len, self._outq)) >= self._batch_bytes:
            return False
        return not self._batch_timeout or now - self._batch_since < self._batch_timeout

    def transport_writable(self, writable: bool) -> None:
        """The transport's write buffer went over (``False``) or back under its mark."""
        self.fields.blocked = not writable
        if writable:
            self._writable.set()
        else:
            self._writable.clear()

    # ---------------------------------------------------------------------------- publishing

    def encode_data(self, data: Any) -> bytes:
        """``data`` as bytes: bytes as is, ``str`` in UTF-8, other objects in the connection's
        message type (msgpack for ``msgpack``, else JSON)."""
        return encode_data(data, self._message_type_of())

    def _encode_data(self, data: Any) -> bytes:
        return encode_data(data, self._message_type_of())

    def publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> Published:
        """The body of :meth:`AsyncClient.publish <ampsclient.client.AsyncClient.publish>`
        (see there): encode and queue one publish. Thread-safe. With the C speedups their
        ``PlainPublishLane``, built on this writer, takes the common case first and calls
        this for everything else."""
        if self.observer is not None:  # opt-in tracing: the publish span, the trace context
            correlation_id = self.observer.publishing(topic, correlation_id)
        if type(data) is str:
            try:
                data = data.encode()
            except UnicodeEncodeError as exc:  # LocalProtocolError: nothing is queued
                raise unencodable("the data", exc) from exc
        elif type(data) is not bytes:
            data = self._encode_data(data)
        if expiration is None is correlation_id is sow_key:
            cached = self._pub_prefix.get(topic)
            if cached is None:
                head = publish_header("p", topic)[0]
                cached = self._pub_prefix[topic] = (head, len(head))
            # _send_publish, inlined: this is the hottest path of the library
            fields = self.fields
            if fields.transport is None and not self._retried():
                raise DisconnectedError("not connected")
            self._enqueue(_publish_frame(cached[0], None, b"", data))
            if not fields.wake_pending:
                self._wake()
            elif fields.blocked:
                self._wait_writable()
            elif fields.caller_writes and len(self._outq) >= CALLER_WRITE_FRAMES:
                self.write_from_caller()
            return PUBLISHED
        self._send_publish("p", topic, data, expiration, correlation_id, sow_key)
        return PUBLISHED

    def _retried(self) -> bool:
        """No connection: whether :attr:`send_retry` made one again (never on the loop)."""
        retry = self.send_retry
        if retry is None or threading.get_ident() == self._loop_tid:
            return False
        return retry() and self.fields.transport is not None

    def _send_publish(
        self,
        command: str,
        topic: str,
        data: bytes,
        expiration: int | None,
        correlation_id: str | None,
        sow_key: str | None,
    ) -> None:
        """Queue a publish with options, spelled by the core's encoder (held by publish
        batching, unlike the core's commands)."""
        head, tail = publish_header(
            command,
            topic,
            expiration=expiration,
            correlation_id=correlation_id,
            sow_key=sow_key,
        )
        fields = self.fields
        if fields.transport is None and not self._retried():
            raise DisconnectedError("not connected")
        self._enqueue(_publish_frame(head, None, tail, data))
        if not fields.wake_pending:
            self._wake()
        elif fields.blocked:
            self._wait_writable()
        elif fields.caller_writes and len(self._outq) >= CALLER_WRITE_FRAMES:
            self.write_from_caller()

    def delta_publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        *,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> Published:
        """The body of :meth:`AsyncClient.delta_publish
        <ampsclient.client.AsyncClient.delta_publish>`: merge ``data`` into the SOW record it
        names (a plain publish on non-SOW topics). Returns 0, as :meth:`publish`."""
        if self.observer is not None:  # opt-in tracing, as in publish
            correlation_id = self.observer.publishing(topic, correlation_id)
        self._send_publish(
            "delta_publish", topic, self._encode_data(data), expiration, correlation_id, sow_key
        )
        return PUBLISHED
