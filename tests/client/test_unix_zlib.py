"""unix:// and compression=zlib against a reference server in a child process (issue 33).

The server's config has a compressed tcp transport (the first one, so ``--tcp-port`` lands on
it), a ws one, a plain tcp one and a unix one; every test talks to it over real sockets.
"""

from __future__ import annotations

import json
import socket
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient import AsyncClient, Client
from ampsclient.exceptions import (
    AMPSConnectionError,
    CompressionError,
    DisconnectedError,
    InvalidURIError,
)
from ampsclient.ha import DefaultServerChooser
from ampsclient.protocol.compression import INFLATE_CHUNK, ZlibStream, looks_compressed
from ampsclient.sync import HAClient
from ampsclient.uri import parse_uri
from ampsclient_server_stub.harness import ServerProcess, free_port
from ampsclient_server_stub.testing import Inbox, wait_for

pytestmark = pytest.mark.integration

CONFIG = """<AMPSConfig>
  <Name>transports</Name>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic></SOW>
  <Transports>
    <Transport><Name>zipped</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol><Compression>zlib</Compression></Transport>
    <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
    <Transport><Name>plain</Name><Type>tcp</Type><InetAddr>127.0.0.1:{plain}</InetAddr>
      <Protocol>amps</Protocol></Transport>
    <Transport><Name>local</Name><Type>unix</Type><Path>{sock}</Path></Transport>
    <Transport><Name>wz</Name><Type>ws</Type><InetAddr>127.0.0.1:{wz}</InetAddr>
      <Compression>zlib</Compression></Transport>
  </Transports>
</AMPSConfig>
"""


class Servers:
    def __init__(self, proc: ServerProcess, sock: Path, plain_port: int, wz: int) -> None:
        self.proc = proc
        self.sock = sock
        self.zipped = proc.uri("tcp") + "?compression=zlib"
        self.zipped_plain = proc.uri("tcp")
        self.plain = f"tcp://127.0.0.1:{plain_port}/amps/json"
        self.unix = f"unix://localhost:0/amps/json?path={sock}"
        self.ws_zipped = f"ws://127.0.0.1:{wz}/amps/json?compression=zlib"
        self.ws_plain = proc.uri("ws")
        self.wz_port = wz


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("unixzlib")
    sock = base / "amps.sock"
    plain = free_port()
    wz = free_port()
    config = base / "config.xml"
    config.write_text(CONFIG.format(plain=plain, sock=sock, wz=wz))
    proc = ServerProcess(config=config, data_dir=base / "data")
    with proc:
        yield Servers(proc, sock, plain, wz)


def _round_trip(uri: str, name: str, count: int) -> None:
    inbox = Inbox()
    with Client(f"{name}-sub") as sub, Client(f"{name}-pub") as pub:
        sub.connect(uri)
        sub.logon(5000)
        pub.connect(uri)
        pub.logon(5000)
        topic = f"rt-{name}"
        sub.subscribe(inbox, topic)
        for i in range(count):
            pub.publish(topic, json.dumps({"n": i, "pad": "x" * (i % 50)}))
        pub.publish_flush(10_000)
        inbox.wait_messages(count, timeout=20)
        assert inbox.ns() == list(range(count))  # every message, once, in order


# ------------------------------------------------------------------ unix://


def test_unix_socket_file_is_owner_only(servers: Servers) -> None:
    mode = servers.sock.stat().st_mode
    assert mode & 0o777 == 0o600


def test_unix_publish_subscribe_sow(servers: Servers) -> None:
    _round_trip(servers.unix, "unix", 500)
    with Client("unix-sow") as c:
        c.connect(servers.unix)
        c.logon(5000)
        for i in range(5):
            c.publish("orders", json.dumps({"id": i, "v": f"u{i}"}))
        c.publish_flush(5000)
        found = c.sow("orders", "/v LIKE '^u'")
        rows = sorted(json.loads(m.data)["id"] for m in found if m.get_command() == "sow")
    assert rows == [0, 1, 2, 3, 4]


