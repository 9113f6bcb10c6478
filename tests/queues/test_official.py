"""The official AMPS Python client's queue consumers (a black-box peer) against the reference
server: auto-ack with batches, a handler that raises (its message is cancelled and comes
back), manual acks, ``Message.ack("cancel")``, the sync ``MessageStream`` with auto-ack, and
the client capping its ack batches at the backlog the subscribe ack reported."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from _queue_support import stats

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import LoopbackProxy, wait_for

AMPS: Any = pytest.importorskip("AMPS")

pytestmark = [pytest.mark.interop, pytest.mark.integration]


def publish(uri: str, count: int, first: int = 0) -> None:
    client = AMPS.Client(f"official-pub-{first}")
    client.connect(uri)
    client.logon()
    try:
        for n in range(first, first + count):
            client.publish("work", json.dumps({"n": n}))
        client.publish_flush()
    finally:
        client.disconnect()


class Handler:
    """Copies what it needs out of each (reused) official Message."""

    def __init__(self, raise_on: int | None = None) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[int, str]] = []
        self.raise_on = raise_on
        self.raised = 0

    def __call__(self, message: Any) -> None:
        if message.get_command() not in ("p", "publish"):
            return
        n = json.loads(message.get_data())["n"]
        with self.lock:
            self.seen.append((n, message.get_bookmark()))
        if n == self.raise_on and self.raised == 0:
            self.raised += 1
            raise RuntimeError("handler failed")  # the official client cancels the message

    def ns(self) -> list[int]:
        with self.lock:
            return [n for n, _ in self.seen]


def consumer(uri: str, name: str, *, batch: int = 0) -> Any:
    client = AMPS.Client(name)
    client.connect(uri)
    client.logon()
    client.set_auto_ack(True)
    if batch:
        client.set_ack_batch_size(batch)
        client.set_ack_timeout(100)
    return client


def test_auto_ack_batches_process_everything_once(server: ServerThread) -> None:
    uri = server.uri("tcp", "json")
    handler = Handler()
    client = consumer(uri, "official-auto", batch=3)
    try:
        command = AMPS.Command("subscribe").set_topic("work").set_options("max_backlog=4")
        client.execute_async(command, handler)
        publish(uri, 40)
        wait_for(lambda: len(handler.ns()) >= 40 and stats(server)["acked"] == 40, 20, "40 acked")
        assert sorted(handler.ns()) == list(range(40))  # each once
        assert stats(server)["queue_depth"] == 0 and stats(server)["backlog"] == 0
    finally:
        client.disconnect()


def test_handler_exception_cancels_and_message_comes_back(server: ServerThread) -> None:
    uri = server.uri("tcp", "json")
    handler = Handler(raise_on=2)
    client = consumer(uri, "official-raise")
    try:
        client.execute_async(AMPS.Command("subscribe").set_topic("work"), handler)
        publish(uri, 5)
        wait_for(lambda: stats(server)["acked"] == 5, 20, "5 acked")
        ns = handler.ns()
        assert sorted(ns) == [0, 1, 2, 2, 3, 4]  # 2 twice: cancelled, then redelivered
        bookmarks = {bm for n, bm in handler.seen if n == 2}
        assert len(bookmarks) == 1 and stats(server)["cancelled"] == 1
    finally:
        client.disconnect()


def test_manual_acks_and_cancel(server: ServerThread) -> None:
    uri = server.uri("tcp", "json")
    client = AMPS.Client("official-manual")
    client.connect(uri)
    client.logon()
    held: list[tuple[int, str]] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        if message.get_command() in ("p", "publish"):
            with lock:
                held.append((json.loads(message.get_data())["n"], message.get_bookmark()))
            if len(held) == 1:
                message.ack("cancel")  # the first delivery goes back to the queue at once

    try:
        publish(uri, 3)  # all queued before the subscribe
        command = AMPS.Command("subscribe").set_topic("work").set_options("max_backlog=2")
        client.execute_async(command, on_message)
        wait_for(lambda: len(held) >= 3, 10, "redelivery after cancel")
        assert [n for n, _ in held[:3]] == [0, 1, 0]
        for _n, bm in held[1:3]:
            client.ack("work", bm)  # Client.ack(topic, bookmark)
        wait_for(lambda: len(held) >= 4, 10, "the third message")
        assert held[3][0] == 2
        client.ack("work", held[3][1])
        wait_for(lambda: stats(server)["acked"] == 3, 10, "3 acked")
        assert stats(server)["cancelled"] == 1
    finally:
        client.disconnect()


def test_message_stream_auto_ack(server: ServerThread) -> None:
    uri = server.uri("tcp", "json")
    publish(uri, 6)
    client = consumer(uri, "official-stream")
    try:
        seen = []
        stream = client.execute(
            AMPS.Command("subscribe").set_topic("work").set_options("max_backlog=2")
        )
        for message in stream:
            seen.append(json.loads(message.get_data())["n"])
            if len(seen) == 6:
                break
        # the stream acks message n when the application asks for n+1: 0..4 are acked
        wait_for(lambda: stats(server)["acked"] >= 5, 10, "5 acked")
        assert seen == list(range(6))
        stream.close()
    finally:
        client.disconnect()


def test_batches_capped_by_the_reported_backlog(server: ServerThread) -> None:
    with LoopbackProxy("127.0.0.1", server.tcp_port, record=True) as proxy:
        uri = f"tcp://127.0.0.1:{proxy.port}/amps/json"
        handler = Handler()
        client = consumer(uri, "official-cap", batch=10)  # larger than the backlog of 4
        try:
            command = AMPS.Command("subscribe").set_topic("work").set_options("max_backlog=10")
            client.execute_async(command, handler)
            publish(server.uri("tcp", "json"), 20)
            wait_for(lambda: stats(server)["acked"] == 20, 20, "20 acked")
        finally:
            client.disconnect()
        acks = [f for f in _frames(proxy.upstream or b"") if f.get("c") == "sow_delete"]
    sizes = [len(str(f["bookmark"]).split(",")) for f in acks]
    assert sum(sizes) == 20 and max(sizes) <= 4  # never more than the server's max_backlog=4


def _frames(data: bytes | bytearray) -> list[dict[str, Any]]:
    import struct

    out = []
    pos = 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        header, _ = json.JSONDecoder().raw_decode(bytes(data[pos + 4 : pos + 4 + n]).decode())
        out.append(header)
        pos += 4 + n
    return out
