"""Periodic persisted acks to bookmark subscriptions (``shared/protocol.md`` §7.4).

A bookmark subscription that asks for ``persisted`` acks gets one per period (the server's
``persisted_ack_interval``) when it was delivered something since its last one, carrying a
real journal bookmark at or after everything delivered to it: during the replay, after it,
and for a subscriber that caught up and went idle, with no new publishes needed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _txlog_support import Inbox, journal_bookmarks, journal_config, unique, wait_durable

from ampsclient import Client, Command, Message
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.engine.broker import Broker, BrokerHooks
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.txlog import TxLog
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

pytestmark = pytest.mark.integration


@pytest.fixture
def txserver(tmp_path: Path) -> Iterator[ServerThread]:
    """A journaled server that sends bookmark persisted acks every 100 ms (overrides the
    conftest's; its ``connect`` fixture connects to this one)."""
    with ServerThread(
        journal_config(tmp_path), fsync="never", persisted_ack_interval=0.1
    ) as thread:
        yield thread


def publish(client: Client, topic: str, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        client.publish(topic, json.dumps({"n": n}))
    client.flush(10_000)


def bookmark_sub(client: Client, topic: str, sub_id: str, box: Inbox, options: str = "") -> None:
    client.set_last_chance_message_handler(box)  # persisted acks carry no command id
    cmd = Command("subscribe").set_topic(topic).set_bookmark("0").set_sub_id(sub_id)
    cmd.set_options(options or None).add_ack_type("completed").add_ack_type("persisted")
    client.execute_async(cmd.set_timeout(10_000), box)


def check_acks_cover_deliveries(items: list[Message], log: list[str], sub_id: str) -> int:
    """Every persisted ack of ``sub_id`` is a journal bookmark at or after each message of
    ``sub_id`` delivered before it; returns how many acks there were."""
    last_delivered = -1
    acks = 0
    for item in items:
        if item.get_command() == "publish" and item.get_sub_id() == sub_id:
            last_delivered = log.index(str(item.get_bookmark()))
        elif item.get_command() == "ack" and item.get_ack_type() == "persisted":
            if item.get_sub_id() != sub_id:
                continue
            acks += 1
            assert item.get_status() == "success"
            assert item.get_bookmark() in log
            assert log.index(str(item.get_bookmark())) >= last_delivered
    return acks


def test_an_idle_caught_up_subscriber_gets_an_ack_covering_its_last_delivery(
    txserver: ServerThread, connect: Callable[[str], Client]
) -> None:
    pub, sub = connect("pub"), connect("sub")
    topic = unique("idle")
    publish(pub, topic, 20)
    wait_durable(txserver)
    box = Inbox()
    bookmark_sub(sub, topic, "idle", box)
    box.wait_ack("completed")
    # no publish from here on: the ack comes from the server's timer alone
    ack = box.wait_ack("persisted")
    log = journal_bookmarks(txserver)
    assert ack.get_sub_id() == "idle"
    assert ack.get_bookmark() == box.messages[-1].get_bookmark() == log[-1]
    assert [m.json()["n"] for m in box.messages] == list(range(20))
    assert check_acks_cover_deliveries(box.snapshot(), log, "idle") >= 1


def test_a_replaying_subscriber_gets_acks_before_the_replay_completes(
    txserver: ServerThread, connect: Callable[[str], Client]
) -> None:
    pub, sub = connect("pub"), connect("sub")
    topic = unique("slow")
    publish(pub, topic, 300)
    wait_durable(txserver)
    box = Inbox()
    bookmark_sub(sub, topic, "slow", box, options="rate=500")  # ~0.6 s of replay
    box.wait_ack("completed")
    items = box.snapshot()
    kinds = [(m.get_command(), m.get_ack_type()) for m in items]
    completed_at = kinds.index(("ack", "completed"))
    during = [k for k in kinds[:completed_at] if k == ("ack", "persisted")]
    assert during, "no persisted ack while the replay was running"
    assert [m.json()["n"] for m in box.messages] == list(range(300))
    check_acks_cover_deliveries(items, journal_bookmarks(txserver), "slow")


def test_acks_go_only_to_subscriptions_delivered_something_since_their_last(
    txserver: ServerThread, connect: Callable[[str], Client]
) -> None:
    pub, sub = connect("pub"), connect("sub")
    quiet, busy = unique("quiet"), unique("busy")
    box = Inbox()
    bookmark_sub(sub, quiet, "quiet", box)
    bookmark_sub(sub, busy, "busy", box)
    box.wait(lambda b: len(b.acks("completed")) == 2)
    publish(pub, quiet, 1)
    box.wait(lambda b: any(a.get_sub_id() == "quiet" for a in b.acks("persisted")))

    def busy_acks(b: Inbox) -> int:
        return sum(1 for a in b.acks("persisted") if a.get_sub_id() == "busy")

    for n in range(6):  # each round: a delivery to "busy", then its next ack (>= 1 period)
        before = busy_acks(box)
        publish(pub, busy, 1, start=n)
        box.wait(lambda b, before=before: busy_acks(b) > before)  # type: ignore[misc]
    quiet_acks = [a for a in box.acks("persisted") if a.get_sub_id() == "quiet"]
    assert len(quiet_acks) == 1  # six periods later, still the one for its single delivery
    log = journal_bookmarks(txserver)
    items = box.snapshot()
    assert check_acks_cover_deliveries(items, log, "quiet") == 1
    assert check_acks_cover_deliveries(items, log, "busy") == 6
    # the quiet subscription's ack is exactly its message: later records are not delivered
    quiet_message = next(m for m in box.messages if m.get_sub_id() == "quiet")
    assert quiet_acks[0].get_bookmark() == quiet_message.get_bookmark()


def test_a_live_subscription_is_acked_only_once_what_it_got_is_durable(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync="never")
    # commits by hand
    broker = Broker(None, txlog=TxLog(journal), hooks=BrokerHooks(request_sync=lambda: None))
    try:
        session = FakeSession()
        conn = broker.connect(session)
        broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": "s"}))
        fields = {"c": "subscribe", "cid": "c", "t": "t", "sub_id": "v", "bm": "0", "o": "live"}
        broker.handle(conn, encode_header({**fields, "a": "processed,persisted"}))
        broker.handle(conn, b'{"c":"p","t":"t"}{"n":1}')
        assert len(session.headers("p")) == 1  # delivered before it is durable
        assert broker.send_persisted_acks() is True
        assert session.headers("ack", "persisted") == []  # not durable: no ack yet
        broker.on_durable(journal.sync())
        broker.send_persisted_acks()
        acks = session.headers("ack", "persisted")
        assert [(a["sub_id"], a["bm"]) for a in acks] == [("v", session.headers("p")[0]["bm"])]
        broker.send_persisted_acks()
        assert len(session.headers("ack", "persisted")) == 1  # nothing new delivered
    finally:
        broker.close()
        journal.close()
