"""The sans-I/O connection core, with no socket, no event loop and no thread.

Bytes go in through ``receive_data`` (TCP framing, fed whole and one byte at a time), time
through ``heartbeat_tick``; what the core sends is read back with ``data_to_send`` and
compared with golden bytes, and what happened with ``events_received``, compared with the
exact sequence of typed events.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from ampsclient.command import Command
from ampsclient.core import (
    TRANSITIONS,
    ClientCore,
    CommandAcked,
    CommandFailed,
    ConnectionLost,
    Event,
    HandlerFailed,
    HeartbeatTimedOut,
    InvalidStateError,
    LogonAcked,
    PublishPersisted,
    State,
    StateChanged,
    StreamEnded,
    SubscriptionPersisted,
)
from ampsclient.core.connection import CLIENT_VERSION
from ampsclient.exceptions import DisconnectedError, NotEntitledError
from ampsclient.protocol.message import Message

DOWN, CONN, LOGGING, ON, CLOSED = (
    State.DISCONNECTED,
    State.CONNECTED,
    State.LOGGING_ON,
    State.LOGGED_ON,
    State.CLOSED,
)


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


def events(core: ClientCore) -> list[Event]:
    return core.events_received()


def acked(event: Event) -> Message:
    """The ack a ``CommandAcked`` or ``LogonAcked`` carries."""
    assert isinstance(event, (CommandAcked, LogonAcked)), event
    return event.ack


class Sink:
    """A stream stand-in: records what it is given (the core ends it by an event)."""

    def __init__(self) -> None:
        self.command_id: str | None = None
        self.sub_id: str | None = None
        self.query_id: str | None = None
        self.items: list[Message] = []

    def put(self, message: Message) -> None:
        self.items.append(message)

    def finish(self, error: BaseException | None = None) -> None:
        raise AssertionError("the core ends a stream with a StreamEnded event, not a call")


def logged_on(**kwargs: Any) -> ClientCore:
    core = ClientCore(**kwargs)
    core.connection_made()
    cid = core.send_logon(client_name="c1", user="u", password=None, message_type="json")
    core.data_to_send()
    feed(core, b'{"c":"ack","cid":"%s","a":"processed","status":"success"}' % cid.encode())
    assert [type(e) for e in events(core)] == [StateChanged, StateChanged, StateChanged, LogonAcked]
    return core


# ------------------------------------------------------------------------------- state table


def test_every_state_has_a_row_and_illegal_moves_raise() -> None:
    assert set(TRANSITIONS) == set(State)
    core = ClientCore()
    assert state_of(core) is State.DISCONNECTED
    with pytest.raises(InvalidStateError) as info:
        core.send_logon(client_name="c", user=None, password=None, message_type="json")
    assert (info.value.current, info.value.wanted) == (State.DISCONNECTED, State.LOGGING_ON)
    assert core.data_to_send() == []  # nothing was queued by the refused logon
    assert events(core) == []  # nor did anything happen
    with pytest.raises(DisconnectedError):
        core.send_payload(b'{"c":"flush"}')
    core.connection_made()
    assert events(core) == [StateChanged(DOWN, CONN)]
    with pytest.raises(InvalidStateError):
        core.connection_made()  # already connected
    assert events(core) == []


def test_closed_by_the_application_then_connect_again() -> None:
    core = logged_on()
    assert state_of(core) is State.LOGGED_ON
    # logging on again over the same connection
    core.send_logon(cid="L2", client_name="c1", user="u", password=None, message_type="json")
    assert state_of(core) is State.LOGGING_ON
    ack = b'{"c":"ack","cid":"L2","a":"processed","status":"success"}'
    feed(core, ack)
    got = events(core)
    assert got == [
        StateChanged(ON, LOGGING),
        StateChanged(LOGGING, ON),
        LogonAcked("L2", "success", acked(got[2])),
    ]
    assert acked(got[2]).raw_payload == ack
    core.connection_lost(None, by_user=True)
    got = events(core)
    assert got[0] == StateChanged(ON, CLOSED) and got[1:] == [ConnectionLost(_error(got[1]), True)]
    assert state_of(core) is State.CLOSED
    core.connection_lost(None)  # nothing open any more: nothing to do
    assert events(core) == []
    core.connection_made()
    assert state_of(core) is State.CONNECTED
    # an ack of a logon never sent is no logon ack: it goes to the last-chance handler
    unrouted: list[bytes] = []
    core.last_chance = lambda m: unrouted.append(m.raw_payload)
    feed(core, ack)
    assert unrouted == [ack] and state_of(core) is State.CONNECTED
    assert events(core) == [StateChanged(CLOSED, CONN)]


def _error(event: Event) -> BaseException:
    assert isinstance(event, (ConnectionLost, CommandFailed, StreamEnded)), event
    assert event.error is not None
    return event.error


# -------------------------------------------------------------------------------- logon


def test_logon_golden_bytes_and_success_ack() -> None:
    core = ClientCore()
    core.connection_made()
    cid = core.send_logon(client_name="pub-1", user="alice", password="secret", message_type="json")
    assert cid == "auto1"
    assert state_of(core) is State.LOGGING_ON
    assert payloads(core) == [
        b'{"c":"logon","cid":"auto1","client_name":"pub-1","user_id":"alice","mt":"json",'
        b'"a":"processed","version":"' + CLIENT_VERSION.encode() + b'","pw":"secret"}'
    ]
    assert events(core) == [StateChanged(DOWN, CONN), StateChanged(CONN, LOGGING)]
    ack = b'{"c":"ack","cid":"auto1","a":"processed","status":"success","s":41,"version":"5.3.4.0"}'
    feed(core, ack, bytewise=True)
    got = events(core)
    assert got == [StateChanged(LOGGING, ON), LogonAcked("auto1", "success", acked(got[1]))]
    assert acked(got[1]).raw_payload == ack and acked(got[1]).sequence == 41
    assert state_of(core) is State.LOGGED_ON
    assert core.server_version == "5.3.4.0"
    assert core.logon_ack is acked(got[1])
    assert core.pending == {}
    assert payloads(core) == []  # an ack asks for no reply


def test_logon_retry_then_failure() -> None:
    core = ClientCore()
    core.connection_made()
    core.send_logon(cid="L", client_name="c", user="u", password="a", message_type="json")
    feed(core, b'{"c":"ack","cid":"L","a":"processed","status":"retry"}')
    got = events(core)
    assert got[2:] == [LogonAcked("L", "retry", acked(got[2]))]  # no move: still LOGGING_ON
    assert state_of(core) is State.LOGGING_ON
    core.send_logon(cid="L", client_name="c", user="u", password="b", message_type="json")
    sent = payloads(core)
    assert len(sent) == 2 and b'"pw":"a"' in sent[0] and b'"pw":"b"' in sent[1]
    feed(core, b'{"c":"ack","cid":"L","a":"processed","status":"failure","reason":"auth"}')
    got = events(core)
    assert got == [
        StateChanged(LOGGING, LOGGING),
        StateChanged(LOGGING, CONN),
        LogonAcked("L", "failure", acked(got[2])),
    ]
    assert acked(got[2]).reason == "auth"
    assert state_of(core) is State.CONNECTED


def test_a_logon_without_an_ack_in_time_is_abandoned() -> None:
    core = ClientCore()
    core.connection_made()
    cid = core.send_logon(client_name="c", user=None, password=None, message_type="json")
    core.logon_abandoned(cid)
    assert events(core) == [
        StateChanged(DOWN, CONN),
        StateChanged(CONN, LOGGING),
        StateChanged(LOGGING, CONN),
    ]
    unrouted: list[str | None] = []
    core.last_chance = lambda m: unrouted.append(m.command_id)
    feed(core, b'{"c":"ack","cid":"auto1","a":"processed","status":"success"}')  # too late
    assert unrouted == ["auto1"] and events(core) == [] and state_of(core) is State.CONNECTED


# ---------------------------------------------------------------------------- correlation


def test_subscribe_correlation_routing_and_the_fast_path() -> None:
    core = logged_on()
    got: list[tuple[str | None, bytes]] = []
    cmd = Command("subscribe").set_topic("orders").set_sub_id("s1")
    pending = core.send_command(cmd, lambda m: got.append((m.sub_id, m.data)), None)
    assert pending is not None and pending.wants_ack
    assert payloads(core) == [
        b'{"c":"subscribe","t":"orders","sub_id":"s1","cid":"auto2","a":"processed"}'
    ]
    assert events(core) == []
    feed(core, b'{"c":"ack","cid":"auto2","a":"processed","status":"success","sub_id":"s1"}')
    ev = events(core)
    assert ev == [CommandAcked("auto2", acked(ev[0]))]
    core.command_acked(pending, acked(ev[0]))
    assert "auto2" in core.pending  # a subscription stays until unsubscribed
    delivery = b'{"c":"p","t":"orders","sids":"s1","s":%d}{"n":%d}'
    feed(core, delivery % (1, 1))
    assert core.routes.cache  # the first delivery taught the fast path its prefix
    feed(core, delivery % (2, 2), delivery % (3, 3), bytewise=True)
    # deliveries go straight to the handler: no event per message
    assert got == [("s1", b'{"n":1}'), ("s1", b'{"n":2}'), ("s1", b'{"n":3}')]
    assert events(core) == []
    core.unsubscribe("s1")
    assert payloads(core) == [b'{"c":"unsubscribe","cid":"auto3","sub_id":"s1"}']
    assert core.pending == {} and "s1" not in core.routes
    assert events(core) == []  # it had no stream to end


def test_sow_ends_on_its_completed_ack_and_failures_raise() -> None:
    core = logged_on()
    sink = Sink()
    pending = core.send_command(Command("sow").set_topic("orders"), sink.put, sink)
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
    ev = events(core)
    assert ev == [CommandAcked("auto2", acked(ev[0]))]  # a sow ends on completed, not group_end
    core.command_acked(pending, acked(ev[0]))
    feed(core, b'{"c":"ack","cid":"auto2","a":"completed","status":"success"}')
    assert events(core) == [StreamEnded(sink, None)]
    assert [m.command for m in sink.items] == ["group_begin", "sow", "group_end"]
    assert core.pending == {} and core.queries == {}
    # a refused command raises the reason's error and is forgotten; its stream ends with it
    s2 = Sink()
    p2 = core.send_command(Command("sow").set_topic("secret"), s2.put, s2)
    assert p2 is not None
    feed(
        core,
        b'{"c":"ack","cid":"auto3","a":"processed","status":"failure","reason":"not entitled"}',
    )
    ev = events(core)
    assert ev == [CommandAcked("auto3", acked(ev[0]))]
    with pytest.raises(NotEntitledError):
        core.command_acked(p2, acked(ev[0]))
    assert "auto3" not in core.pending
    assert events(core) == [StreamEnded(s2, None)]


def test_publish_terminal_acks_persisted_acks_and_unrouted_acks() -> None:
    core = logged_on()
    # no acks asked: nothing tracked, no cid on the wire
    assert core.send_command(Command("p").set_topic("t").set_data(b"x"), None, None) is None
    assert payloads(core) == [b'{"c":"p","t":"t"}x']
    # persisted asked: AMPS conflates a publish's persisted acks by sequence number, never by
    # command id, so nothing is tracked and no cid is sent (as the official client sends it)
    acks: list[str | None] = []
    cmd = Command("p").set_topic("t").set_data(b"y").set_ack_type("persisted")
    assert core.send_command(cmd, lambda m: acks.append(m.header.get("a")), None) is None
    assert payloads(core) == [b'{"c":"p","t":"t","a":"persisted"}y']
    unrouted: list[Any] = []
    core.last_chance = lambda m: unrouted.append(m.command_id)
    core.persisted_events = True  # as an HA wing sets it: it tracks them
    feed(
        core,
        b'{"c":"ack","cid":"nobody","a":"processed"}',
        b'{"c":"ack","a":"persisted","s":7,"status":"success"}',
        b'{"c":"ack","a":"persisted","sub_id":"b1","bm":"1|2|"}',
    )
    assert acks == []
    assert core.pending == {}
    assert unrouted == ["nobody"]
    ev = events(core)
    assert ev == [PublishPersisted(acked_of(ev[0])), SubscriptionPersisted(acked_of(ev[1]))]
    assert acked_of(ev[0]).sequence == 7 and acked_of(ev[1]).bookmark == "1|2|"


def test_a_plain_core_gives_persisted_acks_to_the_last_chance_handler_in_stream_order() -> None:
    """Without an HA wing a persisted ack that answers no command is an unrouted message:
    handed over at once, between the frames around it, never queued as an event (queued, it
    reached the handler after the deliveries of the same read that followed it)."""
    core = logged_on()
    seen: list[tuple[str, str | None]] = []
    core.last_chance = lambda m: seen.append((m.command, m.header.get("bm") or m.header.get("s")))
    feed(
        core,
        b'{"c":"ack","a":"persisted","sub_id":"b1","bm":"1|2|"}',
        b'{"c":"ack","cid":"nobody","a":"processed"}',
        b'{"c":"ack","a":"persisted","s":7,"status":"success"}',
    )
    assert seen == [("ack", "1|2|"), ("ack", None), ("ack", 7)]
    assert events(core) == []


def acked_of(event: Event) -> Message:
    assert isinstance(event, (PublishPersisted, SubscriptionPersisted)), event
    return event.ack


def test_a_failing_handler_is_an_event_and_the_next_delivery_still_arrives() -> None:
    core = logged_on()
    boom = ValueError("boom")
    seen: list[bytes] = []

    def handler(m: Message) -> None:
        seen.append(m.data)
        if m.data == b"1":
            raise boom

    pending = core.send_command(Command("subscribe").set_topic("t").set_sub_id("s"), handler, None)
    assert pending is not None
    events(core)
    feed(core, b'{"c":"p","t":"t","sids":"s","s":1}1', b'{"c":"p","t":"t","sids":"s","s":2}2')
    assert seen == [b"1", b"2"]
    assert events(core) == [HandlerFailed(boom)]


# ------------------------------------------------------------------------------ heartbeats


def test_heartbeat_start_beats_and_timeout() -> None:
    core = logged_on()
    core.set_heartbeat(1.0)
    tick = core.start_heartbeat(100.0)
    assert tick == pytest.approx(0.1)
    assert payloads(core) == [b'{"c":"heartbeat","o":"start,1"}']
    core.heartbeat_tick(100.5)
    assert payloads(core) == [] and events(core) == []
    core.heartbeat_tick(101.0)
    assert payloads(core) == [b'{"c":"heartbeat","o":"beat"}']
    # the server's own beat is answered and counts as traffic
    feed(core, b'{"c":"heartbeat"}')
    assert payloads(core) == [b'{"c":"heartbeat","o":"beat"}']
    core.heartbeat_tick(101.5)  # traffic seen: the silence starts here
    core.heartbeat_tick(103.4)  # 1.9 s of silence: not yet
    assert events(core) == []
    assert payloads(core) == [b'{"c":"heartbeat","o":"beat"}']  # the beat due at 102
    core.heartbeat_tick(103.6)  # 2.1 s > 2 * interval: the server is gone
    ev = events(core)
    assert len(ev) == 1 and isinstance(ev[0], HeartbeatTimedOut)
    assert ev[0].silence == pytest.approx(2.1)
    assert payloads(core) == []  # no beat to a dead server


# ------------------------------------------------------------------------------ disconnects


def test_disconnect_fails_waiters_and_ends_a_query_in_flight() -> None:
    core = logged_on()
    sink = Sink()
    pending = core.send_command(Command("sow").set_topic("orders"), sink.put, sink)
    assert pending is not None
    feed(core, b'{"c":"ack","cid":"auto2","a":"processed","status":"success"}')
    core.command_acked(pending, acked(events(core)[0]))
    flush = core.request("flush", {"c": "flush", "a": "processed"})
    core.connection_lost(ConnectionResetError("reset"))
    ev = events(core)
    err = _error(ev[-1])
    assert isinstance(err, DisconnectedError) and isinstance(err.__cause__, ConnectionResetError)
    # the flush fails; the query between processed and completed ends at once (the sow
    # itself got its processed ack: nothing awaits it)
    assert ev == [
        StateChanged(ON, DOWN),
        CommandFailed(flush, err),
        StreamEnded(sink, err),
        ConnectionLost(err, False),
    ]
    assert state_of(core) is State.DISCONNECTED
    assert core.pending == {} and core.queries == {}


def test_keep_routes_on_disconnect_keeps_subscriptions_for_a_reconnect() -> None:
    core = logged_on()
    core.keep_routes_on_disconnect = True
    sink = Sink()
    pending = core.send_command(Command("subscribe").set_topic("t"), sink.put, sink)
    assert pending is not None
    feed(core, b'{"c":"ack","cid":"auto2","a":"processed","status":"success"}')
    core.command_acked(pending, acked(events(core)[0]))
    s2 = Sink()  # a query in flight ends even so
    assert core.send_command(Command("sow").set_topic("t"), s2.put, s2) is not None
    core.connection_lost(None)
    ev = events(core)
    err = _error(ev[-1])
    assert ev == [StateChanged(ON, DOWN), CommandFailed("auto3", err), StreamEnded(s2, err), ev[-1]]
    assert "auto2" in core.routes and "auto2" in core.streams
    core.drop_subscription_commands()  # their cids belonged to the lost connection
    assert core.pending == {}


def test_closing_ends_streams_quietly() -> None:
    core = logged_on()
    sink = Sink()
    assert core.send_command(Command("subscribe").set_topic("t"), sink.put, sink) is not None
    feed(core, b'{"c":"ack","cid":"auto2","a":"processed","status":"success"}')
    events(core)
    core.end_streams()
    core.connection_lost(None, by_user=True)
    ev = events(core)
    # each stream ends once, however many tables name it
    assert ev == [
        StreamEnded(sink, None),
        StateChanged(ON, CLOSED),
        ConnectionLost(_error(ev[2]), True),
    ]
