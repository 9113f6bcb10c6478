"""The downstream side of a record: what applying a replicated record means, and its types.

A record received over replication enters the broker through the same public function as a
client's publish and a record recovered from the journal:
:meth:`Broker.ingest <ampsclient_server_stub.engine.broker.Broker.ingest>` (the engine's
ingest pipeline, :mod:`ampsclient_server_stub.engine.ingest`), with a
:class:`ReplicatedRecord`:

* **Bookmark identity.** The record is appended with the *original* publisher id and
  sequence, so ``publisherId|sequence|`` names the same message on every instance (a
  bookmark subscriber can fail over and resume from the bookmark it last processed).
* **Dedup** is by ``(publisher id, sequence)``: a record whose sequence is not above the
  journal's :meth:`~ampsclient_server_stub.engine.journal.Journal.last_sequence` for that
  publisher is already here (replicated earlier, over another path, or published directly
  after a failover) and is dropped.
* **The client name's state.** The broker tracks dedup and the logon ack's ``s`` per client
  name, the journal per publisher id (a hash of the name). A publisher that fails over to
  this instance logs on and gets ``s`` from the journal. One that already has a state here
  (it was connected before) gets it raised: the broker's client registry finds it by
  publisher id, so no name needs to travel.
* **SOW.** The record is journaled first, then stored and delivered; when its SOW write
  fails, the SOW's recovery checkpoint stays below it, so the next start re-applies it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ampsclient_server_stub.engine.ingest import Ingested, Replicated, ReplicatedRun

if TYPE_CHECKING:  # pragma: no cover
    from ampsclient_server_stub.engine.broker import Broker

__all__ = ["ApplyOutcome", "ReplicatedRecord", "ReplicatedRun", "apply_replicated"]

ReplicatedRecord = Replicated
"""One record received over replication (fields already carry the updated path)."""

ApplyOutcome = Ingested
"""What applying did: ``record`` is ``None`` unless it was journaled; ``duplicate``,
``unrecorded`` say why not."""


def apply_replicated(broker: Broker, rec: ReplicatedRecord) -> ApplyOutcome:
    """Apply ``rec`` to ``broker`` (see the module docstring). Never raises for bad data:
    a record that cannot be applied is logged and reported as unrecorded."""
    return broker.ingest(rec)
