"""The command line and the transaction log (issue #17): what ``ampsclient-server`` records.

Real processes over real sockets: with zero configuration every topic is recorded (bookmark
subscriptions replay); ``--no-txlog`` records nothing; with ``--config`` the file decides, and
a file without ``<TransactionLog>`` records nothing, as AMPS does (bookmark subscriptions fail
with ``invalid topic``). ``--help`` says so.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client
from ampsclient_server_stub.config import load_config
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

NO_TXLOG = """<AMPSConfig>
  <Name>cli</Name>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
    <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
  </Transports>
</AMPSConfig>
"""


def bookmark_subscribe(port: int) -> dict[str, Any]:
    """Publish one message, then subscribe from EPOCH: the processed ack (and, on success,
    the replayed message is checked)."""
    with RawClient(port) as client:
        client.logon("cli-test")
        client.send({"c": "p", "t": "orders", "s": 1}, b'{"n": 1}')
        client.send({"c": "flush", "cid": "F", "a": "persisted"})
        client.recv_until(lambda h: h.get("cid") == "F", 10)
        hdr = {"c": "subscribe", "cid": "S", "t": "orders", "sub_id": "s", "bm": "0"}
        client.send({**hdr, "a": "processed"})
        ack, _ = client.recv_until(lambda h: h.get("cid") == "S", 10)
        if ack["status"] == "success":
            _, body = client.recv_until(lambda h: h.get("c") == "p", 10)
            assert body == b'{"n": 1}'
        return ack


def run(tmp_path: Path, *, config: Path | None = None, args: Sequence[str] = ()) -> dict[str, Any]:
    server = ServerProcess(data_dir=tmp_path / "data", config=config, extra_args=list(args))
    server.start()
    try:
        return bookmark_subscribe(server.tcp_port)
    finally:
        server.stop()


def test_zero_configuration_records_every_topic(tmp_path: Path) -> None:
    assert run(tmp_path)["status"] == "success"


def test_no_txlog_records_nothing(tmp_path: Path) -> None:
    ack = run(tmp_path, args=["--no-txlog"])
    assert (ack["status"], ack["reason"]) == ("failure", "invalid topic")


def test_config_file_without_transaction_log_records_nothing(tmp_path: Path) -> None:
    config = tmp_path / "amps.xml"
    config.write_text(NO_TXLOG)
    ack = run(tmp_path, config=config)
    assert (ack["status"], ack["reason"]) == ("failure", "invalid topic")
    assert not (tmp_path / "data" / "journal").exists()


def test_help_says_what_is_recorded() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ampsclient_server_stub", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    flat = " ".join(out.split())
    assert "every topic is recorded" in flat
    assert "a file without one records nothing" in flat


SHARED = """<AMPSConfig>
  <Name>shared</Name>
  <MessageDiskPath>offline</MessageDiskPath>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
    <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
  </Transports>
  <TransactionLog>
    <JournalDirectory>journal</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
  <SOW>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
      <FileName>sow/%n.sow</FileName></Topic>
    <Queue><Name>work</Name><MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <FileBackedMetadata>enabled</FileBackedMetadata></Queue>
  </SOW>
</AMPSConfig>
"""


def sow_of(server: ServerProcess) -> list[str]:
    with Client("reader") as client:
        client.connect(f"tcp://127.0.0.1:{server.tcp_port}/amps/json")
        client.logon(5000)
        return [
            m.get_data() for m in client.sow("orders", timeout=5000) if m.get_command() == "sow"
        ]


def test_two_servers_from_one_config_file_keep_apart_under_their_data_dirs(
    tmp_path: Path,
) -> None:
    """``--data-dir`` re-bases every relative path the file gives for what the server writes
    (journal, SOW file, queue cache, MessageDiskPath): two servers run from one file at once,
    each with its own state, nothing next to the file (#27)."""
    config = tmp_path / "conf" / "amps.xml"
    config.parent.mkdir()
    config.write_text(SHARED)
    servers = {who: ServerProcess(data_dir=tmp_path / who, config=config) for who in "ab"}
    try:
        for server in servers.values():
            server.start()  # both running at once: before, b found a's journal locked
        for who, server in servers.items():
            with RawClient(server.tcp_port) as client:
                client.logon(f"pub-{who}")
                body = f'{{"id": 1, "who": "{who}"}}'.encode()
                client.send({"c": "p", "t": "orders", "s": 1, "a": "persisted"}, body)
                client.recv_until(lambda h: h.get("a") == "persisted", 10)
        for server in servers.values():
            assert server.stop() == 0
        for who, server in servers.items():
            server.start()  # each recovers its own state
            assert sow_of(server) == [f'{{"id": 1, "who": "{who}"}}']
    finally:
        for server in servers.values():
            server.kill()
    assert sorted(p.name for p in config.parent.iterdir()) == ["amps.xml"]
    for who in "ab":
        data = tmp_path / who
        assert list((data / "journal").glob("ampsclient-server-*.journal*"))
        assert (data / "journal" / "ampsclient-server.work.json.queue.cache").exists()
        assert (data / "sow" / "orders.sow").exists()
    parsed = load_config(config, data_dir=tmp_path / "a")
    assert parsed.extra["MessageDiskPath"] == str(tmp_path / "a" / "offline")
    assert load_config(config).extra["MessageDiskPath"] == str(config.parent / "offline")
