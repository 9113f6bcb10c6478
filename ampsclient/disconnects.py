"""The sync client's disconnect handling, as the official client does it.

* :func:`takes_error`: whether a disconnect handler is called ``handler(client)`` (the official
  ``DisconnectHandler``) or ``handler(client, exc)``, read once from its parameters.
* :class:`DisconnectHandling`: the plain ``Client``'s drop handling: the application's
  disconnect handler runs on a thread of its own (so it may reconnect with the blocking
  methods); with ``retry_on_disconnect`` (the official default) a send that finds the
  connection dropped calls it again on the sender's thread and goes on if it reconnected;
  a drop left unrepaired is reported again to the state listeners, so that they hear the
  official sequence (``docs/migration.md``).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .client import AsyncClient, ConnectionState

if TYPE_CHECKING:
    from .ha.client import AsyncHAClient

__all__ = ["DisconnectHandling", "takes_error"]

log = logging.getLogger("ampsclient.disconnects")


def takes_error(handler: Callable[..., Any]) -> bool:
    """Whether a disconnect handler takes the exception too: ``handler(client, exc)`` when it
    has two positional parameters without defaults, else ``handler(client)`` as the official
    ``DisconnectHandler`` is called (so ``def h(client, exc=None)``, ``def h(c, state=s)`` and
    ``def h(*args)`` get the client only, as with the official client). Decided once, when
    the handler is set; a callable whose signature cannot be read gets the official form."""
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(required) >= 2


class DisconnectHandling:
    """The plain ``Client``'s disconnect handler and ``retry_on_disconnect`` (a mixin of the
    sync facade, which provides :attr:`_async`; ``_install_retry`` is called once the
    asyncio client exists)."""

    _async: AsyncClient | AsyncHAClient
    _retry_on_disconnect: bool
    _user_disconnect: tuple[Callable[..., Any], bool] | None = None
    """The application's disconnect handler and whether it takes the exception."""
    _dropped = False
    """The connection was lost (not closed by the application) and not made again."""

    def set_disconnect_handler(self, handler: Callable[..., Any] | None) -> None:
        """Called when the connection drops (not when the application closes it).

        ``handler(client)`` as the official ``DisconnectHandler`` is called, or
        ``handler(client, exc)`` when it has two positional parameters without defaults (decided
        here, once: :func:`takes_error`).
        It runs on a thread of its own, so it may reconnect with the blocking methods
        (``client.connect(uri); client.logon()``), as official handlers do on the receive
        thread; an exception it raises goes to the exception listener. With
        ``retry_on_disconnect`` (the default) a send that finds the connection dropped calls
        it again, on the sender's thread, and goes on if it reconnected.
        """
        if handler is None:
            self._user_disconnect = None
        else:
            self._user_disconnect = (handler, takes_error(handler))

    def _install_retry(self) -> None:
        """The plain client's drop handling: remember the drop, run the application's
        disconnect handler on a thread of its own, let sends ask for a reconnect."""
        client = self._async
        assert isinstance(client, AsyncClient)
        self._user_disconnect = None
        self._dropped = False
        self._reconnect_lock = threading.Lock()
        client.set_disconnect_handler(self._on_drop)
        client._wiring.writer.send_retry = self._retry_send

    def _on_drop(self, _client: object, exc: BaseException | None) -> None:
        self._dropped = True
        if self._user_disconnect is None:
            self._still_down(exc)
            return
        name = f"ampsclient-disconnect-{self._async.name or 'client'}"
        threading.Thread(target=self._call_handler, args=(exc,), name=name, daemon=True).start()

    def _call_handler(self, exc: BaseException | None) -> None:
        """Run the application's disconnect handler (one at a time; not once reconnected);
        a drop it left unrepaired is reported again, as the official client does."""
        with self._reconnect_lock:
            if self._async.connected:
                return
            user = self._user_disconnect
            if user is not None:
                self._run_handler(user, exc)
            if not self._async.connected:
                self._still_down(exc)

    def _still_down(self, exc: BaseException | None) -> None:
        client = self._async
        if isinstance(client, AsyncClient):
            client._wiring.emit_state(ConnectionState.DISCONNECTED, exc)

    def _run_handler(
        self, user: tuple[Callable[..., Any], bool], exc: BaseException | None
    ) -> None:
        handler, with_error = user
        try:
            if with_error:
                handler(self, exc)
            else:
                handler(self)
        except Exception as error:
            log.error("the disconnect handler raised %r", error, exc_info=error)
            listener = self._async.get_exception_listener()
            if listener is not None:
                listener(error)

    def _retry_send(self) -> bool:
        """A send found no connection (on the sender's thread): after a drop, with
        ``retry_on_disconnect``, call the disconnect handler again (a drop it leaves
        unrepaired is reported to the state listeners again), as the official client does;
        whether the client is connected now."""
        if not (self._dropped and self._retry_on_disconnect):
            return False
        self._call_handler(None)
        return self._async.connected
