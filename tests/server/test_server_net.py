"""The reference server over real sockets: raw TCP and raw WebSocket clients built on
``ampsclient.protocol``, plus the command-line entry point."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from ampsclient.protocol.framing import tcp_frame
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tcp(server: ServerThread) -> Iterator[Callable[[str], RawClient]]:
    opened: list[RawClient] = []

    def factory(name: str) -> RawClient:
        client = RawClient(server.tcp_port)
        opened.append(client)
        client.logon(name)
        return client

    yield factory
    for client in opened:
        client.close()


# --------------------------------------------------------------------------- TCP


def test_tcp_logon_publish_subscribe(server: ServerThread, tcp: Callable[[str], RawClient]) -> None:
    sub = tcp("sub")
    sub.send({"c": "subscribe", "t": "orders", "cid": "s1", "a": "processed", "filter": "/n >= 0"})
    ack, _ = sub.recv()
    assert ack == {"c": "ack", "cid": "s1", "a": "processed", "status": "success", "sub_id": "s1"}
    publisher = tcp("pub")
    for n in range(200):
        publisher.send({"c": "p", "t": "orders"}, json.dumps({"n": n}).encode())
    publisher.send({"c": "flush", "cid": "f", "a": "processed"})
    assert publisher.recv()[0]["cid"] == "f"
    got = [sub.recv() for _ in range(200)]
    assert [json.loads(b)["n"] for _, b in got] == list(range(200))
    # every topic is recorded by default, so deliveries carry their journal bookmark
    assert all(
        {k: v for k, v in h.items() if k != "bm"} == {"c": "p", "t": "orders", "sids": "s1"}
        for h, _ in got
    )
    bookmarks = [h["bm"] for h, _ in got]
    assert len(set(bookmarks)) == 200 and all(b.count("|") == 2 for b in bookmarks)


def test_tcp_persisted_acks_and_logon_sequence(
    server: ServerThread, tcp: Callable[[str], RawClient]
) -> None:
    publisher = tcp("ha")
    for seq in range(1, 51):
        publisher.send({"c": "p", "t": "t", "a": "persisted", "s": seq}, b"{}")
    seen = 0
    while seen < 50:
        hdr, _ = publisher.recv_until(lambda h: h.get("a") == "persisted")
        seen = int(hdr["s"])
    publisher.close()
    again = RawClient(server.tcp_port)
    try:
        assert again.logon("ha")["s"] == 50
    finally:
        again.close()


def test_bad_frames_disconnect_only_the_offender(
    server: ServerThread, tcp: Callable[[str], RawClient]
) -> None:
    sub = tcp("sub")
    sub.send({"c": "subscribe", "t": "t", "cid": "s", "a": "processed"})
    sub.recv()
    publisher = tcp("pub")

    oversized = tcp("big")
    oversized.send_raw(struct.pack(">I", 17 * 1024 * 1024) + b"{")
    garbage = tcp("garbage")
    garbage.send_raw(tcp_frame(b"\x00\xffnot a header"))
    early = RawClient(server.tcp_port)  # never logs on; no ack requested
    early.send({"c": "p", "t": "t"}, b"{}")
    try:
        for offender in (oversized, garbage, early):
            assert offender.wait_closed(5)
    finally:
        early.close()

    for n in range(10):
        publisher.send({"c": "p", "t": "t"}, str(n).encode())
    assert [sub.recv()[1] for _ in range(10)] == [str(n).encode() for n in range(10)]
    wait_for(lambda: server.statistics()["open_connections"] == 2, timeout=5.0)


def test_slow_consumer_is_disconnected(tmp_path: Path) -> None:
    """Offlined beyond 256 KB queued (max_write_buffer), disconnected beyond the pool's disk
    limit (slow-client management is on by default, issue #17)."""
    xml = f"""<AMPSConfig><MessageDiskLimit>2MB</MessageDiskLimit>
      <MessageDiskPath>{tmp_path}</MessageDiskPath><Transports><Transport><Name>tcp</Name>
      <Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport></Transports></AMPSConfig>"""
    config = parse_config(xml, base_dir=tmp_path)
    with ServerThread(config, max_write_buffer=256 * 1024) as srv:
        slow = RawClient(srv.tcp_port, rcvbuf=4096)
        slow.logon("slow")
        slow.send({"c": "subscribe", "t": "t", "cid": "s", "a": "processed"})
        slow.recv()
        publisher = RawClient(srv.tcp_port)
        publisher.logon("pub")
        body = b"x" * 10_000
        try:
            for _ in range(1500):  # 15 MB the slow client never reads
                publisher.send({"c": "p", "t": "t"}, body)
            publisher.send({"c": "flush", "cid": "f", "a": "processed"})
            assert publisher.recv(10)[0]["cid"] == "f"
            wait_for(lambda: srv.statistics()["open_connections"] == 1, 10)
            stats = srv.statistics()
            assert stats["slow_offlined"] >= 1 and stats["slow_disconnected"] >= 1
        finally:
            slow.close()
            publisher.close()


@pytest.mark.serial
def test_heartbeats_sent_and_silent_client_dropped(
    server: ServerThread, tcp: Callable[[str], RawClient]
) -> None:
    client = tcp("hb")
    started = time.monotonic()
    client.send({"c": "heartbeat", "o": "start,1", "cid": "h", "a": "received"})
    assert client.recv()[0]["a"] == "received"
    beats = 0
    closed_at: float | None = None
    while time.monotonic() - started < 4.0:
        try:
            hdr, _ = client.recv(timeout=4.0 - (time.monotonic() - started))
        except ConnectionError:
            closed_at = time.monotonic() - started
            break
        except TimeoutError:
            break
        assert hdr == {"c": "heartbeat"}
        beats += 1
    assert beats >= 1
    assert closed_at is not None and 1.9 <= closed_at < 3.5


@pytest.mark.serial
def test_heartbeat_keeps_a_beating_client(
    server: ServerThread, tcp: Callable[[str], RawClient]
) -> None:
    client = tcp("beater")
    client.send({"c": "heartbeat", "o": "start,1"})
    for _ in range(3):  # answer 3 heartbeats (~3 s): still connected afterwards
        hdr, _ = client.recv(timeout=3)
        assert hdr == {"c": "heartbeat"}
        client.send({"c": "heartbeat", "o": "beat"})
    client.send({"c": "flush", "cid": "f", "a": "processed"})
    assert client.recv_until(lambda h: h.get("cid") == "f")[0]["status"] == "success"


# --------------------------------------------------------------------------- WebSocket


def ws_send(ws: ClientConnection, hdr: dict[str, Any], body: bytes | None = None) -> None:
    ws.send(struct.pack("<I", 1 if body is None else 2))
    ws.send(encode_header(hdr).decode())
    if body is not None:
        ws.send(body.decode())


def ws_recv(ws: ClientConnection) -> str:
    message = ws.recv(timeout=5)
    assert isinstance(message, str), message
    return message


def test_ws_framing_text_mode(server: ServerThread) -> None:
    with connect(server.uri("ws", "json")) as ws:
        ws.send("text")
        ws_send(ws, {"c": "logon", "cid": "auto0", "client_name": "js", "a": "processed"})
        logon = json.loads(ws_recv(ws))
        assert logon["status"] == "success" and logon["version"] == "5.3.5.0"
        for i in range(3):
            body = json.dumps({"clientName": "js", "subId": f"s{i}", "bookmark": f"1|{i}|"})
            ws_send(ws, {"c": "publish", "t": "/ADMIN/bookmark_store"}, body.encode())
        ws_send(
            ws, {"c": "sow", "t": "/ADMIN/bookmark_store", "cid": "q", "bs": 2, "a": "completed"}
        )
        messages = [ws_recv(ws) for _ in range(11)]
        assert json.loads(messages[0]) == {"c": "group_begin", "query_id": "q"}
        first = json.loads(messages[1])
        assert first["c"] == "sow" and first["bs"] == 2
        assert json.loads(messages[2])["l"] == len(messages[3].encode())
        assert json.loads(messages[3])["subId"] == "s0"
        assert json.loads(messages[5])["subId"] == "s1"
        assert json.loads(messages[6])["bs"] == 1
        assert json.loads(messages[8])["subId"] == "s2"
        assert json.loads(messages[9]) == {"c": "group_end", "query_id": "q"}
        done = json.loads(messages[10])
        assert done["a"] == "completed" and done["records_returned"] == 3
        ws_send(ws, {"c": "subscribe", "t": "live", "cid": "s", "a": "processed", "filter": ""})
        assert json.loads(ws_recv(ws))["sub_id"] == "s"
        ws_send(ws, {"c": "publish", "t": "live"}, b'{"v":1}')
        header = json.loads(ws_recv(ws))
        assert header.pop("bm").count("|") == 2  # recorded topics carry their journal bookmark
        assert header == {"c": "p", "t": "live", "sids": "s"}
        assert ws_recv(ws) == '{"v":1}'


def test_ws_fragments_pings_and_batched_commands(server: ServerThread) -> None:
    """The server's WebSocket fast path (messages delivered as parsed, batched writes) still
    joins fragmented messages, answers pings, and keeps many commands of one read in order."""
    with connect(server.uri("ws", "json")) as ws:
        ws.send("text")
        count = struct.pack("<I", 1)
        logon = json.dumps({"c": "logon", "cid": "l", "client_name": "frag", "a": "processed"})
        ws.send(count)
        ws.send(iter([logon[:10], logon[10:25], logon[25:]]))  # one message in three frames
        assert json.loads(ws_recv(ws))["status"] == "success"
        ws.ping(b"are you there").wait(5)
        ws_send(ws, {"c": "subscribe", "t": "frag", "cid": "s", "a": "processed"})
        assert json.loads(ws_recv(ws))["sub_id"] == "s"
        # 200 publishes, each a count + header + body message, sent back to back
        for i in range(200):
            ws_send(ws, {"c": "p", "t": "frag"}, json.dumps({"i": i}).encode())
        for i in range(200):
            assert json.loads(ws_recv(ws))["c"] == "p"
            assert json.loads(ws_recv(ws)) == {"i": i}


def test_ws_binary_mode_and_bad_path(server: ServerThread) -> None:
    with connect(server.uri("ws", "json")) as ws:
        ws.send("binary")
        ws_send(ws, {"c": "logon", "cid": "auto0", "client_name": "bin", "a": "processed"})
        message = ws.recv(timeout=5)
        assert isinstance(message, bytes) and b'"status":"success"' in message
    bad = server.uri("ws", "json").replace("/amps/json", "/nope")
    with pytest.raises(InvalidStatus):
        connect(bad, open_timeout=5)


def test_ws_malformed_framing_disconnects_only_offender(
    server: ServerThread, tcp: Callable[[str], RawClient]
) -> None:
    sub = tcp("sub")
    sub.send({"c": "subscribe", "t": "t", "cid": "s", "a": "processed"})
    sub.recv()
    with connect(server.uri("ws", "json")) as ws:
        ws.send("text")
        ws_send(ws, {"c": "logon", "cid": "auto0", "client_name": "bad", "a": "processed"})
        ws_recv(ws)
        ws.send("this is not a count message")
        with pytest.raises(Exception):  # noqa: B017 - closed by the server
            for _ in range(10):
                ws.recv(timeout=5)
    publisher = tcp("pub")
    publisher.send({"c": "p", "t": "t"}, b"1")
    assert sub.recv()[1] == b"1"


# --------------------------------------------------------------------------- CLI


def test_cli_sigterm_exits_cleanly(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ampsclient_server_stub", "--tcp-port", "0", "--ws-port", "0"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    found = threading.Event()
    ports: dict[str, int] = {}

    def reader() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            match = re.search(r"listening tcp://[^:]+:(\d+) ws://[^:]+:(\d+)", line)
            if match:
                ports["tcp"], ports["ws"] = int(match.group(1)), int(match.group(2))
                found.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        assert found.wait(30), "".join(lines)
        client = RawClient(ports["tcp"])
        try:
            client.logon("cli")
        finally:
            client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        thread.join(5)


def test_cli_config_file_with_flag_overrides(tmp_path: Path) -> None:
    from ampsclient_server_stub.__main__ import build_config, parse_args

    config_file = tmp_path / "amps.xml"
    config_file.write_text(
        "<AMPSConfig><Name>cfg</Name><Transports>"
        "<Transport><Name>t</Name><Type>tcp</Type><InetAddr>9999</InetAddr>"
        "<Protocol>amps</Protocol><MessageType>json</MessageType></Transport>"
        "<Transport><Name>w</Name><Type>websocket</Type><InetAddr>9998</InetAddr></Transport>"
        "</Transports><SOW><Topic><Name>orders</Name><MessageType>json</MessageType>"
        "<Key>/id</Key></Topic></SOW></AMPSConfig>"
    )
    config = build_config(parse_args(["--config", str(config_file), "--tcp-port", "0"]))
    assert config.name == "cfg"
    assert [(t.name, t.port) for t in config.transports] == [("t", 0), ("w", 9998)]
    assert [s.topic for s in config.sow_topics] == ["orders"]
    default = build_config(parse_args(["--tcp-port", "0", "--ws-port", "0", "--name", "n"]))
    assert [t.port for t in default.transports] == [0, 0] and default.name == "n"
