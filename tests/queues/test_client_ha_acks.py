"""This project's HAClient acking queue messages through its publish store: acks ask for
``persisted`` acks, and an ack the server never got is replayed after a reconnect *with its
options*, so a ``cancel`` stays a cancel (the official HAClient replays it as a plain ack,
which would remove a message the application gave back). The server is killed with
``kill -9`` while the cancel is in flight and restarted."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from _queue_support import QUEUE_XML, publish_durably

import ampsclient
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for
from ampsclient_server_stub.testing.proxy import LoopbackProxy

pytestmark = pytest.mark.integration


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


def test_acks_are_persisted_and_a_cancel_is_replayed_as_a_cancel(tmp_path: Path) -> None:
    config = tmp_path / "queues.xml"
    config.write_text(QUEUE_XML)
    server = ServerProcess(data_dir=tmp_path / "data", config=config, name="Q")
    server.start()
    proxy = LoopbackProxy("127.0.0.1", server.tcp_port, record=True).start()
    seen: list[tuple[int, str]] = []
    lock = threading.Lock()
    cancel_sent = threading.Event()

    def on_message(message: Any) -> None:
        n = json.loads(message.data)["n"]
        with lock:
            seen.append((n, message.bookmark))
            first = len(seen) == 1
        if first:
            proxy.stall(60)  # what the client writes now stays in the proxy
            cancel_sent.set()
            raise RuntimeError("give it back")  # auto-ack: cancel

    client = ampsclient.HAClient("ours-queue-ha")
    client.set_server_chooser(chooser := ampsclient.DefaultServerChooser())
    chooser.add(f"tcp://127.0.0.1:{proxy.port}/amps/json")
    try:
        client.connect_and_logon()
        client.set_auto_ack(True)
        client.subscribe(on_message, "work", max_backlog=10)
        publish_durably(server, 0, 1)
        wait_for(cancel_sent.is_set, 20, "the first delivery")
        wait_for(lambda: client.unpersisted_count == 1, 10, "the cancel stored")
        server.kill()  # kill -9: the cancel never reached it
        server.start()
        proxy.cut()  # the held bytes go with the old connection
        proxy.resume()
        wait_for(lambda: len(seen) == 2, 30, "the message again after the restart")
        wait_for(lambda: client.unpersisted_count == 0, 10, "the last ack persisted")
        publish_durably(server, 1, 1)  # a marker: the next delivery is the next message
        wait_for(lambda: len(seen) == 3, 20, "the marker")
        wait_for(lambda: client.unpersisted_count == 0, 10, "the marker's ack persisted")
    finally:
        client.close()
        proxy.stop()
        server.kill()
    with lock:
        assert [n for n, _ in seen] == [0, 0, 1]  # given back, so delivered again, once
        first_bm = seen[0][1]
    acks = [f for f in frames(proxy.upstream or b"") if f.get("c") == "sow_delete"]
    assert all(f["a"] == "persisted" and f["cid"] == "AMPS-queue-ack" for f in acks)
    # the replayed cancel (sent after the restart, before the resubscribe), then the acks
    assert [(f["bookmark"], f.get("o")) for f in acks[:1]] == [(first_bm, "cancel")]
    assert [f.get("o") for f in acks[1:]] == [None, None]
    seqs = [int(f["s"]) for f in acks]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
