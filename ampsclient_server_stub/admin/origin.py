"""Who may send a request to the admin port: ``Host`` checks and the CSRF defence of actions.

Two browser attacks reach an admin port that listens on a private address:

* **Cross-site requests.** Any web page the operator opens can make the browser send a request
  to ``http://127.0.0.1:<admin port>/...`` (an ``<img>``, a form, a ``fetch`` in ``no-cors``
  mode). It cannot read the answer, but an action runs all the same. As in AMPS, retrieving an
  action's URI performs it (``GET``; ``POST`` works too), so every action must prove it comes
  from the operator: it carries the instance's **admin token** (the ``X-AMPS-Admin-Token``
  header, a ``token`` query parameter, or a ``token`` field of a form body), which a page of
  another site cannot read. A request a browser marks as cross-site (``Sec-Fetch-Site``) or
  whose ``Origin`` is not the admin port's own is refused whatever it carries.
* **DNS rebinding.** A name of the attacker's resolves first to the attacker, then to
  127.0.0.1: the page is then same-origin with the admin port and could read client names and
  topics. The ``Host`` field of every request must name this interface: an IP address,
  ``localhost``, the address it listens on, this machine's host name (when it listens on every
  address), or a name listed in ``<Admin><AllowedHosts>``. Anything else is answered 421.

The token is random, made when the server starts; the dashboard page carries it, and
``GET /amps/administrator`` answers it (both readable only by a same-origin page or a script,
and behind the admin authentication when it is configured).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from collections.abc import Iterable
from typing import Final
from urllib.parse import parse_qs, urlsplit

from ..net.exposure import is_loopback
from .http import HttpError, Request

__all__ = ["TOKEN_FIELD", "TOKEN_HEADER", "RequestOrigin", "is_loopback"]

TOKEN_HEADER: Final = "X-AMPS-Admin-Token"
"""The request header that carries the admin token."""

TOKEN_FIELD: Final = "token"
"""The query parameter (or form field) that carries the admin token."""

_WILDCARDS: Final = ("", "0.0.0.0", "::", "*")
_LOCAL_NAMES: Final = ("localhost", "127.0.0.1", "::1")


def _host_name(value: str) -> str | None:
    """The host part of a ``Host`` field (``[::1]:8085`` -> ``::1``), ``None`` if malformed."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (end + 1 < len(value) and value[end + 1] != ":"):
            return None
        return value[1:end]
    name, _, port = value.rpartition(":") if ":" in value else (value, "", "")
    if port and not port.isdigit():
        return None
    return (name or value).rstrip(".")


class RequestOrigin:
    """The ``Host`` check of every request and the CSRF check of actions.

    Args:
        bind_host: the address the admin interface listens on.
        allowed_hosts: further names (``<Admin><AllowedHosts>``, comma separated there).
    """

    def __init__(self, *, bind_host: str, allowed_hosts: Iterable[str] = ()) -> None:
        names = {*_LOCAL_NAMES, *(h.strip().lower().rstrip(".") for h in allowed_hosts)}
        if bind_host.strip("[]") in _WILDCARDS:
            names.add(socket.gethostname().lower())
        else:
            names.add(bind_host.strip("[]").lower())
        names.discard("")
        self.names = frozenset(names)
        """Host names (not IP addresses, which are always accepted) this interface answers."""
        self.token = secrets.token_urlsafe(32)
        """The admin token actions must carry."""
        self.refused = 0
        """Requests refused by these checks."""

    def _refuse(self, status: int, reason: str) -> HttpError:
        self.refused += 1
        return HttpError(status, reason)

    def check_host(self, request: Request) -> None:
        """Refuse (421) a request whose ``Host`` does not name this interface."""
        raw = request.headers.get("host")
        if raw is None:  # HTTP/1.0 without Host: not a browser of today
            return
        name = _host_name(raw)
        if name is None:
            raise self._refuse(400, f"malformed Host field {raw!r}")
        try:
            ipaddress.ip_address(name)
            return
        except ValueError:
            pass
        if name not in self.names:
            raise self._refuse(
                421,
                f"Host {name!r} does not name this admin interface (allowed: IP addresses, "
                f"{', '.join(sorted(self.names))}; add a name to <Admin><AllowedHosts>)",
            )

    def check_action(self, request: Request) -> None:
        """Refuse (403) an action that is cross-site or does not carry the admin token."""
        site = request.headers.get("sec-fetch-site", "").strip().lower()
        if site and site not in ("same-origin", "none"):
            raise self._refuse(403, f"cross-site admin action refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin.strip())
            host = request.headers.get("host", "").strip().lower()
            if parts.scheme not in ("http", "https") or parts.netloc.lower() != host:
                raise self._refuse(403, f"admin action from another origin refused ({origin})")
        sent = self._token(request)
        if sent is None:
            raise self._refuse(
                403,
                f"admin actions need the admin token (CSRF defence): read it from "
                f"GET /amps/administrator (field {TOKEN_FIELD!r}) and send it in the "
                f"{TOKEN_HEADER} header or as ?{TOKEN_FIELD}=",
            )
        if not hmac.compare_digest(sent.encode(), self.token.encode()):
            raise self._refuse(403, "wrong admin token")

    @staticmethod
    def _token(request: Request) -> str | None:
        header = request.headers.get(TOKEN_HEADER.lower())
        if header:
            return header.strip()
        values = request.query.get(TOKEN_FIELD)
        if values:
            return values[0]
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if request.body and kind == "application/x-www-form-urlencoded":
            try:
                form = parse_qs(request.body.decode("ascii"), keep_blank_values=True)
            except UnicodeDecodeError:
                return None
            if form.get(TOKEN_FIELD):
                return form[TOKEN_FIELD][0]
        return None
