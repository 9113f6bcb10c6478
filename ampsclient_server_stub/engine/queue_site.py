"""How the message queues plug into a broker without the engine importing them.

The engine never imports :mod:`ampsclient_server_stub.queues`: whoever builds the broker (the
server, a test) passes a :data:`QueueFactory` (``ampsclient_server_stub.queues.plug.start_queues``
fits). The broker calls it once, at the end of its construction, with the :class:`QueueSite`
(the broker's parts the queues work with) and plugs what it returns (a :class:`QueuePlugin`)
into its hooks before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from ampsclient_server_stub.config import ServerConfig

from .hooks import QueueHooks
from .ingest import Incoming, Ingested
from .session import CallLater
from .sow_service import SowService
from .state import Subscription
from .storage_faults import StorageFaults
from .subscriptions import SubscriptionTable
from .txlog import TxLog

__all__ = ["QueueFactory", "QueuePlugin", "QueueSite"]


@dataclass(frozen=True, slots=True)
class QueueSite:
    """The broker's parts a queue engine is built on."""

    config: ServerConfig
    """The server configuration (``<Queue>`` definitions, dead-letter ``<Actions>``)."""
    txlog: TxLog | None
    """The transaction log (queues need one)."""
    table: SubscriptionTable
    """The subscription table (queue subscriptions are registered in it)."""
    sows: SowService
    """The SOW topics (a message's own expiration on SOW underlying topics)."""
    ingest: Callable[[Incoming], Ingested]
    """The one way a message enters the broker (dead-letter publishes)."""
    request_sync: Callable[[], None]
    """Ask for a group commit."""
    call_later: CallLater | None
    """The timer scheduler (``None``: no timers)."""
    clock: Callable[[], float]
    """The steady clock (leases, timers; :func:`.clocks.steady_clock`)."""
    faults: StorageFaults
    """Write failures of the server's files (the queues' metadata files), reported once."""


class QueuePlugin(QueueHooks, Protocol):
    """What the broker needs of a queue engine beyond the commands' :class:`.hooks.QueueHooks`
    (``ampsclient_server_stub.queues.engine.QueueEngine`` fits)."""

    @property
    def publish_targets(self) -> dict[tuple[str, str], str]:
        """``DefaultPublishTarget``: ``(message type, queue name)`` -> the topic a publish to
        the queue's name goes to."""

    def on_durable(self, durable: int) -> None:
        """The journal is durable up to ``durable`` (after a group commit)."""

    def removed(self, sub: Subscription) -> None:
        """A subscription ended (``unsubscribe``, ``replace``, disconnect)."""

    def close(self) -> None:
        """Stop the timers, write the ack points."""


QueueFactory: TypeAlias = Callable[[QueueSite], QueuePlugin | None]
"""Builds the queues of a broker (``None``: the configuration defines none)."""
