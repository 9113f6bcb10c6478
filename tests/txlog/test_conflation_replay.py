"""Conflation of bookmark subscriptions (seed 000, "Conflation and Bookmark Subscriptions").

During the replay the interval is on the journal's timeline (the receive times recorded with
each record), however fast the replay goes; the delivered message is the last of its hold under
the bookmark of the first; after the replay, the live part conflates like a regular
subscription. The journals here are written beforehand with chosen timestamps, then served by a
real server (``ServerThread`` over TCP) or driven through the broker with a manual clock.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _txlog_support import Inbox

from ampsclient import Client, Command
from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import SowTopicConfig, default_config
from ampsclient_server_stub.engine.broker import Broker
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.sow import SowTopic
from ampsclient_server_stub.engine.txlog import TxLog
from ampsclient_server_stub.testing import ManualTime
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

FEED = "feed"
PID = publisher_id_for(FEED)
SECOND = 1_000_000
BASE = (int(time.time()) - 3600) * SECOND  # an hour ago, whole second

_KEYS = SowTopic("quotes", keys=("/sym",))
"""Computes the SOW keys the server would give (never written to)."""


def bm(seq: int) -> str:
    return f"{PID}|{seq}|"


def write_journal(directory: Path, records: list[tuple[float, str, dict[str, Any]]]) -> None:
    """Records ``(seconds after BASE, topic, body)`` from publisher FEED, sequences 1.., with the
    SOW key ``k`` on the ``quotes`` topic (as the server journals SOW publishes)."""
    with Journal(directory, fsync="never") as journal:
        for seq, (offset, topic, body) in enumerate(records, start=1):
            fields: dict[str, str | int] = {"mt": "json"}
            if topic == "quotes":
                fields["k"] = _KEYS.compute_key(body)
            journal.append(
                publisher_id=PID,
                sequence=seq,
                topic=topic,
                command="p",
                payload=json.dumps(body).encode(),
                fields=fields,
                timestamp=BASE + round(offset * SECOND),
            )
        journal.sync()


# seconds after BASE, topic, body: with conflation=1s the holds are
#   A [0.0, 1.0): px 1, 2, 3 -> px 3 under bm(1)      B [0.2, 1.2): px 10, 11 -> px 11 under bm(2)
#   A [1.1, 2.1): px 4 under bm(6)                    C [1.3, 2.3): px 20 under bm(7)
#   A [5.0, 6.0): px 5 under bm(9), released when the replay has caught up
TIMELINE: list[tuple[float, str, dict[str, Any]]] = [
    (0.0, "quotes", {"sym": "A", "px": 1}),
    (0.2, "quotes", {"sym": "B", "px": 10}),
    (0.5, "quotes", {"sym": "A", "px": 2}),
    (0.9, "quotes", {"sym": "A", "px": 3}),
    (1.0, "quotes", {"sym": "B", "px": 11}),
    (1.1, "quotes", {"sym": "A", "px": 4}),
    (1.3, "quotes", {"sym": "C", "px": 20}),
    (1.4, "other", {"sym": "A", "px": -1}),  # another topic: never delivered, never conflated
    (5.0, "quotes", {"sym": "A", "px": 5}),
]
EXPECTED = [
    ({"sym": "A", "px": 3}, bm(1)),
    ({"sym": "B", "px": 11}, bm(2)),
    ({"sym": "A", "px": 4}, bm(6)),
    ({"sym": "C", "px": 20}, bm(7)),
    ({"sym": "A", "px": 5}, bm(9)),
]


def quotes_config(data_dir: Path) -> Any:
    config = default_config(tcp_port=0, ws_port=0, data_dir=data_dir)
    quotes = SowTopicConfig("quotes", "json", keys=("/sym",))
    return dataclasses.replace(config, sow_topics=(*config.sow_topics, quotes))


@pytest.fixture
def txserver(tmp_path: Path) -> Iterator[ServerThread]:
    """The TIMELINE journal behind a server (overrides the conftest's; its ``connect``
    fixture connects to this one)."""
    write_journal(tmp_path / "journal", TIMELINE)
    with ServerThread(
        quotes_config(tmp_path), fsync="never", persisted_ack_interval=0.05
    ) as thread:
        yield thread


def conflated_replay(
    sub: Client, topic: str, options: str, *, acks: tuple[str, ...] = ("completed",)
) -> Inbox:
    box = Inbox()
    sub.set_last_chance_message_handler(box)  # persisted acks carry only the sub_id
    cmd = Command("subscribe").set_topic(topic).set_bookmark("0").set_options(options)
    cmd.set_sub_id("cq").set_timeout(10_000)
    for ack in acks:
        cmd.add_ack_type(ack)
    sub.execute_async(cmd, box)
    return box


@pytest.mark.integration
def test_replay_conflates_on_the_journal_timeline_with_the_first_bookmark(
    connect: Callable[..., Client],
) -> None:
    sub = connect("sub")
    box = conflated_replay(sub, "quotes", "conflation=1s")
    box.wait_ack("completed")
    items = box.snapshot()
    assert [m.get_command() for m in items] == ["publish"] * 5 + ["ack"]
    got = [(m.json(), m.get_bookmark()) for m in items[:5]]
    assert got == EXPECTED
    assert [m.get_sow_key() for m in items[:5]] == [_KEYS.compute_key(body) for body, _ in EXPECTED]


@pytest.mark.integration
def test_conflation_key_on_a_recorded_plain_topic(connect: Callable[..., Client]) -> None:
    sub = connect("sub")
    box = conflated_replay(sub, "other|quotes", "conflation=1s,conflation_key=[/sym]")
    box.wait_ack("completed")
    # keys are per topic: "other" has its own hold for A
    got = [(m.get_topic(), m.json()["px"], m.get_bookmark()) for m in box.messages]
    assert got == [
        ("quotes", 3, bm(1)),
        ("quotes", 11, bm(2)),
        ("quotes", 4, bm(6)),
        ("quotes", 20, bm(7)),
        ("other", -1, bm(8)),
        ("quotes", 5, bm(9)),
    ]


@pytest.mark.integration
def test_a_short_interval_keeps_what_a_long_one_conflates(
    connect: Callable[..., Client],
) -> None:
    sub = connect("sub")
    box = conflated_replay(sub, "quotes", "conflation=100ms")
    box.wait_ack("completed")
    # 100 ms holds: no two records of a key fall inside one, so each comes with its own bookmark
    assert [m.get_bookmark() for m in box.messages] == [bm(s) for s in (1, 2, 3, 4, 5, 6, 7, 9)]


@pytest.mark.integration
def test_the_live_part_conflates_like_a_regular_subscription(
    connect: Callable[..., Client],
) -> None:
    sub, pub = connect("sub"), connect("pub")
    box = conflated_replay(sub, "quotes", "conflation=1s")
    box.wait_ack("completed")
    replayed = len(box.messages)
    started = time.monotonic()
    for px in (6, 7, 8):
        pub.publish("quotes", json.dumps({"sym": "A", "px": px}))
    pub.publish("quotes", json.dumps({"sym": "L", "px": 1}))
    pub.flush(5000)
    box.wait_messages(replayed + 2)
    live = box.messages[replayed:]
    waited = time.monotonic() - started
    pid = publisher_id_for(pub.name)
    assert [(m.json(), m.get_bookmark()) for m in live] == [
        ({"sym": "A", "px": 8}, f"{pid}|1|"),  # the last value under the first bookmark
        ({"sym": "L", "px": 1}, f"{pid}|4|"),
    ]
    assert waited >= 1.0


@pytest.mark.integration
def test_persisted_acks_of_a_conflated_replay_cover_what_was_delivered(
    txserver: ServerThread, connect: Callable[..., Client]
) -> None:
    sub = connect("sub")
    box = conflated_replay(sub, "quotes", "conflation=1s", acks=("completed", "persisted"))
    box.wait_ack("completed")
    box.wait(lambda b: len(b.acks("persisted")) >= 1)
    ack = box.acks("persisted")[-1]
    assert ack.get_sub_id() == "cq" and ack.get_status() == "success"
    assert ack.get_bookmark() == bm(9)  # the end of the log: everything was delivered


# --------------------------------------------------------------------------- manual time


def test_a_persisted_ack_never_passes_a_record_still_held(tmp_path: Path) -> None:
    write_journal(tmp_path, TIMELINE[:5])  # up to B px11 at 1.0 s
    journal = Journal(tmp_path, fsync="never")
    manual = ManualTime((BASE + 1.1 * SECOND) / SECOND)  # now: 1.1 s into the timeline
    sow = SowTopic("quotes", keys=("/sym",))
    broker = Broker(
        None,
        sow_topics=[sow],
        txlog=TxLog(journal),
        call_later=manual.call_later,
        clock=manual.clock,
        persisted_ack_interval=0,  # the test sends the acks itself
    )
    try:
        session = FakeSession()
        conn = broker.connect(session)
        broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": "s"}))
        fields = {"c": "subscribe", "cid": "c", "t": "quotes", "sub_id": "q", "bm": "0"}
        fields.update({"o": "conflation=1s", "a": "processed,persisted"})
        broker.handle(conn, encode_header(fields))
        # A's hold [0, 1) ended when the replay read B px11 at 1.0; B's [0.2, 1.2) has not
        assert [h["bm"] for h in session.headers("p")] == [bm(1)]
        broker.send_persisted_acks()
        # the replay has read up to bm(5), but B's hold started at bm(2): the ack stops before
        assert [h["bm"] for h in session.headers("ack", "persisted")] == [bm(1)]
        manual.advance_to((BASE + 1.2 * SECOND) / SECOND + 0.01)  # B's hold is over
        assert [h["bm"] for h in session.headers("p")] == [bm(1), bm(2)]
        broker.send_persisted_acks()
        assert [h["bm"] for h in session.headers("ack", "persisted")] == [bm(1), bm(5)]
        broker.send_persisted_acks()  # nothing delivered since: no ack
        assert len(session.headers("ack", "persisted")) == 2
        # unsubscribing drops what is held and its timer
        broker.handle(conn, encode_header({"c": "p", "t": "quotes"}) + b'{"sym":"Q","px":1}')
        broker.on_durable(journal.sync())
        assert [t for t in manual.timers if not t.cancelled]  # Q's hold waits for its time
        broker.handle(conn, encode_header({"c": "unsubscribe", "cid": "u", "sub_id": "q"}))
        assert [t for t in manual.timers if not t.cancelled] == []
    finally:
        broker.close()
        sow.close()
        journal.close()
