"""Paginated ``sow_and_subscribe`` (``top_n`` with ``skip_n``, ordered by ``orderby``; AMPS User
Guide, "Managing Result Sets", "Paginated SOW and Subscribe"): the SOW part is the page, then
only records entering, updated in or leaving the page are delivered (``oof`` for those that
leave). Checked message by message on a real server, with our client and the official one."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient.exceptions import AMPSError
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import Inbox, wait_for

pytestmark = pytest.mark.integration

CONFIG = """<AMPSConfig><Name>page</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  </Transport></Transports>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Topic><Name>other</Name><MessageType>json</MessageType><Key>/id</Key></Topic></SOW>
</AMPSConfig>"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(parse_config(CONFIG, base_dir=tmp_path)) as thread:
        yield thread


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    c = Client(f"page-{time.time_ns()}")
    c.connect(server.uri("tcp", "json"))
    c.logon(5000)
    yield c
    c.close()


def pub(client: Client, oid: str, px: int) -> None:
    client.publish("orders", json.dumps({"id": oid, "px": px}))


# what each step sends to the subscription of page 2 (skip 1, top 2) ordered by /px
STEPS: list[tuple[str, Callable[[Client], None], list[tuple[str, str, int, str | None]]]] = [
    # a10 b20 c30 d40: the page is b, c
    ("e5 ranks first: a enters, c is pushed out", lambda c: pub(c, "e", 5),
     [("oof", "c", 30, "match"), ("publish", "a", 10, None)]),
    ("b updated in the page", lambda c: pub(c, "b", 25), [("publish", "b", 25, None)]),
    ("d changes below the page: nothing", lambda c: pub(c, "d", 45), []),
    ("e deleted (not in the page): a leaves, c enters",
     lambda c: c.sow_delete("orders", "/id = 'e'", timeout=5000),
     [("oof", "a", 10, "match"), ("publish", "c", 30, None)]),
    ("b deleted from the page: d enters",
     lambda c: c.sow_delete("orders", "/id = 'b'", timeout=5000),
     [("oof", "b", 25, "deleted"), ("publish", "d", 45, None)]),
    ("d updated in the page (the marker)", lambda c: pub(c, "d", 46),
     [("publish", "d", 46, None)]),
]  # fmt: skip


def _seen(messages: list[Any]) -> list[tuple[str, str, int, str | None]]:
    out = []
    for m in messages:
        doc = json.loads(m.get_data())
        reason = m.get_reason() if m.get_command() == "oof" else None
        out.append((m.get_command(), doc["id"], doc["px"], reason or None))
    return out


def test_a_paginated_subscription_follows_its_page(client: Client) -> None:
    for oid, px in [("a", 10), ("b", 20), ("c", 30), ("d", 40)]:
        pub(client, oid, px)
    client.flush(5000)
    inbox = Inbox(keep=lambda m: m.get_command() in ("sow", "publish", "oof"))
    client.execute_async(
        Command("sow_and_subscribe")
        .set_topic("orders")
        .set_order_by("/px")
        .set_top_n(2)
        .set_options("oof,skip_n=1"),
        inbox,
    )
    inbox.wait_for_count(2, 20.0)
    assert _seen(inbox.snapshot()) == [("sow", "b", 20, None), ("sow", "c", 30, None)]
    expected = _seen(inbox.snapshot())
    for _what, act, sends in STEPS:
        act(client)
        expected += sends
        inbox.wait_for_count(len(expected), 20.0)
    client.flush(5000)
    assert _seen(inbox.snapshot()) == expected


@pytest.mark.parametrize(
    ("command", "topic", "options", "why"),
    [
        ("sow_and_delta_subscribe", "orders", "skip_n=1", "cannot be a delta subscription"),
        ("sow_and_subscribe", "^(orders|other)$", "skip_n=1", "needs exactly one SOW topic"),
        ("sow_and_subscribe", "orders", "skip_n=1,conflation=1s", "cannot be conflated"),
    ],
)
def test_a_paginated_subscription_is_refused_where_it_cannot_be(
    client: Client, command: str, topic: str, options: str, why: str
) -> None:
    """``invalid options`` (the server logs ``why``); the same command without ``skip_n`` (not
    paginated) is accepted."""
    with pytest.raises(AMPSError, match="invalid options"):
        client.execute(Command(command).set_topic(topic).set_top_n(2).set_options(options))
    plain = options.replace("skip_n=1", "").strip(",") or None
    client.execute(Command(command).set_topic(topic).set_top_n(2).set_options(plain))


def test_the_official_client_gets_the_page(server: ServerThread, client: Client) -> None:
    amps = pytest.importorskip("AMPS")
    for oid, px in [("a", 10), ("b", 20), ("c", 30)]:
        pub(client, oid, px)
    client.flush(5000)
    official = amps.Client(f"official-page-{time.time_ns()}")
    official.connect(server.uri("tcp", "json"))
    official.logon()
    got: list[tuple[str, str, int]] = []

    def on_message(m: Any) -> None:
        if m.get_command() in ("sow", "publish", "oof"):
            doc = json.loads(m.get_data())
            got.append((m.get_command(), doc["id"], doc["px"]))

    try:
        cmd = (
            amps.Command("sow_and_subscribe")
            .set_topic("orders")
            .set_order_by("/px DESC")
            .set_top_n(1)
            .set_options("oof,skip_n=1")
        )
        official.execute_async(cmd, on_message)
        wait_for(lambda: len(got) == 1, timeout=20.0)
        pub(client, "z", 99)  # ranks first: c (30) is now second, b pushed out
        client.flush(5000)
        wait_for(lambda: len(got) == 3, timeout=20.0)
        assert got == [("sow", "b", 20), ("oof", "b", 20), ("publish", "c", 30)]
    finally:
        official.disconnect()
