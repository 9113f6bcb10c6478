"""The HA wing performing the reconnect sequence against a scripted peer, over the in-memory
transport (no socket). The sequence's own logic (:mod:`ampsclient.core.ha_sequence`) is tested
with no transport at all in ``test_ha_sequence.py``; this checks that the asyncio wing
performs its steps in order, with real waiting and a publish made while it waits.

The peer records every payload of every connection and answers what the script says. After
a drop, the second connection must carry, in this order: the logon; the stored publishes the
logon ack's ``s`` does not cover (the covered ones discarded from the store); the
subscription, re-placed; what was published while that went on; then new publishes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from ampsclient.client import ConnectionEvent, ConnectionState
from ampsclient.core import State, StateChanged
from ampsclient.ha.client import AsyncHAClient
from ampsclient.ha.reconnect import FixedDelayStrategy
from ampsclient.protocol.message import Message
from ampsclient.transport.memory import MemoryConnection, serve_memory
from ampsclient_server_stub.testing import wait_for_async


class ScriptedPeer:
    """A memory server: logs each connection's payloads, acks logons (with ``persisted`` as
    the logon ack's ``s``), subscriptions and flushes."""

    def __init__(self) -> None:
        self.logs: list[list[bytes]] = []
        self.conns: list[MemoryConnection] = []
        self.persisted = 0
        self.on_subscribe: Callable[[], None] | None = None
        self.close_after_subscribe_ack = 0
        """Close the connection right after acking this many more subscribes."""

    def accept(self, conn: MemoryConnection) -> None:
        log: list[bytes] = []
        self.logs.append(log)
        self.conns.append(conn)
        conn.on_payload = lambda payload: self._receive(conn, log, payload)

    def _receive(self, conn: MemoryConnection, log: list[bytes], payload: bytes) -> None:
        log.append(payload)
        message = Message(payload)
        cid = (message.command_id or "").encode()
        if message.command == "logon":
            conn.send(
                b'{"c":"ack","cid":"%s","a":"processed","status":"success","s":%d}'
                % (cid, self.persisted)
            )
        elif message.command in ("subscribe", "flush"):
            if message.command == "subscribe" and self.on_subscribe is not None:
                self.on_subscribe()
            conn.send(b'{"c":"ack","cid":"%s","a":"processed","status":"success"}' % cid)
            if message.command == "subscribe" and self.close_after_subscribe_ack:
                self.close_after_subscribe_ack -= 1
                conn.close()  # the ack arrives, then the close, before the wing resumes


def summary(payload: bytes) -> tuple[str, int | None]:
    header = Message(payload).header
    return str(header["c"]), header.get("s")


@pytest.fixture
def peer() -> Iterator[ScriptedPeer]:
    scripted = ScriptedPeer()
    stop = serve_memory("ha-sequence", scripted.accept)
    try:
        yield scripted
    finally:
        stop()


