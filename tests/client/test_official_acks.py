"""Acks that official scripts ask for, run with our client and (where installed) the official
one against the reference server: a publish asking for ``persisted`` through ``execute``
returns a stream that ends at once (AMPS conflates a publish's persisted acks by sequence
number, never by command id, so no persisted ack can reach the command), and a ``sow``'s
``stats`` ack reaches its stream or handler whether or not ``completed`` was asked for and
whichever of the two comes first."""

from __future__ import annotations

import dataclasses
import importlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.config_model import SowTopicConfig
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

CLIENTS = ["ampsclient", "AMPS"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    """A server with the SOW topic ``orders`` keyed by ``/id``."""
    config = default_config(tcp_port=0, ws_port=0, data_dir=tmp_path)
    orders = SowTopicConfig(topic="orders", message_type="json", keys=("/id",))
    config = dataclasses.replace(config, sow_topics=(*config.sow_topics, orders))
    thread = ServerThread(config, fsync="never").start()
    try:
        yield thread
    finally:
        thread.stop()


def connect(name: str, server: ServerThread, client_name: str) -> tuple[Any, Any]:
    amps: Any = pytest.importorskip("AMPS") if name == "AMPS" else importlib.import_module(name)
    client = amps.Client(client_name)
    client.connect(server.uri("tcp", "json"))
    client.logon()
    return amps, client


def read(stream: Any) -> list[str]:
    """What ``stream`` yields until it ends; a 3 s silence fails (the stream hung)."""
    out = []
    for message in stream.timeout(3000):
        assert message is not None, f"the stream did not end after {out}"
        command = message.get_command()
        out.append(command if command != "ack" else "ack:" + message.get_ack_type())
        if message.get_ack_type() == "stats":
            out.append(f"matches={message.get_matches()}")
    return out


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize(
    ("acks", "expected"),
    [
        ("persisted", []),  # before: the stream never ended
        ("processed,persisted", ["ack:processed"]),  # before: it hung after the processed ack
        ("processed", ["ack:processed"]),
    ],
)
def test_execute_of_a_publish_ends_without_its_persisted_ack(
    server: ServerThread, name: str, acks: str, expected: list[str]
) -> None:
    amps, client = connect(name, server, f"{name}-pub-acks")
    try:
        command = amps.Command("publish").set_topic("t").set_data("{}")
        for ack in acks.split(","):
            command.add_ack_type(ack)
        assert read(client.execute(command)) == expected
    finally:
        client.close()


SOW_CASES = [
    ("stats", ["ack:stats", "matches=3"]),  # before: no stats ack at all
    ("completed,stats", ["ack:completed", "ack:stats", "matches=3"]),  # before: no stats
    ("processed,stats", ["ack:stats", "matches=3"]),
    ("completed", ["ack:completed"]),
]


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize(("acks", "tail"), SOW_CASES)
def test_a_sow_stream_gets_its_stats_ack(
    server: ServerThread, name: str, acks: str, tail: list[str]
) -> None:
    amps, client = connect(name, server, f"{name}-sow-stats")
    try:
        for n in range(3):
            client.publish("orders", json.dumps({"id": n}))
        client.flush()
        command = amps.Command("sow").set_topic("orders")
        for ack in acks.split(","):
            command.add_ack_type(ack)
        got = [m for m in read(client.execute(command)) if m != "ack:processed"]
        assert got == ["group_begin", "sow", "sow", "sow", "group_end", *tail]
    finally:
        client.close()


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize(("acks", "tail"), SOW_CASES)
def test_a_sow_handler_gets_its_stats_ack(
    server: ServerThread, name: str, acks: str, tail: list[str]
) -> None:
    amps, client = connect(name, server, f"{name}-sow-stats-h")
    lock = threading.Lock()
    got: list[str] = []

    def handler(message: Any) -> None:  # the official Message is reused: copy what we need
        command = message.get_command()
        with lock:
            if command != "ack":
                got.append(command)
            elif message.get_ack_type() != "processed":
                got.append("ack:" + message.get_ack_type())
                if message.get_ack_type() == "stats":
                    got.append(f"matches={message.get_matches()}")

    try:
        for n in range(3):
            client.publish("orders", json.dumps({"id": n}))
        client.flush()
        command = amps.Command("sow").set_topic("orders")
        for ack in acks.split(","):
            command.add_ack_type(ack)
        client.execute_async(command, handler)
        expected = ["group_begin", "sow", "sow", "sow", "group_end", *tail]
        wait_for(lambda: len(got) >= len(expected), 10, f"{expected}, got {got}")
        client.flush()  # a marker: anything more would have arrived before its ack
        assert got == expected
    finally:
        client.close()


@pytest.mark.parametrize("name", CLIENTS)
def test_sow_and_delta_subscribe_drops_empty_deltas_by_default(
    server: ServerThread, name: str
) -> None:
    """``send_empties`` defaults to ``False`` (``no_empties`` sent), as in the official client:
    an unchanged re-publish yields nothing; ``send_empties=True`` lets its empty delta through."""
    _amps, client = connect(name, server, f"{name}-no-empties")
    try:
        client.publish("orders", json.dumps({"id": 1, "v": 0}))
        client.flush()
        for send_empties, expected in ((None, ['{"id":1,"v":2}']), (True, 2)):
            if send_empties is None:
                stream = client.sow_and_delta_subscribe("orders", timeout=5000)
            else:
                stream = client.sow_and_delta_subscribe("orders", send_empties=True, timeout=5000)
            client.publish("orders", json.dumps({"id": 1, "v": 0}))  # unchanged: an empty delta
            client.publish("orders", json.dumps({"id": 1, "v": 2}))  # a change: the marker
            updates = []
            for message in stream.timeout(5000):
                assert message is not None
                if message.get_command() in ("p", "publish"):
                    updates.append(message.get_data())
                    if '"v":2' in message.get_data():
                        break
            stream.close()
            if send_empties is None:
                assert updates == expected  # before: the empty delta came first
            else:
                assert len(updates) == expected and '"v":2' not in updates[0]
            client.publish("orders", json.dumps({"id": 1, "v": 0}))  # back for the next round
            client.flush()
    finally:
        client.close()
