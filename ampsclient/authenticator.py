"""Authenticators: the logon hook for credentials and challenge/retry flows."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .exceptions import AuthenticationError

__all__ = ["Authenticator", "DefaultAuthenticator"]


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
