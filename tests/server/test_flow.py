"""Output flow control (``net/flow.py``) through its public output-queue interface, with no
sockets: a session double that implements :class:`OutputQueue` and real offline files.

The end-to-end behaviour over real sockets is in tests/security/test_limits.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient_server_stub.net.flow import FlowControl, OutputQueue, SlowClient
from ampsclient_server_stub.security.policy import ClientLimits, PoolLimits


class Queue:
    """An output queue whose transport takes bytes only when the test says so."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str = "sub", ident: int = 7) -> None:
        self.loop = loop
        self.peer = "127.0.0.1:1"
        self.transport_name = "tcp"
        self.pending: list[bytes] = []
        self.buffered = 0
        self.held = 0
        self.written: list[bytes] = []
        self.aborted: str | None = None
        self._identity = (name, ident)

    @property
    def closing(self) -> bool:
        return self.aborted is not None

    def client_identity(self) -> tuple[str, int]:
        return self._identity

    def pending_bytes(self) -> int:
        return sum(map(len, self.pending))

    def buffered_bytes(self) -> int:
        return self.buffered

    def held_bytes(self) -> int:
        return self.held

    def take_pending(self) -> list[bytes]:
        out, self.pending = self.pending, []
        return out

    def write_now(self, payloads: list[bytes]) -> None:
        self.written.extend(payloads)
        self.buffered += sum(map(len, payloads))

    def abort(self, reason: str) -> None:
        self.aborted = reason


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def state(slow: SlowClient) -> tuple[bool, int]:
    """``(offline, bytes waiting on disk)`` (a function: mypy would narrow the attribute)."""
    return slow.offline, slow.pending_disk


def limits(tmp_path: Path, *, memory: int = 1 << 20, disk: int = 1 << 20) -> PoolLimits:
    return PoolLimits("test", memory_limit=memory, disk_limit=disk, disk_path=tmp_path)


def test_the_session_double_is_an_output_queue(loop: asyncio.AbstractEventLoop) -> None:
    queue: OutputQueue = Queue(loop)  # mypy checks the protocol; this checks the object
    assert queue.pending_bytes() == 0 and not queue.closing


def test_offlining_takes_the_queued_output_and_drains_it_back_in_order(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    flow = FlowControl()
    queue = Queue(loop)
    slow = flow.attach(queue, limits(tmp_path), ClientLimits())
    queue.pending = [b"p1", b"p2"]
    assert slow.memory() == 4
    assert slow.go_offline("test")
    assert queue.pending == [] and state(slow) == (True, 2 * (12 + 2))
    slow.spill(b"p3")  # what the session sends while offline goes to the file, in order
    path = slow.path
    assert path is not None and path.exists()
    assert path.name.startswith("sub-") and path.name.endswith("-7-" + path.name.split("-")[-1])
    assert slow.pending_disk == 3 * (12 + 2)  # record header (length, enqueue time) + payload
    slow.drain()
    assert queue.written == [b"p1", b"p2", b"p3"]
    assert state(slow) == (False, 0) and not path.exists()
    assert flow.statistics() == {
        "offline_bytes": 0,
        "slow_offlined": 1,
        "slow_disconnected": 0,
        "slow_spilled": 3,
    }
    slow.close()
    flow.close()


def test_drain_waits_while_the_transport_is_full(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    flow = FlowControl()
    queue = Queue(loop)
    slow = flow.attach(queue, limits(tmp_path), ClientLimits())
    assert slow.go_offline("test")
    slow.spill(b"x" * 100)
    queue.buffered = 2 * 1024 * 1024  # more than DRAIN_HIGH_WATER already in the transport
    slow.drain()
    assert queue.written == [] and state(slow) == (True, 12 + 100)
    queue.buffered = 0
    slow.drain()
    assert queue.written == [b"x" * 100] and state(slow) == (False, 0)
    flow.close()


def test_a_client_over_its_disk_share_is_aborted_and_its_file_removed(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    flow = FlowControl()
    queue = Queue(loop)
    slow = flow.attach(queue, limits(tmp_path, disk=1000), ClientLimits(max_capacity=0.5))
    assert slow.disk_cap == 500
    assert slow.go_offline("test")
    path = slow.path
    assert path is not None
    slow.spill(b"y" * 400)
    assert queue.closing is False
    slow.spill(b"y" * 400)
    assert str(queue.aborted).startswith("slow consumer: offline file over its capacity")
    assert slow.closed and not path.exists()
    assert flow.statistics()["slow_disconnected"] == 1
    assert flow.statistics()["offline_bytes"] == 0
    flow.close()


def test_pools_are_shared_by_configuration_object(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    flow = FlowControl()
    shared, own = limits(tmp_path), limits(tmp_path)  # equal values, two pools
    a = flow.attach(Queue(loop, "a", 1), shared, ClientLimits())
    b = flow.attach(Queue(loop, "b", 2), shared, ClientLimits())
    c = flow.attach(Queue(loop, "c", 3), own, ClientLimits())
    assert a.pool is b.pool and a.pool is not c.pool
    assert len(flow.pools) == 2
    assert a.pool.clients == {a, b}
    flow.close()
    assert all(s.closed for s in (a, b, c))
    assert isinstance(a, SlowClient)
