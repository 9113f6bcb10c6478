"""What the admin interface needs of the running server.

:class:`~ampsclient_server_stub.server.ReferenceServer` fits :class:`AdminHost`; the server
imports the admin package, the admin package never imports the server (no import cycle).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..config import ServerConfig
    from ..engine.broker import Broker
    from ..engine.journal import Journal
    from ..replication.manager import ReplicationManager
    from ..security.policy import ServerSecurity

__all__ = ["AdminHost"]


class AdminHost(Protocol):
    """The server as the admin interface reads and drives it."""

    config: ServerConfig
    journal: Journal | None
    broker: Broker | None
    security: ServerSecurity | None
    replication: ReplicationManager | None

    def uri(self, kind: str = "tcp", message_type: str = "json") -> str:
        """A client URI of a listener (``kind``: tcp, ws, tcps, wss).

        Raises:
            RuntimeError: no listener of that kind.
        """

    def statistics(self) -> dict[str, int]:
        """The server's counters."""

    async def prune_journal(self, older_than: float) -> list[Path]:
        """Remove journal files older than ``older_than`` seconds."""

    async def compress_journal(self, older_than: float) -> list[Path]:
        """Compress journal files older than ``older_than`` seconds."""

    async def archive_journal(self, older_than: float) -> list[Path]:
        """Move journal files older than ``older_than`` seconds to the archive directory."""
