"""What the transaction log records, and the bookmark forms that depend on it (issue #17).

Against a real :class:`ServerThread` (journal in ``tmp_path``) over raw TCP sockets:

* ``<TransactionLog><Topic><Filter>`` records only the messages that match the filter;
* a bookmark subscription to a topic the log does not record, or to any topic of an instance
  without a transaction log (a config file without ``<TransactionLog>``, ``--no-txlog``),
  fails with ``invalid topic`` (it used to be treated as NOW);
* a replay whose start time is in the future delivers nothing received before that time;
* ``live`` with ``rate``, ``pause`` or ``resume`` is refused with ``invalid options``;
* a subscribe that repeats its topic and sub id with ``pause`` pauses the subscription;
* a ``sow`` with a bookmark (historical query) fails: no topic keeps history.

Each "nothing arrived" is proved with a marker: an ack or a message sent after the thing that
must not arrive, on the same connection.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

TXLOG_FILTERED = """
<AMPSConfig>
  <Name>rec</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType></Transport></Transports>
  <TransactionLog>
    <JournalDirectory>journal</JournalDirectory>
    <JournalSize>1MB</JournalSize>
    <PreallocatedJournalFiles>1</PreallocatedJournalFiles>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Filter>/keep = 1</Filter></Topic>
    <Topic><Name>all</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
</AMPSConfig>
"""

NO_TXLOG = """
<AMPSConfig>
  <Name>plain</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType></Transport></Transports>
