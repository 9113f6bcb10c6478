"""Wiring: the plumbing of an :class:`~ampsclient.client.AsyncClient` that the objects built
on it drive. Not user API.

An application uses the client's public methods (the official client's names and the
documented extras: ``tests/core/test_layering.py`` pins that face). The objects that *hold*
a client need more: the HA client (:mod:`ampsclient.ha`) sends its resubscribe commands and
waits for their acks, takes the persisted acks and queues stored publishes (its publish
gate is its own: :mod:`ampsclient.ha.store_forward`); the sync facade
(:mod:`ampsclient.sync`, :mod:`ampsclient.disconnects`) tells the listeners of the states it
decides and lets sends retry after a drop. That plumbing is
here, on an object each client makes for itself (``client._wiring``), instead of on the
client's public face. Who may use it: ``ampsclient.ha``, ``ampsclient.sync``,
``ampsclient.disconnects`` and tests; nothing else (an application never needs it).

The fields are the client's own methods and its :class:`~ampsclient.writer.FrameWriter`,
given at construction (nothing is looked up or replaced later): calling
``wiring.send_command(...)`` runs ``AsyncClient._send_command``, whose docstring says what it
does.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .calls import Handler
from .command import Command
from .core.connection import Pending
from .core.event_types import Event
from .core.events import ConnectionState
from .stream import MessageStream
from .writer import FrameWriter

__all__ = ["SetEventHandler", "Wiring"]

E = TypeVar("E", bound=Event)


class SetEventHandler(Protocol):
    """The type of :attr:`Wiring.set_event_handler`: ``(kind, handler)`` acts on the core's
    events of type ``kind`` with ``handler`` (generic: ``handler`` takes a ``kind``)."""

    def __call__(self, kind: type[E], handler: Callable[[E], None], /) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Wiring:
    """One client's plumbing (see the module docstring for who may use it)."""

    writer: FrameWriter
    """The client's write queue and loop (its public methods are the writer's
    API: ``queue_frame``, ``queue_frame_now``, ``lane_arguments``, ``call_soon``...)."""
    send_command: Callable[
        [Command, Handler | None, MessageStream | None], Coroutine[Any, Any, Pending | None]
    ]
    """``(command, handler, stream)``: send through the core and wait for the processed ack
    when the command asks for one (``AsyncClient._send_command``)."""
    new_stream: Callable[[Callable[[MessageStream], None] | None], MessageStream]
    """``(on_close)``: a message stream on the client's loop (``AsyncClient._new_stream``)."""
    close_stream: Callable[[MessageStream], None]
    """Forget a stream the application closed and unsubscribe it."""
    process_events: Callable[[], None]
    """Act on every event the core queued (``AsyncClient._process_events``)."""
    set_event_handler: SetEventHandler
    """Act on the core's events of one type with another handler than the client's
    (``AsyncClient._set_event_handler``: the HA client takes the persisted acks)."""
    emit_state: Callable[[ConnectionState, BaseException | None], None]
    """Tell the connection state listeners of a state a wrapper decides (``PUBLISH_REPLAYED``,
    ``RESUBSCRIBED``, the sync client's ``SHUTDOWN``...)."""
    report: Callable[[BaseException], None]
    """A handler the wrapper called raised: log it and tell the exception listener."""
    abort: Callable[[BaseException], None]
    """Drop the connection at once (no flush); pending calls fail with the error."""
