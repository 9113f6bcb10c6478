"""The HA reconnect sequence as a sans-I/O core: no transport, no event loop, no thread.

A :class:`ClientCore` and the :class:`HASequence` next to it are driven by hand, as the HA
wing drives them: bytes in (``receive_data``: the logon ack with its ``s``, subscription acks,
deliveries), frames out (``data_to_send``, compared with golden bytes) and the exact events
of both. The store, the subscription table and the bookmark store are the real ones.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

import pytest

from ampsclient.acks import persisted_ack_writer
from ampsclient.command import Command
from ampsclient.core import ClientCore, CommandAcked, LogonAcked, Pending, PublishPersisted
from ampsclient.core.ha_sequence import (
    HA_TRANSITIONS,
    HAPhase,
    HAPhaseChanged,
    HAPhaseError,
    HASequence,
    PublishesReplayed,
    SequenceOpened,
    StoreDiscarded,
    SubscriptionDropped,
)
from ampsclient.exceptions import DisconnectedError, ForeignSequenceError, NotEntitledError
from ampsclient.ha.bookmarks import logging_handler, resume_point
from ampsclient.ha.subscriptions import Subscription, SubscriptionManager
from ampsclient.protocol.bookmarks import NOW
from ampsclient.protocol.message import Message
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient.stores.publish import MemoryPublishStore

D, REP, RES, OPEN, CLOSED = HAPhase
LOGON = (
    b'{"c":"logon","cid":"%s","client_name":"pub","mt":"json","a":"processed",'
    b'"version":"5.3.5.0.ampsclient-0.1.0:python"}'
)


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


def published(n: int, topic: str = "orders") -> bytes:
    """The golden bytes of stored publish ``n`` (body ``{"n":n}``)."""
    return b'{"c":"p","s":%d,"a":"persisted","t":"%s"}{"n":%d}' % (n, topic.encode(), n)


class Wing:
    """What the HA wing does around the two cores, minus the waiting: one connection after
    another, each logged on with the ``s`` the script gives."""

    def __init__(
        self, store: MemoryPublishStore, bookmarks: MemoryBookmarkStore | None = None
    ) -> None:
        self.store = store
        self.bookmarks = bookmarks
        self.core = ClientCore()
        self.core.keep_routes_on_disconnect = True
        self.core.persisted_events = True
        self.subs = SubscriptionManager()
        resume = None
        if bookmarks is not None:
            store_ = bookmarks

            def resume(sub_id: str, start: str) -> str:
                return resume_point(store_, sub_id, start)

        self.seq: HASequence[Subscription] = HASequence(
            core=self.core, store=store, subscriptions=self.subs, resume=resume
        )
        self.gate_open = False

    def publish(self, n: int, topic: str = "orders") -> int:
        """Store a publish; it goes out only while the gate is open (as queue_frame does)."""
        seq, payload = self.store.store_parts(
            b'{"c":"p","s":', b',"a":"persisted","t":"%s"}{"n":%d}' % (topic.encode(), n)
        )
        if self.gate_open:
            self.core.send_payload(payload)
        return seq

    def logon(self, s: int) -> None:
        """Connect, log on, and answer the logon with ``s``: the sequence starts."""
        core = self.core
        core.connection_made()
        cid = core.send_logon(client_name="pub", user=None, password=None, message_type="json")
        assert payloads(core) == [LOGON % cid.encode()]
        core.receive_data(
            frame(b'{"c":"ack","cid":"%s","a":"processed","status":"success","s":%d}' % (
                cid.encode(), s))
        )  # fmt: skip
        (acked,) = [e for e in core.events_received() if isinstance(e, LogonAcked)]
        assert acked.status == "success" and acked.ack.sequence == s
        self.seq.logged_on(acked.ack.sequence)

    def place(self, command: Command, handler: Any) -> Pending:
        """Send a command (the first time) and remember the subscription once acked."""
        pending = self.core.send_command(command, handler, None)
        assert pending is not None and pending.sub_id is not None
        self.ack(pending)
        self.subs.add(pending.sub_id, command, handler, None)
        return pending

    def ack(self, pending: Pending, status: bytes = b"success", reason: bytes = b"") -> None:
        """The server answers ``pending`` (bytes in), and the wing applies the ack."""
        extra = b',"reason":"%s"' % reason if reason else b""
        self.core.receive_data(
            frame(b'{"c":"ack","cid":"%s","a":"processed","status":"%s"%s}' % (
                pending.cid.encode(), status, extra))
        )  # fmt: skip
        (acked,) = [e for e in self.core.events_received() if isinstance(e, CommandAcked)]
        assert acked.cid == pending.cid
        self.core.command_acked(pending, acked.ack)

    def resubscribe_all(self) -> list[bytes]:
        """Re-place each subscription the sequence hands out, ack it; return the frames."""
        sent = []
        while (step := self.seq.next_resubscribe()) is not None:
            sub = step.subscription
            pending = self.core.send_command(step.command, sub.handler, None)
            assert pending is not None
            sent += payloads(self.core)
            self.ack(pending)
            self.seq.resubscribed(sub.sub_id)
        return sent

    def open(self) -> None:
        self.seq.open()
        self.gate_open = True

    def drop(self) -> None:
        """The transport went away."""
        self.core.connection_lost(DisconnectedError("reset by peer"))
        self.core.events_received()
        self.seq.connection_lost()
        self.gate_open = False


def sub(topic: str, sub_id: str, bookmark: str | None = None) -> Command:
    command = Command("subscribe").set_topic(topic).set_sub_id(sub_id)
    if bookmark is not None:
        command.set_bookmark(bookmark)
    return command


def test_the_phase_table_and_a_step_out_of_turn() -> None:
    assert HA_TRANSITIONS[D] == {REP, CLOSED}
    assert HA_TRANSITIONS[OPEN] == {D, CLOSED}
    wing = Wing(MemoryPublishStore(next_sequence=1))
    with pytest.raises(DisconnectedError):  # never logged on
        wing.seq.next_resubscribe()
    with pytest.raises(DisconnectedError):
        wing.seq.logged_on(0)
    wing.seq.connection_lost()  # nothing was logged on: nothing happens
    assert wing.seq.phase is D and wing.seq.events_received() == []
    wing.logon(0)
    wing.resubscribe_all()
    wing.open()
    with pytest.raises(HAPhaseError, match="OPEN to RESUBSCRIBING"):
        wing.seq.next_resubscribe()
    with pytest.raises(HAPhaseError, match="OPEN to REPLAYING"):
        wing.seq.logged_on(0)  # a logon needs a new connection first
    wing.seq.closed()
    assert wing.seq.events_received()[-1] == HAPhaseChanged(OPEN, CLOSED)


def test_a_connection_lost_while_the_wing_waits_ends_the_sequence() -> None:
    """The wing's await for a resubscribe ack may return after the connection went away (the
    ack came, then the close): the next step raises DisconnectedError (the wing reconnects),
    it does not open the gate on a dead connection."""
    wing = Wing(MemoryPublishStore(next_sequence=1))
    wing.subs.add("a", sub("t", "a"), lambda m: None, None)
    wing.logon(0)
    step = wing.seq.next_resubscribe()
    assert step is not None
    pending = wing.core.send_command(step.command, step.subscription.handler, None)
    assert pending is not None
    wing.ack(pending)
    wing.core.connection_lost(DisconnectedError("reset by peer"))  # before the wing resumes
    with pytest.raises(DisconnectedError):
        wing.seq.resubscribed("a")
    assert wing.seq.phase is D
    with pytest.raises(DisconnectedError):
        wing.seq.open()
    assert wing.seq.events_received()[-1] == HAPhaseChanged(RES, D)
    # the logon ack came, then the close, before the wing started the sequence
    wing.core.connection_made()
    wing.core.send_logon(client_name="pub", user=None, password=None, message_type="json")
    wing.core.connection_lost(DisconnectedError("reset by peer"))
    with pytest.raises(DisconnectedError):
        wing.seq.logged_on(0)
    assert wing.seq.phase is D and wing.seq.events_received() == []


def test_normal_reconnect_discard_replay_resubscribe_then_new_publishes() -> None:
    store = MemoryPublishStore(next_sequence=1)
    wing = Wing(store)
    wing.logon(0)
    assert wing.seq.events_received() == [
        HAPhaseChanged(D, REP), PublishesReplayed(0, None), HAPhaseChanged(REP, RES)
    ]  # fmt: skip
    assert wing.resubscribe_all() == []
    wing.open()
    assert wing.seq.events_received() == [HAPhaseChanged(RES, OPEN), SequenceOpened(0)]
    got: list[bytes] = []
    wing.place(sub("orders", "s1"), lambda m: got.append(m.data))
    assert payloads(wing.core) == [
        b'{"c":"subscribe","t":"orders","sub_id":"s1","cid":"auto2","a":"processed"}'
    ]
    assert [wing.publish(n) for n in range(1, 6)] == [1, 2, 3, 4, 5]
    assert payloads(wing.core) == [published(n) for n in range(1, 6)]
    wing.core.receive_data(frame(b'{"c":"ack","a":"persisted","s":2,"status":"success"}'))
    (persisted,) = wing.core.events_received()
    assert isinstance(persisted, PublishPersisted) and persisted.ack.sequence == 2
    store.discard_up_to(persisted.ack.sequence)  # what the wing does with a persisted ack
    assert store.unpersisted_count == 3

    wing.drop()
    assert wing.seq.events_received() == [HAPhaseChanged(OPEN, D)]
    assert wing.publish(6) == 6  # while down: stored only
    assert payloads(wing.core) == []

    wing.logon(3)  # the server had persisted 3 as well
    assert wing.seq.events_received() == [
        HAPhaseChanged(D, REP), StoreDiscarded(3), PublishesReplayed(3, 6),
        HAPhaseChanged(REP, RES),
    ]  # fmt: skip
    assert payloads(wing.core) == [published(4), published(5), published(6)]
    assert wing.seq.resubscribing == ["s1"]
    step = wing.seq.next_resubscribe()
    assert step is not None and step.subscription.sub_id == "s1"
    assert wing.publish(7) == 7  # while resubscribing: stored only
    pending = wing.core.send_command(step.command, step.subscription.handler, None)
    assert pending is not None
    assert payloads(wing.core) == [  # the same subscription, a new command id
        b'{"c":"subscribe","t":"orders","sub_id":"s1","cid":"auto4","a":"processed"}'
    ]
    wing.ack(pending)
    wing.seq.resubscribed("s1")
    assert wing.seq.next_resubscribe() is None
    wing.open()
    assert payloads(wing.core) == [published(7)]  # what was stored meanwhile, then open
    assert wing.seq.events_received() == [HAPhaseChanged(RES, OPEN), SequenceOpened(1)]
    assert wing.publish(8) == 8
    assert payloads(wing.core) == [published(8)]
    assert store.unpersisted_count == 5  # 4..8

    # the re-placed subscription routes deliveries to the same handler
    wing.core.receive_data(frame(b'{"c":"p","t":"orders","sids":"s1","s":1}{"x":1}'))
    assert got == [b'{"x":1}']


@pytest.mark.parametrize(
    ("s", "replayed", "left"),
    [
        (0, [1, 2, 3, 4, 5], 5),  # the server has none of them
        (2, [3, 4, 5], 3),  # part of the store
        (5, [], 0),  # all of it
    ],
)
def test_the_logon_acks_s_covers_part_of_the_store(s: int, replayed: list[int], left: int) -> None:
    store = MemoryPublishStore(next_sequence=1)
    for n in range(1, 6):
        store.store_parts(b'{"c":"p","s":', b',"a":"persisted","t":"orders"}{"n":%d}' % n)
    wing = Wing(store)
    wing.logon(s)
    assert payloads(wing.core) == [published(n) for n in replayed]
    assert wing.seq.events_received() == [
        HAPhaseChanged(D, REP),
        *([StoreDiscarded(s)] if s else []),
        PublishesReplayed(len(replayed), replayed[-1] if replayed else None),
        HAPhaseChanged(REP, RES),
    ]
    assert store.unpersisted_count == left
    assert store.lowest_unpersisted == (replayed[0] if replayed else None)


def test_a_logon_ack_s_the_store_never_issued_raises_and_keeps_everything() -> None:
    """``s`` at or above the store's next sequence (another publisher used the name): the
    unpersisted messages would be dropped by the server as duplicates, so nothing is
    discarded or replayed and :class:`ForeignSequenceError` is raised (issue 31)."""
    store = MemoryPublishStore(next_sequence=1)
    for n in range(1, 6):
        store.store_parts(b'{"c":"p","s":', b',"a":"persisted","t":"orders"}{"n":%d}' % n)
    wing = Wing(store)
    with pytest.raises(ForeignSequenceError, match="never issued"):
        wing.logon(6)
    assert payloads(wing.core) == []
    assert store.unpersisted_count == 5
    empty = MemoryPublishStore(next_sequence=1)  # nothing to lose: the store moves past s
    wing = Wing(empty)
    wing.logon(9)
    assert empty.next_sequence() == 10


def test_a_failure_mid_replay_then_the_next_logon_replays_again() -> None:
    store = MemoryPublishStore(next_sequence=1)
    for n in range(1, 6):
        store.store_parts(b'{"c":"p","s":', b',"a":"persisted","t":"orders"}{"n":%d}' % n)
    wing = Wing(store)
    wing.subs.add("s1", sub("orders", "s1"), lambda m: None, None)
    queued: list[int] = []

    def transport_dies_after_two_replays() -> None:
        queued.append(len(wing.core.outq))
        if len(queued) == 3:  # the logon and two replayed publishes are queued
            wing.core.connection_lost(DisconnectedError("reset by peer"))

    wing.core.on_send = transport_dies_after_two_replays
    with pytest.raises(DisconnectedError):
        wing.logon(0)
    assert wing.seq.phase is D
    assert wing.seq.events_received() == [HAPhaseChanged(D, REP), HAPhaseChanged(REP, D)]
    assert payloads(wing.core)[-2:] == [published(1), published(2)]
    assert store.unpersisted_count == 5  # nothing is lost: only an ack discards
    wing.core.on_send = None
    wing.core.events_received()

    wing.logon(1)  # the server got 1 before the drop
    assert payloads(wing.core) == [published(n) for n in (2, 3, 4, 5)]
    assert wing.seq.events_received() == [
        HAPhaseChanged(D, REP), StoreDiscarded(1), PublishesReplayed(4, 5),
        HAPhaseChanged(REP, RES),
    ]  # fmt: skip
    assert wing.resubscribe_all() == [
        b'{"c":"subscribe","t":"orders","sub_id":"s1","cid":"auto3","a":"processed"}'
    ]
    wing.open()
    assert wing.seq.phase is OPEN


def test_a_failed_resubscribe_is_dropped_or_starts_the_sequence_again() -> None:
    store = MemoryPublishStore(next_sequence=1)
    wing = Wing(store)
    for sid in ("a", "b", "c"):
        wing.subs.add(sid, sub("t-" + sid, sid), lambda m: None, None)
    wing.logon(0)
    wing.seq.events_received()

    # "a" is refused and the application keeps it: this connection is given up
    step = wing.seq.next_resubscribe()
    assert step is not None and step.subscription.sub_id == "a"
    pending = wing.core.send_command(step.command, step.subscription.handler, None)
    assert pending is not None
    with pytest.raises(NotEntitledError) as refused:
        wing.ack(pending, b"failure", b"not entitled")
    wing.seq.resubscribe_failed("a", refused.value, drop=False)
    assert wing.seq.phase is D
    assert wing.seq.events_received() == [HAPhaseChanged(RES, D)]
    assert list(wing.subs.__iter__()) and "a" in wing.subs
    wing.core.connection_lost(None)
    wing.core.events_received()
    payloads(wing.core)

    # the next logon starts over; this time "b" is refused and dropped
    wing.logon(0)
    wing.seq.events_received()
    sent = []
    while (step := wing.seq.next_resubscribe()) is not None:
        sid = step.subscription.sub_id
        pending = wing.core.send_command(step.command, step.subscription.handler, None)
        assert pending is not None
        sent += payloads(wing.core)
        if sid == "b":
            with pytest.raises(NotEntitledError) as refused:
                wing.ack(pending, b"failure", b"not entitled")
            wing.seq.resubscribe_failed("b", refused.value, drop=True)
        else:
            wing.ack(pending)
            wing.seq.resubscribed(sid)
    assert [Message(p).header["sub_id"] for p in sent] == ["a", "b", "c"]
    assert wing.seq.events_received() == [SubscriptionDropped("b", refused.value)]
    assert "b" not in wing.subs and "a" in wing.subs and "c" in wing.subs
    wing.open()
    assert wing.seq.phase is OPEN


def test_an_unsubscribe_during_the_sequence_is_not_replaced() -> None:
    wing = Wing(MemoryPublishStore(next_sequence=1))
    for sid in ("a", "b"):
        wing.subs.add(sid, sub("t", sid), lambda m: None, None)
    wing.logon(0)
    wing.subs.remove("a")
    step = wing.seq.next_resubscribe()
    assert step is not None and step.subscription.sub_id == "b"
    with pytest.raises(ValueError, match="'a' is not the subscription"):
        wing.seq.resubscribed("a")


def test_a_bookmark_subscription_resumes_from_its_own_start() -> None:
    """NOW and a timestamp are starting points, not EPOCH: with nothing discarded, a NOW
    subscription resumes at the oldest message it was handed (later ones are logged, and come
    back as duplicates), a timestamp one at its timestamp; neither at ``0``."""
    bookmarks = MemoryBookmarkStore()
    wing = Wing(MemoryPublishStore(next_sequence=1), bookmarks)
    wing.logon(0)
    wing.resubscribe_all()
    wing.open()
    got: list[bytes] = []
    dups: list[bytes] = []

    def on_dup(message: Message) -> None:
        dups.append(message.data)

    handler = logging_handler(bookmarks, lambda m: got.append(m.data), lambda: on_dup)
    wing.place(sub("orders", "now", NOW), handler)
    stamp = "20261124T010203Z"
    wing.place(sub("orders", "ts", stamp), logging_handler(bookmarks, lambda m: None, lambda: None))
    payloads(wing.core)
    for n in (1, 2):
        wing.core.receive_data(
            frame(b'{"c":"p","t":"orders","sids":"now","bm":"777|%d|","s":%d}{"n":%d}' % (
                n, n, n))
        )  # fmt: skip
    assert got == [b'{"n":1}', b'{"n":2}']
    wing.drop()
    wing.seq.events_received()

    wing.logon(0)
    resent = [Message(p).header for p in wing.resubscribe_all()]
    assert [(h["sub_id"], h["bm"]) for h in resent] == [("now", "777|1|"), ("ts", stamp)]
    wing.open()
    # the server sends 1 and 2 again from there: duplicates; 3 is new
    for n in (1, 2, 3):
        wing.core.receive_data(
            frame(b'{"c":"p","t":"orders","sids":"now","bm":"777|%d|","s":%d}{"n":%d}' % (
                n, n, n))
        )  # fmt: skip
    assert got == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    assert dups == [b'{"n":1}', b'{"n":2}']


def test_queue_acks_are_replayed_as_stored_a_cancel_stays_a_cancel() -> None:
    store = MemoryPublishStore(next_sequence=1)
    wing = Wing(store)
    dropped: list[bytes] = []  # the wing's queue_frame while disconnected: not sent
    write = persisted_ack_writer(store.store_parts, threading.Lock(), dropped.append)
    write("jobs", "11|1|", None)
    write("jobs", "11|2|", "cancel")
    write("jobs", "11|3|,11|4|", None)
    ack = (
        b'{"c":"sow_delete","s":%d,"t":"jobs","cid":"AMPS-queue-ack","a":"persisted",'
        b'"bookmark":"%s"%s}'
    )
    golden = [
        ack % (1, b"11|1|", b""),
        ack % (2, b"11|2|", b',"o":"cancel"'),
        ack % (3, b"11|3|,11|4|", b""),
    ]
    assert [f[4:] for f in dropped] == golden
    wing.logon(0)
    assert payloads(wing.core) == golden
    wing.drop()
    wing.seq.events_received()
    wing.logon(1)
    assert payloads(wing.core) == golden[1:]  # after a second failover, still a cancel
