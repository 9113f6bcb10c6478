"""Durability across ``kill -9``: real server processes (fsync=always, the default), restarted on
the same ports and data directory.

* Every publish acknowledged as persisted before the crash is in the log afterwards, exactly
  once and in order; the logon ack's ``s`` is the client's last stored sequence; republished
  duplicates are acknowledged but not stored again.
* SOW topics recover their state from the journal.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from _txlog_support import Inbox, ha_client, unique, wait_until

from ampsclient import Client, Command
from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing.log import read_log

pytestmark = pytest.mark.integration


def epoch_replay(uri: str, topic: str) -> list[tuple[str, dict[str, Any]]]:
    """``(bookmark, body)`` of every message of ``topic`` in the log, in log order."""
    return [(bm, json.loads(data)) for bm, data in read_log(uri, topic)]


def test_acknowledged_publishes_survive_kill_9_exactly_once(tmp_path: Path) -> None:
    total = 30_000
    topic = "durable"
    name = unique("ha-pub")
    pid = publisher_id_for(name)
    store_dir = tmp_path / "store"
    with ServerProcess(data_dir=tmp_path / "server") as server:
        uri = server.uri()
        client = ha_client(name, store_dir, uri)
        store = client.publish_store
        seqs: list[int] = []
        half, killed = threading.Event(), threading.Event()

        def publish_all() -> None:
            for i in range(total):
                seqs.append(client.publish(topic, b'{"i":%d}' % i))
                if i == total // 2:
                    # the second half goes out around the kill, whatever the publish rate
                    half.set()
                    killed.wait(30)

        writer = threading.Thread(target=publish_all)
        writer.start()
        wait_until(lambda: half.is_set() and store.last_persisted >= seqs[total // 4], 30, "acks")
        server.kill()  # mid-stream: the writer is still publishing
        killed.set()
        wait_until(lambda: not client.logged_on, 10, "client notices the crash")
        acked = store.last_persisted  # nothing can be acknowledged any more
        writer.join(60)
        unpersisted = client.close(timeout=0)
        store.close()
        assert unpersisted > 0 and len(seqs) == total
        acked_i = seqs.index(acked)  # messages 0..acked_i were acknowledged

        server.start()
        # the log after the crash: every acknowledged message, once, in order
        log = epoch_replay(uri, topic)
        ids = [body["i"] for _, body in log]
        assert ids == list(range(len(ids)))
        assert len(ids) > acked_i
        assert [bm for bm, _ in log] == [f"{pid}|{s}|" for s in seqs[: len(ids)]]

        # the logon ack's s is the last sequence stored for that client name; a client that
        # republishes what is stored gets it acknowledged, but nothing is stored twice
        with Client(name) as raw:
            raw.connect(uri)
            raw.logon(5000)
            assert raw.logon_ack is not None
            last = raw.logon_ack.get_sequence()
            assert last == seqs[len(ids) - 1] >= acked
            box = Inbox()
            raw.set_last_chance_message_handler(box)
            for s in seqs[max(0, len(ids) - 5) : len(ids)]:
                cmd = Command("publish").set_topic(topic).set_sequence(s)
                cmd.set_data(json.dumps({"i": -1})).add_ack_type("persisted")
                raw.execute_async(cmd.add_ack_type("processed").set_timeout(5000))
            box.wait(lambda b: any(a.get_sequence() == last for a in b.acks("persisted")))
            assert all(a.get_status() == "success" for a in box.acks("persisted"))
        assert epoch_replay(uri, topic) == log

        # the publisher comes back with its store: the rest goes out, nothing is doubled
        client = ha_client(name, store_dir, uri)
        try:
            assert client.logon_ack is not None
            assert client.logon_ack.get_sequence() == last
            client.publish_flush(30_000)
        finally:
            client.close()
            client.publish_store.close()
        final = epoch_replay(uri, topic)
        assert [body["i"] for _, body in final] == list(range(total))
        assert [bm for bm, _ in final] == [f"{pid}|{s}|" for s in seqs]


def sow_state(uri: str, topic: str) -> list[tuple[str, str]]:
    with Client(unique("sow")) as client:
        client.connect(uri)
        client.logon(5000)
        stream: Any = client.sow(topic, timeout=10_000)
        return sorted(
            (str(m.get_sow_key()), m.get_data()) for m in stream if m.get_command() == "sow"
        )


@pytest.mark.parametrize("lose_sow_file", [False, True])
def test_sow_state_is_recovered_from_the_journal_after_kill_9(
    tmp_path: Path, lose_sow_file: bool
) -> None:
    topic = "/ADMIN/bookmark_store"
    with ServerProcess(data_dir=tmp_path / "server") as server:
        uri = server.uri()
        client = ha_client(unique("tracker"), tmp_path / "store", uri)
        try:
            for i in range(300):
                body = {"clientName": f"c{i % 7}", "subId": f"s{i % 11}", "bookmark": f"1|{i}|"}
                client.publish(topic, json.dumps(body))
            client.publish_flush(10_000)  # persisted: in the journal, fsynced
            with Client(unique("deleter")) as deleter:
                deleter.connect(uri)
                deleter.logon(5000)
                deleter.sow_delete(topic, "/clientName = 'c3'", timeout=5000)
                deleter.flush(5000)
            before = sow_state(uri, topic)
            assert len(before) == 6 * 11 and not any('"c3"' in data for _, data in before)
            # the sow_delete is recorded too: wait until a later persisted publish covers it
            client.publish_and_wait(topic, json.dumps({"clientName": "z", "subId": "z"}))
            before = sow_state(uri, topic)
        finally:
            client.close()
            client.publish_store.close()
        server.kill()
        if lose_sow_file:
            for path in (tmp_path / "server" / "sow").glob("bookmark_store.sqlite*"):
                path.unlink()
        server.start()
        assert sow_state(uri, topic) == before
