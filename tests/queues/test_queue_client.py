"""This project's client (``ampsclient``) consuming queues of the reference server: auto-ack
with batches, a raising handler (cancelled, redelivered), ``Message.ack("cancel")``,
``Client.ack(topic, bookmark)``, the sync stream with auto-ack, and acks still pending at
``close`` sent first."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from _queue_support import connect, publish, stats

import ampsclient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


class Seen:
    def __init__(self, raise_on: int | None = None) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[int, str]] = []
        self.raise_on = raise_on
        self.raised = False

    def __call__(self, message: Any) -> None:
        n = json.loads(message.data)["n"]
        with self.lock:
            self.items.append((n, message.bookmark))
        if n == self.raise_on and not self.raised:
            self.raised = True
            raise RuntimeError("handler failed")

    def ns(self) -> list[int]:
        with self.lock:
            return [n for n, _ in self.items]


def test_auto_ack_batches_and_raising_handler(server: ServerThread) -> None:
    seen = Seen(raise_on=7)
    client = connect(server, "ours-auto")
    client.set_auto_ack(True)
    client.set_ack_batch_size(3)
    client.set_ack_timeout(100)
    try:
        command = ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=4")
        client.execute_async(command, seen)
        publish(server, "work", [{"n": i} for i in range(30)])
        wait_for(lambda: stats(server)["acked"] == 30, 20, "30 acked")
        ns = seen.ns()
        assert sorted(ns) == sorted([*range(30), 7])  # 7 cancelled by the raise, then again
        assert stats(server)["cancelled"] == 1 and stats(server)["backlog"] == 0
    finally:
        client.close()


def test_manual_acks_cancel_and_pending_acks_sent_at_close(server: ServerThread) -> None:
    held: list[Any] = []
    lock = threading.Lock()
    client = connect(server, "ours-manual")
    client.set_ack_batch_size(10)
    client.set_ack_timeout(60_000)  # only close() can send the batch in time

    def on_message(message: Any) -> None:
        with lock:
            held.append((json.loads(message.data)["n"], message.bookmark))
        if len(held) == 1:
            message.ack("cancel")

    publish(server, "work", [{"n": i} for i in range(4)])  # all queued before the subscribe
    command = ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=3")
    client.execute_async(command, on_message)
    wait_for(lambda: len(held) >= 4, 10, "the cancelled message again")
    assert [n for n, _ in held[:4]] == [0, 1, 2, 0]  # a returned message keeps its place
    for _n, bm in held[1:3]:
        # batched: below the batch size, and below the backlog the subscribe ack reports
        # (3), which caps a batch once that ack is in: pending either way
        client.ack("work", bm)
    assert stats(server)["acked"] == 0
    client.close()  # pending acks go out before the connection closes
    wait_for(lambda: stats(server)["acked"] == 2, 10, "acks sent at close")
    assert stats(server)["cancelled"] == 1 and stats(server)["queue_depth"] == 2


def test_stream_auto_ack(server: ServerThread) -> None:
    publish(server, "work", [{"n": i} for i in range(5)])
    client = connect(server, "ours-stream")
    client.set_auto_ack(True)
    try:
        seen = []
        command = ampsclient.Command("subscribe").set_topic("work").set_options("max_backlog=2")
        for message in client.execute(command):
            seen.append(json.loads(message.data)["n"])
            if len(seen) == 5:
                break
        assert seen == list(range(5))
        wait_for(lambda: stats(server)["acked"] >= 4, 10, "4 acked")  # the 5th is still held
    finally:
        client.close()
