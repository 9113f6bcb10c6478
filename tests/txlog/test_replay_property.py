"""Property: a bookmark subscription replays exactly the right slice of the log, then goes live.

Random publish sequences from several publishers (some sending HA-style sequence numbers, with
gaps and republished duplicates) are driven into a :class:`Broker` over a real journal
(``fsync="never"``, group commit inline), with the journal's receive clock pinned so that
timestamps (including equal ones) are chosen by the test. Then a random start is subscribed
(EPOCH, NOW, a bookmark, an unknown bookmark, a list, a timestamp, or a range of any of those
with any brackets), and more messages are published. The deliveries must equal, message by
message, the slice computed from the publish order the test drove: a model of the log that
never looks at the journal.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings, strategies as st

import ampsclient_server_stub.engine.journal as journal_module
from ampsclient.protocol.bookmarks import format_timestamp, publisher_id_for
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient_server_stub.engine.broker import Broker, Connection
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.txlog import TxLog
from ampsclient_server_stub.testing import ReceiveClock

T0_US = 1_700_000_000_000_000
EPOCH_DT = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Rec:
    """One record of the model log."""

    index: int
    bookmark: str
    ts: int
    topic: str
    n: int


class Session:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, payload: bytes) -> None:
        self.sent.append(payload)

    def send_many(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self.send(payload)

    def disconnect(self, reason: str) -> None:
        pass

    def start_heartbeat(self, interval: float) -> None:
        pass

    def backlog(self) -> int:
        return 0


def ts_text(us: int) -> str:
    return format_timestamp(EPOCH_DT + timedelta(microseconds=us))


class World:
    """Broker + journal + the model log the test keeps alongside."""

    def __init__(self, directory: str, clock: ReceiveClock, n_pubs: int, ha: list[bool]) -> None:
        self.journal = Journal(directory, fsync="never")
        self.broker = Broker(None, txlog=TxLog(self.journal))  # group commit inline
        self.clock = clock
        self.log: list[Rec] = []
        self.pubs: list[tuple[Connection, int, bool]] = []
        self.next_seq: list[int] = []
        self.sent_seqs: list[list[int]] = []
        for i in range(n_pubs):
            name = f"pub-{i}"
            conn = self.broker.connect(Session())
            self.broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": name}))
            self.pubs.append((conn, publisher_id_for(name), ha[i]))
            self.next_seq.append(0)
            self.sent_seqs.append([])
        self.n = 0

    def publish(self, op: tuple[int, int, int, int, int]) -> None:
        """``op``: (publisher, topic 0/1, time step µs, seq gap for HA, duplicate pick or -1)."""
        who, topic_no, step, gap, dup = op
        conn, pid, ha = self.pubs[who % len(self.pubs)]
        slot = who % len(self.pubs)
        topic = "ab"[topic_no]
        self.clock.us += step
        body = json.dumps({"n": self.n}).encode()
        if ha and dup >= 0 and self.sent_seqs[slot]:
            # an HA publisher republishes something it sent before: a duplicate, dropped
            old = self.sent_seqs[slot][dup % len(self.sent_seqs[slot])]
            self.broker.handle(
                conn,
                encode_header({"c": "p", "t": topic, "s": old, "a": "persisted"}) + body,
            )
            self.n += 1
            return
        if ha:
            seq = (self.next_seq[slot] or 1_000_000_000) + gap
            self.next_seq[slot] = seq
            self.sent_seqs[slot].append(seq)
            header = {"c": "p", "t": topic, "s": seq, "a": "persisted"}
        else:
            seq = self.next_seq[slot] + 1
            self.next_seq[slot] = seq
            header = {"c": "p", "t": topic}
        self.broker.handle(conn, encode_header(header) + body)
        index = len(self.log) + 1
        self.log.append(Rec(index, f"{pid}|{seq}|", self.clock.us, topic, self.n))
        self.n += 1


# --------------------------------------------------------------------------- start specs

# A "point" drawn by the test: ("epoch",), ("now",), ("bm", k), ("unknown", k), ("ts", k, d),
# ("list", [item, ...]); k indexes the model log (modulo its length), d is -1/0/+1 µs.


def point_text(world: World, point: tuple[Any, ...]) -> str:
    kind = point[0]
    log = world.log
    if kind == "epoch":
        return "0"
    if kind == "now":
        return "0|1|"
    if kind == "bm":
        return log[point[1] % len(log)].bookmark
    if kind == "unknown":
        pid = world.pubs[point[1] % len(world.pubs)][1]
        return f"{pid}|{9_000_000_000_000 + point[1]}|"
    if kind == "ts":
        return ts_text(log[point[1] % len(log)].ts + point[2])
    return ",".join(point_text(world, item) for item in point[1])


def model_start(world: World, point: tuple[Any, ...], inclusive: bool, ts_inclusive: bool) -> int:
    """First model index delivered (len(log) + 1 = nothing yet; -1 = unknown)."""
    log = world.log
    kind = point[0]
    if kind == "epoch":
        return 1
    if kind == "now":
        return len(log) + 1
    if kind == "bm":
        index = log[point[1] % len(log)].index
        return index if inclusive else index + 1
    if kind == "unknown":
        return -1
    if kind == "ts":
        t = log[point[1] % len(log)].ts + point[2]
        after = [r.index for r in log if (r.ts >= t if ts_inclusive else r.ts > t)]
        return after[0] if after else len(log) + 1
    starts = [model_start(world, item, inclusive, ts_inclusive) for item in point[1]]
    starts = [s for s in starts if s != -1]
    return min(starts) if starts else -1


def model_end(world: World, point: tuple[Any, ...], inclusive: bool) -> int:
    """Last model index a range delivers."""
    log = world.log
    kind = point[0]
    if kind == "epoch":
        return 0
    if kind in ("now", "unknown"):
        return len(log)
    if kind == "bm":
        index = log[point[1] % len(log)].index
        return index if inclusive else index - 1
    if kind == "ts":
        t = log[point[1] % len(log)].ts + point[2]
        before = [r.index for r in log if (r.ts <= t if inclusive else r.ts < t)]
        return before[-1] if before else 0
    return max(model_end(world, item, inclusive) for item in point[1])


ids = st.integers(0, 10_000)
single_points = st.one_of(
    st.tuples(st.just("bm"), ids),
    st.tuples(st.just("unknown"), ids),
    st.tuples(st.just("ts"), ids, st.sampled_from([-1, 0, 1])),
)
list_points = st.tuples(
    st.just("list"),
    st.lists(
        st.one_of(st.tuples(st.just("bm"), ids), st.tuples(st.just("ts"), ids, st.just(0))),
        min_size=2,
        max_size=3,
    ),
)
starts = st.one_of(
    st.tuples(st.just("epoch")), st.tuples(st.just("now")), single_points, list_points
)
ops = st.tuples(
    st.integers(0, 3),  # publisher
    st.integers(0, 1),  # topic a/b
    st.sampled_from([0, 1, 1, 7, 1_000_000]),  # clock step (µs): equal times, close, 1 s
    st.sampled_from([1, 1, 1, 2, 5]),  # HA sequence gap
    st.one_of(st.just(-1), st.just(-1), st.just(-1), st.integers(0, 50)),  # republish
)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ha=st.lists(st.booleans(), min_size=4, max_size=4),
    n_pubs=st.integers(1, 4),
    before=st.lists(ops, min_size=1, max_size=60),
    after=st.lists(ops, max_size=10),
    start=starts,
    ranged=st.booleans(),
    end=st.one_of(starts, st.none()),
    brackets=st.tuples(st.booleans(), st.booleans()),
    topic=st.sampled_from(["a", "b", "^(a|b)$"]),
    threshold=st.one_of(st.none(), st.integers(0, 60)),
    not_found=st.sampled_from([None, "now", "epoch"]),
)
def test_a_replay_is_exactly_the_right_slice_of_the_log(
    ha: list[bool],
    n_pubs: int,
    before: list[tuple[int, int, int, int, int]],
    after: list[tuple[int, int, int, int, int]],
    start: tuple[Any, ...],
    ranged: bool,
    end: tuple[Any, ...] | None,
    brackets: tuple[bool, bool],
    topic: str,
    threshold: int | None,
    not_found: str | None,
) -> None:
    clock = ReceiveClock(T0_US)
    with (
        tempfile.TemporaryDirectory() as directory,
        mock.patch.object(journal_module, "_time_ns", clock),
    ):
        world = World(directory, clock, n_pubs, ha)
        try:
            for op in before:
                world.publish(op)
            if not world.log:
                return  # only duplicates: nothing to address by bookmark or time
            start_incl, end_incl = brackets
            if ranged:
                end_text = "" if end is None else point_text(world, end)
                text = (
                    ("[" if start_incl else "(")
                    + point_text(world, start)
                    + ":"
                    + end_text
                    + ("]" if end_incl else ")")
                )
            else:
                text = point_text(world, start)
            # the model
            log_len = len(world.log)
            if ranged:
                first = model_start(world, start, start_incl, start_incl)
            else:
                first = model_start(world, start, False, True)
            if first == -1:
                first = 1 if not_found == "epoch" else log_len + 1
            last: int | None = None
            if ranged and end is not None:
                last = model_end(world, end, end_incl)

            def wanted(rec: Rec) -> bool:
                if topic in ("a", "b") and rec.topic != topic:
                    return False
                return threshold is None or rec.n >= threshold

            # subscribe
            session = Session()
            conn = world.broker.connect(session)
            world.broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": "s"}))
            session.sent.clear()
            header: dict[str, Any] = {
                "c": "subscribe",
                "cid": "c1",
                "sub_id": "s1",
                "t": topic,
                "bm": text,
                "a": "processed,completed",
            }
            if threshold is not None:
                header["filter"] = f"/n >= {threshold}"
            if not_found is not None:
                header["o"] = f"bookmark_not_found={not_found}"
            world.broker.handle(conn, encode_header(header))
            for op in after:
                world.publish(op)
            # what arrived, in order: "p" deliveries (bookmarks) and acks
            got: list[str] = []
            for payload in session.sent:
                hdr, body_at = decode_header(payload)
                if hdr["c"] == "p":
                    assert hdr["sids"] == "s1"
                    got.append(str(hdr["bm"]))
                    assert json.loads(payload[body_at:])["n"] == next(
                        r.n for r in world.log if r.bookmark == hdr["bm"]
                    )
                elif hdr["c"] == "ack":
                    assert hdr["status"] == "success", (text, hdr)
                    got.append("<" + str(hdr["a"]) + ">")
            replayed = [r.bookmark for r in world.log[first - 1 : log_len] if wanted(r)]
            if last is not None:
                replayed = [
                    r.bookmark
                    for r in world.log[first - 1 : max(first - 1, min(last, log_len))]
                    if wanted(r)
                ]
            if ranged and end is not None:
                expected = ["<processed>", *replayed, "<completed>"]
            else:
                live = [r.bookmark for r in world.log[log_len:] if wanted(r)]
                expected = ["<processed>", *replayed, "<completed>", *live]
            assert got == expected, (text, header.get("o"), topic, threshold)
        finally:
            world.journal.close()
