"""Network listeners of the reference server: TCP (asyncio ``Protocol``) and WebSocket.

Both turn transport units into TCP-shaped AMPS payloads with the framers of
``ampsclient.protocol`` and hand them to the broker; the broker answers through
:class:`~ampsclient_server_stub.net.session.NetSession.send`, which batches writes per
event-loop iteration.
"""

from .session import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_WRITE_BUFFER, NetSession
from .tcp import TcpSession, start_tcp_listener
from .ws import WsSession, parse_ws_path, start_ws_listener

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_WRITE_BUFFER",
    "NetSession",
    "TcpSession",
    "WsSession",
    "parse_ws_path",
    "start_tcp_listener",
    "start_ws_listener",
]
