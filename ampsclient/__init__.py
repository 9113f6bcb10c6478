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
from ._version import __version__
from .exceptions import *  # noqa: F403 - the exception tree, official aliases included

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
    "HAClient": ".sync",
    "VERSION": ".compat",
    "CMessageHandler": ".compat",
    "CompositeMessageBuilder": ".compat",
    "CompositeMessageParser": ".compat",
    "FIXBuilder": ".compat",
    "FIXShredder": ".compat",
    "NVFIXBuilder": ".compat",
    "NVFIXShredder": ".compat",
    "Reason": ".compat",
    "Store": ".compat",
    "VersionInfo": ".compat",
    "ssl_get_context": ".compat",
    "ssl_init": ".compat",
    "ssl_load_verify_locations": ".compat",
    "ssl_set_verify": ".compat",
    "ConnectionError": ".exceptions",  # official name; not in __all__ (shadows a builtin)
    "DefaultServerChooser": ".ha.chooser",
    "ExponentialDelayStrategy": ".ha.reconnect",
    "FixedDelayStrategy": ".ha.reconnect",
    "MemoryPublishStore": ".stores.publish.memory",
    "PublishStore": ".stores.publish.official",
    "HybridPublishStore": ".stores.publish.official",
    "MemoryBookmarkStore": ".stores.bookmark.memory",
    "MMapBookmarkStore": ".stores.bookmark.file",
    "RingBookmarkStore": ".stores.bookmark.file",
    "RecoveryPoint": ".stores.recovery.base",
    "SOWRecoveryPointAdapter": ".stores.recovery.sow",
    "ConflatingRecoveryPointAdapter": ".stores.recovery.conflating",
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
    from .compat import (
        VERSION as VERSION,
        CMessageHandler as CMessageHandler,
        CompositeMessageBuilder as CompositeMessageBuilder,
        CompositeMessageParser as CompositeMessageParser,
        FIXBuilder as FIXBuilder,
        FIXShredder as FIXShredder,
        NVFIXBuilder as NVFIXBuilder,
        NVFIXShredder as NVFIXShredder,
        Reason as Reason,
        Store as Store,
        VersionInfo as VersionInfo,
        ssl_get_context as ssl_get_context,
        ssl_init as ssl_init,
        ssl_load_verify_locations as ssl_load_verify_locations,
        ssl_set_verify as ssl_set_verify,
    )
    from .ha.chooser import DefaultServerChooser as DefaultServerChooser
    from .ha.reconnect import (
        ExponentialDelayStrategy as ExponentialDelayStrategy,
        FixedDelayStrategy as FixedDelayStrategy,
    )
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
    from .stores.bookmark.file import (
        MMapBookmarkStore as MMapBookmarkStore,
        RingBookmarkStore as RingBookmarkStore,
    )
    from .stores.bookmark.memory import MemoryBookmarkStore as MemoryBookmarkStore
    from .stores.publish.memory import MemoryPublishStore as MemoryPublishStore
    from .stores.publish.official import (
        HybridPublishStore as HybridPublishStore,
        PublishStore as PublishStore,
    )
    from .stores.recovery.base import RecoveryPoint as RecoveryPoint
    from .stores.recovery.conflating import (
        ConflatingRecoveryPointAdapter as ConflatingRecoveryPointAdapter,
    )
    from .stores.recovery.sow import SOWRecoveryPointAdapter as SOWRecoveryPointAdapter
    from .stream import MessageStream as MessageStream
    from .sync import Client as Client, HAClient as HAClient
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
    "VERSION",
    "AckType",
    "AsyncClient",
    "Authenticator",
    "Bookmarks",
    "CMessageHandler",
    "ChallengeResponseAuthenticator",
    "Client",
    "Command",
    "CompositeMessageBuilder",
    "CompositeMessageParser",
    "ConflatingRecoveryPointAdapter",
    "ConnectionEvent",
    "ConnectionState",
    "DefaultAuthenticator",
    "DefaultServerChooser",
    "ExponentialDelayStrategy",
    "FIXBuilder",
    "FIXShredder",
    "FixedDelayStrategy",
    "HAClient",
    "HybridPublishStore",
    "MMapBookmarkStore",
    "MemoryBookmarkStore",
    "MemoryPublishStore",
    "Message",
    "MessageStream",
    "NVFIXBuilder",
    "NVFIXShredder",
    "Options",
    "PublishStore",
    "Reason",
    "RecoveryPoint",
    "RingBookmarkStore",
    "SOWRecoveryPointAdapter",
    "Store",
    "VersionInfo",
    "__version__",
    "bookmark_list",
    "client_context",
    "parse_uri",
    "range_bookmark",
    "ssl_get_context",
    "ssl_init",
    "ssl_load_verify_locations",
    "ssl_set_verify",
    "timestamp_bookmark",
]
__all__ += exceptions.__all__
