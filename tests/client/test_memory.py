"""Client core and server core paired in memory: the real AsyncClient talks to the real Broker
over the memory:// transport, with no sockets (shared/style.md rule 6)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from ampsclient import AsyncClient, Command, Message
from ampsclient.exceptions import BadFilterError, DisconnectedError
from ampsclient.transport.memory import MemoryConnection, serve_memory
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.engine.broker import Broker

_names = itertools.count()


class _Session:
    def __init__(self, peer: MemoryConnection) -> None:
        self.peer = peer

    def send(self, payload: bytes) -> None:
        self.peer.send(payload)

    def send_many(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self.send(payload)

    def backlog(self) -> int:
        return 0

    def disconnect(self, reason: str) -> None:
        self.peer.close()

    def start_heartbeat(self, interval: float) -> None:
        return None


@pytest.fixture
async def paired() -> AsyncIterator[tuple[str, Broker]]:
    loop = asyncio.get_running_loop()
    broker = Broker(default_config(tcp_port=0, ws_port=0), call_later=loop.call_later)
    name = f"broker{next(_names)}"

    def accept(peer: MemoryConnection) -> None:
        conn = broker.connect(_Session(peer), transport="memory")
        peer.on_payload = lambda payload: broker.handle(conn, payload)
        peer.on_close = lambda: broker.disconnect(conn)

    stop = serve_memory(name, accept)
    try:
        yield f"memory://{name}/amps/json", broker
    finally:
        stop()
        broker.close()


@pytest.fixture
def broker_uri(paired: tuple[str, Broker]) -> str:
    return paired[0]


async def test_pair_publish_subscribe_sow(broker_uri: str) -> None:
    async with AsyncClient("pair-a") as a, AsyncClient("pair-b") as b:
        await a.connect(broker_uri)
        await a.logon(1000)
        await b.connect(broker_uri)
        await b.logon(1000)
        got: list[Message] = []
        await a.subscribe(got.append, "t", "/n > 1")
        for n in range(4):
            b.publish("t", {"n": n})
        await b.flush(1000)
        await a.flush(1000)
        assert [m.json()["n"] for m in got] == [2, 3]
        with pytest.raises(BadFilterError):
            await a.subscribe(got.append, "t", "/n >")
        b.publish("/ADMIN/bookmark_store", {"clientName": "x", "subId": "1", "bookmark": "0"})
        await b.flush(1000)
        stream = await a.execute(Command("sow").set_topic("/ADMIN/bookmark_store"))
        kinds = [m.get_command() async for m in stream]
        assert kinds == ["group_begin", "sow", "group_end"]


async def test_pair_server_kick_ends_streams(paired: tuple[str, Broker]) -> None:
    broker_uri, broker = paired
    async with AsyncClient("same") as first, AsyncClient("same") as second:
        await first.connect(broker_uri)
        await first.logon(1000)
        stream = await first.subscribe("x")
        await second.connect(broker_uri)
        await second.logon(1000)  # no transaction log: both stay connected (AMPS)
        assert first.connected and second.connected
        oldest = min((c for c in broker.clients if c.client_name == "same"), key=lambda c: c.id)
        broker.kick(oldest, "test: kicked")  # what a transaction log's name rule would do
        with pytest.raises(DisconnectedError):
            async for _ in stream:
                pass
        assert not first.connected
