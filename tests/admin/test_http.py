"""Bad input on the admin port gets the right status, and never disturbs the messaging ports."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterator

import pytest

from ampsclient import Client, Message
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.admin import http as admin_http
from ampsclient_server_stub.admin.http import HttpError, parse_head
from ampsclient_server_stub.testing import wait_for

from ._support import admin_port, request, with_admin

pytestmark = pytest.mark.integration


@pytest.fixture
def admin_server() -> Iterator[ServerThread]:
    thread = ServerThread(with_admin()).start()
    try:
        yield thread
    finally:
        thread.stop()


def raw(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send ``data`` and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:80]
    return int(answer[9:12])


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GARBAGE", 400),
        (b"GET /amps HTTP/1.1", 400),  # no Host
        (b"GET /amps HTTP/1.1\r\nHost: x\r\nno colon here", 400),
        (b"GET /amps HTTP/1.1\r\nHost: x\r\nBad Name: v", 400),
        (b"GET amps HTTP/1.1\r\nHost: x", 400),  # not an absolute path
        (b"GET /amps HTTP/1.1\r\nHost: x\r\nContent-Length: -1", 400),
        (b"GET /amps HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2", 400),
        (b"GET /amps HTTP/2.0\r\nHost: x", 505),
        (b"GET /amps HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", 501),
        (b"POST /amps HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999", 413),
    ],
)
def test_parse_head_refusals(head: bytes, status: int) -> None:
    with pytest.raises(HttpError) as info:
        parse_head(head)
    assert info.value.status == status


def test_parse_head_accepts_a_request() -> None:
    request_ = parse_head(
        b"GET /amps/instance/clients/a%2Fb?x=1&y= HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2"
    )
    assert request_.method == "GET"
    assert request_.path == ("amps", "instance", "clients", "a/b")
    assert request_.query == {"x": ["1"], "y": [""]}
    assert request_.headers["x-a"] == "1, 2"
    assert request_.keep_alive


def test_status_codes_on_the_wire(admin_server: ServerThread) -> None:
    port = admin_port(admin_server)
    assert request(port, "/nothing")[0] == 404
    assert request(port, "/amps/instance/nothing")[0] == 404
    status, headers, _ = request(port, "/amps/instance", method="DELETE")
    assert status == 405
    assert headers["allow"] == "GET, HEAD"
    status, headers, _ = request(port, "/metrics", method="POST", body=b"")
    assert (status, headers["allow"]) == (405, "GET, HEAD")
    status, headers, _ = request(port, "/amps/administrator", method="PUT", body=b"")
    assert (status, headers["allow"]) == (405, "GET, POST")
    status, headers, body = request(port, "/amps/instance", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 100
    assert status_of(raw(port, b"GARBAGE\r\n\r\n")) == 400
    big_head = b"GET /amps HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    assert status_of(raw(port, big_head)) == 431
    answer = raw(
        port, b"POST /amps/administrator HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
    )
    assert status_of(answer) == 413
    assert status_of(raw(port, b"GET /amps HTTP/1.1\r\n\r\n")) == 400


def test_keep_alive_serves_several_requests_on_one_connection(admin_server: ServerThread) -> None:
    port = admin_port(admin_server)
    one = b"GET /amps/instance/client_count HTTP/1.1\r\nHost: localhost\r\n\r\n"
    last = b"GET /amps/instance/name HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    answer = raw(port, one + one + last)
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert answer.endswith(b'"ampsclient-server"\n')


def test_hostile_http_clients_do_not_disturb_messaging(
    admin_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_http, "HEAD_TIMEOUT", 1.0)
    port = admin_port(admin_server)
    half = socket.create_connection(("127.0.0.1", port), timeout=10)
    garbage = socket.create_connection(("127.0.0.1", port), timeout=10)
    sub = Client("calm-sub")
    pub = Client("calm-pub")
    got: list[Message] = []
    try:
        half.sendall(b"GET /amps/instance HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # and stops
        garbage.sendall(os.urandom(200_000))
        sub.connect(admin_server.uri())
        sub.logon()
        sub.subscribe(got.append, "calm")
        sub.flush()
        pub.connect(admin_server.uri())
        pub.logon()
        for n in range(200):
            pub.publish("calm", json.dumps({"n": n}))
        wait_for(lambda: len(got) == 200, what="200 deliveries while hostile clients hang on")
        assert [json.loads(m.get_data())["n"] for m in got] == list(range(200))
        # the admin interface itself still answers others
        assert request(port, "/amps/instance/client_count")[0] == 200
        # the half-sent request is answered 408 and closed once its deadline passed
        answer = b""
        while True:
            chunk = half.recv(65536)
            if not chunk:
                break
            answer += chunk
        assert status_of(answer) == 408
        try:  # refused and closed (unread garbage may turn the close into a reset)
            garbage_answer = garbage.recv(65536)
        except ConnectionResetError:
            garbage_answer = b""
        assert garbage_answer == b"" or status_of(garbage_answer) in (400, 431)
    finally:
        half.close()
        garbage.close()
        sub.close()
        pub.close()


def test_stop_with_open_keep_alive_connections_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A keep-alive connection still open when the server stops (or evicted) is closed
    quietly: no 'Exception in callback ... CancelledError' from asyncio."""
    thread = ServerThread(with_admin()).start()
    sock = socket.create_connection(("127.0.0.1", admin_port(thread)), timeout=10)
    try:
        sock.sendall(b"GET /amps/instance/name HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = b""
        while not answer.endswith(b'"ampsclient-server"\n'):
            chunk = sock.recv(65536)
            assert chunk, "closed before the answer"
            answer += chunk
        with caplog.at_level(logging.ERROR):
            thread.stop()
        assert sock.recv(65536) == b""  # closed by the stop
    finally:
        sock.close()
        thread.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def test_an_amps_client_on_the_admin_port_is_told_at_once(admin_server: ServerThread) -> None:
    """Issue #31, honest answers: an AMPS frame is not an HTTP request; the admin port answers
    400 at once (it waited for its 10 s head deadline), and our client says what it reached."""
    import time

    from ampsclient.exceptions import NotAmpsPortError

    port = admin_port(admin_server)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        started = time.monotonic()
        raw.sendall(b"\x00\x00\x00\x10" + b'{"c":"logon"}   ')
        answer = raw.recv(4096)
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert time.monotonic() - started < 2.0
    started = time.monotonic()
    with Client("lost") as client, pytest.raises(NotAmpsPortError):
        client.connect(f"tcp://127.0.0.1:{port}/amps/json")
        client.logon(5000)
    assert time.monotonic() - started < 3.0
