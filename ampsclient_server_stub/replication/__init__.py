"""Replication and high availability for the reference server (AMPS User Guide ch. 25).

* :mod:`.manager` -- :class:`ReplicationManager`: the ``amps-replication`` listener,
  outgoing links to each ``<Destination>``, acks, downgrade/upgrade, admin commands;
* :mod:`.streams` -- the upstream (:class:`~.streams.Outbound`) and downstream
  (:class:`~.streams.Inbound`) ends of a replication stream, resync;
* :mod:`.link` -- one connection: handshake, authentication, validation exchange;
* :mod:`.rules` -- routing (topics, filters, passthrough, loop prevention) and validation;
* :mod:`.apply` -- applying a replicated record to the broker (journal, SOW, subscribers);
* :mod:`.protocol` -- the link's frames;
* :mod:`.admin` -- a blocking admin client (status, downgrade, upgrade, partition, heal).

See ``docs/replication.md``.
"""

from .admin import AdminError, admin_call
from .manager import ReplicationManager

__all__ = ["AdminError", "ReplicationManager", "admin_call"]
