"""Issue #32, clock steps: queue leases are measured on a steady clock (wall time when the
broker starts, then monotonic). The wall clock steps an hour ahead while a consumer holds a
30 s lease; the queue's timers run, and the message is neither taken back nor delivered
again, as it would be on the wall clock. In process: a :class:`Broker` on a real journal,
with the clocks injected (a server started in a thread binds ``time.time`` at import)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ampsclient.protocol.header import encode_header
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.engine.broker import Broker
from ampsclient_server_stub.engine.clocks import steady_clock
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.engine.txlog import TxLog
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.queues.plug import start_queues
from ampsclient_server_stub.testing.session import RecordingSession


class Clocks:
    """A wall clock a test steps, and a monotonic clock that only moves forward."""

    def __init__(self) -> None:
        self.wall_now = 1_800_000_000.0
        self.mono_now = 100.0

    def wall(self) -> float:
        return self.wall_now

    def monotonic(self) -> float:
        return self.mono_now


def test_a_wall_clock_step_does_not_end_a_lease(tmp_path: Path) -> None:
    clocks = Clocks()
    config = dataclasses.replace(
        default_config(tcp_port=0, ws_port=0, data_dir=tmp_path),
        queues=(QueueConfig(name="work", message_type="json", lease_period=30.0),),
    )
    journal = Journal(tmp_path / "journal", fsync="never")
    broker = Broker(
        config,
        txlog=TxLog(journal),
        clock=clocks.wall,
        monotonic=clocks.monotonic,
        queues=start_queues,
    )
    try:
        engine = broker.queues
        assert engine is not None
        consumer = RecordingSession()
        conn = broker.connect(consumer)
        broker.handle(conn, encode_header({"c": "logon", "cid": "1", "client_name": "w"}))
        broker.handle(conn, encode_header({"c": "subscribe", "t": "work", "sub_id": "s"}))
        publisher = broker.connect(RecordingSession())
        broker.handle(publisher, encode_header({"c": "logon", "cid": "1", "client_name": "p"}))
        broker.handle(publisher, encode_header({"c": "p", "t": "work"}) + b'{"n":1}')
        assert consumer.bodies() == [{"n": 1}]  # leased for 30 s, not acked

        clocks.wall_now += 3600.0  # the wall clock steps an hour ahead
        clocks.mono_now += 1.0  # one second really passed
        engine.tick()
        assert consumer.bodies() == [{"n": 1}]  # not taken back and sent again
        assert engine.statistics()["work"]["expired_leases"] == 0

        clocks.mono_now += 30.0  # the lease's 30 s are really over
        engine.tick()
        assert [json.loads(b) for _, b in consumer.frames()] == [{"n": 1}, {"n": 1}]
    finally:
        broker.close()
        journal.close()


def test_the_steady_clock_reads_the_wall_clock_then_advances_monotonically() -> None:
    clocks = Clocks()
    clock = steady_clock(wall=clocks.wall, monotonic=clocks.monotonic)
    assert clock() == 1_800_000_000.0
    clocks.mono_now += 2.5
    clocks.wall_now += 3600.0  # a step
    assert clock() == 1_800_000_002.5
    clocks.wall_now -= 7200.0  # and back
    clocks.mono_now += 0.5
    assert clock() == 1_800_000_003.0
