"""The admin interface of the reference server: statistics, admin actions, Prometheus metrics
and a live dashboard over HTTP, at the ``<Admin><InetAddr>`` address (or ``--admin-port``).

* :mod:`.http`: a small, strict HTTP/1.1 server core (limits, deadlines, status codes);
* :mod:`.stats`: the ``/amps/instance`` statistics tree and its sampler (rates over a window);
* :mod:`.system`: the ``/amps/host`` part (CPUs, memory, disks, network from ``/proc``);
* :mod:`.tree`: walking the tree by path, AMPS' JSON and XML forms of a node;
* :mod:`.actions`: ``/amps/administrator`` actions (disconnect, replication downgrade/upgrade,
  journal compress/remove);
* :mod:`.metrics`: ``/metrics`` in Prometheus' text format;
* :mod:`.auth`: the server's own authentication and entitlements, over HTTP Basic;
* :mod:`.server`: :class:`AdminServer`, the listener and its routes; ``static/dashboard.html``
  is the dashboard page.
"""

from __future__ import annotations

from .http import HttpError
from .server import AdminServer

__all__ = ["AdminServer", "HttpError"]
