"""The /amps/instance statistics tree against real traffic: counts message by message,
subscriptions, topics, SOW records, the journal, and rates over the window."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, HAClient, Message
from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.topic_counts import TopicCounts
from ampsclient_server_stub.testing import RawClient, wait_for

from ._support import admin_port, get_json, request, with_admin

pytestmark = pytest.mark.integration


@pytest.fixture
def admin_server() -> Iterator[ServerThread]:
    thread = ServerThread(with_admin()).start()
    try:
        yield thread
    finally:
        thread.stop()


def connect(thread: ServerThread, name: str) -> Client:
    client = Client(name)
    client.connect(thread.uri())
    client.logon()
    return client


def test_client_counters_count_each_message(admin_server: ServerThread) -> None:
    port = admin_port(admin_server)
    pub = connect(admin_server, "pub")
    sub = connect(admin_server, "sub")
    got: list[Message] = []
    try:
        sub.subscribe(got.append, "orders", "/n > 4", sub_id="big-orders")
        sub.flush()  # the subscription is placed
        clients = get_json(port, "/amps/instance/clients")
        pub_before = clients["pub"]["messages_in"]
        sub_before = clients["sub"]["messages_out"]
        publishes_before = admin_server.statistics()["publishes"]
        bodies = [json.dumps({"n": n}) for n in range(10)]
        for body in bodies:
            pub.publish("orders", body)
        wait_for(lambda: len(got) == 5, what="the 5 matching deliveries")
        wait_for(
            lambda: get_json(port, "/amps/instance/clients/sub/messages_out") == sub_before + 5,
            what="5 more messages out to sub",
        )
        clients = get_json(port, "/amps/instance/clients")
        assert clients["pub"]["messages_in"] == pub_before + 10
        assert clients["pub"]["bytes_in"] >= sum(len(b) for b in bodies)
        assert clients["pub"]["remote_address"].startswith("127.0.0.1:")
        assert clients["pub"]["client_name"] == "pub"
        assert clients["pub"]["offline"] is False
        assert clients["sub"]["subscription_count"] == 1
        assert admin_server.statistics()["publishes"] == publishes_before + 10
        tree = get_json(port, "/amps/instance")
        assert tree["statistics"]["publishes"] == publishes_before + 10
        assert tree["client_count"] == 2
        orders = tree["topics"]["orders"]
        assert orders["publishes"] == 10  # every publish to the topic
        assert orders["deliveries"] == 5  # the 5 that passed the filter, to one connection
        assert orders["subscriptions"] == 1
        # one metric on its own, by path
        assert get_json(port, "/amps/instance/clients/pub/messages_in") == pub_before + 10
        # with .json, AMPS' form: rooted at "amps", the client as a one-entry list with its id
        assert get_json(port, "/amps/instance/clients/pub/messages_in.json") == {
            "amps": {"instance": {"clients": [{"id": "pub", "messages_in": pub_before + 10}]}}
        }
    finally:
        pub.close()
        sub.close()


def test_subscriptions_topics_and_sow(admin_server: ServerThread) -> None:
    port = admin_port(admin_server)
    client = connect(admin_server, "watcher")
    try:
        client.subscribe(lambda m: None, "prices", "/px > 10", sub_id="px")
        client.subscribe(lambda m: None, "^alerts\\.", sub_id="alerts")
        client.flush()
        subs = get_json(port, "/amps/instance/subscriptions/watcher")
        assert subs["px"]["topic"] == "prices"
        assert subs["px"]["filter"] == "/px > 10"
        assert subs["px"]["regex"] is False
        assert subs["px"]["bookmark"] is None
        assert subs["alerts"]["regex"] is True
        topics = get_json(port, "/amps/instance/topics")
        assert topics["prices"]["subscriptions"] == 1
        assert topics["^alerts\\."]["subscriptions"] == 1
        # the default config's SOW topic: 3 distinct keys, one updated twice
        for client_name, sub_id in (("a", "1"), ("b", "1"), ("c", "2"), ("a", "1")):
            doc = json.dumps({"clientName": client_name, "subId": sub_id, "bookmark": "x"})
            client.publish("/ADMIN/bookmark_store", doc)
        client.flush()
        wait_for(
            lambda: get_json(port, "/amps/instance/sow")["/ADMIN/bookmark_store"]["records"] == 3,
            what="3 SOW records",
        )
        sow = get_json(port, "/amps/instance/sow")["/ADMIN/bookmark_store"]
        assert sow["keys"] == ["/clientName", "/subId"]
        assert get_json(port, "/amps/instance/topics")["/ADMIN/bookmark_store"]["sow_records"] == 3
    finally:
        client.close()


def test_journal_and_bookmark_subscription_position(admin_server: ServerThread) -> None:
    port = admin_port(admin_server)
    replayed: list[Message] = []
    with HAClient("writer") as writer:
        writer.get_server_chooser().add(admin_server.uri())
        writer.connect_and_logon()
        before = get_json(port, "/amps/instance/journal")
        seqs = [writer.publish("ticks", json.dumps({"n": n})) for n in range(20)]
        writer.publish_flush(10_000)  # persisted: the journal fsynced them
        journal = get_json(port, "/amps/instance/journal")
        pid = publisher_id_for("writer")
        assert journal["last_bookmark"] == f"{pid}|{seqs[-1]}|"
        assert journal["last_index"] == before["last_index"] + 20
        assert journal["first_index"] == 1
        assert journal["records"] == journal["last_index"]
        assert journal["files"] == len(journal["segments"]) >= 1
        assert journal["bytes"] == sum(s["file_bytes"] for s in journal["segments"].values())
        assert journal["fsyncs"] > before["fsyncs"]
        assert journal["fsync_ns"] > before["fsync_ns"]
        if before["last_index"] == 0:
            assert journal["first_bookmark"] == f"{pid}|{seqs[0]}|"
        reader = connect(admin_server, "reader")
        try:
            reader.bookmark_subscribe(replayed.append, "ticks", "0", sub_id="replay")
            wait_for(lambda: len(replayed) == 20, what="the replay of 20 messages")
            path = "/amps/instance/subscriptions/reader/replay/bookmark"
            wait_for(lambda: get_json(port, path)["behind"] == 0, what="the replay to catch up")
            position = get_json(port, path)
            assert position["next_index"] == journal["last_index"] + 1
            assert position["replaying"] is False
            assert position["bookmark"] == f"{pid}|{seqs[-1]}|"
        finally:
            reader.close()


@pytest.mark.serial
def test_rates_follow_a_steady_publisher(admin_server: ServerThread) -> None:
    port = admin_port(admin_server)
    client = connect(admin_server, "steady")
    stop = threading.Event()
    sent: list[float] = []

    def publish() -> None:
        n = 0
        began = time.monotonic()
        while not stop.is_set():
            client.publish("steady", json.dumps({"n": n}))
            n += 1
            sent.append(time.monotonic())
            ahead = began + n / 200 - time.monotonic()  # pace at ~200/s
            if ahead > 0:
                stop.wait(ahead)

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        # 7 samples (one a second) while publishing: the 5 s rate window is all traffic
        wait_for(lambda: len(sent) > 0, what="publishing to start")
        start_samples = len(get_json(port, "/amps/instance/history"))
        wait_for(
            lambda: len(get_json(port, "/amps/instance/history")) >= start_samples + 7,
            timeout=15,
            what="7 more samples",
        )
        stats: dict[str, Any] = get_json(port, "/amps/instance/statistics")
        now = time.monotonic()
        recent = [t for t in sent if now - t <= 5.0]
        client_rate = len(recent) / 5.0
        assert client_rate > 100
        assert 0.6 * client_rate <= stats["publishes_per_sec"] <= 1.4 * client_rate
        assert stats["messages_in_per_sec"] >= 0.6 * client_rate
        history = get_json(port, "/amps/instance/history")
        assert len(history) >= 7
        assert all(h["clients"] == 1 for h in history[-5:])
        assert all(h["publishes_per_sec"] > 50 for h in history[-4:])
        per_client = get_json(port, "/amps/instance/clients/steady")
        assert 0.6 * client_rate <= per_client["messages_in_per_sec"] <= 1.4 * client_rate
    finally:
        stop.set()
        thread.join()
        client.close()


def test_unknown_nodes_are_404(admin_server: ServerThread) -> None:
    port = admin_port(admin_server)
    for path in ("/amps/instance/clients/nobody", "/amps/instance/nothing", "/amps/other"):
        status, _, body = request(port, path)
        assert status == 404, path
        assert b"not found" in body


def test_topic_counts_are_bounded() -> None:
    counts = TopicCounts(limit=2)
    for topic in ("a", "b", "c", "a"):
        counts.published(topic)
    counts.delivered("a", 3)
    counts.delivered("b", 1)
    counts.delivered("z", 4)
    assert counts.snapshot() == {"a": (2, 3), "b": (1, 1)}
    assert (counts.other_publishes, counts.other_deliveries) == (1, 4)


def test_topic_counts_of_a_publish_run() -> None:
    counts = TopicCounts()
    counts.published_run([(1, "a", b""), (2, "a", b""), (3, "b", b""), (4, "a", b"")])
    counts.published_run([])
    assert counts.snapshot() == {"a": (3, 0), "b": (1, 0)}


def test_an_offlined_slow_client_shows_its_backlog(tmp_path: Path) -> None:
    disk = tmp_path / "offline"
    xml = f"""<AMPSConfig><Name>slow</Name>
      <MessageMemoryLimit>2MB</MessageMemoryLimit><MessageDiskPath>{disk}</MessageDiskPath>
      <MessageDiskLimit>500MB</MessageDiskLimit><ClientMaxCapacity>50%</ClientMaxCapacity>
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      </Transport></Transports></AMPSConfig>"""
    config = with_admin(parse_config(xml, base_dir=tmp_path))
    with ServerThread(config, record_all_topics=False) as thread:
        port = admin_port(thread)
        sub = RawClient(thread.server.tcp_port, rcvbuf=4096, timeout=10)  # reads when told to
        try:
            sub.send({"c": "logon", "cid": "L", "client_name": "slow-reader", "a": "processed"})
            sub.send({"c": "subscribe", "cid": "S", "t": "bulk", "a": "processed"})
            acks = 0
            while acks < 2:
                acks += sum(1 for h, _ in sub.read_some(1 << 20, timeout=10) if h.get("c") == "ack")
            body = json.dumps({"pad": "x" * 8000})
            with Client("bulk-pub") as pub:
                pub.connect(thread.uri())
                pub.logon(5000)
                for _ in range(1500):  # ~12 MB towards a reader that reads nothing
                    pub.publish("bulk", body)
                pub.flush(30_000)
            slow = get_json(port, "/amps/instance/clients/slow-reader")
            assert slow["offline"] is True
            assert slow["offline_bytes"] > 4_000_000
            assert slow["queued_bytes_out"] >= slow["offline_bytes"]
            assert slow["queue_max_latency"] >= 0
            assert get_json(port, "/amps/instance/statistics/slow_offlined") >= 1
            seen = 0
            while seen < 1500:
                seen += sum(1 for h, _ in sub.read_some(1 << 20, timeout=10) if h.get("c") == "p")
            wait_for(
                lambda: get_json(port, "/amps/instance/clients/slow-reader/offline") is False,
                timeout=15,
                what="the reader to catch up",
            )
            assert get_json(port, "/amps/instance/clients/slow-reader/offline_bytes") == 0
        finally:
            sub.close()
