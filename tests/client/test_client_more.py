"""More client behaviour against the real server: delete by keys and by data, the last-chance
handler, and the heartbeat idle timeout closing a connection to a frozen server."""

from __future__ import annotations

import json
import os
import signal
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.server import ServerConnection, serve

from ampsclient import Client, ConnectionEvent, ConnectionState, Message
from ampsclient.exceptions import DisconnectedError
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration
TOPIC = "/ADMIN/bookmark_store"


def sub_ids(client: Client) -> list[str]:
    return sorted(
        m.json()["subId"] for m in client.sow(TOPIC, timeout=5000) if m.get_command() == "sow"
    )


def test_sow_delete_by_keys_and_by_data(server: Any) -> None:
    with Client("deleter") as client:
        client.connect(server.uri("tcp", "json"))
        client.logon(5000)
        for name in ("a", "b", "c", "d"):
            client.publish(TOPIC, {"clientName": "k", "subId": name, "bookmark": "0"})
        client.flush(5000)
        keys = {
            m.json()["subId"]: m.get_sow_key()
            for m in client.sow(TOPIC, timeout=5000)
            if m.get_command() == "sow"
        }
        stats = client.sow_delete_by_keys(TOPIC, [keys["a"], keys["b"]])
        assert isinstance(stats, Message)
        assert stats.get_records_deleted() == 2
        assert sub_ids(client) == ["c", "d"]
        stats = client.sow_delete_by_data(TOPIC, {"clientName": "k", "subId": "c", "bookmark": "x"})
        assert isinstance(stats, Message)
        assert stats.get_records_deleted() == 1
        assert sub_ids(client) == ["d"]


def test_last_chance_handler_gets_unrouted_acks(server: Any) -> None:
    unrouted: list[Message] = []
    with Client("last-chance") as client:
        client.set_last_chance_message_handler(unrouted.append)
        client.connect(server.uri("tcp", "json"))
        client.logon(5000)
        # a persisted ack nobody asked a publish store for goes to the last-chance handler
        client.publish("lc", "{}")
        from ampsclient import Command

        cmd = Command("p").set_topic("lc").set_data("{}").set_sequence(7).add_ack_type("persisted")
        client.execute_async(cmd)
        client.flush(5000)
        wait_for(lambda: any(m.get_command() == "ack" for m in unrouted), what="the ack")
        ack = next(m for m in unrouted if m.get_command() == "ack")
        assert ack.get_ack_type() == "persisted"


@pytest.mark.serial
def test_heartbeat_timeout_closes_a_connection_to_a_frozen_server(tmp_path: Path) -> None:
    events: list[ConnectionEvent] = []
    with ServerProcess(data_dir=tmp_path / "s") as server, Client("hb-timeout") as client:
        client.add_connection_state_listener(events.append)
        client.connect(server.uri())
        client.logon(5000)
        client.set_heartbeat(0.5, 1.0)
        stream = client.subscribe("quiet")
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)  # the server goes silent, the socket stays open
        try:
            started = time.monotonic()
            wait_for(lambda: not client.connected, timeout=5, what="the heartbeat timeout")
            assert time.monotonic() - started < 3.0
        finally:
            os.kill(server.pid, signal.SIGCONT)
        with pytest.raises(DisconnectedError, match="heartbeat"):
            next(iter(stream))
        disconnects = [e for e in events if e.state is ConnectionState.DISCONNECTED]
        assert disconnects and "heartbeat" in str(disconnects[0].cause)


def test_ws_client_joins_fragmented_messages_and_sees_the_close() -> None:
    """A WebSocket peer that fragments its messages and then closes: our client assembles
    every message, delivers in order, and reports the disconnect."""

    def amps(ws: ServerConnection) -> None:
        assert ws.recv(timeout=5) == "text"
        count = ws.recv(timeout=5)
        assert isinstance(count, bytes) and struct.unpack("<I", count) == (1,)
        logon = json.loads(ws.recv(timeout=5))
        ack = json.dumps({"c": "ack", "a": "processed", "cid": logon["cid"], "status": "success"})
        ws.send(iter([ack[:7], ack[7:20], ack[20:]]))
        assert struct.unpack("<I", ws.recv(timeout=5)) == (1,)
        sub = json.loads(ws.recv(timeout=5))
        ws.send(json.dumps({"c": "ack", "a": "processed", "cid": sub["cid"], "status": "success"}))
        for i in range(50):
            header = json.dumps({"c": "p", "t": "frag", "sids": sub["sub_id"]})
            ws.send(iter([header[:5], header[5:]]) if i % 2 else header)
            body = json.dumps({"i": i})
            ws.send(iter([body[:3], body[3:]]) if i % 3 else body)
        ws.close()

    with serve(amps, "127.0.0.1", 0) as server:
        port = server.socket.getsockname()[1]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        states: list[ConnectionState] = []
        got: list[tuple[str, dict[str, Any]]] = []
        with Client("frag-client") as client:
            client.add_connection_state_listener(lambda e: states.append(e.state))
            client.connect(f"ws://127.0.0.1:{port}/amps/json")
            client.logon(5000)
            client.subscribe(lambda m: got.append((m.get_topic(), m.json())), "frag", sub_id="f")
            wait_for(lambda: ConnectionState.DISCONNECTED in states, what="the peer's close")
        assert got == [("frag", {"i": i}) for i in range(50)]
        server.shutdown()
