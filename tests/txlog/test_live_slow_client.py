"""A ``live`` bookmark subscription is subject to slow-client offlining once its replay is over
(seed 000, the ``live`` option: "subscriptions that use this option are subject to slow client
offlining after replay from the transaction log is complete"), while a plain bookmark
subscription paces its replay to its reader and is never offlined (seed 000: replay adapts
"without triggering slow client offlining"). Real sockets, real journal, real offline files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

BODY = json.dumps({"pad": "x" * 8000})
COUNT = 4000  # ~32 MB towards readers that read nothing: over the client's 16 MB share


def start(tmp: Path) -> ServerThread:
    xml = f"""<AMPSConfig><Name>live-slow</Name>
      <MessageMemoryLimit>32MB</MessageMemoryLimit>
      <MessageDiskPath>{tmp / "offline"}</MessageDiskPath><MessageDiskLimit>1GB</MessageDiskLimit>
      <ClientMaxCapacity>50%</ClientMaxCapacity>
      <TransactionLog><JournalDirectory>{tmp / "journal"}</JournalDirectory>
        <JournalSize>64MB</JournalSize><Topic><Name>t</Name></Topic></TransactionLog>
      <Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
        <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
      </Transports></AMPSConfig>"""
    return ServerThread(parse_config(xml, base_dir=tmp), record_all_topics=False).start()


def bookmark_subscriber(port: int, name: str, options: str) -> RawClient:
    """A raw subscriber (4 KiB receive buffer) whose replay of the empty log is complete."""
    sub = RawClient(port, rcvbuf=4096, timeout=10)
    sub.logon(name)
    sub.send({"c": "subscribe", "cid": "S", "t": "t", "bm": "0", "o": options, "a": "completed"})
    while True:
        acks = [h for h, _ in sub.read_some(1 << 20, timeout=10) if h.get("c") == "ack"]
        if acks:
            assert acks[0].get("status") == "success", acks[0]
            return sub


def offlined(server: ServerThread) -> set[str]:
    """Client names whose output is offlined to disk now."""

    def names() -> set[str]:
        security = server.server.security
        assert security is not None
        return {
            s.client_identity()[0]
            for p in security.policies.values()
            for s in p.sessions
            if s.slow is not None and s.slow.offline
        }

    return server.call(names)


def test_a_live_subscriber_is_offlined_after_its_replay_a_paced_one_is_not(
    tmp_path: Path,
) -> None:
    server = start(tmp_path)
    live = bookmark_subscriber(server.server.tcp_port, "live-sub", "live")
    paced = bookmark_subscriber(server.server.tcp_port, "paced-sub", "")
    try:
        with Client("pub") as pub:
            pub.connect(server.uri("ws"))
            pub.logon(5000)
            for i in range(COUNT):
                pub.publish("t", BODY[:-1] + f',"i":{i}}}')
            pub.flush(60_000)
        wait_for(lambda: "live-sub" in offlined(server), timeout=30.0, what="live-sub offlined")
        assert "paced-sub" not in offlined(server)
        # both still get every message once, in order, when they read
        for sub in (live, paced):
            seen: list[int] = []
            while len(seen) < COUNT:
                for hdr, body in sub.read_some(1 << 20, timeout=15):
                    if hdr.get("c") == "p":
                        seen.append(json.loads(body)["i"])
            assert seen == list(range(COUNT))
    finally:
        live.close()
        paced.close()
        server.stop()