async def test_async_client_over_unix(servers: Servers) -> None:
    async with AsyncClient("async-unix") as c:
        await c.connect(servers.unix)
        await c.logon(5000)
        stream = await c.subscribe("async-unix")
        for i in range(20):
            c.publish("async-unix", {"n": i})
        await c.flush(5000)
        got = []
        async for message in stream:
            got.append(message.json()["n"])
            if len(got) == 20:
                break
    assert got == list(range(20))


def test_ha_chooser_mixes_unix_and_tcp(servers: Servers, tmp_path: Path) -> None:
    dead = tmp_path / "nobody.sock"  # no listener: the chooser moves on to the next URI
    with HAClient("ha-mixed") as ha:
        chooser = ha.get_server_chooser()
        assert isinstance(chooser, DefaultServerChooser)
        chooser.add(f"unix://localhost:0/amps/json?path={dead}")
        chooser.add(servers.unix)
        chooser.add(servers.plain)
        ha.connect_and_logon()
        assert chooser.get_current_uri() == servers.unix
        ha.publish("ha-mixed", json.dumps({"n": 1}))
        ha.publish_flush(5000)


def test_unix_uri_forms() -> None:
    uri = parse_uri("unix://localhost:0/amps/json?path=/run/amps.sock")
    assert uri.unix_path == "/run/amps.sock"
    assert uri.redacted() == "unix://localhost:0/amps/json?path=/run/amps.sock"
    with pytest.raises(InvalidURIError, match="path option"):
        parse_uri("unix://localhost:0/amps/json")
    with pytest.raises(InvalidURIError, match="not supported on unix"):
        parse_uri("unix://localhost:0/amps/json?path=/x.sock&compression=zlib")


# ------------------------------------------------------------------ compression=zlib


def test_compressed_round_trip_message_by_message(servers: Servers) -> None:
    _round_trip(servers.zipped, "zlib", 3000)


def test_plain_client_on_a_compression_transport(servers: Servers) -> None:
    _round_trip(servers.zipped_plain, "plain-on-zip", 200)


def test_compressed_bytes_really_are_deflated(servers: Servers) -> None:
    """A raw socket speaking the documented wire format: the server's answer is raw deflate."""
    stream = ZlibStream()
    logon = b'{"c":"logon","cid":"1","client_name":"raw-zlib","a":"processed","version":"5.3"}'
    with socket.create_connection(("127.0.0.1", servers.proc.tcp_port), timeout=10) as s:
        s.sendall(stream.compress(len(logon).to_bytes(4, "big") + logon))
        data = s.recv(65536)
    assert data[:4] != b"\x00\x00\x00" and looks_compressed(data)
    plain = zlib.decompressobj(-15).decompress(data)
    ack = json.loads(plain[4 : 4 + int.from_bytes(plain[:4], "big")])
    assert (ack["c"], ack["cid"], ack["status"]) == ("ack", "1", "success")


def test_compressed_client_on_a_plain_transport_gets_a_clear_error(servers: Servers) -> None:
    with Client("zlib-refused") as c:
        c.connect(servers.plain + "?compression=zlib")
        with pytest.raises(DisconnectedError, match="accept compression=zlib"):
            c.logon(5000)
    _round_trip(servers.plain, "after-refusal", 10)  # the server is still up


def test_garbage_compressed_input_is_refused_and_the_server_stays_up(servers: Servers) -> None:
    with socket.create_connection(("127.0.0.1", servers.proc.tcp_port), timeout=10) as s:
        s.sendall(b"\xff\xfe\xfd\xfc garbage that is no deflate stream" * 4)
        assert s.recv(65536) == b""  # closed by the server, nothing answered
    assert servers.proc.running
    wait_for(  # the server's log line reaches us through a reader thread: wait for it
        lambda: any("invalid compressed data" in line for line in servers.proc.stderr_lines),
        what="the server's log of the refused connection",
    )
    _round_trip(servers.zipped, "after-garbage", 10)


