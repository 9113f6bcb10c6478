"""The official AMPS Python client (a black-box test peer) against the reference server's
transaction log: ``bookmark_subscribe`` with EPOCH, NOW, a bookmark and a timestamp, and its
``HAClient`` with a file ``PublishStore`` publishing through a server restart (``kill -9``).

Observed behaviour of the official client that protocol.md does not state (or states
differently) is noted next to the test that shows it; the list is in docs/bookmark-subscriptions.md.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import ampsclient_server_stub.engine.journal as journal_module
from ampsclient import Client
from ampsclient.protocol.bookmarks import publisher_id_for, timestamp_bookmark
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import ReceiveClock, wait_for

AMPS: Any = pytest.importorskip("AMPS")

pytestmark = [pytest.mark.interop, pytest.mark.integration]

_n = iter(range(1_000_000))


def unique(name: str) -> str:
    return f"{name}-{next(_n)}-{time.time_ns()}"


class Collector:
    """An official-client message handler: keeps (command, data, bookmark, sub id, ack type)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, str, str, str, str]] = []

    def __call__(self, message: Any) -> None:
        with self.lock:
            self.items.append(
                (
                    message.get_command(),
                    message.get_data(),
                    message.get_bookmark(),
                    message.get_sub_id(),
                    message.get_ack_type() if message.get_command() == "ack" else "",
                )
            )

    def messages(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(d, bm) for c, d, bm, _, _ in self.items if c == "publish"]

    def ns(self) -> list[int]:
        return [json.loads(d)["n"] for d, _ in self.messages()]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    config = default_config(tcp_port=0, ws_port=0, data_dir=tmp_path)
    with ServerThread(config, fsync="never") as thread:
        yield thread


@pytest.fixture
def official(server: ServerThread) -> Iterator[Callable[[str], Any]]:
    clients: list[Any] = []

    def factory(prefix: str) -> Any:
        client = AMPS.Client(unique(prefix))
        client.connect(server.uri("tcp", "json"))
        client.logon()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        try:
            client.disconnect()
        except Exception:
            pass


def history(server: ServerThread, count: int = 10) -> tuple[Client, str, list[str]]:
    """``count`` durable messages ``n=0..`` on a fresh topic, published by our client."""
    pub = Client(unique("pub"))
    pub.connect(server.uri("tcp", "json"))
    pub.logon(5000)
    topic = unique("orders")
    for n in range(count):
        pub.publish(topic, json.dumps({"n": n}))
    pub.flush(5000)
    journal = server.server.journal
    assert journal is not None
    wait_for(lambda: server.call(lambda: journal.durable_index >= journal.last_index))
    pid = publisher_id_for(pub.name)
    return pub, topic, [f"{pid}|{i}|" for i in range(1, count + 1)]


def test_official_bookmark_subscribe_epoch_then_live(
    server: ServerThread, official: Callable[[str], Any]
) -> None:
    pub, topic, bms = history(server)
    try:
        sub = official("sub")
        got = Collector()
        sub_id = sub.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH, timeout=5000)
        wait_for(lambda: len(got.messages()) == 10)
        assert got.ns() == list(range(10))
        assert [bm for _, bm in got.messages()] == bms  # get_bookmark(): the journal bookmark
        assert all(sid == sub_id for c, _, _, sid, _ in got.items if c == "publish")
        pub.publish(topic, json.dumps({"n": 10}))
        wait_for(lambda: len(got.messages()) == 11)
        assert got.messages()[-1][1] == bms[0].replace("|1|", "|11|")
    finally:
        pub.close()


def test_official_bookmark_subscribe_now_and_a_bookmark(
    server: ServerThread, official: Callable[[str], Any]
) -> None:
    pub, topic, bms = history(server)
    try:
        sub = official("sub")
        now, after3 = Collector(), Collector()
        sub.bookmark_subscribe(now, topic, AMPS.Client.Bookmarks.NOW, timeout=5000)
        sub.bookmark_subscribe(after3, topic, bms[3], timeout=5000)
        wait_for(lambda: len(after3.messages()) == 6)
        assert after3.ns() == [4, 5, 6, 7, 8, 9]
        assert now.messages() == []
        pub.publish(topic, json.dumps({"n": 10}))
        wait_for(lambda: len(now.messages()) == 1 and len(after3.messages()) == 7)
        assert now.ns() == [10]
    finally:
        pub.close()


