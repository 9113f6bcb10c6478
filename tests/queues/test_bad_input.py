"""Bad queue input, over real sockets: the reason strings AMPS clients map (protocol.md §6),
the connection kept, nothing lost (the queue still delivers every message afterwards)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, bodies, publish, start

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.queues.config import QueueConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    thread = start(
        tmp_path,
        QueueConfig(name="work", message_type="json", max_per_subscription_backlog=5),
        QueueConfig(name="once", message_type="json", semantics="at-most-once"),
    )
    try:
        yield thread
    finally:
        thread.stop()


def stats(server: ServerThread, name: str = "work") -> dict[str, Any]:
    return server.call(lambda: server.broker.queues.statistics()[name])  # type: ignore[union-attr]


def ack(c: Consumer, topic: str, bookmarks: str, **fields: Any) -> dict[str, Any]:
    result = c.ack(topic, bookmarks, a="processed", **fields)
    assert result is not None
    return result


def test_unknown_and_already_acked_bookmarks(server: ServerThread) -> None:
    c = Consumer(server)
    c.subscribe("work", o="max_backlog=5")
    publish(server, "work", [{"n": 0}, {"n": 1}])
    first, second = c.sync()
    assert ack(c, "work", first[0]["bm"])["status"] == "success"
    # acked again: the journal knows it, so it is ignored, not remembered
    assert ack(c, "work", first[0]["bm"])["status"] == "success"
    assert stats(server)["deferred_ack_count"] == 0
    # a bookmark the log never had: kept as a deferred ack (DeferredAckExpiration)
    assert ack(c, "work", "12345|99|")["status"] == "success"
    assert stats(server)["deferred_ack_count"] == 1
    # not a bookmark at all: ignored
    assert ack(c, "work", "garbage")["status"] == "success"
    # nothing lost: the second message is still leased, the next ones still come
    assert stats(server)["backlog"] == 1 and stats(server)["acked"] == 1
    publish(server, "work", [{"n": 2}])
    assert bodies(c.sync()) == [{"n": 2}]
    ack(c, "work", second[0]["bm"])
    assert stats(server)["acked"] == 2


def test_ack_on_a_topic_that_is_not_a_queue(server: ServerThread) -> None:
    c = Consumer(server)
    result = ack(c, "orders", "1|1|")
    assert (result["status"], result["reason"]) == ("failure", "invalid topic")
    c.subscribe("work")  # the connection is kept
    publish(server, "work", [{"n": 0}])
    assert bodies(c.sync()) == [{"n": 0}]


@pytest.mark.parametrize(
    ("option", "reason"),
    [("max_backlog=x", "invalid options"), ("max_backlog=0", "invalid options")],
)
def test_bad_max_backlog(server: ServerThread, option: str, reason: str) -> None:
    c = Consumer(server)
    c.raw.send(
        {"c": "subscribe", "t": "work", "sub_id": "b", "cid": "b", "a": "processed", "o": option}
    )
    result = c.wait_ack("b")
    assert (result["status"], result["reason"]) == ("failure", reason)
    assert c.subscribe("work", sub_id="good")["status"] == "success"  # connection kept


def test_unknown_ack_option_and_empty_bookmark_list(server: ServerThread) -> None:
    c = Consumer(server)
    c.subscribe("work")
    publish(server, "work", [{"n": 0}])
    ((hdr, _),) = c.sync()
    result = ack(c, "work", hdr["bm"], o="foo")
    assert (result["status"], result["reason"]) == ("failure", "invalid options")
    result = ack(c, "work", ",")
    assert (result["status"], result["reason"]) == ("failure", "invalid bookmark")
    assert stats(server)["backlog"] == 1  # still leased, nothing lost
    ack(c, "work", hdr["bm"])
    assert stats(server)["acked"] == 1


def test_cancel_on_at_most_once_has_no_effect(server: ServerThread) -> None:
    c = Consumer(server)
    c.subscribe("once")
    publish(server, "once", [{"n": 0}, {"n": 1}])
    ((hdr, _),) = c.sync()
    assert ack(c, "once", hdr["bm"], o="cancel")["status"] == "success"
    # no redelivery of 0 (it left the queue when sent); the freed slot takes 1
    assert bodies(c.deliveries) == [{"n": 0}, {"n": 1}]
    assert stats(server, "once")["returned"] == 0
