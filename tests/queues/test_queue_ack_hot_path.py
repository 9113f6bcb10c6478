"""The client's auto-ack hot path (``ampsclient.acks.delivery_fields`` and the batch it
feeds): the topic and bookmark read from a delivery's bytes are the header's, payloads in
any other form take the general path, and acks made by the application inside a handler
are never repeated by auto-ack."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _queue_support import publish, start
from test_client_acks import frames

import ampsclient
from ampsclient.acks import delivery_fields
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import wait_for
from ampsclient_server_stub.testing.proxy import LoopbackProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    cfg = QueueConfig(name="work", message_type="json", max_per_subscription_backlog=100)
    thread = start(tmp_path, cfg)
    try:
        yield thread
    finally:
        thread.stop()


def stats(server: ServerThread) -> dict[str, Any]:
    return server.call(lambda: server.broker.queues.statistics()["work"])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "payload",
    [
        # no bm in the header: the body's text must not be taken for it
        b'{"c":"p","t":"work","sids":"s1"}{"a":",\\"bm\\":\\"1|2|\\",\\"lp\\":\\"x\\""}',
        b'{"c":"p","t":"work","sids":"s1"},"bm":"1|2|","lp":"20261124T000000Z"}',
        # an escape before the bookmark's end: parse the header instead
        b'{"c":"p","t":"wo\\"rk","sids":"s1","bm":"1|2|","lp":"20261124T000000Z"}{}',
        # not leased (no lp, an empty lp, lp not right after bm)
        b'{"c":"p","t":"work","sids":"s1","bm":"1|2|"}{}',
        b'{"c":"p","t":"work","sids":"s1","bm":"1|2|","lp":""}{}',
        b'{"c":"p","t":"work","sids":"s1","bm":"1|2|","x":"c","lp":"20261124T000000Z"}{}',
        # another command or field order
        b'{"c":"sow","t":"work","bm":"1|2|","lp":"20261124T000000Z"}{}',
        b'{"t":"work","c":"p","bm":"1|2|","lp":"20261124T000000Z"}{}',
        b"",
    ],
)
def test_other_forms_take_the_general_path(payload: bytes) -> None:
    assert delivery_fields(payload) is None


def test_fields_of_a_leased_delivery() -> None:
    payload = b'{"c":"p","t":"work","sids":"s1","bm":"17|4|","lp":"20261124T000000Z"}{"n":1}'
    assert delivery_fields(payload) == ("work", "17|4|")
    message = ampsclient.Message(payload)
    assert (message.topic, message.bookmark) == ("work", "17|4|")


def test_hot_path_matches_header_and_never_acks_twice(server: ServerThread) -> None:
    """Every fifth message is acked by the handler itself, every seventh (first delivery
    only) raises: on the wire each message is acked exactly once, the raised ones are
    cancelled once first, and the hot path's fields equal the parsed header's for every
    delivery the server made."""
    count = 70
    lock = threading.Lock()
    mismatches: list[tuple[Any, ...]] = []
    raised: set[int] = set()
    seen: list[int] = []

    def on_message(message: Any) -> None:
        n = json.loads(message.data)["n"]
        fields = delivery_fields(message.raw_payload)
        parsed = ampsclient.Message(message.raw_payload)
        expected = (parsed.topic, parsed.bookmark)
        with lock:
            seen.append(n)
            if fields != expected or not parsed.lease_period:
                mismatches.append((n, fields, expected, parsed.lease_period))
        if n % 7 == 3 and n not in raised:
            raised.add(n)
            raise RuntimeError(f"cancel {n}")
        if n % 5 == 0:
            message.ack()  # the application's own ack: auto-ack must not repeat it

    with LoopbackProxy("127.0.0.1", server.tcp_port, record=True) as proxy:
        client = ampsclient.Client("ours-hot-path")
        client.connect(f"tcp://127.0.0.1:{proxy.port}/amps/json")
        client.logon()
        client.set_auto_ack(True)
        client.set_ack_batch_size(4)
        client.set_ack_timeout(100)
        try:
            command = ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=8")
            client.execute_async(command, on_message)
            publish(server, "work", [{"n": i} for i in range(count)])
            wait_for(lambda: stats(server)["acked"] == count, 20, f"{count} acked")
        finally:
            client.close()
        acks = [f for f in frames(proxy.upstream or b"") if f.get("c") == "sow_delete"]
    assert not mismatches
    cancels = [f for f in acks if f.get("o") == "cancel"]
    plain = [bm for f in acks if not f.get("o") for bm in str(f["bookmark"]).split(",")]
    cancelled_twice = {n for n in range(count) if n % 7 == 3}
    assert len(cancels) == len(cancelled_twice) == len(raised)
    assert len(plain) == len(set(plain)) == count  # each message acked once, none twice
    assert sorted(seen) == sorted([*range(count), *cancelled_twice])  # redelivered once
    final = stats(server)
    assert final["cancelled"] == len(raised) and final["backlog"] == 0
    assert final["queue_depth"] == 0
