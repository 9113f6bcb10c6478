"""ampsclient_server_stub: a compact AMPS-compatible reference server.

Speaks the AMPS wire protocol (``shared/protocol.md``) over TCP and WebSocket, well enough
for the official AMPS clients and for ``ampsclient``'s own tests::

    from ampsclient_server_stub import ServerThread

    with ServerThread() as server:
        print(server.uri("tcp"))     # tcp://127.0.0.1:<free port>/amps/json

Run it from the command line with ``python -m ampsclient_server_stub`` (or
``ampsclient-server``).

The package face loads lazily (PEP 562), as ``ampsclient``'s does: ``import
ampsclient_server_stub.pytest_plugin`` (which pytest loads at start-up in every project that
installs this package) imports no server until a fixture starts one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import ReferenceServer, ServerThread, run_server

__all__ = ["ReferenceServer", "ServerThread", "run_server"]

if not TYPE_CHECKING:  # a module __getattr__ seen by mypy would make every typo an ``Any``

    def __getattr__(name: str) -> Any:
        """Import :mod:`.server` on first use of one of its names; cache the value."""
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(".server", __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The loaded names plus the lazy ones."""
    return sorted({*globals(), *__all__})
