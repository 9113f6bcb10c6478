"""Skipping what the peer sent here (``replication/origins.py``): the runs, and an outbound
stream over a real journal that reaches the same decisions with them as without them.

No sockets: the stream examines a real journal while detached (``pump`` then finds the first
record its destination would get). The host is a small real object with the attributes the
stream reads (``StreamHost``); nothing is mocked.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub.config import DestinationConfig, ReplicationTopicConfig
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.replication.origins import MAX_RUNS, IndexRuns
from ampsclient_server_stub.replication.rules import PATH_FIELD, encode_path
from ampsclient_server_stub.replication.streams import Outbound
from ampsclient_server_stub.security.auth import EntitlementModule


def test_runs_merge_consecutive_indexes_and_skip_them() -> None:
    runs = IndexRuns()
    for index in (3, 4, 5, 9, 10, 20):
        runs.add(index)
    runs.add(7)  # not ascending: ignored
    assert len(runs) == 3
    assert [runs.skip(i) for i in (2, 3, 5, 6, 9, 10, 11, 20, 21)] == [
        2,
        6,
        6,
        6,
        11,
        11,
        11,
        21,
        21,
    ]
    assert [runs.next_start(i) for i in (0, 3, 6, 10, 20)] == [3, 9, 9, 20, None]


def test_ranges_merge_with_the_last_run_and_ignore_what_is_behind() -> None:
    runs = IndexRuns()
    runs.add_range(10, 19)
    runs.add_range(20, 29)  # consecutive: the same run
    runs.add_range(25, 34)  # overlaps: only 30..34 are new
    runs.add_range(5, 8)  # behind: ignored
    runs.add_range(40, 39)  # empty
    runs.add_range(40, 40)
    assert len(runs) == 2
    assert [runs.skip(i) for i in (9, 10, 34, 35, 40)] == [9, 35, 35, 35, 41]


def test_runs_forget_the_oldest_half_beyond_the_cap() -> None:
    runs = IndexRuns()
    for k in range(MAX_RUNS + 1):
        runs.add(2 * k)  # never consecutive: one run each
    assert len(runs) == MAX_RUNS + 1 - MAX_RUNS // 2
    assert runs.skip(0) == 0  # forgotten: read record by record again
    assert runs.skip(2 * MAX_RUNS) == 2 * MAX_RUNS + 1


class Host:
    """The replication manager's side of a stream, for one instance ``B``."""

    def __init__(self, journal: Journal, loop: asyncio.AbstractEventLoop) -> None:
        self.name = "B"
        self.group = "HA"
        self.journal = journal
        self.broker: Any = None
        self.loop = loop
        self.entitlements: EntitlementModule | None = None
        self.origins: dict[str, IndexRuns] = {}
        self.limit_changes = 0

    def limits_changed(self) -> None:
        self.limit_changes += 1

    def hold_moved(self, *, backwards: bool) -> None:
        pass

    def inbound_counters(self, peer: str, stream: str) -> dict[str, int]:
        return {}

    def not_entitled(self, link: Any, topic: str, operation: str) -> None:
        pass


def fill(journal: Journal) -> IndexRuns:
    """400 records from A (path A, B) in runs, with direct publishes to B between them;
    returns the runs of A's records."""
    runs = IndexRuns()
    from_a = {"mt": "json", PATH_FIELD: encode_path([("A", "HA"), ("B", "HA")])}
    seq = {1: 0, 2: 0}
    for block in range(8):
        for _ in range(50):
            seq[1] += 1
            rec = journal.append(
                publisher_id=1, sequence=seq[1], topic="orders", command="p",
                payload=b'{"n":1}', fields=dict(from_a),
            )  # fmt: skip
            runs.add(rec.index)
        if block % 3 == 2:
            seq[2] += 1
            journal.append(
                publisher_id=2, sequence=seq[2], topic="orders", command="p",
                payload=b'{"n":2}', fields={"mt": "json"},
            )  # fmt: skip
    journal.sync()
    return runs


