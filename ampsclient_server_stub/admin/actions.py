"""Admin actions under ``/amps/administrator`` (the AMPS monitoring guide's layout).

As in AMPS, retrieving an action's URI performs it (``GET``; ``POST`` works too):

* ``/amps/administrator/clients/<client>/disconnect``: disconnect a client (by client name,
  or ``connection-<id>`` before it logged on);
* ``/amps/administrator/replication/<destination>/downgrade`` and ``.../upgrade``: switch a
  sync destination's acknowledgment to async and back;
* ``/amps/administrator/queues/<queue>/enable_proxied_transfer`` and
  ``.../disable_proxied_transfer``: let this instance take over the messages of a replicated
  queue owned by instances it cannot reach (disaster recovery: duplicates are possible, see
  ``ampsclient_server_stub.queues.replicated``);
* ``/amps/administrator/journal/compress?age=1h``, ``.../archive?age=1d`` and
  ``.../remove?age=7d``: compress, archive (to ``<JournalArchiveDirectory>``; 409 without one)
  or remove the journal files whose newest record is older than ``age`` (files a replay or a
  replication destination still needs are kept; archived and compressed files stay
  replayable).

Every action answers a JSON object ``{"action": ..., "result": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ..config import ConfigError, parse_duration
from ..queues.plug import queue_engine
from .http import HttpError, Request
from .stats import client_key

if TYPE_CHECKING:
    from .host import AdminHost

__all__ = ["ACTIONS", "run_action"]

ACTIONS: Final[Mapping[str, str]] = {
    "clients/<client>/disconnect": "disconnect a client",
    "replication/<destination>/downgrade": "make a sync destination's acknowledgment async",
    "replication/<destination>/upgrade": "restore sync acknowledgment of a downgraded destination",
    "queues/<queue>/enable_proxied_transfer": "take over messages owned by unreachable instances",
    "queues/<queue>/disable_proxied_transfer": "stop taking over messages (the default)",
    "journal/compress?age=<duration>": "compress journal files older than age",
    "journal/remove?age=<duration>": "remove journal files older than age",
    "journal/archive?age=<duration>": "move journal files older than age to the archive directory",
}
"""The actions and what they do (``GET /amps/administrator`` lists them)."""


def _age(request: Request) -> float:
    values = request.query.get("age")
    if not values:
        raise HttpError(400, "this action needs an age, e.g. ?age=1h")
    try:
        return parse_duration(values[0])
    except ConfigError as exc:
        raise HttpError(400, f"bad age: {exc}") from None


async def run_action(server: AdminHost, request: Request) -> dict[str, Any]:
    """Run the action ``request.path`` names (after ``amps/administrator``).

    Raises:
        HttpError: 404 for an unknown action, client or destination; 400 for a bad argument;
            501 for an action this server does not offer.
    """
    parts = request.path[2:]
    if len(parts) == 3 and parts[0] == "clients" and parts[2] == "disconnect":
        broker = server.broker
        target = parts[1]
        conn = None
        if broker is not None:
            conn = next((c for c in broker.connections if client_key(c) == target), None)
        if broker is None or conn is None:
            raise HttpError(404, f"no client {target!r}")
        broker.kick(conn, "disconnected by the admin interface")
        return {"action": "disconnect", "client": target, "result": True}
    if len(parts) == 3 and parts[0] == "replication" and parts[2] in ("downgrade", "upgrade"):
        manager = server.replication
        if manager is None:
            raise HttpError(404, "replication is not configured on this instance")
        destination = parts[1]
        if destination not in manager.outbounds:
            raise HttpError(404, f"no replication destination {destination!r}")
        if parts[2] == "downgrade":
            changed = manager.downgrade(destination)
        else:
            changed = manager.upgrade(destination)
        return {"action": parts[2], "destination": destination, "result": changed}
    if len(parts) == 3 and parts[0] == "queues" and parts[2].endswith("_proxied_transfer"):
        return _proxied_transfer(server, parts[1], parts[2])
    if len(parts) == 2 and parts[0] == "journal" and parts[1] in ("compress", "remove", "archive"):
        if server.journal is None:
            raise HttpError(404, "this instance has no transaction log")
        age = _age(request)
        if parts[1] == "compress":
            files = await server.compress_journal(age)
        elif parts[1] == "archive":
            if server.journal.archive_directory is None:
                raise HttpError(409, "this instance has no <JournalArchiveDirectory> to archive to")
            files = await server.archive_journal(age)
        else:
            files = await server.prune_journal(age)
        return {"action": parts[1], "age": age, "result": [p.name for p in files]}
    raise HttpError(404, "no such admin action: /" + "/".join(request.path))


def _proxied_transfer(server: AdminHost, queue: str, action: str) -> dict[str, Any]:
    if action not in ("enable_proxied_transfer", "disable_proxied_transfer"):
        raise HttpError(404, f"no such queue action {action!r}")
    engine = queue_engine(server.broker)
    if engine is None or not any(q.name == queue for q in engine.queues.values()):
        raise HttpError(404, f"no queue {queue!r}")
    replica = engine.replica
    if replica is None or all(
        q.config.kind == "LocalQueue" for q in engine.queues.values() if q.name == queue
    ):
        raise HttpError(409, f"queue {queue!r} is not a replicated queue")
    changed = replica.set_proxied(queue, action.startswith("enable"))
    return {"action": action, "queue": queue, "result": changed}
