"""A bookmark subscription's persisted ack reaches the bookmark store in stream order (#32).

The 30-minute soak: a subscriber got 60 messages twice after a server restart. The server's
persisted ack named the queue engine's last journal record (``chaos/queues``, a publisher that
never publishes on the subscribed topic; AMPS: the bookmark "does not need to be a message that
matches the subscription", user guide, *Bookmark Subscriptions and Persisted
Acknowledgments*). It was sent before the next messages, but the HA client handed persisted
acks to the store as events after the whole socket read, so the store saw it after those
messages were discarded; being of a publisher it could not order, it adopted it, and the
resume started before them. Here a scripted peer on loopback writes a message, a persisted ack
and a later message in one ``write``: the recovery point must stay after the later message.
"""

from __future__ import annotations

import asyncio
import json
import struct

from ampsclient import Command
from ampsclient.ha.client import AsyncHAClient
from ampsclient.protocol.message import Message
from ampsclient.stores.bookmark import MemoryBookmarkStore
from ampsclient_server_stub.testing import wait_for_async

PUB = "11111"
QUEUES = "22222"  # the server's queue engine: never a publisher on the topic


def frame(header: dict[str, object], data: bytes = b"") -> bytes:
    payload = json.dumps(header, separators=(",", ":")).encode() + data
    return struct.pack(">I", len(payload)) + payload


class Peer:
    """Acks logon and subscribe; then writes ``burst`` (one write) to the subscriber."""

    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None
        self.sub_id = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        try:
            while True:
                size = struct.unpack(">I", await reader.readexactly(4))[0]
                message = Message(await reader.readexactly(size))
                if message.command in ("logon", "subscribe"):
                    if message.command == "subscribe":
                        self.sub_id = message.sub_id or ""
                    header = {"c": "ack", "cid": message.command_id, "a": "processed"}
                    writer.write(frame({**header, "status": "success"}))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def burst(self, frames: list[bytes]) -> None:
        assert self.writer is not None
        self.writer.write(b"".join(frames))


async def test_a_persisted_ack_between_two_messages_is_applied_between_them() -> None:
    peer = Peer()
    server = await asyncio.start_server(peer.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = MemoryBookmarkStore()
    client = AsyncHAClient("order-sub", bookmark_store=store)
    client.get_server_chooser().add(f"tcp://127.0.0.1:{port}/amps/json")
    got: list[str] = []

    def on_message(message: Message) -> None:
        got.append(str(message.bookmark))
        client.discard(message)

    try:
        await asyncio.wait_for(client.connect_and_logon(), 10)
        cmd = Command("subscribe").set_topic("t").set_sub_id("s").set_bookmark("0")
        await asyncio.wait_for(client.execute_async(cmd, on_message), 10)
        sid = peer.sub_id
        assert sid == "s"

        def message(seq: int) -> bytes:
            header = {"c": "p", "t": "t", "sids": sid, "bm": f"{PUB}|{seq}|"}
            return frame(header, b'{"n":%d}' % seq)

        ack = frame(
            {"c": "ack", "a": "persisted", "status": "success", "sub_id": sid, "bm": f"{QUEUES}|7|"}
        )
        # message 1, then the ack (a journal point after it), then message 2: one write
        peer.burst([message(1), ack, message(2)])
        await wait_for_async(lambda: len(got) == 2, what="the two messages")
        # (the ack was read with message 2: it was handled before this coroutine resumed)
        assert got == [f"{PUB}|1|", f"{PUB}|2|"]
        # the ack came before message 2: a resume must not deliver message 2 again
        assert store.get_most_recent("s") == f"{PUB}|2|"
        # a marker message: everything before it was handled, and the point follows it
        peer.burst([message(3)])
        await wait_for_async(lambda: len(got) == 3, what="the marker")
        assert store.get_most_recent("s") == f"{PUB}|3|"
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
