"""The asyncio wing acts on the core's events, over the in-memory transport (no socket).

A scripted peer answers the logon and the subscription, and then does what each test needs
(stays silent, sends deliveries, sends a persisted ack); the test checks what the wing made
of the events the core gave back: a silent server aborted with the heartbeat's error, the
awaiting call failed, the stream ended, the listeners told, in that order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from ampsclient.client import AsyncClient, ConnectionEvent, ConnectionState
from ampsclient.command import Command
from ampsclient.exceptions import DisconnectedError
from ampsclient.protocol.message import Message
from ampsclient.transport.memory import MemoryConnection, serve_memory
from ampsclient_server_stub.testing import wait_for_async


class Peer:
    """Acks logons and subscriptions; everything else is logged and left unanswered."""

    def __init__(self) -> None:
        self.conns: list[MemoryConnection] = []
        self.log: list[str] = []

    def accept(self, conn: MemoryConnection) -> None:
        self.conns.append(conn)
        conn.on_payload = lambda payload: self._receive(conn, payload)

    def _receive(self, conn: MemoryConnection, payload: bytes) -> None:
        message = Message(payload)
        self.log.append(f"{message.command}:{message.options or ''}")
        cid = (message.command_id or "").encode()
        if message.command in ("logon", "subscribe"):
            conn.send(b'{"c":"ack","cid":"%s","a":"processed","status":"success"}' % cid)


@pytest.fixture
def peer() -> Iterator[Peer]:
    scripted = Peer()
    stop = serve_memory("wing-events", scripted.accept)
    try:
        yield scripted
    finally:
        stop()


async def test_a_silent_server_is_aborted_and_everything_waiting_ends(peer: Peer) -> None:
    client = AsyncClient("wing-1")
    seen: list[tuple[str, object]] = []
    client.add_connection_state_listener(lambda e: seen.append(("state", e.state)))
    client.set_disconnect_handler(lambda c, error: seen.append(("handler", error)))
    await client.connect_and_logon("memory://wing-events:0/amps/json")
    stream = await client.execute(Command("subscribe").set_topic("t"))
    seen.clear()
    client.set_heartbeat(0.05)  # the peer never answers: dead after 0.1 s of silence
    flush = asyncio.ensure_future(client.flush())  # never acked either
    await wait_for_async(lambda: ("state", ConnectionState.DISCONNECTED) in seen, what="the abort")
    with pytest.raises(DisconnectedError, match="heartbeat timeout") as info:
        await flush
    error = info.value
    # HeartbeatTimedOut -> abort -> CommandFailed (the flush), StreamEnded, ConnectionLost
    assert seen == [("state", ConnectionState.DISCONNECTED), ("handler", error)]
    with pytest.raises(DisconnectedError) as ended:
        [m async for m in stream]  # the stream ended, with the same error
    assert ended.value is error
    assert "heartbeat:start,0.05" in peer.log and not client.connected
    assert client.core.events == []  # the wing took every event


async def test_handler_errors_reach_the_listener_and_deliveries_go_on(peer: Peer) -> None:
    client = AsyncClient("wing-2")
    errors: list[BaseException] = []
    client.set_exception_listener(errors.append)
    got: list[bytes] = []
    boom = ValueError("boom")

    def handler(message: Message) -> None:
        got.append(message.data)
        if message.data == b"1":
            raise boom

    await client.connect_and_logon("memory://wing-events:0/amps/json")
    sub_id = await client.execute_async(Command("subscribe").set_topic("t"), handler)
    unrouted: list[int | None] = []
    client.set_last_chance_message_handler(lambda m: unrouted.append(m.sequence))
    conn = peer.conns[0]
    for n in (1, 2, 3):
        conn.send(b'{"c":"p","t":"t","sids":"%s","s":%d}%d' % (sub_id.encode(), n, n))
    # a plain client has no publish store: a persisted ack goes to the last-chance handler
    conn.send(b'{"c":"ack","a":"persisted","s":9,"status":"success"}')
    await wait_for_async(lambda: unrouted == [9], what="the persisted ack")
    assert got == [b"1", b"2", b"3"]
    assert errors == [boom]
    await client.close()


async def test_events_from_a_connection_state_listener_are_handled_in_order(peer: Peer) -> None:
    """A listener that raises while the wing handles ConnectionLost: its error reaches the
    exception listener at once, before the disconnect handler runs."""
    client = AsyncClient("wing-3")
    order: list[str] = []
    client.set_exception_listener(lambda exc: order.append(f"listener:{exc}"))

    def state_listener(event: ConnectionEvent) -> None:
        order.append(f"state:{event.state.value}")
        if event.state is ConnectionState.DISCONNECTED:
            raise RuntimeError("listener broke")

    client.add_connection_state_listener(state_listener)
    client.set_disconnect_handler(lambda c, error: order.append("handler"))
    await client.connect_and_logon("memory://wing-events:0/amps/json")
    peer.conns[0].close()
    await wait_for_async(lambda: "handler" in order, what="the disconnect")
    assert order == [
        "state:connected",
        "state:logged_on",
        "state:disconnected",
        "listener:listener broke",
        "handler",
    ]
