"""ampsclient: a pure-Python, asyncio-native client for the AMPS messaging protocol.

``import ampsclient as AMPS`` gives scripts written for the official AMPS Python client the
names they use (``Client``, ``Command``, ``Message``, ``AMPSException``...); the Pythonic
API (``AsyncClient``, ``async with``, keyword-only options, ``async for``) sits beside them.
"""

from . import exceptions
from .authenticator import Authenticator, ChallengeResponseAuthenticator, DefaultAuthenticator
from .client import CLIENT_VERSION, AsyncClient, ConnectionEvent, ConnectionState
from .command import Command
from .exceptions import *  # noqa: F403 - the exception tree, official aliases included
from .protocol.acks import AckType
from .protocol.bookmarks import (
    EPOCH,
    MOST_RECENT,
    NOW,
    Bookmarks,
    bookmark_list,
    range_bookmark,
    timestamp_bookmark,
)
from .protocol.message import Message
from .protocol.options import Options
from .stream import MessageStream
from .sync import Client
from .tls import client_context
from .uri import URI, parse_uri

__version__ = "0.1.0"

__all__ = [
    "CLIENT_VERSION",
    "EPOCH",
    "MOST_RECENT",
    "NOW",
    "Bookmarks",
    "Options",
    "bookmark_list",
    "client_context",
    "range_bookmark",
    "timestamp_bookmark",
    "URI",
    "AckType",
    "AsyncClient",
    "Authenticator",
    "ChallengeResponseAuthenticator",
    "Client",
    "Command",
    "ConnectionEvent",
    "ConnectionState",
    "DefaultAuthenticator",
    "Message",
    "MessageStream",
    "__version__",
    "parse_uri",
    *exceptions.__all__,
]
