"""Replication semantics with both instances in this process (fast, white-box): sync acks,
fully_durable, downgrade/upgrade, partitions and resync, validation and authentication
failures, passive destinations, SOW/delta/sow_delete replication, dedup state."""

from __future__ import annotations

import concurrent.futures
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from _replication_support import admin, dest_state, start_threads, wait_for

from ampsclient import Client, Command
from ampsclient.exceptions import TimeoutError as AmpsTimeoutError
from ampsclient.sync import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.cluster import Cluster, DowngradePolicy, TopicRule
from ampsclient_server_stub.testing import Inbox, RawClient

pytestmark = pytest.mark.integration


def publishes() -> Inbox:
    """A thread-safe collector of deliveries (``publish`` commands only)."""
    return Inbox(keep=lambda m: m.get_command() == "publish")


@pytest.fixture
def threads() -> Iterator[dict[str, ServerThread]]:
    running: dict[str, ServerThread] = {}
    yield running
    for thread in running.values():
        thread.stop()


def client(uri: str, name: str) -> Client:
    c = Client(name)
    c.connect(uri)
    c.logon(5000)
    return c


def journal_ns(thread: ServerThread, topic: str = "orders") -> list[int]:
    journal = thread.server.journal
    assert journal is not None

    def read() -> list[int]:
        out: list[int] = []
        position = journal.first_index
        while True:
            batch = journal.read(position, max_records=5000)
            if not batch:
                return out
            out += [int(json.loads(r.payload)["n"]) for r in batch if r.topic == topic]
            position = batch[-1].index + 1

    return thread.call(read)


def pair(
    tmp_path: Path, threads: dict[str, ServerThread], *, downgrade: DowngradePolicy | None = None
) -> tuple[ServerThread, ServerThread]:
    cluster = Cluster(tmp_path, downgrade=downgrade)
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.hot_hot(a, b)
    threads.update(start_threads(cluster, a, b))
    ta, tb = threads["A"], threads["B"]
    wait_for(
        lambda: dest_state(ta, "B")["connected"] and dest_state(tb, "A")["connected"],
        10,
        "the link",
    )
    return ta, tb


def pending(future: concurrent.futures.Future[Any], seconds: float = 0.5) -> bool:
    """Still unresolved after ``seconds`` (a bounded negative check)."""
    try:
        future.result(seconds)
    except concurrent.futures.TimeoutError:
        return True
    return False


# --------------------------------------------------------------------------- acks


