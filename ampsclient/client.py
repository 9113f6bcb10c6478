"""AsyncClient: one connection to an AMPS server, on asyncio.

The asyncio *wing* of the sans-I/O core (:class:`~ampsclient.core.connection.ClientCore`):
the core holds the state, the logon, command correlation, heartbeats and subscription
bookkeeping; this class opens the transport, feeds the core what it reads and the time,
writes what the core queues, and acts on the events the core gives back
(:mod:`ampsclient.core.event_types`: it resolves the futures of awaited commands, ends
streams, closes a silent connection, tells the listeners). It is the one
asyncio implementation; :class:`ampsclient.Client` drives it from synchronous code on a
background loop thread. Its parts are held, not inherited: the core, the
:class:`~ampsclient.writer.FrameWriter` (the write queue, publish batching and the publish
gate), and the :class:`~ampsclient.wiring.Wiring` the objects that hold a client (the HA
client, the sync facade) drive it through, so its public face is the user API alone.
Method names follow the official AMPS Python client; options beyond its
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
import logging
import ssl
from collections.abc import Callable
from typing import Any, Self, TypeVar

from . import _accel, compat
from .acks import QueueAckMethods, QueueAcks, bound_message_type
from .authenticator import Authenticator, DefaultAuthenticator
from .calls import Handler
from .command import Command
from .convenience import AsyncCommands
from .core.connection import CLIENT_VERSION, SUBSCRIBE_COMMANDS, ClientCore, Pending
from .core.event_types import (
    CommandAcked,
    CommandFailed,
    ConnectionLost,
    Event,
    HandlerFailed,
    HeartbeatTimedOut,
    LogonAcked,
    PublishPersisted,
    StateChanged,
    StreamEnded,
    SubscriptionPersisted,
)
from .core.events import ConnectionEvent, ConnectionState
from .core.routes import deliver
from .core.state import State
from .core.values import version_number
from .exceptions import DisconnectedError, TimeoutError, UsageError, error_for_reason
from .observer import ClientObserver
from .protocol.acks import AckType
from .protocol.bookmarks import Bookmarks
from .protocol.framing import DEFAULT_MAX_FRAME_SIZE
from .protocol.message import Message
from .stream import MessageStream
from .transport.factory import open_transport
from .uri import URI, parse_uri
from .wiring import Wiring
from .writer import FrameWriter, Published

__all__ = [
    "CLIENT_VERSION",
    "AsyncClient",
    "ConnectionEvent",
    "ConnectionState",
    "Handler",
    "deliver",
]

log = logging.getLogger("ampsclient.client")

E = TypeVar("E", bound=Event)
_T = TypeVar("_T")


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

    __slots__ = ("_publish_lane",)  # the lane: read at its offset (C LaneMethod)

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
        self._uri: URI | None = None
        self._core = ClientCore(max_frame_size=max_frame_size)
        self._writer = FrameWriter(self._core, lambda: self.message_type)
        """The write queue, back-pressure, publish batching and the publish gate."""
        self._disconnect_handler: Callable[[AsyncClient, BaseException | None], Any] | None = None
        self._state_listeners: list[Callable[[ConnectionEvent], Any]] = []
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._closed_by_user = False
        self._exception_listener: Callable[[BaseException], Any] | None = None
        self._waiting: dict[str, asyncio.Future[Message]] = {}
        """Command id -> the future of an awaited processed ack."""
        self._logons: dict[str, asyncio.Future[LogonAcked]] = {}
        """Logon command id -> the future of its ack."""
        self._processing = False
        self._on_event: dict[type[Any], Callable[[Any], None]] = {
            StateChanged: _ignore,
            LogonAcked: self._logon_acked,
            CommandAcked: self._command_acked,
            CommandFailed: self._command_failed,
            StreamEnded: _end_stream,
            HeartbeatTimedOut: self._heartbeat_timed_out,
            ConnectionLost: self._connection_lost,
            PublishPersisted: self._unrouted_ack,
            SubscriptionPersisted: self._unrouted_ack,
            HandlerFailed: self._handler_failed,
        }
        writer = self._writer
        self._queue_acks = QueueAcks(writer.send_now, writer.call_later)
        """Queue acknowledgements: settings and pending batch (:mod:`ampsclient.acks`)."""
        self._core.message_type = bound_message_type(self._queue_acks.ack, self._queue_acks)
        self.logon_correlation_data: str | None = None
        """Sent as the logon's correlation id (``x``): how the server's logs name this logon."""
        self._plain_lane: Any = None
        self._publish_lane: Callable[..., Published] = writer.publish
        """What takes :meth:`publish` calls (:func:`ampsclient._accel.lane_method`): the C
        ``PlainPublishLane``'s ``publish``, built on the writer, or the writer's Python
        ``publish``."""
        lane = _accel.PlainPublishLane
        if lane is not None and type(self).publish is AsyncClient.publish:
            # the C speedups do publish()'s common case and call the writer's otherwise
            self._plain_lane = writer.plain_publish_lane()
            self._publish_lane = self._plain_lane.publish
        self._wiring = Wiring(
            writer=writer,
            send_command=self._send_command,
            new_stream=self._new_stream,
            close_stream=self._close_stream,
            process_events=self._process_events,
            set_event_handler=self._set_event_handler,
            emit_state=self._emit,
            report=self._report,
            abort=self._abort,
        )
        """The plumbing the objects holding this client drive (:mod:`ampsclient.wiring`)."""

    Bookmarks = Bookmarks
    """``EPOCH``, ``NOW`` and ``MOST_RECENT``."""

    @property
    def core(self) -> ClientCore:
        """The sans-I/O core this client drives (state, correlation, routes)."""
        return self._core

    @property
    def state(self) -> State:
        """The connection's state (:class:`~ampsclient.core.state.State`)."""
        return self._core.state

    @property
    def transport_filter(self) -> Callable[[bytes, bool], Any] | None:
        """Sees the bytes written (``False``) and each frame's payload read (``True``)."""
        return self._core.transport_filter

    @transport_filter.setter
    def transport_filter(self, value: Callable[[bytes, bool], Any] | None) -> None:
        self._core.transport_filter = value

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
        return self._writer.transport is not None

    @property
    def logged_on(self) -> bool:
        """``True`` between a successful logon and a disconnect."""
        return self._core.state is State.LOGGED_ON and self._writer.transport is not None

    @property
    def message_type(self) -> str:
        """The message type of the connection (``json``, ``msgpack``, ``binary``...)."""
        return "json" if self._uri is None else self._uri.message_type

    @property
    def server_version(self) -> str | None:
        """The ``version`` the server sent in its logon ack."""
        return self._core.server_version

    def get_server_version(self) -> int:
        """The server version as the official client reports it (a·10⁶+b·10⁴+c·10²+d)."""
        return version_number(self._core.server_version)

    def get_server_version_info(self) -> str | None:
        """The server's version string."""
        return self._core.server_version

    @property
    def logon_ack(self) -> Message | None:
        """The last logon ack (its ``s`` is the last sequence the server persisted for us)."""
        return self._core.logon_ack

    def statistics(self) -> dict[str, int]:
        """Counters: frames received and sent; messages delivered through the slow path."""
        return dict(self._core.stats)

    # ------------------------------------------------------------------------ handler settings

    def set_last_chance_message_handler(self, handler: Handler | None) -> None:
        """Receives messages that no other handler took."""
        self._core.last_chance = handler

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
        self._core.add_message_handler(command_id, message_handler, acks, is_subscribe)

    def remove_message_handler(self, command_id: str) -> bool:
        """Stop routing ``command_id`` to its handler; ``True`` if one was registered."""
        return self._core.remove_message_handler(command_id)

    def get_ssl(self) -> Any:
        """Refused: the official client's ``PySSLSocket`` does not exist here."""
        raise UsageError(
            "get_ssl(): TLS runs inside asyncio's transport (there is no SSL socket object); "
            "configure it with ssl_context (ampsclient.tls.client_context) or ssl_init()"
        )

    def set_global_command_type_message_handler(self, command: str, handler: Handler) -> None:
        """See every ``ack`` or ``heartbeat`` message (official API)."""
        self._core.global_handlers[command] = handler

    def set_observer(self, observer: ClientObserver | None) -> None:
        """Let ``observer`` see this client's publishes and the commands it sends
        (:mod:`ampsclient.observer`; :func:`ampsclient.tracing.instrument` sets one).

        Setting one switches the C publish lane off for good (every publish then takes the
        Python path, which asks the observer); ``None`` stops observing. Handlers of commands
        sent before the observer was set are not observed.
        """
        if observer is not None and self._plain_lane is not None:
            self._plain_lane.disable()
        self._writer.observer = observer

    def set_heartbeat(self, interval: float, timeout: float | None = None) -> None:
        """Ask the server for heartbeats every ``interval`` seconds.

        The connection is closed (and an HA client reconnects) when nothing arrives for
        ``timeout`` seconds (default ``2 * interval``). Takes effect at once when logged on.
        """
        self._core.set_heartbeat(interval, timeout)
        if self.logged_on and self._writer.loop is not None:
            self._writer.call_soon(self._start_heartbeat)

    def _emit(self, state: ConnectionState, cause: BaseException | None = None) -> None:
        event = ConnectionEvent(state, self.uri, cause)
        for listener in list(self._state_listeners):
            try:
                listener(event)
            except Exception as exc:
                self._report(exc)

    # ---------------------------------------------------------------------- the core's events

    def _report(self, exc: BaseException) -> None:
        """A handler the wing called raised ``exc``: log it and tell the exception listener
        at once (also for wrappers whose own handlers run application code, as the HA
        client's failed-write handler). Handlers the core calls come back as
        ``HandlerFailed`` events."""
        log.error("exception in a handler: %r", exc, exc_info=exc)
        self._handler_failed(HandlerFailed(exc))

    def _set_event_handler(self, kind: type[E], handler: Callable[[E], None]) -> None:
        """Act on the core's events of type ``kind`` with ``handler`` instead of this
        client's default (the HA client takes ``PublishPersisted`` and
        ``SubscriptionPersisted``, which a plain client gives the last-chance handler at
        once, in order with the deliveries around them)."""
        self._on_event[kind] = handler
        if kind is PublishPersisted or kind is SubscriptionPersisted:
            self._core.persisted_events = True
        if kind is SubscriptionPersisted:  # at once, in order with the deliveries (#32)
            self._core.on_sub_persisted = lambda ack: handler(SubscriptionPersisted(ack))  # type: ignore[arg-type]

    def _process_events(self) -> None:
        """Act on every event the core queued (see :mod:`ampsclient.core.event_types`).

        Called after each call into the core that may queue one; an event handler that
        queues more (a listener that raises) has them handled in the same pass, in order.
        """
        if self._processing:
            return  # the pass under way takes them
        core = self._core
        on_event = self._on_event
        self._processing = True
        try:
            while core.events:
                for event in core.events_received():
                    on_event[type(event)](event)
        finally:
            self._processing = False

    def _receive_payloads(self, payloads: list[bytes]) -> None:
        core = self._core
        core.receive_payloads(payloads)
        if core.events:  # once per read, not per message
            self._process_events()

    def _receive_data(self, data: bytes) -> None:
        core = self._core
        core.receive_data(data)  # tcp://: framed and delivered in one pass
        if core.events:
            self._process_events()

    def _logon_acked(self, event: LogonAcked) -> None:
        fut = self._logons.pop(event.cid, None)
        if fut is not None and not fut.done():
            fut.set_result(event)

    def _command_acked(self, event: CommandAcked) -> None:
        fut = self._waiting.pop(event.cid, None)
        if fut is not None and not fut.done():
            fut.set_result(event.ack)

    def _command_failed(self, event: CommandFailed) -> None:
        fut: asyncio.Future[Any] | None = self._waiting.pop(event.cid, None)
        if fut is None:
            fut = self._logons.pop(event.cid, None)
        if fut is not None and not fut.done():
            fut.set_exception(event.error)
            fut.exception()  # mark retrieved: nobody may be awaiting it any more

    def _heartbeat_timed_out(self, event: HeartbeatTimedOut) -> None:
        self._abort(DisconnectedError("heartbeat timeout: the server went silent"))

    def _connection_lost(self, event: ConnectionLost) -> None:
        if event.by_user:  # as the official client reports a close: disconnected, shut down
            self._emit(ConnectionState.DISCONNECTED)
            self._emit(ConnectionState.SHUTDOWN)
            return
        err = event.error
        log.info("disconnected from %s: %s", self.uri, err)
        self._emit(ConnectionState.DISCONNECTED, err)
        if self._disconnect_handler is not None:
            try:
                self._disconnect_handler(self, err)
            except Exception as exc:
                self._report(exc)

    def _unrouted_ack(self, event: PublishPersisted | SubscriptionPersisted) -> None:
        self._core.unrouted(event.ack)

    def _handler_failed(self, event: HandlerFailed) -> None:
        listener = self._exception_listener
        if listener is not None:
            try:
                listener(event.error)
            except Exception:
                log.exception("exception listener failed")

    # -------------------------------------------------------------------------- publishing

    @_accel.lane_method("_publish_lane")
    def publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> Published:
        """Publish ``data`` to ``topic`` (fire and forget). Thread-safe; not a coroutine, yet
        ``await`` of its result works.

        ``data`` may be ``bytes``, ``str``, or an object encoded for the connection's message
        type (JSON for ``json``, msgpack for ``msgpack``). The call goes to ``_publish_lane``:
        the writer's :meth:`~ampsclient.writer.FrameWriter.publish`, or, with the C speedups,
        their ``PlainPublishLane``, which takes the common case and calls the writer's for
        everything else (the body below runs only for a lane set to ``None``).

        Returns:
            0, as the official client's ``publish`` without a publish store (an HA client
            returns the message's sequence number); an ``int`` that ``await`` also accepts
            (:class:`~ampsclient.writer.Published`): ``await client.publish(...)`` returns 0
            once the message is queued.
        """
        return self._writer.publish(topic, data, expiration, correlation_id, sow_key)

    def delta_publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        *,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> Published:
        """Merge ``data`` into the SOW record it names (a plain publish on non-SOW topics).
        Returns 0, as :meth:`publish`."""
        return self._writer.delta_publish(
            topic, data, expiration, correlation_id=correlation_id, sow_key=sow_key
        )

    def publish_path(self) -> Callable[..., Published]:
        """What a facade may hold to publish through this client with no dispatch of its own:
        the C ``PlainPublishLane``'s ``publish`` (set once, at construction), else the
        writer's ``publish``. A switched-off lane calls the writer's Python path, so a held
        one stays correct (``set_observer``)."""
        return self._publish_lane

    def set_publish_batching(self, batch_size: int, batch_timeout: int) -> None:
        """Hold publishes until ``batch_size`` bytes are queued or the oldest has waited
        ``batch_timeout`` ms (0: no time bound), then write them in one call (official API).

        ``(0, 0)``, the default, writes as soon as the loop runs (publishes made meanwhile
        still share one write). Commands (``flush``, subscriptions, acks...) are never held:
        one takes the held publishes with it, so ``flush`` and ``publish_flush`` end a batch.
        """
        self._writer.set_publish_batching(batch_size, batch_timeout)

    def encode_data(self, data: Any) -> bytes:
        """``data`` as bytes: bytes as is, ``str`` in UTF-8, other objects in the connection's
        message type (msgpack for ``msgpack``, else JSON)."""
        return self._writer.encode_data(data)

    @property
    def queue_acks(self) -> QueueAcks:
        """Queue acknowledgements: ack settings and the pending batch (:mod:`ampsclient.acks`)."""
        return self._queue_acks

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
        writer = self._writer
        if writer.transport is not None:
            raise UsageError("already connected")
        parsed = parse_uri(uri)
        writer.bind_loop(asyncio.get_running_loop())
        self._closed_by_user = False
        transport = await open_transport(
            parsed,
            on_payload=self._receive_payloads,
            on_data=self._receive_data,
            on_close=self._on_close,
            on_writable=writer.transport_writable,
            max_frame_size=self._max_frame_size,
            connect_timeout=timeout,
            ssl_context=ssl_context or self._ssl_context or compat.default_ssl_context(),
        )
        self._core.connection_made()
        writer.attach(transport)
        self._uri = parsed
        self._process_events()
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
        core = self._core
        cid = core.next_cid()
        user = uri.user
        password = auth.authenticate(user, uri.password)
        opts = options if options is not None else self._logon_options
        while True:
            core.send_logon(
                cid=cid,
                client_name=self._name,
                user=user,
                password=password,
                message_type=uri.message_type,
                options=opts,
                correlation_id=self.logon_correlation_data,
            )
            fut: asyncio.Future[LogonAcked] = asyncio.get_running_loop().create_future()
            self._logons[cid] = fut
            try:
                acked = await self._wait(fut, timeout, "logon")
            except BaseException:
                self._logons.pop(cid, None)
                core.logon_abandoned(cid)
                self._process_events()
                raise
            status, ack = acked.status, acked.ack
            if status == "retry":
                password = auth.retry(ack.get_user_id() or user, ack.get_password())
                continue
            if status != "success":
                raise error_for_reason(ack.reason, ack=ack)
            auth.completed(user, password, ack.reason)
            break
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
        if self._uri is None or self._writer.transport is None:
            raise DisconnectedError("not connected")
        return self._uri

    async def _request(
        self,
        name: str,
        fields: dict[str, Any],
        timeout_ms: int,
        data: bytes = b"",
        *,
        awaited: AckType = AckType.PROCESSED,
    ) -> Message:
        """Send a command that waits for its ``awaited`` ack (processed) and return that ack."""
        if self._writer.transport is None and self._writer.send_retry is not None:
            await self._retry_if_dropped()
        cid = self._core.request(name, fields, data, awaited=awaited)
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = fut
        try:
            return await self._wait(fut, timeout_ms, name)
        finally:
            self._waiting.pop(cid, None)
            self._core.forget_command(cid)

    async def _retry_if_dropped(self) -> None:
        """No connection and a ``send_retry`` (the writer's): ask it on a worker thread (it
        may run a disconnect handler that reconnects through this loop); the command then goes
        out, or fails as usual when still not connected."""
        retry = self._writer.send_retry
        if self._writer.transport is None and retry is not None:
            await asyncio.get_running_loop().run_in_executor(None, retry)

    async def _wait(self, fut: asyncio.Future[_T], timeout_ms: int, what: str) -> _T:
        if not timeout_ms:
            return await fut
        try:
            return await asyncio.wait_for(fut, timeout_ms / 1000.0)
        except builtins.TimeoutError:
            raise TimeoutError(f"timed out waiting for the {what} ack") from None

    # ------------------------------------------------------------------------------ execute

    async def execute_async(self, command: Command, handler: Handler | None = None) -> str:
        """Send ``command``; messages and requested acks go to ``handler``.

        Returns once the processed ack arrived (for commands that get one).

        Returns:
            The command id (for subscriptions, use ``command.get_sub_id()`` or the return
            value to unsubscribe).
        """
        pending = await self._send_command(command, handler)
        return pending.sub_id or pending.cid if pending is not None else ""

    async def execute(self, command: Command) -> MessageStream:
        """Send ``command`` and return a stream of what comes back."""
        stream = self._new_stream()
        await self._send_command(command, stream.put, stream)
        return stream

    def _new_stream(self, on_close: Callable[[MessageStream], None] | None = None) -> MessageStream:
        """A message stream on this client's loop (closing it early calls ``on_close``,
        default :meth:`_close_stream`)."""
        stream = MessageStream(
            asyncio.get_running_loop(),
            on_close=on_close or self._close_stream,
            max_depth=self._default_max_depth,
            pause=self._pause_reading,
            resume=self._resume_reading,
        )
        if self._queue_acks.auto_ack:
            qa = self._queue_acks
            stream.set_auto_ack(
                qa.settle, hand_out=qa.hand_out, idle=qa.settle_idle, idle_seconds=qa.idle_seconds
            )
        return stream

    def _pause_reading(self) -> None:
        transport = self._writer.transport
        if transport is not None:
            transport.pause_reading()

    def _resume_reading(self) -> None:
        transport = self._writer.transport
        if transport is not None:
            transport.resume_reading()

    async def _send_command(
        self, command: Command, handler: Handler | None, stream: MessageStream | None = None
    ) -> Pending | None:
        """Send ``command`` through the core and wait for its processed ack (if it asks for
        one): the step under :meth:`execute` and :meth:`execute_async`, for wrappers (the HA
        client) that track what they sent.

        Returns:
            The core's entry for the command (``None`` for a publish without acks).

        Raises:
            CommandError: the server refused it. TimeoutError: no ack within its timeout.
        """
        if self._writer.transport is None and self._writer.send_retry is not None:
            await self._retry_if_dropped()
        observer = self._writer.observer
        if (
            observer is not None  # opt-in tracing (ampsclient.observer)
            and handler is not None
            and stream is None
            and not getattr(handler, "bookmark_logged", False)  # a bookmark store's route
        ):
            handler = observer.handler_for(command, handler)
        route = None
        qa = self._queue_acks
        if (
            handler is not None
            and stream is None
            and qa.auto_ack
            and command.name in SUBSCRIBE_COMMANDS
        ):
            route = qa.wrap(handler)  # a stream acks as it is read
        core = self._core
        try:
            pending = core.send_command(command, handler, stream, route_handler=route)
        finally:
            self._process_events()
        if pending is None or not pending.wants_ack:
            return pending
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[pending.cid] = fut
        try:
            ack = await self._wait(fut, command.timeout_ms, command.name)
        except BaseException as exc:
            self._waiting.pop(pending.cid, None)
            core.command_abandoned(pending, timed_out=isinstance(exc, TimeoutError))
            self._process_events()
            raise
        try:
            core.command_acked(pending, ack)
        finally:
            self._process_events()
        if pending.sub_id is not None and command.name in SUBSCRIBE_COMMANDS:
            qa.subscribed(pending.sub_id, command.fields.get("t"), ack.options)  # backlog cap
        return pending

    def _close_stream(self, stream: MessageStream) -> None:
        """Forget ``stream`` (closed by the application) and unsubscribe its subscription."""
        self._core.close_stream(stream, stream.put)  # queues no event (any thread may call it)
        if stream.sub_id is not None:
            self._queue_acks.unsubscribed(stream.sub_id)

    # ------------------------------------------------------------------- convenience commands

    async def unsubscribe(self, sub_id: str = "all") -> None:
        """Cancel one subscription (or ``"all"``)."""
        try:
            self._core.unsubscribe(sub_id)
        finally:
            self._process_events()
        self._queue_acks.unsubscribed(sub_id)

    async def flush(self, timeout: int = 0, *, ack_type: AckType = AckType.PROCESSED) -> None:
        """Wait until the server has processed every command sent before this one (with
        ``ack_type=AckType.PERSISTED``: until everything published before it is persisted).

        Raises:
            UsageError: ``ack_type`` is neither processed nor persisted.
        """
        if ack_type not in (AckType.PROCESSED, AckType.PERSISTED):
            raise UsageError("Flush can only be used with processed or persisted acks.")
        a = "persisted" if ack_type == AckType.PERSISTED else "processed"
        ack = await self._request("flush", {"c": "flush", "a": a}, timeout, awaited=ack_type)
        if ack.status == "failure":
            raise error_for_reason(ack.reason, ack=ack)

    # ------------------------------------------------------------------------------ heartbeats

    def _start_heartbeat(self) -> None:
        loop = self._writer.loop
        if self._writer.transport is None or loop is None:
            return
        tick = self._core.start_heartbeat(loop.time())  # queues no event
        if tick is None:
            return
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        self._heartbeat_task = asyncio.ensure_future(self._heartbeat_loop(tick))

    async def _heartbeat_loop(self, tick: float) -> None:
        loop = asyncio.get_running_loop()
        core = self._core
        writer = self._writer
        while writer.transport is not None:
            await asyncio.sleep(tick)
            if writer.transport is not None:
                core.heartbeat_tick(loop.time())
                if core.events:
                    self._process_events()  # a HeartbeatTimedOut aborts the connection

    # ----------------------------------------------------------------------------- closing

    def _abort(self, error: BaseException) -> None:
        """Drop the connection at once (no flush); pending calls fail with ``error``."""
        transport = self._writer.transport
        if transport is None:
            return
        # first: a transport that reports its close at once (memory://) would make it a plain
        # "connection closed" instead of ``error``
        self._on_close(error)
        abort = getattr(transport, "abort", None)
        if abort is not None:
            abort()
        else:
            transport.close()

    def _on_close(self, error: BaseException | None) -> None:
        if self._writer.detach() is None:
            return
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None
        # failed commands, ended streams, then ConnectionLost (listeners, disconnect handler)
        self._core.connection_lost(error, by_user=self._closed_by_user)
        self._process_events()

    async def close(self) -> None:
        """Flush queued writes and close the connection. Streams end; pending calls fail.

        Connection state listeners hear ``DISCONNECTED`` then ``SHUTDOWN`` when a connection
        was open, ``SHUTDOWN`` alone otherwise (the official client's sequence)."""
        transport = self._writer.transport
        if transport is None:
            self._emit(ConnectionState.SHUTDOWN)
            return
        self._closed_by_user = True
        self._queue_acks.flush()  # pending queue acks go out before the connection closes
        self._writer.drain_now()  # so do publishes held by batching
        self._core.end_streams()  # streams and subscriptions end quietly
        self._process_events()
        transport.close()
        self._on_close(None)
        await asyncio.sleep(0)

    disconnect = close

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _ignore(event: StateChanged) -> None:
    """The wing reads the state from the core when it needs it."""


def _end_stream(event: StreamEnded) -> None:
    event.stream.finish(event.error)
