"""Client names and publish sequences on the server: duplicate detection by client name and
``s`` whatever acks were asked for, one connection per name only with a transaction log, and
a name bound to the authenticated user that owns it (raw sockets on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config, parse_config
from ampsclient_server_stub.security.users import add_user
from ampsclient_server_stub.testing.raw import RawClient

pytestmark = pytest.mark.integration

FAST = {"scheme": "pbkdf2-sha256", "iterations": 1000}


@pytest.fixture(params=["txlog", "no-txlog"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerThread]:
    config = default_config(tcp_port=0, ws_port=0, data_dir=tmp_path)
    with ServerThread(config, record_all_topics=request.param == "txlog") as thread:
        assert (thread.server.journal is not None) == (request.param == "txlog")
        yield thread


def port_of(server: ServerThread) -> int:
    uri = server.uri("tcp", "json")
    return int(uri.rsplit(":", 1)[1].split("/", 1)[0])


def received(sub: RawClient) -> list[int]:
    """The ``n`` of every delivery up to the marker message (``n = -1``), in order."""
    seen: list[int] = []
    while True:
        _hdr, body = sub.recv_until(lambda h: h.get("c") == "p")
        n = json.loads(body)["n"]
        if n == -1:
            return seen
        seen.append(n)


def subscribe(sub: RawClient, topic: str) -> None:
    sub.logon("names-sub")
    sub.send({"c": "subscribe", "cid": "S", "t": topic, "a": "processed", "sub_id": "S"})
    ack, _ = sub.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "S")
    assert ack.get("status") == "success", ack


def test_sequences_resent_without_an_ack_request_are_delivered_once(
    server: ServerThread,
) -> None:
    """AMPS detects duplicates by client name and sequence: a publisher re-sending ``s``
    under the same name without asking for an ack gets each message delivered once."""
    port = port_of(server)
    with RawClient(port) as sub:
        subscribe(sub, "dedup")
        with RawClient(port) as pub:
            pub.logon("names-pub")
            for s in (1, 2, 3):
                pub.send({"c": "p", "t": "dedup", "s": s}, json.dumps({"n": s}).encode())
        with RawClient(port) as pub:  # the same name again: re-sends 2 and 3, then 4
            ack = pub.logon("names-pub")
            assert int(ack["s"]) == 3
            for s in (2, 3, 4):
                pub.send({"c": "p", "t": "dedup", "s": s}, json.dumps({"n": s}).encode())
            pub.send({"c": "p", "t": "dedup", "s": 3, "a": "processed", "cid": "x"}, b'{"n":3}')
            answers = []  # everything up to the processed ack (the marker): no persisted ack
            while not answers or answers[-1].get("cid") != "x":
                answers.append(pub.recv()[0])
            assert [(h.get("a"), h.get("status")) for h in answers] == [("processed", "success")]
            pub.send({"c": "p", "t": "dedup"}, b'{"n":-1}')
            assert received(sub) == [1, 2, 3, 4]
    assert server.statistics()["duplicates"] == 3


def test_official_client_sequenced_publish_without_ack_is_deduplicated(
    server: ServerThread,
) -> None:
    """The official client's ``Command("publish").set_sequence(n)`` without an ack type:
    re-sent sequences are dropped by name and ``s``."""
    amps = pytest.importorskip("AMPS")
    port = port_of(server)
    with RawClient(port) as sub:
        subscribe(sub, "dedup_official")
        for _ in range(2):  # the same sequences twice, from two connections of one name
            client = amps.Client("names-official")
            client.connect(server.uri("tcp", "json"))
            client.logon()
            try:
                for s in (1, 2):
                    cmd = amps.Command("publish").set_topic("dedup_official")
                    client.execute_async(cmd.set_data(json.dumps({"n": s})).set_sequence(s))
                client.publish("dedup_official", '{"n":-1}')
                client.flush()
            finally:
                client.disconnect()
        assert received(sub) == [1, 2]
        assert received(sub) == []


def test_same_name_disconnects_the_first_only_with_a_transaction_log(
    server: ServerThread, request: pytest.FixtureRequest
) -> None:
    """AMPS enforces unique client names only when a transaction log is configured."""
    port = port_of(server)
    with RawClient(port) as first, RawClient(port) as second:
        first.logon("names-twice")
        second.logon("names-twice")
        if "no-txlog" in request.node.callspec.id:
            first.send({"c": "heartbeat", "cid": "h", "a": "processed"})
            ack, _ = first.recv_until(lambda h: h.get("cid") == "h")
            assert ack.get("status") == "success"
        else:
            assert first.wait_closed()
        second.send({"c": "heartbeat", "cid": "h", "a": "processed"})
        ack, _ = second.recv_until(lambda h: h.get("cid") == "h")
        assert ack.get("status") == "success"


# ------------------------------------------------------------- a name belongs to its user


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[ServerThread]:
    users = tmp_path / "users.json"
    add_user(users, "alice", "alice-secret-1", read=["^orders"], write=["^orders"], **FAST)
    add_user(users, "bob", "bob-secret-2", read=[".*"], write=[".*"], **FAST)
    xml = f"""<AMPSConfig><Name>names</Name>
      <TransactionLog><JournalDirectory>{tmp_path / "journal"}</JournalDirectory>
        <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
      <Transports>
      <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Authentication><Module>users-file</Module>
          <Options><UsersFile>{users}</UsersFile></Options></Authentication>
        <Entitlement><Module>amps-default-entitlement-module</Module>
          <Options><UsersFile>{users}</UsersFile></Options></Entitlement>
      </Transport>
      <Transport><Name>open</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
      </Transports></AMPSConfig>"""
    server = ServerThread(parse_config(xml, base_dir=tmp_path)).start()
    try:
        yield server
    finally:
        server.stop()


def logon(raw: RawClient, name: str, user: str, password: str) -> dict[str, object]:
    raw.send(
        {
            "c": "logon",
            "cid": "L",
            "client_name": name,
            "user_id": user,
            "pw": password,
            "a": "processed",
        }
    )
    ack, _ = raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "L")
    return ack


def test_another_users_logon_with_a_taken_name_fails_with_name_in_use(
    secured: ServerThread,
) -> None:
    """AMPS: a logon with an existing client name and a different authenticated user fails.
    The name stays bound to its user after that user disconnects; the user itself may log on
    again (and then replaces its older connection, the transaction-log rule)."""
    port = port_of(secured)
    with RawClient(port) as bob:
        assert logon(bob, "bob-feed", "bob", "bob-secret-2")["status"] == "success"
        bob.send({"c": "p", "t": "orders", "s": 5, "a": "persisted"}, b'{"n":5}')
        bob.wait_ack("persisted")
        with RawClient(port) as alice:
            ack = logon(alice, "bob-feed", "alice", "alice-secret-1")
            assert (ack["status"], ack["reason"]) == ("failure", "name in use")
            assert alice.wait_closed()
    with RawClient(port) as alice:  # bob is gone: the name is still his
        ack = logon(alice, "bob-feed", "alice", "alice-secret-1")
        assert (ack["status"], ack["reason"]) == ("failure", "name in use")
    with RawClient(port) as bob:  # bob's sequence did not move
        ack = logon(bob, "bob-feed", "bob", "bob-secret-2")
        assert ack["status"] == "success" and int(str(ack["s"])) == 5
    assert secured.statistics()["duplicates"] == 0
