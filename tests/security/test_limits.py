"""Slow client management (offlining to MessageDiskPath, disk/age/capacity limits), connection
caps, the maximum frame size from XML, and logon-before-anything, over real sockets."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient.exceptions import AMPSError
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.net.flow import LOW_WATER
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

BODY = json.dumps({"pad": "x" * 8000}).encode()


def raw_sub(port: int) -> RawClient:
    """A subscriber on a raw socket that reads only when told to (4 KiB receive buffer)."""
    return RawClient(port, rcvbuf=4096, timeout=10)


def logon_and_subscribe(sub: RawClient, name: str, topic: str) -> None:
    sub.send({"c": "logon", "cid": "L", "client_name": name, "a": "processed"})
    sub.send({"c": "subscribe", "cid": "S", "t": topic, "a": "processed"})
    acks = 0
    while acks < 2:
        for hdr, _ in sub.read_some(1 << 20, timeout=10):
            if hdr.get("c") == "ack":
                assert hdr.get("status") == "success", hdr
                acks += 1


def start(tmp: Path, root: str, transport: str = "") -> ServerThread:
    xml = f"""<AMPSConfig><Name>limits</Name>{root}
      <Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>{transport}
        </Transport>
        <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
      </Transports></AMPSConfig>"""
    return ServerThread(parse_config(xml, base_dir=tmp), record_all_topics=False).start()


def publish(server: ServerThread, count: int, topic: str = "t") -> None:
    with Client("pub") as pub:
        pub.connect(server.uri("ws"))
        pub.logon(5000)
        for i in range(count):
            pub.publish(topic, BODY[:-1] + f',"i":{i}}}'.encode())
        pub.flush(30_000)


def offline_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.offline")) if directory.exists() else []


def session_memory(server: ServerThread) -> int:
    def biggest() -> int:
        security = server.server.security
        assert security is not None
        used = [s.slow.memory() for p in security.policies.values() for s in p.sessions if s.slow]
        return max(used, default=0)

    return server.call(biggest)


def test_slow_subscriber_is_offlined_then_catches_up_in_order(tmp_path: Path) -> None:
    disk = tmp_path / "offline"
    server = start(
        tmp_path,
        f"""<MessageMemoryLimit>2MB</MessageMemoryLimit><MessageDiskPath>{disk}</MessageDiskPath>
            <MessageDiskLimit>500MB</MessageDiskLimit><ClientMaxCapacity>50%</ClientMaxCapacity>""",
    )
    sub = raw_sub(server.server.tcp_port)
    try:
        logon_and_subscribe(sub, "slow-1", "t")
        publish(server, 2500)  # ~20 MB towards a reader that reads nothing
        stats = server.statistics()
        assert stats["slow_offlined"] >= 1
        files = offline_files(disk)
        assert len(files) == 1 and files[0].stat().st_size > 5_000_000
        # the server holds at most the client's share of memory (+ one refill) for it
        assert session_memory(server) <= 1024 * 1024 + 2 * 1024 * 1024
        seen: list[int] = []
        while len(seen) < 2500:
            for hdr, body in sub.read_some(1 << 20, timeout=10):
                if hdr.get("c") == "p":
                    seen.append(json.loads(body)["i"])
        assert seen == list(range(2500))  # nothing lost, nothing twice, in order
        wait_for(lambda: not offline_files(disk), timeout=15.0, what="offline file removed")
        assert server.statistics()["offline_bytes"] == 0
        assert server.statistics().get("slow_disconnected", 0) == 0
    finally:
        sub.close()
        server.stop()


def test_disk_limit_disconnects_and_removes_the_file(tmp_path: Path) -> None:
    disk = tmp_path / "offline"
    server = start(
        tmp_path,
        f"""<MessageMemoryLimit>1MB</MessageMemoryLimit><MessageDiskPath>{disk}</MessageDiskPath>
            <MessageDiskLimit>3MB</MessageDiskLimit>""",
    )
    sub = raw_sub(server.server.tcp_port)
    healthy_got: list[int] = []

    def received(count: int) -> bool:
        return len(healthy_got) == count

    try:
        logon_and_subscribe(sub, "slow-2", "t")
        with Client("healthy") as healthy, Client("pub") as pub:
            healthy.connect(server.uri("ws"))
            healthy.logon(5000)
            healthy.subscribe(lambda m: healthy_got.append(1), "t")
            pub.connect(server.uri("ws"))
            pub.logon(5000)
            # the healthy subscriber shares the 1 MB / 3 MB pool: it is healthy only if it
            # keeps up, so it is given 100 messages (800 KB) at a time. Published at once, it
            # could fall 3 MB behind on a loaded machine and be disconnected as too slow
            # itself (seen: offlined by the pool's memory limit, then its file over 3 MB)
            for start_at in range(0, 1500, 100):
                for i in range(start_at, start_at + 100):
                    pub.publish("t", BODY[:-1] + f',"i":{i}}}'.encode())
                pub.flush(30_000)
                want = start_at + 100
                wait_for(partial(received, want), timeout=15.0, what=f"{want} received")
        assert sub.wait_closed(timeout=15.0)
        stats = server.statistics()
        assert stats["slow_disconnected"] >= 1
        wait_for(lambda: not offline_files(disk), timeout=15.0, what="offline file removed")
    finally:
        sub.close()
        server.stop()


def test_age_limit_disconnects_a_stalled_subscriber(tmp_path: Path) -> None:
    server = start(
        tmp_path,
        "",
        "<ClientMessageAgeLimit>1s</ClientMessageAgeLimit>"
        "<MessageMemoryLimit>512MB</MessageMemoryLimit>",
    )
    sub = raw_sub(server.server.tcp_port)
    try:
        logon_and_subscribe(sub, "stalled", "t")
        t0 = time.monotonic()
        publish(server, 1000)
        wait_for(
            lambda: server.statistics().get("slow_disconnected", 0) >= 1,
            timeout=15.0,
            what="age limit",
        )
        assert time.monotonic() - t0 >= 1.0
        assert sub.wait_closed(timeout=15.0)
    finally:
        sub.close()
        server.stop()


def test_connection_cap_per_transport(tmp_path: Path) -> None:
    server = start(
        tmp_path, "<MaxConnections>3</MaxConnections>", "<MaxConnections>2</MaxConnections>"
    )
    clients = [Client(f"cap-{i}") for i in range(4)]
    try:
        for c in clients[:2]:
            c.connect(server.uri("tcp"))
            c.logon(5000)
        with pytest.raises(AMPSError):
            clients[2].connect(server.uri("tcp"))
            clients[2].logon(3000)
        clients[3].connect(server.uri("ws"))  # the instance allows 3
        clients[3].logon(5000)
        extra = Client("cap-over")
        with pytest.raises(AMPSError):
            extra.connect(server.uri("ws"))
            extra.logon(3000)
        extra.close()
        clients[0].close()
        wait_for(
            lambda: server.call(lambda: server.server.security.connection_count) <= 3, timeout=15.0
        )
        again = Client("cap-again")
        again.connect(server.uri("tcp"))
        again.logon(5000)
        again.close()
        assert server.statistics()["connections_refused"] == 2
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_max_frame_size_from_xml(tmp_path: Path) -> None:
    server = start(tmp_path, "", "<MaxFrameSize>4KB</MaxFrameSize>")
    try:
        with Client("small") as c:
            c.connect(server.uri("tcp"))
            c.logon(5000)
            c.publish("t", b"{}")
            c.flush(5000)
            c.publish("t", BODY)  # 8 KB > 4 KB: the server drops the connection
            with pytest.raises(AMPSError):
                c.flush(5000)
        with Client("big-ws") as c:  # the other transport keeps the default
            c.connect(server.uri("ws"))
            c.logon(5000)
            c.publish("t", BODY)
            c.flush(5000)
    finally:
        server.stop()


def test_logon_required_before_anything(tmp_path: Path) -> None:
    server = start(tmp_path, "")
    try:
        raw = raw_sub(server.server.tcp_port)
        raw.send({"c": "subscribe", "cid": "1", "t": "t", "a": "processed"})
        (hdr, _), *_ = raw.read_some(1 << 20, timeout=10)
        assert hdr["status"] == "failure" and hdr["reason"] == "logon required"
        raw.send({"c": "p", "t": "t"})  # no ack requested: the server hangs up
        assert raw.wait_closed(timeout=15.0)
        raw.close()
    finally:
        server.stop()


def test_a_wall_clock_step_does_not_age_waiting_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #32, clock steps: message ages are monotonic. The wall clock jumps an hour ahead
    while a subscriber has a backlog; a sweep then finds it young (an hour over a 30 s
    ``ClientMessageAgeLimit`` would have disconnected it), and it gets every message."""
    server = start(
        tmp_path,
        "",
        "<ClientMessageAgeLimit>30s</ClientMessageAgeLimit>"
        "<MessageMemoryLimit>512MB</MessageMemoryLimit>",
    )
    sub = raw_sub(server.server.tcp_port)
    try:
        logon_and_subscribe(sub, "stepped", "t")
        publish(server, 1000)  # ~8 MB towards a reader that reads nothing
        flow = server.server.flow
        assert flow is not None

        def waiting() -> int:
            return max((c.memory() for p in flow.pools for c in p.clients), default=0)

        wait_for(lambda: server.call(waiting) > LOW_WATER, what="a backlog that ages")
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600.0)  # the wall clock steps
        server.call(lambda: [pool.sweep() for pool in flow.pools])  # a sweep, now
        assert server.statistics().get("slow_disconnected", 0) == 0
        monkeypatch.undo()
        seen: list[int] = []
        while len(seen) < 1000:
            for hdr, body in sub.read_some(1 << 20, timeout=10):
                if hdr.get("c") == "p":
                    seen.append(json.loads(body)["i"])
        assert seen == list(range(1000))
    finally:
        sub.close()
        server.stop()
