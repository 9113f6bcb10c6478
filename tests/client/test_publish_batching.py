"""``set_publish_batching(batchSize, batchTimeoutMillis)`` against the real server: publishes
are held until the byte bound or the time bound is reached, a command ends the batch, and
nothing held is lost. The bytes written are seen through the transport filter."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ampsclient import Client
from ampsclient.client import AsyncClient
from ampsclient.exceptions import UsageError
from ampsclient_server_stub.testing import wait_for, wait_for_async

pytestmark = pytest.mark.integration

HEADER = b'{"c":"p","t":"batch"}'
BODY = b"x" * 90
FRAME = 4 + len(HEADER) + len(BODY)


def counting_subscriber(uri: str, name: str) -> tuple[Client, list[bytes]]:
    got: list[bytes] = []
    sub = Client(name)
    sub.connect(uri)
    sub.logon(5000)
    sub.subscribe(lambda m: got.append(m.get_data_raw()), "batch", timeout=5000)
    return sub, got


async def test_the_byte_bound_and_a_command_ending_the_batch(server: Any) -> None:
    uri = server.uri("tcp", "json")
    sub, got = counting_subscriber(uri, "batch-sub-1")
    try:
        client = AsyncClient("batch-pub-1")
        writes: list[bytes] = []
        client.transport_filter = lambda data, incoming: None if incoming else writes.append(data)
        await client.connect_and_logon(uri, timeout=5000)
        client.set_publish_batching(2000, 60_000)
        writes.clear()
        for _ in range(20):  # 2300 bytes: over the byte bound
            client.publish("batch", BODY)
        await wait_for_async(lambda: sum(map(len, writes)) == 20 * FRAME, what="the first batch")
        assert len(writes) == 1
        for _ in range(10):  # 1150 bytes: under it, and 60 s from the time bound
            client.publish("batch", BODY)
        # the marker: another client's publish reaches the subscriber after the 20, while
        # the 10 stay held (this loop ran the writer all the while)
        other = AsyncClient("batch-marker")
        await other.connect_and_logon(uri, timeout=5000)
        other.publish("batch", b"marker")
        await wait_for_async(lambda: b"marker" in got, what="the marker at the subscriber")
        assert len(got) == 21 and len(writes) == 1
        await client.flush(5000)  # a command: it goes out at once and takes the 10 along
        assert len(writes) == 2 and writes[1].count(HEADER) == 10
        assert b'"c":"flush"' in writes[1]
        await wait_for_async(lambda: len(got) == 31, what="the 10 held publishes at the subscriber")
        await other.close()
        await client.close()
    finally:
        sub.close()


async def test_the_time_bound(server: Any) -> None:
    uri = server.uri("tcp", "json")
    client = AsyncClient("batch-pub-2")
    writes: list[tuple[float, bytes]] = []
    client.transport_filter = lambda data, incoming: (
        None if incoming else writes.append((time.monotonic(), data))
    )
    await client.connect_and_logon(uri, timeout=5000)
    client.set_publish_batching(1_000_000, 300)
    writes.clear()
    start = time.monotonic()
    for _ in range(10):
        client.publish("batch", BODY)
    await wait_for_async(lambda: bool(writes), what="the batch")
    assert writes[0][0] - start >= 0.3  # held for the timeout (a plain write takes < 1 ms)
    assert len(writes) == 1 and writes[0][1].count(HEADER) == 10
    with pytest.raises(UsageError, match="negative"):
        client.set_publish_batching(-1, 0)
    client.set_publish_batching(0, 0)  # back to writing at once
    client.publish("batch", BODY)
    await wait_for_async(lambda: len(writes) == 2, what="an unbatched write")
    assert writes[1][1].count(HEADER) == 1
    await client.close()


def test_the_official_spelling_on_the_sync_ha_client(server: Any) -> None:
    """``HAClient.set_publish_batching`` reaches the connection the HA client holds; closing
    writes what is held (the persisted acks come back)."""
    from ampsclient import HAClient

    uri = server.uri("tcp", "json")
    sub, got = counting_subscriber(uri, "batch-sub-3")
    try:
        ha = HAClient("batch-ha")
        ha.set_publish_batching(1_000_000, 0)  # no time bound: only a command ends it
        ha.get_server_chooser().add(uri)
        ha.connect_and_logon()
        ha.publish("batch", BODY)
        ha.publish("batch", BODY)
        # a flush is a command: it takes the held publishes with it
        ha.flush(5000)
        wait_for(lambda: len(got) == 2, what="the held publishes, after the flush")
        ha.publish_flush(5000)
        assert ha.get_unpersisted_count() == 0
        ha.close()
    finally:
        sub.close()
