"""A stream closed early while its ``max_depth`` paused the socket must leave the socket
reading (issue 26: the Spark planner's ``[bm:bm]`` replay right after an early-closed replay
hung with the server idle, in 3 of 5 runs).

The planner's pattern, over and over on one connection: a replay with ``max_depth=16`` of a
topic far longer than that, one message taken, the stream closed (the server is still
sending, the socket may be paused by the depth limit at that moment), then a one-message
replay ``[bm:bm]`` of that message's bookmark, which must arrive."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient.command import AckType, Command
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import Client, HAClient
from ampsclient_server_stub.harness import ServerProcess

pytestmark = pytest.mark.integration

ROUNDS = 200
WAIT_MS = 10_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(data_dir=tmp_path / "amps", die_with_parent=True) as proc:
        yield proc


def replay(client: Client, topic: str, bookmark: str, max_depth: int) -> Iterator[object]:
    cmd = (
        Command("subscribe")
        .set_topic(topic)
        .set_bookmark(bookmark)
        .add_ack_type("completed")
        .set_timeout(WAIT_MS)
    )
    stream = client.execute(cmd)
    stream.max_depth(max_depth)
    try:
        for message in stream.timeout(WAIT_MS):
            assert message is not None, f"nothing within {WAIT_MS} ms from the replay {bookmark}"
            if message.command == "ack":
                if message.ack_type & AckType.COMPLETED:
                    return
                continue
            yield message
    finally:
        stream.close()


def test_an_early_close_under_max_depth_never_leaves_the_socket_paused(
    server: ServerProcess,
) -> None:
    uri, topic = server.uri(), f"depth-race-{uuid.uuid4().hex[:8]}"
    with HAClient(f"pub-{uuid.uuid4().hex[:8]}", MemoryPublishStore()) as pub:
        pub.get_server_chooser().add(uri)
        pub.connect_and_logon()
        for i in range(4000):
            pub.publish(topic, json.dumps({"i": i}))
        pub.publish_flush(30_000)

    with Client(f"planner-{uuid.uuid4().hex[:8]}") as client:
        client.connect_and_logon(uri)
        for n in range(ROUNDS):
            messages = replay(client, topic, "0", max_depth=16)
            first = next(messages)
            messages.close()  # early: thousands more are on their way
            bm = first.bookmark  # type: ignore[attr-defined]
            again = list(replay(client, topic, f"[{bm}:{bm}]", max_depth=16))
            assert [m.bookmark for m in again] == [bm], f"round {n}"  # type: ignore[attr-defined]
