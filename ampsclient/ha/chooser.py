"""Server choosers: which URI an HA client connects to next."""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable

from ..authenticator import Authenticator, DefaultAuthenticator
from ..exceptions import UsageError
from ..uri import redact

__all__ = ["DefaultServerChooser", "ServerChooser"]

log = logging.getLogger("ampsclient.ha")


class ServerChooser(abc.ABC):
    """Picks the URI (and authenticator) to connect to; told how each attempt went.

    Implement these four methods for a custom policy; the names are the official client's.
    """

    @abc.abstractmethod
    def get_current_uri(self) -> str | None:
        """The URI to try next (``None`` = no server known)."""

    def get_current_authenticator(self) -> Authenticator:
        """The authenticator for the current URI."""
        return DefaultAuthenticator()

    @abc.abstractmethod
    def report_failure(self, exception: BaseException, info: object = None) -> None:
        """The current URI failed (connect, logon, or a later disconnect)."""

    @abc.abstractmethod
    def report_success(self, info: object = None) -> None:
        """The current URI worked."""

    def get_error(self) -> str:
        """A description of the last failure."""
        return ""

    def add(self, uri: str, authenticator: Authenticator | None = None) -> ServerChooser:
        """Add a URI to choose from. :class:`DefaultServerChooser` does; a chooser that finds
        its servers otherwise refuses (so ``client.get_server_chooser().add(uri)``, the
        official idiom, is typed whatever chooser the client holds)."""
        raise UsageError(f"{type(self).__name__} does not take URIs through add()")

    def add_all(self, uris: Iterable[str]) -> ServerChooser:
        """Add several URIs (see :meth:`add`)."""
        raise UsageError(f"{type(self).__name__} does not take URIs through add_all()")


class DefaultServerChooser(ServerChooser):
    """Round-robin over a list of URIs: stay on a URI while it works, move on when it fails."""

    def __init__(self, *uris: str) -> None:
        self._uris: list[str] = []
        self._auths: list[Authenticator] = []
        self._index = 0
        self._error = ""
        for uri in uris:
            self.add(uri)

    def add(self, uri: str, authenticator: Authenticator | None = None) -> DefaultServerChooser:
        """Add a URI (with an authenticator of its own, optionally)."""
        self._uris.append(uri)
        self._auths.append(authenticator or DefaultAuthenticator())
        return self

    def add_all(self, uris: Iterable[str]) -> DefaultServerChooser:
        """Add several URIs."""
        for uri in uris:
            self.add(uri)
        return self

    def remove(self, uri: str) -> None:
        """Forget a URI."""
        i = self._uris.index(uri)
        del self._uris[i]
        del self._auths[i]
        if self._index >= len(self._uris):
            self._index = 0

    @property
    def uris(self) -> list[str]:
        """The URIs, in order."""
        return list(self._uris)

    def get_current_uri(self) -> str | None:
        return self._uris[self._index] if self._uris else None

    current_uri = property(get_current_uri)

    def get_current_authenticator(self) -> Authenticator:
        return self._auths[self._index] if self._auths else DefaultAuthenticator()

    def report_failure(self, exception: BaseException, info: object = None) -> None:
        self._error = f"{type(exception).__name__}: {exception}"
        if self._uris:
            log.info("server %s failed (%s); next", redact(self._uris[self._index]), self._error)
            self._index = (self._index + 1) % len(self._uris)

    def report_success(self, info: object = None) -> None:
        self._error = ""

    def get_error(self) -> str:
        return self._error

    def next(self) -> None:
        """Move to the next URI."""
        if self._uris:
            self._index = (self._index + 1) % len(self._uris)
