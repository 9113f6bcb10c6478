"""The replication manager's place in the broker's hooks, made before the broker is built.

:class:`~ampsclient_server_stub.engine.hooks.BrokerHooks` are frozen once the broker is built,
but the :class:`~.manager.ReplicationManager` starts after it (it needs the running broker and
its journal). The server therefore builds a :class:`ReplicationPlug` first, gives its
:meth:`~ReplicationPlug.ack_limit` and :meth:`~ReplicationPlug.fully_durable_limit` to the
hooks at build time, and the manager attaches to the plug when it starts and detaches when
it stops. Detached, the plug limits nothing (as no hook at all).
"""

from __future__ import annotations

import sys
from typing import Final, Protocol

from ampsclient_server_stub.config import ServerConfig

__all__ = ["NO_CAP", "ReplicationPlug", "replication_wanted"]

NO_CAP: Final = sys.maxsize
"""What :meth:`ReplicationPlug.fully_durable_limit` returns while detached: no cap."""


class Limits(Protocol):
    """What the plug asks of the attached manager (:class:`~.manager.ReplicationManager`)."""

    def ack_limit(self, durable: int) -> int:
        """The highest journal index persisted acks may cover."""
        ...

    def fully_durable_limit(self) -> int:
        """The highest journal index a ``fully_durable`` bookmark replay may deliver."""
        ...


def replication_wanted(config: ServerConfig) -> bool:
    """``config`` asks for replication: an ``amps-replication`` transport or a
    ``<Replication>`` section."""
    return config.replication is not None or any(
        t.type == "amps-replication" for t in config.transports
    )


class ReplicationPlug:
    """The hooks' replication fields, forwarding to the manager attached (see the module)."""

    def __init__(self) -> None:
        self._manager: Limits | None = None

    @property
    def attached(self) -> bool:
        """A manager is attached (it runs)."""
        return self._manager is not None

    def attach(self, manager: Limits) -> None:
        """The manager started: the limits are its."""
        if self._manager is not None and self._manager is not manager:
            raise RuntimeError("a replication manager is attached already")
        self._manager = manager

    def detach(self) -> None:
        """The manager stopped: nothing is limited any more."""
        self._manager = None

    def ack_limit(self, durable: int) -> int:
        """``BrokerHooks.ack_limit``: the manager's, else ``durable`` itself."""
        manager = self._manager
        return durable if manager is None else manager.ack_limit(durable)

    def fully_durable_limit(self) -> int:
        """``BrokerHooks.fully_durable_limit``: the manager's, else :data:`NO_CAP`."""
        manager = self._manager
        return NO_CAP if manager is None else manager.fully_durable_limit()
