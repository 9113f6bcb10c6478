"""A client name taken over by another publisher (issue 31): the server refuses another
user's logon with the name, and the HA client never reports persisted what the server would
drop as duplicates of someone else's sequence (real servers on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient import Client, Message
from ampsclient.exceptions import ForeignSequenceError, NameInUseError
from ampsclient.protocol.header import encode_header
from ampsclient.stores.publish import FilePublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config, parse_config
from ampsclient_server_stub.security.users import add_user
from ampsclient_server_stub.testing import wait_for
from ampsclient_server_stub.testing.raw import RawClient

pytestmark = pytest.mark.integration

FAST = {"scheme": "pbkdf2-sha256", "iterations": 1000}
HUGE = 2**62


class Orders:
    """Collects the ``n`` of deliveries; ``n = -1`` is the end marker."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ns: list[int] = []
        self.done = threading.Event()

    def __call__(self, message: Message) -> None:
        n = json.loads(message.data)["n"]
        if n == -1:
            self.done.set()
            return
        with self.lock:
            self.ns.append(n)


def test_ha_client_fails_loudly_when_its_name_was_used_with_a_foreign_sequence(
    tmp_path: Path,
) -> None:
    """Without authentication anyone may use a name: an intruder publishes once with
    ``s = 2^62`` under the publisher's name. When the publisher (3 unpersisted messages in its
    store) logs on, the logon ack's ``s`` is a sequence its store never issued: it raises
    :class:`ForeignSequenceError` and keeps its messages, instead of dropping them as
    persisted while the server discards them as duplicates."""
    config = default_config(tcp_port=0, ws_port=0, data_dir=tmp_path / "server")
    with ServerThread(config) as server:
        uri = server.uri("tcp", "json")
        port = int(uri.rsplit(":", 1)[1].split("/", 1)[0])
        with RawClient(port) as intruder:
            intruder.logon("takeover-feed")
            intruder.send({"c": "p", "t": "elsewhere", "s": HUGE, "a": "persisted"}, b"{}")
            assert int(intruder.wait_ack("persisted")["s"]) == HUGE
        store = FilePublishStore(tmp_path / "pub.store", fsync="never")
        for n in range(3):
            store.store(
                lambda s, n=n: (
                    encode_header({"c": "p", "t": "orders", "a": "persisted", "s": s})
                    + json.dumps({"n": n}).encode()
                )
            )
        orders = Orders()
        with Client("takeover-watch") as watch:
            watch.connect(uri)
            watch.logon(5000)
            watch.subscribe(orders, "orders")
            ha = HAClient("takeover-feed", store)
            try:
                with pytest.raises(ForeignSequenceError, match=str(HUGE)):
                    ha.connect_and_logon(uri)
                assert store.unpersisted_count == 3  # nothing reported persisted
            finally:
                ha.close()
            watch.publish("orders", '{"n":-1}')
            assert orders.done.wait(10)
            assert orders.ns == []  # and nothing was sent to be dropped as a duplicate
        store.close()


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[ServerThread]:
    users = tmp_path / "users.json"
    add_user(users, "alice", "alice-secret-1", read=["^orders"], write=["^orders"], **FAST)
    add_user(users, "bob", "bob-secret-2", read=[".*"], write=[".*"], **FAST)
    xml = f"""<AMPSConfig><Name>takeover</Name>
      <TransactionLog><JournalDirectory>{tmp_path / "journal"}</JournalDirectory>
        <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Authentication><Module>users-file</Module>
          <Options><UsersFile>{users}</UsersFile></Options></Authentication>
        <Entitlement><Module>amps-default-entitlement-module</Module>
          <Options><UsersFile>{users}</UsersFile></Options></Entitlement>
      </Transport></Transports></AMPSConfig>"""
    server = ServerThread(parse_config(xml, base_dir=tmp_path)).start()
    try:
        yield server
    finally:
        server.stop()


def as_user(server: ServerThread, user: str, password: str) -> str:
    return server.uri("tcp", "json").replace("://", f"://{user}:{password}@", 1)


def test_takeover_by_another_user_is_refused_and_nothing_is_lost(secured: ServerThread) -> None:
    """The issue's scenario with authentication: alice logs on with the name of bob's
    HAClient (and would publish ``s = 2^62``); the logon fails with ``name in use``, bob's
    connection stays, and every one of bob's messages is delivered once, in order."""
    orders = Orders()
    total = 200
    with Client("takeover-watch") as watch, HAClient("bob-orders") as bob:
        watch.connect(as_user(secured, "bob", "bob-secret-2"))
        watch.logon(5000)
        watch.subscribe(orders, "orders")
        bob.connect_and_logon(as_user(secured, "bob", "bob-secret-2"))
        for n in range(total // 2):
            bob.publish("orders", json.dumps({"n": n}))
        with Client("bob-orders") as alice:
            alice.connect(as_user(secured, "alice", "alice-secret-1"))
            with pytest.raises(NameInUseError):
                alice.logon(5000)
        for n in range(total // 2, total):
            bob.publish("orders", json.dumps({"n": n}))
        bob.publish_flush(10_000)
        assert bob.unpersisted_count == 0
        watch.publish("orders", '{"n":-1}')
        assert orders.done.wait(10)
        wait_for(lambda: len(orders.ns) == total)
        assert orders.ns == list(range(total))
        assert secured.statistics()["duplicates"] == 0
