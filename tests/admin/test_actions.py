"""/amps/administrator actions: disconnect a client, journal compress/remove/archive,
replication downgrade/upgrade between two real instances."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ampsclient import Client, HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.cluster import Cluster
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import wait_for

from ._support import action, action_json, admin_port, get_json, with_admin

pytestmark = pytest.mark.integration

SMALL_JOURNAL = """
<AMPSConfig>
  <Name>small-journal</Name>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports>
  <TransactionLog>
    <JournalDirectory>journal</JournalDirectory>
    <JournalSize>16KB</JournalSize>
    <Topic><Name>.*</Name></Topic>
  </TransactionLog>
  <Admin><InetAddr>127.0.0.1:0</InetAddr><Interval>1s</Interval></Admin>
</AMPSConfig>
"""


def test_disconnect_a_client() -> None:
    with ServerThread(with_admin()) as thread:
        port = admin_port(thread)
        victim = Client("victim")
        bystander = Client("bystander")
        lost: list[object] = []
        try:
            victim.set_disconnect_handler(lambda *args: lost.append(args))
            for client in (victim, bystander):
                client.connect(thread.uri())
                client.logon()
            assert set(get_json(port, "/amps/instance/clients")) == {"victim", "bystander"}
            result = action_json(port, "/amps/administrator/clients/victim/disconnect")
            assert result == {"action": "disconnect", "client": "victim", "result": True}
            wait_for(lambda: len(lost) == 1, what="the victim to see its disconnection")
            assert set(get_json(port, "/amps/instance/clients")) == {"bystander"}
            bystander.publish("still", "{}")
            bystander.flush()  # the other client is untouched
            status, _, body = action(port, "/amps/administrator/clients/victim/disconnect")
            assert status == 404 and b"no client" in body
            status, _, body = action(port, "/amps/administrator/replication/x/downgrade")
            assert status == 404 and b"replication is not configured" in body
        finally:
            victim.close()
            bystander.close()


def test_journal_compress_remove_and_archive(tmp_path: Path) -> None:
    config = parse_config(SMALL_JOURNAL, base_dir=tmp_path)
    with ServerThread(config) as thread:
        port = admin_port(thread)
        with HAClient("filler") as pub:
            pub.get_server_chooser().add(thread.uri())
            pub.connect_and_logon()
            for n in range(600):  # ~100 bytes each: several 16 KB files
                pub.publish("fill", json.dumps({"n": n, "pad": "x" * 60}))
            pub.publish_flush(10_000)
        journal = get_json(port, "/amps/instance/journal")
        sealed = [n for n, s in journal["segments"].items() if s["state"] == "sealed"]
        assert len(sealed) >= 2, journal["segments"]
        assert action(port, "/amps/administrator/journal/compress")[0] == 400  # no age
        assert action(port, "/amps/administrator/journal/compress?age=soon")[0] == 400
        assert action_json(port, "/amps/administrator/journal/compress?age=1d")["result"] == []
        result = action_json(port, "/amps/administrator/journal/compress?age=0s")
        assert sorted(result["result"]) == sorted(name + ".gz" for name in sealed)
        journal = get_json(port, "/amps/instance/journal")
        assert journal["compressed_files"] == len(sealed)
        first_before = journal["first_index"]
        result = action_json(port, "/amps/administrator/journal/remove?age=0s")
        assert sorted(result["result"]) == sorted(name + ".gz" for name in sealed)
        journal = get_json(port, "/amps/instance/journal")
        assert journal["compressed_files"] == 0
        assert journal["first_index"] > first_before
        assert journal["files"] == 1  # the active file stays
        # no <JournalArchiveDirectory>: archiving is refused (tests/txlog: archiving with one)
        status, _, body = action(port, "/amps/administrator/journal/archive?age=0s")
        assert status == 409 and b"JournalArchiveDirectory" in body
        actions = get_json(port, "/amps/administrator")["actions"]
        assert "journal/archive?age=<duration>" in actions


def test_replication_downgrade_and_upgrade(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.add("A", group="GA")
    b = cluster.add("B", group="GB")
    cluster.replicate(a, b, sync=True)
    cluster.replicate(b, a, sync=True)
    threads: list[ServerThread] = []
    try:
        for node in (a, b):
            node.data_dir.mkdir(parents=True, exist_ok=True)
            config = parse_config(cluster.config_xml(node), base_dir=node.data_dir)
            threads.append(ServerThread(with_admin(config), fsync="never").start())
        port = admin_port(threads[0])
        wait_for(
            lambda: any(
                d["state"] == "streaming"
                for d in get_json(port, "/amps/instance/replication").values()
            ),
            timeout=20,
            what="A's destination to stream",
        )
        (name, dest), *_ = get_json(port, "/amps/instance/replication").items()
        assert dest["replication_type"] == "sync"
        assert dest["is_connected"] is True
        assert dest["destination_name"] == "B"
        with HAClient("repl-pub") as pub:
            pub.get_server_chooser().add(threads[0].uri())
            pub.connect_and_logon()
            acked_from = time.time()  # the journal time of n=9 lies between these two
            for n in range(10):
                pub.publish("orders", json.dumps({"n": n}))
            pub.publish_flush(10_000)  # sync: B acknowledged them
            acked_to = time.time()
        path = f"/amps/instance/replication/{name}"
        wait_for(lambda: get_json(port, path)["messages_behind"] == 0, what="B caught up")
        assert get_json(port, path)["messages_out"] >= 10
        result = action_json(port, f"/amps/administrator/replication/{name}/downgrade")
        assert result == {"action": "downgrade", "destination": name, "result": True}
        assert get_json(port, path)["replication_type"] == "async"
        assert get_json(port, path)["downgraded"] is True
        # downgrading again changes nothing
        assert (
            action_json(port, f"/amps/administrator/replication/{name}/downgrade")["result"]
            is False
        )
        result = action_json(port, f"/amps/administrator/replication/{name}/upgrade")
        assert result["result"] is True
        assert get_json(port, path)["replication_type"] == "sync"
        status, _, _ = action(port, "/amps/administrator/replication/nowhere/downgrade")
        assert status == 404
        # lag: B unreachable, one message waits for its acknowledgment
        manager = threads[0].server.replication
        assert manager is not None
        threads[0].call(lambda: manager.partition("B"))
        with Client("lagging-pub") as pub:
            pub.connect(threads[0].uri())
            pub.logon(5000)
            newest_from = time.time()
            pub.publish("orders", json.dumps({"n": 99}))
            pub.flush(5000)
            newest_to = time.time()
        wait_for(
            lambda: get_json(port, path)["messages_behind"] >= 1,
            what="the destination to fall behind",
        )
        # AMPS' seconds_behind: journal time of the newest record less that of the newest one
        # the destination acknowledged (n=9); it does not grow while nothing new is written,
        # the age of the oldest unacknowledged message (our extra field) does
        behind = get_json(port, path)["seconds_behind"]
        assert newest_from - acked_to - 0.002 <= behind <= newest_to - acked_from + 0.002
        wait_for(
            lambda: get_json(port, path)["oldest_unacked_age"] > behind + 0.3,
            what="the unacknowledged message to age",
        )
        assert get_json(port, path)["seconds_behind"] == behind
        (entry,) = get_json(port, "/amps/instance/replication.json")["amps"]["instance"][
            "replication"
        ]
        assert (entry["id"], entry["name"], entry["seconds_behind"]) == (name, name, behind)
        assert isinstance(entry["is_connected"], bool)
        wait_for(
            lambda: get_json(port, "/amps/instance/history")[-1]["replication_lag"] > 0.3,
            what="the lag in the dashboard's samples",
        )
        threads[0].call(lambda: manager.heal("B"))
        wait_for(lambda: get_json(port, path)["messages_behind"] == 0, timeout=20, what="caught up")
        assert get_json(port, path)["seconds_behind"] == 0
    finally:
        for thread in threads:
            thread.stop()
