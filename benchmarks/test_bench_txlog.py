"""pytest-benchmark: the transaction log's in-process hot paths (no sockets).

* the sequenced publish path (our HAClient's ``{"c":"p","s":N,"a":"persisted","t":"T"}BODY``)
  through :meth:`Broker.handle` into a journal (``fsync="never"``, commit deferred);
* a bookmark replay from EPOCH through :meth:`Broker._pump` to a session that only counts;
* building one replay frame;
* the seek: a bookmark subscription from the middle of a 100k or 1M record log, up to its
  first delivered frame (bookmark and timestamp forms).

Run ``.venv/bin/python -m pytest benchmarks/test_bench_txlog.py --benchmark-only -s`` (add
``-k "not 1M"`` to skip the million-record log, which takes a few seconds to build). The
end-to-end figures (sockets, fsync, a server process) come from ``benchmarks/txlog_bench.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient.protocol.bookmarks import publisher_id_for, timestamp_bookmark
from ampsclient.protocol.header import encode_header
from ampsclient_server_stub.engine.broker import Broker, BrokerHooks, Connection
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.txlog import REPLAY_BACKLOG, TxLog

BODY = b'{"id":12345,"sym":"ABCD","px":101.25,"qty":300,"side":"B"}'
PID = publisher_id_for("bench-publisher")
T0 = 1_700_000_000_000_000


def _report(benchmark: Any, **figures: float) -> None:
    benchmark.extra_info.update({k: round(v, 3) for k, v in figures.items()})
    print(" ".join(f"{k}={v:,.3f}" for k, v in figures.items()))


def _mean(benchmark: Any) -> float | None:
    stats = getattr(benchmark, "stats", None)
    return None if stats is None else float(stats.stats.mean)


class CountingSession:
    """A session that counts what it is given; optionally 'full' after the first frame."""

    def __init__(self, stop_after_first: bool = False) -> None:
        self.frames = 0
        self.first: bytes | None = None
        self.stop_after_first = stop_after_first

    def send(self, payload: bytes) -> None:
        if payload.startswith(b'{"c":"p"'):
            self.frames += 1
            if self.first is None:
                self.first = payload

    def send_many(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self.send(payload)

    def disconnect(self, reason: str) -> None:
        pass

    def start_heartbeat(self, interval: float) -> None:
        pass

    def backlog(self) -> int:
        return REPLAY_BACKLOG + 1 if self.stop_after_first and self.first is not None else 0


def _logon(broker: Broker, name: str, session: Any) -> Connection:
    conn = broker.connect(session)
    broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": name}))
    return conn


def _build(directory: Path, records: int) -> Journal:
    journal = Journal(directory, fsync="never")
    append = journal.append
    fields = {"mt": "json"}
    for seq in range(1, records + 1):
        append(
            publisher_id=PID,
            sequence=seq,
            topic="orders",
            command="p",
            payload=BODY,
            fields=fields,
            timestamp=T0 + seq,
        )
    journal.sync()
    return journal


# --------------------------------------------------------------------------- publish


def test_sequenced_publish(benchmark: Any, tmp_path: Path) -> None:
    """Broker.handle of HAClient-shaped publishes, 50k per round (journal append included)."""
    per_round = 50_000
    rounds = itertools.count()
    seq = itertools.count(1_795_000_000_000_000_001)

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        journal = Journal(tmp_path / f"j{next(rounds)}", fsync="never")
        broker = Broker(None, txlog=TxLog(journal), hooks=BrokerHooks(request_sync=lambda: None))
        conn = _logon(broker, "bench-ha", CountingSession())
        payloads = [
            b'{"c":"p","s":%d,"a":"persisted","t":"orders"}' % next(seq) + BODY
            for _ in range(per_round)
        ]
        return (broker, conn, payloads, journal), {}

    def run(broker: Broker, conn: Connection, payloads: list[bytes], journal: Journal) -> None:
        handle = broker.handle
        for payload in payloads:
            handle(conn, payload)
        journal.close()

    benchmark.pedantic(run, setup=setup, rounds=5, iterations=1, warmup_rounds=1)
    mean = _mean(benchmark)
    if mean is not None:
        _report(benchmark, us_per_msg=mean / per_round * 1e6, msgs_per_s=per_round / mean)


# --------------------------------------------------------------------------- replay


@pytest.fixture(scope="module")
def log_200k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journal]:
    journal = _build(tmp_path_factory.mktemp("log200k"), 200_000)
    yield journal
    journal.close()


def test_replay_from_epoch(benchmark: Any, log_200k: Journal) -> None:
    """A whole 200k-record replay to one subscriber (decode, match, frame, send)."""
    broker = Broker(None, txlog=TxLog(log_200k), hooks=BrokerHooks(request_sync=lambda: None))
    names = itertools.count()
    sub = encode_header({"c": "subscribe", "cid": "s", "t": "orders", "bm": "0", "sub_id": "s"})

    def run() -> int:
        session = CountingSession()
        conn = _logon(broker, f"bench-sub-{next(names)}", session)
        broker.handle(conn, sub)
        replay = conn.subs["s"].replay
        assert replay is not None
        while replay.position <= log_200k.last_index:
            broker.pump(replay)
        broker.disconnect(conn)
        return session.frames

    frames = benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    assert frames == 200_000
    mean = _mean(benchmark)
    if mean is not None:
        _report(benchmark, msgs_per_s=200_000 / mean, us_per_msg=mean / 200_000 * 1e6)


def test_replay_frame(benchmark: Any, log_200k: Journal) -> None:
    """One delivery frame (the prefix is cached per topic and publisher)."""
    broker = Broker(None, txlog=TxLog(log_200k), hooks=BrokerHooks(request_sync=lambda: None))
    conn = _logon(broker, "bench-frame", CountingSession())
    broker.handle(conn, encode_header({"c": "subscribe", "cid": "s", "t": "orders", "bm": "0|1|"}))
    replay = conn.subs["s"].replay
    assert replay is not None
    row = log_200k.read_rows(1, max_records=1)[0]
    _, pid, seq, ts, _, topic, payload, fields, _ = row
    frame = benchmark(replay.row_frame, pid, seq, ts, topic, payload, fields)
    assert frame.endswith(BODY)


# --------------------------------------------------------------------------- seek

SIZES = [pytest.param(100_000, id="100k"), pytest.param(1_000_000, id="1M")]


@pytest.fixture(scope="module", params=SIZES)
def sized_log(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journal]:
    journal = _build(tmp_path_factory.mktemp(f"log{request.param}"), request.param)
    yield journal
    journal.close()


@pytest.mark.parametrize("form", ["bookmark", "timestamp"])
def test_seek_to_first_message(benchmark: Any, sized_log: Journal, form: str) -> None:
    """Subscribe from the middle of the log; stop at the first delivered frame."""
    broker = Broker(None, txlog=TxLog(sized_log), hooks=BrokerHooks(request_sync=lambda: None))
    middle = sized_log.last_index // 2
    start = f"{PID}|{middle}|" if form == "bookmark" else timestamp_bookmark((T0 + middle) / 1e6)
    names = itertools.count()

    def run() -> bytes | None:
        session = CountingSession(stop_after_first=True)
        conn = _logon(broker, f"seek-{next(names)}", session)
        broker.handle(
            conn, encode_header({"c": "subscribe", "cid": "s", "t": "orders", "bm": start})
        )
        broker.disconnect(conn)
        return session.first

    first = benchmark(run)
    assert (first is not None and b"|%d|" % (middle + 1) in first) or form == "timestamp"
    mean = _mean(benchmark)
    if mean is not None:
        _report(benchmark, records=sized_log.last_index, us_to_first=mean * 1e6)
