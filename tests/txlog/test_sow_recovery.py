"""SOW topics recorded in the transaction log recover from their SOW file plus the journal's tail.

Each SOW file keeps the journal index its state reflects (written with the data, and moved to
the end of the log periodically and at shutdown); a restart re-applies only the records after
it. In process, with exact counts (``Broker`` on a real journal and SOW file); then with real
server processes killed with ``kill -9``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from _txlog_support import ha_client, unique, wait_until

from ampsclient import Client
from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub.config import ServerConfig, default_config
from ampsclient_server_stub.engine.broker import Broker
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.sow import SowTopic
from ampsclient_server_stub.engine.txlog import TxLog
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.replication.apply import ReplicatedRecord, apply_replicated
from ampsclient_server_stub.testing import RecordingSession

TOPIC = "/ADMIN/bookmark_store"  # the zero config's SOW topic, keyed by /clientName, /subId


class _Session:
    def send(self, payload: bytes) -> None:
        pass

    def send_many(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self.send(payload)

    def backlog(self) -> int:
        return 0

    def disconnect(self, reason: str) -> None:
        pass

    def start_heartbeat(self, interval: float) -> None:
        pass


def body(i: int, clients: int = 20, subs: int = 3) -> dict[str, Any]:
    return {"clientName": f"c{i % clients}", "subId": f"s{i % subs}", "i": i}


def expected_state(bodies: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    state: dict[tuple[str, str], dict[str, Any]] = {}
    for b in bodies:
        state[(b["clientName"], b["subId"])] = b
    return state


class Node:
    """A broker on ``data_dir`` (its journal and SOW file), driven in process."""

    def __init__(self, data_dir: Path) -> None:
        self.config: ServerConfig = default_config(tcp_port=0, ws_port=0, data_dir=data_dir)
        self.journal = Journal(data_dir / "journal", fsync="never")
        self.broker = Broker(self.config, txlog=TxLog(self.journal))
        self.conn = self.broker.connect(_Session())
        self.broker.handle(self.conn, encode_header({"c": "logon", "cid": "1", "client_name": "w"}))

    def publish(self, topic: str, doc: dict[str, Any]) -> None:
        self.broker.handle(
            self.conn, encode_header({"c": "p", "t": topic}) + json.dumps(doc).encode()
        )

    def state(self) -> dict[tuple[str, str], dict[str, Any]]:
        sow = self.broker.sow_topic(TOPIC)
        assert sow is not None
        records, _ = sow.query()
        docs = [json.loads(r.data) for r in records]
        return {(d["clientName"], d["subId"]): d for d in docs}

    def recovery(self) -> tuple[int, int]:
        """(records read, records applied) by the recovery at construction."""
        c = self.broker.counters
        return c["sow_recovery_read"], c["sow_recovery_applied"]

    def crash(self) -> None:
        """Stop without the shutdown checkpoint (the data itself is committed as it goes)."""
        for sow in self.broker.sow_topics:
            sow.close()
        self.journal.close()

    def close(self) -> None:
        self.broker.close()
        self.journal.close()


def test_a_restart_reads_only_the_journal_after_the_sow_checkpoint(tmp_path: Path) -> None:
    node = Node(tmp_path)
    bodies = [body(i) for i in range(500)]
    for b in bodies:
        node.publish(TOPIC, b)
    for i in range(300):  # another topic fills the log after the last SOW write
        node.publish("noise", {"n": i})
    before = node.state()
    assert before == expected_state(bodies)
    node.crash()

    node = Node(tmp_path)
    assert node.recovery() == (300, 0)  # the 300 noise records, nothing to apply
    assert node.state() == before
    node.close()  # a clean shutdown moves the checkpoint to the end of the log

    node = Node(tmp_path)
    assert node.recovery() == (0, 0)
    assert node.state() == before
    node.crash()

    for path in (tmp_path / "sow").glob("bookmark_store.sqlite*"):
        path.unlink()  # the SOW file is lost: rebuilt from the whole journal
    node = Node(tmp_path)
    assert node.recovery() == (800, 500)
    assert node.state() == before
    node.close()


def _poison(sow_file: Path, table: str, client: str) -> None:
    """A real storage failure for one document: a trigger that aborts its insert."""
    with sqlite3.connect(sow_file) as db:
        db.execute(
            f'CREATE TRIGGER poison BEFORE INSERT ON "{table}" '
            f"WHEN instr(NEW.data, CAST('{client}' AS BLOB)) > 0 "
            "BEGIN SELECT RAISE(ABORT, 'disk trouble'); END"
        )


def test_a_replicated_record_the_sow_could_not_store_is_reapplied_at_the_next_start(
    tmp_path: Path,
) -> None:
    """A record received by replication is journaled, then its SOW write fails: the SOW's
    checkpoint stays below it (the periodic and the shutdown checkpoints too), so the next
    start re-applies it instead of skipping it for good."""
    node = Node(tmp_path)
    bodies = [body(i) for i in range(30)]
    for b in bodies[:10]:
        node.publish(TOPIC, b)
    sow = node.broker.sow_topic(TOPIC)
    assert sow is not None and sow.filename is not None
    _poison(Path(sow.filename), sow._table, "poison")
    lost = {"clientName": "poison", "subId": "s0", "i": -1}
    outcome = apply_replicated(
        node.broker,
        ReplicatedRecord(
            publisher_id_for("partner"), 7, "p", TOPIC, json.dumps(lost).encode(), {"mt": "json"}
        ),
    )
    assert outcome.record is not None  # journaled, but not in the SOW
    held = outcome.record.index
    for b in bodies[10:]:  # later writes still apply
        node.publish(TOPIC, b)
    node.broker.checkpoint_sows()  # what the server does periodically
    assert sow.journal_index < held
    assert ("poison", "s0") not in node.state()
    with sqlite3.connect(sow.filename) as db:
        db.execute("DROP TRIGGER poison")  # the storage trouble is over
    node.close()  # the shutdown checkpoint holds too
    node = Node(tmp_path)
    read, applied = node.recovery()
    assert read >= 21 and applied >= 21  # the lost record and everything after it
    assert node.state() == {**expected_state(bodies), ("poison", "s0"): lost}
    node.close()


def test_a_failed_journal_append_takes_the_sow_write_back(tmp_path: Path) -> None:
    """A SOW publish whose journal append fails is refused and leaves the SOW as it was (the
    data and its checkpoint), so SOW and journal never disagree."""
    node = Node(tmp_path)
    for i in range(5):
        node.publish(TOPIC, body(i))
    sow = node.broker.sow_topic(TOPIC)
    assert sow is not None
    before, checkpoint = node.state(), sow.journal_index
    node.journal.close()  # the transaction log is gone: every append fails
    session = RecordingSession()
    conn = node.broker.connect(session)
    node.broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": "x"}))
    node.broker.handle(
        conn,
        encode_header({"c": "p", "t": TOPIC, "cid": "2", "a": "processed"})
        + json.dumps(body(99)).encode(),
    )
    acks = session.headers("ack")
    assert acks[-1]["status"] == "failure" and acks[-1]["reason"] == "tx store failure"
    assert node.state() == before
    assert sow.journal_index == checkpoint
    for s in node.broker.sow_topics:
        s.close()


def test_a_failed_journal_append_takes_back_updates_deltas_and_deletes(tmp_path: Path) -> None:
    """The SOW write is committed before the journal append (a commit that fails refuses the
    publish with nothing journaled); when the append then fails, the committed change is
    taken back: a replaced record, a delta merge and a delete leave the SOW, its file and its
    checkpoint as they were (#32)."""
    node = Node(tmp_path)
    for i in range(5):
        node.publish(TOPIC, body(i))
    sow = node.broker.sow_topic(TOPIC)
    assert sow is not None and sow.filename is not None
    before, checkpoint = node.state(), sow.journal_index
    node.journal.close()  # every append fails
    session = RecordingSession()
    conn = node.broker.connect(session)
    node.broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": "x"}))
    replaced = {**body(0), "i": 100}  # the key of body(0)
    commands = [
        (encode_header({"c": "p", "t": TOPIC, "cid": "2", "a": "processed"}), replaced),
        (encode_header({"c": "delta_publish", "t": TOPIC, "cid": "3", "a": "processed"}), replaced),
        (
            encode_header(
                {"c": "sow_delete", "t": TOPIC, "cid": "4", "a": "processed", "filter": "/i < 3"}
            ),
            None,
        ),
    ]
    for header, doc in commands:
        node.broker.handle(conn, header + (json.dumps(doc).encode() if doc else b""))
    acks = [a for a in session.headers("ack") if a.get("cid") in ("2", "3", "4")]
    assert [a["status"] for a in acks] == ["failure"] * 3, acks
    assert {a["reason"] for a in acks} == {"tx store failure"}
    assert node.state() == before  # the cache...
    assert sow.journal_index == checkpoint
    for s in node.broker.sow_topics:
        s.close()
    reopened = SowTopic(TOPIC, keys=sow.keys, filename=sow.filename)  # ... and the file
    try:
        found = [reopened.get(k) for k in reopened]
        assert sorted(json.loads(r.data)["i"] for r in found if r is not None) == [0, 1, 2, 3, 4]
        assert reopened.journal_index == checkpoint
    finally:
        reopened.close()


def test_records_the_sow_has_not_seen_are_applied_in_log_order(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = [body(i) for i in range(200)]
    for b in first:
        node.publish(TOPIC, b)
    node.close()

    # records journaled but never applied (as when a server dies between the two)
    pid = publisher_id_for("elsewhere")
    tail = [body(i) for i in range(200, 260)]
    with Journal(tmp_path / "journal", fsync="never") as journal:
        seq = 0

        def append(command: str, payload: bytes, **fields: str) -> None:
            nonlocal seq
            seq += 1
            journal.append(
                publisher_id=pid,
                sequence=seq,
                topic=TOPIC,
                command=command,
                payload=payload,
                fields={"mt": "json", **fields},
            )

        for b in tail[:30]:
            append("p", json.dumps(b).encode())
        append("sow_delete", b"", filter="/clientName = 'c3'")
        for b in tail[30:]:
            append("p", json.dumps(b).encode())
        journal.sync()

    node = Node(tmp_path)
    assert node.recovery() == (61, 61)
    state = expected_state(first + tail[:30])
    state = {k: v for k, v in state.items() if k[0] != "c3"}
    state.update(expected_state(tail[30:]))
    assert node.state() == state
    assert node.broker.recover_sow_from_journal() == 0  # nothing behind any more
    node.close()


# --------------------------------------------------------------------------- kill -9


def sow_query(uri: str) -> dict[tuple[str, str], dict[str, Any]]:
    with Client(unique("q")) as client:
        client.connect(uri)
        client.logon(5000)
        stream: Any = client.sow(TOPIC, timeout=10_000)
        docs = [m.json() for m in stream if m.get_command() == "sow"]
    return {(d["clientName"], d["subId"]): d for d in docs}


def last_recovery(server: ServerProcess) -> tuple[int, int]:
    """(read, applied) from the server's last ``SOW recovery`` log line."""
    lines = [line for line in server.stderr_lines if "SOW recovery:" in line]
    assert lines, "no recovery line in the server log"
    match = re.search(r"(\d+) journal record\(s\) read from index \d+, (\d+) applied", lines[-1])
    assert match is not None, lines[-1]
    return int(match.group(1)), int(match.group(2))


@pytest.mark.integration
def test_acknowledged_sow_writes_survive_kill_9_and_recovery_reads_only_the_tail(
    tmp_path: Path,
) -> None:
    total, clients, subs = 6000, 50, 7
    name = unique("sow-writer")
    store_dir = tmp_path / "store"
    bodies = [body(i, clients, subs) for i in range(total)]
    with ServerProcess(data_dir=tmp_path / "server") as server:
        uri = server.uri()
        client = ha_client(name, store_dir, uri)
        store = client.publish_store
        seqs: list[int] = []

        def publish_all() -> None:
            for b in bodies:
                seqs.append(client.publish(TOPIC, json.dumps(b)))

        writer = threading.Thread(target=publish_all)
        writer.start()
        wait_until(
            lambda: len(seqs) > total // 3 and store.last_persisted >= seqs[total // 3], 60, "acks"
        )
        server.kill()  # mid-stream
        wait_until(lambda: not client.logged_on, 10, "client notices the crash")
        acked = store.last_persisted
        writer.join(60)
        client.close(timeout=0)
        store.close()
        acked_i = seqs.index(acked)  # bodies[0..acked_i] were acknowledged as persisted

        server.start()
        assert last_recovery(server) == (0, 0)  # the SOW file was up to date: no replay
        state = sow_query(uri)
        for i in range(acked_i + 1):  # every acknowledged write's latest state is there...
            key = (bodies[i]["clientName"], bodies[i]["subId"])
            assert key in state and state[key]["i"] >= i
        for key, doc in state.items():  # ...and nothing that was never published
            assert doc == bodies[doc["i"]] and key == (doc["clientName"], doc["subId"])

        # the publisher comes back: the rest goes out once, and the SOW ends as the fold of all
        client = ha_client(name, store_dir, uri)
        try:
            client.publish_flush(60_000)
            for n in range(200):  # then another topic fills the journal's tail
                client.publish(unique("noise"), json.dumps({"n": n}))
            client.publish_flush(60_000)
        finally:
            client.close()
            client.publish_store.close()
        final = expected_state(bodies)
        assert sow_query(uri) == final

        server.kill()
        server.start()
        read, applied = last_recovery(server)
        assert read <= 200 and applied == 0  # at most the noise after the last checkpoint
        assert sow_query(uri) == final
