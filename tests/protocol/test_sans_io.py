"""The client's protocol package as a whole: sans-I/O (no module of ``ampsclient/protocol``
imports a socket, an event loop or a thread), and its errors share one base."""

from __future__ import annotations

import ast
import pathlib

from ampsclient.exceptions import FrameTooLargeError, MalformedFrameError, ProtocolError


def test_protocol_errors_share_a_base() -> None:
    assert issubclass(FrameTooLargeError, ProtocolError)
    assert issubclass(MalformedFrameError, ProtocolError)


def test_protocol_package_does_no_io() -> None:
    banned = {"asyncio", "socket", "threading", "websockets", "selectors", "ssl"}
    root = pathlib.Path(__file__).resolve().parents[2] / "ampsclient" / "protocol"
    checked = 0
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"
        checked += 1
    assert checked >= 5
