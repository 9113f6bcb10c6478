"""This project's client acking queue messages of the reference server: ack batches capped at
the backlog the subscribe ack reports, the stream forms (``await message.ack()``,
``message.processing()``, stream auto-ack on the ack timeout)."""

from __future__ import annotations

import asyncio
import json
import struct
import threading
from typing import Any

import pytest
from _queue_support import connect, publish, stats

import ampsclient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import wait_for
from ampsclient_server_stub.testing.proxy import LoopbackProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def work_backlog() -> int:
    """The conftest ``server``'s queue ``work`` with a backlog of 100."""
    return 100


def test_batch_capped_at_reported_backlog(server: ServerThread) -> None:
    """Batch 300 against a backlog of 100: with a 60 s ack timer, only the cap lets the
    consumer go on (uncapped, the batch never fills and the queue stalls)."""
    seen: list[int] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        with lock:
            seen.append(json.loads(message.data)["n"])

    with LoopbackProxy("127.0.0.1", server.tcp_port, record=True) as proxy:
        client = ampsclient.Client("ours-cap")
        client.connect(f"tcp://127.0.0.1:{proxy.port}/amps/json")
        client.logon()
        client.set_auto_ack(True)
        client.set_ack_batch_size(300)
        client.set_ack_timeout(60_000)
        try:
            command = (
                ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=300")
            )
            client.execute_async(command, on_message)
            assert client.queue_acks.batch_limit("work") == 100  # granted 100, not 300
            publish(server, "work", [{"n": i} for i in range(1000)])
            wait_for(lambda: stats(server)["acked"] == 1000, 20, "1000 acked before the timer")
            with lock:
                assert seen == list(range(1000))  # each once, in order: nothing cancelled
            assert client.queue_acks.pending == 0
        finally:
            client.close()
        acks = [f for f in frames(proxy.upstream or b"") if f.get("c") == "sow_delete"]
    sizes = [len(str(f["bookmark"]).split(",")) for f in acks]
    assert sizes == [100] * 10  # full batches of the reported backlog, none by the timer


def test_cap_forgotten_at_unsubscribe(server: ServerThread) -> None:
    client = connect(server, "ours-cap-unsub")
    client.set_ack_batch_size(300)
    try:
        sub_id = client.execute_async(
            ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=500"),
            lambda m: None,
        )
        assert client.queue_acks.batch_limit("work") == 100
        client.unsubscribe(sub_id)
        assert client.queue_acks.batch_limit("work") == 300
    finally:
        client.close()


async def aconnect(server: ServerThread, name: str) -> ampsclient.AsyncClient:
    client = ampsclient.AsyncClient(name)
    await client.connect(server.uri("tcp", "json"))
    await client.logon(5000)
    return client


async def test_async_stream_await_ack_and_processing(server: ServerThread) -> None:
    """``async for`` over ``subscribe(queue, max_backlog=10)``: ``await message.ack()``, and
    ``async with message.processing()`` acking on success, cancelling on an exception."""
    client = await aconnect(server, "ours-async")
    try:
        stream = await client.subscribe("work", max_backlog=10)
        await asyncio.to_thread(publish, server, "work", [{"n": i} for i in range(6)])
        got: list[int] = []
        failed_once = False
        async for message in stream:
            n = message.json()["n"]
            got.append(n)
            if n % 2 == 0:
                await message.ack()
            else:
                try:
                    async with message.processing():
                        if n == 3 and not failed_once:
                            failed_once = True
                            raise RuntimeError("handler failed")
                except RuntimeError:
                    pass
            if sorted(got) == sorted([*range(6), 3]):
                break
        assert got[:6] == list(range(6)) and got[6:] == [3]  # 3 cancelled, redelivered
        await asyncio.to_thread(wait_for, lambda: stats(server)["acked"] == 6, 10, "6 acked")
        s = stats(server)
        assert s["cancelled"] == 1 and s["backlog"] == 0 and s["queue_depth"] == 0
        stream.close()
    finally:
        await client.close()


def test_processing_after_explicit_ack_sends_nothing_more(server: ServerThread) -> None:
    """An ack inside ``processing()`` is the only one: leaving the block adds nothing (the
    marker: a later message's ack is the next thing the server counts)."""
    client = connect(server, "ours-processing")
    try:
        stream = client.subscribe("work", max_backlog=5)
        publish(server, "work", [{"n": i} for i in range(2)])
        first = next(stream)
        with first.processing():
            first.ack("cancel")  # the block settles it itself: no ack at the exit
        wait_for(lambda: stats(server)["cancelled"] == 1, 10, "the cancel")
        second = next(stream)
        with second.processing():
            pass
        wait_for(lambda: stats(server)["acked"] == 1, 10, "the second acked")
        third = next(stream)  # the cancelled first, redelivered
        assert third.json()["n"] == 0 and third.bookmark == first.bookmark
        with third.processing():
            pass  # settled earlier in another delivery: this one is acked
        wait_for(lambda: stats(server)["acked"] == 2, 10, "the redelivery acked")
        s = stats(server)
        assert s["cancelled"] == 1 and s["backlog"] == 0
        stream.close()
    finally:
        client.close()


