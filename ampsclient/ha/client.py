"""AsyncHAClient: a client that reconnects, fails over, replays and resubscribes.

Composition of small parts (``shared/style.md`` rule 11): the connection is an
:class:`~ampsclient.client.AsyncClient` it holds (not a base class: its public API is
forwarded by :class:`~ampsclient.ha.face.ConnectionFace`, and what this client drives on it,
the publish gate, the persisted acks, resubscriptions, is its :class:`~ampsclient.wiring.Wiring`,
which is not on the client's public face); next to it sit a
:class:`ServerChooser`, a :class:`ReconnectDelayStrategy`, a publish store and a
:class:`SubscriptionManager`.

The reconnect sequence after every logon, decided by the sans-I/O
:class:`~ampsclient.core.ha_sequence.HASequence` (this client performs its steps' I/O and
waits for the acks):

1. discard from the publish store what the logon ack's ``s`` covers;
2. replay every unpersisted message in sequence order (their original ``s``; the server
   de-duplicates by client name and sequence);
3. re-place every subscription, one at a time, each waiting for its processed ack;
4. replay what was stored during steps 2-3, then let new publishes go straight out.

While disconnected, ``publish()`` stores and returns (or blocks, with
``publish_while_disconnected="block"``); the message goes out after the reconnect.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
import ssl
import threading
import types
from collections.abc import Callable
from typing import Any, Literal

from .. import _accel
from ..acks import persisted_ack_writer
from ..authenticator import Authenticator
from ..client import AsyncClient, ConnectionState, Handler
from ..command import Command
from ..core.connection import SUBSCRIBE_COMMANDS, Pending
from ..core.event_types import PublishPersisted, SubscriptionPersisted
from ..core.ha_sequence import HASequence, PublishesReplayed, SequenceOpened, StoreDiscarded
from ..core.publish import publish_header
from ..exceptions import (
    AMPSError,
    DisconnectedError,
    ForeignSequenceError,
    TimeoutError,
    UsageError,
)
from ..observer import ClientObserver
from ..protocol.bookmarks import MOST_RECENT
from ..protocol.framing import DEFAULT_MAX_FRAME_SIZE
from ..protocol.header import unencodable
from ..protocol.message import Message
from ..stores.bookmark import BookmarkStore, MemoryBookmarkStore
from ..stores.publish import MemoryPublishStore, PublishStore
from ..stores.publish.official import ClientOwned, PublishStore as NamedFilePublishStore
from ..stream import MessageStream
from ..uri import redact
from .bookmarks import fast_discard, mark_live, resume_point
from .chooser import DefaultServerChooser, ServerChooser
from .face import ConnectionFace
from .persist_waiters import (
    FailedWriteHandler,
    PersistedAcks,
    PersistWaiters,
)
from .reconnect import ExponentialDelayStrategy, ReconnectDelayStrategy, RetryLimitError
from .store_forward import STORED_P_HEAD, StoreAndForward
from .subscriptions import SubscriptionManager, prepare_bookmark_subscription

__all__ = ["AsyncHAClient", "FailedWriteHandler"]

log = logging.getLogger("ampsclient.ha")


class AsyncHAClient(ConnectionFace):
    """A highly available client: reconnects, fails over, never loses a stored publish.

    Args:
        name: the client name (must be stable across restarts for de-duplication).
        publish_store: a :class:`PublishStore`, or a path string for a
            :class:`~ampsclient.stores.PublishStore` (official form: a store directory of
            that name, background fsync); default: a memory store.
        bookmark_store: a :class:`BookmarkStore` for resumable bookmark subscriptions
            (duplicate detection, ``MOST_RECENT``, resubscription from the recovery point), or a
            path string for a :class:`~ampsclient.stores.MMapBookmarkStore` of that file (the
            official form); default: a :class:`MemoryBookmarkStore`.
        server_chooser: where to connect (default: an empty :class:`DefaultServerChooser`).
        reconnect_delay_strategy: how long to wait between attempts (default:
            :class:`ExponentialDelayStrategy` with the official defaults).
        publish_while_disconnected: ``"store"`` (return at once; sent after reconnect) or
            ``"block"`` (wait until connected).
        logon_timeout: ms to wait for each logon ack (0 = no limit).
        connect_timeout: seconds to wait for each TCP/WebSocket connection.
        ssl_context: TLS settings for ``tcps://``/``wss://`` servers (see :mod:`ampsclient.tls`;
            default: verify against the system's CAs).
    """

    __slots__ = ("_discard", "_publish_lane")  # the lanes: read at their offsets

    def __init__(
        self,
        name: str = "",
        publish_store: PublishStore | str | None = None,
        bookmark_store: BookmarkStore | str | None = None,
        *,
        server_chooser: ServerChooser | None = None,
        reconnect_delay_strategy: ReconnectDelayStrategy | None = None,
        publish_while_disconnected: Literal["store", "block"] = "store",
        logon_timeout: int = 10_000,
        connect_timeout: float | None = 10.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        default_max_depth: int = 0,
        logon_options: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        client = AsyncClient(
            name,
            max_frame_size=max_frame_size,
            default_max_depth=default_max_depth,
            logon_options=logon_options,
            ssl_context=ssl_context,
        )
        self._client = client
        """The connection this client holds (:attr:`client`)."""
        self._wiring = wiring = client._wiring
        """The held client's plumbing (:mod:`ampsclient.wiring`): this client drives it."""
        self._writer = writer = wiring.writer
        """The held client's writer: its publish gate, lock and queue are this client's."""
        writer.set_caller_writes(False)  # costs more than it gains here (docs/design.md)
        self._core = client.core
        self._owned: list[PublishStore | BookmarkStore] = []
        """Stores this client made from path strings: it closes them in :meth:`close`."""
        self._block_when_disconnected = publish_while_disconnected == "block"
        self._publishing = StoreAndForward(
            self._own_publish_store(publish_store),
            writer,
            block=self._wait_connected if self._block_when_disconnected else None,
        )
        """The publish store, gate, lock and stored tails (:mod:`ampsclient.ha.store_forward`):
        that object alone writes them."""
        self._bookmark_store: BookmarkStore = self._own_bookmark_store(bookmark_store)
        self._discard_relay = _accel.Relay(fast_discard(self._bookmark_store))
        """Its ``target`` is the bookmark store's discard (its C lane's when built); this
        client alone changes it (:meth:`set_bookmark_store`)."""
        self._discard: Callable[[Message], None] = self._discard_relay.call
        """:meth:`discard`'s lane: the relay's ``call``, so that one held (``client.discard``
        is this very function with the C speedups) follows a new bookmark store."""
        self._duplicate_handler: Handler | None = None
        wiring.set_event_handler(SubscriptionPersisted, lambda e: self._sub_persisted(e.ack))
        self._chooser: ServerChooser = server_chooser or DefaultServerChooser()
        self._strategy: ReconnectDelayStrategy = (
            reconnect_delay_strategy or ExponentialDelayStrategy()
        )
        self._logon_timeout = logon_timeout
        self._connect_timeout = connect_timeout
        self._subscriptions = SubscriptionManager()
        self._seq = HASequence(
            core=self._core,
            store=self._publishing.store,
            subscriptions=self._subscriptions,
            resume=self._resume,
        )
        """The reconnect sequence (sans-I/O): this client performs its steps."""
        self._closing = False
        self._reconnect_task: asyncio.Task[None] | None = None
        self._in_connect_loop = False
        self._failed_resubscribe: Callable[[Command, int, BaseException], bool] | None = None
        self._give_up_error: BaseException | None = None
        self._waiters = PersistWaiters()
        self._core.keep_routes_on_disconnect = True
        self._acks = PersistedAcks(
            self._publishing.store,
            self._waiters,
            report=wiring.report,
            unrouted=self._core.unrouted,
        )
        apply_ack = self._acks.apply  # bound once: one call per persisted ack, as before
        wiring.set_event_handler(PublishPersisted, lambda e: apply_ack(e.ack))
        self._user_disconnect_handler: (
            Callable[[AsyncHAClient, BaseException | None], Any] | None
        ) = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_tid: int | None = None
        client.set_disconnect_handler(self._disconnected)
        client.queue_acks.set_writer(  # queue acks: stored, persisted, replayed with options
            persisted_ack_writer(
                self._publishing.store_parts,
                self._publishing.lock,
                self._publishing.queue_frame_now,
            )
        )
        self._lane: Any = None
        self._publish_lane: Callable[..., int] | None = None
        """What takes :meth:`publish` calls first (:func:`ampsclient._accel.lane_method`): the
        C ``PublishLane``'s ``publish``, or ``None``: the Python body."""
        self._bind_publish_lane()

    @property
    def client(self) -> AsyncClient:
        """The connection this client holds (an :class:`AsyncClient`)."""
        return self._client

    def _own_publish_store(self, store: PublishStore | str | None) -> PublishStore:
        """The publish store given, one made from a path (owned), or a memory store."""
        if isinstance(store, str):
            store = NamedFilePublishStore(store)  # official durability
            self._owned.append(store)
        elif isinstance(store, ClientOwned):  # an official form: it has no close() of its own
            store.reopen()
            self._owned.append(store)
        return store or MemoryPublishStore()

    def _own_bookmark_store(self, store: BookmarkStore | str | None) -> BookmarkStore:
        """The bookmark store given, one made from a path (owned), or a memory store."""
        if isinstance(store, str):
            from ..stores.bookmark.file import MMapBookmarkStore

            store = MMapBookmarkStore(store)  # the official path form
            self._owned.append(store)
        return store if store is not None else MemoryBookmarkStore()

    def _bind_publish_lane(self) -> None:
        """Let the C speedups' ``PublishLane`` take :meth:`publish` when they are built.

        The lane does the common case (a plain publish while connected, nothing else holding
        the locks) and calls this class's :meth:`publish` for everything else. Not for
        subclasses that override ``publish``, nor for stores the lane does not know.
        """
        if type(self).publish is not AsyncHAClient.publish:
            return
        if self._writer.observer is not None:
            return  # observed publishes take the Python path (set_observer)
        slow = types.MethodType(inspect.unwrap(AsyncHAClient.publish), self)
        # built on the publish state's StoreForwardFields and the writer's (values in)
        self._lane = self._publishing.publish_lane(slow)
        if self._lane is not None:
            self._publish_lane = self._lane.publish

    def publish_path(self) -> Callable[..., int]:
        """What a facade may hold to publish through this client with no dispatch of its own:
        the C ``PublishLane``'s ``publish``, else :meth:`publish` bound. A lane replaced
        (``set_publish_store``) or switched off (``set_observer``) calls this client's Python
        path, so a held one stays correct; take it again after ``set_publish_store`` for
        the new store's lane."""
        return self._publish_lane or self.publish

    def set_observer(self, observer: ClientObserver | None) -> None:
        """Opt-in instrumentation (:mod:`ampsclient.observer`): also switches this client's C
        publish lane off for good, so that every publish asks the observer."""
        if observer is not None and self._lane is not None:
            self._lane.disable()
        self._client.set_observer(observer)

    # ------------------------------------------------------------------ configuration (official)

    def set_server_chooser(self, chooser: ServerChooser) -> None:
        """Use ``chooser`` to pick servers."""
        self._chooser = chooser

    def get_server_chooser(self) -> ServerChooser:
        """The server chooser."""
        return self._chooser

    def set_reconnect_delay_strategy(self, strategy: ReconnectDelayStrategy) -> None:
        """Use ``strategy`` between connection attempts."""
        self._strategy = strategy

    def get_reconnect_delay_strategy(self) -> ReconnectDelayStrategy:
        """The reconnect delay strategy."""
        return self._strategy

    def set_reconnect_delay(self, milliseconds: int) -> None:
        """A fixed reconnect delay (official shortcut)."""
        from .reconnect import FixedDelayStrategy

        self._strategy = FixedDelayStrategy(milliseconds)

    def set_failed_write_handler(self, handler: FailedWriteHandler | None) -> None:
        """Called with ``(message, reason)`` when the server refuses a stored publish."""
        self._acks.failed_write = handler

    def set_failed_resubscribe_handler(
        self, handler: Callable[[Command, int, BaseException], bool] | None
    ) -> None:
        """Called when re-placing a subscription fails: return ``True`` to drop it,
        ``False`` to reconnect and try again."""
        self._failed_resubscribe = handler

    def set_resubscription_timeout(self, milliseconds: int) -> None:
        """How long each re-placed subscription may wait for its ack (0 = no limit)."""
        self._seq.resubscription_timeout = int(milliseconds)

    def get_resubscription_timeout(self) -> int:
        """The resubscription timeout in ms."""
        return self._seq.resubscription_timeout

    @property
    def publish_store(self) -> PublishStore:
        """The publish store."""
        return self._publishing.store

    @property
    def bookmark_store(self) -> BookmarkStore:
        """The bookmark store."""
        return self._bookmark_store

    def set_publish_store(self, store: PublishStore | None) -> None:
        """Use ``store`` for publishes (official API): before connecting, while the current
        store holds nothing unpersisted. ``None``: a new memory store."""
        if self._client.connected:
            raise UsageError("set_publish_store: call it before connecting")
        if self._publishing.store.unpersisted_count:
            raise UsageError("set_publish_store: the current store holds unpersisted messages")
        self._publishing.set_store(self._own_publish_store(store))
        self._seq.store = self._acks.store = self._publishing.store
        if self._lane is not None:  # a facade may hold it (publish_path): it now calls
            self._lane.disable()  # this client's Python path, which uses the new store
        self._lane = self._publish_lane = None
        self._bind_publish_lane()

    def set_logon_timeout(self, milliseconds: int) -> None:
        """How long each logon waits for its ack (official ``set_timeout``; 0 = no limit)."""
        if milliseconds < 0:
            raise UsageError("the logon timeout cannot be negative")
        self._logon_timeout = int(milliseconds)

    def get_logon_timeout(self) -> int:
        """The logon timeout in milliseconds."""
        return self._logon_timeout

    def set_bookmark_store(self, store: BookmarkStore) -> None:
        """Use ``store`` for bookmark subscriptions placed from now on."""
        self._bookmark_store = store
        self._discard_relay.target = fast_discard(store)  # a held discard follows

    def set_duplicate_message_handler(self, handler: Handler | None) -> None:
        """Receives redelivered messages the bookmark store recognised as duplicates."""
        self._duplicate_handler = handler

    def set_disconnect_handler(
        self, handler: Callable[[AsyncHAClient, BaseException | None], Any] | None
    ) -> None:
        """Also called (after this client started reconnecting) when the connection drops."""
        self._user_disconnect_handler = handler

    def get_duplicate_message_handler(self) -> Handler | None:
        """The duplicate message handler."""
        return self._duplicate_handler

    @_accel.lane_method("_discard")
    def discard(self, message: Message) -> None:
        """Mark a bookmark-subscription message as processed: the resume point moves past it.

        The bookmark store's discard (its C lane's when built) is called through ``_discard``
        (a relay that follows :meth:`set_bookmark_store`): no Python frame of this method's
        own per message. With the C speedups ``client.discard`` is that relay's C function
        itself, so a handler that holds it pays no dispatch per message."""
        self._discard_relay.target(message)

    def get_most_recent(self, sub_id: str) -> str:
        """Where subscription ``sub_id`` would resume (the bookmark store's recovery point)."""
        return self._bookmark_store.get_most_recent(sub_id)

    def _resolve_bookmark(self, bookmark: str | None, sub_id: str | None) -> str | None:
        if bookmark == MOST_RECENT:
            return self._bookmark_store.get_most_recent(sub_id) if sub_id else "0"
        return bookmark

    def _sub_persisted(self, ack: Message) -> None:
        sub_id = ack.get("sub_id")
        bookmark = ack.bookmark
        if sub_id and bookmark:
            self._bookmark_store.persisted(str(sub_id), bookmark)

    @property
    def unpersisted_count(self) -> int:
        """Publishes stored and not yet acknowledged as persisted."""
        return self._publishing.store.unpersisted_count

    def get_unpersisted_count(self) -> int:
        """Official spelling of :attr:`unpersisted_count`."""
        return self._publishing.store.unpersisted_count

    # ---------------------------------------------------------------------------- connecting

    async def connect_and_logon(
        self,
        uri: str | None = None,
        *,
        timeout: int = 0,
        authenticator: Authenticator | None = None,
    ) -> str:
        """Connect to the chooser's current server (trying the others on failure) and log on.

        A ``uri`` argument is added to the chooser first (a convenience beyond the official
        API). ``timeout`` (ms, 0 = none) bounds the whole call, every attempt and every wait
        between them: past it, :class:`TimeoutError`. Raises :class:`RetryLimitError` when the
        delay strategy gives up.
        """
        if uri is not None:
            if isinstance(self._chooser, DefaultServerChooser):
                self._chooser.add(uri, authenticator)
            else:
                raise UsageError("pass URIs to your server chooser")
        self._closing = False
        self._give_up_error = None
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop_tid = threading.get_ident()
        if timeout:  # the bound of the whole loop: every attempt, every wait between them
            try:
                return await asyncio.wait_for(self._connect_loop(), timeout / 1000.0)
            except builtins.TimeoutError:
                raise TimeoutError(f"no server logged on within {timeout} ms") from None
        return await self._connect_loop()

    async def _connect_loop(self) -> str:
        self._in_connect_loop = True
        try:
            while True:
                if self._closing:
                    raise DisconnectedError("the client is closing")
                uri = self._chooser.get_current_uri()
                if uri is None:
                    raise UsageError("no server to connect to: add a URI to the server chooser")
                try:
                    wait_ms = self._strategy.get_connect_wait_duration(uri)
                except RetryLimitError as exc:
                    self._give_up(exc)
                    raise
                if wait_ms:
                    await asyncio.sleep(wait_ms / 1000.0)
                try:
                    await self._client.connect(uri, timeout=self._connect_timeout)
                    cid = await self._client.logon(
                        self._logon_timeout, self._chooser.get_current_authenticator()
                    )
                    await self._after_logon()
                except AMPSError as exc:
                    if isinstance(exc, UsageError):
                        raise
                    if isinstance(exc, ForeignSequenceError):  # retrying cannot help
                        log.error("logon to %s: %s", redact(uri), exc)
                        self._wiring.abort(exc)
                        self._seq.connection_lost()
                        raise
                    log.info("connection to %s failed: %s", redact(uri), exc)
                    self._wiring.abort(exc)  # a half-made connection; subscriptions stay
                    self._seq.connection_lost()
                    self._chooser.report_failure(exc)
                    continue
                self._chooser.report_success()
                self._strategy.reset()
                return cid
        finally:
            self._in_connect_loop = False

    async def _after_logon(self) -> None:
        """Run the reconnect sequence (:mod:`ampsclient.core.ha_sequence`): this performs its
        steps' I/O and waits; the sequence decides what goes out, in which order."""
        ack = self._client.logon_ack
        seq = self._seq
        with self._publishing.lock:  # discard what the logon ack's s covers, replay the rest
            seq.logged_on(ack.sequence if ack is not None else None)
        self._sequence_events()
        while (step := seq.next_resubscribe()) is not None:
            sub = step.subscription
            try:
                await self._wiring.send_command(step.command, sub.handler, sub.stream)
            except DisconnectedError:
                seq.connection_lost()
                raise
            except AMPSError as exc:
                drop = True
                if self._failed_resubscribe is not None:
                    drop = bool(
                        self._failed_resubscribe(step.command, int(step.command.ack_types), exc)
                    )
                log.warning("could not re-place subscription %s: %s", sub.sub_id, exc)
                seq.resubscribe_failed(sub.sub_id, exc, drop=drop)
                if not drop:
                    raise
                if sub.stream is not None:
                    sub.stream.finish(exc)
            else:
                seq.resubscribed(sub.sub_id)
        with self._publishing.lock:  # what was stored meanwhile, then the gate opens
            seq.open()
            self._publishing.open_gate()
        self._sequence_events()

    def _sequence_events(self) -> None:
        """Act on what the reconnect sequence reported."""
        for event in self._seq.events_received():
            if isinstance(event, StoreDiscarded):
                self._waiters.persisted_up_to(event.up_to)
            elif isinstance(event, PublishesReplayed):
                if event.count:
                    log.info("replayed %d unpersisted message(s) to %s", event.count, self.uri)
                self._wiring.emit_state(ConnectionState.PUBLISH_REPLAYED, None)
            elif isinstance(event, SequenceOpened):
                if event.count:
                    log.info("replayed %d message(s) stored while resubscribing", event.count)
                self._wiring.emit_state(ConnectionState.RESUBSCRIBED, None)

    def _resume(self, sub_id: str, start: str) -> str:
        """A bookmark subscription resumes from its recovery point (see :func:`resume_point`)."""
        return resume_point(self._bookmark_store, sub_id, start)

    def _disconnected(self, client: AsyncClient, error: BaseException | None) -> None:
        with self._publishing.lock:
            self._publishing.close_gate()
            self._seq.connection_lost()
        if self._closing or self._in_connect_loop:
            return
        if error is not None:
            self._chooser.report_failure(error)
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = asyncio.ensure_future(self._reconnect())
        handler = self._user_disconnect_handler
        if handler is not None:
            try:
                handler(self, error)
            except Exception as exc:
                self._wiring.report(exc)

    async def _reconnect(self) -> None:
        try:
            await self._connect_loop()
        except RetryLimitError:
            pass  # _connect_loop gave up (see _give_up)
        except AMPSError as exc:
            if not self._closing:
                log.error("reconnect failed: %s", exc)
                self._give_up(exc)

    def _give_up(self, error: BaseException) -> None:
        """The delay strategy gave up: nothing waits forever. Flushes fail, blocked publishers
        are released, subscription streams end with ``error``, and the exception listener
        hears of it (a reconnect in the background has no caller to raise to)."""
        self._give_up_error = error
        log.error("giving up reconnecting: %s", error)
        for sub in self._subscriptions:
            if sub.stream is not None:
                sub.stream.finish(error)
        listener = self._client.get_exception_listener()
        if listener is not None:
            try:
                listener(error)
            except Exception:
                log.exception("exception listener failed")
        self._waiters.fail_flushes(error)
        self._publishing.release_waiters()  # blocked publishers see the error

    # ---------------------------------------------------------------------------- publishing

    @_accel.lane_method("_publish_lane")
    def publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> int:
        """Store and publish; returns the message's sequence number. Thread-safe.

        Connected: the message goes out at once. Disconnected: it is stored and sent after
        the reconnect (or, with ``publish_while_disconnected="block"``, this waits). With the
        C speedups their ``PublishLane`` takes the common case first (``_publish_lane``) and
        calls the body below for everything else.
        """
        observer = self._writer.observer
        if observer is not None:  # opt-in tracing (ampsclient.observer)
            correlation_id = observer.publishing(topic, correlation_id)
        if type(data) is str:
            try:
                data = data.encode()
            except UnicodeEncodeError as exc:  # LocalProtocolError: nothing is stored
                raise unencodable("the data", exc) from exc
        elif type(data) is not bytes:
            data = self._client.encode_data(data)
        publishing = self._publishing
        if expiration is None and correlation_id is None and sow_key is None:
            suffix = publishing.fields.suffixes.get(topic)
            tail = (suffix if suffix is not None else publishing.suffix(topic)) + data
            return publishing.store_and_send(STORED_P_HEAD, tail)
        head, tail = publish_header(
            "p",
            topic,
            sequenced=True,
            ack_type="persisted",
            expiration=expiration,
            correlation_id=correlation_id,
            sow_key=sow_key,
        )
        return publishing.store_and_send(head, tail + data)

    def delta_publish(
        self,
        topic: str,
        data: str | bytes | Any,
        expiration: int | None = None,
        *,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> int:
        """Store and delta-publish; returns the sequence number."""
        observer = self._writer.observer
        if observer is not None:  # opt-in tracing, as in publish
            correlation_id = observer.publishing(topic, correlation_id)
        head, tail = publish_header(
            "delta_publish",
            topic,
            sequenced=True,
            ack_type="persisted",
            expiration=expiration,
            correlation_id=correlation_id,
            sow_key=sow_key,
        )
        return self._publishing.store_and_send(head, tail + self._client.encode_data(data))

    def _wait_connected(self) -> None:
        if threading.get_ident() == self._loop_tid:
            raise UsageError("publish would block the client's own event loop while disconnected")
        while not self._publishing.wait_open(0.5):
            if self._closing:
                raise DisconnectedError("the client is closed")
        if self._give_up_error is not None and not self._publishing.gate_open:
            raise DisconnectedError("reconnecting gave up") from self._give_up_error

    async def publish_and_wait(
        self,
        topic: str,
        data: object,
        expiration: int | None = None,
        *,
        correlation_id: str | None = None,
        sow_key: str | None = None,
        timeout: int = 0,
    ) -> int:
        """Publish and wait for the server's persisted ack of this very message.

        Returns:
            The sequence number.

        Raises:
            PublishError: the server refused the message (the failed-write reason).
            TimeoutError: no ack within ``timeout`` ms.
        """
        future = self.publish_future(
            topic, data, expiration, correlation_id=correlation_id, sow_key=sow_key
        )
        if timeout:
            try:
                return await asyncio.wait_for(future, timeout / 1000.0)
            except builtins.TimeoutError:
                raise TimeoutError("timed out waiting for the persisted ack") from None
        return await future

    def publish_future(
        self,
        topic: str,
        data: object,
        expiration: int | None = None,
        *,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> asyncio.Future[int]:
        """Publish; the returned future (on the client's loop) resolves on the persisted ack."""
        loop = self._loop
        if loop is None:
            raise DisconnectedError("not connected")
        future: asyncio.Future[int] = loop.create_future()
        with self._publishing.lock:
            # the future is queued before the message can be acked
            seq = self._publishing.store.next_sequence()
            self._waiters.add_publish(seq, future)
        got = self.publish(topic, data, expiration, correlation_id=correlation_id, sow_key=sow_key)
        if got != seq:  # pragma: no cover - another thread published in between
            raise UsageError("publish_future needs a single publishing thread")
        return future

    async def publish_flush(self, timeout: int = 0) -> None:
        """Wait until every message stored before this call is persisted (across reconnects).

        Raises:
            TimeoutError: "Timed out waiting to flush publish store." after ``timeout`` ms.
        """
        store = self._publishing.store
        target = store.next_sequence() - 1
        lowest = store.lowest_unpersisted
        if lowest is None or lowest > target:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.add_flush(target, fut)
        deadline = loop.time() + timeout / 1000.0  # one bound for the flush and the wait
        if self.logged_on:
            try:
                await self._client.flush(timeout)
            except (DisconnectedError, TimeoutError):
                pass
        self._waiters.check_flushes(store.lowest_unpersisted)
        try:
            if timeout:
                left = deadline - loop.time()
                if left <= 0 and not fut.done():
                    raise builtins.TimeoutError
                await asyncio.wait_for(asyncio.shield(fut), max(left, 0.0))
            else:
                await fut
        except builtins.TimeoutError:
            raise TimeoutError("Timed out waiting to flush publish store.") from None
        finally:
            self._waiters.remove_flush(fut)

    # ------------------------------------------------------------------------ subscriptions

    async def execute_async(self, command: Command, handler: Handler | None = None) -> str:
        """Send ``command``; messages and requested acks go to ``handler``. Subscriptions
        are re-placed after every reconnect (bookmark ones from their resume point)."""
        pending = await self._place(command, handler, None)
        return pending.sub_id or pending.cid if pending is not None else ""

    async def execute(self, command: Command) -> MessageStream:
        """Send ``command`` and return a stream of what comes back; a subscription's stream
        survives failovers."""
        stream = self._wiring.new_stream(self._close_stream)
        await self._place(command, stream.put, stream)
        return stream

    async def _place(
        self, command: Command, handler: Handler | None, stream: MessageStream | None
    ) -> Pending | None:
        bookmark = command.name in SUBSCRIBE_COMMANDS and command.fields.get("bm") is not None
        if bookmark and handler is not None and not getattr(handler, "bookmark_logged", False):
            handler = prepare_bookmark_subscription(
                self._bookmark_store, command, handler, lambda: self._duplicate_handler
            )
        pending = await self._wiring.send_command(command, handler, stream)
        if (
            pending is not None
            and pending.sub_id is not None
            and command.name in SUBSCRIBE_COMMANDS
            and handler is not None
        ):
            self._subscriptions.placed(pending.sub_id, command, handler, stream)
            if bookmark:  # an assigned sub id is known only now
                mark_live(self._bookmark_store, pending.sub_id, command.fields.get("o"))
        return pending

    async def unsubscribe(self, sub_id: str = "all") -> None:
        """Cancel a subscription (or ``"all"``); it is not re-placed after a reconnect."""
        self._subscriptions.remove(sub_id)
        if not self._client.connected:
            routes = self._core.routes
            self._core.forget_routes(list(routes) if sub_id == "all" else sub_id.split(","))
            self._wiring.process_events()  # their streams end
            return
        await self._client.unsubscribe(sub_id)

    def _close_stream(self, stream: MessageStream) -> None:
        if stream.sub_id is not None:
            self._subscriptions.remove(stream.sub_id)
        self._wiring.close_stream(stream)

    # ------------------------------------------------------------------------------- closing

    async def close(self, timeout: int = 5000) -> int:
        """Safe shutdown: flush the publish store (bounded by ``timeout`` ms), then close.

        Stores given as path strings (the official form) were made by this client, which
        closes them here, and so are the official ``PublishStore`` and ``HybridPublishStore``
        objects (they have no ``close()`` in the official API; given to a client again, they
        reopen); other stores passed as objects stay open (their owner closes them).

        Returns:
            How many messages were left unpersisted (logged as a warning when not 0); a file
            store keeps them for the next run.
        """
        self._closing = True
        self._seq.closed()
        task = self._reconnect_task
        if task is not None and not task.done():
            task.cancel()
        left = self._publishing.store.unpersisted_count
        if left and self.logged_on and timeout >= 0:
            try:
                await self.publish_flush(timeout)
            except (TimeoutError, DisconnectedError) as exc:
                log.debug("flush on close: %s", exc)
            left = self._publishing.store.unpersisted_count
        if left:
            log.warning(
                "closing %s with %d unpersisted message(s) (lowest s=%s)",
                self.name,
                left,
                self._publishing.store.lowest_unpersisted,
            )
        await self._client.close()
        for stream in [s.stream for s in self._subscriptions if s.stream is not None]:
            stream.finish(None)
        self._subscriptions.clear()
        self._publishing.release_waiters()
        for store in self._owned:  # made from a path: nobody else can close it
            try:
                store.close()
            except AMPSError as exc:
                log.warning("closing a store of %s: %s", self.name, exc)
        self._owned.clear()
        return left

    disconnect = close

    async def __aenter__(self) -> AsyncHAClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
