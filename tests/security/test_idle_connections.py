"""Connections that never log on are closed at the logon deadline, and the instance has a
connection cap by default (issue 31: 10,000 such connections were kept for ever)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config, parse_config
from ampsclient_server_stub.security.policy import (
    DEFAULT_LOGON_TIMEOUT,
    ServerSecurity,
    default_max_connections,
)
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration


def start(tmp: Path, root: str, transport: str = "") -> ServerThread:
    xml = f"""<AMPSConfig><Name>idle</Name>{root}
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      {transport}</Transport></Transports></AMPSConfig>"""
    return ServerThread(parse_config(xml, base_dir=tmp), record_all_topics=False).start()


def test_connections_that_never_log_on_are_closed_and_free_their_places(tmp_path: Path) -> None:
    server = start(tmp_path, "<MaxConnections>6</MaxConnections><LogonTimeout>1s</LogonTimeout>")
    port = server.server.tcp_port
    idle = [RawClient(port, timeout=10) for _ in range(5)]
    try:
        with Client("in-time") as early:
            early.connect(server.uri())
            early.logon(5000)  # the sixth place, logged on within the deadline
            refused = RawClient(port, timeout=10)  # the instance is full: closed at once
            assert refused.wait_closed(timeout=5.0)
            refused.close()
            for sock in idle:  # the idle ones are closed at their deadline
                assert sock.wait_closed(timeout=10.0)
            wait_for(lambda: server.call(lambda: len(server.server.broker.clients)) == 1)
            early.publish("t", json.dumps({"still": "here"}))  # past its deadline, still served
            early.flush(5000)
            with Client("after") as late:  # the places are free again
                late.connect(server.uri())
                late.logon(5000)
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_defaults_and_zero_turns_the_deadline_off(tmp_path: Path) -> None:
    security = ServerSecurity.from_config(default_config(tcp_port=0, ws_port=0))
    assert security.max_connections == default_max_connections() <= 5000
    assert all(p.logon_timeout == DEFAULT_LOGON_TIMEOUT for p in security.policies.values())
    server = start(tmp_path, "", "<LogonTimeout>0</LogonTimeout>")  # this transport: none
    try:
        security_ = server.server.security
        assert security_ is not None
        assert security_.policies["tcp"].logon_timeout is None
        assert security_.default.logon_timeout == DEFAULT_LOGON_TIMEOUT
        idle = RawClient(server.server.tcp_port, timeout=10)
        assert not idle.wait_closed(timeout=0.5)  # nothing closes it (no deadline)
        idle.close()
    finally:
        server.stop()


def test_websocket_connections_that_never_log_on_are_closed(tmp_path: Path) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    xml = """<AMPSConfig><Name>idle-ws</Name><LogonTimeout>1s</LogonTimeout>
      <Transports><Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr>
      </Transport></Transports></AMPSConfig>"""
    server = ServerThread(parse_config(xml, base_dir=tmp_path), record_all_topics=False).start()
    try:
        url = server.uri("ws").split("?")[0]
        with connect(url, open_timeout=10) as ws, pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)  # nothing arrives; the server closes at the deadline
    finally:
        server.stop()
