"""ConnectionFace: the connection-level API of a client that *holds* an AsyncClient.

:class:`~ampsclient.ha.client.AsyncHAClient` is composed around one
:class:`~ampsclient.client.AsyncClient` (it does not subclass it). This base gives it the
same public surface as the client it holds: the official getters and setters, listeners,
heartbeats and the convenience commands (through :meth:`execute` / :meth:`execute_async`,
which the holder defines). Each method forwards to the held client's public API, reached
through :attr:`client` (which the holder defines): the base keeps no state of its own.
"""

from __future__ import annotations

import abc
import ssl
from collections.abc import Callable
from typing import Any

from ..acks import QueueAckMethods, QueueAcks
from ..authenticator import Authenticator
from ..calls import Handler
from ..client import AsyncClient, ConnectionEvent
from ..convenience import AsyncCommands
from ..core.connection import ClientCore
from ..core.state import State
from ..observer import ClientObserver
from ..protocol.bookmarks import Bookmarks
from ..protocol.message import Message

__all__ = ["ConnectionFace"]


class ConnectionFace(AsyncCommands, QueueAckMethods, abc.ABC):
    """The public API of the :class:`AsyncClient` held in :attr:`client`, forwarded."""

    Bookmarks = Bookmarks
    """``EPOCH``, ``NOW`` and ``MOST_RECENT``."""

    @property
    @abc.abstractmethod
    def client(self) -> AsyncClient:
        """The connection this object holds: the holder defines it (it alone keeps the
        client; this base only reads it here)."""

    @property
    def core(self) -> ClientCore:
        """The held connection's sans-I/O core."""
        return self.client.core

    @property
    def state(self) -> State:
        """The held connection's state."""
        return self.client.state

    @property
    def queue_acks(self) -> QueueAcks:
        """Queue acknowledgements of the held connection (:mod:`ampsclient.acks`)."""
        return self.client.queue_acks

    @property
    def transport_filter(self) -> Callable[[bytes, bool], Any] | None:
        """Sees the bytes written (``False``) and each frame's payload read (``True``)."""
        return self.client.transport_filter

    @transport_filter.setter
    def transport_filter(self, value: Callable[[bytes, bool], Any] | None) -> None:
        self.client.transport_filter = value

    @property
    def logon_correlation_data(self) -> str | None:
        """Sent as the logon's correlation id (``x``)."""
        return self.client.logon_correlation_data

    @logon_correlation_data.setter
    def logon_correlation_data(self, value: str | None) -> None:
        self.client.logon_correlation_data = value

    # ---------------------------------------------------------------- properties / getters

    @property
    def name(self) -> str:
        """The client name."""
        return self.client.name

    def get_name(self) -> str:
        """Official spelling of :attr:`name`."""
        return self.client.name

    def set_name(self, name: str) -> None:
        """Set the client name (before logon)."""
        self.client.set_name(name)

    @property
    def uri(self) -> str | None:
        """The URI of the current or last connection, without credentials."""
        return self.client.uri

    def get_uri(self) -> str | None:
        """Official spelling of :attr:`uri`."""
        return self.client.uri

    @property
    def connected(self) -> bool:
        """``True`` while a transport is open."""
        return self.client.connected

    @property
    def logged_on(self) -> bool:
        """``True`` between a successful logon and a disconnect."""
        return self.client.logged_on

    @property
    def message_type(self) -> str:
        """The message type of the connection."""
        return self.client.message_type

    @property
    def server_version(self) -> str | None:
        """The ``version`` the server sent in its logon ack."""
        return self.client.server_version

    def get_server_version(self) -> int:
        """The server version as the official client reports it."""
        return self.client.get_server_version()

    def get_server_version_info(self) -> str | None:
        """The server's version string."""
        return self.client.get_server_version_info()

    @property
    def logon_ack(self) -> Message | None:
        """The last logon ack."""
        return self.client.logon_ack

    def statistics(self) -> dict[str, int]:
        """Counters of the held connection."""
        return self.client.statistics()

    @property
    def default_max_depth(self) -> int:
        """The ``max_depth`` of new message streams (0 = unbounded)."""
        return self.client.default_max_depth

    @default_max_depth.setter
    def default_max_depth(self, depth: int) -> None:
        self.client.default_max_depth = depth

    @property
    def logon_options(self) -> str | None:
        """Options sent with every logon (``None``: none)."""
        return self.client.logon_options

    @logon_options.setter
    def logon_options(self, options: str | None) -> None:
        self.client.logon_options = options

    # ---------------------------------------------------------------------- handlers

    def set_last_chance_message_handler(self, handler: Handler | None) -> None:
        """Receives messages that no other handler took."""
        self.client.set_last_chance_message_handler(handler)

    def set_exception_listener(self, listener: Callable[[BaseException], Any] | None) -> None:
        """Receives exceptions raised by handlers (they are logged either way)."""
        self.client.set_exception_listener(listener)

    def get_exception_listener(self) -> Callable[[BaseException], Any] | None:
        """The exception listener."""
        return self.client.get_exception_listener()

    def add_connection_state_listener(self, listener: Callable[[ConnectionEvent], Any]) -> None:
        """Receives a :class:`ConnectionEvent` on each connection state change."""
        self.client.add_connection_state_listener(listener)

    def remove_connection_state_listener(self, listener: Callable[[ConnectionEvent], Any]) -> None:
        """Stop sending events to ``listener``."""
        self.client.remove_connection_state_listener(listener)

    def add_message_handler(
        self, command_id: str, message_handler: Handler, acks: str = "", is_subscribe: bool = False
    ) -> None:
        """Route what the server sends for ``command_id`` to ``message_handler``."""
        self.client.add_message_handler(command_id, message_handler, acks, is_subscribe)

    def remove_message_handler(self, command_id: str) -> bool:
        """Stop routing ``command_id`` to its handler; ``True`` if one was registered."""
        return self.client.remove_message_handler(command_id)

    def get_ssl(self) -> Any:
        """Refused, as on :class:`AsyncClient`."""
        return self.client.get_ssl()

    def set_global_command_type_message_handler(self, command: str, handler: Handler) -> None:
        """See every ``ack`` or ``heartbeat`` message (official API)."""
        self.client.set_global_command_type_message_handler(command, handler)

    def set_observer(self, observer: ClientObserver | None) -> None:
        """Opt-in instrumentation of the held client (:meth:`AsyncClient.set_observer`)."""
        self.client.set_observer(observer)

    def set_heartbeat(self, interval: float, timeout: float | None = None) -> None:
        """Heartbeats every ``interval`` s; the connection is dead after ``timeout`` s."""
        self.client.set_heartbeat(interval, timeout)

    def set_publish_batching(self, batch_size: int, batch_timeout: int) -> None:
        """Hold publishes up to ``batch_size`` bytes or ``batch_timeout`` ms (official API)."""
        self.client.set_publish_batching(batch_size, batch_timeout)

    def encode_data(self, data: Any) -> bytes:
        """``data`` as bytes for the connection's message type."""
        return self.client.encode_data(data)

    # ------------------------------------------------------------------- connection

    async def connect(
        self,
        uri: str,
        *,
        timeout: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """Open one connection to ``uri`` (no failover: see ``connect_and_logon``)."""
        await self.client.connect(uri, timeout=timeout, ssl_context=ssl_context)

    async def logon(
        self,
        timeout: int = 0,
        authenticator: Authenticator | None = None,
        options: str | None = None,
    ) -> str:
        """Log on over the open connection; returns the logon's command id."""
        return await self.client.logon(timeout, authenticator, options)

    async def flush(self, timeout: int = 0) -> None:
        """Wait until the server has processed every command sent before this one."""
        await self.client.flush(timeout)
