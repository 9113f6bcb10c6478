"""Issue #32, clock steps under timestamp bookmarks and historical SOW queries (a real server
on real sockets; the only thing injected is the journal's receive clock, the wall clock the
server stamps records with: it follows the machine's clock plus an offset the test steps an
hour back, then two hours forward, as NTP or an operator's ``date`` would).

The journal's timestamps never go back: a record received while the wall clock is behind the
last stamp gets that stamp, so the log stays ordered by time. Without that (a naive wall
clock) the record published after the step back would carry a time an hour before the one
published ahead of it: a replay from a timestamp between the two would start at it and send
the older one again out of order, or skip it (the start is a binary search over the times,
which needs them sorted), and a historical query for a time between them would see the update
that had not happened yet. Here, message by message: replays from every timestamp start at
the first record stamped at or after it, in publish order, none twice, none skipped;
historical queries give the state after exactly the records stamped at or before their time;
bookmarks (publisher|sequence) resume after themselves whatever the clock did."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _history_support import history_config, query, send_and_flush, stamp

import ampsclient_server_stub.engine.journal as journal_module
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

HOUR_NS = 3600 * 10**9


class SteppedClock:
    """The machine's clock plus :attr:`offset_ns` (the journal's ``_time_ns``)."""

    def __init__(self) -> None:
        self.offset_ns = 0

    def __call__(self) -> int:
        return time.time_ns() + self.offset_ns


@pytest.fixture
def stepped(monkeypatch: pytest.MonkeyPatch) -> SteppedClock:
    clock = SteppedClock()
    monkeypatch.setattr(journal_module, "_time_ns", clock)
    return clock


@pytest.fixture
def server(tmp_path: Path, stepped: SteppedClock) -> Iterator[ServerThread]:
    history = "<History><Window>1d</Window></History>"
    with ServerThread(parse_config(history_config(history), base_dir=tmp_path)) as thread:
        yield thread


def replay_from(port: int, bookmark: str, sub: str) -> list[int]:
    """The ``seq`` of the records a bookmark subscription to ``q`` from ``bookmark`` replays
    (up to its ``completed`` ack: the end of the replay)."""
    with RawClient(port) as raw:
        raw.logon(f"replay-{sub}")
        raw.send({"c": "subscribe", "t": "q", "sub_id": sub, "bm": bookmark, "a": "completed"})
        seqs: list[int] = []
        while True:
            head, body = raw.recv(10)
            if head.get("c") == "ack" and head.get("a") == "completed":
                return seqs
            if head.get("c") == "p":
                seqs.append(json.loads(body)["seq"])


def test_clock_steps_keep_timestamp_bookmarks_and_history_right(
    server: ServerThread, stepped: SteppedClock
) -> None:
    journal = server.server.journal
    assert journal is not None
    published: list[tuple[int, dict[str, Any]]] = []  # (seq, doc) in publish order
    with RawClient(server.tcp_port) as raw:
        raw.logon("stepper")
        seq = 0

        def publish(doc: dict[str, Any]) -> None:
            nonlocal seq
            seq += 1
            doc = {**doc, "seq": seq}
            published.append((seq, doc))
            send_and_flush(raw, [({"c": "p", "t": "q", "s": seq}, json.dumps(doc).encode())])

        publish({"id": 1, "v": "a"})  # on time
        publish({"id": 2, "v": "a"})
        stepped.offset_ns = -HOUR_NS  # the wall clock steps an hour back
        publish({"id": 1, "v": "b"})
        publish({"id": 3, "v": "b"})
        stepped.offset_ns = HOUR_NS  # ... then two hours forward
        publish({"id": 2, "v": "c"})
        publish({"id": 1, "v": "c"})
        stepped.offset_ns = 0  # ... and back to the machine's time
        publish({"id": 3, "v": "d"})

    records = journal.read(1, max_records=100)
    times = [r.timestamp for r in records]
    assert times == sorted(times), "the journal's times went back"
    assert [json.loads(r.payload)["seq"] for r in records] == [s for s, _ in published]

    # every timestamp between and around the records' stamps, as a replay's start and as the
    # time of a historical query: the expected answer follows from the stamps alone
    points = sorted({t + d for t in times for d in (-1, 0, 1)})
    for n, point in enumerate(points):
        expected = [json.loads(r.payload)["seq"] for r in records if r.timestamp >= point]
        if point <= time.time_ns() // 1000:  # (a start in the future, as the last records'
            # stamps are for an hour, waits for the clock to get there)
            assert replay_from(server.tcp_port, stamp(point / 1e6), f"t{n}") == expected, point
        state: dict[int, str] = {}
        for r in records:
            if r.timestamp <= point:
                doc = json.loads(r.payload)
                state[doc["id"]] = doc["v"]
        with RawClient(server.tcp_port) as raw:
            raw.logon(f"hist-{n}")
            assert query(raw, "q", stamp(point / 1e6)) == state, point

    # bookmarks resume right after themselves, whatever the clock did
    for k, record in enumerate(records):
        after = [json.loads(r.payload)["seq"] for r in records[k + 1 :]]
        assert replay_from(server.tcp_port, record.bookmark, f"b{k}") == after
