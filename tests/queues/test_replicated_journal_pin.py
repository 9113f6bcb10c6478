"""Issue #32: a replicated queue's transfer notice of a message that already went through the
queue here (acknowledged before the notice arrived) pinned the journal at the notice for
``DeferredAckExpiration`` (a day): no journal file of a 30-minute replicated soak was removed.
AMPS removes a journal file once every queue message in it is delivered and acknowledged
("Manage Transaction Log Journal Files", docs.crankuptheamps.com amps-configuration-guide
actions do-manage-journal); a transfer of a message still to come keeps its record."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from _queue_support import Consumer, publish
from _replicated_support import QUEUE, TOPIC, pair, stats, wait_stat

from ampsclient_server_stub.cluster import ClusterNode
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration


def _first_bookmark(node: ClusterNode) -> str:
    """The bookmark of the first message journaled on the underlying topic (a replay)."""
    with RawClient(node.tcp_port) as raw:
        raw.logon("reader")
        raw.send({"c": "subscribe", "t": TOPIC, "sub_id": "r", "bm": "0", "cid": "r"})
        hdr, _ = raw.recv_until(lambda h: h.get("c") == "p", timeout=15)
    return str(hdr["bm"])


def _point(node: ClusterNode) -> int:
    path = node.journal_dir / f"{node.name}.queues.ack"
    return int(json.loads(path.read_text())[f"json/{QUEUE}"])


def test_transfer_of_an_acknowledged_message_does_not_pin_the_journal(tmp_path: Path) -> None:
    cluster = pair(tmp_path)
    try:
        a, b = cluster.node("A"), cluster.node("B")
        publish(b, TOPIC, [{"id": "m"}])  # type: ignore[arg-type]
        wait_stat(a, "messages", 1)  # B owns it; A holds its copy
        bookmark = _first_bookmark(a)
        pid_b = b.pid
        assert pid_b is not None
        consumer = Consumer(a)  # type: ignore[arg-type]
        os.kill(pid_b, signal.SIGSTOP)  # B answers A's request only after A's ack
        try:
            consumer.subscribe(QUEUE, o="max_backlog=10")  # room: A asks B for the message
            wait_for(lambda: stats(a)["transfer_requested"] >= 1, timeout=20, what="request")
            with RawClient(a.tcp_port) as raw:  # acknowledged on A before B's grant
                raw.logon("acker")
                raw.send(
                    {
                        "c": "sow_delete",
                        "t": QUEUE,
                        "bookmark": bookmark,
                        "cid": "k",
                        "a": "processed",
                    }
                )
                raw.recv_until(lambda h: h.get("cid") == "k")
            wait_stat(a, "messages", 0)
        finally:
            os.kill(pid_b, signal.SIGCONT)
        wait_stat(b, "transferred_out", 1)  # B granted it: its notice reaches A
        wait_for(lambda: _notice(a, bookmark) is not None, timeout=20, what="the grant on A")
        grant = _notice(a, bookmark)
        assert grant is not None
        publish(a, TOPIC, [{"id": "n"}])  # type: ignore[arg-type]
        ((hdr, _),) = consumer.wait_deliveries(1, timeout=20)
        consumer.ack(QUEUE, hdr["bm"], a="processed")
        wait_stat(a, "messages", 0)
        consumer.close()
        a.stop()
        # the queue is empty: its ack point (the journal pin) is past the grant
        assert _point(a) > grant
    finally:
        cluster.stop()


def _notice(node: ClusterNode, bookmark: str) -> int | None:
    """The journal index of the transfer notice of ``bookmark`` on ``node`` (None: none)."""
    for record in node.journal_records():
        fields = record.fields or {}
        if record.command == "sow_delete" and "qown" in fields and bookmark in str(fields["bm"]):
            return record.index
    return None


def test_an_unacknowledged_message_keeps_its_journal_file(tmp_path: Path) -> None:
    cluster = pair(tmp_path)
    try:
        a, b = cluster.node("A"), cluster.node("B")
        publish(b, TOPIC, [{"id": "kept"}])  # type: ignore[arg-type]
        wait_stat(a, "messages", 1)  # owned by B, not acknowledged anywhere
        publish(a, TOPIC, [{"id": "done"}])  # type: ignore[arg-type]
        consumer = Consumer(a)  # type: ignore[arg-type]
        consumer.subscribe(QUEUE, o="max_backlog=10", filter="/id = 'done'")
        ((hdr, body),) = consumer.wait_deliveries(1, timeout=20)
        assert json.loads(body) == {"id": "done"}
        consumer.ack(QUEUE, hdr["bm"], a="processed")
        wait_stat(a, "messages", 1)
        assert stats(a)["owned"] == 0  # "kept" is still B's, never asked for
        consumer.close()
        a.stop()
        kept = next(r.index for r in a.journal_records() if b'"kept"' in r.payload)
        assert _point(a) <= kept  # the journal stays pinned at the unacknowledged message
    finally:
        cluster.stop()
