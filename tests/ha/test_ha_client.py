"""HAClient against real reference-server processes: failover, replay, resubscribe."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient import Client, ConnectionEvent, ConnectionState
from ampsclient.exceptions import TimeoutError
from ampsclient.ha import (
    DefaultServerChooser,
    ExponentialDelayStrategy,
    FixedDelayStrategy,
    ServerChooser,
)
from ampsclient.ha.reconnect import RetryLimitError
from ampsclient.stores.publish import FilePublishStore, MemoryPublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import Inbox, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    a = ServerProcess(data_dir=tmp_path / "a", name="A")
    b = ServerProcess(data_dir=tmp_path / "b", name="B")
    a.start()
    b.start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


# --------------------------------------------------------------------- pure strategies


def test_exponential_delay_strategy_per_uri_and_limit() -> None:
    now = [0.0]
    s = ExponentialDelayStrategy(
        100, 1000, 2.0, maximum_retry_time=5000, jitter=0, clock=lambda: now[0]
    )
    assert [s.get_connect_wait_time("a") for _ in range(6)] == [0, 100, 200, 400, 800, 1000]
    assert s.get_connect_wait_time("b") == 0  # first attempt at another URI: no delay
    now[0] = 4.9
    assert s.get_connect_wait_time("b") == 100
    now[0] = 5.1
    with pytest.raises(RetryLimitError):
        s.get_connect_wait_time("a")
    s.reset()
    assert s.get_connect_wait_time("a") == 0


def test_exponential_jitter_is_bounded() -> None:
    s = ExponentialDelayStrategy(200, 20_000, 2.0, jitter=1.0)
    s.get_connect_wait_time("a")
    delays = [s.get_connect_wait_time("a") for _ in range(4)]
    for i, d in enumerate(delays):
        base = 200 * 2**i
        assert base <= d <= base + 200


def test_fixed_delay_strategy() -> None:
    now = [0.0]
    s = FixedDelayStrategy(50, 1000, clock=lambda: now[0])
    assert [s.get_connect_wait_time("a") for _ in range(3)] == [0, 50, 50]
    now[0] = 2.0
    with pytest.raises(RetryLimitError):
        s.get_connect_wait_time("a")


def test_default_server_chooser_rotates_on_failure() -> None:
    c = DefaultServerChooser()
    c.add("tcp://a:1/amps/json").add_all(["tcp://b:2/amps/json"])
    assert c.get_current_uri() == "tcp://a:1/amps/json"
    c.report_failure(OSError("refused"))
    assert c.get_current_uri() == "tcp://b:2/amps/json"
    assert "refused" in c.get_error()
    c.report_success()
    assert c.get_current_uri() == "tcp://b:2/amps/json"
    c.report_failure(OSError("x"))
    assert c.get_current_uri() == "tcp://a:1/amps/json"


# ------------------------------------------------------------------------ with servers


def test_publish_flush_and_exactly_once_delivery(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    a, _ = two_servers
    got = Inbox()
    with Client("observer") as observer, HAClient("ha-pub") as ha:
        observer.connect(a.uri())
        observer.logon(5000)
        observer.subscribe(got, "orders")
        ha.get_server_chooser().add(a.uri())
        ha.connect_and_logon()
        seqs = [ha.publish("orders", json.dumps({"n": i})) for i in range(2000)]
        assert seqs == sorted(seqs) and len(set(seqs)) == 2000
        assert seqs[0] > int(time.time() * 1000 - 60_000) * 1_000_000  # epoch-ms seeding
        ha.publish_flush(10_000)
        assert ha.get_unpersisted_count() == 0
    wait_for(lambda: len(got.ns()) == 2000, what="2000 deliveries")
    assert got.ns() == list(range(2000))


def test_failover_replays_unpersisted_on_the_second_server(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = two_servers
    at_b = Inbox()
    events: list[ConnectionEvent] = []
    lowest_at_drop: list[int] = []
    with (
        Client("observer-b") as observer,
        HAClient(
            "ha-failover", MemoryPublishStore(), reconnect_delay_strategy=FixedDelayStrategy(50)
        ) as ha,
    ):
        observer.connect(b.uri())
        observer.logon(5000)
        observer.subscribe(at_b, "orders")

        def on_event(event: ConnectionEvent) -> None:
            events.append(event)
            if event.state is ConnectionState.DISCONNECTED:
                store = ha.publish_store
                lowest = store.lowest_unpersisted
                lowest_at_drop.append(lowest if lowest is not None else store.next_sequence())

        ha.add_connection_state_listener(on_event)
        ha.get_server_chooser().add_all([a.uri(), b.uri()])
        ha.set_heartbeat(1)
        ha.connect_and_logon()
        for i in range(3000):
            ha.publish("orders", json.dumps({"n": i}))
            if i == 1500:
                a.kill()
        ha.publish_flush(20_000)
        assert ha.get_unpersisted_count() == 0
        assert ha.uri is not None and str(b.tcp_port) in ha.uri
        # every message not persisted by A when it died reaches B: wait for the observer's
        # deliveries while it is still connected (B persisting them does not mean delivered)
        first = lowest_at_drop[0]
        base = ha.publish_store.last_persisted - 2999  # sequence of n=0
        start_n = first - base if first - base > 0 else 0
        wait_for(lambda: len(at_b.ns()) >= 3000 - start_n, what="the replayed messages on B")
    states = [e.state for e in events]
    assert ConnectionState.DISCONNECTED in states
    assert states[-1] is ConnectionState.SHUTDOWN
    assert states.count(ConnectionState.RESUBSCRIBED) == 2
    # typed events with the server they concern and, for the drop, its cause
    up = [
        ConnectionState.CONNECTED,
        ConnectionState.LOGGED_ON,
        ConnectionState.PUBLISH_REPLAYED,
        ConnectionState.RESUBSCRIBED,
    ]
    assert states[:4] == up
    drop = states.index(ConnectionState.DISCONNECTED)
    assert str(a.tcp_port) in (events[drop].uri or "") and events[drop].cause is not None
    assert all(str(a.tcp_port) in (e.uri or "") for e in events[:4])
    again = [e for e in events[drop + 1 :] if e.state in up]
    assert [e.state for e in again[-4:]] == up
    assert all(str(b.tcp_port) in (e.uri or "") for e in again[-4:])
    # ... exactly once, in order
    assert at_b.ns() == list(range(start_n, 3000))


@pytest.mark.serial
def test_heartbeat_fails_over_from_a_frozen_server(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    """A primary that stops answering without closing the socket (SIGSTOP): the heartbeat
    notices within two intervals and the client fails over; everything lands on B once."""
    a, b = two_servers
    at_b = Inbox()
    with (
        Client("observer-frozen") as observer,
        HAClient("ha-frozen", reconnect_delay_strategy=FixedDelayStrategy(50)) as ha,
    ):
        observer.connect(b.uri())
        observer.logon(5000)
        observer.subscribe(at_b, "frozen")
        ha.get_server_chooser().add_all([a.uri(), b.uri()])
        ha.set_heartbeat(1)
        ha.connect_and_logon()
        assert a.pid is not None
        os.kill(a.pid, signal.SIGSTOP)
        try:
            frozen = time.monotonic()
            for i in range(200):
                ha.publish("frozen", json.dumps({"n": i}))
            wait_for(lambda: str(b.tcp_port) in (ha.uri or ""), what="the failover to B")
            assert time.monotonic() - frozen < 5.0  # 1 s heartbeat: about 2 s
            ha.publish_flush(20_000)
        finally:
            os.kill(a.pid, signal.SIGCONT)
        wait_for(lambda: len(at_b.ns()) >= 200, what="the messages on B")
        observer.flush(5000)
    assert at_b.ns() == list(range(200))


class Sticky(ServerChooser):
    """A custom chooser (the official interface): the primary until it fails, then the
    backup for good; records what it was told."""

    def __init__(self, primary: str, backup: str) -> None:
        self.uris = [primary, backup]
        self.failed = False
        self.failures: list[str] = []
        self.successes = 0

    def get_current_uri(self) -> str | None:
        return self.uris[1 if self.failed else 0]

    def report_failure(self, exception: BaseException, info: object = None) -> None:
        self.failures.append(type(exception).__name__)
        self.failed = True

    def report_success(self, info: object = None) -> None:
        self.successes += 1


def test_custom_chooser_and_a_path_string_store(
    two_servers: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    """``HAClient(name, "path")`` (the official form) makes a FilePublishStore there; a custom
    ServerChooser decides where to go after the primary dies."""
    a, b = two_servers
    at_b = Inbox()
    chooser = Sticky(a.uri(), b.uri())
    with Client("observer-sticky") as observer:
        observer.connect(b.uri())
        observer.logon(5000)
        observer.subscribe(at_b, "sticky")
        with HAClient("ha-sticky", str(tmp_path / "sticky.store")) as ha:
            assert isinstance(ha.publish_store, FilePublishStore)
            assert ha.publish_store.path == tmp_path / "sticky.store"
            ha.set_server_chooser(chooser)
            ha.set_reconnect_delay_strategy(FixedDelayStrategy(50))
            ha.connect_and_logon()
            assert chooser.successes == 1 and not chooser.failures
            a.kill()
            for i in range(100):
                ha.publish("sticky", json.dumps({"n": i}))
            ha.publish_flush(20_000)
            assert chooser.failures and chooser.successes == 2
            assert ha.uri is not None and str(b.tcp_port) in ha.uri
        wait_for(lambda: len(at_b.ns()) >= 100, what="the messages on B")
        observer.flush(5000)
    assert at_b.ns() == list(range(100))
    # the client made that store, so its close() closed it: the next run can open it
    assert ha.publish_store.closed
    with HAClient("ha-sticky", str(tmp_path / "sticky.store")) as again:
        assert again.get_unpersisted_count() == 0
        assert again.publish_store.next_sequence() > ha.publish_store.last_persisted


def test_resubscribe_after_server_restart_handler_and_stream(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "s")
    with server:
        got = Inbox()
        with (
            HAClient("ha-sub", reconnect_delay_strategy=FixedDelayStrategy(50)) as sub,
            Client("plain-pub") as pub,
        ):
            sub.get_server_chooser().add(server.uri())
            sub.connect_and_logon()
            sub.subscribe(got, "ticks", "/n >= 0")
            stream = sub.subscribe("ticks")
            pub.connect(server.uri())
            pub.logon(5000)
            pub.publish("ticks", '{"n": 0}')
            pub.flush(5000)
            wait_for(lambda: got.ns() == [0], what="first tick")
            first = stream.get(5)
            assert first is not None and first.json() == {"n": 0}
            resubscribed: list[ConnectionEvent] = []

            def on_event(event: ConnectionEvent) -> None:
                if event.state is ConnectionState.RESUBSCRIBED:
                    resubscribed.append(event)

            sub.add_connection_state_listener(on_event)
            server.restart()
            # both subscriptions are re-placed (one at a time) before RESUBSCRIBED
            wait_for(lambda: bool(resubscribed), what="the HA client to resubscribe")
            with Client("plain-pub-2") as pub2:
                pub2.connect(server.uri())
                pub2.logon(5000)
                pub2.publish("ticks", json.dumps({"n": 1}))
                pub2.flush(5000)
            wait_for(lambda: len(got.ns()) >= 2, what="the tick after the restart")
            second = stream.get(5)
            assert second is not None and second.json() == {"n": 1}
            assert got.ns() == [0, 1]


def test_publish_while_disconnected_is_stored_and_sent_after_reconnect(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "s")
    with server, HAClient("ha-offline", reconnect_delay_strategy=FixedDelayStrategy(50)) as ha:
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()
        server.kill()
        wait_for(lambda: not ha.connected, what="the disconnect")
        for i in range(10):
            ha.publish("offline", json.dumps({"n": i}))
        assert ha.get_unpersisted_count() == 10
        with pytest.raises(TimeoutError, match="Timed out waiting to flush publish store"):
            ha.publish_flush(300)
        got = Inbox()
        server.start()
        with Client("observer") as observer:
            observer.connect(server.uri())
            observer.logon(5000)
            observer.subscribe(got, "offline")
            # the HA client may already have replayed before the observer subscribed:
            # publish_flush proves persistence; the observer sees the later ones
            ha.publish_flush(10_000)
            assert ha.get_unpersisted_count() == 0
            ha.publish("offline", json.dumps({"n": 10}))
            ha.publish_flush(5000)
            wait_for(lambda: 10 in got.ns(), what="the post-reconnect publish")


def test_publish_while_disconnected_block_waits_for_the_reconnect(tmp_path: Path) -> None:
    """``publish_while_disconnected="block"``: a publish while the server is down waits (it
    is not even stored), and goes out once the client is back; then exactly once."""
    server = ServerProcess(data_dir=tmp_path / "s")
    got = Inbox()
    with (
        server,
        HAClient(
            "ha-block",
            reconnect_delay_strategy=FixedDelayStrategy(50),
            publish_while_disconnected="block",
        ) as ha,
    ):
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()
        ha.publish("blocked", json.dumps({"n": 0}))
        ha.publish_flush(5000)
        server.kill()
        wait_for(lambda: not ha.connected, what="the disconnect")
        returned: list[int] = []
        publisher = threading.Thread(
            target=lambda: returned.append(ha.publish("blocked", json.dumps({"n": 1})))
        )
        publisher.start()
        publisher.join(0.3)  # bounded: it must still be waiting for the server
        assert publisher.is_alive() and not returned
        assert ha.get_unpersisted_count() == 0  # it waits before storing
        server.start()
        publisher.join(20)
        assert not publisher.is_alive() and len(returned) == 1
        ha.publish_flush(10_000)
        with Client("observer-block") as observer:
            observer.connect(server.uri())
            observer.logon(5000)
            observer.bookmark_subscribe(got, "blocked", "0")
            ha.publish("blocked", json.dumps({"n": 2}))
            ha.publish_flush(5000)
            wait_for(lambda: len(got.ns()) >= 3, what="the three messages")
            observer.flush(5000)
    assert got.ns() == [0, 1, 2]


def test_safe_shutdown_reports_unpersisted(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "s")
    with server:
        ha = HAClient("ha-close", reconnect_delay_strategy=FixedDelayStrategy(50))
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()
        server.kill()
        wait_for(lambda: not ha.connected, what="the disconnect")
        ha.publish("x", "{}")
        assert ha.close(timeout=200) == 1


def test_publish_and_wait_confirms_each_message(tmp_path: Path) -> None:
    with ServerProcess(data_dir=tmp_path / "s") as server, HAClient("ha-confirm") as ha:
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()
        seq = ha.publish_and_wait("confirm", "{}", timeout=5000)
        assert ha.publish_store.last_persisted >= seq
        future = ha.publish_future("confirm", "{}")
        assert future.result(5) > seq


def test_gives_up_after_maximum_retry_time(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "s")
    uri = server.uri()  # nothing listens there
    with HAClient("ha-giveup", reconnect_delay_strategy=FixedDelayStrategy(20, maximum=300)) as ha:
        ha.get_server_chooser().add(uri)
        with pytest.raises(RetryLimitError):
            ha.connect_and_logon()
