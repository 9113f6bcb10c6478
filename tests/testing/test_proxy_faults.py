"""The fault proxy's netem-like faults against the real reference server and our client:
fragmentation and coalescing, latency with jitter, a one-way partition detected by
heartbeats (with an HAClient failing over), and a bandwidth limit. No mocks: real sockets on
127.0.0.1, messages compared one by one."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator

import pytest

from ampsclient import Client, ConnectionEvent, ConnectionState
from ampsclient.ha import FixedDelayStrategy
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.testing import Inbox, wait_for
from ampsclient_server_stub.testing.proxy import LinkShape, LoopbackProxy

pytestmark = pytest.mark.integration

SEED = 20_261_128


def _uri(proxy: LoopbackProxy) -> str:
    return f"tcp://127.0.0.1:{proxy.port}/amps/json"


def _body(i: int) -> str:
    """Message ``i``: sizes from a few bytes to ~900, so frames split anywhere."""
    return json.dumps({"n": i, "pad": "x" * ((i * 37) % 900)})


@pytest.fixture
def proxy(server: ServerThread) -> Iterator[LoopbackProxy]:
    with LoopbackProxy("127.0.0.1", server.tcp_port, seed=SEED) as p:
        yield p


# ------------------------------------------------------------ (a) fragmentation, coalescing


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(LinkShape(fragment=1), id="1-byte-pieces"),
        pytest.param(
            LinkShape(coalesce=8, coalesce_window=0.002, fragment=1), id="coalesce+1-byte"
        ),
        pytest.param(
            LinkShape(coalesce=16, coalesce_window=0.005, fragment=13), id="coalesce+1..13"
        ),
    ],
)
def test_fragmented_and_coalesced_streams_carry_every_message(
    proxy: LoopbackProxy, shape: LinkShape
) -> None:
    """Publisher and subscriber both through the proxy; the shape is switched on and off
    while the connections are open (plain, shaped, plain): every message arrives once, equal
    to what was published, in order."""
    inbox = Inbox()
    n = 240
    with Client("frag-sub") as sub, Client("frag-pub") as pub:
        sub.connect(_uri(proxy))
        sub.logon(5000)
        sub.subscribe(inbox, "frag")
        pub.connect(_uri(proxy))
        pub.logon(5000)
        for i in range(n):
            if i == 40:
                proxy.set_shape(shape)
                before = {d: (s.forwarded, s.writes) for d, s in proxy.stats_snapshot().items()}
            if i == 200:
                pub.flush(10_000)
                inbox.wait(lambda box: len(box.messages) >= 200, timeout=10)
                after = {d: (s.forwarded, s.writes) for d, s in proxy.stats_snapshot().items()}
                proxy.set_shape(LinkShape())
            pub.publish("frag", _body(i))
        pub.flush(10_000)
        got = inbox.wait_messages(n, timeout=10)
    assert [m.get_data() for m in got] == [_body(i) for i in range(n)]
    for d in ("to_server", "to_client"):
        sent = after[d][0] - before[d][0]
        writes = after[d][1] - before[d][1]
        assert sent > 30_000  # the shaped phase moved real traffic both ways
        if shape.fragment == 1:
            assert writes == sent  # byte by byte
        else:
            assert writes >= sent / shape.fragment


# ------------------------------------------------------------------ (b) latency and jitter


def _round_trips(client: Client, count: int) -> list[float]:
    out = []
    for i in range(count):
        t0 = time.monotonic()
        client.publish("rtt", json.dumps({"n": i}))
        client.flush(5000)
        out.append(time.monotonic() - t0)
    return out


@pytest.mark.serial
def test_latency_with_jitter_bounds_the_round_trip(proxy: LoopbackProxy) -> None:
    """50 ms ± 10 ms each way: a publish + flush round trip takes at least 2 x 40 ms (the
    jitter may shorten each way by 10 ms), 2 x 50 ms without jitter; bytes stay in order."""
    inbox = Inbox()
    with Client("rtt") as client, Client("rtt-sub") as sub:
        client.connect(_uri(proxy))
        client.logon(5000)
        sub.connect(_uri(proxy))
        sub.logon(5000)
        sub.subscribe(inbox, "rtt")
        plain = _round_trips(client, 3)
        proxy.latency(0.05, jitter=0.01)
        jittered = _round_trips(client, 8)
        proxy.latency(0.05)
        fixed = _round_trips(client, 3)
        proxy.latency(0.0)
        again = _round_trips(client, 3)
        got = inbox.wait_messages(17, timeout=10)
    print(
        "round trips (ms): plain",
        [round(r * 1000, 1) for r in plain + again],
        "50 +- 10 ms",
        [round(r * 1000, 1) for r in jittered],
        "50 ms",
        [round(r * 1000, 1) for r in fixed],
    )
    assert all(rtt >= 0.080 for rtt in jittered), jittered
    assert all(rtt >= 0.100 for rtt in fixed), fixed
    assert statistics.median(jittered) < 1.0 and max(fixed) < 1.0  # loose upper bound
    # switched on and off with the connections open (medians: a loaded machine may pause one)
    assert statistics.median(plain) < 0.05 and statistics.median(again) < 0.05
    # the subscriber (delayed, jittered) saw every message once, in order
    assert inbox.ns() == [*range(3), *range(8), *range(3), *range(3)]
    assert len(got) == 17


@pytest.mark.serial
def test_jitter_never_reorders_bytes(proxy: LoopbackProxy) -> None:
    """A burst published under a jitter as large as the latency: chunks whose delay drew
    short wait for the ones ahead (a reordered byte stream would break the framing)."""
    inbox = Inbox()
    with Client("burst") as pub, Client("burst-sub") as sub:
        sub.connect(_uri(proxy))
        sub.logon(5000)
        sub.subscribe(inbox, "burst")
        pub.connect(_uri(proxy))
        pub.logon(5000)
        proxy.latency(0.02, jitter=0.02)
        for i in range(300):
            pub.publish("burst", _body(i))
            if i % 30 == 0:
                pub.flush(5000)  # spread the burst over many chunks
        pub.flush(10_000)
        got = inbox.wait_messages(300, timeout=10)
    assert [m.get_data() for m in got] == [_body(i) for i in range(300)]


# ------------------------------------------------------- (c) one-way partition, heartbeats


@pytest.fixture
def backup() -> Iterator[ServerThread]:
    thread = ServerThread(default_config(tcp_port=0, ws_port=0))
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.mark.serial
def test_one_way_partition_is_found_by_heartbeats_and_fails_over(
    server: ServerThread, backup: ServerThread, proxy: LoopbackProxy
) -> None:
    """The server's bytes to the client vanish while both sockets stay open (the client's
    still reach the server: a half-open connection). The client's heartbeat (1 s, timeout
    2 s) declares the connection dead about 2 s after the last byte it received; the HAClient
    fails over to the backup and replays what A never acknowledged: every message published
    during the partition lands on the backup exactly once, in order."""
    at_a, at_b = Inbox(), Inbox()
    events: list[tuple[float, ConnectionEvent]] = []
    with (
        Client("observer-a") as obs_a,
        Client("observer-b") as obs_b,
        HAClient(
            "ha-half-open", MemoryPublishStore(), reconnect_delay_strategy=FixedDelayStrategy(50)
        ) as ha,
    ):
        for obs, srv, box in ((obs_a, server, at_a), (obs_b, backup, at_b)):
            obs.connect(srv.uri())
            obs.logon(5000)
            obs.subscribe(box, "half")
        ha.add_connection_state_listener(lambda e: events.append((time.monotonic(), e)))
        ha.get_server_chooser().add_all([_uri(proxy), backup.uri()])
        ha.set_heartbeat(1)
        ha.connect_and_logon()
        for i in range(20):
            ha.publish("half", json.dumps({"n": i}))
        ha.publish_flush(5000)  # 0..19 persisted on A: never replayed
        proxy.partition("to_client")
        cut_at = time.monotonic()
        for i in range(20, 220):
            ha.publish("half", json.dumps({"n": i}))
        # client -> server still flows: A gets them (its acks are what vanish)
        wait_for(lambda: len(at_a.ns()) >= 220, what="the publishes reaching A")
        wait_for(lambda: str(backup.tcp_port) in (ha.uri or ""), timeout=8, what="the failover")
        ha.publish_flush(10_000)
        assert ha.get_unpersisted_count() == 0
        wait_for(lambda: len(at_b.ns()) >= 200, what="the replay on B")
        obs_b.flush(5000)
        dropped = proxy.stats["to_client"].dropped
    # one drop (the heartbeat's; the last DISCONNECTED is the close), from A, then B
    drops = [(t, e) for t, e in events if e.state is ConnectionState.DISCONNECTED and e.cause]
    assert len(drops) == 1
    drop_at, drop = drops[0]
    assert "heartbeat" in str(drop.cause) and str(proxy.port) in (drop.uri or "")
    detected = drop_at - cut_at
    # the timeout is 2 s, checked every 0.1 s (about 2.1 s); the bound leaves room for a
    # loaded machine: within twice the timeout
    assert 1.8 <= detected <= 4.0, detected
    on_b = [t for t, e in events if e.state is ConnectionState.LOGGED_ON and t > drop_at]
    assert on_b and on_b[0] - drop_at < 1.0  # the failover itself
    print(
        f"to_client partition: detected {detected:.3f} s, "
        f"logged on to B {on_b[0] - drop_at:.3f} s later"
    )
    assert at_b.ns() == list(range(20, 220))
    assert at_a.ns() == list(range(220))
    assert dropped > 0  # acks and heartbeats that vanished
    assert proxy.heal() == 0  # the client closed the half-open connection itself


@pytest.mark.serial
def test_client_to_server_partition_is_found_by_the_server(proxy: LoopbackProxy) -> None:
    """The other way round: the client's bytes vanish, the server's still arrive (so the
    client hears the server's heartbeats). The server drops the client after two silent
    heartbeat intervals; the proxy passes the close on and the client sees it."""
    events: list[tuple[float, ConnectionEvent]] = []
    with Client("half-open-up") as client:
        client.add_connection_state_listener(lambda e: events.append((time.monotonic(), e)))
        client.set_heartbeat(1)
        client.connect(_uri(proxy))
        client.logon(5000)
        proxy.partition("to_server")
        cut_at = time.monotonic()
        wait_for(
            lambda: any(e.state is ConnectionState.DISCONNECTED for _, e in events),
            timeout=6,
            what="the server dropping the silent client",
        )
    detected = next(t for t, e in events if e.state is ConnectionState.DISCONNECTED) - cut_at
    print(f"to_server partition: the server dropped the client after {detected:.3f} s")
    assert 1.5 <= detected <= 4.0, detected  # two 1 s intervals on the server's clock
    assert proxy.stats["to_server"].dropped > 0  # the client's beats
    assert proxy.stats["to_client"].dropped == 0


def test_heal_aborts_a_connection_whose_stream_lost_bytes(proxy: LoopbackProxy) -> None:
    """Bytes dropped by a partition leave a gap TCP would never deliver: on heal() such a
    connection is aborted (the client sees a disconnect) instead of reading a torn frame; a
    connection that lost nothing carries on."""
    inbox = Inbox()
    events: list[ConnectionEvent] = []
    with Client("gap") as gap, Client("no-gap") as clean:
        gap.add_connection_state_listener(events.append)
        gap.connect(_uri(proxy))
        gap.logon(5000)
        gap.subscribe(inbox, "gap")
        clean.connect(_uri(proxy))
        clean.logon(5000)
        proxy.partition("to_client")
        gap.publish("gap", json.dumps({"n": 1}))  # its delivery back to us is dropped
        wait_for(lambda: proxy.stats["to_client"].dropped > 0, what="a dropped delivery")
        assert proxy.heal() == 1  # the idle connection lost nothing
        wait_for(
            lambda: any(e.state is ConnectionState.DISCONNECTED for e in events),
            what="the aborted connection",
        )
        assert proxy.open_connections == 1
        clean.flush(5000)  # the healed path works both ways
    assert inbox.ns() == []


# ------------------------------------------------------------------------ (d) bandwidth


@pytest.mark.serial
def test_bandwidth_limit_paces_the_stream(server: ServerThread, proxy: LoopbackProxy) -> None:
    """40 kB/s towards the subscriber: 100 kB of payload take at least 0.8 x 2.5 s; the
    publisher (direct) is not limited; the messages arrive intact and in order."""
    rate, total = 40_000.0, 100_000
    body = "z" * 990
    inbox = Inbox()
    with Client("bw-sub") as sub, Client("bw-pub") as pub:
        sub.connect(_uri(proxy))
        sub.logon(5000)
        sub.subscribe(inbox, "bw")
        pub.connect(server.uri())
        pub.logon(5000)
        proxy.bandwidth(rate, direction="to_client")
        t0 = time.monotonic()
        count = total // len(body) + 1
        for i in range(count):
            pub.publish("bw", json.dumps({"n": i, "b": body}))
        pub.flush(5000)
        published = time.monotonic() - t0
        inbox.wait_messages(count, timeout=10)
        elapsed = time.monotonic() - t0
    print(f"bandwidth: {total} B of payload at {rate:.0f} B/s in {elapsed:.2f} s")
    assert published < 1.0  # the limit is on the subscriber's side only
    assert elapsed >= total / rate * 0.8, elapsed
    assert elapsed < total / rate * 3
    assert inbox.ns() == list(range(count))
