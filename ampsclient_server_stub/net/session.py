"""Transport-independent part of a server connection: batching, heartbeats, slow clients.

A :class:`NetSession` is the broker's :class:`~ampsclient_server_stub.engine.broker.Session`.
``send()`` only appends to a list; the first append of an event-loop iteration schedules one
flush with ``loop.call_soon``, so every payload produced while handling a burst of input (or
while routing another client's publishes) leaves in a single transport write.

Heartbeats (protocol.md §10, amps-semantics.md §6): after ``heartbeat`` with ``start,N`` the
session sends ``{"c":"heartbeat"}`` every N seconds and drops the client once nothing has
arrived from it for 2N seconds. Client ``beat`` frames are never echoed.

Slow-client protection: when the transport's write buffer plus pending output exceeds
``max_write_buffer`` bytes, the connection is aborted, or, when the transport manages slow
clients (``slow``, see :mod:`.flow`), offlined to disk. Flow control works on the session only
through its public output-queue interface (:class:`.flow.OutputQueue`): :meth:`pending_bytes`,
:meth:`buffered_bytes`, :meth:`take_pending`, :meth:`write_now`, :meth:`abort`.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from typing import TYPE_CHECKING, Final

from ampsclient_server_stub.engine.broker import Broker, Connection

if TYPE_CHECKING:  # connection caps and slow-client limits (security package)
    from ampsclient_server_stub.security.policy import TransportPolicy

    from .flow import FlowControl, SlowClient

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "DEFAULT_MAX_WRITE_BUFFER", "HEARTBEAT", "NetSession"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
"""Largest inbound payload accepted (16 MiB); a bigger one closes that connection."""

DEFAULT_MAX_WRITE_BUFFER: Final = 64 * 1024 * 1024
"""Bytes queued towards one client before it is disconnected as too slow (64 MiB)."""

HEARTBEAT: Final = b'{"c":"heartbeat"}'


class _LogonTimeouts:
    """Connections closed for not logging on: one warning a minute at most, with the count
    (a flood of idle connections must not flood the log)."""

    PERIOD: Final = 60.0

    def __init__(self) -> None:
        self.count = 0
        self._pending = 0
        self._last = float("-inf")

    def closed(self, now: float, timeout: float) -> None:
        self.count += 1
        self._pending += 1
        if now - self._last >= self.PERIOD:
            logger.warning(
                "%d connection(s) closed for not logging on within %g s (LogonTimeout)%s",
                self._pending,
                timeout,
                "" if self._last == float("-inf") else f" in the last {self.PERIOD:g} s",
            )
            self._pending = 0
            self._last = now


_LOGON_TIMEOUTS: Final = _LogonTimeouts()


class NetSession(abc.ABC):
    """Base class of the TCP and WebSocket sessions.

    Subclasses implement :meth:`_write` (put a list of payloads on the wire),
    :meth:`_buffered` (bytes waiting in the transport) and :meth:`_close_transport`.
    """

    policy: TransportPolicy | None = None
    """The transport's policy (set by the listener): connection caps, slow-client limits."""
    flow: FlowControl | None = None
    """The server's running resource pools (set by the listener with :attr:`policy`)."""
    slow: SlowClient | None = None
    """Slow-client state when the transport manages slow clients (offlining to disk)."""

    def __init__(
        self,
        broker: Broker,
        loop: asyncio.AbstractEventLoop,
        *,
        transport_name: str,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ) -> None:
        self.broker = broker
        self.loop = loop
        self.transport_name = transport_name
        self.max_frame_size = max_frame_size
        self.max_write_buffer = max_write_buffer
        self.conn: Connection | None = None
        self.peer = ""
        self.last_received = loop.time()
        """Event-loop time of the last inbound data (heartbeat liveness)."""
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._closing = False
        self._hb_interval = 0.0
        self._hb_next = 0.0
        self._hb_timer: asyncio.TimerHandle | None = None
        self._logon_timer: asyncio.TimerHandle | None = None
        self.messages_in = 0
        """Payloads received (admin statistics); ``bytes_in``: their bytes, framing excluded."""
        self.bytes_in = 0
        self.messages_out = 0
        """Payloads handed to the transport; ``bytes_out``: their bytes, framing excluded."""
        self.bytes_out = 0

    # ------------------------------------------------------------------ lifecycle

    def attach(self, *, message_type: str | None, peer: str) -> Connection:
        """Register with the broker once the transport is up."""
        self.peer = peer
        self.conn = self.broker.connect(
            self, message_type=message_type, transport=self.transport_name, peer=peer
        )
        policy = self.policy
        if policy is not None:
            if not policy.attach(self):
                self.broker.kick(self.conn, "connection limit reached")
                return self.conn
            if policy.logon_timeout is not None:
                self._logon_timer = self.loop.call_later(
                    policy.logon_timeout, self._logon_deadline, policy.logon_timeout
                )
            if policy.pool is not None and self.flow is not None:
                slow = self.slow = self.flow.attach(self, policy.pool, policy.limits)
                # offlined beyond its share of the pool, or beyond max_write_buffer if lower
                self.max_write_buffer = min(self.max_write_buffer, slow.memory_cap)
        logger.debug("connection %r opened", self.conn)
        return self.conn

    def _logon_deadline(self, timeout: float) -> None:
        self._logon_timer = None
        conn = self.conn
        if conn is None or conn.closed or self._closing or conn.logged_on:
            return
        logger.debug(
            "%s connection %s did not log on within %g s", self.transport_name, self.peer, timeout
        )
        _LOGON_TIMEOUTS.closed(self.loop.time(), timeout)
        self.broker.kick(conn, f"no logon within {timeout:g} s")

    @property
    def closing(self) -> bool:
        """True once the session is closing or closed."""
        return self._closing

    def connection_closed(self) -> None:
        """The transport is gone: tell the broker, stop timers (idempotent)."""
        self._closing = True
        self._out = []
        self._out_bytes = 0
        self._cancel_heartbeat()
        if self._logon_timer is not None:
            self._logon_timer.cancel()
            self._logon_timer = None
        if self.policy is not None:
            self.policy.detach(self)
        if self.slow is not None:
            self.slow.close()
        if self.conn is not None:
            self.broker.disconnect(self.conn)

    def handle_payloads(self, payloads: list[bytes]) -> None:
        """Hand complete payloads to the broker, stopping if the connection closes."""
        conn = self.conn
        if conn is None or conn.closed or self._closing:
            return
        self.messages_in += len(payloads)
        self.bytes_in += sum(map(len, payloads))
        if len(payloads) > 1:  # runs of durable publishes are journaled as one batch
            self.broker.handle_many(conn, payloads)
            return
        for payload in payloads:
            self.broker.handle(conn, payload)

    # ------------------------------------------------------------------ Session interface

    def send(self, payload: bytes) -> None:
        """Queue a payload; it is written with everything else queued in this loop iteration."""
        if self._closing:
            return
        slow = self.slow
        if slow is not None and slow.offline:
            slow.spill(payload)  # offlined: in order, to disk
            return
        self._out.append(payload)
        self._out_bytes += len(payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        elif self._out_bytes > self.max_write_buffer:
            self._too_slow()

    def send_many(self, payloads: list[bytes]) -> None:
        """:meth:`send` for several payloads, in order (bookmark replays send in batches)."""
        if self._closing or not payloads:
            return
        slow = self.slow
        if slow is not None and slow.offline:
            for payload in payloads:
                slow.spill(payload)
            return
        self._out.extend(payloads)
        self._out_bytes += sum(map(len, payloads))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        elif self._out_bytes > self.max_write_buffer:
            self._too_slow()

    def backlog(self) -> int:
        """Bytes queued towards the client and not yet taken by the OS (replays pace on it)."""
        offline = self.slow.pending_disk if self.slow is not None else 0
        return self._out_bytes + self._buffered() + offline

    def disconnect(self, reason: str) -> None:
        """Write what is queued, then close the connection."""
        if self._closing:
            return
        logger.info("closing %s connection %s: %s", self.transport_name, self.peer, reason)
        self._flush()
        self._closing = True
        self._cancel_heartbeat()
        self._close_transport()

    def start_heartbeat(self, interval: float) -> None:
        """Arm (or re-arm) the heartbeat timer."""
        now = self.loop.time()
        self._hb_interval = interval
        self._hb_next = now + interval
        self.last_received = now
        self._schedule_heartbeat()

    # ------------------------------------------------------------------ output queue (flow control)

    def client_identity(self) -> tuple[str, int]:
        """``(client name, connection id)`` of the connection (``("", 0)`` before logon)."""
        conn = self.conn
        if conn is None:
            return "", 0
        return conn.client_name or "", conn.id

    def pending_bytes(self) -> int:
        """Bytes queued for the next write and not yet handed to the transport."""
        return self._out_bytes

    def buffered_bytes(self) -> int:
        """Bytes handed to the transport and not yet taken by the OS."""
        return self._buffered()

    def held_bytes(self) -> int:
        """Bytes the broker holds for this client's conflated subscriptions."""
        conn = self.conn
        return 0 if conn is None else conn.conflation_bytes()

    def take_pending(self) -> list[bytes]:
        """Remove and return the queued payloads not yet handed to the transport."""
        pending, self._out = self._out, []
        self._out_bytes = 0
        return pending

    def write_now(self, payloads: list[bytes]) -> None:
        """Hand ``payloads`` to the transport at once, in order (ahead of the next flush)."""
        self.messages_out += len(payloads)
        self.bytes_out += sum(map(len, payloads))
        self._write(payloads)

    @property
    def queued_messages(self) -> int:
        """Payloads queued for the next write (not yet handed to the transport)."""
        return len(self._out)

    def abort(self, reason: str) -> None:
        """Drop the connection at once, without writing what is queued."""
        self._abort(reason)

    # ------------------------------------------------------------------ internals

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self._closing:
            return
        self._out = []
        self.messages_out += len(out)
        self.bytes_out += self._out_bytes
        self._out_bytes = 0
        try:
            self._write(out)
        except Exception:
            logger.exception("write to %s failed", self.peer)
            self._abort("write failed")
            return
        if self._buffered() > self.max_write_buffer:
            self._too_slow()

    def _too_slow(self) -> None:
        if self.slow is not None and self.slow.go_offline("client capacity"):
            return
        logger.warning(
            "%s client %s is too slow (more than %d bytes queued); disconnecting",
            self.transport_name,
            self.peer,
            self.max_write_buffer,
        )
        self._abort("slow consumer")

    def _abort(self, reason: str) -> None:
        self._closing = True
        self._out = []
        self._out_bytes = 0
        self._cancel_heartbeat()
        if self.conn is not None:
            self.broker.disconnect(self.conn)
        self._abort_transport()

    def _cancel_heartbeat(self) -> None:
        if self._hb_timer is not None:
            self._hb_timer.cancel()
            self._hb_timer = None

    def _schedule_heartbeat(self) -> None:
        self._cancel_heartbeat()
        if self._closing or self._hb_interval <= 0:
            return
        deadline = min(self._hb_next, self.last_received + 2 * self._hb_interval)
        self._hb_timer = self.loop.call_at(deadline, self._heartbeat_tick)

    def _heartbeat_tick(self) -> None:
        self._hb_timer = None
        if self._closing:
            return
        now = self.loop.time()
        interval = self._hb_interval
        if now - self.last_received >= 2 * interval:
            logger.warning(
                "%s client %s sent nothing for %.3g s (heartbeat %g s); disconnecting",
                self.transport_name,
                self.peer,
                now - self.last_received,
                interval,
            )
            if self.conn is not None:
                self.broker.kick(self.conn, "heartbeat timeout")
            else:  # pragma: no cover - heartbeats start only after a command
                self.disconnect("heartbeat timeout")
            return
        if now >= self._hb_next:
            self.send(HEARTBEAT)
            self.broker.counters["heartbeats_sent"] += 1
            self._hb_next = now + interval
        self._schedule_heartbeat()

    # ------------------------------------------------------------------ for subclasses

    @abc.abstractmethod
    def _write(self, payloads: list[bytes]) -> None:
        """Put payloads on the wire (in order)."""

    @abc.abstractmethod
    def _buffered(self) -> int:
        """Bytes waiting in the transport."""

    @abc.abstractmethod
    def _close_transport(self) -> None:
        """Close after writing what is queued."""

    def _abort_transport(self) -> None:
        self._close_transport()
