"""Queue limits and retention over real sockets: Expiration (time_limit) of leased and waiting
messages, the queue-wide MaxBacklog, deferred acknowledgements (an ack that arrives before its
message), and journal management never removing a file that holds an unacknowledged queue
message."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, bodies, publish, queue_config, stats

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import TransactionLogConfig, TxlogTopic
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration


def run(tmp_path: Path, **fields: Any) -> ServerThread:
    cfg = queue_config(tmp_path, QueueConfig(name="work", message_type="json", **fields))
    return ServerThread(cfg, fsync="never").start()


def test_expiration_removes_waiting_and_leased_messages(tmp_path: Path) -> None:
    server = run(tmp_path, expiration=0.3, max_per_subscription_backlog=5)
    try:
        c = Consumer(server)
        c.subscribe("work", o="max_backlog=1")
        publish(server, "work", [{"n": 0}, {"n": 1}])
        ((hdr, _),) = c.sync()  # n=0 leased, n=1 waiting
        wait_for(lambda: stats(server)["expired"] == 2, 10, "both expired (time_limit)")
        s = stats(server)
        assert (s["queue_depth"], s["backlog"]) == (0, 0)  # the lease ended with the message
        c.ack("work", hdr["bm"])  # a late ack of an expired message: nothing happens
        publish(server, "work", [{"n": 2}])
        later = [d["n"] for d in bodies(c.sync())]
        # n=1 may have been leased in the moment between the two expirations; n=0 never
        # comes back, and n=2 is delivered once the expired ones are gone
        assert later in ([2], [1, 2]) and stats(server)["expired"] == 2
    finally:
        server.stop()


def test_max_backlog_caps_the_whole_queue(tmp_path: Path) -> None:
    server = run(tmp_path, max_backlog=3, max_per_subscription_backlog=10)
    try:
        a, b = Consumer(server), Consumer(server)
        a.subscribe("work", o="max_backlog=10")
        b.subscribe("work", o="max_backlog=10")
        publish(server, "work", [{"n": i} for i in range(6)])
        got = a.sync() + b.sync()
        assert len(got) == 3 and stats(server)["backlog"] == 3  # not 6: MaxBacklog
        (first, _), *_ = a.deliveries or b.deliveries
        owner = a if a.deliveries else b
        owner.ack("work", first["bm"])
        assert len(owner.sync() + (b if owner is a else a).sync()) == 1  # one slot freed
    finally:
        server.stop()


def test_an_ack_before_its_message_is_applied_when_it_arrives(tmp_path: Path) -> None:
    server = run(tmp_path, max_per_subscription_backlog=5)
    try:
        name = "early-publisher"
        first_bookmark = f"{publisher_id_for(name)}|1|"  # what its first publish will get
        c = Consumer(server)
        assert c.ack("work", first_bookmark, a="processed")["status"] == "success"  # type: ignore[index]
        assert stats(server)["deferred_ack_count"] == 1
        publish(server, "work", [{"n": 0}, {"n": 1}], name=name)
        c.subscribe("work", o="max_backlog=5")
        assert bodies(c.sync()) == [{"n": 1}]  # n=0 was acknowledged before it arrived
        s = stats(server)
        assert (s["deferred_acks_applied"], s["deferred_ack_count"]) == (1, 0)
    finally:
        server.stop()


def test_journal_files_with_unacknowledged_messages_are_kept(tmp_path: Path) -> None:
    cfg = queue_config(
        tmp_path, QueueConfig(name="work", message_type="json", max_per_subscription_backlog=5)
    )
    txlog = TransactionLogConfig(
        journal_directory=tmp_path / "journal",
        journal_size=64 * 1024,
        topics=(TxlogTopic("work", "json"), TxlogTopic("filler", "json")),
    )
    server = ServerThread(dataclasses.replace(cfg, transaction_log=txlog), fsync="never").start()
    try:
        publish(server, "work", [{"n": 0, "pad": "x" * 200}])  # in the first journal file
        publish(server, "filler", [{"pad": "y" * 1000} for _ in range(300)])  # many files
        journal = server.server.journal
        assert journal is not None
        assert server.call(lambda: len(journal.segments())) > 3
        removed = server.run(server.server.prune_journal(0.0))
        assert removed == []  # the first file holds n=0, not acknowledged: nothing goes
        c = Consumer(server)
        c.subscribe("work")
        ((hdr, _),) = c.sync()
        with RawClient(server.tcp_port) as raw:  # acknowledged, durably
            raw.logon("acker")
            raw.send(
                {"c": "sow_delete", "t": "work", "bookmark": hdr["bm"], "a": "persisted", "s": 1}
            )
            raw.recv_until(lambda h: h.get("a") == "persisted")
        removed = server.run(server.server.prune_journal(0.0))
        assert removed  # now the old files can go
    finally:
        server.stop()
