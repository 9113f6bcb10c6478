"""The async API as an asyncio user expects it (issue 31, "Honest answers"): ``await`` of a
publish works, and leaving an ``async for`` over a subscription early (``break``, an
exception, ``aclose``) unsubscribes it on the server. Real server, real sockets."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from ampsclient import AsyncClient
from ampsclient_server_stub.testing.wait import wait_for_async


def _subscriptions(server: Any) -> int:
    return int(server.statistics()["subscriptions"])


async def _logged_on(server: Any, name: str) -> AsyncClient:
    client = AsyncClient(name)
    await client.connect(server.uri("tcp", "json"))
    await client.logon(5000)
    return client


async def test_await_publish_queues_the_message(server: Any) -> None:
    """``await client.publish(...)`` (it raised TypeError: 'int' can't be used in 'await');
    the publish still works without ``await`` and still returns 0 (the official value)."""
    async with (
        await _logged_on(server, "await-sub") as sub,
        await _logged_on(server, "await-pub") as pub,
    ):
        stream = await sub.subscribe("awaited")
        assert await pub.publish("awaited", '{"n": 0}') == 0
        assert pub.publish("awaited", '{"n": 1}') == 0
        assert await pub.publish("awaited", {"n": 2}, correlation_id="c") == 0  # Python lane
        await pub.flush(5000)
        got = []
        async for message in stream.timeout(5000):
            assert message is not None, "a message did not arrive"
            got.append(message.json()["n"])
            if len(got) == 3:
                break
        assert got == [0, 1, 2]


async def test_break_out_of_async_for_unsubscribes(server: Any) -> None:
    async with (
        await _logged_on(server, "break-sub") as sub,
        await _logged_on(server, "break-pub") as pub,
    ):
        before = _subscriptions(server)
        stream = await sub.subscribe("broken")
        await wait_for_async(lambda: _subscriptions(server) == before + 1, 5.0, "the subscription")
        pub.publish("broken", '{"n": 1}')
        async for _message in stream.timeout(5000):
            break
        await wait_for_async(
            lambda: _subscriptions(server) == before, 5.0, "the unsubscribe after break"
        )
        assert stream.closed


async def test_exception_in_async_for_unsubscribes(server: Any) -> None:
    async with (
        await _logged_on(server, "raise-sub") as sub,
        await _logged_on(server, "raise-pub") as pub,
    ):
        before = _subscriptions(server)
        stream = await sub.subscribe("raised")
        pub.publish("raised", '{"n": 1}')  # the message the loop body raises on
        with pytest.raises(ValueError, match="handler bug"):
            async for _message in stream.timeout(5000):
                raise ValueError("handler bug")
        await wait_for_async(lambda: _subscriptions(server) == before, 5.0, "the unsubscribe")
        assert stream.closed


async def test_aclose_and_aclosing_unsubscribe(server: Any) -> None:
    async with await _logged_on(server, "aclose-sub") as sub:
        before = _subscriptions(server)
        stream = await sub.subscribe("closed-a")
        await wait_for_async(lambda: _subscriptions(server) == before + 1, 5.0, "subscribed")
        await stream.aclose()
        await wait_for_async(lambda: _subscriptions(server) == before, 5.0, "aclose")
        async with contextlib.aclosing(await sub.subscribe("closed-b")) as other:
            await wait_for_async(lambda: _subscriptions(server) == before + 1, 5.0, "again")
        assert other.closed
        await wait_for_async(lambda: _subscriptions(server) == before, 5.0, "aclosing")
