"""The client's observer hook: how opt-in instrumentation (:mod:`ampsclient.tracing`) sees
publishes and deliveries without replacing any method.

An :class:`AsyncClient`'s writer has an :attr:`~ampsclient.writer.FrameWriter.observer`
attribute, ``None`` by default. While it is ``None`` the client does one ``is not None`` check per
publish on the Python path (the C publish lane does none: it is switched off for good when an
observer is set) and one per subscribe/execute command, nothing per delivery. Set it with
:meth:`~ampsclient.client.AsyncClient.set_observer`; this module imports nothing beyond the
standard library, so ``import ampsclient`` never imports OpenTelemetry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .calls import Handler
    from .command import Command

__all__ = ["ClientObserver"]


class ClientObserver(Protocol):
    """What a client tells an observer (see the module docstring)."""

    def publishing(self, topic: str, correlation_id: str | None) -> str | None:
        """A publish to ``topic`` is about to be queued (any thread): returns the correlation
        id to send (``correlation_id`` as given, or one the observer chose when it was
        ``None``)."""

    def handler_for(self, command: Command, handler: Handler) -> Handler:
        """``command`` is being sent with ``handler`` for what comes back: returns the handler
        to route to (``handler`` itself, or a function that observes and then calls it)."""
