"""Who may use the admin interface: the server's own authentication and entitlements.

When the configuration has an ``<Authentication>`` (at the instance level, else the first
transport's), every admin request must carry HTTP Basic credentials that this module accepts
(``401`` with a ``WWW-Authenticate`` challenge otherwise). When it has an ``<Entitlement>``,
the user must also be entitled to the request path under the ``admin`` operation (``403``
otherwise): in a users file, ``"admin": ["^/amps/instance"]`` allows the statistics only,
``"admin": [".*"]`` everything. ``<Admin><AnonymousPaths>`` (a regular expression searched in
the path, as in AMPS) skips both checks for the paths it matches.

Failed logons count towards the messaging logons' lockout (``LogonFailureLimit``,
:mod:`..security.throttle`): a user locked out there is refused here too, and guessing here
locks it out.

A ``challenge-response`` module cannot work over Basic authentication: its users are refused
(``401``). Password checks run in a worker thread, one at a time, so a client guessing
passwords never stalls the messaging ports.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import TYPE_CHECKING, Any

from .http import HttpError, Request

if TYPE_CHECKING:
    from ..regexes import SafeRegex
    from ..security.auth import AuthenticationModule, EntitlementModule
    from ..security.policy import ServerSecurity
    from ..security.throttle import LogonThrottle

__all__ = ["AdminAuth"]


class AdminAuth:
    """Checks admin requests against the server's security modules.

    Args:
        security: the running server's :class:`~ampsclient_server_stub.security.ServerSecurity`
            (``None``: no checks).
        realm: the Basic realm announced in ``WWW-Authenticate``.
        anonymous: paths that need neither credentials nor entitlement.
    """

    def __init__(
        self,
        security: ServerSecurity | None,
        *,
        realm: str = "AMPS Admin",
        anonymous: SafeRegex | None = None,
    ) -> None:
        self.auth: AuthenticationModule | None = None
        self.entitlements: EntitlementModule | None = None
        self.throttle: LogonThrottle | None = None
        """The messaging logons' lockout, shared: guessing here locks the user out there too."""
        if security is not None:
            self.throttle = security.logon_throttle
            policies = [security.default, *security.policies.values()]
            self.auth = next((p.auth for p in policies if p.auth is not None), None)
            self.entitlements = next(
                (p.entitlements for p in policies if p.entitlements is not None), None
            )
        self.realm = realm
        self.anonymous = anonymous
        self._lock = asyncio.Lock()
        self.failures = 0
        """Requests refused with 401 or 403."""

    @property
    def enabled(self) -> bool:
        """Whether requests are checked at all."""
        return self.auth is not None or self.entitlements is not None

    def _challenge(self, why: str) -> HttpError:
        self.failures += 1
        realm = self.realm.replace('"', "")
        return HttpError(401, why, {"WWW-Authenticate": f'Basic realm="{realm}", charset="UTF-8"'})

    async def check(self, request: Request) -> str | None:
        """The authenticated user of ``request`` (``None`` when nobody needs to be).

        Raises:
            HttpError: 401 (no or wrong credentials), 403 (not entitled to the path).
        """
        path = "/" + "/".join(request.path)
        if not self.enabled or (self.anonymous is not None and self.anonymous.test(path)):
            return None
        user, password = self._credentials(request)
        if self.auth is not None:
            if user is None:
                raise self._challenge("authentication required")
            throttle = self.throttle
            if throttle is not None and throttle.locked(user, None) is not None:
                raise self._challenge("authentication failed")  # locked out: not checked
            state: dict[str, Any] = {}
            auth = self.auth
            async with self._lock:
                verdict = await asyncio.to_thread(auth.authenticate, user, password, state)
            if verdict.status != "success":
                if throttle is not None:
                    throttle.failed(user, None)
                raise self._challenge("authentication failed")
            if throttle is not None:
                throttle.succeeded(user)
        if self.entitlements is not None and not self.entitlements.allowed(user, "admin", path):
            self.failures += 1
            raise HttpError(403, f"user {user!r} is not entitled to {path}")
        return user

    def _credentials(self, request: Request) -> tuple[str | None, str]:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if not header:
            return None, ""
        if scheme.lower() != "basic":
            raise self._challenge("only Basic authentication is supported")
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise self._challenge("malformed Basic credentials") from None
        user, colon, password = decoded.partition(":")
        if not colon:
            raise self._challenge("malformed Basic credentials")
        return user, password
