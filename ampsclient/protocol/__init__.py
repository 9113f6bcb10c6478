"""The AMPS wire protocol, sans-I/O: headers, framing, messages, acks, bookmarks, options.

Nothing in this package performs I/O or imports asyncio, socket, threading or websockets
(``tests/protocol/test_no_io.py`` enforces it). The client and the reference server both
use it for every byte they read and write.
"""

from .acks import AckType, format_ack_types, parse_ack_types
from .framing import (
    DEFAULT_MAX_FRAME_SIZE,
    TcpFramer,
    WsClientFramer,
    WsServerFramer,
    encode_ws_from_client,
    encode_ws_from_server,
    tcp_frame,
)
from .header import Header, decode_header, encode_header, escape
from .message import Message, body_offset, find_sids, split_sow_batch

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "AckType",
    "Header",
    "Message",
    "TcpFramer",
    "WsClientFramer",
    "WsServerFramer",
    "body_offset",
    "decode_header",
    "encode_header",
    "encode_ws_from_client",
    "encode_ws_from_server",
    "escape",
    "find_sids",
    "format_ack_types",
    "parse_ack_types",
    "split_sow_batch",
    "tcp_frame",
]
