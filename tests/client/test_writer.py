"""A publisher thread writes what it queued itself (``FrameWriter.write_from_caller``): the
frames reach the server while the client's loop cannot run, in order, also when the socket
is full; plain TCP without batching only, and not for the HA client; the second socket
handle is closed with the connection."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import pytest

from ampsclient import Client, HAClient, _accel
from ampsclient.client import AsyncClient
from ampsclient.writer import CALLER_WRITE_FRAMES
from ampsclient_server_stub.testing import LoopbackProxy, wait_for

pytestmark = pytest.mark.integration


def subscriber(uri: str, name: str, topic: str) -> tuple[Client, list[int]]:
    got: list[int] = []
    sub = Client(name)
    sub.connect(uri)
    sub.logon(5000)
    sub.subscribe(lambda m: got.append(int(m.get_data().partition(":")[0])), topic, timeout=5000)
    return sub, got


def caller_writes(client: Client) -> int:
    """The sends a publisher thread of ``client`` made itself."""
    inner = client.async_client
    assert isinstance(inner, AsyncClient)
    return inner.core.stats["caller_writes"]


class LoopHeld:
    """While entered, the client's loop thread waits in a callback: only a publisher
    thread can write."""

    def __init__(self, client: Client) -> None:
        self._loop = client.loop
        self._held = threading.Event()
        self._release = threading.Event()

    def _hold(self) -> None:
        self._held.set()
        self._release.wait(60)

    def __enter__(self) -> LoopHeld:
        self._loop.call_soon_threadsafe(self._hold)
        assert self._held.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()


def test_a_publisher_thread_writes_while_the_loop_cannot(server: Any) -> None:
    """With the publisher's loop held, the subscriber receives the first
    ``CALLER_WRITE_FRAMES`` messages (the publish that queues that many writes them), then,
    the loop released, every message once and in order."""
    count = 3 * CALLER_WRITE_FRAMES + 17
    sub, got = subscriber(server.uri(), "caller-sub", "caller-writes")
    with sub, Client("caller-pub") as publisher:
        publisher.connect(server.uri())
        publisher.logon(5000)
        writes = caller_writes(publisher)
        with LoopHeld(publisher):
            for n in range(count):
                publisher.publish("caller-writes", str(n))
            wait_for(lambda: len(got) >= 3 * CALLER_WRITE_FRAMES, what="the caller's writes")
            assert caller_writes(publisher) >= writes + 3
        publisher.flush(10_000)
        wait_for(lambda: len(got) >= count, what="every message")
    assert got == list(range(count))


def test_a_full_socket_leaves_the_rest_to_the_loop(server: Any) -> None:
    """The server side stops reading (a stalled proxy) while the loop is held: 13 MB of
    publishes cannot all fit in the socket buffers, so the caller's sends fill the socket
    and put what they could not send back in the queue; once both go on, everything
    arrives once, in order."""
    host, port = "127.0.0.1", server.tcp_port
    count = 60_000
    body = "x" * 200
    sub, got = subscriber(server.uri(), "caller-full-sub", "caller-full")
    with sub, LoopbackProxy(host, port) as proxy, Client("caller-full") as client:
        client.connect(f"tcp://{host}:{proxy.port}/amps/json")
        client.logon(5000)
        proxy.stall(120)
        with LoopHeld(client):
            for n in range(count):
                client.publish("caller-full", f"{n}:{body}")
            assert caller_writes(client) > 0
        proxy.resume()
        client.flush(30_000)
        wait_for(lambda: len(got) >= count, timeout=30, what="every message")
    assert got == list(range(count))


def loop_writer(server: Any, how: str) -> Client:
    """A connected client whose publishes only its loop writes."""
    if how == "ha":
        ha = HAClient("caller-ha")
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()
        return ha
    client = Client("caller-ws")
    client.connect(server.uri("ws", "json") if how == "websocket" else server.uri())
    if how == "batched":
        client.set_publish_batching(10_000_000, 0)
    client.logon(5000)
    return client


@pytest.mark.parametrize("how", ["websocket", "batched", "ha"])
def test_only_the_loop_writes_websocket_batched_or_ha_publishes(server: Any, how: str) -> None:
    """WebSocket frames are the loop's to make, batched publishes wait for their batch, and
    the HA client leaves writing to the loop (a publish store's acks make the caller's
    writes cost more than they gain): with the loop held, a marker published by another
    client reaches the subscriber and none of the held publishes did."""
    sub, got = subscriber(server.uri(), "caller-ws-sub", "caller-ws")
    with sub, loop_writer(server, how) as ws, Client("caller-ws-marker") as marker:
        marker.connect(server.uri())
        marker.logon(5000)
        with LoopHeld(ws):
            for n in range(2 * CALLER_WRITE_FRAMES):
                ws.publish("caller-ws", str(n))
            marker.publish("caller-ws", "-1")
            wait_for(lambda: -1 in got, what="the marker")
            assert got == [-1]
        ws.flush(10_000)
        wait_for(lambda: len(got) > 2 * CALLER_WRITE_FRAMES, what="the held publishes")
    assert got == [-1, *range(2 * CALLER_WRITE_FRAMES)]


def _descriptors_connected_to(port: int) -> int:
    """How many of this process's descriptors are TCP sockets whose peer is 127.0.0.1:port.

    Counting these, not every descriptor, keeps the test exact while other descriptors of
    the worker process (left by earlier tests) close under it."""
    inodes = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[9] != "0":
                inodes.add(f"socket:[{fields[9]}]")
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") in inodes
        except OSError:  # closed while we looked
            pass
    return count


def test_the_caller_socket_closes_with_the_connection() -> None:
    """Repeated connects and disconnects leave no descriptor open, and the peer sees each
    close at once (a second handle left open would keep the connection up)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]
        uri = f"tcp://127.0.0.1:{port}/amps/json"
        for _ in range(20):
            client = Client("caller-fd")
            client.connect(uri)
            peer, _ = listener.accept()
            with peer:
                peer.settimeout(10)
                assert _descriptors_connected_to(port) == 2  # the socket and the caller's dup
                client.close()
                assert peer.recv(1) == b""
                assert _descriptors_connected_to(port) == 0


@pytest.mark.skipif(_accel.PlainPublishLane is None, reason="no C speedups")
def test_the_c_lanes_use_the_same_threshold() -> None:
    from ampsclient import _speedups  # type: ignore[attr-defined]

    assert _speedups.CALLER_WRITE_FRAMES == CALLER_WRITE_FRAMES
