"""An HA client's stream follows the async rules of the plain client's (issue 31): leaving
an ``async for`` early unsubscribes on the server, and the subscription is not re-placed."""

from __future__ import annotations

from typing import Any

from ampsclient.ha.client import AsyncHAClient
from ampsclient_server_stub.testing.wait import wait_for_async


def _subscriptions(server: Any) -> int:
    return int(server.statistics()["subscriptions"])


async def test_break_out_of_an_ha_stream_unsubscribes(server: Any) -> None:
    async with AsyncHAClient("ha-async-break") as ha:
        await ha.connect_and_logon(server.uri("tcp", "json"))
        before = _subscriptions(server)
        stream = await ha.subscribe("ha-broken")
        await wait_for_async(lambda: _subscriptions(server) == before + 1, 5.0, "subscribed")
        ha.publish("ha-broken", '{"n": 1}')
        async for message in stream.timeout(5000):
            assert message is not None, "the message did not arrive"
            break
        await wait_for_async(lambda: _subscriptions(server) == before, 5.0, "the unsubscribe")
        assert stream.closed
        assert not list(ha._subscriptions)  # not re-placed after a failover