@pytest.mark.parametrize("with_runs", [False, True])
def test_a_detached_stream_stops_at_the_same_record_with_or_without_runs(
    tmp_path: Path, with_runs: bool
) -> None:
    loop = asyncio.new_event_loop()
    try:
        with Journal(tmp_path / "journal", fsync="never") as journal:
            runs = fill(journal)
            host = Host(journal, loop)
            if with_runs:
                host.origins["A"] = runs
            dest = DestinationConfig(
                name="A", group="HA", topics=(ReplicationTopicConfig(".*", "json"),)
            )
            out = Outbound(host, dest, hold=1)  # a hold from a previous run: from the start
            first_direct = next(
                r.index for r in journal.read(1, max_records=1000) if r.publisher_id == 2
            )
            out.pump()
            assert out.stall_ts is not None
            assert out.scan_pos == first_direct, "stops at the first record A would get"
            assert out.counters["skipped"] == first_direct - 1
            out.close()
    finally:
        loop.close()


class RecordingLink:
    """The link side of a stream: keeps the records of every ``rrec`` it is asked to send."""

    peer_name = "B"
    peer_group = "HB"
    peer_user: str | None = None
    paused = False
    closed = False
    close_reason = ""

    def __init__(self) -> None:
        self.outbound: dict[str, Outbound] = {}
        self.records: list[Any] = []

    def send(self, fields: dict[str, Any], body: Any = None) -> None:
        if fields["c"] == "rrec":
            self.records.extend(body)

    def describe(self) -> str:
        return "recording link"


def test_a_streaming_stream_sends_exactly_what_wire_decides(tmp_path: Path) -> None:
    """The per-(mt, topic, path) shortcut of the send loop against the record-by-record
    rules (``Outbound.wire``): topics in and out, a filtered topic, paths through the peer
    and through another group, extra fields, a resent sequence."""
    loop = asyncio.new_event_loop()
    try:
        with Journal(tmp_path / "journal", fsync="never") as journal:
            paths = [
                None,
                encode_path([("C", "HC"), ("A", "HA")]),  # through another group: passthrough
                encode_path([("B", "HB"), ("A", "HA")]),  # came from the peer: never back
                encode_path([("D", "HD"), ("A", "HA")]),
            ]
            seq: dict[int, int] = {}
            for n in range(240):
                pid = 1 + n % 3
                seq[pid] = seq.get(pid, 0) + 1
                fields: dict[str, str | int] = {"mt": "json" if n % 7 else "xml"}
                if paths[n % 4] is not None:
                    fields[PATH_FIELD] = str(paths[n % 4])
                if n % 11 == 0:
                    fields["x"] = f"cid-{n}"
                topic = ("orders", "quotes", "filtered", "other")[n % 4 if n % 5 else 2]
                journal.append(
                    publisher_id=pid, sequence=seq[pid], topic=topic, command="p",
                    payload=b'{"keep":%d}' % (n % 2), fields=fields,
                )  # fmt: skip
            journal.sync()
            dest = DestinationConfig(
                name="B",
                group="HB",
                topics=(
                    ReplicationTopicConfig("orders|quotes", "json"),
                    ReplicationTopicConfig("filtered", "json", "/keep = 1"),
                ),
                passthrough=("^HC$",),
            )
            host = Host(journal, loop)
            host.name, host.group = "A", "HA"
            judge = Outbound(host, dest, hold=1)  # peer B/HB from the destination, as attached
            rows = journal.read_rows(1, max_records=1000)
            decided = [judge.wire(row) for row in rows]
            expected = [list(item) for item in decided if item is not None]
            judge.close()
            out = Outbound(host, dest, hold=1)
            link = RecordingLink()
            out.attach(link)
            out.on_have({})  # on_have pumps: everything durable is sent
            sent = [list(item) for item in link.records]
            assert sent == expected
            assert 0 < len(sent) < len(rows)
            assert out.counters["skipped"] == len(rows) - len(sent)
            out.close()
    finally:
        loop.close()
