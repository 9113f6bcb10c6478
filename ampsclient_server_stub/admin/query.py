"""The dashboard's query panel: where its browser connects, and how it logs on.

The panel (``static/query.js``) runs read-only ``sow``, ``subscribe`` and ``sow_and_subscribe``
commands on the server's own WebSocket transport, speaking AMPS' JSON-over-WebSocket frames
from the browser. Before connecting it asks ``POST /query/logon`` (behind the admin
authentication, with the admin token and same-origin checks of actions) for:

* ``uri``: the WebSocket transport to dial (``ws://HOST:PORT/amps/json``);
* ``user_id`` and ``password``: when the admin interface authenticated a user, a short-lived,
  single-use logon token for that user (:mod:`~ampsclient_server_stub.security.logon_tokens`)
  that the transport accepts as the logon password; ``null`` when the admin interface has no
  authentication: the page then asks the user for the transport's credentials, if it needs
  any. The user's password never reaches the page either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .http import HttpError

if TYPE_CHECKING:
    from .host import AdminHost

__all__ = ["query_logon"]


def query_logon(server: AdminHost, user: str | None) -> dict[str, Any]:
    """The answer of ``POST /query/logon`` for the admin user ``user`` (``None``: the admin
    interface authenticated nobody).

    Raises:
        HttpError: 409 when the server has no WebSocket transport.
    """
    try:
        uri = server.uri("ws", "json")
    except RuntimeError:
        raise HttpError(
            409,
            "the query panel needs a WebSocket transport (<Transport><Type>ws</Type>...)",
        ) from None
    password: str | None = None
    expires_in: float | None = None
    security = server.security
    if user is not None and security is not None:
        tokens = security.logon_tokens
        password = tokens.issue(user)
        expires_in = tokens.ttl
    return {"uri": uri, "user_id": user, "password": password, "expires_in": expires_in}
