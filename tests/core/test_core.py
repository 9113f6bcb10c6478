"""The sans-I/O connection core, with no socket, no event loop and no thread.

Bytes go in through ``receive_data`` (TCP framing, fed whole and one byte at a time), time
through ``heartbeat_tick``; what the core sends is read back with ``data_to_send`` and
compared with golden bytes.
"""

from __future__ import annotations

import concurrent.futures
import struct
from typing import Any

import pytest

from ampsclient.command import Command
from ampsclient.core import TRANSITIONS, ClientCore, InvalidStateError, State
from ampsclient.core.connection import CLIENT_VERSION
from ampsclient.exceptions import DisconnectedError, NotEntitledError
from ampsclient.protocol.message import Message

Waiter = concurrent.futures.Future


def state_of(core: ClientCore) -> State:
    """The core's state (a call, so that the type checker does not narrow it between steps)."""
    return core.state


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def payloads(core: ClientCore) -> list[bytes]:
    """What the core queued, without the length prefixes (each checked on the way)."""
    out = []
    for f in core.data_to_send():
        (n,) = struct.unpack(">I", f[:4])
        assert n == len(f) - 4
        out.append(f[4:])
    return out


def feed(core: ClientCore, *server_payloads: bytes, bytewise: bool = False) -> None:
    data = b"".join(frame(p) for p in server_payloads)
    if bytewise:
        for i in range(len(data)):
            core.receive_data(data[i : i + 1])
    else:
        core.receive_data(data)


class Sink:
    """A stream stand-in: records what it is given and how it ended."""

    def __init__(self) -> None:
        self.command_id: str | None = None
        self.sub_id: str | None = None
        self.query_id: str | None = None
        self.items: list[Message] = []
        self.ended: list[BaseException | None] = []

    def put(self, message: Message) -> None:
        self.items.append(message)

    def finish(self, error: BaseException | None = None) -> None:
        self.ended.append(error)


def logged_on(**kwargs: Any) -> ClientCore:
    core = ClientCore(**kwargs)
    core.connection_made()
    waiter: Waiter[Message] = Waiter()
    cid = core.send_logon(waiter, client_name="c1", user="u", password=None, message_type="json")
    core.data_to_send()
    feed(core, b'{"c":"ack","cid":"%s","a":"processed","status":"success"}' % cid.encode())
    assert core.logon_acked(waiter.result(0)) == "success"
    return core


# ------------------------------------------------------------------------------- state table


def test_every_state_has_a_row_and_illegal_moves_raise() -> None:
    assert set(TRANSITIONS) == set(State)
    core = ClientCore()
    assert state_of(core) is State.DISCONNECTED
    waiter: Waiter[Message] = Waiter()
    with pytest.raises(InvalidStateError) as info:
        core.send_logon(waiter, client_name="c", user=None, password=None, message_type="json")
    assert (info.value.current, info.value.wanted) == (State.DISCONNECTED, State.LOGGING_ON)
    assert core.data_to_send() == []  # nothing was queued by the refused logon
    with pytest.raises(DisconnectedError):
        core.send_payload(b'{"c":"flush"}')
    core.connection_made()
    with pytest.raises(InvalidStateError):
        core.connection_made()  # already connected


def test_closed_by_the_application_then_connect_again() -> None:
    core = logged_on()
    assert state_of(core) is State.LOGGED_ON
    again: Waiter[Message] = Waiter()  # logging on again over the same connection
    core.send_logon(again, cid="L2", client_name="c1", user="u", password=None, message_type="json")
    assert state_of(core) is State.LOGGING_ON
    feed(core, b'{"c":"ack","cid":"L2","a":"processed","status":"success"}')
    assert core.logon_acked(again.result(0)) == "success"
    assert state_of(core) is State.LOGGED_ON
    assert core.connection_lost(None, by_user=True) is not None
    assert state_of(core) is State.CLOSED
    assert core.connection_lost(None) is None  # nothing open any more: nothing to do
    core.connection_made()
    assert state_of(core) is State.CONNECTED
    with pytest.raises(InvalidStateError):
        core.logon_acked(Message(b'{"c":"ack","a":"processed","status":"success"}'))


# -------------------------------------------------------------------------------- logon


