"""Replication compression (seed 001, "Replication Compression"): set on the destination of the
sending instance, detected by the receiving one with no configuration. One source replicates
the same stream of realistic JSON orders to two instances, one destination plain and one
compressed, each through a loopback proxy that counts the bytes on the wire."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _replication_support import admin, wait_for

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.testing.proxy import LoopbackProxy

pytestmark = pytest.mark.integration

SYMBOLS = ("AAPL", "MSFT", "NVDA", "AMZN", "GOOG", "META", "TSLA", "JPM", "XOM", "BRK.B")


def orders(count: int, seed: int = 7) -> list[str]:
    """A realistic order flow: JSON documents with repeated field names and a small set of
    values for most fields, ids and timestamps that change on every message."""
    rnd = random.Random(seed)
    out = []
    for n in range(count):
        doc = {
            "order_id": f"ORD-20261123-{n:07d}",
            "account": f"ACC-{rnd.randrange(1000, 1100)}",
            "trader": rnd.choice(("jsmith", "akumar", "lchen", "mrossi", "tnguyen")),
            "symbol": rnd.choice(SYMBOLS),
            "side": rnd.choice(("buy", "sell")),
            "qty": rnd.randrange(1, 100) * 100,
            "price": round(rnd.uniform(20, 900), 2),
            "type": rnd.choice(("limit", "market")),
            "tif": rnd.choice(("DAY", "IOC", "GTC")),
            "venue": rnd.choice(("XNAS", "XNYS", "ARCX", "BATS")),
            "status": "new",
            "ts": f"2026-11-23T20:{n // 60000 % 60:02d}:{n // 1000 % 60:02d}.{n % 1000:03d}Z",
        }
        out.append(json.dumps(doc, separators=(",", ":")))
    return out


def receiver(name: str, repl_port: int) -> str:
    """An instance that only receives (no compression setting anywhere)."""
    return f"""<AMPSConfig><Name>{name}</Name><Transports>
      <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
      <Transport><Name>amps-replication</Name><Type>amps-replication</Type>
        <InetAddr>127.0.0.1:{repl_port}</InetAddr></Transport></Transports>
      <TransactionLog><JournalDirectory>journal</JournalDirectory>
        <Topic><Name>orders</Name></Topic></TransactionLog></AMPSConfig>"""


def source(destinations: dict[str, tuple[int, str]]) -> str:
    """The source: one destination per entry ``name: (port, extra XML in its Transport)``."""
    dests = "".join(
        f"""<Destination><Name>{name}</Name><SyncType>async</SyncType>
          <Topic><Name>orders</Name><MessageType>json</MessageType>
            <ExcludeValidation>replicate</ExcludeValidation></Topic>
          <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{port}</InetAddr>
            {extra}</Transport></Destination>"""
        for name, (port, extra) in destinations.items()
    )
    return f"""<AMPSConfig><Name>S</Name><Transports>
      <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
      </Transports>
      <TransactionLog><JournalDirectory>journal</JournalDirectory>
        <Topic><Name>orders</Name></Topic></TransactionLog>
      <Replication>{dests}</Replication></AMPSConfig>"""


def journal(thread: ServerThread) -> list[tuple[str, bytes]]:
    """``(topic, payload)`` of every record in the instance's journal, in order."""
    j = thread.server.journal
    assert j is not None

    def read() -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        position = j.first_index
        while batch := j.read(position, max_records=5000):
            out += [(r.topic, bytes(r.payload)) for r in batch]
            position = batch[-1].index + 1
        return out

    return thread.call(read)


def inbound_applied(thread: ServerThread) -> int:
    return sum(int(i["applied"]) for i in admin(thread, "status")["inbound"])


@pytest.fixture
def running() -> Iterator[list[Any]]:
    items: list[Any] = []
    yield items
    for item in reversed(items):
        item.stop()


def start(xml: str, data_dir: Path, running: list[Any]) -> ServerThread:
    data_dir.mkdir(parents=True, exist_ok=True)
    thread = ServerThread(parse_config(xml, base_dir=data_dir), fsync="never").start()
    running.append(thread)
    return thread


def test_compressed_link_delivers_the_same_messages_with_fewer_bytes(
    tmp_path: Path, running: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ampsclient_server_stub.replication")
    plain_port, zlib_port = free_port(), free_port()
    plain = start(receiver("Plain", plain_port), tmp_path / "plain", running)
    packed = start(receiver("Packed", zlib_port), tmp_path / "packed", running)
    plain_proxy = LoopbackProxy("127.0.0.1", plain_port).start()
    running.append(plain_proxy)
    zlib_proxy = LoopbackProxy("127.0.0.1", zlib_port).start()
    running.append(zlib_proxy)
    src = start(
        source(
            {
                "Plain": (plain_proxy.port, ""),
                "Packed": (zlib_proxy.port, "<Compression>zlib</Compression>"),
            }
        ),
        tmp_path / "src",
        running,
    )
    wait_for(lambda: all(d["connected"] for d in admin(src, "status")["destinations"]), 10, "links")
    handshake = {"plain": plain_proxy.bytes, "zlib": zlib_proxy.bytes}
    docs = orders(3000)
    with Client("order-feed") as client:
        client.connect(src.uri("tcp", "json"))
        client.logon(5000)
        for doc in docs:
            client.publish("orders", doc)
        client.flush(10_000)
    wait_for(
        lambda: inbound_applied(plain) == 3000 and inbound_applied(packed) == 3000,
        30,
        "every order on both receivers",
    )
    sent = journal(src)
    assert [p.decode() for _, p in sent] == docs
    assert journal(plain) == sent  # message by message, same order
    assert journal(packed) == sent
    plain_bytes = plain_proxy.bytes - handshake["plain"]
    zlib_bytes = zlib_proxy.bytes - handshake["zlib"]
    assert zlib_bytes < plain_bytes * 0.5, (plain_bytes, zlib_bytes)
    status = {d["name"]: d for d in admin(src, "status")["destinations"]}
    assert status["Plain"]["bytes_after_compression"] == 0
    packed_dest = status["Packed"]
    assert 0 < packed_dest["bytes_after_compression"] < packed_dest["bytes_before_compression"]
    assert "'S' starts replicating 'Packed' to this instance (compressed: zlib)" in caplog.text
    assert "'S' starts replicating 'Plain' to this instance\n" in caplog.text + "\n"


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        ("<Compression>lzma</Compression>", r"unsupported <Compression> 'lzma'"),
        (
            "<Compression>zlib</Compression><Compression>zlib</Compression>",
            "more than one <Compression>",
        ),
    ],
)
def test_a_bad_compression_setting_is_a_configuration_error(xml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(source({"B": (10005, xml)}))


@pytest.mark.parametrize(
    ("xml", "expected"),
    [
        ("", None),
        ("<Compression>ZLIB</Compression>", "zlib"),
        ("<Compression>none</Compression>", None),
    ],
)
def test_compression_setting(xml: str, expected: str | None) -> None:
    config = parse_config(source({"B": (10005, xml)}))
    assert config.replication is not None
    dest = config.replication.destinations[0]
    assert dest.compression == expected
    assert "Transport/Compression" not in dest.extra
