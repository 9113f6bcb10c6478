"""Authenticators: the logon hook for credentials and challenge/retry flows."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Final, Protocol, runtime_checkable

from .exceptions import AuthenticationError

__all__ = [
    "CHALLENGE_SCHEME",
    "Authenticator",
    "ChallengeResponseAuthenticator",
    "DefaultAuthenticator",
    "challenge_response",
]

CHALLENGE_SCHEME: Final = "hmac-sha256"
"""The challenge-response scheme spoken by :class:`ChallengeResponseAuthenticator`."""

_MAX_ITERATIONS: Final = 10_000_000


@runtime_checkable
class Authenticator(Protocol):
    """What the client calls during logon (official names).

    ``authenticate`` returns the password to send; ``retry`` answers a ``retry`` status
    (a challenge) with a new password; ``completed`` is told the outcome.
    """

    def authenticate(self, user: str | None, password: str | None) -> str | None: ...

    def retry(self, user: str | None, password: str | None) -> str | None: ...

    def completed(self, user: str | None, password: str | None, reason: str | None) -> None: ...


class DefaultAuthenticator:
    """Sends the URI's password as is; a challenge fails with :class:`AuthenticationError`."""

    def authenticate(self, user: str | None, password: str | None) -> str | None:
        return password

    def retry(self, user: str | None, password: str | None) -> str | None:
        raise AuthenticationError("the server asked to retry the logon (no authenticator for it)")

    def completed(self, user: str | None, password: str | None, reason: str | None) -> None:
        return None


def challenge_response(user: str, password: str, challenge: str) -> str:
    """The answer to a ``hmac-sha256`` logon challenge.

    The challenge is ``hmac-sha256:<nonce>:<salt base64>:<iterations>``; the answer is
    ``hmac-sha256:<hex HMAC-SHA256(PBKDF2-SHA256(password, salt, iterations), nonce:user)>``.
    The password itself never crosses the wire.

    Raises:
        AuthenticationError: the challenge is not in that form.
    """
    parts = challenge.split(":")
    if len(parts) != 4 or parts[0] != CHALLENGE_SCHEME:
        raise AuthenticationError("unsupported logon challenge from the server")
    _, nonce, salt_text, iterations_text = parts
    try:
        salt = base64.b64decode(salt_text, validate=True)
        iterations = int(iterations_text)
    except ValueError:
        raise AuthenticationError("malformed logon challenge from the server") from None
    if not 1 <= iterations <= _MAX_ITERATIONS or not nonce:
        raise AuthenticationError("malformed logon challenge from the server")
    key = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    digest = hmac.new(key, f"{nonce}:{user}".encode(), hashlib.sha256).hexdigest()
    return f"{CHALLENGE_SCHEME}:{digest}"


class ChallengeResponseAuthenticator:
    """Answers the server's ``retry`` challenge without sending the password.

    The first logon carries no password; the server replies ``status: retry`` with a challenge
    in ``pw`` and :meth:`retry` answers it (see :func:`challenge_response`). Use with a server
    transport whose authentication module is ``challenge-response``.

    Args:
        password: the password (default: the URI's).
    """

    def __init__(self, password: str | None = None) -> None:
        self._password = password
        self._rounds = 0

    def authenticate(self, user: str | None, password: str | None) -> str | None:
        if self._password is None:
            self._password = password
        self._rounds = 0
        return ""

    def retry(self, user: str | None, password: str | None) -> str | None:
        self._rounds += 1
        if self._rounds > 3:
            raise AuthenticationError("the server kept asking to retry the logon")
        if not password:
            raise AuthenticationError("the server sent an empty logon challenge")
        return challenge_response(user or "", self._password or "", password)

    def completed(self, user: str | None, password: str | None, reason: str | None) -> None:
        self._rounds = 0
