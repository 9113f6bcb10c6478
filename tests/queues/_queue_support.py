"""Helpers of the queue tests: servers with queues, a raw queue consumer that reads until a
marker (a ``flush`` ack) so that "nothing more was delivered" is proved, not waited for."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any, TypeVar

import pytest

import ampsclient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ServerConfig, default_config
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.queues import speedups
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import RawClient

_ids = itertools.count(1)
T = TypeVar("T")

needs_c = pytest.mark.skipif(not speedups.SPEEDUPS, reason="queue C speedups not in use")
IMPLS = ["python", pytest.param("c", marks=needs_c)]
"""The ``name`` parameter of a test run on each implementation (:func:`implementation`)."""


def implementation(name: str, c_version: T | None, twin: T) -> T:
    """The C function when ``name`` is ``"c"`` (the speedups are built then), else its twin."""
    if name == "c":
        assert c_version is not None
        return c_version
    return twin


def stats(server: ServerThread, name: str = "work") -> dict[str, Any]:
    """The statistics of the queue ``name`` (read on the server's loop)."""
    return server.call(lambda: server.broker.queues.statistics()[name])  # type: ignore[union-attr]


def connect(server: ServerThread, name: str) -> ampsclient.Client:
    """A logged-on :class:`ampsclient.Client` called ``name`` (close it yourself)."""
    client = ampsclient.Client(name)
    client.connect(server.uri("tcp", "json"))
    client.logon()
    return client


def queue_config(tmp_path: Path, *queues: QueueConfig) -> ServerConfig:
    """The zero config (every topic journaled) under ``tmp_path``, with ``queues``."""
    return dataclasses.replace(
        default_config(tcp_port=0, ws_port=0, data_dir=tmp_path), queues=tuple(queues)
    )


def start(tmp_path: Path, *queues: QueueConfig, **kwargs: Any) -> ServerThread:
    """A started :class:`ServerThread` with ``queues`` (stop it yourself)."""
    return ServerThread(queue_config(tmp_path, *queues), fsync="never", **kwargs).start()


class Consumer:
    """A raw connection consuming a queue: every delivery is kept, in order."""

    def __init__(self, server: ServerThread, name: str | None = None) -> None:
        self.raw = RawClient(server.tcp_port)
        self.name = name or f"consumer-{next(_ids)}"
        self.raw.logon(self.name)
        self.deliveries: list[tuple[dict[str, Any], bytes]] = []
        self.acks: list[dict[str, Any]] = []

    def subscribe(self, topic: str, *, sub_id: str = "s1", **fields: Any) -> dict[str, Any]:
        """Subscribe (``o``, ``filter``... in ``fields``); the processed ack."""
        self.raw.send(
            {
                "c": "subscribe",
                "t": topic,
                "sub_id": sub_id,
                "cid": sub_id,
                "a": "processed",
                **fields,
            }
        )
        return self.wait_ack(sub_id, "processed")

    def wait_ack(self, cid: str, ack_type: str = "processed") -> dict[str, Any]:
        """Read until the ``ack_type`` ack of ``cid`` (deliveries on the way are kept)."""
        while True:
            hdr, body = self.raw.recv(10.0)
            if hdr.get("c") == "ack":
                self.acks.append(hdr)
                if hdr.get("cid") == cid and hdr.get("a") == ack_type:
                    return hdr
            elif hdr.get("c") == "p":
                self.deliveries.append((hdr, body))

    def sync(self) -> list[tuple[dict[str, Any], bytes]]:
        """Everything delivered before a ``flush`` sent now (a marker); the new deliveries."""
        before = len(self.deliveries)
        cid = f"sync-{next(_ids)}"
        self.raw.send({"c": "flush", "cid": cid, "a": "processed"})
        self.wait_ack(cid)
        return self.deliveries[before:]

    def wait_deliveries(
        self, count: int, timeout: float = 10.0
    ) -> list[tuple[dict[str, Any], bytes]]:
        """Read until ``count`` deliveries in all have arrived; all of them."""
        import time

        deadline = time.monotonic() + timeout
        while len(self.deliveries) < count:
            hdr, body = self.raw.recv(max(0.01, deadline - time.monotonic()))
            if hdr.get("c") == "p":
                self.deliveries.append((hdr, body))
            elif hdr.get("c") == "ack":
                self.acks.append(hdr)
        return list(self.deliveries)

    def ack(
        self, topic: str, bookmarks: str, *, key: str = "bookmark", **fields: Any
    ) -> dict[str, Any] | None:
        """Acknowledge (``o`` in ``fields``); returns the processed ack when ``a`` asks for it."""
        cid = f"ack-{next(_ids)}"
        hdr = {"c": "sow_delete", "t": topic, "cid": cid, key: bookmarks, **fields}
        self.raw.send(hdr)
        if "a" in fields:
            return self.wait_ack(cid, "processed")
        return None

    def close(self) -> None:
        self.raw.close()


def publish(
    server: ServerThread, topic: str, docs: list[dict[str, Any]], name: str | None = None
) -> None:
    """Publish ``docs`` (json) from a raw connection and wait for its flush ack (every
    publish handled, so every queue delivery it caused is sent)."""
    with RawClient(server.tcp_port) as raw:
        raw.logon(name or f"publisher-{next(_ids)}")
        for doc in docs:
            raw.send({"c": "p", "t": topic}, json.dumps(doc).encode())
        raw.send({"c": "flush", "cid": "f", "a": "processed"})
        raw.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == "f")


def bodies(deliveries: list[tuple[dict[str, Any], bytes]]) -> list[Any]:
    return [json.loads(body) for _hdr, body in deliveries]


QUEUE_XML = """<AMPSConfig>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>
  <Queue><Name>work</Name><MessageType>json</MessageType>
    <UnderlyingTopic>orders</UnderlyingTopic>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
</SOW></AMPSConfig>"""
"""A server process config: a journaled topic ``orders`` under the queue ``work``."""


def publish_durably(server: ServerProcess, first: int, count: int) -> None:
    """Publish ``{"n": first..first+count-1}`` to ``orders`` and wait for the persisted ack."""
    with RawClient(server.tcp_port) as raw:
        raw.logon(f"publisher-{first}")
        for n in range(first, first + count):
            raw.send(
                {"c": "p", "t": "orders", "a": "persisted", "s": n + 1},
                json.dumps({"n": n}).encode(),
            )
        end = first + count
        raw.recv_until(lambda h: h.get("a") == "persisted" and int(h.get("s", 0)) >= end)
