"""Queue acks from the client, checked frame by frame on the wire (``shared/queues.md`` §10).

Explicit acks and batching go through a recording proxy to the reference server (which
accepts a queue ack as a ``sow_delete`` naming the bookmark). Auto-ack needs queue deliveries
(messages with a lease period, ``lp``), which the reference server does not send yet: those
tests use a scripted peer on 127.0.0.1 that logs the client on, acks its subscription, sends
leased deliveries and records every frame the client sends.
"""

from __future__ import annotations

import copy
import json
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import ampsclient as AMPS
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing.proxy import LoopbackProxy
from ampsclient_server_stub.testing.wait import wait_for

pytestmark = pytest.mark.integration


def frames(data: bytes | bytearray) -> list[dict[str, Any]]:
    """The headers of the length-prefixed frames in ``data`` (bodies dropped)."""
    out = []
    pos = 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        payload = bytes(data[pos + 4 : pos + 4 + n])
        header, _ = json.JSONDecoder().raw_decode(payload.decode())
        out.append(header)
        pos += 4 + n
    return out


def acks_sent(data: bytes | bytearray) -> list[dict[str, Any]]:
    return [f for f in frames(data) if f.get("cid") == "AMPS-queue-ack"]


@pytest.fixture
def proxied(server: ServerThread) -> Iterator[tuple[LoopbackProxy, str]]:
    with LoopbackProxy("127.0.0.1", server.tcp_port, record=True) as proxy:
        yield proxy, f"tcp://127.0.0.1:{proxy.port}/amps/json"


def test_defaults_and_official_rules() -> None:
    client = AMPS.Client("ack-defaults")
    try:
        assert (client.get_auto_ack(), client.get_ack_batch_size(), client.get_ack_timeout()) == (
            False,
            0,
            1000,
        )
        client.set_ack_batch_size(10)
        with pytest.raises(AMPS.AMPSException, match="Ack timeout must be > 0"):
            client.set_ack_timeout(0)
        client.set_ack_batch_size(1)
        client.set_ack_timeout(0)
        client.set_ack_batch_size(5)  # a timeout of 0 with a batch > 1 goes back to 1000
        assert client.get_ack_timeout() == 1000
        with pytest.raises(OverflowError):
            client.set_ack_batch_size(-1)
        with pytest.raises(TypeError):
            client.set_auto_ack(1)  # type: ignore[arg-type]
    finally:
        client.close()


def test_explicit_acks_frames(proxied: tuple[LoopbackProxy, str]) -> None:
    proxy, uri = proxied
    client = AMPS.Client("ack-explicit")
    client.connect(uri)
    client.logon()
    try:
        client.ack("q", "1|77|")
        client.ack("q", "1|2|", "cancel")
        message = AMPS.Message().set_topic("q").set_bookmark("1|4|")
        client.ack(message, options="expire")
        client.flush(5000)  # the server answered after the acks: they were accepted
        assert acks_sent(proxy.upstream or b"") == [
            {"c": "sow_delete", "t": "q", "cid": "AMPS-queue-ack", "bookmark": "1|77|"},
            {
                "c": "sow_delete",
                "t": "q",
                "cid": "AMPS-queue-ack",
                "bookmark": "1|2|",
                "o": "cancel",
            },
            {
                "c": "sow_delete",
                "t": "q",
                "cid": "AMPS-queue-ack",
                "bookmark": "1|4|",
                "o": "expire",
            },
        ]
        with pytest.raises(AMPS.UsageError):
            client.ack("q")  # no bookmark
    finally:
        client.close()


def test_batches_per_topic_full_timer_and_close(proxied: tuple[LoopbackProxy, str]) -> None:
    proxy, uri = proxied
    client = AMPS.Client("ack-batch")
    client.connect(uri)
    client.logon()
    client.set_ack_batch_size(3)
    client.set_ack_timeout(200)
    for i in range(1, 4):
        client.ack("qA", f"1|{i}|")
    client.ack("qB", "1|9|")
    client.ack("qB", "1|10|", "cancel")  # options bypass the batch, which stays pending
    wait_for(lambda: len(acks_sent(proxy.upstream or b"")) == 3, what="the timer's batch")
    sent = acks_sent(proxy.upstream or b"")
    assert sent[0] == {
        "c": "sow_delete", "t": "qA", "cid": "AMPS-queue-ack", "bookmark": "1|1|,1|2|,1|3|",
    }  # fmt: skip
    assert sent[1]["o"] == "cancel" and sent[1]["bookmark"] == "1|10|"
    assert sent[2] == {"c": "sow_delete", "t": "qB", "cid": "AMPS-queue-ack", "bookmark": "1|9|"}
    # a pending batch goes out before the connection closes
    client.set_ack_timeout(60_000)
    client.ack("qA", "1|5|")
    assert client.queue_acks.pending == 1
    client.disconnect()
    wait_for(lambda: len(acks_sent(proxy.upstream or b"")) == 4, what="the ack sent on close")
    assert acks_sent(proxy.upstream or b"")[3]["bookmark"] == "1|5|"
    client.close()


# ------------------------------------------------------------------ scripted queue peer


