"""Coverage-guided fuzzing with atheris (optional: ``pip install atheris``).

    python tests/fuzz/atheris_fuzz.py -atheris_runs=200000

One input is routed by its first byte to the header reader, the TCP framer, the WebSocket
server framer, the filter parser, the bookmark parser or the XML config reader; anything but
their typed errors is a crash.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from ampsclient.exceptions import InvalidBookmarkError, ProtocolError
    from ampsclient.protocol.bookmarks import parse_bookmark
    from ampsclient.protocol.framing import TcpFramer, WsServerFramer
    from ampsclient.protocol.header import decode_header
    from ampsclient_server_stub.config import ConfigError, parse_config
    from ampsclient_server_stub.engine.filters import FilterError, compile_filter

BASE = Path("/nonexistent-fuzz-base")


def one_input(data: bytes) -> None:
    if not data:
        return
    kind, rest = data[0] % 6, data[1:]
    text = rest.decode("utf-8", "replace")
    try:
        if kind == 0:
            decode_header(rest)
        elif kind == 1:
            framer = TcpFramer(max_frame_size=4096)
            framer.receive_data(rest)
            framer.frames()
        elif kind == 2:
            WsServerFramer(max_frame_size=4096).receive_message(rest)
        elif kind == 3:
            compile_filter(text)({"a": 1, "b": [1, "x"], "c": {"d": None}})
        elif kind == 4:
            parse_bookmark(text)
        else:
            parse_config(text, base_dir=BASE)
    except (ProtocolError, FilterError, InvalidBookmarkError, ConfigError):
        pass


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
