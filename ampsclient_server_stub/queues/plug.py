"""The queue factory a broker is given: builds the queue engine of a configuration.

Whoever builds the broker passes :func:`start_queues` (``Broker(..., queues=start_queues)``);
the engine never imports this package (:mod:`ampsclient_server_stub.engine.queue_site`).
"""

from __future__ import annotations

from ..engine.broker import Broker
from ..engine.queue_site import QueueSite
from .dead_letter import ActionPublisher, DeadLetters, expire_actions
from .engine import QueueEngine, QueueStartError
from .expiration import sow_expiry

__all__ = ["queue_engine", "start_queues"]


def start_queues(site: QueueSite) -> QueueEngine | None:
    """The queue engine of ``site.config`` with its dead-letter actions
    (:mod:`.dead_letter`), or ``None`` when the configuration defines no queue.

    Raises:
        ConfigError: a dead-letter action the reference server would not run as AMPS
            documents it.
        QueueStartError: queues without a transaction log, or an underlying topic that is not
            recorded in it.
    """
    config = site.config
    actions = expire_actions(config)
    if not config.queues:
        return None
    txlog = site.txlog
    if txlog is None:
        raise QueueStartError("queues need a transaction log")
    engine = QueueEngine(
        config.queues,
        txlog=txlog,
        table=site.table,
        request_sync=site.request_sync,
        call_later=site.call_later,
        clock=site.clock,
        instance=config.name,
        replicated=config.replication is not None,
        expiry=sow_expiry(site.sows),
        views=config.views,
        faults=site.faults,
    )
    if actions:
        publisher = ActionPublisher(
            site.ingest,
            name=f"{config.name}/actions",
            last_sequence=txlog.journal.last_sequence,
        )
        engine.dead_letters = DeadLetters(actions, publish=publisher)
    return engine


def queue_engine(broker: Broker | None) -> QueueEngine | None:
    """The queue engine plugged into ``broker`` (``None``: no broker, or no queues)."""
    queues = broker.queues if broker is not None else None
    return queues if isinstance(queues, QueueEngine) else None
