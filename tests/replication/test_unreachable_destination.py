"""Issue #31, honest answers: a sync replication destination that cannot be reached holds every
publisher's persisted acks. The server says so, once per outage (not per dial attempt),
naming the destination, the addresses tried and what is held, and says when it is reachable
again. (docs/configuration.md's complete example names such a peer: publishes hung 32 s with
nothing in the log.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

LOGGER = "ampsclient_server_stub.replication"


def config(tmp: Path, peer_port: int) -> str:
    return f"""<AMPSConfig><Name>A</Name><Group>g</Group>
      <Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
          <Protocol>amps</Protocol></Transport>
        <Transport><Name>repl</Name><Type>amps-replication</Type>
          <InetAddr>127.0.0.1:0</InetAddr></Transport>
      </Transports>
      <TransactionLog><JournalDirectory>{tmp / "journal"}</JournalDirectory>
        <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
      <Replication><Destination><Name>B</Name><Group>g</Group><SyncType>sync</SyncType>
        <Topic><Name>orders</Name><MessageType>json</MessageType>
          <ExcludeValidation>replicate</ExcludeValidation></Topic>
        <Transport><Type>amps-replication</Type>
          <InetAddr>127.0.0.1:{peer_port}</InetAddr></Transport>
      </Destination></Replication></AMPSConfig>"""


def peer_config(tmp: Path, port: int) -> str:
    return f"""<AMPSConfig><Name>B</Name><Group>g</Group>
      <Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
          <Protocol>amps</Protocol></Transport>
        <Transport><Name>repl</Name><Type>amps-replication</Type>
          <InetAddr>127.0.0.1:{port}</InetAddr></Transport>
      </Transports>
      <TransactionLog><JournalDirectory>{tmp / "journal-b"}</JournalDirectory>
        <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
      </AMPSConfig>"""


def reports(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and text in r.getMessage()]


def test_an_unreachable_sync_destination_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    peer_port = free_port()  # nothing listens there yet
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with (
        ServerThread(parse_config(config(tmp_path, peer_port), base_dir=tmp_path)) as server,
        RawClient(server.server.tcp_port) as pub,
    ):
        pub.logon("pub")
        pub.send({"c": "p", "t": "orders", "s": 1, "a": "persisted"}, b'{"id":1}')
        # several dial attempts fail (the backoff starts at 50 ms)...
        wait_for(lambda: len(reports(caplog, "cannot reach 'B'")) >= 3, what="dial attempts")
        # ...and the warning is said once, naming the peer, its address and what it holds
        (line,) = reports(caplog, "is unreachable")
        assert "sync destination 'B'" in line and f"127.0.0.1:{peer_port}" in line
        assert "persisted acks" in line and "held" in line
        # the ack really is held: a later command's ack comes first on this connection (a
        # flush would wait for the ack too)
        pub.send({"c": "subscribe", "cid": "m", "t": "elsewhere", "a": "processed"})
        before_marker: list[dict[str, object]] = []
        while True:
            hdr, _ = pub.recv(5.0)
            if hdr.get("cid") == "m":
                break
            before_marker.append(hdr)
        assert not [h for h in before_marker if h.get("a") == "persisted" and int(h["s"]) >= 1]
        # B starts: the link comes up, that is said, and the held ack goes out
        with ServerThread(parse_config(peer_config(tmp_path, peer_port), base_dir=tmp_path)):
            ack = pub.wait_ack("persisted", timeout=20.0)
            assert ack.get("status") == "success" and int(ack["s"]) == 1
            wait_for(lambda: reports(caplog, "reachable again"), what="the recovery report")
            assert len(reports(caplog, "is unreachable")) == 1  # one outage, one report
