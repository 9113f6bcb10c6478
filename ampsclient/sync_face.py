# Generated from ampsclient/client.py and ampsclient/ha/client.py by tools/unasync.py: do not
# edit by hand.
"""The synchronous twins of the asyncio clients' public methods.

:class:`SyncClientFace` mirrors :class:`~ampsclient.client.AsyncClient`'s public face and
:class:`SyncHAClientFace` what :class:`~ampsclient.ha.client.AsyncHAClient` adds or changes:
the same names, arguments, return types and docstrings, generated from the asyncio classes'
source by ``tools/unasync.py`` (``tests/test_unasync.py`` checks this file is current and
that every public asyncio name has its sync twin). A coroutine's twin runs it on the
client's loop thread and blocks until it is done (``self._run``); a plain method's or a
property's forwards in the caller's thread, as the asyncio client allows.

What is not here is written by hand in :mod:`ampsclient.sync`: the loop thread, the publish
lanes, connecting again after ``close``, closing, the context managers, handlers that run on
threads of their own, and the official client's argument names where they differ.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from .authenticator import Authenticator
    from .calls import Handler
    from .client import AsyncClient
    from .command import Command
    from .core.events import ConnectionEvent
    from .core.state import State
    from .ha.chooser import ServerChooser
    from .ha.client import AsyncHAClient
    from .ha.persist_waiters import FailedWriteHandler
    from .ha.reconnect import ReconnectDelayStrategy
    from .observer import ClientObserver
    from .protocol.message import Message
    from .stores.bookmark.base import BookmarkStore
    from .stores.publish.base import PublishStore
    from .stream import MessageStream

__all__ = ["SyncClientFace", "SyncHAClientFace"]

T = TypeVar("T")


class SyncClientFace:
    """The generated twins of :class:`AsyncClient`'s public methods, for
    :class:`~ampsclient.sync.Client` (which drives ``self._async`` and runs
    coroutines with ``self._run``)."""

    if TYPE_CHECKING:
        _async: AsyncClient | AsyncHAClient

        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    @property
    def state(self) -> State:
        """The connection's state (:class:`~ampsclient.core.state.State`)."""
        return self._async.state

    @property
    def transport_filter(self) -> Callable[[bytes, bool], Any] | None:
        """Sees the bytes written (``False``) and each frame's payload read (``True``)."""
        return self._async.transport_filter

    @transport_filter.setter
    def transport_filter(self, value: Callable[[bytes, bool], Any] | None) -> None:
        self._async.transport_filter = value

    @property
    def name(self) -> str:
        """The client name."""
        return self._async.name

    def get_name(self) -> str:
        """Official spelling of :attr:`name`."""
        return self._async.get_name()

    @property
    def uri(self) -> str | None:
        """The URI of the current or last connection, without credentials."""
        return self._async.uri

    def get_uri(self) -> str | None:
        """Official spelling of :attr:`uri`."""
        return self._async.get_uri()

    @property
    def connected(self) -> bool:
        """``True`` while a transport is open."""
        return self._async.connected

    @property
    def logged_on(self) -> bool:
        """``True`` between a successful logon and a disconnect."""
        return self._async.logged_on

    @property
    def message_type(self) -> str:
        """The message type of the connection (``json``, ``msgpack``, ``binary``...)."""
        return self._async.message_type

    @property
    def server_version(self) -> str | None:
        """The ``version`` the server sent in its logon ack."""
        return self._async.server_version

    def get_server_version(self) -> int:
        """The server version as the official client reports it (a·10⁶+b·10⁴+c·10²+d)."""
        return self._async.get_server_version()

    def get_server_version_info(self) -> str | None:
        """The server's version string."""
        return self._async.get_server_version_info()

    @property
    def logon_ack(self) -> Message | None:
        """The last logon ack (its ``s`` is the last sequence the server persisted for us)."""
        return self._async.logon_ack

    def statistics(self) -> dict[str, int]:
        """Counters: frames received and sent; messages delivered through the slow path."""
        return self._async.statistics()

    def set_last_chance_message_handler(self, handler: Handler | None) -> None:
        """Receives messages that no other handler took."""
        self._async.set_last_chance_message_handler(handler)

    def set_exception_listener(self, listener: Callable[[BaseException], Any] | None) -> None:
        """Receives exceptions raised by handlers (they are logged either way)."""
        self._async.set_exception_listener(listener)

    def add_connection_state_listener(self, listener: Callable[[ConnectionEvent], Any]) -> None:
        """Receives a :class:`ConnectionEvent` on each connection state change."""
        self._async.add_connection_state_listener(listener)

    def remove_connection_state_listener(self, listener: Callable[[ConnectionEvent], Any]) -> None:
        """Stop sending events to ``listener``."""
        self._async.remove_connection_state_listener(listener)

    def get_exception_listener(self) -> Callable[[BaseException], Any] | None:
        """The exception listener."""
        return self._async.get_exception_listener()

    @property
    def default_max_depth(self) -> int:
        """The ``max_depth`` of new message streams (0 = unbounded)."""
        return self._async.default_max_depth

    @default_max_depth.setter
    def default_max_depth(self, depth: int) -> None:
        self._async.default_max_depth = depth

    @property
    def logon_options(self) -> str | None:
        """Options sent with every logon (``None``: none)."""
        return self._async.logon_options

    @logon_options.setter
    def logon_options(self, options: str | None) -> None:
        self._async.logon_options = options

    def remove_message_handler(self, command_id: str) -> bool:
        """Stop routing ``command_id`` to its handler; ``True`` if one was registered."""
        return self._async.remove_message_handler(command_id)

    def get_ssl(self) -> Any:
        """Refused: the official client's ``PySSLSocket`` does not exist here."""
        return self._async.get_ssl()

    def set_observer(self, observer: ClientObserver | None) -> None:
        """Let ``observer`` see this client's publishes and the commands it sends
        (:mod:`ampsclient.observer`; :func:`ampsclient.tracing.instrument` sets one).

        Setting one switches the C publish lane off for good (every publish then takes the
        Python path, which asks the observer); ``None`` stops observing. Handlers of commands
        sent before the observer was set are not observed.
        """
        self._async.set_observer(observer)

    def encode_data(self, data: Any) -> bytes:
        """``data`` as bytes: bytes as is, ``str`` in UTF-8, other objects in the connection's
        message type (msgpack for ``msgpack``, else JSON)."""
        return self._async.encode_data(data)

    def logon(
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
        return self._run(self._async.logon(timeout, authenticator, options))

    def connect_and_logon(
        self, uri: str, *, timeout: int = 0, authenticator: Authenticator | None = None
    ) -> str:
        """:meth:`connect` then :meth:`logon`."""
        return self._run(
            self._async.connect_and_logon(uri, timeout=timeout, authenticator=authenticator)
        )

    def execute(self, command: Command) -> MessageStream:
        """Send ``command`` and return a stream of what comes back."""
        return self._run(self._async.execute(command))

    def unsubscribe(self, sub_id: str = "all") -> None:
        """Cancel one subscription (or ``"all"``)."""
        self._run(self._async.unsubscribe(sub_id))


class SyncHAClientFace:
    """The generated twins of :class:`AsyncHAClient`'s public methods, for
    :class:`~ampsclient.sync.HAClient` (which drives ``self._ha`` and runs
    coroutines with ``self._run``)."""

    if TYPE_CHECKING:
        _ha: AsyncHAClient

        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    def set_server_chooser(self, chooser: ServerChooser) -> None:
        """Use ``chooser`` to pick servers."""
        self._ha.set_server_chooser(chooser)

    def get_server_chooser(self) -> ServerChooser:
        """The server chooser."""
        return self._ha.get_server_chooser()

    def set_reconnect_delay_strategy(self, strategy: ReconnectDelayStrategy) -> None:
        """Use ``strategy`` between connection attempts."""
        self._ha.set_reconnect_delay_strategy(strategy)

    def get_reconnect_delay_strategy(self) -> ReconnectDelayStrategy:
        """The reconnect delay strategy."""
        return self._ha.get_reconnect_delay_strategy()

    def set_reconnect_delay(self, milliseconds: int) -> None:
        """A fixed reconnect delay (official shortcut)."""
        self._ha.set_reconnect_delay(milliseconds)

    def set_failed_write_handler(self, handler: FailedWriteHandler | None) -> None:
        """Called with ``(message, reason)`` when the server refuses a stored publish."""
        self._ha.set_failed_write_handler(handler)

    def set_failed_resubscribe_handler(
        self, handler: Callable[[Command, int, BaseException], bool] | None
    ) -> None:
        """Called when re-placing a subscription fails: return ``True`` to drop it,
        ``False`` to reconnect and try again."""
        self._ha.set_failed_resubscribe_handler(handler)

    def set_resubscription_timeout(self, milliseconds: int) -> None:
        """How long each re-placed subscription may wait for its ack (0 = no limit)."""
        self._ha.set_resubscription_timeout(milliseconds)

    def get_resubscription_timeout(self) -> int:
        """The resubscription timeout in ms."""
        return self._ha.get_resubscription_timeout()

    @property
    def publish_store(self) -> PublishStore:
        """The publish store."""
        return self._ha.publish_store

    @property
    def bookmark_store(self) -> BookmarkStore:
        """The bookmark store."""
        return self._ha.bookmark_store

    def set_logon_timeout(self, milliseconds: int) -> None:
        """How long each logon waits for its ack (official ``set_timeout``; 0 = no limit)."""
        self._ha.set_logon_timeout(milliseconds)

    def get_logon_timeout(self) -> int:
        """The logon timeout in milliseconds."""
        return self._ha.get_logon_timeout()

    def set_bookmark_store(self, store: BookmarkStore) -> None:
        """Use ``store`` for bookmark subscriptions placed from now on."""
        self._ha.set_bookmark_store(store)

    def set_duplicate_message_handler(self, handler: Handler | None) -> None:
        """Receives redelivered messages the bookmark store recognised as duplicates."""
        self._ha.set_duplicate_message_handler(handler)

    def get_duplicate_message_handler(self) -> Handler | None:
        """The duplicate message handler."""
        return self._ha.get_duplicate_message_handler()

    def get_most_recent(self, sub_id: str) -> str:
        """Where subscription ``sub_id`` would resume (the bookmark store's recovery point)."""
        return self._ha.get_most_recent(sub_id)

    @property
    def unpersisted_count(self) -> int:
        """Publishes stored and not yet acknowledged as persisted."""
        return self._ha.unpersisted_count

    def get_unpersisted_count(self) -> int:
        """Official spelling of :attr:`unpersisted_count`."""
        return self._ha.get_unpersisted_count()

    def connect_and_logon(
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
        return self._run(
            self._ha.connect_and_logon(uri, timeout=timeout, authenticator=authenticator)
        )

    def publish_and_wait(
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
        return self._run(
            self._ha.publish_and_wait(
                topic,
                data,
                expiration,
                correlation_id=correlation_id,
                sow_key=sow_key,
                timeout=timeout,
            )
        )

    @property
    def logon_correlation_data(self) -> str | None:
        """Sent as the logon's correlation id (``x``)."""
        return self._ha.logon_correlation_data

    @logon_correlation_data.setter
    def logon_correlation_data(self, value: str | None) -> None:
        self._ha.logon_correlation_data = value
