"""Read what an instance's transaction log holds for a topic, over its client interface."""

from __future__ import annotations

import threading
import time

from ampsclient import Client, Command, Message

__all__ = ["read_log"]


def read_log(uri: str, topic: str, *, timeout: float = 30.0) -> list[tuple[str, bytes]]:
    """``(bookmark, body)`` of every message of ``topic`` in the log of the instance at
    ``uri``, in its order: a bookmark subscription from EPOCH up to the ``completed`` ack.

    Raises:
        AssertionError: no ``completed`` ack within ``timeout`` seconds.
    """
    items: list[tuple[str, bytes]] = []
    done = threading.Event()

    def on(message: Message) -> None:
        if message.get_command() == "ack":
            if message.get_ack_type() == "completed":
                done.set()
            return
        items.append((message.get_bookmark() or "", bytes(message.get_data_raw())))

    with Client(f"log-reader-{time.time_ns()}") as client:
        client.connect(uri)
        client.logon(5000)
        cmd = Command("subscribe").set_topic(topic).set_bookmark("0").add_ack_type("completed")
        client.execute_async(cmd, on)
        if not done.wait(timeout):
            raise AssertionError(f"no completed ack from the EPOCH replay on {uri}")
    return items
