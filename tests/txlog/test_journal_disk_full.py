"""Issue #32, the transaction log on a full disk, with a real server process whose journal
directory is a size-limited tmpfs the test mounts (skipped with the reason where it may not).

While the disk is full the server acknowledges nothing as persisted, refuses what it cannot
keep (``tx store failure``) and reports the condition once in its log and in
``/amps/instance/storage``; the publishing ``HAClient`` logs one line when the refusals start
and one when publishes are persisted again (it logged a line per refused message: 2,396 in
one run). Once space returns, publishing goes on by itself. The ledger: the transaction log
holds every message that was not refused exactly once, in order, and nothing refused (a
refused publish used to be journaled when the write failed after the record was buffered)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, HAClient
from ampsclient_server_stub.harness import ServerProcess, free_port
from ampsclient_server_stub.testing import RawClient, wait_for
from tests.admin._support import get_json
from tests.stores.test_disk_full import fill, small_filesystem

pytestmark = pytest.mark.integration

PAD = "x" * 500


def write_config(tmp_path: Path, name: str, admin: int, *, more: str = "") -> Path:
    """``tmp_path/amps.xml``: configuration ``name``, its admin port ``admin``, a tcp transport,
    topic ``t`` recorded in 4 MB journal files under ``journal``, then ``more``."""
    conf = tmp_path / "amps.xml"
    conf.write_text(f"""<AMPSConfig><Name>{name}</Name>
  <Admin><InetAddr>127.0.0.1:{admin}</InetAddr></Admin>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    </Transport></Transports>
  <TransactionLog><JournalDirectory>journal</JournalDirectory><JournalSize>4MB</JournalSize>
    <Topic><Name>t</Name><MessageType>json</MessageType></Topic></TransactionLog>
  {more}