def test_logon_golden_bytes_and_success_ack() -> None:
    core = ClientCore()
    core.connection_made()
    waiter: Waiter[Message] = Waiter()
    cid = core.send_logon(
        waiter, client_name="pub-1", user="alice", password="secret", message_type="json"
    )
    assert cid == "auto1"
    assert state_of(core) is State.LOGGING_ON
    assert payloads(core) == [
        b'{"c":"logon","cid":"auto1","client_name":"pub-1","user_id":"alice","mt":"json",'
        b'"a":"processed","version":"' + CLIENT_VERSION.encode() + b'","pw":"secret"}'
    ]
    assert not waiter.done()
    feed(
        core,
        b'{"c":"ack","cid":"auto1","a":"processed","status":"success","s":41,"version":"5.3.4.0"}',
        bytewise=True,
    )
    ack = waiter.result(0)
    assert ack.sequence == 41
    assert core.logon_acked(ack) == "success"
    assert state_of(core) is State.LOGGED_ON
    assert core.server_version == "5.3.4.0"
    assert core.logon_ack is ack
    assert core.pending == {}


def test_logon_retry_then_failure() -> None:
    core = ClientCore()
    core.connection_made()
    w1: Waiter[Message] = Waiter()
    core.send_logon(w1, cid="L", client_name="c", user="u", password="a", message_type="json")
    feed(core, b'{"c":"ack","cid":"L","a":"processed","status":"retry"}')
    assert core.logon_acked(w1.result(0)) == "retry"
    assert state_of(core) is State.LOGGING_ON
    w2: Waiter[Message] = Waiter()
    core.send_logon(w2, cid="L", client_name="c", user="u", password="b", message_type="json")
    sent = payloads(core)
    assert len(sent) == 2 and b'"pw":"a"' in sent[0] and b'"pw":"b"' in sent[1]
    feed(core, b'{"c":"ack","cid":"L","a":"processed","status":"failure","reason":"auth"}')
    assert core.logon_acked(w2.result(0)) == "failure"
    assert state_of(core) is State.CONNECTED


# ---------------------------------------------------------------------------- correlation


def test_subscribe_correlation_routing_and_the_fast_path() -> None:
    core = logged_on()
    got: list[tuple[str | None, bytes]] = []
    waiter: Waiter[Message] = Waiter()
    cmd = Command("subscribe").set_topic("orders").set_sub_id("s1")
    pending = core.send_command(cmd, lambda m: got.append((m.sub_id, m.data)), None, waiter)
    assert pending is not None
    assert payloads(core) == [
        b'{"c":"subscribe","t":"orders","sub_id":"s1","cid":"auto2","a":"processed"}'
    ]
    feed(core, b'{"c":"ack","cid":"auto2","a":"processed","status":"success","sub_id":"s1"}')
    core.command_acked(pending, waiter.result(0))
    assert "auto2" in core.pending  # a subscription stays until unsubscribed
    delivery = b'{"c":"p","t":"orders","sids":"s1","s":%d}{"n":%d}'
    feed(core, delivery % (1, 1))
    assert core.routes.cache  # the first delivery taught the fast path its prefix
    feed(core, delivery % (2, 2), delivery % (3, 3), bytewise=True)
    assert got == [("s1", b'{"n":1}'), ("s1", b'{"n":2}'), ("s1", b'{"n":3}')]
    core.unsubscribe("s1")
    assert payloads(core) == [b'{"c":"unsubscribe","cid":"auto3","sub_id":"s1"}']
    assert core.pending == {} and "s1" not in core.routes


def test_sow_ends_on_its_completed_ack_and_failures_raise() -> None:
    core = logged_on()
    sink = Sink()
    waiter: Waiter[Message] = Waiter()
    pending = core.send_command(Command("sow").set_topic("orders"), sink.put, sink, waiter)
    assert pending is not None
    assert payloads(core) == [
        b'{"c":"sow","t":"orders","cid":"auto2","query_id":"auto2","a":"processed,completed"}'
    ]
    feed(
        core,
        b'{"c":"ack","cid":"auto2","a":"processed","status":"success"}',
        b'{"c":"group_begin","query_id":"auto2"}',
        b'{"c":"sow","query_id":"auto2","s":1}{"k":1}',
        b'{"c":"group_end","query_id":"auto2"}',
    )
    core.command_acked(pending, waiter.result(0))
    assert sink.ended == []  # a sow ends on its completed ack, not on group_end
    feed(core, b'{"c":"ack","cid":"auto2","a":"completed","status":"success"}')
    assert sink.ended == [None]
    assert [m.command for m in sink.items] == ["group_begin", "sow", "group_end"]
    assert core.pending == {} and core.queries == {}
    # a refused command raises the reason's error and is forgotten
    w2: Waiter[Message] = Waiter()
    p2 = core.send_command(Command("sow").set_topic("secret"), None, None, w2)
    assert p2 is not None
    feed(
        core,
        b'{"c":"ack","cid":"auto3","a":"processed","status":"failure","reason":"not entitled"}',
    )
    with pytest.raises(NotEntitledError):
        core.command_acked(p2, w2.result(0))
    assert "auto3" not in core.pending


