"""Slow or idle HTTP clients cannot lock the operator out of the admin port (issue 31: 70 slow
connections took the 64 places and every request got 503). Real server, real sockets."""

from __future__ import annotations

import socket
import time

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.admin import http as admin_http
from ampsclient_server_stub.admin.server import MAX_CONNECTIONS

from ._support import admin_port, request, with_admin

pytestmark = pytest.mark.integration


def read_all(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_request_is_served_while_many_slow_connections_are_open() -> None:
    with ServerThread(with_admin()) as thread:
        port = admin_port(thread)
        admin = thread.server.admin
        assert admin is not None
        slow: list[socket.socket] = []
        try:
            for _ in range(MAX_CONNECTIONS + 6):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(b"GET /amps/instance HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
                slow.append(sock)
            began = time.monotonic()
            for _ in range(5):  # each legitimate request finds a place
                status, _, body = request(port, "/amps/instance/client_count")
                assert status == 200, body
            assert time.monotonic() - began < 5.0
            assert thread.call(lambda: admin.evicted) >= 6
        finally:
            for sock in slow:
                sock.close()


def test_slow_heads_and_bodies_are_dropped_at_their_deadlines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admin_http, "HEAD_TIMEOUT", 1.0)
    monkeypatch.setattr(admin_http, "BODY_TIMEOUT", 1.0)
    with ServerThread(with_admin()) as thread:
        port = admin_port(thread)
        head = socket.create_connection(("127.0.0.1", port), timeout=10)
        body = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            began = time.monotonic()
            head.sendall(b"GET /amps HTTP/1.1\r\n")  # then one byte now and then
            body.sendall(
                b"POST /amps/administrator HTTP/1.1\r\nHost: localhost\r\n"
                b"Content-Length: 100\r\n\r\nonly a few bytes"
            )
            for ch in b"X-Trickle: aaaa":
                try:
                    head.sendall(bytes([ch]))
                except OSError:
                    break
                time.sleep(0.2)  # the slow client's pace (not a synchronisation)
            answer = read_all(head)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
            assert b"request head not complete" in answer
            answer = read_all(body)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
            assert b"request body not complete" in answer
            assert time.monotonic() - began < 8.0
        finally:
            head.close()
            body.close()
