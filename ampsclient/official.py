"""The official client's remaining ``Client`` methods, for the synchronous facade.

:class:`OfficialClientMethods` gives :class:`ampsclient.Client` (and ``HAClient``) the
official names that are spellings of ours (``setName``, ``sowAndSubscribe``,
``set_unhandled_message_handler``...), the settings (``set_default_max_depth``,
``set_logon_correlation_data``, ``set_transport_filter``...), ``send`` and the message
handler table, and the few names that cannot apply here, which raise a
:class:`~ampsclient.UsageError` naming what to use instead.

:class:`ConnectionStateListener` holds the official state constants.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from .calls import OptionsArg
from .command import Command
from .compat import version_to_number
from .exceptions import CommandError, UsageError
from .protocol.acks import AckType
from .protocol.message import Message

if TYPE_CHECKING:
    from .client import AsyncClient
    from .ha.client import AsyncHAClient

__all__ = [
    "ConnectionStateListener",
    "OfficialClientMethods",
    "SubscribeHost",
    "name_hash",
]

T = TypeVar("T")
Handler = Callable[[Message], Any]

# the header keys a Command takes from a Message in send(); the rest are the server's
_SEND_KEYS = (
    "t", "filter", "o", "bm", "sub_id", "query_id", "cid", "x", "k", "sow_keys",
    "orderby", "top_n", "bs", "e", "s",
)  # fmt: skip


class ConnectionStateListener:
    """The official connection state constants (``Client.ConnectionStateListener``).

    Our listeners receive a :class:`~ampsclient.ConnectionEvent`; its ``state`` maps to
    these numbers with ``ConnectionState`` names (``CONNECTED`` -> ``STATE_CONNECTED``).
    """

    STATE_DISCONNECTED = 0
    STATE_SHUTDOWN = 1
    STATE_CONNECTED = 2
    STATE_LOGGED_ON = 4
    STATE_PUBLISH_REPLAYED = 8
    STATE_HEARTBEAT_INITIATED = 16
    STATE_RESUBSCRIBED = 32
    STATE_UNKNOWN = 16384
    EXTENDED_STATES = 5020200
    ORIGINAL_VERSION = 5020100
    VERSION_522 = 5020200


class SubscribeHost(Protocol):
    """The handler forms of the facade's commands that the official 3.x spellings call
    (``deltaSubscribe`` ...): what a class mixing in :class:`OfficialClientMethods` has."""

    def delta_subscribe(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        options: OptionsArg = None,
        timeout: int = 0,
    ) -> str: ...

    def sow_and_subscribe(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        oof_enabled: bool = False,
        timeout: int = 0,
        top_n: int | None = None,
        *,
        options: OptionsArg = None,
    ) -> str: ...

    def sow_and_delta_subscribe(
        self,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        batch_size: int = 10,
        oof_enabled: bool = False,
        send_empties: bool = False,
        timeout: int = 0,
        top_n: int | None = None,
        *,
        options: OptionsArg = None,
    ) -> str: ...

    def sow_delete(
        self, on_message: Handler, topic: str, filter: str | None = None, timeout: int = 0
    ) -> str: ...


_FLUSH_ACKS = {"processed": AckType.PROCESSED, "persisted": AckType.PERSISTED}
"""The ack types a ``flush`` may ask for, by name."""


def name_hash(name: str) -> int:
    """A stable 64-bit hash (FNV-1a) of a client name."""
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class OfficialClientMethods:
    """Official ``Client`` methods for the sync facade (which provides the members below)."""

    _async: AsyncClient | AsyncHAClient

    if TYPE_CHECKING:

        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...
        def set_last_chance_message_handler(self, handler: Handler | None) -> None: ...
        def set_exception_listener(self, listener: Any) -> None: ...
        def set_disconnect_handler(self, handler: Any) -> None: ...
        def flush(self, timeout: int = 0) -> None: ...
        @property
        def loop(self) -> Any: ...

    # -- names and versions ---------------------------------------------------------------

    def set_name(self, name: str) -> None:
        """Set the client name (before connecting)."""
        self._async.set_name(name)

    setName = set_name

    def getName(self) -> str:
        """Official camelCase spelling of ``get_name``."""
        return self._async.name

    def get_connection_name(self) -> str:
        """The name this connection logged on with."""
        return self._async.name

    def get_name_hash(self) -> str:
        """A stable hash of the client name, as text (see :func:`name_hash`)."""
        return str(name_hash(self._async.name))

    def get_name_hash_value(self) -> int:
        """A stable 64-bit hash of the client name."""
        return name_hash(self._async.name)

    @staticmethod
    def convert_version_to_number(version: str) -> int:
        """``"5.3.5.14"`` -> ``5030514`` (two digits per part, as ``get_server_version``)."""
        return version_to_number(version)

    @staticmethod
    def allocate_message() -> Message:
        """A new empty :class:`Message` to fill with the ``set_*`` methods and :meth:`send`."""
        return Message()

    allocateMessage = allocate_message

    # -- settings ---------------------------------------------------------------------------

    def set_default_max_depth(self, depth: int) -> None:
        """``max_depth`` of the message streams made from now on (0 = unbounded)."""
        self._async.default_max_depth = depth

    def get_default_max_depth(self) -> int:
        """The default stream ``max_depth``."""
        return self._async.default_max_depth

    def set_logon_correlation_data(self, logon_correlation_data: str) -> None:
        """Data (base64 text) sent with each logon to correlate it in the server's logs."""
        self._async.logon_correlation_data = logon_correlation_data or None

    def get_logon_correlation_data(self) -> str:
        """The logon correlation data (``""`` when unset)."""
        return self._async.logon_correlation_data or ""

    def set_transport_filter(
        self, transport_filter_callable: Callable[[bytes, bool], Any] | None
    ) -> None:
        """Call ``fn(data, direction)`` with the bytes written (``False``) and each frame
        read (``True``), on the client's thread."""
        self._async.transport_filter = transport_filter_callable

    def set_thread_created_callback(self, thread_created_callable: Callable[[], Any]) -> None:
        """Run ``fn()`` on the client's receive thread (at once: that thread already runs)."""
        done = threading.Event()
        errors: list[BaseException] = []

        def call() -> None:
            try:
                thread_created_callable()
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        self.loop.call_soon_threadsafe(call)
        done.wait(10)
        if errors:
            raise errors[0]

    def set_publish_batching(self, batchSize: int, batchTimeoutMillis: int) -> None:
        """Hold publishes until ``batchSize`` bytes are queued or the oldest has waited
        ``batchTimeoutMillis`` ms, then write them at once; commands (``flush``...) end a
        batch. ``(0, 0)`` (the default): write as soon as the client's loop runs."""
        self._async.set_publish_batching(batchSize, batchTimeoutMillis)

    # -- official alternative spellings -----------------------------------------------------

    def set_unhandled_message_handler(self, message_handler: Handler | None) -> None:
        """Official alias of ``set_last_chance_message_handler``."""
        self.set_last_chance_message_handler(message_handler)

    setUnhandledMessageHandler = set_unhandled_message_handler

    def setExceptionListener(self, exception_listener: Any) -> None:
        """Official camelCase spelling of ``set_exception_listener``."""
        self.set_exception_listener(exception_listener)

    def setDisconnectHandler(self, client_disconnect_handler: Any) -> None:
        """Official camelCase spelling of ``set_disconnect_handler``."""
        self.set_disconnect_handler(client_disconnect_handler)

    setOnDisconnectHandler = setDisconnectHandler

    def deltaPublish(self, topic: str, data: Any) -> Any:
        """Official camelCase spelling of ``delta_publish``."""
        return self.delta_publish(topic, data)  # type: ignore[attr-defined]

    def deltaSubscribe(
        self: SubscribeHost, on_message: Handler, topic: str, filter: str | None = None,
        options: Any = 0, timeout: int = 0,
    ) -> Any:  # fmt: skip
        """Official 3.x spelling of ``delta_subscribe`` (the handler first)."""
        return self.delta_subscribe(
            on_message, topic, filter, options=options or None, timeout=timeout
        )

    def sowAndSubscribe(
        self: SubscribeHost, on_message: Handler, topic: str, filter: str | None = None,
        batch_size: int = 1,
        oof_enabled: bool = False, options: Any = 0, timeout: int = 0, top_n: int | None = None,
    ) -> Any:  # fmt: skip
        """Official 3.x spelling of ``sow_and_subscribe`` (the handler first)."""
        return self.sow_and_subscribe(
            on_message, topic, filter, batch_size=batch_size, oof_enabled=oof_enabled,
            options=options or None, timeout=timeout, top_n=top_n,
        )  # fmt: skip

    def sowAndDeltaSubscribe(
        self: SubscribeHost, on_message: Handler, topic: str, filter: str | None = None,
        batch_size: int = 1,
        oof_enabled: bool = False, send_empties: bool = False, options: Any = 0,
        timeout: int = 0, top_n: int | None = None,
    ) -> Any:  # fmt: skip
        """Official 3.x spelling of ``sow_and_delta_subscribe`` (the handler first)."""
        return self.sow_and_delta_subscribe(
            on_message, topic, filter, batch_size=batch_size, oof_enabled=oof_enabled,
            send_empties=send_empties, options=options or None, timeout=timeout, top_n=top_n,
        )  # fmt: skip

    def sowDelete(
        self: SubscribeHost,
        on_message: Handler,
        topic: str,
        filter: str | None = None,
        timeout: int = 0,
    ) -> Any:
        """Official 3.x spelling of ``sow_delete`` (the handler first)."""
        return self.sow_delete(on_message, topic, filter, timeout=timeout)

    # -- raw commands -------------------------------------------------------------------------

    def send(
        self, message: Message, message_handler: Handler | None = None, timeout: int | None = None
    ) -> str | None:
        """Send a :class:`Message` built with ``set_*`` as a command (official API).

        With a handler, what the server sends for the command goes to it and this returns
        once the processed ack arrived (``timeout`` ms, 0/None = no limit); without one the
        command is sent and this returns at once.

        Returns:
            The command id (``None`` for a publish without one).
        """
        name = message.get_command()
        if not name:
            raise UsageError("send(message): the message has no command (use set_command)")
        command = Command(name)
        header = message.header
        for key in _SEND_KEYS:
            value = header.get(key)
            if value not in (None, ""):
                command.fields[key] = value
        acks = header.get("a")
        if acks:
            command.set_ack_type(acks)
        data = message.get_data_raw()
        if data:
            command.set_data(data)
        if timeout:
            command.set_timeout(timeout)
        cid = self._run(self._async.execute_async(command, message_handler))
        return cid or None

    def add_message_handler(
        self, command_id: str, message_handler: Handler, acks: str, is_subscribe: bool
    ) -> None:
        """Route deliveries and the ``acks`` for ``command_id`` to ``message_handler``."""
        self._async.add_message_handler(command_id, message_handler, acks, bool(is_subscribe))

    # -- names that cannot apply --------------------------------------------------------------

    def add_http_preflight_header(self, header: str) -> None:
        """Refused: connecting through an HTTP proxy is not supported."""
        raise UsageError(
            "HTTP preflight (connecting through a proxy) is not supported by ampsclient: "
            "connect directly, or use ws:// / wss:// through a WebSocket-capable proxy"
        )

    def add_http_preflight_header_key_value(self, key: str, value: str) -> None:
        """Refused: see :meth:`add_http_preflight_header`."""
        self.add_http_preflight_header(f"{key}: {value}")

    def clear_http_preflight_headers(self) -> None:
        """Nothing to clear (no preflight headers can be added)."""

    def start_timer(self) -> None:
        """Refused: the server timer commands were deprecated in AMPS 5.3.2.0."""
        raise UsageError("start_timer was deprecated in AMPS 5.3.2.0 and is not supported")

    def stop_timer(self, handler: Handler) -> None:
        """Refused: see :meth:`start_timer`."""
        raise UsageError("stop_timer was deprecated in AMPS 5.3.2.0 and is not supported")

    # -- stores: an HAClient's (the plain Client has none) ------------------------------------

    def _needs_ha(self, what: str) -> UsageError:
        return UsageError(
            f"{what}: ampsclient's plain Client keeps no stores; use "
            "HAClient(name, publish_store=..., bookmark_store=...), which has them"
        )

    def set_publish_store(self, publish_store: Any) -> None:
        """Refused on the plain Client: see ``HAClient.set_publish_store``."""
        if publish_store is not None:
            raise self._needs_ha("set_publish_store")

    def set_bookmark_store(self, bookmark_store: Any) -> None:
        """Refused on the plain Client: see ``HAClient.set_bookmark_store``."""
        if bookmark_store is not None:
            raise self._needs_ha("set_bookmark_store")

    def set_failed_write_handler(self, failedWriteHandler: Any) -> None:
        """Refused on the plain Client: failed writes are reported for stored publishes."""
        if failedWriteHandler is not None:
            raise self._needs_ha("set_failed_write_handler")

    def set_duplicate_message_handler(self, message_handler: Any) -> None:
        """Refused on the plain Client: duplicates are found by a bookmark store."""
        if message_handler is not None:
            raise self._needs_ha("set_duplicate_message_handler")

    def get_duplicate_message_handler(self) -> Any:
        """``None``: the plain Client has no bookmark store."""
        return None

    def set_error_on_publish_gap(self, error_on_publish_gap: bool) -> None:
        """Refused on the plain Client (it is a publish store setting)."""
        if error_on_publish_gap:
            raise self._needs_ha("set_error_on_publish_gap")

    def get_error_on_publish_gap(self) -> bool:
        """``False``: the plain Client has no publish store."""
        return False

    def get_unpersisted_count(self) -> int:
        """0: the plain Client stores nothing it sends."""
        return 0

    def publish_flush(self, timeout: int = 0, ack_type: Any = AckType.PROCESSED) -> None:
        """Without a publish store: send a ``flush`` asking for ``ack_type`` and wait for
        that ack (``timeout`` in ms), as the official client does: ``processed`` (the
        default) once the server processed everything sent before, ``persisted`` once it
        is persisted. ``ack_type`` is ``Message.AckType.ProcessedEnum``/``PersistedEnum``
        (4, 8), an :class:`AckType` or its name.

        Raises:
            CommandError: another ack type ("Flush can only be used with processed or
                persisted acks.", the official message).
        """
        if isinstance(ack_type, str):
            flag = _FLUSH_ACKS.get(ack_type.strip().lower(), AckType.NONE)
        elif isinstance(ack_type, int) and not isinstance(ack_type, bool):
            flag = AckType(ack_type) if 0 <= ack_type < 64 else AckType.NONE
        else:
            flag = AckType.NONE
        if flag not in (AckType.PROCESSED, AckType.PERSISTED):
            raise CommandError("Flush can only be used with processed or persisted acks.")
        plain = cast("AsyncClient", self._async)  # an HAClient has its own publish_flush
        self._run(plain.flush(timeout, ack_type=flag))