def test_quiet_stream_auto_ack_on_timeout(server: ServerThread) -> None:
    """Auto-ack on a stream: the last message is acked once the ack timeout passes even
    though the application never asks for the next one."""
    client = connect(server, "ours-quiet")
    client.set_auto_ack(True)
    client.set_ack_batch_size(10)
    client.set_ack_timeout(200)
    try:
        stream = client.subscribe("work", max_backlog=10)
        publish(server, "work", [{"n": i} for i in range(3)])
        seen = [next(stream).json()["n"] for _ in range(3)]
        assert seen == [0, 1, 2]
        wait_for(lambda: stats(server)["acked"] == 3, 10, "all 3 acked, the held one too")
        assert stats(server)["backlog"] == 0
        publish(server, "work", [{"n": 3}])  # the stream goes on after an idle ack
        assert next(stream).json()["n"] == 3
        wait_for(lambda: stats(server)["acked"] == 4, 10, "the 4th acked")
        stream.close()
    finally:
        client.close()


def test_quiet_stream_held_message_acked_once(server: ServerThread) -> None:
    """The message acked by the idle timer is not acked again when the next one is asked
    for, and an explicit ack of the held message keeps auto-ack from sending another: the
    acks on the wire, frame by frame."""
    with LoopbackProxy("127.0.0.1", server.tcp_port, record=True) as proxy:
        client = ampsclient.Client("ours-once")
        client.connect(f"tcp://127.0.0.1:{proxy.port}/amps/json")
        client.logon()
        client.set_auto_ack(True)
        client.set_ack_timeout(100)
        try:
            stream = client.subscribe("work", max_backlog=10)
            publish(server, "work", [{"n": 0}])
            held = next(stream)
            wait_for(lambda: stats(server)["acked"] == 1, 10, "idle ack")
            publish(server, "work", [{"n": 1}, {"n": 2}])
            second = next(stream)  # asking for the next one does not ack ``held`` again
            second.ack()
            third = next(stream)  # nor ``second``, acked by the application
            assert [m.json()["n"] for m in (held, second, third)] == [0, 1, 2]
            wait_for(lambda: stats(server)["acked"] == 3, 10, "idle ack of the third")
            assert client.queue_acks.pending == 0
            stream.close()
        finally:
            client.close()
        acks = [f for f in frames(proxy.upstream or b"") if f.get("c") == "sow_delete"]
    assert [(f["bookmark"], f.get("o")) for f in acks] == [
        (held.bookmark, None),
        (second.bookmark, None),
        (third.bookmark, None),
    ]


def frames(data: bytes | bytearray) -> list[dict[str, Any]]:
    """The headers of the length-prefixed json frames in ``data`` (client to server)."""
    out = []
    pos = 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        header, _ = json.JSONDecoder().raw_decode(bytes(data[pos + 4 : pos + 4 + n]).decode())
        out.append(header)
        pos += 4 + n
    return out


def test_max_backlog_keyword_checked(server: ServerThread) -> None:
    client = connect(server, "ours-kw")
    try:
        with pytest.raises(ValueError, match="max_backlog"):
            client.subscribe("work", max_backlog=0)
        with pytest.raises(ValueError, match="max_backlog"):
            client.subscribe("work", max_backlog="10")  # type: ignore[call-overload]
    finally:
        client.close()


async def test_quiet_async_stream_auto_ack_on_timeout(server: ServerThread) -> None:
    """The same on an ``async for`` stream (its idle clock runs on the client's own loop)."""
    client = await aconnect(server, "ours-quiet-async")
    client.set_auto_ack(True)
    client.set_ack_timeout(150)
    try:
        stream = await client.subscribe("work", max_backlog=10)
        await asyncio.to_thread(publish, server, "work", [{"n": 0}, {"n": 1}])
        # read two and hold the second without asking for more (leaving an ``async for``
        # early would close the stream, and a closed stream's held message is never acked,
        # as with the official client: tests/client/test_async_api.py)
        seen = [(await stream.__anext__()).json()["n"] for _ in range(2)]
        assert seen == [0, 1]
        await asyncio.to_thread(wait_for, lambda: stats(server)["acked"] == 2, 10, "both acked")
        assert stats(server)["backlog"] == 0
        stream.close()
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("topic", "bookmarks"),
    [("work", "1|1|"), ("q", "1|1|,1|2|,1|3|"), ('a"b\\c', '2|"|,x\\y'), ("é/ü", "3|é|")],
)
def test_a_plain_ack_is_the_header_encode_header_makes(topic: str, bookmarks: str) -> None:
    """The usual ack (no options) is built directly; its bytes are encode_header's for the
    same fields, escapes and UTF-8 included; with options it is encode_header's own."""
    from ampsclient.acks import QueueAcks
    from ampsclient.protocol.header import encode_header

    sent: list[bytes] = []
    acks = QueueAcks(sent.append, lambda seconds, fn: None)
    acks.ack(topic, bookmarks)
    acks.ack(topic, bookmarks, "cancel")
    fields = {"c": "sow_delete", "t": topic, "cid": "AMPS-queue-ack", "bookmark": bookmarks}
    assert sent == [encode_header(fields), encode_header({**fields, "o": "cancel"})]