</AMPSConfig>""")
    return conf


def conditions(admin: int) -> dict[str, Any]:
    found = get_json(admin, "/amps/instance/storage")["conditions"]
    return {c["id"]: c for c in found} if isinstance(found, list) else dict(found)


def replay(uri: str) -> list[int]:
    """The ``i`` of every record of ``t`` in the transaction log (EPOCH replay to a marker)."""
    seen: list[int] = []
    done: list[bool] = []

    def handler(message: Any) -> None:
        if message.get_command() not in ("p", "publish") or not message.get_data():
            return
        i = json.loads(message.get_data())["i"]
        if i < 0:
            done.append(True)
        else:
            seen.append(i)

    with Client("journal-full-replay") as client:
        client.connect(uri)
        client.logon(5000)
        client.bookmark_subscribe(handler, "t", "0")
        client.publish("t", json.dumps({"i": -1}))
        wait_for(lambda: bool(done), timeout=30, what="the replay's marker")
    return seen


def test_a_full_journal_disk_refuses_reports_once_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = free_port()
    (tmp_path / "data").mkdir()
    conf = write_config(tmp_path, "journal-full", admin)
    total = 6000
    with (
        small_filesystem(tmp_path / "data" / "journal", "16m") as fs,
        caplog.at_level(logging.WARNING, "ampsclient.ha"),
    ):
        server = ServerProcess(data_dir=tmp_path / "data", config=conf).start()
        try:
            pub = HAClient("journal-full-pub")
            pub.get_server_chooser().add(server.uri())
            pub.connect_and_logon()
            try:
                for i in range(1000):  # before
                    pub.publish("t", json.dumps({"i": i, "pad": PAD}))
                pub.publish_flush(30_000)
                filler = fill(fs)
                for i in range(1000, 4000):  # during: far more than the append buffer holds
                    pub.publish("t", json.dumps({"i": i, "pad": PAD}))
                wait_for(lambda: "journal" in conditions(admin), timeout=30, what="the condition")
                assert conditions(admin)["journal"]["disk_full"] is True
                filler.unlink()  # space returns
                for i in range(4000, total):  # after
                    pub.publish("t", json.dumps({"i": i, "pad": PAD}))
                pub.publish_flush(60_000)
            finally:
                pub.close()
            wait_for(lambda: not conditions(admin), timeout=30, what="the condition to end")
            journaled = replay(server.uri())
            wait_for(
                lambda: any("storage: journal is written again" in x for x in server.stderr_lines),
                what="the server's line",
            )
            log = list(server.stderr_lines)
        finally:
            server.stop()
    client_lines = [r.getMessage() for r in caplog.records if r.name == "ampsclient.ha"]
    refused = [re.search(r"refused (\d+) publish\(es\)", line) for line in client_lines]
    counts = [int(m.group(1)) for m in refused if m is not None]
    assert len(client_lines) == 2 * len(counts) and counts, client_lines  # start + end each
    assert all("tx store failure" in line for line in client_lines)
    assert len(journaled) == len(set(journaled)) and journaled == sorted(journaled)
    assert len(journaled) + sum(counts) == total  # nothing refused is in the log
    assert set(range(1000)) | set(range(4000, total)) <= set(journaled)
    assert sum("storage: journal cannot be written" in line for line in log) == 1
    assert sum("storage: journal is written again" in line for line in log) == 1
    assert not any("Traceback" in line for line in log)


def test_a_bookmark_subscribe_while_the_journal_disk_is_full_gets_what_is_durable(
    tmp_path: Path,
) -> None:
    """A bookmark subscription placed while the journal cannot be written: the replay read
    used to flush the append buffer first, and the flush's ``ENOSPC`` failed the subscribe
    (a traceback, ``error handling 'subscribe'``). It is served from what the files hold
    (the durable records, in order) and gets the rest once space returns; the condition is
    reported once, and the connection and another client carry on."""
    admin = free_port()
    (tmp_path / "data").mkdir()
    conf = write_config(tmp_path, "journal-full-sub", admin)
    got: list[int] = []
    with small_filesystem(tmp_path / "data" / "journal", "16m") as fs:
        server = ServerProcess(data_dir=tmp_path / "data", config=conf).start()
        try:
            with HAClient("journal-full-sub-pub") as pub, Client("journal-full-sub") as sub:
                pub.get_server_chooser().add(server.uri())
                pub.connect_and_logon()
                for i in range(200):  # durable before the disk fills
                    pub.publish("t", json.dumps({"i": i, "pad": PAD}))
                pub.publish_flush(30_000)
                filler = fill(fs)
                for i in range(200, 300):  # buffered: the group commit cannot write them
                    pub.publish("t", json.dumps({"i": i, "pad": PAD}))
                wait_for(lambda: "journal" in conditions(admin), timeout=30, what="the condition")
                sub.connect(server.uri())
                sub.logon(5000)
                sub.bookmark_subscribe(
                    lambda m: got.append(json.loads(m.get_data())["i"]), "t", "0", timeout=10_000
                )
                wait_for(lambda: len(got) >= 200, timeout=30, what="the durable records")
                with Client("journal-full-other") as other:  # another client is unharmed
                    other.connect(server.uri())
                    other.logon(5000)
                    seen: list[bytes] = []
                    other.subscribe(lambda m: seen.append(m.get_data()), "u", timeout=10_000)
                    other.publish("u", '{"n":1}')  # not journaled: delivered at once
                    wait_for(lambda: bool(seen), timeout=30, what="the other client's message")
                assert "journal" in conditions(admin)  # still full: nothing more was readable
                # in order, and not all: what the filled disk's last bytes took is durable too
                assert got == list(range(len(got))) and 200 <= len(got) < 300
                filler.unlink()  # space returns: the rest follows on the same subscription
                pub.publish_flush(60_000)
                wait_for(lambda: len(got) >= 300, timeout=30, what="the records written later")
            log = list(server.stderr_lines)
        finally:
            server.stop()
    assert got == list(range(300))
    assert sum("storage: journal cannot be written" in line for line in log) == 1
    assert not any("Traceback" in line or "error handling" in line for line in log), log


def test_a_queue_ack_refused_by_a_full_journal_disk_says_tx_store_failure(tmp_path: Path) -> None:
    """A queue acknowledgement (``sow_delete`` by bookmark) is a transaction log record: when
    the log cannot take it, it is refused ``tx store failure`` like a publish (it answered
    ``internal error`` with a traceback per refused ack), the condition is reported once, and
    acknowledgements succeed again once space returns."""
    admin = free_port()
    (tmp_path / "data").mkdir()
    conf = write_config(
        tmp_path,
        "journal-full-ack",
        admin,
        more="""<SOW><Queue><Name>q</Name><MessageType>json</MessageType><UnderlyingTopic>t</UnderlyingTopic>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue></SOW>""",
    )

    def ack(raw: RawClient, bookmark: str, cid: str) -> dict[str, Any]:
        """The processed ack, with the stats ack's ``records_deleted`` when it succeeded."""
        raw.send({"c": "sow_delete", "t": "q", "cid": cid, "bm": bookmark, "a": "processed,stats"})
        hdr, _ = raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == cid)
        if hdr.get("status") == "success":
            stats, _ = raw.recv_until(lambda h: h.get("cid") == cid and h.get("a") == "stats")
            hdr["records_deleted"] = stats.get("records_deleted")
        return hdr

    def publish(raw: RawClient, first: int, count: int, cid: str) -> None:
        for i in range(first, first + count):
            raw.send({"c": "p", "t": "t"}, json.dumps({"i": i, "pad": PAD}).encode())
        raw.send({"c": "flush", "cid": cid, "a": "processed"})
        raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == cid)

    with small_filesystem(tmp_path / "data" / "journal", "16m") as fs:
        server = ServerProcess(data_dir=tmp_path / "data", config=conf).start()
        try:
            with RawClient.from_uri(server.uri()) as pub, RawClient.from_uri(server.uri()) as sub:
                pub.logon("journal-full-ack-pub")
                sub.logon("journal-full-ack-sub")
                sub.send(
                    {"c": "subscribe", "t": "q", "cid": "s", "sub_id": "s", "a": "processed",
                     "o": "max_backlog=10"}
                )  # fmt: skip
                sub.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "s")
                publish(pub, 0, 3, "f0")
                leased = [sub.recv_until(lambda h: h.get("c") == "p")[0]["bm"] for _ in range(3)]
                assert ack(sub, leased[0], "a0").get("records_deleted") == 1
                filler = fill(fs)
                publish(pub, 3, 600, "f1")  # 600 KB: past the append buffer, refused
                wait_for(lambda: "journal" in conditions(admin), timeout=30, what="the condition")
                refused = ack(sub, leased[1], "a1")
                assert (refused.get("status"), refused.get("reason")) == (
                    "failure",
                    "tx store failure",
                ), refused
                filler.unlink()  # space returns
                wait_for(lambda: not conditions(admin), timeout=30, what="the condition to end")
                # the refused ack changed nothing: the message is still there to acknowledge
                for cid, bookmark in (("a3", leased[1]), ("a4", leased[2])):
                    done = ack(sub, bookmark, cid)
                    assert (done.get("status"), done.get("records_deleted")) == ("success", 1)
            log = list(server.stderr_lines)
        finally:
            server.stop()
    assert sum("storage: journal cannot be written" in line for line in log) == 1
    assert not any("Traceback" in line or "error handling" in line for line in log), log
