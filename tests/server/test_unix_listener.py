"""The server's unix transport (socket file handling) and the transport <Compression> element
(issue 33)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.testing import Inbox

pytestmark = pytest.mark.integration


def _config(sock: Path, data: Path | None = None) -> object:
    xml = f"""<AMPSConfig><Name>u</Name><Transports>
      <Transport><Name>local</Name><Type>unix</Type><Path>{sock}</Path></Transport>
      <Transport><Name>z</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Compression>zlib</Compression></Transport>
    </Transports></AMPSConfig>"""
    return parse_config(xml, base_dir=data or sock.parent)


def test_config_reads_unix_and_compression(tmp_path: Path) -> None:
    config = _config(tmp_path / "a.sock")
    unix, zipped = config.transports  # type: ignore[attr-defined]
    assert (unix.type, unix.path, unix.compression) == ("unix", str(tmp_path / "a.sock"), None)
    assert (zipped.type, zipped.compression) == ("tcp", "zlib")


@pytest.mark.parametrize(
    ("transport", "message"),
    [
        ("<Type>unix</Type><InetAddr>1</InetAddr><Path>/x</Path>", "a unix transport has a"),
        ("<Type>unix</Type>", "has no <Path>"),
        ("<Type>unix</Type><Path>/x</Path><Compression>zlib</Compression>", "no compression"),
        ("<Type>tcp</Type><InetAddr>1</InetAddr><Compression>lz4</Compression>", "'lz4'"),
    ],
)
def test_config_refuses(transport: str, message: str, tmp_path: Path) -> None:
    xml = f"<AMPSConfig><Transports><Transport><Name>t</Name>{transport}</Transport>"
    xml += "</Transports></AMPSConfig>"
    with pytest.raises(ConfigError, match=message):
        parse_config(xml, base_dir=tmp_path)


def _server(sock: Path, data: Path | None = None) -> ServerThread:
    config = _config(sock, data)
    return ServerThread(config)  # type: ignore[arg-type]


def _ping(uri: str) -> None:
    inbox = Inbox()
    with Client(f"ping-{id(inbox)}") as c:
        c.connect(uri)
        c.logon(5000)
        c.subscribe(inbox, "ping")
        c.publish("ping", json.dumps({"n": 7}))
        inbox.wait_messages(1)
    assert inbox.ns() == [7]


def test_stale_socket_is_replaced_and_removed_on_stop(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))  # bound, never listening, then closed: a crashed server's leftover
    stale.close()
    assert sock.is_socket()
    with _server(sock) as thread:
        _ping(f"unix://localhost:0/amps/json?path={sock}")
        assert thread.server.listening_line().endswith(f"unix://{sock}")
        assert thread.unix_uri("binary") == f"unix://localhost:0/amps/binary?path={sock}"
        with Client("unix-peer") as c:
            c.connect(f"unix://localhost:0/amps/json?path={sock}")
            c.logon(5000)
            broker = thread.server.broker
            assert broker is not None
            peers = [(conn.transport, conn.peer) for conn in broker.connections]
            assert ("unix", f"unix:{sock}") in peers
    assert not sock.exists()


def test_a_file_that_is_not_a_socket_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "precious.txt"
    path.write_text("keep me")
    with pytest.raises(ConfigError, match="not a socket"):
        _server(path).start()
    assert path.read_text() == "keep me"


def test_a_socket_in_use_is_not_stolen(tmp_path: Path) -> None:
    sock = tmp_path / "busy.sock"
    (tmp_path / "second").mkdir()
    with _server(sock):
        with pytest.raises(ConfigError, match="in use by a running server"):
            _server(sock, tmp_path / "second").start()
        _ping(f"unix://localhost:0/amps/json?path={sock}")  # the first one still serves


def test_compression_is_read_on_websocket_transports(tmp_path: Path) -> None:
    xml = """<AMPSConfig><Name>w</Name><Transports><Transport><Name>w</Name><Type>ws</Type>
      <InetAddr>127.0.0.1:0</InetAddr><Compression>zlib</Compression></Transport>
      </Transports></AMPSConfig>"""
    (ws,) = parse_config(xml, base_dir=tmp_path).transports
    assert (ws.type, ws.compression) == ("ws", "zlib")
