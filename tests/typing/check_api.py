"""Static checks of the public API's types: ``mypy --strict`` must accept every line.

``tests/typing/test_mypy_strict.py`` runs mypy on this file (and on ``examples/`` and the
docs' code blocks). The functions are never called: each ``assert_type`` states the type a
user's type checker infers for a call of the public API, so a signature that loses its
precision (an ``Any``, a union where an overload should decide) fails the test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from typing import Literal, assert_type

import ampsclient
import ampsclient as AMPS
from ampsclient import AsyncClient, Client, Command, Message, MessageStream
from ampsclient.ha import (
    DefaultServerChooser,
    ExponentialDelayStrategy,
    ReconnectDelayStrategy,
    ServerChooser,
)
from ampsclient.ha.client import AsyncHAClient
from ampsclient.stores.bookmark import BookmarkStore, MemoryBookmarkStore
from ampsclient.stores.publish import MemoryPublishStore, PublishStore
from ampsclient.stream import TimeoutMessageStream
from ampsclient.sync import HAClient
from ampsclient.writer import Published


def on_message(message: Message) -> None:
    """A handler."""


def sync_client(client: Client) -> None:
    # a handler given: the command id; none: a stream (the official client's two forms)
    assert_type(client.subscribe(on_message, "orders"), str)
    assert_type(client.subscribe(on_message, "orders", "/qty > 1", None, 5000, "s1"), str)
    assert_type(client.subscribe("orders"), MessageStream)
    assert_type(client.subscribe("orders", "/qty > 1", "oof", 5000, "s1"), MessageStream)
    assert_type(client.subscribe(topic="orders", on_message=on_message), str)
    assert_type(client.subscribe(topic="orders", sub_id="s", bookmark="0"), MessageStream)
    assert_type(client.delta_subscribe(on_message, "orders"), str)
    assert_type(client.delta_subscribe("orders", options=["oof", "send_keys"]), MessageStream)
    assert_type(client.bookmark_subscribe(on_message, "orders", "0", sub_id="b"), str)
    assert_type(client.bookmark_subscribe("orders", Client.Bookmarks.EPOCH), MessageStream)
    assert_type(client.sow(on_message, "orders", "/id = 1", 10, 5000), str)
    assert_type(client.sow("orders", top_n=5, order_by="/id"), MessageStream)
    assert_type(client.sow_and_subscribe(on_message, "orders", oof_enabled=True), str)
    assert_type(client.sow_and_subscribe("orders", "/x > 0", 10, True, 5000), MessageStream)
    assert_type(client.sow_and_delta_subscribe(on_message, "orders", send_empties=False), str)
    assert_type(client.sow_and_delta_subscribe("orders"), MessageStream)
    # sow_delete*: the stats ack without a handler
    assert_type(client.sow_delete("orders", "/id = 1"), Message)
    assert_type(client.sow_delete(on_message, "orders", "/id = 1"), str)
    assert_type(client.sow_delete_by_keys("orders", ["k1", "k2"]), Message)
    assert_type(client.sow_delete_by_keys(on_message, "orders", "k1,k2", 5000), str)
    assert_type(client.sow_delete_by_data("orders", {"id": 1}), Message)
    assert_type(client.sow_delete_by_data(on_message, "orders", b'{"id":1}'), str)
    stats = client.sow_delete("orders")
    assert_type(stats.get_records_deleted(), int | None)
    # commands
    assert_type(client.execute(Command("sow").set_topic("orders")), MessageStream)
    assert_type(client.execute_async(Command("subscribe").set_topic("o"), on_message), str)
    assert_type(client.connect_and_logon("tcp://127.0.0.1:9007/amps/json"), str)
    assert_type(client.flush(), None)
    assert_type(client.publish("orders", '{"id": 1}'), int)
    assert_type(client.unsubscribe("s1"), None)
    # streams: messages; with a timeout, None when nothing came in time
    stream = client.subscribe("orders")
    for message in stream:
        assert_type(message, Message)
    timed = stream.timeout(1000)
    assert_type(timed, TimeoutMessageStream)
    for maybe in timed:
        assert_type(maybe, Message | None)
    assert_type(iter(stream), MessageStream)
    with Client("c") as entered:
        assert_type(entered, Client)


async def async_client(client: AsyncClient) -> None:
    assert_type(await client.subscribe(on_message, "orders"), str)
    stream = await client.subscribe("orders", "/qty > 1")
    assert_type(stream, MessageStream)
    async for message in stream:
        assert_type(message, Message)
    assert_type(await client.sow("orders"), MessageStream)
    assert_type(await client.sow_delete("orders", "/id = 1"), Message)
    assert_type(await client.sow_and_subscribe(on_message, "orders", timeout=5000), str)
    assert_type(client.publish("orders", '{"id": 1}'), Published)  # an int ...
    assert_type(await client.publish("orders", '{"id": 1}'), int)  # ... await accepts
    async with AsyncClient("a") as entered:
        assert_type(entered, AsyncClient)
    async with AsyncHAClient("ha") as ha:
        assert_type(ha, AsyncHAClient)
        assert_type(ha.publish("orders", b"{}"), int)
        assert_type(ha.publish_future("orders", "{}", correlation_id="c"), asyncio.Future[int])
        assert_type(await ha.publish_and_wait("orders", "{}", timeout=1000), int)
        assert_type(await ha.bookmark_subscribe("orders", "0", sub_id="b"), MessageStream)


def ha_client(client: HAClient) -> None:
    assert_type(client.async_client, AsyncHAClient)
    assert_type(client.get_server_chooser(), ServerChooser)
    assert_type(client.get_server_chooser().add("tcp://127.0.0.1:9007/amps/json"), ServerChooser)
    assert_type(client.get_reconnect_delay_strategy(), ReconnectDelayStrategy)
    assert_type(client.publish_store, PublishStore)
    assert_type(client.bookmark_store, BookmarkStore)
    assert_type(client.get_unpersisted_count(), int)
    # the HA client stores each publish first: its sequence number, as the official one
    assert_type(client.publish("orders", '{"id": 1}'), int)
    assert_type(client.delta_publish("orders", '{"id": 1}'), int)
    assert_type(client.get_most_recent("s1"), str)
    assert_type(client.publish_and_wait("orders", "{}", timeout=5000), int)
    assert_type(client.publish_future("orders", "{}"), concurrent.futures.Future[int])
    assert_type(client.publish_flush(5000), None)
    assert_type(client.bookmark_subscribe(on_message, "orders", "recent", sub_id="b"), str)
    assert_type(client.close(), int)
    client.set_server_chooser(DefaultServerChooser("tcp://127.0.0.1:9007/amps/json"))
    client.set_reconnect_delay_strategy(ExponentialDelayStrategy(initial_delay=100))
    client.set_failed_write_handler(lambda message, reason: None)
    client.set_duplicate_message_handler(on_message)
    with HAClient(
        "ha",
        publish_store=MemoryPublishStore(),
        server_chooser=DefaultServerChooser("tcp://127.0.0.1:9007/amps/json"),
        publish_while_disconnected="block",
        logon_timeout=5000,
    ) as entered:
        assert_type(entered, HAClient)


def stores() -> None:
    with MemoryPublishStore() as store:
        assert_type(store, MemoryPublishStore)
        assert_type(store.get_unpersisted_count(), int)
        assert_type(store.unpersisted_count, int)
    bookmarks = MemoryBookmarkStore()
    assert_type(bookmarks.get_most_recent("s1"), str)


def package_face() -> Iterator[object]:
    # the lazy package face keeps the names' types (``import ampsclient as AMPS``)
    assert_type(AMPS.Client("c"), Client)
    assert_type(AMPS.HAClient("h"), HAClient)
    assert_type(AMPS.Message, type[Message])
    assert_type(ampsclient.EPOCH, Literal["0"])
    yield AMPS.DefaultServerChooser()
    yield AMPS.AMPSException("e")
