"""A loud warning when a listener is reachable beyond this machine without authentication.

The zero-configuration server lets anyone log on. That is fine on 127.0.0.1 (the default of
the command line and of the test harness); on any other address it means anyone on the network
may read and write every topic, so the server says so once per listener at start-up. The admin
interface makes the same check for its own port (:mod:`ampsclient_server_stub.admin.server`).
"""

from __future__ import annotations

import ipaddress
import logging

__all__ = ["is_loopback", "warn_if_exposed"]

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether a listening address reaches this machine only (``localhost``, 127.0.0.0/8,
    ``::1``); a wildcard address (``""``, ``0.0.0.0``, ``::``) is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_exposed(kind: str, host: str, port: int, *, authenticated: bool) -> bool:
    """Log a ``SECURITY WARNING`` when the ``kind`` listener on ``host:port`` is reachable
    beyond loopback and no authentication guards it. Returns whether it warned."""
    if authenticated or is_loopback(host):
        return False
    logger.warning(
        "SECURITY WARNING: the %s listener on %s:%d accepts connections beyond this machine "
        "without authentication: anyone who reaches it may log on and read or publish every "
        "topic. Configure <Authentication> or listen on 127.0.0.1.",
        kind,
        host or "every address",
        port,
    )
    return True