async def test_discard_replay_resubscribe_then_new_publishes(peer: ScriptedPeer) -> None:
    ha = AsyncHAClient("pub-1", reconnect_delay_strategy=FixedDelayStrategy(0))
    events: list[ConnectionState] = []
    ha.add_connection_state_listener(lambda e: events.append(e.state))
    await ha.connect_and_logon("memory://ha-sequence:0/amps/json")
    got: list[bytes] = []
    sub_id = await ha.subscribe(lambda m: got.append(m.data), "orders")
    base = ha.publish("orders", b'{"n":1}') - 1  # sequence numbers start from the clock
    for n in range(2, 6):
        assert ha.publish("orders", b'{"n":%d}' % n) == base + n
    first = peer.logs[0]
    await wait_for_async(lambda: len(first) == 7, what="the 5 publishes on the first connection")
    assert [summary(p) for p in first] == [
        ("logon", None), ("subscribe", None), *[("p", base + n) for n in range(1, 6)]
    ]  # fmt: skip
    peer.conns[0].send(b'{"c":"ack","a":"persisted","s":%d,"status":"success"}' % (base + 2))
    await wait_for_async(lambda: ha.unpersisted_count == 3, what="the persisted ack of 1..2")

    # the server had also persisted 3 when the connection dropped; a publish is made while
    # the subscription is being re-placed
    peer.persisted = base + 3
    during: list[int] = []
    peer.on_subscribe = lambda: during.append(ha.publish("orders", b'{"n":"during"}'))
    events.clear()
    # the core's own events, as the held client's wing takes them
    moves: list[tuple[State, State]] = []
    ha.client._wiring.set_event_handler(StateChanged, lambda e: moves.append((e.old, e.new)))
    peer.conns[0].close()
    await wait_for_async(lambda: ConnectionState.RESUBSCRIBED in events, what="the reconnect")
    assert moves == [
        (State.LOGGED_ON, State.DISCONNECTED), (State.DISCONNECTED, State.CONNECTED),
        (State.CONNECTED, State.LOGGING_ON), (State.LOGGING_ON, State.LOGGED_ON),
    ]  # fmt: skip
    assert events == [
        ConnectionState.DISCONNECTED,
        ConnectionState.CONNECTED,
        ConnectionState.LOGGED_ON,
        ConnectionState.PUBLISH_REPLAYED,
        ConnectionState.RESUBSCRIBED,
    ]
    assert during == [base + 6]
    assert ha.publish("orders", b'{"n":"after"}') == base + 7
    second = peer.logs[1]
    await wait_for_async(lambda: len(second) == 6, what="the second connection's 6 commands")
    assert [summary(p) for p in second] == [
        ("logon", None), ("p", base + 4), ("p", base + 5), ("subscribe", None),
        ("p", base + 6), ("p", base + 7),
    ]  # fmt: skip
    # golden bytes: a replayed publish keeps its sequence number and asks for persisted
    assert second[1] == b'{"c":"p","s":%d,"a":"persisted","t":"orders"}{"n":4}' % (base + 4)
    assert second[4] == (
        b'{"c":"p","s":%d,"a":"persisted","t":"orders"}{"n":"during"}' % (base + 6)
    )
    resub = Message(second[3]).header
    assert resub["sub_id"] == sub_id and resub["cid"] != Message(first[1]).header["cid"]
    assert ha.unpersisted_count == 4  # 4..7: 3 was discarded when the logon ack said s=3

    # the re-placed subscription routes deliveries to the same handler
    peer.conns[1].send(b'{"c":"p","t":"orders","sids":"%s","s":1}{"x":1}' % sub_id.encode())
    await wait_for_async(lambda: len(got) == 1, what="a delivery after the reconnect")
    assert got == [b'{"x":1}']
    peer.conns[1].send(b'{"c":"ack","a":"persisted","s":%d,"status":"success"}' % (base + 7))
    await wait_for_async(lambda: ha.unpersisted_count == 0, what="the persisted ack of 4..7")
    assert await ha.close() == 0


async def test_a_user_disconnect_handler_does_not_replace_the_reconnect(
    peer: ScriptedPeer,
) -> None:
    """Composition: the HA client's own disconnect handler sits on the held client, so a
    handler the application sets is called in addition (it used to replace the reconnect)."""
    ha = AsyncHAClient("pub-2", reconnect_delay_strategy=FixedDelayStrategy(0))
    seen: list[object] = []
    ha.set_disconnect_handler(lambda client, error: seen.append(client))
    events: list[ConnectionEvent] = []
    ha.add_connection_state_listener(events.append)
    await ha.connect_and_logon("memory://ha-sequence:0/amps/json")
    events.clear()
    peer.conns[0].close()
    await wait_for_async(
        lambda: any(e.state is ConnectionState.RESUBSCRIBED for e in events),
        what="the reconnect",
        timeout=5.0,
    )
    assert seen == [ha]
    assert len(peer.logs) == 2
    await ha.close()


async def test_a_drop_right_after_a_resubscribe_ack_starts_the_sequence_again(
    peer: ScriptedPeer,
) -> None:
    """The resubscribe's ack comes, then the connection closes before the wing resumes: the
    sequence says the connection is gone (DisconnectedError), so the wing reconnects instead
    of opening the publish gate on a dead connection."""
    ha = AsyncHAClient("pub-3", reconnect_delay_strategy=FixedDelayStrategy(0))
    events: list[ConnectionState] = []
    ha.add_connection_state_listener(lambda e: events.append(e.state))
    await ha.connect_and_logon("memory://ha-sequence:0/amps/json")
    sub_id = await ha.subscribe(lambda m: None, "orders")
    peer.close_after_subscribe_ack = 1
    events.clear()
    peer.conns[0].close()
    await wait_for_async(lambda: ConnectionState.RESUBSCRIBED in events, what="the reconnect")
    assert len(peer.logs) == 3  # the second connection died after its resubscribe ack
    for log in peer.logs[1:]:
        assert [summary(p)[0] for p in log] == ["logon", "subscribe"]
        assert Message(log[1]).header["sub_id"] == sub_id
    assert events.count(ConnectionState.RESUBSCRIBED) == 1
    assert events.count(ConnectionState.PUBLISH_REPLAYED) == 2
    seq = ha.publish("orders", b'{"n":1}')
    await wait_for_async(lambda: len(peer.logs[2]) == 3, what="the publish on the third connection")
    assert summary(peer.logs[2][2]) == ("p", seq)
    peer.conns[2].send(b'{"c":"ack","a":"persisted","s":%d,"status":"success"}' % seq)
    await wait_for_async(lambda: ha.unpersisted_count == 0, what="the persisted ack of the publish")
    assert await ha.close() == 0  # nothing left to flush: no wait for the flush timeout
