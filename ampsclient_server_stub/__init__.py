"""ampsclient_server_stub: a compact AMPS-compatible reference server.

Speaks the AMPS wire protocol (``shared/protocol.md``) over TCP and WebSocket, well enough
for the official AMPS clients and for ``ampsclient``'s own tests::

    from ampsclient_server_stub import ServerThread

    with ServerThread() as server:
        print(server.uri("tcp"))     # tcp://127.0.0.1:<free port>/amps/json

Run it from the command line with ``python -m ampsclient_server_stub`` (or
``ampsclient-server``).
"""

from .server import ReferenceServer, ServerThread, run_server

__all__ = ["ReferenceServer", "ServerThread", "run_server"]