def test_zlib_stream_refuses_garbage_with_a_typed_error() -> None:
    with pytest.raises(CompressionError, match="compression=zlib"):
        ZlibStream().decompress(b"\xff\xfe\xfd\xfc not deflate")
    ended = zlib.compressobj(6, zlib.DEFLATED, -15)
    whole = ended.compress(b"abc") + ended.flush()  # a finished stream: never from AMPS
    with pytest.raises(CompressionError, match="ended"):
        ZlibStream().decompress(whole)


def test_compression_uri_option() -> None:
    assert parse_uri("tcp://h:1/amps/json?compression=ZLIB").compression == "zlib"
    assert parse_uri("tcp://h:1/amps/json").compression is None
    with pytest.raises(InvalidURIError, match="unsupported compression 'lz4'"):
        parse_uri("tcp://h:1/amps/json?compression=lz4")
    assert parse_uri("wss://h:1/amps/json?compression=zlib").compression == "zlib"


# ------------------------------------------------------------------ ws:// with compression=zlib


@pytest.mark.parametrize("message_type", ["json", "binary"])
def test_compressed_websocket_round_trip(servers: Servers, message_type: str) -> None:
    uri = servers.ws_zipped.replace("/amps/json", f"/amps/{message_type}")
    _round_trip(uri, f"ws-zlib-{message_type}", 2000)


def test_websocket_compression_is_permessage_deflate(servers: Servers) -> None:
    """The handshake agrees permessage-deflate on the compression transport only."""

    def extensions(port: int) -> str:
        request = (
            f"GET /amps/json HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(request.encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                assert chunk, "closed during the handshake"
                head += chunk
        assert head.startswith(b"HTTP/1.1 101")
        lines = head.decode().lower().split("\r\n")
        return ";".join(v for v in lines if v.startswith("sec-websocket-extensions"))

    assert "permessage-deflate" in extensions(servers.wz_port)
    assert "permessage-deflate" not in extensions(servers.proc.ws_port)


def test_compressed_websocket_client_on_a_plain_transport_gets_a_clear_error(
    servers: Servers,
) -> None:
    refused = pytest.raises(AMPSConnectionError, match="permessage-deflate was not agreed")
    with Client("ws-zlib-refused") as c, refused:
        c.connect(servers.ws_plain + "?compression=zlib")
    _round_trip(servers.ws_plain, "ws-after-refusal", 10)


def test_garbage_from_the_server_is_a_typed_error_on_the_client() -> None:
    """A listener that answers a compressed logon with bytes that do not inflate."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"\xff\xfe\xfd\xfc not a deflate stream")
            conn.recv(65536)  # until the client closes

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    try:
        with Client("zlib-garbage") as c:
            c.connect(f"tcp://127.0.0.1:{port}/amps/json?compression=zlib")
            with pytest.raises(DisconnectedError) as info:
                c.logon(5000)
        assert isinstance(info.value.__cause__, CompressionError)
        worker.join(10)
        assert not worker.is_alive()
    finally:
        listener.close()


def test_a_compressed_bomb_is_refused_after_one_bounded_chunk(servers: Servers) -> None:
    """64 MiB inflating from ~64 KiB: the first frame length (2 GiB) is refused at once."""
    stream = ZlibStream()
    bomb = stream.compress(b"\x7f" + b"\x00" * (64 * 1024 * 1024))
    assert len(bomb) < 128 * 1024
    chunks = list(ZlibStream().inflate(bomb))
    assert max(map(len, chunks)) <= INFLATE_CHUNK and sum(map(len, chunks)) == 64 * 1024 * 1024 + 1
    with socket.create_connection(("127.0.0.1", servers.proc.tcp_port), timeout=10) as s:
        s.sendall(bomb)
        try:
            answer = s.recv(65536)
        except ConnectionResetError:  # closed with some of the bomb unread: a reset
            answer = b""
        assert answer == b""  # closed, nothing answered
    _round_trip(servers.zipped, "after-bomb", 10)