def test_sync_ack_waits_for_the_destination_and_fully_durable_follows(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    ta, tb = pair(tmp_path, threads)
    plain, durable = publishes(), publishes()
    with client(ta.uri(), "subs") as subs, HAClient("pub") as pub:
        for box, options in ((plain, None), (durable, "fully_durable")):
            cmd = Command("subscribe").set_topic("orders").set_bookmark("0|1|")
            cmd.set_options(options)
            subs.execute_async(cmd, box)
        pub.get_server_chooser().add(ta.uri())
        pub.connect_and_logon()
        pub.publish_and_wait("orders", json.dumps({"n": 0}), timeout=10_000)
        wait_for(lambda: durable.ns() == [0] and plain.ns() == [0], 10, "n=0 on both subs")

        admin(ta, "partition", peer="B")
        admin(tb, "partition", peer="A")
        future = pub.publish_future("orders", json.dumps({"n": 1}))
        assert pending(future), "no persisted ack while the sync destination is cut off"
        wait_for(lambda: plain.ns() == [0, 1], 10, "n=1 to the plain bookmark subscriber")
        assert durable.ns() == [0], "fully_durable waits for the sync destination"
        assert journal_ns(tb) == [0]

        admin(ta, "heal", peer="B")
        admin(tb, "heal", peer="A")
        future.result(10)  # resync, B acknowledges, the publisher gets its ack
        wait_for(lambda: durable.ns() == [0, 1], 10, "n=1 to the fully_durable subscriber")
        assert journal_ns(tb) == [0, 1]


def test_manual_downgrade_releases_acks_and_upgrade_restores_sync(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    ta, tb = pair(tmp_path, threads)
    with HAClient("pub") as pub:
        pub.get_server_chooser().add(ta.uri())
        pub.connect_and_logon()
        admin(ta, "partition", peer="B")
        future = pub.publish_future("orders", json.dumps({"n": 1}))
        assert pending(future)
        assert admin(ta, "downgrade", destination="B") is True
        future.result(10)  # async now: A acknowledges on its own
        state = dest_state(ta, "B")
        assert state["effective"] == "async" and state["manual"]
        assert ta.call(lambda: ta.server.upgrade_replication("B")) is True
        assert dest_state(ta, "B")["effective"] == "sync"
        future = pub.publish_future("orders", json.dumps({"n": 2}))
        assert pending(future), "sync again: waits for B"
        admin(ta, "heal", peer="B")
        future.result(10)
    assert journal_ns(tb) == [1, 2]


def test_automatic_downgrade_then_upgrade(tmp_path: Path, threads: dict[str, ServerThread]) -> None:
    ta, tb = pair(tmp_path, threads, downgrade=DowngradePolicy(age=0.4, upgrade_age=0.2, every=0.1))
    with HAClient("pub") as pub:
        pub.get_server_chooser().add(ta.uri())
        pub.connect_and_logon()
        admin(ta, "partition", peer="B")
        future = pub.publish_future("orders", json.dumps({"n": 1}))
        future.result(10)  # acknowledged once the downgrade action ran (Age 0.4 s)
        assert dest_state(ta, "B")["downgraded"]
        admin(ta, "heal", peer="B")
        wait_for(lambda: dest_state(ta, "B")["effective"] == "sync", 10, "automatic upgrade")
        counters = admin(ta, "status")["counters"]
        assert counters["downgrades"] >= 1 and counters["upgrades"] >= 1
    assert journal_ns(tb) == [1]


# --------------------------------------------------------------------------- resync


def test_resync_after_a_partition_with_publishes_on_both_sides(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    ta, tb = pair(tmp_path, threads)
    for t, peer in ((ta, "B"), (tb, "A")):
        admin(t, "partition", peer=peer)
        admin(t, "downgrade", destination=peer)
    with client(ta.uri(), "pub-a") as pa, client(tb.uri(), "pub-b") as pb:
        for n in range(100):
            pa.publish("orders", json.dumps({"n": n}))
            pb.publish("orders", json.dumps({"n": 1000 + n}))
        pa.flush(10_000)
        pb.flush(10_000)
    assert sorted(journal_ns(ta)) == list(range(100))
    for t, peer in ((ta, "B"), (tb, "A")):
        admin(t, "heal", peer=peer)
    expected = list(range(100)) + list(range(1000, 1100))
    wait_for(lambda: sorted(journal_ns(ta)) == expected, 10, "A resynced")
    wait_for(lambda: sorted(journal_ns(tb)) == expected, 10, "B resynced")
    # per-publisher order is the same on both instances
    assert [n for n in journal_ns(ta) if n < 1000] == [n for n in journal_ns(tb) if n < 1000]


class RawPublisher(RawClient):
    """A wire-level publisher choosing its own sequence numbers."""

    def __init__(self, uri: str, name: str) -> None:
        parts = urlsplit(uri)
        assert parts.port is not None
        super().__init__(parts.port, timeout=10)
        self.logon_seq = int(self.logon(name)["s"])

    def publish(self, seqs: range) -> None:
        for seq in seqs:
            fields = {"c": "p", "t": "orders", "s": seq, "a": "persisted"}
            self.send(fields, json.dumps({"n": seq}).encode())
        self.send({"c": "flush", "cid": "f", "a": "processed"})
        self.wait_ack("processed")  # answered once everything before is persisted


def test_dedup_state_follows_replicated_publishes(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    """A publisher with a state on B (it was connected there) publishes on A: B's state
    moves with the replicated records, so the logon ack's ``s`` is right and republished
    messages are dropped as duplicates."""
    ta, tb = pair(tmp_path, threads)
    on_b = RawPublisher(tb.uri(), "P")
    assert on_b.logon_seq == 0
    on_b.publish(range(1, 6))
    on_b.close()
    on_a = RawPublisher(ta.uri(), "P")
    assert on_a.logon_seq == 5  # A's journal has B's records under P's publisher id
    on_a.publish(range(6, 11))
    on_a.close()
    on_b = RawPublisher(tb.uri(), "P")
    assert on_b.logon_seq == 10  # B's existing state for P moved with the replication
    before = tb.statistics()["duplicates"]
    on_b.publish(range(9, 12))  # 9 and 10 are duplicates, 11 is new
    on_b.close()
    assert tb.statistics()["duplicates"] == before + 2
    assert journal_ns(tb) == list(range(1, 12))
    wait_for(lambda: journal_ns(ta) == list(range(1, 12)), 10, "A has 11")


# --------------------------------------------------------------------------- SOW


def test_sow_delta_publish_and_sow_delete_replicate(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    cluster = Cluster(tmp_path)
    sow = [("quotes", "json", ("/id",))]
    a = cluster.add("A", group="HA", sow_topics=sow)
    b = cluster.add("B", group="HA", sow_topics=sow)
    cluster.hot_hot(a, b)
    threads.update(start_threads(cluster, a, b))
    ta, tb = threads["A"], threads["B"]
    wait_for(lambda: dest_state(ta, "B")["connected"], 10, "the link")
    deltas = publishes()
    with client(ta.uri(), "writer") as w, client(tb.uri(), "reader") as r:
        r.execute_async(Command("delta_subscribe").set_topic("quotes"), deltas)
        w.publish("quotes", json.dumps({"id": 1, "px": 10, "sym": "A"}))
        w.publish("quotes", json.dumps({"id": 2, "px": 20, "sym": "B"}))
        w.delta_publish("quotes", json.dumps({"id": 1, "px": 11}))
        w.sow_delete("quotes", "/id = 2")
        w.flush(10_000)

        def sow_of(c: Client) -> list[dict[str, Any]]:
            return sorted(
                (
                    json.loads(m.get_data())
                    for m in c.sow("quotes", timeout=5000)
                    if m.get_command() == "sow"
                ),
                key=lambda d: d["id"],
            )

        wait_for(lambda: sow_of(r) == [{"id": 1, "px": 11, "sym": "A"}], 10, "B's SOW")
        assert sow_of(w) == sow_of(r)
        wait_for(lambda: len(deltas.items) >= 3, 10, "deltas on B")
        assert json.loads(deltas.items[2].get_data()) == {"id": 1, "px": 11}


# --------------------------------------------------------------------------- links


def test_passive_destination_replicates_over_the_incoming_link(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    """A cannot dial B (no address: B is 'in the DMZ'); B dials A; A replicates to B over
    that one connection."""
    cluster = Cluster(tmp_path)
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.replicate(a, b, sync=True, passive=True)
    cluster.replicate(b, a, sync=True)
    threads.update(start_threads(cluster, a, b))
    ta, tb = threads["A"], threads["B"]
    wait_for(
        lambda: dest_state(ta, "B")["connected"] and dest_state(tb, "A")["connected"],
        10,
        "both streams on one link",
    )
    links_a = admin(ta, "status")["links"]
    assert len(links_a) == 1 and not links_a[0]["dialed"]
    with HAClient("pub") as pub:
        pub.get_server_chooser().add(ta.uri())
        pub.connect_and_logon()
        pub.publish_and_wait("orders", json.dumps({"n": 7}), timeout=10_000)
    assert journal_ns(tb) == [7]


def test_validation_failure_refuses_the_link_with_logs_on_both_sides(
    tmp_path: Path, threads: dict[str, ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    """A replicates 'orders' to B, B replicates only 'other' back: [replicate] fails."""
    caplog.set_level(logging.INFO, logger="ampsclient_server_stub.replication")
    cluster = Cluster(tmp_path)
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.replicate(a, b, topics=[TopicRule("orders")])
    cluster.replicate(
        b, a, topics=[TopicRule("other", exclude_validation=("replicate",))], sync=False
    )
    threads.update(start_threads(cluster, a, b))
    ta, tb = threads["A"], threads["B"]
    wait_for(
        lambda: (
            admin(ta, "status")["counters"]["validation_failures"] >= 1
            and admin(tb, "status")["counters"]["validation_failures"] >= 1
        ),
        10,
        "validation failures on both sides",
    )
    text = caplog.text
    assert "configuration validation failed for the link with 'B'" in text  # A: details
    assert "[replicate] topic 'orders'" in text
    assert "'A' at" in text and "validation failed there (details in the log of 'A')" in text
    assert admin(ta, "status")["links"] == [] and not dest_state(ta, "B")["connected"]


def test_exclude_validation_allows_the_link(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.replicate(
        a, b, topics=[TopicRule("orders", exclude_validation=("replicate", "cascade"))]
    )
    cluster.replicate(
        b, a, topics=[TopicRule("other", exclude_validation=("replicate",))], sync=False
    )
    threads.update(start_threads(cluster, a, b))
    ta = threads["A"]
    wait_for(lambda: dest_state(ta, "B")["connected"], 10, "the link")


def test_wrong_secret_is_refused_with_logs_on_both_sides(
    tmp_path: Path, threads: dict[str, ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ampsclient_server_stub.replication")
    cluster = Cluster(tmp_path, secret="right")
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA", secret="wrong")
    cluster.replicate(a, b)
    threads.update(start_threads(cluster, a, b))
    ta, tb = threads["A"], threads["B"]
    wait_for(
        lambda: (
            admin(ta, "status")["counters"]["auth_failures"] >= 1
            and admin(tb, "status")["counters"]["auth_failures"] >= 1
        ),
        10,
        "authentication failures on both sides",
    )
    text = caplog.text
    assert "failed authentication: it does not know this instance's shared secret" in text
    assert "refused this instance's credentials: the shared secrets differ" in text or (
        "authentication failed for an incoming" in text
    )
    assert admin(tb, "status")["inbound"] == []
    assert not dest_state(ta, "B")["connected"]


def test_admin_client_needs_the_secret(tmp_path: Path) -> None:
    from ampsclient_server_stub.replication import AdminError, admin_call

    cluster = Cluster(tmp_path, secret="s3cret")
    node = cluster.add("A")
    running = start_threads(cluster, node)
    try:
        status = admin_call("127.0.0.1", node.repl_port, "s3cret", "status")
        assert status["name"] == "A"
        with pytest.raises(AdminError):
            admin_call("127.0.0.1", node.repl_port, "nope", "status")
        with pytest.raises(AdminError, match="unknown replication admin command"):
            admin_call("127.0.0.1", node.repl_port, "s3cret", "explode")
        from ampsclient_server_stub.replication.admin import main

        address = f"127.0.0.1:{node.repl_port}"
        assert main([address, "journal", "--secret", "s3cret"]) == 0
        assert main([address, "downgrade", "destination=nope", "--secret", "s3cret"]) == 1
    finally:
        running["A"].stop()


def test_publish_without_sync_destination_connected_times_out_not_fails(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    """Without downgrade, a sync destination that never connects holds acks (the publisher
    keeps the message): the client's wait times out, the message stays in its store."""
    cluster = Cluster(tmp_path)
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.replicate(a, b)
    threads.update(start_threads(cluster, a))  # B never starts
    ta = threads["A"]
    with HAClient("pub") as pub:
        pub.get_server_chooser().add(ta.uri())
        pub.connect_and_logon()
        with pytest.raises(AmpsTimeoutError):
            pub.publish_and_wait("orders", json.dumps({"n": 1}), timeout=500)
        assert pub.get_unpersisted_count() == 1
        assert pub.close(100) == 1  # do not wait for the default close flush
