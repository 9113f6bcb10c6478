"""Our Client and AsyncClient against the real reference server, over tcp:// and ws://."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import ampsclient
from ampsclient import AsyncClient, Client, Command, Message
from ampsclient.exceptions import (
    BadFilterError,
    DisconnectedError,
    InvalidTopicError,
    UsageError,
)
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

KINDS = ["tcp", "ws"]


@pytest.fixture(params=KINDS)
def uri(request: pytest.FixtureRequest, server: Any) -> str:
    return str(server.uri(request.param, "json"))


@pytest.fixture
def client(uri: str) -> Iterator[Client]:
    with Client("test-client") as c:
        c.connect(uri)
        c.logon(5000)
        yield c


def test_logon_reports_server(client: Client) -> None:
    assert client.logged_on
    assert client.logon_ack is not None
    assert client.logon_ack.get_status() == "success"
    assert client.get_server_version() > 0


def test_publish_subscribe_handler_with_filter(client: Client, uri: str) -> None:
    got: list[Message] = []
    sub_id = client.subscribe(got.append, "orders", "/qty > 10")
    assert isinstance(sub_id, str)
    with Client("pub") as pub:
        pub.connect(uri)
        pub.logon(5000)
        for i in range(20):
            pub.publish("orders", json.dumps({"id": i, "qty": i}))
        pub.flush(5000)
    wait_for(lambda: len(got) == 9, timeout=5.0, what="9 matching messages")
    assert [m.json()["id"] for m in got] == list(range(11, 20))
    assert all(m.get_sub_id() == sub_id and m.get_topic() == "orders" for m in got)


def test_subscribe_stream_and_dict_payloads(client: Client) -> None:
    stream = client.subscribe("ticks", timeout=5000)
    assert isinstance(stream, ampsclient.MessageStream)
    for i in range(5):
        client.publish("ticks", {"seq": i})
    seen = []
    stream.timeout(5000)
    for message in stream:
        assert message is not None, "no message within the stream timeout"
        seen.append(message.json()["seq"])
        if len(seen) == 5:
            break
    stream.close()
    assert seen == [0, 1, 2, 3, 4]
    assert stream.closed


def test_regex_topic_and_several_subscriptions_one_frame(client: Client) -> None:
    a: list[Message] = []
    b: list[Message] = []
    sa = client.subscribe(a.append, "east/.*")
    sb = client.subscribe(b.append, "east/orders", "/x = 1")
    client.publish("east/orders", '{"x":1}')
    client.publish("east/fills", '{"x":2}')
    client.publish("west/orders", '{"x":1}')
    client.flush(5000)
    wait_for(lambda: len(a) == 2 and len(b) == 1, timeout=5.0, what="regex deliveries")
    assert [m.get_topic() for m in a] == ["east/orders", "east/fills"]
    assert a[0].get_sub_id() == sa and b[0].get_sub_id() == sb
    assert set(a[0].get_sub_ids().split(",")) == {sa, sb}


def test_handler_messages_kept_or_not_keep_their_own_content(client: Client) -> None:
    """The receive path recycles a Message only when the handler kept no reference to it."""
    seen: list[tuple[str, str, str]] = []
    kept: list[tuple[int, Message]] = []
    n = 300

    def handler(m: Message) -> None:
        i = len(seen)
        # read the header and body of every delivery, whether or not the object is recycled
        seen.append((m.get_topic(), m.get_data(), m.get_sub_id()))
        if i % 3 == 0:
            kept.append((i, m))

    sid = client.subscribe(handler, "recycle/.*")
    for i in range(n):
        client.publish(f"recycle/{'ab'[i % 2]}", f'{{"i":{i}}}')
    client.flush(5000)
    wait_for(lambda: len(seen) == n, timeout=5.0, what="every delivery")
    for i, (topic, data, sub_id) in enumerate(seen):
        assert topic == f"recycle/{'ab'[i % 2]}"
        assert json.loads(data) == {"i": i}
        assert sub_id == sid
    assert len(kept) == n // 3
    assert len({id(m) for _, m in kept}) == len(kept)
    for i, m in kept:
        assert m.get_topic() == f"recycle/{'ab'[i % 2]}"
        assert json.loads(m.get_data()) == {"i": i}


def test_bad_filter_raises_typed_error(client: Client) -> None:
    with pytest.raises(BadFilterError) as info:
        client.subscribe(lambda m: None, "orders", "/x >>> 3 AND (", timeout=5000)
    assert info.value.reason == "bad filter"
    assert isinstance(info.value, ampsclient.BadFilterException)
    # the connection still works
    client.flush(5000)


def test_sow_query_and_delete(client: Client) -> None:
    topic = "/ADMIN/bookmark_store"
    for i in range(5):
        client.publish(topic, {"clientName": "c", "subId": f"s{i}", "bookmark": f"1|{i}|"})
    client.flush(5000)
    records = [m for m in client.sow(topic, "/clientName = 'c'", batch_size=2, timeout=5000)]
    sow = [m for m in records if m.get_command() == "sow"]
    assert sorted(m.json()["subId"] for m in sow) == [f"s{i}" for i in range(5)]
    assert all(m.get_sow_key() for m in sow)
    assert [m.get_command() for m in records if m.get_command() != "sow"] == [
        "group_begin",
        "group_end",
    ]
    stats = client.sow_delete(topic, "/subId IN ('s1', 's2')")
    assert isinstance(stats, Message)
    assert stats.get_records_deleted() == 2
    left = [m.json()["subId"] for m in client.sow(topic, timeout=5000) if m.get_command() == "sow"]
    assert sorted(left) == ["s0", "s3", "s4"]


def test_sow_on_non_sow_topic_fails(client: Client) -> None:
    with pytest.raises(InvalidTopicError):
        client.sow("not-a-sow-topic", timeout=5000)


def test_select_projection_reads_positionally(client: Client) -> None:
    topic = "/ADMIN/bookmark_store"
    client.publish(topic, {"clientName": "tracked", "subId": "bsub", "bookmark": "9|1|"})
    client.flush(5000)
    cmd = (
        Command("sow")
        .set_topic(topic)
        .set_filter("/clientName='tracked'")
        .set_options("select=[-/,+/subId,+/bookmark]")
        .set_batch_size(10)
    )
    rows = [m.get_data() for m in client.execute(cmd) if m.get_command() == "sow"]
    assert rows == ['{"subId":"bsub","bookmark":"9|1|"}']


def test_sow_and_subscribe_with_oof(client: Client) -> None:
    topic = "/ADMIN/bookmark_store"
    client.publish(topic, {"clientName": "o", "subId": "a", "bookmark": "keep"})
    client.flush(5000)
    got: list[Message] = []
    client.sow_and_subscribe(got.append, topic, "/bookmark = 'keep'", oof=True, timeout=5000)
    wait_for(
        lambda: any(m.get_command() == "group_end" for m in got), timeout=5.0, what="group_end"
    )
    client.publish(topic, {"clientName": "o", "subId": "a", "bookmark": "changed"})
    wait_for(lambda: any(m.get_command() == "oof" for m in got), timeout=5.0, what="oof")
    commands = [m.get_command() for m in got]
    assert commands == ["group_begin", "sow", "group_end", "oof"]


def test_execute_async_with_completed_ack(client: Client) -> None:
    got: list[Message] = []
    done = threading.Event()

    def handler(m: Message) -> None:
        got.append(m)
        if m.get_command() == "ack" and m.get_ack_type() == "completed":
            done.set()

    cmd = Command("sow").set_topic("/ADMIN/bookmark_store").add_ack_type("completed")
    client.execute_async(cmd, handler)
    assert done.wait(5)
    assert got[0].get_command() == "group_begin"


@pytest.mark.serial
def test_heartbeats_keep_an_idle_connection(uri: str) -> None:
    beats = []
    with Client("hb") as c:
        c.set_global_command_type_message_handler("heartbeat", beats.append)
        c.connect(uri)
        c.logon(5000)
        c.set_heartbeat(1)
        wait_for(lambda: len(beats) >= 2, timeout=5, what="two server heartbeats")
        assert c.logged_on
        c.flush(5000)


def test_disconnect_fails_pending_and_ends_streams(uri: str, server: Any) -> None:
    c = Client("victim")
    try:
        c.connect(uri)
        c.logon(5000)
        stream = c.subscribe("x")
        assert isinstance(stream, ampsclient.MessageStream)
        # a second logon with the same name kicks the first connection (transaction-log rule)
        with Client("victim") as other:
            other.connect(uri)
            other.logon(5000)
            wait_for(lambda: not c.connected, timeout=5.0, what="the first connection to drop")
        with pytest.raises(DisconnectedError):
            next(iter(stream))
        with pytest.raises(DisconnectedError):
            c.publish("x", "y")
    finally:
        c.close()


def test_blocking_call_from_handler_is_a_usage_error(client: Client) -> None:
    errors: list[BaseException] = []
    client.set_exception_listener(errors.append)
    client.subscribe(lambda m: client.flush(1000), "reentrant")
    client.publish("reentrant", "x")
    wait_for(lambda: bool(errors), timeout=5.0, what="the handler error")
    assert isinstance(errors[0], UsageError)


async def test_async_client(server: Any) -> None:
    uri = server.uri("tcp", "json")
    async with AsyncClient("async-sub") as sub, AsyncClient("async-pub") as pub:
        await sub.connect(uri)
        await sub.logon(5000)
        await pub.connect(uri)
        await pub.logon(5000)
        stream = await sub.subscribe("news")
        assert isinstance(stream, ampsclient.MessageStream)
        for i in range(3):
            pub.publish("news", {"n": i})
        await pub.flush(5000)
        got = []
        async for message in stream:
            got.append(message.json()["n"])
            if len(got) == 3:
                break
        assert got == [0, 1, 2]
        records = [m async for m in await sub.sow("/ADMIN/bookmark_store")]
        assert [m.get_command() for m in records] == ["group_begin", "group_end"]


async def test_msgpack_message_type(server: Any) -> None:
    uri = server.uri("tcp", "msgpack")
    async with AsyncClient("mp") as c:
        await c.connect(uri)
        await c.logon(5000)
        got: list[Message] = []
        await c.subscribe(got.append, "mp", "/v > 1")
        for v in range(4):
            c.publish("mp", {"v": v})
        await c.flush(5000)
        deadline = asyncio.get_running_loop().time() + 5
        while len(got) < 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.005)
        assert [m.unpack()["v"] for m in got] == [2, 3]
