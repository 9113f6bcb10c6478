"""A damaged SOW file at start (issue #32, "corrupt state at start"): the server starts, sets
the file aside, keeps every whole record, rebuilds a recorded topic from the transaction log,
says once exactly what was kept and dropped, and never returns a damaged record. Real files,
real SQLite, a real server over real sockets."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.sow import table_name
from ampsclient_server_stub.engine.sow_salvage import quarantine, salvage

pytestmark = pytest.mark.integration

COUNT = 3000


def config(tmp: Path, *, recorded: bool) -> str:
    txlog = (
        f"""<TransactionLog><JournalDirectory>{tmp / "journal"}</JournalDirectory>
        <Topic><Name>orders</Name></Topic></TransactionLog>"""
        if recorded
        else ""
    )
    return f"""<AMPSConfig><Name>damaged</Name>
      <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
        <FileName>{tmp / "sow" / "%n.sow"}</FileName></Topic></SOW>{txlog}
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Protocol>amps</Protocol></Transport></Transports></AMPSConfig>"""


def body(i: int) -> str:
    return json.dumps({"id": i, "pad": f"{i:08d}" * 25})


def fill_and_stop(tmp: Path, *, recorded: bool) -> Path:
    cfg = parse_config(config(tmp, recorded=recorded))
    with ServerThread(cfg, record_all_topics=False) as s, Client("writer") as c:
        c.connect(s.uri("tcp", "json"))
        c.logon(5000)
        for i in range(COUNT):
            c.publish("orders", body(i))
        c.flush(10_000)
    return tmp / "sow" / "orders.sow"


def damage_middle(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size // 2 - (size // 2) % 4096)  # whole pages in the middle
        handle.write(os.urandom(3 * 4096))


def records_after_restart(tmp: Path, *, recorded: bool) -> list[str]:
    cfg = parse_config(config(tmp, recorded=recorded))
    with ServerThread(cfg, record_all_topics=False) as s, Client("reader") as c:
        c.connect(s.uri("tcp", "json"))
        c.logon(5000)
        return [
            m.get_data()
            for m in c.sow("orders", timeout=10_000, order_by="/id")
            if m.get_command() == "sow"
        ]


def damage_reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]


def test_a_recorded_topic_is_whole_again_from_the_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = fill_and_stop(tmp_path, recorded=True)
    damage_middle(path)
    with caplog.at_level(logging.ERROR):
        got = records_after_restart(tmp_path, recorded=True)
    assert got == [body(i) for i in range(COUNT)]  # each record, once, as published
    (report,) = damage_reports(caplog)  # said once
    assert str(path) in report and "database disk image is malformed" in report
    assert list(path.parent.glob("orders.sow.damaged-*"))  # the evidence is kept


def test_an_unrecorded_topic_keeps_every_whole_record_and_says_how_many(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = fill_and_stop(tmp_path, recorded=False)
    damage_middle(path)
    with caplog.at_level(logging.ERROR):
        got = records_after_restart(tmp_path, recorded=False)
    published = {body(i) for i in range(COUNT)}
    assert got and set(got) <= published  # never a damaged record
    assert len(got) == len(set(got))
    (report,) = damage_reports(caplog)
    assert f"{len(got)} record(s) salvaged" in report
    assert len(got) < COUNT  # the damaged pages' records are gone, and the report says so


def test_a_truncated_file_does_not_stop_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = fill_and_stop(tmp_path, recorded=False)
    os.truncate(path, path.stat().st_size // 3)
    with caplog.at_level(logging.ERROR):
        got = records_after_restart(tmp_path, recorded=False)
    assert set(got) <= {body(i) for i in range(COUNT)}
    (report,) = damage_reports(caplog)
    assert f"{len(got)} record(s) salvaged" in report


def test_salvage_reads_a_table_from_both_ends_of_the_damage(tmp_path: Path) -> None:
    path = fill_and_stop(tmp_path, recorded=False)
    damage_middle(path)
    moved = quarantine(path, now=0.0)
    assert moved.name == "orders.sow.damaged-19700101T000000Z" and not path.exists()
    rescue = salvage(moved, table_name("orders"), "json")
    assert rescue.stopped is not None
    ids = [json.loads(r.data)["id"] for r in rescue.records]
    assert ids == sorted(ids) and ids[0] == 0 and ids[-1] == COUNT - 1  # both ends
    assert all(r.data.decode() == body(i) for r, i in zip(rescue.records, ids, strict=True))
    path.write_bytes(b"another damaged file, set aside in the same second")
    again = quarantine(path, now=0.0)
    assert again.name == "orders.sow.damaged-19700101T000000Z-2"
    assert again.read_bytes().startswith(b"another") and moved.exists()
