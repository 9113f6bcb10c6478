"""The synchronous facade: :class:`Client` drives an :class:`~ampsclient.client.AsyncClient`.

Each ``Client`` owns one background thread running an asyncio loop (like the official
client's receive thread): handlers run there, blocking methods wait for results from it.
``publish`` does not hop threads: it encodes in the caller's thread and queues the bytes.

The methods that mirror the asyncio clients' are generated from their source by
``tools/unasync.py`` (httpcore's unasync): :class:`~ampsclient.sync_face.SyncClientFace`,
:class:`~ampsclient.sync_face.SyncHAClientFace` and the convenience commands'
:class:`~ampsclient.sync_convenience.SyncCommands`. What is written here is what only the
synchronous facade has: the loop thread, the publish lanes, connecting again after
``close``, closing and the context managers, handlers run on threads of their own, and the
official client's argument names where they differ from the asyncio ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal, Self, TypedDict, TypeVar, Unpack

from ._accel import lane_method
from .acks import QueueAckMethods, QueueAcks
from .authenticator import Authenticator
from .client import AsyncClient, ConnectionState, Handler
from .command import Command
from .disconnects import DropHandling, takes_error
from .exceptions import DisconnectedError, TimeoutError, UsageError
from .official import ConnectionStateListener, OfficialClientMethods
from .protocol.acks import AckType
from .protocol.bookmarks import Bookmarks
from .protocol.framing import DEFAULT_MAX_FRAME_SIZE
from .protocol.message import Message
from .sync_convenience import SyncCommands
from .sync_face import SyncClientFace, SyncHAClientFace

if TYPE_CHECKING:  # the HA modules load when an HAClient is made
    from .ha.chooser import ServerChooser
    from .ha.client import AsyncHAClient
    from .ha.reconnect import ReconnectDelayStrategy
    from .stores.bookmark import BookmarkStore
    from .stores.publish import PublishStore

__all__ = ["Client", "HAClient", "HAClientOptions", "LoopThread"]


T = TypeVar("T")


class LoopThread:
    """An asyncio loop on a daemon thread, with a way to run coroutines on it and wait."""

    def __init__(self, name: str = "ampsclient-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    @property
    def ident(self) -> int | None:
        """The thread id of the loop thread."""
        return self._thread.ident

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        if threading.get_ident() == self._thread.ident:
            coro.close()
            raise UsageError(
                "a blocking client method was called from one of the client's own handlers; "
                "use the AsyncClient or hand the work to another thread"
            )
        if self.loop.is_closed():
            coro.close()
            raise UsageError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine itself raised a TimeoutError: keep it
                raise
            future.cancel()
            raise TimeoutError("timed out waiting for the client's event loop") from None

    def stop(self) -> None:
        """Stop the loop and join the thread."""
        if self.loop.is_closed():
            return
        if threading.get_ident() == self._thread.ident:
            self.loop.stop()
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class Client(SyncClientFace, SyncCommands, QueueAckMethods, OfficialClientMethods):
    """A synchronous AMPS client with the official client's method names.

    Example::

        with Client("publisher-1") as client:
            client.connect("tcp://127.0.0.1:9007/amps/json")
            client.logon()
            client.publish("orders", '{"id": 1}')
            client.flush()

    Every public method of :class:`~ampsclient.client.AsyncClient` is available, blocking
    until done: with the same arguments (the twins generated in
    :class:`~ampsclient.sync_face.SyncClientFace`), or with the official client's where they
    differ (``set_heartbeat``, ``execute_async``, ``set_global_command_type_message_handler``,
    ``flush``, ``set_publish_batching``, ``add_message_handler``). Timeouts named ``timeout``
    are milliseconds.
    """

    Bookmarks = Bookmarks
    """``Client.Bookmarks.EPOCH`` / ``NOW`` / ``MOST_RECENT``, as in the official client."""

    ConnectionStateListener = ConnectionStateListener
    """The official connection state constants."""

    _async: AsyncClient | AsyncHAClient
    """The asyncio client driven (an :class:`AsyncHAClient` holds its own AsyncClient)."""

    __slots__ = ("_async_delta_publish", "_async_publish")  # the lanes: read at their offsets

    def __init__(
        self,
        name: str = "",
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        default_max_depth: int = 0,
        logon_options: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._async = AsyncClient(
            name,
            max_frame_size=max_frame_size,
            default_max_depth=default_max_depth,
            logon_options=logon_options,
            ssl_context=ssl_context,
        )
        self._drops = DropHandling(self, self._async)
        """The disconnect handler and ``retry_on_disconnect`` (it alone keeps their state)."""
        self._drops.install()
        self._start()

    def _start(self) -> None:
        self._lt: LoopThread | None = LoopThread(f"ampsclient-{self._async.name or 'client'}")
        self._async_publish: Callable[..., int] = self._async.publish_path()
        """:meth:`publish`'s lane: the asyncio client's (thread-safe) publish path, its C
        lane's publish when built."""
        self._async_delta_publish: Callable[..., int] = self._async.delta_publish
        """:meth:`delta_publish`'s lane, likewise."""

    @property
    def async_client(self) -> AsyncClient | AsyncHAClient:
        """The asyncio client this facade drives."""
        return self._async

    @property
    def queue_acks(self) -> QueueAcks:
        """Queue-ack settings and pending batch (:mod:`ampsclient.acks`)."""
        return self._async.queue_acks

    @lane_method("_async_publish")
    def publish(
        self,
        topic: str,
        data: object,
        expiration: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> int:
        """Publish ``data`` to ``topic`` without waiting (any thread; see AsyncClient.publish).
        Returns 0 (an ``HAClient``: the sequence number), as the official client does.

        The call goes straight to the asyncio client's publish path (``_async_publish``, set
        in ``_start``: its C lane's publish when built; :func:`~ampsclient._accel.lane_method`):
        no Python frame of its own.
        """
        return self._async.publish(
            topic, data, expiration=expiration, correlation_id=correlation_id, sow_key=sow_key
        )

    @lane_method("_async_delta_publish")
    def delta_publish(self, topic: str, data: object, expiration: int | None = None) -> int:
        """Publish a delta of ``data`` to ``topic`` (forwarded like :meth:`publish`); returns
        0 (an ``HAClient``: the sequence number)."""
        return self._async.delta_publish(topic, data, expiration=expiration)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the client runs on."""
        return self._thread().loop

    def _thread(self) -> LoopThread:
        if self._lt is None:  # as the official client answers a closed client
            raise DisconnectedError("the client is closed")
        return self._lt

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            lt = self._thread()
        except DisconnectedError:
            coro.close()  # never started: no "coroutine was never awaited" warning
            raise
        return lt.run(coro)

    # ------------------------------------------------------- the official argument names
    def set_global_command_type_message_handler(
        self, command: str, message_handler: Handler
    ) -> None:
        """See every ``ack`` or ``heartbeat`` (official argument names)."""
        self._async.set_global_command_type_message_handler(command, message_handler)

    def set_heartbeat(self, interval_seconds: float, timeout_seconds: float | None = None) -> None:
        """Heartbeats every ``interval_seconds``; close after ``timeout_seconds`` of silence
        (default twice the interval). Official argument names."""
        self._async.set_heartbeat(interval_seconds, timeout_seconds)

    # ------------------------------------------------------------- disconnect handling
    def set_disconnect_handler(self, handler: Callable[..., Any] | None) -> None:
        """Called when the connection drops (not when the application closes it).

        ``handler(client)`` as the official ``DisconnectHandler`` is called, or
        ``handler(client, exc)`` when it has two positional parameters without defaults
        (decided here, once: :func:`~ampsclient.disconnects.takes_error`). It runs on a
        thread of its own, so it may reconnect with the blocking methods
        (``client.connect(uri); client.logon()``), as official handlers do on the receive
        thread; an exception it raises goes to the exception listener. With
        ``retry_on_disconnect`` (the default) a send that finds the connection dropped calls
        it again, on the sender's thread, and goes on if it reconnected.
        """
        self._drops.set_handler(handler)

    def set_retry_on_disconnect(self, enabled: bool) -> None:
        """Official ``retry_on_disconnect`` (default ``True``): a send (a publish or a
        command) that finds the connection dropped reports ``DISCONNECTED`` to the state
        listeners and calls the disconnect handler again, on the sender's thread; if that
        reconnected, the send goes on, else it raises ``DisconnectedException``. With
        ``False`` it raises at once. A connection the application closed is never retried.
        (An ``HAClient`` stores its publishes and re-places its subscriptions whatever this
        says, as the official one does.)
        """
        self._drops.retry_on_disconnect = bool(enabled)

    def get_retry_on_disconnect(self) -> bool:
        """See :meth:`set_retry_on_disconnect`."""
        return self._drops.retry_on_disconnect

    # ------------------------------------------------------------------------ connection
    def connect(
        self,
        uri: str,
        *,
        timeout: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """Connect to ``uri`` (``ssl_context``: TLS settings for ``tcps://``/``wss://``).

        A client that was closed connects again (its loop thread starts anew), as the
        official client allows after ``close()``."""
        if self._lt is None and type(self._async) is AsyncClient:
            self._lt = LoopThread(f"ampsclient-{self._async.name or 'client'}")
        self._run(self._async.connect(uri, timeout=timeout, ssl_context=ssl_context))
        self._drops.forget_drop()

    # --------------------------------------------------------------------------- commands
    def execute_async(self, command: Command, on_message: Handler | None = None) -> str:
        """Send ``command``; its messages go to ``on_message`` on the client's thread."""
        return self._run(self._async.execute_async(command, on_message))

    def flush(self, timeout: int = 0) -> None:
        """Wait until the server processed everything sent before (``timeout`` in ms).

        The official signature, for both clients (an ``AsyncHAClient``'s ``flush`` has no
        ``ack_type``; a persisted flush is ``publish_flush(timeout, ack_type)``)."""
        self._run(self._async.flush(timeout))

    # ---------------------------------------------------------------------------- closing
    def close(self) -> None:
        """Close the connection and stop the client's thread."""
        self._drops.forget_drop()  # closed by the application: sends do not retry
        lt = self._lt
        if lt is None:  # closed before: the listeners hear SHUTDOWN again (official)
            if isinstance(self._async, AsyncClient):
                self._async._wiring.emit_state(ConnectionState.SHUTDOWN, None)
            return
        try:
            if not lt.loop.is_closed():
                lt.run(self._async.close())
        finally:
            self._lt = None
            lt.stop()

    def disconnect(self) -> None:
        """Close the connection; the client may connect again (official API)."""
        self._drops.forget_drop()
        lt = self._lt
        if lt is not None and not lt.loop.is_closed():
            lt.run(self._async.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        lt = getattr(self, "_lt", None)
        if lt is not None:
            try:
                lt.loop.call_soon_threadsafe(lt.loop.stop)
            except RuntimeError:
                pass


class HAClientOptions(TypedDict, total=False):
    """The keyword options :class:`HAClient` passes on to
    :class:`~ampsclient.ha.client.AsyncHAClient` (described there)."""

    server_chooser: ServerChooser | None
    reconnect_delay_strategy: ReconnectDelayStrategy | None
    publish_while_disconnected: Literal["store", "block"]
    logon_timeout: int
    connect_timeout: float | None
    max_frame_size: int
    default_max_depth: int
    logon_options: str | None
    ssl_context: ssl.SSLContext | None


class HAClient(SyncHAClientFace, Client):
    """The synchronous HA client: reconnects, fails over, replays, resubscribes.

    Example::

        with HAClient("orders-publisher", publish_store="orders.store") as client:
            client.get_server_chooser().add("tcp://127.0.0.1:9007/amps/json")
            client.connect_and_logon()
            for order in orders:
                client.publish("orders", order)
            client.publish_flush(10_000)

    See :class:`~ampsclient.ha.client.AsyncHAClient` for the arguments. ``close()`` (and the
    ``with`` block) flush the publish store first, bounded by ``close_timeout`` ms.
    """

    _default_resubscription_timeout = 0
    """``set_default_resubscription_timeout``: the resubscription timeout of new HAClients."""

    __slots__ = ("_ha_discard",)  # the lane: read at its offset

    def __init__(
        self,
        name: str = "",
        publish_store: PublishStore | str | None = None,
        bookmark_store: BookmarkStore | str | None = None,
        no_store: bool = False,
        *,
        close_timeout: int = 5000,
        **options: Unpack[HAClientOptions],
    ) -> None:
        from .ha.client import AsyncHAClient

        if no_store:
            raise UsageError(
                "HAClient(no_store=True): ampsclient's HAClient always keeps its publishes "
                "until they are persisted (a memory store by default); for publishes without "
                "a store use Client"
            )
        self._ha = AsyncHAClient(name, publish_store, bookmark_store, **options)
        self._async = self._ha
        self._ha_discard: Callable[[Message], None] = self._ha.discard
        """:meth:`discard`'s lane: the asyncio client's (which calls the store's C lane)."""
        self._close_timeout = close_timeout
        self._drops = DropHandling(self, self._ha)  # its handler only: the HA client reconnects
        if HAClient._default_resubscription_timeout:
            self._ha.set_resubscription_timeout(HAClient._default_resubscription_timeout)
        self._start()

    # -- official settings ------------------------------------------------------------------

    def set_disconnect_handler(self, handler: Callable[..., Any] | None) -> None:
        """Called when the connection drops, in addition to the HA client's own reconnect
        (``handler(client)`` or ``handler(client, exc)``, as :meth:`Client.set_disconnect_handler`
        decides; on a thread of its own)."""
        if handler is None:
            self._ha.set_disconnect_handler(None)
            return
        user = (handler, takes_error(handler))

        def on_drop(_client: object, exc: BaseException | None) -> None:
            name = f"ampsclient-disconnect-{self._ha.name or 'client'}"
            threading.Thread(
                target=self._drops.run_handler, args=(user, exc), name=name, daemon=True
            ).start()

        self._ha.set_disconnect_handler(on_drop)

    def set_publish_store(self, publish_store: Any) -> None:
        """Use ``publish_store`` (a store object, or ``None`` for a memory store); before
        connecting."""
        self._ha.set_publish_store(publish_store)
        self._async_publish = self._ha.publish_path()  # the new store's lane

    def set_logon_options(self, options: str | None) -> None:
        """Options sent with every logon (e.g. ``"ack_conflation=10ms"``)."""
        self._ha.logon_options = options

    def get_logon_options(self) -> str:
        """The logon options (``""`` when none)."""
        return self._ha.logon_options or ""

    def set_timeout(self, timeout: int) -> None:
        """How long each logon waits for its ack, in ms (default 10000)."""
        self._ha.set_logon_timeout(timeout)

    @staticmethod
    def set_default_resubscription_timeout(timeout: int) -> None:
        """The resubscription timeout (ms) of the HAClients created from now on."""
        if timeout < 0:
            raise UsageError("the resubscription timeout cannot be negative")
        HAClient._default_resubscription_timeout = int(timeout)

    @staticmethod
    def get_default_resubscription_timeout() -> int:
        """The default resubscription timeout in ms."""
        return HAClient._default_resubscription_timeout

    def set_error_on_publish_gap(self, error_on_publish_gap: bool) -> None:
        """Raise ``PublishStoreGapException`` when the server misses stored messages."""
        self._ha.publish_store.set_error_on_publish_gap(bool(error_on_publish_gap))

    def get_error_on_publish_gap(self) -> bool:
        """Whether a publish gap raises."""
        return bool(self._ha.publish_store.get_error_on_publish_gap())

    def prune_store(self, tmp_file_name: str = "") -> None:
        """Compact the bookmark store (for stores that can; others have nothing to prune)."""
        prune = getattr(self._ha.bookmark_store, "prune", None)
        if prune is None:
            return
        if tmp_file_name:
            prune(tmp_file_name)
        else:
            prune()

    def set_publish_batching(self, batchSize: int, batchTimeoutMillis: int) -> None:
        """See ``Client.set_publish_batching``."""
        super().set_publish_batching(batchSize, batchTimeoutMillis)

    @property
    def async_client(self) -> AsyncHAClient:
        """The :class:`AsyncHAClient` this facade drives."""
        return self._ha

    @lane_method("_async_publish")
    def publish(
        self,
        topic: str,
        data: object,
        expiration: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> int:
        """Store and publish; returns the message's sequence number (as the official
        HAClient). Forwarded straight to the HA client's method (its C lane's common case
        first), as in :meth:`Client.publish`."""
        return self._ha.publish(
            topic, data, expiration, correlation_id=correlation_id, sow_key=sow_key
        )

    @lane_method("_async_delta_publish")
    def delta_publish(self, topic: str, data: object, expiration: int | None = None) -> int:
        """Store and delta-publish; returns the sequence number (forwarded like
        :meth:`publish`)."""
        return self._ha.delta_publish(topic, data, expiration)

    @lane_method("_ha_discard")
    def discard(self, message: Message) -> None:
        """Mark a bookmark-subscription message as processed (any thread; forwarded like
        :meth:`publish`, so the store's C lane runs with no Python frame in between)."""
        self._ha.discard(message)

    def connect(
        self,
        uri: str | None = None,
        *,
        timeout: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """Without a URI (the official HAClient form): :meth:`connect_and_logon` through the
        server chooser. With one: connect to it (then :meth:`logon`)."""
        if uri is None:
            self.connect_and_logon()
            return
        super().connect(uri, timeout=timeout, ssl_context=ssl_context)

    def logon(
        self,
        timeout: int = 0,
        authenticator: Authenticator | None = None,
        options: str | None = None,
    ) -> str:
        """Log on; nothing to do once :meth:`connect_and_logon` logged on (official HAClient)."""
        if self._ha.logged_on:
            return ""
        return super().logon(timeout, authenticator, options)

    def publish_flush(self, timeout: int = 0, ack_type: Any = AckType.PROCESSED) -> None:
        """Wait until everything published so far is persisted (``timeout`` in ms).

        ``ack_type`` is accepted for the official signature: with a publish store the wait
        is always for the ``persisted`` acks of the stored messages, as in the official client.
        """
        self._run(self._ha.publish_flush(timeout))

    def publish_future(
        self,
        topic: str,
        data: object,
        expiration: int | None = None,
        *,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> concurrent.futures.Future[int]:
        """Publish; the returned future resolves (any thread) on the persisted ack."""
        outer: concurrent.futures.Future[int] = concurrent.futures.Future()

        async def track() -> None:
            try:
                future = self._ha.publish_future(
                    topic, data, expiration, correlation_id=correlation_id, sow_key=sow_key
                )
                outer.set_result(await future)
            except BaseException as exc:
                outer.set_exception(exc)

        asyncio.run_coroutine_threadsafe(track(), self.loop)
        return outer

    def close(self, timeout: int | None = None) -> int:  # type: ignore[override]
        """Safe shutdown: flush (bounded by ``timeout`` ms, default ``close_timeout``), close.

        Returns:
            How many messages were left unpersisted.
        """
        lt = self._lt
        if lt is None:
            return self._ha.unpersisted_count
        wait = self._close_timeout if timeout is None else timeout
        try:
            if not lt.loop.is_closed():
                return lt.run(self._ha.close(wait))
            return self._ha.unpersisted_count
        finally:
            self._lt = None
            lt.stop()

    def disconnect(self) -> None:
        """Close the connection (after flushing); the client may connect again."""
        lt = self._lt
        if lt is not None and not lt.loop.is_closed():
            lt.run(self._ha.close(self._close_timeout))

    def __exit__(self, *exc: object) -> None:
        self.close()
