"""A command handler that raises after its ``processed`` success ack went out.

AMPS sends one ``processed`` ack per command. The reference server's generic failure path
(``CommandHandlers.failed``) used to answer any handler exception with a second ``processed``
ack (``status=failure``, ``reason=internal error``), seen for an aggregated query (ab35714).
Now nothing more goes on the wire for that command, the error is logged once with the
command id and counted in ``failures``, and the connection and other clients carry on.

The fault is injected through the broker's dispatch table (``Broker.commands``, which tests
may replace an entry of): the real ``sow`` handler answers the query, then raises.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

TOPIC = "/ADMIN/bookmark_store"  # the default configuration's SOW topic


def record(sub_id: str) -> bytes:
    return json.dumps({"clientName": "late", "subId": sub_id, "bookmark": "x"}).encode()


def test_failure_after_processed_ack_sends_no_second_ack(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    broker = server.broker
    real_sow = broker.commands["sow"]

    def sow_then_raise(conn: Any, hdr: Any, payload: bytes, end: int) -> None:
        real_sow(conn, hdr, payload, end)
        if hdr.get("cid") == "boom":
            raise RuntimeError("injected after the processed ack")

    server.call(lambda: broker.commands.__setitem__("sow", sow_then_raise))
    caplog.set_level(logging.ERROR, logger="ampsclient_server_stub.engine.commands")
    failures_before = server.call(lambda: broker.counters["failures"])

    with RawClient(server.tcp_port, timeout=20.0) as raw:
        raw.logon("late")
        raw.send({"c": "p", "t": TOPIC}, record("a"))
        raw.send({"c": "sow", "t": TOPIC, "cid": "boom", "a": "processed,completed"})
        # the marker: a query on the same connection after the failed one
        raw.send({"c": "sow", "t": TOPIC, "cid": "m", "a": "processed,completed"})
        frames: list[dict[str, Any]] = []
        while True:
            hdr, _ = raw.recv(timeout=20.0)
            frames.append(hdr)
            if hdr.get("c") == "ack" and hdr.get("cid") == "m" and hdr.get("a") == "completed":
                break
    boom_acks = [
        (h["a"], h["status"]) for h in frames if h.get("c") == "ack" and h["cid"] == "boom"
    ]
    assert boom_acks == [("processed", "success"), ("completed", "success")]
    marker = [h for h in frames if h.get("cid") == "m" or h.get("query_id") == "m"]
    assert [h["a"] for h in marker if h.get("c") == "ack"] == ["processed", "completed"]
    assert [h for h in marker if h.get("c") == "sow"], "the marker query returns the record"

    # another client, our own, is unaffected
    with Client("other") as other:
        other.connect(server.uri("tcp", "json"))
        other.logon()
        other.publish(TOPIC, record("b").decode())
        sub_ids = sorted(
            m.json()["subId"] for m in other.sow(TOPIC, timeout=10000) if m.get_command() == "sow"
        )
    assert sub_ids == ["a", "b"]

    assert server.call(lambda: broker.counters["failures"]) == failures_before + 1
    logged = [r for r in caplog.records if "boom" in r.getMessage()]
    assert len(logged) == 1 and "after its processed ack" in logged[0].getMessage()