class QueuePeer:
    """A scripted AMPS peer on 127.0.0.1: logon and subscribe acks, leased deliveries."""

    def __init__(self, deliveries: int) -> None:
        self.deliveries = deliveries
        self.received: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def send(self, conn: socket.socket, header: dict[str, Any], body: bytes = b"") -> None:
        payload = json.dumps(header, separators=(",", ":")).encode() + body
        conn.sendall(struct.pack(">I", len(payload)) + payload)

    def run(self) -> None:
        conn, _ = self.sock.accept()
        buf = b""
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack_from(">I", buf)
                    if len(buf) < 4 + n:
                        break
                    header = frames(buf[: 4 + n])[0]
                    buf = buf[4 + n :]
                    with self.lock:
                        self.received.append(header)
                    self.answer(conn, header)

    def answer(self, conn: socket.socket, header: dict[str, Any]) -> None:
        c = header.get("c")
        if c == "logon":
            self.send(conn, {"c": "ack", "cid": header["cid"], "a": "processed",
                             "status": "success", "version": "5.3.5.0"})  # fmt: skip
        elif c in ("subscribe", "flush"):
            self.send(conn, {"c": "ack", "cid": header["cid"], "a": "processed",
                             "status": "success", "sub_id": header.get("sub_id")})  # fmt: skip
            if c == "subscribe":
                for i in range(1, self.deliveries + 1):
                    body = json.dumps({"n": i}).encode()
                    self.send(conn, {"c": "p", "t": "q", "sids": header["sub_id"],
                                     "bm": f"1|{i}|", "s": i, "lp": "10s"}, body)  # fmt: skip

    def acks(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(h) for h in self.received if h.get("cid") == "AMPS-queue-ack"]

    def close(self) -> None:
        self.sock.close()


def test_auto_ack_acks_on_return_and_cancels_on_raise() -> None:
    peer = QueuePeer(deliveries=4)
    client = AMPS.Client("auto-ack")
    client.connect(f"tcp://127.0.0.1:{peer.port}/amps/json")
    client.logon()
    client.set_auto_ack(True)
    seen: list[int] = []

    def handler(message: AMPS.Message) -> None:
        n = json.loads(message.get_data())["n"]
        seen.append(n)
        if n == 2:
            raise ValueError("cannot process 2")
        if n == 3:
            message.ack()  # an explicit ack of its own: auto-ack does not repeat it

    client.set_exception_listener(lambda exc: None)
    try:
        client.subscribe(handler, "q", timeout=5000)
        wait_for(lambda: len(peer.acks()) == 4, what="four acks")
        assert seen == [1, 2, 3, 4]
        assert [(a["bookmark"], a.get("o")) for a in peer.acks()] == [
            ("1|1|", None),
            ("1|2|", "cancel"),
            ("1|3|", None),
            ("1|4|", None),
        ]
    finally:
        client.close()
        peer.close()


def test_auto_ack_on_a_stream_acks_when_the_next_is_asked_for() -> None:
    peer = QueuePeer(deliveries=3)
    client = AMPS.Client("auto-ack-stream")
    client.connect(f"tcp://127.0.0.1:{peer.port}/amps/json")
    client.logon()
    client.set_auto_ack(True)
    try:
        stream = client.subscribe("q", timeout=5000)
        assert isinstance(stream, AMPS.MessageStream)
        it = iter(stream)
        first = next(it)
        assert first.get_bookmark() == "1|1|"
        client.flush(5000)  # a marker: the peer has seen everything sent before it
        assert peer.acks() == []  # the message held by the application is not acked yet
        second = next(it)
        assert second.get_bookmark() == "1|2|"
        wait_for(lambda: len(peer.acks()) == 1, what="the first ack")
        assert peer.acks()[0]["bookmark"] == "1|1|"
        stream.close()
    finally:
        client.close()
        peer.close()


def test_a_copied_message_acks_after_its_handler_returned() -> None:
    peer = QueuePeer(deliveries=2)
    client = AMPS.Client("copy-ack")
    client.connect(f"tcp://127.0.0.1:{peer.port}/amps/json")
    client.logon()
    kept: list[AMPS.Message] = []
    try:
        client.subscribe(lambda m: kept.append(copy.copy(m)), "q", timeout=5000)
        wait_for(lambda: len(kept) == 2, what="two deliveries")
        for message in kept:
            message.ack()  # the official advice: copy a message to ack it later
        wait_for(lambda: len(peer.acks()) == 2, what="two acks")
        assert [a["bookmark"] for a in peer.acks()] == ["1|1|", "1|2|"]
    finally:
        client.close()
        peer.close()


def test_message_ack_from_a_handler_reaches_its_client() -> None:
    peer = QueuePeer(deliveries=2)
    client = AMPS.Client("message-ack")
    client.connect(f"tcp://127.0.0.1:{peer.port}/amps/json")
    client.logon()
    client.set_ack_batch_size(2)
    try:
        client.subscribe(lambda m: m.ack(), "q", timeout=5000)
        wait_for(lambda: len(peer.acks()) == 1, what="one batched ack")
        assert peer.acks()[0]["bookmark"] == "1|1|,1|2|"
    finally:
        client.close()
        peer.close()
