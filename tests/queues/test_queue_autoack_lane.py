"""The auto-ack handler (C ``AutoAck`` with the speedups, ``acks.AutoAckCall`` without)
against a real server while another thread flushes the ack batches all the time (each
flush takes the batches away under their lock while the handler keeps adding to them).
On the wire each message is acked exactly once, in batches no bigger than the limit.
(The C handler's step aside while another thread holds the lock is shown deterministically
in ``tests/test_speedups.py``; here the flusher holds it too briefly to be seen.)"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from _queue_support import publish
from test_client_acks import frames

import ampsclient
from ampsclient import _accel
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import wait_for
from ampsclient_server_stub.testing.proxy import LoopbackProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def work_backlog() -> int:
    return 40


def stats(server: ServerThread) -> dict[str, Any]:
    return server.call(lambda: server.broker.queues.statistics()["work"])  # type: ignore[union-attr]


@pytest.mark.parametrize("implementation", ["c", "python"])
def test_auto_ack_with_a_thread_flushing_acks_each_message_once(
    server: ServerThread, implementation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if implementation == "c" and _accel.AutoAck is None:
        pytest.skip("the C speedups are not in use here")
    if implementation == "python":
        monkeypatch.setattr(_accel, "AutoAck", None)
    count = 600
    seen: list[int] = []
    done = threading.Event()

    def on_message(message: Any) -> None:
        seen.append(json.loads(message.data)["n"])

    with LoopbackProxy("127.0.0.1", server.tcp_port, record=True) as proxy:
        client = ampsclient.Client(f"autoack-{implementation}")
        client.connect(f"tcp://127.0.0.1:{proxy.port}/amps/json")
        client.logon()
        client.set_auto_ack(True)
        client.set_ack_batch_size(10)
        client.set_ack_timeout(100)

        def flusher() -> None:
            while not done.is_set():
                client.flush_acks()  # takes the batches' lock, again and again
                done.wait(0.0005)

        thread = threading.Thread(target=flusher)
        try:
            command = ampsclient.Command("subscribe").set_topic("work")
            client.execute_async(command.set_options("max_backlog=30"), on_message)
            thread.start()
            publish(server, "work", [{"n": i} for i in range(count)])
            wait_for(lambda: stats(server)["acked"] == count, 30, f"{count} acked")
        finally:
            done.set()
            if thread.is_alive():
                thread.join(30)
            client.close()
        acks = [f for f in frames(proxy.upstream or b"") if f.get("c") == "sow_delete"]
    batches = [str(f["bookmark"]).split(",") for f in acks]
    plain = [bm for batch in batches for bm in batch]
    assert all(not f.get("o") for f in acks)  # no handler raised: no cancel
    assert len(plain) == len(set(plain)) == count  # each message acked once, none twice
    assert max(len(b) for b in batches) <= 10
    assert sorted(seen) == list(range(count))  # each delivered once
    final = stats(server)
    assert final["queue_depth"] == 0 and final["backlog"] == 0


@pytest.mark.parametrize("kind", ["Client", "HAClient"])
@pytest.mark.parametrize("implementation", ["c", "python"])
def test_an_auto_ack_goes_out_while_the_next_message_is_handled(
    server: ServerThread, implementation: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ack a handler's return completes is written at once, not after the handlers of
    the rest of the read (the server leases the next messages meanwhile): the server has
    the first message's ack while the second message's handler still runs. The HA client's
    acks (stored, asking for ``persisted``) go out the same way."""
    if implementation == "c" and _accel.AutoAck is None:
        pytest.skip("the C speedups are not in use here")
    if implementation == "python":
        monkeypatch.setattr(_accel, "AutoAck", None)
    seen: list[int] = []
    acked_during_second: list[int] = []

    def on_message(message: Any) -> None:
        seen.append(json.loads(message.data)["n"])
        if len(seen) == 2:
            wait_for(lambda: stats(server)["acked"] >= 1, 10, "the first ack at the server")
            acked_during_second.append(stats(server)["acked"])

    uri = f"tcp://127.0.0.1:{server.tcp_port}/amps/json"
    client: Any
    if kind == "HAClient":
        client = ampsclient.HAClient("autoack-now-ha")
        client.set_server_chooser(chooser := ampsclient.DefaultServerChooser())
        chooser.add(uri)
    else:
        client = ampsclient.Client("autoack-now")
    with client:
        if kind == "HAClient":
            client.connect_and_logon()
        else:
            client.connect(uri)
            client.logon()
        client.set_auto_ack(True)
        client.set_ack_batch_size(1)
        publish(server, "work", [{"n": 0}, {"n": 1}])  # then both leased in one write
        wait_for(lambda: stats(server)["queue_depth"] == 2, 10, "both queued")
        command = ampsclient.Command("subscribe").set_topic("work")
        client.execute_async(command.set_options("max_backlog=2"), on_message)
        wait_for(lambda: stats(server)["acked"] == 2, 10, "both acked")
    assert seen == [0, 1]
    assert acked_during_second == [1]