</AMPSConfig>
"""


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[ServerThread]:
    thread = ServerThread(parse_config(TXLOG_FILTERED, base_dir=tmp_path))
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


def connect(server: ServerThread, name: str) -> RawClient:
    client = RawClient(server.tcp_port)
    client.logon(name)
    return client


def publish(client: RawClient, topic: str, docs: list[dict[str, Any]]) -> None:
    """Publish ``docs`` and wait until they are persisted (the persisted ack of the last)."""
    for seq, doc in enumerate(docs, start=1):
        hdr: dict[str, Any] = {"c": "p", "t": topic, "s": seq}
        client.send(hdr, json.dumps(doc).encode())
    client.send({"c": "flush", "cid": "F", "a": "persisted"})
    ack, _ = client.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "F", 10)
    assert ack.get("status") == "success", ack


def subscribe(client: RawClient, topic: str, bookmark: str, **fields: Any) -> dict[str, Any]:
    """A bookmark subscription; returns its processed ack."""
    hdr = {"c": "subscribe", "cid": "S", "t": topic, "sub_id": "s1", "bm": bookmark}
    hdr.update({"a": "processed,completed", **fields})
    client.send(hdr)
    ack, _ = client.recv_until(
        lambda h: h.get("c") == "ack" and h.get("cid") == "S" and h.get("a") == "processed", 10
    )
    return ack


def replayed_until_completed(client: RawClient) -> list[dict[str, Any]]:
    """The messages delivered before the ``completed`` ack (the marker)."""
    docs: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while True:
        hdr, body = client.recv(max(0.0, deadline - time.monotonic()))
        if hdr.get("c") == "p":
            docs.append(json.loads(body))
        elif hdr.get("c") == "ack" and hdr.get("a") == "completed":
            return docs


# --------------------------------------------------------------------------- Filter


def test_txlog_topic_filter_records_only_matching_messages(recorded: ServerThread) -> None:
    with connect(recorded, "pub") as pub:
        docs = [{"n": n, "keep": n % 2} for n in range(1, 9)]
        publish(pub, "orders", docs)
    journal = recorded.server.journal
    assert journal is not None
    assert journal.last_index == 4  # n = 1, 3, 5, 7: the others were never written
    with connect(recorded, "sub") as sub:
        assert subscribe(sub, "orders", "0")["status"] == "success"
        assert [d["n"] for d in replayed_until_completed(sub)] == [1, 3, 5, 7]


def test_filtered_topic_still_delivers_live_messages_it_does_not_record(
    recorded: ServerThread,
) -> None:
    """The filter decides what is recorded, not what plain subscribers get."""
    with connect(recorded, "sub") as sub, connect(recorded, "pub") as pub:
        sub.send({"c": "subscribe", "cid": "S", "t": "orders", "sub_id": "p", "a": "processed"})
        sub.wait_ack("processed")
        publish(pub, "orders", [{"n": 1, "keep": 0}, {"n": 2, "keep": 1}])
        got = [json.loads(sub.recv_until(lambda h: h.get("c") == "p")[1])["n"] for _ in range(2)]
        assert got == [1, 2]


def test_bad_txlog_filter_is_a_config_error() -> None:
    bad = TXLOG_FILTERED.replace("/keep = 1", "/keep = = 1")
    with pytest.raises(ConfigError, match=r"<TransactionLog> <Topic> 'orders': bad <Filter>"):
        parse_config(bad)


# --------------------------------------------------------------------------- unrecorded


def test_bookmark_subscription_to_unrecorded_topic_fails(recorded: ServerThread) -> None:
    with connect(recorded, "sub") as sub:
        ack = subscribe(sub, "elsewhere", "0")
        assert ack["status"] == "failure"
        assert ack["reason"] == "invalid topic"


@pytest.mark.parametrize("bookmark", ["0", "0|1|", "1|1|", "20250101T000000Z"])
def test_without_txlog_every_bookmark_subscription_fails(tmp_path: Path, bookmark: str) -> None:
    """A config file without <TransactionLog> records nothing (record_all_topics=False is what
    the command line passes with --config): bookmark subscriptions fail, NOW included."""
    config = parse_config(NO_TXLOG, base_dir=tmp_path)
    with ServerThread(config, record_all_topics=False) as server:
        assert server.server.journal is None
        with connect(server, "sub") as sub:
            ack = subscribe(sub, "orders", bookmark)
            assert (ack["status"], ack["reason"]) == ("failure", "invalid topic")
            # a plain subscription still works: the connection is fine
            sub.send({"c": "subscribe", "cid": "P", "t": "orders", "a": "processed"})
            assert sub.wait_ack("processed")["status"] == "success"


# --------------------------------------------------------------------------- replay forms


def _stamp(when: datetime) -> str:
    return when.strftime("%Y%m%dT%H%M%S") + f".{when.microsecond:06d}Z"


@pytest.mark.parametrize("form", ["range", "timestamp"])
def test_future_start_time_delivers_nothing_published_before_it(
    recorded: ServerThread, form: str
) -> None:
    start = datetime.now(UTC) + timedelta(seconds=1.5)
    end = start + timedelta(hours=1)
    bookmark = f"[{_stamp(start)}:{_stamp(end)}]" if form == "range" else _stamp(start)
    with connect(recorded, "sub") as sub, connect(recorded, "pub") as pub:
        assert subscribe(sub, "all", bookmark)["status"] == "success"
        publish(pub, "all", [{"n": 1}, {"n": 2}])  # received before the start time
        while datetime.now(UTC) <= start + timedelta(milliseconds=50):
            time.sleep(0.05)  # not a synchronisation: the start time must be in the past
        pub.send({"c": "p", "t": "all", "s": 3}, json.dumps({"n": 3}).encode())
        first = json.loads(sub.recv_until(lambda h: h.get("c") == "p", 10)[1])
        assert first == {"n": 3}


@pytest.mark.parametrize("other", ["rate=10", "pause", "resume"])
def test_live_with_rate_pause_or_resume_is_refused(recorded: ServerThread, other: str) -> None:
    with connect(recorded, "sub") as sub:
        ack = subscribe(sub, "all", "0", o=f"live,{other}")
        assert (ack["status"], ack["reason"]) == ("failure", "invalid options")
        assert subscribe(sub, "all", "0", o="live")["status"] == "success"


def test_subscribe_repeating_its_topic_with_pause_pauses(recorded: ServerThread) -> None:
    with connect(recorded, "sub") as sub, connect(recorded, "pub") as pub:
        publish(pub, "all", [{"n": 1}])
        assert subscribe(sub, "all", "0")["status"] == "success"
        assert [d["n"] for d in replayed_until_completed(sub)] == [1]
        sub.send(
            {
                "c": "subscribe",
                "cid": "P",
                "t": "all",
                "sub_id": "s1",
                "o": "pause",
                "a": "processed",
            }
        )
        assert sub.wait_ack("processed")["status"] == "success"
        # s2, on the same connection and topic, is the marker: it gets n=2 and n=3 from the
        # same journal pass that would deliver them to s1
        hdr = {"c": "subscribe", "cid": "S2", "t": "all", "sub_id": "s2", "bm": "0|1|"}
        sub.send({**hdr, "a": "processed"})
        assert sub.wait_ack("processed")["status"] == "success"
        pub.send({"c": "p", "t": "all", "s": 2}, b'{"n": 2}')
        pub.send({"c": "p", "t": "all", "s": 3}, b'{"n": 3}')
        seen: list[tuple[str, int]] = []
        while ("s2", 3) not in seen:
            h, body = sub.recv_until(lambda h: h.get("c") == "p", 10)
            seen.append((h["sids"], json.loads(body)["n"]))
        sub.send({"c": "flush", "cid": "F", "a": "persisted"})
        while True:
            h, body = sub.recv(10)
            if h.get("cid") == "F":
                break
            if h.get("c") == "p":
                seen.append((h["sids"], json.loads(body)["n"]))
        assert seen == [("s2", 2), ("s2", 3)]  # s1 is paused: nothing for it
        sub.send({"c": "subscribe", "cid": "R", "t": "all", "sub_id": "s1", "o": "resume"})
        resumed = [sub.recv_until(lambda h: h.get("sids") == "s1", 10) for _ in range(2)]
        assert [json.loads(body)["n"] for _, body in resumed] == [2, 3]


# --------------------------------------------------------------------------- historical SOW


def test_sow_with_a_bookmark_fails_instead_of_returning_the_current_sow(
    tmp_path: Path,
) -> None:
    xml = TXLOG_FILTERED.replace(
        "<TransactionLog>",
        "<SOW><Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key>"
        "</Topic></SOW><TransactionLog>",
    )
    with (
        ServerThread(parse_config(xml, base_dir=tmp_path)) as server,
        connect(server, "q") as client,
    ):
        publish(client, "quotes", [{"id": 1, "px": 10}])
        client.send({"c": "sow", "cid": "Q", "t": "quotes", "bm": "0", "a": "processed,completed"})
        ack, _ = client.recv_until(lambda h: h.get("cid") == "Q", 10)
        assert (ack["status"], ack["reason"]) == ("failure", "invalid options")
        # the same query without a bookmark returns the current SOW
        client.send({"c": "sow", "cid": "Q2", "t": "quotes", "a": "processed,completed"})
        _, body = client.recv_until(lambda h: h.get("c") == "sow", 10)
        assert b'{"id": 1, "px": 10}' in body


# --------------------------------------------------------------------------- official client


def test_the_official_client_raises_the_matching_exceptions(tmp_path: Path) -> None:
    """The reasons map to the official client's exceptions: ``invalid options`` (live with
    rate; a historical sow) -> InvalidOptionsException, ``invalid topic`` (an unrecorded topic)
    -> InvalidTopicException."""
    amps = pytest.importorskip("AMPS")
    xml = TXLOG_FILTERED.replace(
        "<TransactionLog>",
        "<SOW><Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key>"
        "</Topic></SOW><TransactionLog>",
    )
    with ServerThread(parse_config(xml, base_dir=tmp_path)) as server:
        client = amps.Client("official-recording")
        try:
            client.connect(server.uri("tcp", "json"))
            client.logon()
            cases = [
                ("subscribe", "all", "live,rate=10", amps.InvalidOptionsException),
                ("subscribe", "elsewhere", None, amps.InvalidTopicException),
                ("sow", "quotes", None, amps.InvalidOptionsException),
            ]
            for command, topic, options, error in cases:
                cmd = amps.Command(command).set_topic(topic).set_bookmark("0")
                if options:
                    cmd.set_options(options)
                with pytest.raises(error):
                    client.execute(cmd)
        finally:
            client.close()
