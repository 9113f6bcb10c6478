"""Helpers of the Spark tests: publish test data, read the journal through our own Client."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ampsclient.command import Command
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import Client, HAClient


def publish(
    uri: str,
    topic: str,
    docs: Sequence[dict[str, Any]],
    *,
    chunks: int = 1,
    gap: float = 0.0,
    name: str | None = None,
) -> None:
    """Publish ``docs`` (JSON) reliably, in ``chunks`` with ``gap`` seconds between them."""
    with HAClient(name or f"pub-{uuid.uuid4().hex[:8]}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        size = max(1, -(-len(docs) // chunks))
        for i in range(0, len(docs), size):
            if i and gap:
                time.sleep(gap)
            for doc in docs[i : i + size]:
                client.publish(topic, json.dumps(doc, separators=(",", ":")))
            client.publish_flush(30_000)


def journal(uri: str, topic: str, bookmark: str = "0") -> list[dict[str, Any]]:
    """What an EPOCH (or ``bookmark``) replay through our Client returns, up to the log's end."""
    out: list[dict[str, Any]] = []
    with Client(f"check-{uuid.uuid4().hex[:8]}") as client:
        client.connect_and_logon(uri)
        if ":" not in bookmark:
            bookmark = f"[{bookmark}:0|1|]" if bookmark == "0" else f"({bookmark}:0|1|]"
        cmd = (
            Command("subscribe")
            .set_topic(topic)
            .set_bookmark(bookmark)
            .set_options("timestamp")
            .add_ack_type("completed")
        )
        stream = client.execute(cmd)
        try:
            for m in stream:
                if m.command == "ack":
                    break
                bm = m.bookmark or ""
                pid, seq = bm.split("|")[:2]
                out.append(
                    {
                        "topic": m.topic,
                        "bookmark": bm,
                        "publisher_id": int(pid),
                        "sequence": int(seq),
                        "timestamp": m.timestamp,
                        "sow_key": m.sow_key,
                        "correlation_id": m.correlation_id,
                        "data": m.get_data(),
                    }
                )
        finally:
            stream.close()
    return out
