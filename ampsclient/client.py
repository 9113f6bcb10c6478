"""AsyncClient: one connection to an AMPS server, on asyncio.

This is the one implementation; :class:`ampsclient.Client` drives it from synchronous code on a
background loop thread. Method names follow the official AMPS Python client; options beyond its
positional parameters are keyword-only. Timeouts named ``timeout`` are in **milliseconds**
(``0`` = no limit), as in the official client.

Threading rules:

* :meth:`AsyncClient.publish` and :meth:`AsyncClient.delta_publish` are plain methods that may
  be called from any thread: they encode the frame in the caller's thread and append it to a
  write queue; the loop writes everything queued in one system call (no per-message thread hop).
* Every other method is a coroutine to be awaited on the client's loop.
* Handlers run on the loop (like the official client's receive thread): a handler that blocks
  stalls this client's receive path and heartbeats.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import enum
import itertools
import json
import logging
import ssl
import struct
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Self

from . import _accel, compat
from .acks import QueueAckMethods, QueueAcks, bound_message_type
from .authenticator import Authenticator, DefaultAuthenticator
from .calls import Handler
from .command import Command
from .convenience import AsyncCommands
from .exceptions import (
    AMPSError,
    DisconnectedError,
    TimeoutError,
    UsageError,
    error_for_reason,
)
from .protocol.acks import AckType, format_ack_types, parse_ack_types
from .protocol.bookmarks import Bookmarks
from .protocol.framing import DEFAULT_MAX_FRAME_SIZE
from .protocol.header import encode_header, escape
from .protocol.message import Message, split_sow_batch
from .stream import MessageStream
from .transport.base import Transport
from .transport.factory import open_transport
from .uri import URI, parse_uri

__all__ = [
    "CLIENT_VERSION",
    "AsyncClient",
    "ConnectionEvent",
    "ConnectionState",
    "Handler",
]

log = logging.getLogger("ampsclient.client")

CLIENT_VERSION: Final = "5.3.5.0.ampsclient-0.1.0:python"
"""Sent as ``version`` in the logon (the server may use it to pick protocol features)."""


WRITE_LINGER: Final = 0.0005
"""After a write, the writer looks for more queued frames this many seconds later."""

_pack_len = struct.Struct(">I").pack
_SUBSCRIBE_COMMANDS: Final = frozenset(
    {"subscribe", "delta_subscribe", "sow_and_subscribe", "sow_and_delta_subscribe"}
)
_QUERY_COMMANDS: Final = frozenset({"sow", "sow_and_subscribe", "sow_and_delta_subscribe"})
_P_PREFIX: Final = b'{"c":"p"'
_SIDS_KEY: Final = b'"sids":"'
_BM_NEXT: Final = b',"bm":"'
_refcount: Final = sys.getrefcount


_Route = tuple[str, "Handler", bool, "Callable[[Message], int] | None", "Handler | None"]
"""A learned route: sub id, handler, wants the bookmark, the bookmark store's ``log`` and the
handler to call when ``log`` numbers the delivery (both ``None`` unless a bookmark store
logs this subscription's deliveries)."""


class _Routes(dict[str, "Handler"]):
    """Subscription id -> handler, plus the receive fast path's cache.

    The cache maps the first bytes of a delivery, from ``{"c":"p"`` through the closing quote
    of its ``sids`` value, to the one subscription they route to. A stream of deliveries to one
    subscription shares that prefix, so routing costs one slice and one dict lookup. Any change
    of the routes clears it.
    """

    __slots__ = ("cache", "lengths")

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[bytes, _Route] = {}
        self.lengths: list[int] = []

    def learn(self, prefix: bytes, sid: str, handler: Handler) -> None:
        if len(self.cache) >= 1024 or len(self.lengths) >= 8:
            self.cache.clear()
            self.lengths.clear()
        # handlers of bookmark subscriptions want the bookmark: read it right after ``sids``;
        # the HA client's ones also offer the bookmark store's ``log`` and the user's handler
        wants_bm = bool(getattr(handler, "_bookmark_logged", False))
        log = getattr(handler, "_log", None)
        inner = getattr(handler, "_inner", None)
        self.cache[prefix] = (sid, handler, wants_bm, log, inner)
        if len(prefix) not in self.lengths:
            self.lengths.append(len(prefix))

    def forget(self) -> None:
        self.cache.clear()
        self.lengths.clear()

    def __setitem__(self, key: str, value: Handler) -> None:
        self.forget()
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.forget()
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        self.forget()
        return super().pop(key, *default)

    def clear(self) -> None:
        self.forget()
        super().clear()


class ConnectionState(enum.Enum):
    """What happened to a connection (see :meth:`AsyncClient.add_connection_state_listener`)."""

    CONNECTED = "connected"
    LOGGED_ON = "logged_on"
    PUBLISH_REPLAYED = "publish_replayed"
    RESUBSCRIBED = "resubscribed"
    DISCONNECTED = "disconnected"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    """A connection state change, with the server it concerns and the cause of a disconnect."""

    state: ConnectionState
    uri: str | None = None
    cause: BaseException | None = None

    def __bool__(self) -> bool:
        """``True`` unless the connection went down: the official listener's ``bool`` state."""
        return self.state not in (ConnectionState.DISCONNECTED, ConnectionState.SHUTDOWN)


@dataclass(slots=True)
class _Pending:
    """A command waiting for acks."""

    cid: str
    name: str
    future: asyncio.Future[Message] | None
    handler: Handler | None
    user_acks: AckType
    terminal: AckType
    stream: MessageStream | None = None
    sub_id: str | None = None
    query_id: str | None = None
    seen_group_end: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _default_for(name: str) -> str:
    return name


def deliver(
    payloads: list[bytes],
    cache: dict[bytes, _Route],
    lengths: list[int],
    message_type: type[Message],
    unrouted: Callable[[bytes], None],
    report: Callable[[BaseException], None],
    bm_next: bytes,
) -> None:
    """Route ``payloads`` to handlers: the receive hot path of :class:`AsyncClient`.

    A payload whose first ``length`` bytes (for a ``length`` in ``lengths``) are a key of
    ``cache`` goes to that route's handler in a recycled ``message_type`` instance; any other
    goes to ``unrouted``. An :class:`Exception` raised by a handler goes to ``report``. For a
    route that wants the bookmark, a ``bm`` field right after the prefix (``bm_next``) is read
    into the message and the route's ``log`` decides whether its inner handler (logged) or
    its handler (a duplicate, or not logged) gets it. ``ampsclient/_speedups.c`` has the same
    function in C (:mod:`ampsclient._accel`).
    """
    get = cache.get
    single = lengths[0] if len(lengths) == 1 else 0
    skip = len(bm_next)
    message = message_type()
    for payload in payloads:
        if single:
            route = get(payload[:single])
            length = single
        else:
            route = None
            for length in lengths:
                route = get(payload[:length])
                if route is not None:
                    break
        if route is None:
            unrouted(payload)
            continue
        message._raw = payload
        message._sub_id = route[0]
        message._hdr = message._data = message._bm = None
        message._body = -1
        try:
            if route[2] and payload.startswith(bm_next, length):
                end = payload.find(b'"', length + skip)
                if end > 0:
                    message._bm = payload[length + skip : end].decode()
                    log = route[3]
                    if log is not None and log(message):
                        route[4](message)  # type: ignore[misc]
                    else:
                        route[1](message)
                else:
                    route[1](message)
            else:
                route[1](message)
        except Exception as exc:
            report(exc)
        if _refcount(message) > 2:
            message = message_type()


class AsyncClient(AsyncCommands, QueueAckMethods):
    """One connection to an AMPS server.

    Args:
        name: the client name: unique per publisher and stable across restarts (the server
            de-duplicates publishes by name and sequence number).
        max_frame_size: largest frame accepted from the server.
        default_max_depth: default ``max_depth`` of message streams (0 = unbounded).
        logon_options: options sent in every logon (e.g. ``"ack_conflation=10ms"``).
        ssl_context: TLS settings for ``tcps://`` and ``wss://`` (see :mod:`ampsclient.tls`);
            default: verify the server against the system's CAs and check the host name.
    """

    def __init__(
        self,
        name: str = "",
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        default_max_depth: int = 0,
        logon_options: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._name = name
        self._ssl_context = ssl_context
        self._max_frame_size = max_frame_size
        self._default_max_depth = default_max_depth
        self._logon_options = logon_options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_tid: int | None = None
        self._transport: Transport | None = None
        self._uri: URI | None = None
        self._uri_text: str | None = None
        self._logged_on = False
        self._cid = itertools.count(1)
        self._pending: dict[str, _Pending] = {}
        self._subs: _Routes = _Routes()
        self._queries: dict[str, Handler] = {}
        self._query_cids: dict[str, str] = {}
        self._streams: dict[str, MessageStream] = {}
        self._pub_prefix: dict[str, tuple[bytes, int]] = {}
        self._outq: collections.deque[bytes] = collections.deque()
        self._enqueue = self._outq.append
        self._blocked = False
        """True while the socket's write buffer is over its high-water mark."""
        self._wake_pending = False
        self._writable = threading.Event()
        self._writable.set()
        self._connected_event = threading.Event()
        self._last_chance: Handler | None = None
        self._exception_listener: Callable[[BaseException], Any] | None = None
        self._disconnect_handler: Callable[[AsyncClient, BaseException | None], Any] | None = None
        self._state_listeners: list[Callable[[ConnectionEvent], Any]] = []
        self._global_handlers: dict[str, Handler] = {}
        self._heartbeat_interval = 0.0
        self._heartbeat_timeout = 0.0
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._rx = False
        self._server_version: str | None = None
        self._logon_ack: Message | None = None
        self._closed_by_user = False
        self._on_publish_persisted: Callable[[Message], None] | None = None
        self._on_sub_persisted: Callable[[Message], None] | None = None
        self._keep_routes_on_disconnect = False
        self._stats = {"messages_received": 0, "frames_received": 0, "frames_sent": 0}
        self.queue_acks = QueueAcks(self._send_payload, self._later)
        """Queue acknowledgements: settings and pending batch (:mod:`ampsclient.acks`)."""
        self._message_type: type[Message] = bound_message_type(self.queue_acks.ack)
        """Deliveries are instances of this subclass: ``message.ack()`` reaches this client."""
        self.transport_filter: Callable[[bytes, bool], Any] | None = None
        """Sees the bytes written (``False``) and each frame's payload read (``True``)."""
        self.logon_correlation_data: str | None = None
        """Sent as the logon's correlation id (``x``): how the server's logs name this logon."""
        self._plain_lane: Any = None
        lane = _accel.PlainPublishLane
        if lane is not None and type(self).publish is AsyncClient.publish:
            # the C speedups do publish()'s common case and call the method below otherwise
            self._plain_lane = lane(self, types.MethodType(AsyncClient.publish, self))
            self.publish = self._plain_lane.publish  # type: ignore[method-assign]

    Bookmarks = Bookmarks
    """``EPOCH``, ``NOW`` and ``MOST_RECENT``."""

    # ---------------------------------------------------------------- properties / official getters

    @property
    def name(self) -> str:
        """The client name."""
        return self._name

    def get_name(self) -> str:
        """Official spelling of :attr:`name`."""
        return self._name

    def set_name(self, name: str) -> None:
        """Set the client name (before logon)."""
        self._name = name

    @property
    def uri(self) -> str | None:
        """The URI of the current or last connection, without credentials."""
        return None if self._uri is None else self._uri.redacted()

    def get_uri(self) -> str | None:
        """Official spelling of :attr:`uri`."""
        return self.uri

    @property
    def connected(self) -> bool:
        """``True`` while a transport is open."""
        return self._transport is not None

    @property
    def logged_on(self) -> bool:
        """``True`` between a successful logon and a disconnect."""
        return self._logged_on and self._transport is not None

    @property
    def message_type(self) -> str:
        """The message type of the connection (``json``, ``msgpack``, ``binary``...)."""
        return "json" if self._uri is None else self._uri.message_type

    @property
    def server_version(self) -> str | None:
        """The ``version`` the server sent in its logon ack."""
        return self._server_version

    def get_server_version(self) -> int:
        """The server version as the official client reports it (a·10⁶+b·10⁴+c·10²+d)."""
        v = self._server_version
        if not v:
            return 99999999
        nums = []
        for part in v.split(".")[:4]:
            digits = "".join(ch for ch in part if ch.isdigit())
            nums.append(int(digits) if digits else 0)
        while len(nums) < 4:
            nums.append(0)
        return nums[0] * 1_000_000 + nums[1] * 10_000 + nums[2] * 100 + nums[3]

    def get_server_version_info(self) -> str | None:
        """The server's version string."""
        return self._server_version

    @property
    def logon_ack(self) -> Message | None:
        """The last logon ack (its ``s`` is the last sequence the server persisted for us)."""
        return self._logon_ack

    def statistics(self) -> dict[str, int]:
        """Counters: frames received and sent; messages delivered through the slow path."""
        return dict(self._stats)

    # ------------------------------------------------------------------------ handler settings

    def set_last_chance_message_handler(self, handler: Handler | None) -> None:
        """Receives messages that no other handler took."""
        self._last_chance = handler

    def set_exception_listener(self, listener: Callable[[BaseException], Any] | None) -> None:
        """Receives exceptions raised by handlers (they are logged either way)."""
        self._exception_listener = listener

    def set_disconnect_handler(
        self, handler: Callable[[AsyncClient, BaseException | None], Any] | None
    ) -> None:
        """Called on the loop when the connection drops (not when closed by the application)."""
        self._disconnect_handler = handler

    def add_connection_state_listener(self, listener: Callable[[ConnectionEvent], Any]) -> None:
        """Receives a :class:`ConnectionEvent` on each connection state change."""
        self._state_listeners.append(listener)

    def remove_connection_state_listener(self, listener: Callable[[ConnectionEvent], Any]) -> None:
        """Stop sending events to ``listener``."""
        if listener in self._state_listeners:
            self._state_listeners.remove(listener)

    def get_exception_listener(self) -> Callable[[BaseException], Any] | None:
        """The exception listener."""
        return self._exception_listener

    @property
    def default_max_depth(self) -> int:
        """The ``max_depth`` of new message streams (0 = unbounded)."""
        return self._default_max_depth

    @default_max_depth.setter
    def default_max_depth(self, depth: int) -> None:
        if depth < 0:
            raise UsageError("default_max_depth cannot be negative")
        self._default_max_depth = int(depth)

    @property
    def logon_options(self) -> str | None:
        """Options sent with every logon (``None``: none)."""
        return self._logon_options

    @logon_options.setter
    def logon_options(self, options: str | None) -> None:
        self._logon_options = options or None

    def add_message_handler(
        self, command_id: str, message_handler: Handler, acks: str = "", is_subscribe: bool = False
    ) -> None:
        """Route what the server sends for ``command_id`` to ``message_handler`` (official API).

        Deliveries whose ``sids`` name ``command_id`` (when ``is_subscribe``) and the acks
        of types ``acks`` (``"processed,completed"``) whose ``cid`` is ``command_id`` go to
        the handler, until :meth:`remove_message_handler`. Used with :meth:`send`.
        """
        self._pending[command_id] = _Pending(
            command_id,
            "",
            None,
            message_handler,
            parse_ack_types(acks) if isinstance(acks, str) else AckType(acks),
            AckType.NONE,
            None,
            command_id if is_subscribe else None,
        )
        if is_subscribe:
            self._subs[command_id] = message_handler

    def remove_message_handler(self, command_id: str) -> bool:
        """Stop routing ``command_id`` to its handler; ``True`` if one was registered."""
        found = self._pending.pop(command_id, None) is not None
        found = self._subs.pop(command_id, None) is not None or found
        return found

    def get_ssl(self) -> Any:
        """Refused: the official client's ``PySSLSocket`` does not exist here."""
        raise UsageError(
            "get_ssl(): TLS runs inside asyncio's transport (there is no SSL socket object); "
            "configure it with ssl_context (ampsclient.tls.client_context) or ssl_init()"
        )

    def set_global_command_type_message_handler(self, command: str, handler: Handler) -> None:
        """See every ``ack`` or ``heartbeat`` message (official API)."""
        self._global_handlers[command] = handler

    def set_heartbeat(self, interval: float, timeout: float | None = None) -> None:
        """Ask the server for heartbeats every ``interval`` seconds.

        The connection is closed (and an HA client reconnects) when nothing arrives for
        ``timeout`` seconds (default ``2 * interval``). Takes effect at once when logged on.
        """
        self._heartbeat_interval = float(interval)
        self._heartbeat_timeout = float(timeout) if timeout else 2.0 * float(interval)
        if self.logged_on and self._loop is not None:
            self._call_on_loop(self._start_heartbeat)

    def _emit(self, state: ConnectionState, cause: BaseException | None = None) -> None:
        event = ConnectionEvent(state, self.uri, cause)
        for listener in list(self._state_listeners):
            try:
                listener(event)
            except Exception as exc:
                self._report(exc)

    def _report(self, exc: BaseException) -> None:
        log.error("exception in a handler: %r", exc, exc_info=exc)
        if self._exception_listener is not None:
            try:
                self._exception_listener(exc)
            except Exception:
                log.exception("exception listener failed")

    # -------------------------------------------------------------------------- connecting

    async def connect(
        self,
        uri: str,
        *,
        timeout: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """Open a connection to ``uri`` (``tcp://host:port/amps/json``, ``ws://``, ``tcps://``,
        ``wss://``).

        Args:
            uri: the server URI; credentials in it are used by :meth:`logon`.
            timeout: seconds to wait for the connection (``None`` = the OS default).
            ssl_context: TLS settings for this connection (default: the constructor's).
        """
        if self._transport is not None:
            raise UsageError("already connected")
        parsed = parse_uri(uri)
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_tid = threading.get_ident()
        self._closed_by_user = False
        transport = await open_transport(
            parsed,
            on_payload=self._on_payloads,
            on_close=self._on_close,
            on_writable=self._on_writable,
            max_frame_size=self._max_frame_size,
            connect_timeout=timeout,
            ssl_context=ssl_context or self._ssl_context or compat.default_ssl_context(),
        )
        self._transport = transport
        self._uri = parsed
        self._uri_text = uri
        self._outq.clear()
        self._wake_pending = False
        self._blocked = False
        self._writable.set()
        self._connected_event.set()
        self._emit(ConnectionState.CONNECTED)

    async def logon(
        self,
        timeout: int = 0,
        authenticator: Authenticator | None = None,
        options: str | None = None,
    ) -> str:
        """Log on with this client's name; returns the logon's command id.

        Args:
            timeout: milliseconds to wait for the ack (0 = no limit).
            authenticator: credentials hook (default: the URI's password as is).
            options: logon options, e.g. ``"ack_conflation=10ms"``.

        Raises:
            AuthenticationError, NameInUseError, NotEntitledError: as the server says.
            TimeoutError: no ack in time.
        """
        uri = self._require_uri()
        auth: Authenticator = authenticator or DefaultAuthenticator()
        cid = self._next_cid()
        user = uri.user
        password = auth.authenticate(user, uri.password)
        opts = options if options is not None else self._logon_options
        while True:
            fields: dict[str, Any] = {
                "c": "logon",
                "cid": cid,
                "client_name": self._name,
                "user_id": user,
                "mt": uri.message_type,
                "a": "processed",
                "version": CLIENT_VERSION,
                "pw": password,
                "o": opts,
                "x": self.logon_correlation_data,
            }
            ack = await self._request(cid, "logon", fields, None, timeout)
            status = ack.status or "success"
            if status == "retry":
                password = auth.retry(ack.get_user_id() or user, ack.get_password())
                continue
            if status != "success":
                raise error_for_reason(ack.reason, ack=ack)
            auth.completed(user, password, ack.reason)
            break
        self._logon_ack = ack
        self._server_version = ack.get_version()
        self._logged_on = True
        if self._heartbeat_interval:
            self._start_heartbeat()
        self._emit(ConnectionState.LOGGED_ON)
        return cid

    async def connect_and_logon(
        self, uri: str, *, timeout: int = 0, authenticator: Authenticator | None = None
    ) -> str:
        """:meth:`connect` then :meth:`logon`."""
        await self.connect(uri, timeout=timeout / 1000.0 if timeout else None)
        return await self.logon(timeout, authenticator)

    def _require_uri(self) -> URI:
        if self._uri is None or self._transport is None:
            raise DisconnectedError("not connected")
        return self._uri

    # ---------------------------------------------------------------------------- writing

    def _next_cid(self) -> str:
        return f"auto{next(self._cid)}"

    def _call_on_loop(self, fn: Callable[[], Any]) -> None:
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_tid:
            loop.call_soon(fn)
        else:
            loop.call_soon_threadsafe(fn)

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop after ``delay`` seconds; any thread."""
        self._call_on_loop(lambda: self._loop.call_later(delay, fn))  # type: ignore[union-attr]

    def _send_payload(self, payload: bytes) -> None:
        """Queue one payload for writing; any thread."""
        self._send_frame(_pack_len(len(payload)) + payload)

    def _send_frame(self, frame: bytes) -> None:
        if self._transport is None:
            raise DisconnectedError("not connected")
        self._outq.append(frame)
        if not self._wake_pending:
            self._wake()
        elif self._blocked:
            self._wait_writable()

    def _wake(self) -> None:
        """Schedule the writer (the queue went from idle to busy), then apply back-pressure."""
        self._schedule_drain()
        if not self._writable.is_set():
            self._wait_writable()

    def _schedule_drain(self) -> None:
        self._wake_pending = True
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_tid:
            loop.call_soon(self._drain)
            return
        try:
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            raise DisconnectedError("the client's event loop is closed") from None

    def _wait_writable(self) -> None:
        # backpressure for publishers on other threads: block while the socket buffer is full
        if threading.get_ident() == self._loop_tid:
            return  # the loop itself must never block
        while not self._writable.wait(0.5):
            if self._transport is None:
                return

    def _drain(self) -> None:
        """Write everything queued. While frames keep coming, stay awake: drain again after
        :data:`WRITE_LINGER` seconds instead of being woken per burst, so a publisher thread
        does not pay a wake-up (a syscall and a GIL hand-off) for every few messages."""
        q = self._outq
        n = len(q)
        if not n:
            self._wake_pending = False
            if q:  # appended after the check by a publisher that saw the flag still set
                self._wake_pending = True
                self._loop.call_soon(self._drain)  # type: ignore[union-attr]
            return
        transport = self._transport
        if transport is None:
            q.clear()
            self._wake_pending = False
            return
        pop = q.popleft
        data = pop() if n == 1 else b"".join([pop() for _ in range(n)])
        self._stats["frames_sent"] += n
        try:
            if self.transport_filter is not None:
                self.transport_filter(data, False)
            transport.write(data)
        except AMPSError as exc:
            log.debug("write after close dropped: %s", exc)
        self._loop.call_later(WRITE_LINGER, self._drain)  # type: ignore[union-attr]

    def _on_writable(self, writable: bool) -> None:
        self._blocked = not writable
        if writable:
            self._writable.set()
        else:
            self._writable.clear()

    async def _request(
        self,
        cid: str,
        name: str,
        fields: dict[str, Any],
        data: bytes | None,
        timeout_ms: int,
    ) -> Message:
        """Send a command that waits for its processed ack and return that ack."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Message] = loop.create_future()
        self._pending[cid] = _Pending(cid, name, fut, None, AckType.NONE, AckType.PROCESSED)
        try:
            self._send_payload(encode_header(fields) + (data or b""))
            return await self._wait(fut, timeout_ms, name)
        finally:
            self._pending.pop(cid, None)

    async def _wait(self, fut: asyncio.Future[Message], timeout_ms: int, what: str) -> Message:
        if not timeout_ms:
            return await fut
        try:
            return await asyncio.wait_for(fut, timeout_ms / 1000.0)
        except builtins.TimeoutError:
            raise TimeoutError(f"timed out waiting for the {what} ack") from None

    # ---------------------------------------------------------------------------- publishing

    def _encode_data(self, data: Any) -> bytes:
        if isinstance(data, bytes):
            return data
        if isinstance(data, str):
            return data.encode()
        if isinstance(data, (bytearray, memoryview)):
            return bytes(data)
        mt = self.message_type
        if mt == "msgpack":
            import msgpack

            return msgpack.packb(data, use_bin_type=True)  # type: ignore[no-any-return]
        return json.dumps(data, separators=(",", ":")).encode()

    def publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> None:
        """Publish ``data`` to ``topic`` (fire and forget). Thread-safe, not a coroutine.

        ``data`` may be ``bytes``, ``str``, or an object encoded for the connection's message
        type (JSON for ``json``, msgpack for ``msgpack``).
        """
        if type(data) is str:
            data = data.encode()
        elif type(data) is not bytes:
            data = self._encode_data(data)
        if expiration is None is correlation_id is sow_key:
            cached = self._pub_prefix.get(topic)
            if cached is None:
                prefix = ('{"c":"p","t":"' + escape(topic) + '"}').encode()
                cached = self._pub_prefix[topic] = (prefix, len(prefix))
            # _send_frame, inlined: this is the hottest path of the library
            if self._transport is None:
                raise DisconnectedError("not connected")
            self._enqueue(_pack_len(cached[1] + len(data)) + cached[0] + data)
            if not self._wake_pending:
                self._wake()
            elif self._blocked:
                self._wait_writable()
            return
        header = encode_header(
            {"c": "p", **publish_fields(topic, expiration, correlation_id, sow_key)}
        )
        self._send_payload(header + data)

    def delta_publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        *,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> None:
        """Merge ``data`` into the SOW record it names (a plain publish on non-SOW topics)."""
        header = encode_header(
            {"c": "delta_publish", **publish_fields(topic, expiration, correlation_id, sow_key)}
        )
        self._send_payload(header + self._encode_data(data))

    # ------------------------------------------------------------------------------ execute

    async def execute_async(self, command: Command, handler: Handler | None = None) -> str:
        """Send ``command``; messages and requested acks go to ``handler``.

        Returns once the processed ack arrived (for commands that get one).

        Returns:
            The command id (for subscriptions, use ``command.get_sub_id()`` or the return
            value to unsubscribe).
        """
        pending = await self._execute(command, handler, None)
        return pending.sub_id or pending.cid if pending is not None else ""

    async def execute(self, command: Command) -> MessageStream:
        """Send ``command`` and return a stream of what comes back."""
        loop = asyncio.get_running_loop()
        stream = MessageStream(
            loop,
            on_close=self._close_stream,
            max_depth=self._default_max_depth,
            pause=self._pause_reading,
            resume=self._resume_reading,
        )
        if self.queue_acks.auto_ack:
            stream.set_auto_ack(self.queue_acks.settle)
        await self._execute(command, stream._put, stream)
        return stream

    def _pause_reading(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    async def _execute(
        self, command: Command, handler: Handler | None, stream: MessageStream | None
    ) -> _Pending | None:
        name = command.name
        fields: dict[str, Any] = {"c": name}
        fields.update(command.fields)
        user_acks = command.ack_types
        acks = user_acks
        cid = fields.get("cid")
        if not cid:
            cid = self._next_cid()
        fields["cid"] = cid
        sub_id: str | None = None
        query_id: str | None = None
        terminal = AckType.NONE
        if name in ("p", "delta_publish"):
            if not acks:
                fields.pop("cid", None)
                fields.pop("a", None)
                self._send_payload(encode_header(fields) + (command.data or b""))
                if stream is not None:
                    stream._finish()
                return None
        else:
            acks |= AckType.PROCESSED
        if name in _SUBSCRIBE_COMMANDS:
            sub_id = str(fields.get("sub_id") or cid)
            fields["sub_id"] = sub_id
        if name in _QUERY_COMMANDS:
            query_id = str(fields.get("query_id") or cid)
            fields["query_id"] = query_id
        if name == "sow":
            acks |= AckType.COMPLETED
            terminal = AckType.COMPLETED
        elif name == "sow_delete":
            terminal = AckType.STATS if acks & AckType.STATS else AckType.PROCESSED
        elif name not in _SUBSCRIBE_COMMANDS:
            for flag in (AckType.STATS, AckType.COMPLETED, AckType.PERSISTED, AckType.PROCESSED):
                if acks & flag:
                    terminal = flag
                    break
        fields["a"] = format_ack_types(acks)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Message] = loop.create_future()
        pending = _Pending(cid, name, fut, handler, user_acks, terminal, stream, sub_id, query_id)
        self._pending[cid] = pending
        if handler is not None:
            if sub_id is not None:
                qa = self.queue_acks
                auto = qa.auto_ack and stream is None  # a stream acks as it is read
                self._subs[sub_id] = qa.wrap(handler) if auto else handler
            if query_id is not None:
                self._queries[query_id] = handler
                self._query_cids[query_id] = cid
        if stream is not None:
            stream.command_id = cid
            stream.sub_id = sub_id
            stream.query_id = query_id
            if sub_id is not None:
                self._streams[sub_id] = stream
        if not acks & AckType.PROCESSED:
            # nothing to wait for (e.g. a publish asking only for persisted): acks arrive later
            pending.future = None
            self._send_payload(encode_header(fields) + (command.data or b""))
            return pending
        try:
            self._send_payload(encode_header(fields) + (command.data or b""))
            ack = await self._wait(fut, command.timeout_ms, name)
        except TimeoutError:
            self._forget(pending)
            if sub_id is not None and self._transport is not None:
                self._send_payload(
                    encode_header({"c": "unsubscribe", "cid": self._next_cid(), "sub_id": sub_id})
                )
            raise
        except BaseException:
            self._forget(pending)
            raise
        if ack.status == "failure":
            self._forget(pending)
            raise error_for_reason(ack.reason, ack=ack)
        if terminal == AckType.NONE and sub_id is None:
            self._pending.pop(cid, None)
        return pending

    def _forget(self, pending: _Pending, error: BaseException | None = None) -> None:
        self._pending.pop(pending.cid, None)
        if pending.sub_id is not None:
            self._subs.pop(pending.sub_id, None)
            self._streams.pop(pending.sub_id, None)
        if pending.query_id is not None:
            self._queries.pop(pending.query_id, None)
            self._query_cids.pop(pending.query_id, None)
        if pending.stream is not None:
            pending.stream._finish(error)

    def _close_stream(self, stream: MessageStream) -> None:
        sub_id = stream.sub_id
        if sub_id is not None and self._streams.get(sub_id) is stream:
            self._subs.pop(sub_id, None)
            self._streams.pop(sub_id, None)
            if self._transport is not None:
                try:
                    self._send_payload(
                        encode_header(
                            {"c": "unsubscribe", "cid": self._next_cid(), "sub_id": sub_id}
                        )
                    )
                except AMPSError:
                    pass
        if stream.query_id is not None and self._queries.get(stream.query_id) == stream._put:
            self._queries.pop(stream.query_id, None)
            self._query_cids.pop(stream.query_id, None)
        if stream.command_id is not None:
            self._pending.pop(stream.command_id, None)

    # ------------------------------------------------------------------- convenience commands

    async def unsubscribe(self, sub_id: str = "all") -> None:
        """Cancel one subscription (or ``"all"``)."""
        ids = list(self._subs) if sub_id == "all" else [sub_id]
        for sid in ids:
            self._subs.pop(sid, None)
            stream = self._streams.pop(sid, None)
            if stream is not None:
                stream._finish()
            for cid, pending in list(self._pending.items()):
                if pending.sub_id == sid:
                    self._pending.pop(cid, None)
                    if pending.query_id is not None:
                        self._queries.pop(pending.query_id, None)
                        self._query_cids.pop(pending.query_id, None)
        if self._transport is not None:
            self._send_payload(
                encode_header({"c": "unsubscribe", "cid": self._next_cid(), "sub_id": sub_id})
            )

    async def flush(self, timeout: int = 0) -> None:
        """Wait until the server has processed every command sent before this one."""
        cid = self._next_cid()
        ack = await self._request(
            cid, "flush", {"c": "flush", "cid": cid, "a": "processed"}, None, timeout
        )
        if ack.status == "failure":
            raise error_for_reason(ack.reason, ack=ack)

    # ------------------------------------------------------------------------------ receiving

    def _on_payloads(self, payloads: list[bytes]) -> None:
        """The receive hot path: a delivery whose header prefix was seen before is routed with
        one slice and one dict lookup, without parsing anything.

        The :class:`Message` handed to a handler is recycled for the next delivery when the
        handler kept no reference to it (its reference count is back to what this loop holds),
        the way CPython recycles the tuples of ``dict.items()``. A handler that stores the
        message, queues it or closes over it keeps a distinct object: nothing it holds is ever
        overwritten.
        """
        self._rx = True
        self._stats["frames_received"] += len(payloads)
        if self.transport_filter is not None:
            for payload in payloads:
                self.transport_filter(payload, True)
        routes = self._subs
        (_accel.deliver or deliver)(
            payloads,
            routes.cache,
            routes.lengths,
            self._message_type,
            self._on_payload,
            self._report,
            _BM_NEXT,
        )

    def _on_payload(self, payload: bytes) -> None:
        self._rx = True
        if payload.startswith(_P_PREFIX):
            i = payload.find(_SIDS_KEY)
            if i >= 0:
                j = payload.find(b'"', i + 8)
                if j > 0:
                    sids = payload[i + 8 : j].decode()
                    handler = self._subs.get(sids)
                    if handler is not None and "," not in sids:
                        self._subs.learn(payload[: j + 1], sids, handler)
                    self._deliver(payload, sids)
                    return
        try:
            message = self._message_type(payload)
            c = message.command
        except AMPSError as exc:
            log.warning("dropping a malformed frame from %s: %s", self.uri, exc)
            return
        try:
            if c == "publish" or c == "oof":
                routed = message.sub_ids
                if routed:
                    self._deliver(payload, routed, message)
                else:
                    self._unrouted(message)
            elif c == "ack":
                self._on_ack(message)
            elif c == "sow":
                self._on_sow(payload)
            elif c == "group_begin" or c == "group_end":
                self._on_group(message, c)
            elif c == "heartbeat":
                self._on_heartbeat(message)
            else:
                self._unrouted(message)
        except Exception as exc:
            self._report(exc)

    def _deliver(self, payload: bytes, sids: str, message: Message | None = None) -> None:
        self._stats["messages_received"] += 1
        subs = self._subs
        if "," not in sids:
            handler = subs.get(sids)
            if handler is None:
                self._unrouted(message or self._message_type(payload))
                return
            try:
                handler(self._message_type(payload, sids))
            except Exception as exc:
                self._report(exc)
            return
        for sid in sids.split(","):
            handler = subs.get(sid)
            m = self._message_type(payload, header=message._hdr if message else None, sub_id=sid)
            if handler is None:
                self._unrouted(m)
                continue
            try:
                handler(m)
            except Exception as exc:
                self._report(exc)

    def _unrouted(self, message: Message) -> None:
        handler = self._last_chance
        if handler is None:
            log.debug("unrouted message: %r", message)
            return
        try:
            handler(message)
        except Exception as exc:
            self._report(exc)

    def _on_sow(self, payload: bytes) -> None:
        outer, records = split_sow_batch(payload)
        qid = outer.get("query_id") or outer.get("sub_id") or outer.get("cid")
        handler = self._queries.get(str(qid)) if qid is not None else None
        for record in records:
            self._stats["messages_received"] += 1
            if handler is None:
                self._unrouted(record)
                continue
            try:
                handler(record)
            except Exception as exc:
                self._report(exc)

    def _on_group(self, message: Message, c: str) -> None:
        qid = message.query_id or message.command_id
        handler = self._queries.get(qid) if qid is not None else None
        if handler is None:
            self._unrouted(message)
            return
        try:
            handler(message)
        except Exception as exc:
            self._report(exc)
        if c == "group_end" and qid is not None:
            cid = self._query_cids.get(qid)
            pending = self._pending.get(cid) if cid is not None else None
            if (
                pending is not None
                and pending.name == "sow"
                and not (pending.terminal & AckType.COMPLETED)
            ):
                self._complete(pending)

    def _on_heartbeat(self, message: Message) -> None:
        g = self._global_handlers.get("heartbeat")
        if g is not None:
            g(message)
        if self._transport is not None and message.options != "beat":
            self._send_payload(b'{"c":"heartbeat","o":"beat"}')

    def _on_ack(self, message: Message) -> None:
        g = self._global_handlers.get("ack")
        if g is not None:
            g(message)
        hdr = message.header
        a = hdr.get("a", "")
        cid = hdr.get("cid")
        pending = self._pending.get(str(cid)) if cid is not None else None
        if pending is None and cid is None:
            qid = hdr.get("query_id")
            if qid is not None:
                qcid = self._query_cids.get(str(qid))
                pending = self._pending.get(qcid) if qcid is not None else None
        if pending is None:
            if a == "persisted":
                if "sub_id" in hdr and self._on_sub_persisted is not None:
                    self._on_sub_persisted(message)
                    return
                if self._on_publish_persisted is not None:
                    self._on_publish_persisted(message)
                    return
            self._unrouted(message)
            return
        flag = message.ack_type
        if flag & AckType.PROCESSED and pending.future is not None and not pending.future.done():
            pending.future.set_result(message)
        if flag & pending.user_acks:
            if pending.handler is None and pending.stream is None:
                self._unrouted(message)  # requested, but nobody to give it to
            elif pending.handler is not None:
                try:
                    pending.handler(message)
                except Exception as exc:
                    self._report(exc)
        elif flag & AckType.STATS and pending.stream is not None and pending.name == "sow_delete":
            pending.stream._put(message)
        if flag & pending.terminal:
            self._complete(pending)

    def _complete(self, pending: _Pending) -> None:
        self._pending.pop(pending.cid, None)
        if pending.sub_id is None and pending.query_id is not None:
            self._queries.pop(pending.query_id, None)
            self._query_cids.pop(pending.query_id, None)
        if pending.stream is not None and pending.sub_id is None:
            pending.stream._finish()

    # ------------------------------------------------------------------------------ heartbeats

    def _start_heartbeat(self) -> None:
        if self._transport is None or not self._heartbeat_interval:
            return
        interval = self._heartbeat_interval
        iv = int(interval) if float(interval).is_integer() else interval
        self._send_payload(encode_header({"c": "heartbeat", "o": f"start,{iv}"}))
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        self._heartbeat_task = asyncio.ensure_future(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._heartbeat_interval
        timeout = self._heartbeat_timeout
        last_rx = loop.time()
        # a tenth of the shorter period: a silent server is noticed within ~10 % of the
        # timeout (ten wake-ups a second for a 1 s heartbeat)
        tick = min(interval, timeout) / 10.0 if timeout else interval / 10.0
        next_beat = loop.time() + interval
        while self._transport is not None:
            await asyncio.sleep(tick)
            now = loop.time()
            if self._rx:
                self._rx = False
                last_rx = now
            elif now - last_rx > timeout:
                log.warning("no traffic from %s for %.1f s: closing", self.uri, now - last_rx)
                self._abort(DisconnectedError("heartbeat timeout: the server went silent"))
                return
            if now >= next_beat and self._transport is not None:
                self._send_payload(b'{"c":"heartbeat","o":"beat"}')
                next_beat = now + interval

    # ----------------------------------------------------------------------------- closing

    def _abort(self, error: BaseException) -> None:
        transport = self._transport
        if transport is None:
            return
        abort = getattr(transport, "abort", None)
        if abort is not None:
            abort()
        else:
            transport.close()
        self._on_close(error)

    def _on_close(self, error: BaseException | None) -> None:
        if self._transport is None:
            return
        self._transport = None
        self._logged_on = False
        self._connected_event.clear()
        self._blocked = False
        self._writable.set()
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None
        by_user = self._closed_by_user
        err: BaseException = error or DisconnectedError("the connection was closed")
        if not isinstance(err, AMPSError):
            wrapped = DisconnectedError(str(err))
            wrapped.__cause__ = err
            err = wrapped
        for pending in list(self._pending.values()):
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(err)
                pending.future.exception()  # mark retrieved
        keep = self._keep_routes_on_disconnect and not by_user
        if not keep:
            # streams of commands still in flight (a query between its processed and completed
            # acks) end with the error too: take them before the table is emptied
            in_flight = [p.stream for p in self._pending.values() if p.stream is not None]
            self._pending.clear()
            stream_error = None if by_user else err
            for stream in [*self._streams.values(), *in_flight]:
                stream._finish(stream_error)
            self._streams.clear()
            self._subs.clear()
            self._queries.clear()
            self._query_cids.clear()
        else:
            for cid, pending in list(self._pending.items()):
                if pending.sub_id is None:
                    self._pending.pop(cid, None)
                    if pending.stream is not None:
                        pending.stream._finish(err)
        if by_user:
            self._emit(ConnectionState.SHUTDOWN)
            return
        log.info("disconnected from %s: %s", self.uri, err)
        self._emit(ConnectionState.DISCONNECTED, err)
        if self._disconnect_handler is not None:
            try:
                self._disconnect_handler(self, err)
            except Exception as exc:
                self._report(exc)

    async def close(self) -> None:
        """Flush queued writes and close the connection. Streams end; pending calls fail."""
        transport = self._transport
        if transport is None:
            return
        self._closed_by_user = True
        self.queue_acks.flush()  # pending queue acks go out before the connection closes
        self._drain()
        # streams and subscriptions end quietly
        for stream in list(self._streams.values()):
            stream._finish(None)
        for pending in list(self._pending.values()):
            if pending.stream is not None:
                pending.stream._finish(None)
        transport.close()
        self._on_close(None)
        await asyncio.sleep(0)

    disconnect = close

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def publish_fields(
    topic: str, expiration: int | None, correlation_id: str | None, sow_key: str | None
) -> dict[str, Any]:
    """The header fields of a publish after ``c`` (``None`` values are left out when encoded)."""
    return {
        "t": topic,
        "e": None if expiration is None else str(expiration),
        "x": correlation_id,
        "k": sow_key,
    }
