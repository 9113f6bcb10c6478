"""Short-lived, single-use logon tokens: how the admin dashboard's query panel logs on.

The admin interface authenticates its user over HTTP Basic; a page cannot read those
credentials back to send them in an AMPS logon on the WebSocket transport, and asking the user
to type them again is clumsy. So the admin server (``POST /query/logon``, behind the admin
authentication and the CSRF checks of actions) :meth:`issues <LogonTokens.issue>` a token for
the authenticated user; the page sends it as the logon password (``pw``) with that user name,
and the security guard :meth:`redeems <LogonTokens.redeem>` it before asking the
authentication module. A token:

* logs on only the user it was issued for (the messaging entitlements of that user apply);
* works once, within :data:`TOKEN_TTL` seconds;
* is random (256 bits) and never written anywhere but the page's memory.

Pure state with an injected monotonic clock; at most :data:`MAX_TOKENS` are outstanding (the
oldest go first).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

__all__ = ["MAX_TOKENS", "TOKEN_PREFIX", "TOKEN_TTL", "LogonTokens"]

TOKEN_TTL: Final = 60.0
"""Seconds a token may wait for its logon."""

MAX_TOKENS: Final = 1024
"""Outstanding tokens at most; issuing more forgets the oldest."""

TOKEN_PREFIX: Final = "amps-admin-logon."
"""Every token starts with this (a password that does not is never looked up)."""


class LogonTokens:
    """Issues and redeems single-use logon tokens.

    Args:
        ttl: seconds a token stays valid.
        clock: a monotonic clock (seconds).
    """

    def __init__(
        self, *, ttl: float = TOKEN_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self._tokens: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.issued = 0
        """Tokens issued."""
        self.redeemed = 0
        """Tokens that logged a user on."""

    def issue(self, user: str) -> str:
        """A new token that logs ``user`` on once within :attr:`ttl` seconds."""
        self._expire()
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self._tokens[token] = (user, self.clock() + self.ttl)
        while len(self._tokens) > MAX_TOKENS:
            self._tokens.popitem(last=False)
        self.issued += 1
        return token

    def redeem(self, user: str, password: str) -> bool:
        """Whether ``password`` is a valid token of ``user`` (it is then used up)."""
        if not password.startswith(TOKEN_PREFIX):
            return False
        self._expire()
        entry = self._tokens.get(password)
        if entry is None or not hmac.compare_digest(entry[0].encode(), user.encode()):
            return False
        del self._tokens[password]
        self.redeemed += 1
        return True

    def __len__(self) -> int:
        self._expire()
        return len(self._tokens)

    def _expire(self) -> None:
        now = self.clock()
        tokens = self._tokens
        while tokens:
            token, (_, deadline) = next(iter(tokens.items()))
            if deadline > now:
                break
            del tokens[token]
