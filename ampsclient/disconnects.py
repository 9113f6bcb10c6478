"""The sync client's disconnect handling, as the official client does it.

* :func:`takes_error`: whether a disconnect handler is called ``handler(client)`` (the official
  ``DisconnectHandler``) or ``handler(client, exc)``, read once from its parameters.
* :class:`DropHandling`: the sync ``Client``'s drop handling, an object the client holds:
  the application's disconnect handler runs on a thread of its own (so it may reconnect with
  the blocking methods); with ``retry_on_disconnect`` (the official default) a send that finds the
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

__all__ = ["DropHandling", "takes_error"]

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


class DropHandling:
    """The sync ``Client``'s disconnect handler and ``retry_on_disconnect``: an object the
    facade holds (``Client._drops``), which alone writes this state.

    Args:
        facade: what the application's handler is called with (the sync client).
        client: the asyncio client the facade drives.
    """

    def __init__(self, facade: object, client: AsyncClient | AsyncHAClient) -> None:
        self._facade = facade
        self._client = client
        self._user: tuple[Callable[..., Any], bool] | None = None
        """The application's disconnect handler and whether it takes the exception."""
        self._dropped = False
        """The connection was lost (not closed by the application) and not made again."""
        self._reconnect_lock = threading.Lock()
        self.retry_on_disconnect = True
        """Official ``retry_on_disconnect`` (the official default ``True``)."""

    def install(self) -> None:
        """The plain client's drop handling: remember the drop, run the application's
        disconnect handler on a thread of its own, let sends ask for a reconnect (an HA
        client reconnects by itself and only runs the handler: :meth:`run_handler`)."""
        client = self._client
        assert isinstance(client, AsyncClient)
        client.set_disconnect_handler(self._on_drop)
        client._wiring.writer.send_retry = self._retry_send

    def set_handler(self, handler: Callable[..., Any] | None) -> None:
        """The application's handler, or ``None`` (its form is read here once:
        :func:`takes_error`)."""
        self._user = None if handler is None else (handler, takes_error(handler))

    def forget_drop(self) -> None:
        """The application connected or closed the connection: sends no longer retry."""
        self._dropped = False

    def _on_drop(self, _client: object, exc: BaseException | None) -> None:
        self._dropped = True
        if self._user is None:
            self._still_down(exc)
            return
        name = f"ampsclient-disconnect-{self._client.name or 'client'}"
        threading.Thread(target=self._call_handler, args=(exc,), name=name, daemon=True).start()

    def _call_handler(self, exc: BaseException | None) -> None:
        """Run the application's disconnect handler (one at a time; not once reconnected);
        a drop it left unrepaired is reported again, as the official client does."""
        with self._reconnect_lock:
            if self._client.connected:
                return
            user = self._user
            if user is not None:
                self.run_handler(user, exc)
            if not self._client.connected:
                self._still_down(exc)

    def _still_down(self, exc: BaseException | None) -> None:
        client = self._client
        if isinstance(client, AsyncClient):
            client._wiring.emit_state(ConnectionState.DISCONNECTED, exc)

    def run_handler(self, user: tuple[Callable[..., Any], bool], exc: BaseException | None) -> None:
        """Call ``user`` (a handler and whether it takes the exception) with the facade; an
        exception it raises is logged and goes to the exception listener."""
        handler, with_error = user
        try:
            if with_error:
                handler(self._facade, exc)
            else:
                handler(self._facade)
        except Exception as error:
            log.error("the disconnect handler raised %r", error, exc_info=error)
            listener = self._client.get_exception_listener()
            if listener is not None:
                listener(error)

    def _retry_send(self) -> bool:
        """A send found no connection (on the sender's thread): after a drop, with
        ``retry_on_disconnect``, call the disconnect handler again (a drop it leaves
        unrepaired is reported to the state listeners again), as the official client does;
        whether the client is connected now."""
        if not (self._dropped and self.retry_on_disconnect):
            return False
        self._call_handler(None)
        return self._client.connected
