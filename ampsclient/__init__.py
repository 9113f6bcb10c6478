"""ampsclient: a pure-Python, asyncio-native client for the AMPS messaging protocol.

``import ampsclient as AMPS`` gives scripts written for the official AMPS Python client the
names they use (``Client``, ``Command``, ``Message``, ``AMPSException``...); the Pythonic
API (``AsyncClient``, ``async with``, keyword-only options, ``async for``) sits beside them.

The package face loads lazily (PEP 562): ``import ampsclient.protocol`` (what the reference
server and the tools use) imports neither the client, nor the stores, nor the sync facade;
``ampsclient.Client`` imports :mod:`ampsclient.sync` on first use. To export a name, add it
to ``_LAZY`` (name -> module) *and* to the ``TYPE_CHECKING`` block below, which is what mypy
and IDEs read; ``tests/typing/test_package_face.py`` checks that the two agree.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import exceptions
from .exceptions import *  # noqa: F403 - the exception tree, official aliases included

__version__ = "0.1.0"

# One row per public name: the module (relative to this package) that defines it.
_LAZY: dict[str, str] = {
    "Authenticator": ".authenticator",
    "ChallengeResponseAuthenticator": ".authenticator",
    "DefaultAuthenticator": ".authenticator",
    "CLIENT_VERSION": ".client",
    "AsyncClient": ".client",
    "ConnectionEvent": ".client",
    "ConnectionState": ".client",
    "Command": ".command",
    "AckType": ".protocol.acks",
    "EPOCH": ".protocol.bookmarks",
    "MOST_RECENT": ".protocol.bookmarks",
    "NOW": ".protocol.bookmarks",
    "Bookmarks": ".protocol.bookmarks",
    "bookmark_list": ".protocol.bookmarks",
    "range_bookmark": ".protocol.bookmarks",
    "timestamp_bookmark": ".protocol.bookmarks",
    "Message": ".protocol.message",
    "Options": ".protocol.options",
    "MessageStream": ".stream",
    "Client": ".sync",
    "client_context": ".tls",
    "URI": ".uri",
    "parse_uri": ".uri",
}

# Subpackages and modules reachable as attributes (``ampsclient.stores``) without an import.
_SUBMODULES = frozenset(
    {
        "authenticator",
        "client",
        "command",
        "ha",
        "protocol",
        "spark",
        "stores",
        "stream",
        "sync",
        "tls",
        "transport",
        "uri",
    }
)

if TYPE_CHECKING:
    from .authenticator import (
        Authenticator as Authenticator,
        ChallengeResponseAuthenticator as ChallengeResponseAuthenticator,
        DefaultAuthenticator as DefaultAuthenticator,
    )
    from .client import (
        CLIENT_VERSION as CLIENT_VERSION,
        AsyncClient as AsyncClient,
        ConnectionEvent as ConnectionEvent,
        ConnectionState as ConnectionState,
    )
    from .command import Command as Command
    from .protocol.acks import AckType as AckType
    from .protocol.bookmarks import (
        EPOCH as EPOCH,
        MOST_RECENT as MOST_RECENT,
        NOW as NOW,
        Bookmarks as Bookmarks,
        bookmark_list as bookmark_list,
        range_bookmark as range_bookmark,
        timestamp_bookmark as timestamp_bookmark,
    )
    from .protocol.message import Message as Message
    from .protocol.options import Options as Options
    from .stream import MessageStream as MessageStream
    from .sync import Client as Client
    from .tls import client_context as client_context
    from .uri import URI as URI, parse_uri as parse_uri


if not TYPE_CHECKING:  # a module __getattr__ seen by mypy would make every typo an ``Any``

    def __getattr__(name: str) -> Any:
        """Import the module that defines ``name`` on first use (PEP 562); cache the value."""
        module = _LAZY.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module, __name__), name)
        elif name in _SUBMODULES:
            value = importlib.import_module(f".{name}", __name__)
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The loaded names plus the lazy ones, for ``dir(ampsclient)`` and completion."""
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


# A literal list (mypy reads it for ``from ampsclient import *``): _LAZY's keys, in order.
__all__ = [
    "CLIENT_VERSION",
    "EPOCH",
    "MOST_RECENT",
    "NOW",
    "URI",
    "AckType",
    "AsyncClient",
    "Authenticator",
    "Bookmarks",
    "ChallengeResponseAuthenticator",
    "Client",
    "Command",
    "ConnectionEvent",
    "ConnectionState",
    "DefaultAuthenticator",
    "Message",
    "MessageStream",
    "Options",
    "__version__",
    "bookmark_list",
    "client_context",
    "parse_uri",
    "range_bookmark",
    "timestamp_bookmark",
]
__all__ += exceptions.__all__