def test_official_completed_ack_through_execute_async(
    server: ServerThread, official: Callable[[str], Any]
) -> None:
    pub, topic, _ = history(server, 5)
    try:
        sub = official("sub")
        got = Collector()
        cmd = AMPS.Command("subscribe").set_topic(topic).set_bookmark("0")
        cmd.add_ack_type("completed")
        sub.execute_async(cmd, got)
        wait_for(lambda: any(a == "completed" for *_, a in got.items))
        kinds = [(c, a) for c, _, _, _, a in got.items]
        assert kinds == [("publish", "")] * 5 + [("ack", "completed")]
    finally:
        pub.close()


def test_official_invalid_bookmark_raises(
    server: ServerThread, official: Callable[[str], Any]
) -> None:
    pub, topic, _ = history(server, 1)
    try:
        sub = official("sub")
        with pytest.raises(AMPS.InvalidBookmarkException):
            sub.bookmark_subscribe(Collector(), topic, "not-a-bookmark", timeout=5000)
    finally:
        pub.close()


def test_official_bookmark_subscribe_from_a_timestamp(
    server: ServerThread, official: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ReceiveClock(step_us=1)
    monkeypatch.setattr(journal_module, "_time_ns", clock)
    t0 = datetime(2024, 6, 4, 9, 30, tzinfo=UTC)
    pub = Client(unique("pub"))
    pub.connect(server.uri("tcp", "json"))
    pub.logon(5000)
    topic = unique("timed")
    try:
        for batch in range(3):  # n 0-2 at 09:30:00, 10-12 at 09:31:00, 20-22 at 09:32:00
            clock.at(t0 + timedelta(minutes=batch))
            for n in range(10 * batch, 10 * batch + 3):
                pub.publish(topic, json.dumps({"n": n}))
            pub.flush(5000)
        sub = official("sub")
        got, ranged = Collector(), Collector()
        sub.bookmark_subscribe(got, topic, "20240604T093030Z", timeout=5000)
        a, b = (
            timestamp_bookmark(t0 + timedelta(minutes=1)),
            timestamp_bookmark(t0.timestamp() + 90),
        )
        cmd = AMPS.Command("subscribe").set_topic(topic).set_bookmark(f"[{a}:{b})")
        sub.execute_async(cmd.add_ack_type("completed"), ranged)
        wait_for(lambda: len(got.messages()) == 6)
        assert got.ns() == [10, 11, 12, 20, 21, 22]
        wait_for(lambda: any(a == "completed" for *_, a in ranged.items))
        assert ranged.ns() == [10, 11, 12]
    finally:
        pub.close()


# --------------------------------------------------------------------------- HAClient


def test_official_ha_client_publishes_through_a_restart_without_loss_or_duplicate(
    tmp_path: Path,
) -> None:
    total = 4000
    topic = "ha-orders"
    name = unique("official-ha")
    with ServerProcess(data_dir=tmp_path / "server") as server:
        client = AMPS.HAClient(name, str(tmp_path / "pub.store"))
        chooser = AMPS.DefaultServerChooser()
        chooser.add(server.uri())
        client.set_server_chooser(chooser)
        client.set_reconnect_delay(50)
        client.connect_and_logon()
        restarted = False
        try:
            seqs: list[int] = []
            for i in range(total):
                seqs.append(client.publish(topic, json.dumps({"i": i})))
                if i == total // 2 and not restarted:
                    restarted = True
                    server.kill()  # kill -9 mid-stream
                    in_flight = client.get_unpersisted_count()
                    with Journal(tmp_path / "server" / "journal", read_only=True) as journal:
                        stored = journal.last_sequence(publisher_id_for(name))
                    # usually some unacknowledged messages made it to the log before the
                    # crash: after the restart the client must not get them in twice
                    assert in_flight > 0 and stored <= seqs[-1]
                    server.start()  # same ports and data directory
            client.publish_flush(30_000)
            assert client.get_unpersisted_count() == 0
        finally:
            client.close()
        log = replay_all(server.uri(), topic)
        ids = [json.loads(data)["i"] for data, _ in log]
        assert ids == list(range(total)), _describe(ids, total)
        pid = publisher_id_for(name)
        assert all(bm.startswith(f"{pid}|") for _, bm in log)
        assert len({bm for _, bm in log}) == total


def replay_all(uri: str, topic: str) -> list[tuple[str, str]]:
    client = AMPS.Client(unique("reader"))
    client.connect(uri)
    client.logon()
    try:
        got = Collector()
        cmd = AMPS.Command("subscribe").set_topic(topic).set_bookmark("0")
        client.execute_async(cmd.add_ack_type("completed"), got)
        wait_for(lambda: any(a == "completed" for *_, a in got.items), 30)
        return got.messages()
    finally:
        client.disconnect()


def _describe(ids: list[int], total: int) -> str:
    seen: dict[int, int] = {}
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
    missing = [i for i in range(total) if i not in seen]
    doubled = [i for i, k in seen.items() if k > 1]
    return f"{len(ids)} ids, missing {missing[:10]} ({len(missing)}), doubled {doubled[:10]}"


def test_official_ha_client_logon_ack_sequence(tmp_path: Path) -> None:
    """The logon ack carries the client's last stored sequence (protocol.md §3.2)."""
    with ServerProcess(data_dir=tmp_path / "server") as server:
        name = unique("seq")
        client = AMPS.HAClient(name, str(tmp_path / "pub.store"))
        chooser = AMPS.DefaultServerChooser()
        chooser.add(server.uri())
        client.set_server_chooser(chooser)
        client.connect_and_logon()
        last = 0
        try:
            for i in range(10):
                last = client.publish("seq", json.dumps({"i": i}))
            client.publish_flush(10_000)
        finally:
            client.close()
        with Client(name) as ours:
            ours.connect(server.uri())
            ours.logon(5000)
            assert ours.logon_ack is not None
            assert ours.logon_ack.get_sequence() == last


def test_official_ha_client_trims_its_store_to_the_logon_ack_sequence(
    server: ServerThread, tmp_path: Path
) -> None:
    """Observed (5.3.5.14): after a reconnect the official HAClient discards every stored
    message at or below the logon ack's ``s`` and republishes only the rest (protocol.md §3.2
    and §7.4 say it ignores ``s``; with this server's logon ack it does not)."""
    broker = server.broker
    real_flush = broker.durability.flush_persisted
    silent = {"on": True}

    def no_persisted_acks(conn: Any) -> None:  # the server stores, but never says so
        if silent["on"]:
            conn.persist_pending = False
            return
        real_flush(conn)

    server.call(lambda: setattr(broker.durability, "flush_persisted", no_persisted_acks))
    try:
        name = unique("trim")
        client = AMPS.HAClient(name, str(tmp_path / "pub.store"))
        chooser = AMPS.DefaultServerChooser()
        chooser.add(server.uri("tcp", "json"))
        client.set_server_chooser(chooser)
        client.set_reconnect_delay(10)
        client.connect_and_logon()
        try:
            last = 0
            for i in range(5):
                last = client.publish("trim", json.dumps({"i": i}))
            wait_for(lambda: server.call(lambda: broker.last_sequence(name)) == last)
            assert client.get_unpersisted_count() == 5  # stored by the server, never acked
            before = server.statistics()["duplicates"]
            silent["on"] = False
            conn = server.call(lambda: broker.connection_for(name))
            server.call(lambda: broker.kick(conn, "test: reconnect"))  # type: ignore[arg-type]
            wait_for(lambda: client.get_unpersisted_count() == 0)
            server.call(lambda: None)
            assert server.statistics()["duplicates"] == before  # nothing was republished
        finally:
            client.close()
    finally:
        server.call(lambda: setattr(broker.durability, "flush_persisted", real_flush))
