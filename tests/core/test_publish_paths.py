"""Every publish path sends the core encoder's bytes: the plain client (the writer and, with
the C speedups, its ``PlainPublishLane``) and the HA client (its Python path and the C
``PublishLane``, over a memory and a file store), against the real server, each frame
compared with a literal golden frame (protocol.md §4.1) as the transport filter saw it
written. A topic's first publish takes the Python path, the next ones the C lane when built.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from ampsclient import _accel
from ampsclient.client import AsyncClient
from ampsclient.ha.client import AsyncHAClient
from ampsclient_server_stub.testing import wait_for_async

pytestmark = pytest.mark.integration


def tcp(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def recorder(writes: list[bytes]) -> Any:
    return lambda data, incoming: None if incoming else writes.append(data)


async def wait_written(writes: list[bytes], expected: bytes) -> None:
    await wait_for_async(
        lambda: len(b"".join(writes)) >= len(expected), 10.0, "the publishes written"
    )
    assert b"".join(writes)[: len(expected)] == expected


async def test_the_plain_client_writes_the_golden_frames(server: Any) -> None:
    client = AsyncClient("golden-plain")
    writes: list[bytes] = []
    client.transport_filter = recorder(writes)
    await client.connect_and_logon(server.uri("tcp", "json"), timeout=5000)
    try:
        await client.flush(5000)
        writes.clear()
        client.publish("orders", '{"id":1}')  # the topic's first: the Python path
        client.publish("orders", b'{"id":2}')  # cached: the C lane when built
        client.publish("orders", {"id": 3})  # an object: JSON, the message type
        client.publish("orders", '{"n":"é"}')  # not ASCII: the Python path
        client.publish("orders", b"{}", 5000, "corr1", "k1")
        client.publish('or"d\\ers', b"{}", correlation_id="c2")
        client.delta_publish("orders", b'{"id":4}', 10, correlation_id="x", sow_key="k2")
        client.delta_publish("orders", b'{"id":5}')
        await wait_written(
            writes,
            tcp(b'{"c":"p","t":"orders"}{"id":1}')
            + tcp(b'{"c":"p","t":"orders"}{"id":2}')
            + tcp(b'{"c":"p","t":"orders"}{"id":3}')
            + tcp(b'{"c":"p","t":"orders"}{"n":"\xc3\xa9"}')
            + tcp(b'{"c":"p","t":"orders","e":"5000","x":"corr1","k":"k1"}{}')
            + tcp(b'{"c":"p","t":"or\\"d\\\\ers","x":"c2"}{}')
            + tcp(b'{"c":"delta_publish","t":"orders","e":"10","x":"x","k":"k2"}{"id":4}')
            + tcp(b'{"c":"delta_publish","t":"orders"}{"id":5}'),
        )
        if _accel.PlainPublishLane is not None:  # the C lane wrote the cached topic's frames
            assert client._plain_lane.fast == 1
    finally:
        await client.close()


@pytest.mark.parametrize("store", ["memory", "file"])
async def test_the_ha_client_writes_the_golden_frames(
    server: Any, tmp_path: Path, store: str
) -> None:
    ha = AsyncHAClient(
        "golden-ha", publish_store=str(tmp_path / "pub") if store == "file" else None
    )
    writes: list[bytes] = []
    ha.client.transport_filter = recorder(writes)
    await ha.connect_and_logon(server.uri("tcp", "json"))
    try:
        await ha.client.flush(5000)
        writes.clear()
        s1 = ha.publish("orders", '{"id":1}')  # the topic's first: the Python path
        s2 = ha.publish("orders", b'{"id":2}')  # cached: the C lane when built
        s3 = ha.publish("orders", {"id": 3})
        s4 = ha.publish("orders", b"{}", 5000, "corr1", "k1")
        s5 = ha.delta_publish("orders", b'{"id":4}', 10, correlation_id="x", sow_key="k2")
        s6 = ha.delta_publish("orders", b'{"id":5}')
        assert [s2, s3, s4, s5, s6] == [s1 + 1, s1 + 2, s1 + 3, s1 + 4, s1 + 5]
        p, d = b'{"c":"p","s":%d,"a":"persisted"', b'{"c":"delta_publish","s":%d,"a":"persisted"'
        await wait_written(
            writes,
            tcp(p % s1 + b',"t":"orders"}{"id":1}')
            + tcp(p % s2 + b',"t":"orders"}{"id":2}')
            + tcp(p % s3 + b',"t":"orders"}{"id":3}')
            + tcp(p % s4 + b',"t":"orders","e":"5000","x":"corr1","k":"k1"}{}')
            + tcp(d % s5 + b',"t":"orders","e":"10","x":"x","k":"k2"}{"id":4}')
            + tcp(d % s6 + b',"t":"orders"}{"id":5}'),
        )
        lane = ha._lane
        if _accel.PublishLane is not None:  # the C lane wrote the cached topic's frames
            assert lane is not None and lane.fast == 1
        await ha.publish_flush(10000)
    finally:
        await ha.close()
