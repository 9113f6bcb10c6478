"""Two reference servers replicating to each other: what ``amps_replicated_pair`` yields.

The pair is a :class:`~ampsclient_server_stub.cluster.Cluster` of two child processes, ``A``
and ``B``, each with a transaction log and a sync (or async) ``<Destination>`` to the other,
as the project's own replication tests start them. Each node can be killed (``kill -9``) and
started again on the same ports and journal, and the link between them cut and healed::

    with ReplicatedPair(tmp_path) as pair:
        client = HAClient("app")
        chooser = DefaultServerChooser()
        for uri in pair.uris():
            chooser.add(uri)
        ...
        pair.a.kill()                 # the client fails over to B
        pair.a.start()
        pair.wait_caught_up()         # A has everything B took meanwhile
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Literal

from ampsclient_server_stub.cluster import Cluster, ClusterNode

__all__ = ["ReplicatedPair"]


class ReplicatedPair:
    """Instances ``A`` and ``B`` (group ``A`` and ``B``) replicating to each other.

    Args:
        base_dir: each node's data directory is created below it (``A/``, ``B/``).
        sync: sync replication both ways (``False``: async).
        sow_topics: ``(topic, message type, keys)`` of SOW topics both nodes define.
        txlog_topics: ``(topic regex, message type)`` recorded (and replicated) by both.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        sync: bool = True,
        sow_topics: Iterable[tuple[str, str, tuple[str, ...]]] = (),
        txlog_topics: Iterable[tuple[str, str | None]] = ((".*", "json"),),
    ) -> None:
        self.cluster = Cluster(Path(base_dir), txlog_topics=tuple(txlog_topics))
        """The underlying cluster (its admin commands, its journals)."""
        topics = list(sow_topics)
        self.a: ClusterNode = self.cluster.add("A", sow_topics=topics)
        """Instance ``A`` (``uri()``, ``kill()``, ``start()``, ``log_lines()``...)."""
        self.b: ClusterNode = self.cluster.add("B", sow_topics=topics)
        """Instance ``B``."""
        self.cluster.replicate(self.a, self.b, sync=sync)
        self.cluster.replicate(self.b, self.a, sync=sync)

    def start(self, timeout: float = 30.0) -> ReplicatedPair:
        """Start both (in parallel) and wait until each replicates to the other."""
        self.cluster.start(timeout=timeout)
        self.cluster.wait_streaming(timeout)
        return self

    def stop(self) -> None:
        """Stop both (clean shutdown; ``kill -9`` when one hangs)."""
        self.cluster.stop()

    def uris(self, kind: Literal["tcp", "ws"] = "tcp", message_type: str = "json") -> list[str]:
        """``[A's URI, B's URI]``: what an HA client's server chooser is given."""
        return [self.a.uri(kind, message_type), self.b.uri(kind, message_type)]

    def partition(self) -> None:
        """Cut the replication link (both refuse it) until :meth:`heal`."""
        self.cluster.partition(self.a, self.b)

    def heal(self) -> None:
        """Restore the link cut by :meth:`partition`."""
        self.cluster.heal(self.a, self.b)

    def wait_streaming(self, timeout: float = 20.0) -> None:
        """Wait until each running node replicates to the other (after a restart, a heal)."""
        self.cluster.wait_streaming(timeout)

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Wait until each running node has pushed, and had acknowledged, everything."""
        self.cluster.wait_caught_up(timeout)

    def __enter__(self) -> ReplicatedPair:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