def test_publish_terminal_acks_and_unrouted_acks() -> None:
    core = logged_on()
    # no acks asked: nothing tracked, no cid on the wire
    assert core.send_command(Command("p").set_topic("t").set_data(b"x"), None, None, None) is None
    assert payloads(core) == [b'{"c":"p","t":"t"}x']
    # persisted asked: no processed ack to wait for; the persisted ack ends it
    acks: list[str | None] = []
    waiter: Waiter[Message] = Waiter()
    cmd = Command("p").set_topic("t").set_data(b"y").set_ack_type("persisted")
    pending = core.send_command(cmd, lambda m: acks.append(m.header.get("a")), None, waiter)
    assert pending is not None and pending.waiter is None
    # (the publish without acks used up auto2: ids are unique, not dense)
    assert payloads(core) == [b'{"c":"p","t":"t","cid":"auto3","a":"persisted"}y']
    unrouted: list[Any] = []
    core.last_chance = lambda m: unrouted.append(m.command_id)
    feed(
        core,
        b'{"c":"ack","cid":"auto3","a":"persisted","status":"success"}',
        b'{"c":"ack","cid":"nobody","a":"processed"}',
    )
    assert acks == ["persisted"]
    assert core.pending == {}
    assert unrouted == ["nobody"]


# ------------------------------------------------------------------------------ heartbeats


def test_heartbeat_start_beats_and_timeout() -> None:
    core = logged_on()
    core.set_heartbeat(1.0)
    tick = core.start_heartbeat(100.0)
    assert tick == pytest.approx(0.1)
    assert payloads(core) == [b'{"c":"heartbeat","o":"start,1"}']
    assert core.heartbeat_tick(100.5) is False
    assert payloads(core) == []
    assert core.heartbeat_tick(101.0) is False
    assert payloads(core) == [b'{"c":"heartbeat","o":"beat"}']
    # the server's own beat is answered and counts as traffic
    feed(core, b'{"c":"heartbeat"}')
    assert payloads(core) == [b'{"c":"heartbeat","o":"beat"}']
    assert core.heartbeat_tick(101.5) is False  # traffic seen: the silence starts here
    assert core.heartbeat_tick(103.4) is False  # 1.9 s of silence: not yet
    assert core.heartbeat_tick(103.6) is True  # 2.1 s > 2 * interval: the server is gone


# ------------------------------------------------------------------------------ disconnects


def test_disconnect_fails_waiters_and_ends_a_query_in_flight() -> None:
    core = logged_on()
    sink = Sink()
    waiter: Waiter[Message] = Waiter()
    pending = core.send_command(Command("sow").set_topic("orders"), sink.put, sink, waiter)
    assert pending is not None
    feed(core, b'{"c":"ack","cid":"auto2","a":"processed","status":"success"}')
    core.command_acked(pending, waiter.result(0))
    flush: Waiter[Message] = Waiter()
    core.request(flush, "flush", {"c": "flush", "a": "processed"})
    err = core.connection_lost(ConnectionResetError("reset"))
    assert isinstance(err, DisconnectedError) and isinstance(err.__cause__, ConnectionResetError)
    assert state_of(core) is State.DISCONNECTED
    assert flush.exception(0) is err
    assert sink.ended == [err]  # the query between processed and completed ends at once
    assert core.pending == {} and core.queries == {}


def test_keep_routes_on_disconnect_keeps_subscriptions_for_a_reconnect() -> None:
    core = logged_on()
    core.keep_routes_on_disconnect = True
    sink = Sink()
    waiter: Waiter[Message] = Waiter()
    pending = core.send_command(Command("subscribe").set_topic("t"), sink.put, sink, waiter)
    assert pending is not None
    feed(core, b'{"c":"ack","cid":"auto2","a":"processed","status":"success"}')
    core.command_acked(pending, waiter.result(0))
    core.connection_lost(None)
    assert sink.ended == [] and "auto2" in core.routes and "auto2" in core.streams
    core.drop_subscription_commands()  # their cids belonged to the lost connection
    assert core.pending == {}
