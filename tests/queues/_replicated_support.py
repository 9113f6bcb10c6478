"""Helpers of the replicated-queue tests: a pair of real server processes replicating a
queue both ways, each with the admin HTTP interface (statistics, proxied transfer)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from ampsclient_server_stub.cluster import Cluster, ClusterNode
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.testing import wait_for

QUEUE = "work"
TOPIC = "orders"


def queue_xml(kind: str = "Queue", *, initial_owner: str | None = None, backlog: int = 10) -> str:
    owner = f"<InitialOwner>{initial_owner}</InitialOwner>" if initial_owner else ""
    return (
        f"<SOW><{kind}><Name>{QUEUE}</Name><MessageType>json</MessageType>"
        f"<UnderlyingTopic>{TOPIC}</UnderlyingTopic>{owner}"
        f"<MaxPerSubscriptionBacklog>{backlog}</MaxPerSubscriptionBacklog></{kind}></SOW>"
    )


def pair(base: Path, queue: str | None = None, *, b_queue: str | None = None) -> Cluster:
    """A started hot-hot pair ``A``/``B`` (sync both ways), a queue on each, admin on each
    (``node.admin_port``)."""
    cluster = Cluster(base)
    for name, xml in (("A", queue or queue_xml()), ("B", b_queue or queue or queue_xml())):
        port = free_port()
        node = cluster.add(
            name, extra_xml=xml + f"<Admin><InetAddr>127.0.0.1:{port}</InetAddr></Admin>"
        )
        node.admin_port = port  # type: ignore[attr-defined]
    a, b = cluster.node("A"), cluster.node("B")
    cluster.hot_hot(a, b)
    cluster.start()
    cluster.wait_streaming()
    return cluster


def http(node: ClusterNode, path: str) -> Any:
    """GET ``path`` on ``node``'s admin port (an action with the admin token, as a script
    does: read from ``/amps/administrator``, sent in the ``X-AMPS-Admin-Token`` header)."""
    port = node.admin_port  # type: ignore[attr-defined]
    headers = {}
    if path.startswith("/amps/administrator/"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/amps/administrator") as listing:
            headers["X-AMPS-Admin-Token"] = json.loads(listing.read())["token"]
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def stats(node: ClusterNode) -> dict[str, Any]:
    """The queue's statistics on ``node`` (admin HTTP)."""
    result: dict[str, Any] = http(node, f"/amps/instance/queues/{QUEUE}")
    return result


def wait_stat(node: ClusterNode, key: str, value: int, timeout: float = 45.0) -> None:
    wait_for(
        lambda: stats(node).get(key) == value,
        timeout=timeout,
        what=f"{node.name} {key} == {value}",
    )
