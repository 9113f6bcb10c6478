"""Views over a queue, over real sockets: a ``<View>`` whose ``UnderlyingTopic`` is a queue
aggregates the messages available in it. A ``sow`` query and a ``sow_and_subscribe`` of the
view lease nothing; when a consumer leases messages they leave the view (their group record
changes, an emptied group goes out of focus), when the leases come back so do they; message by
message, checked against the frames each subscriber receives."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, publish, stats

from ampsclient.protocol.header import decode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

CONFIG = """<AMPSConfig><Name>v</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>
  <Queue><Name>work</Name><MessageType>json</MessageType>
    <UnderlyingTopic>orders</UnderlyingTopic>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  {view}
</SOW></AMPSConfig>"""

VIEW = """<View><Name>by_kind</Name><MessageType>json</MessageType>
    <UnderlyingTopic>work</UnderlyingTopic>
    <Projection><Field>/kind</Field><Field>COUNT(/id) AS /waiting</Field>
      <Field>SUM(/qty) AS /qty</Field><Field>MAX(/id) AS /newest</Field></Projection>
    <Grouping><Field>/kind</Field></Grouping></View>"""

_cids = itertools.count(1)


def run(tmp_path: Path, view: str = VIEW) -> ServerThread:
    cfg = parse_config(CONFIG.format(view=view), base_dir=tmp_path)
    return ServerThread(cfg, fsync="never").start()


def frames_until_marker(c: Consumer) -> list[tuple[dict[str, Any], bytes]]:
    """Every frame (acks excepted) received before a ``flush`` ack sent now."""
    cid = f"mark-{next(_cids)}"
    c.raw.send({"c": "flush", "cid": cid, "a": "processed"})
    out: list[tuple[dict[str, Any], bytes]] = []
    while True:
        hdr, body = c.raw.recv(10.0)
        if hdr.get("c") == "ack":
            if hdr.get("cid") == cid:
                return out
            continue
        out.append((hdr, body))


def sow_records(frames: list[tuple[dict[str, Any], bytes]]) -> dict[str, Any]:
    """``kind -> record`` of the ``sow`` frames (each record keyed by its ``k``)."""
    out = {}
    for hdr, body in frames:
        if hdr.get("c") != "sow":
            continue
        pos = 0
        while pos < len(body):
            inner, end = decode_header(body[pos:])
            length = int(inner["l"])
            record = json.loads(body[pos + end : pos + end + length])
            out[record["kind"]] = record
            pos += end + length
    return out


def updates(frames: list[tuple[dict[str, Any], bytes]]) -> list[tuple[str, Any]]:
    return [(h["c"], json.loads(b)) for h, b in frames if h.get("c") in ("p", "oof")]


ORDERS = [
    {"id": 1, "kind": "a", "qty": 10},
    {"id": 2, "kind": "a", "qty": 20},
    {"id": 3, "kind": "b", "qty": 5},
    {"id": 4, "kind": "a", "qty": 30},
]


def test_the_view_follows_what_is_available_and_leases_nothing(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        publish(server, "orders", ORDERS)
        watcher = Consumer(server)
        watcher.raw.send(
            {
                "c": "sow_and_subscribe",
                "t": "by_kind",
                "sub_id": "w",
                "query_id": "w",
                "o": "oof",
                "a": "processed",
            }
        )
        first = frames_until_marker(watcher)
        assert sow_records(first) == {
            "a": {"kind": "a", "waiting": 3, "qty": 60, "newest": 4},
            "b": {"kind": "b", "waiting": 1, "qty": 5, "newest": 3},
        }
        s = stats(server)
        assert (s["queue_depth"], s["backlog"]) == (4, 0)  # the view leased nothing

        worker = Consumer(server)
        worker.subscribe("work", o="max_backlog=2")  # leases ids 1 and 2 (kind a)
        leased = worker.sync()
        assert [json.loads(b)["id"] for _h, b in leased] == [1, 2]
        assert updates(frames_until_marker(watcher)) == [
            ("p", {"kind": "a", "waiting": 1, "qty": 30, "newest": 4})
        ]
        worker.ack("work", ",".join(h["bm"] for h, _ in leased))  # 1, 2 gone; 3, 4 leased
        worker.sync()
        gone = updates(frames_until_marker(watcher))
        assert sorted(gone, key=lambda u: u[1]["kind"]) == [
            ("oof", {"kind": "a", "waiting": 1, "qty": 30, "newest": 4}),
            ("oof", {"kind": "b", "waiting": 1, "qty": 5, "newest": 3}),
        ]
        worker.close()  # its leases (3 and 4) come back to the queue, and to the view
        publish(server, "orders", [{"id": 5, "kind": "c", "qty": 1}])
        back = updates(frames_until_marker(watcher))
        assert sorted(back, key=lambda u: u[1]["kind"]) == [
            ("p", {"kind": "a", "waiting": 1, "qty": 30, "newest": 4}),
            ("p", {"kind": "b", "waiting": 1, "qty": 5, "newest": 3}),
            ("p", {"kind": "c", "waiting": 1, "qty": 1, "newest": 5}),
        ]
        query = Consumer(server)
        query.raw.send({"c": "sow", "t": "by_kind", "query_id": "q", "filter": "/kind = 'a'"})
        assert sow_records(frames_until_marker(query)) == {
            "a": {"kind": "a", "waiting": 1, "qty": 30, "newest": 4}
        }
        assert stats(server)["backlog"] == 0
        # orderby as on a SOW topic: a bad one refused, a good one orders the records (#27)
        query.raw.send({"c": "sow", "t": "by_kind", "cid": "o", "a": "processed", "orderby": "/"})
        hdr, _ = query.raw.recv(10.0)
        assert (hdr["status"], hdr["reason"]) == ("failure", "invalid order by")
        query.raw.send(
            {"c": "sow", "t": "by_kind", "query_id": "o", "orderby": "/qty", "o": "top_n=2"}
        )
        kinds = [
            json.loads(b[decode_header(b)[1] :])["kind"]
            for h, b in frames_until_marker(query)
            if h.get("c") == "sow"
        ]
        assert kinds == ["c", "b"]  # qty 1, 5 (a: 30 is third)
    finally:
        server.stop()


def test_a_filtered_subscription_to_the_view(tmp_path: Path) -> None:
    server = run(tmp_path)
    try:
        watcher = Consumer(server)
        watcher.raw.send(
            {"c": "subscribe", "t": "by_kind", "sub_id": "w", "filter": "/waiting > 1", "o": "oof"}
        )
        publish(server, "orders", ORDERS[:2])  # a: 1, then 2 waiting
        got = updates(frames_until_marker(watcher))
        assert got == [("p", {"kind": "a", "waiting": 2, "qty": 30, "newest": 2})]
        worker = Consumer(server)
        worker.subscribe("work", o="max_backlog=1")  # a: 1 waiting: out of the filter
        worker.sync()
        assert updates(frames_until_marker(watcher)) == [
            ("oof", {"kind": "a", "waiting": 2, "qty": 30, "newest": 2})
        ]
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("view", "message"),
    [
        (
            VIEW.replace("<UnderlyingTopic>work", "<UnderlyingTopic>orders"),
            "is not a queue, SOW topic",
        ),
        (VIEW.replace("</Grouping>", "</Grouping><Join>x</Join>"), "<Join> in <View> is not impl"),
        (VIEW.replace("<Grouping><Field>/kind</Field></Grouping>", ""), "has no <Grouping>"),
        (VIEW.replace("COUNT(/id) AS /waiting", "COUNT(/id) + 1 AS /w"), "inside a larger"),
        (VIEW.replace("COUNT(/id) AS /waiting", "COUNT(/id)"), "needs 'AS /path'"),
        (VIEW.replace("<Name>by_kind", "<Name>work"), "has the name of a queue"),
        (VIEW.replace("</Grouping>", "</Grouping><Colour>red</Colour>"), "not a view element"),
    ],
)
def test_bad_views_are_refused(tmp_path: Path, view: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(CONFIG.format(view=view), base_dir=tmp_path)


def test_unsubscribe_and_disconnect_end_view_subscriptions(tmp_path: Path) -> None:
    server = run(tmp_path)

    def subscribers() -> int:
        views = server.broker.queues.views  # type: ignore[union-attr]
        return len(views.views[("json", "by_kind")].subs)  # type: ignore[union-attr]

    try:
        a, b = Consumer(server), Consumer(server)
        for c in (a, b):
            c.raw.send({"c": "subscribe", "t": "by_kind", "sub_id": "w"})
            frames_until_marker(c)
        assert server.call(subscribers) == 2
        a.raw.send({"c": "unsubscribe", "sub_id": "w"})
        frames_until_marker(a)
        b.close()
        wait_for(lambda: server.call(subscribers) == 0, 10, "both view subscriptions ended")
        publish(server, "orders", ORDERS[:1])  # the view changes with nobody to tell
        a.raw.send({"c": "sow", "t": "by_kind", "query_id": "q"})
        assert sow_records(frames_until_marker(a)) == {
            "a": {"kind": "a", "waiting": 1, "qty": 10, "newest": 1}
        }
        assert updates(frames_until_marker(a)) == []  # (no update after the unsubscribe)
    finally:
        server.stop()
