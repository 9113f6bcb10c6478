"""Broker semantics by direct calls: fake sessions capture every payload the broker sends."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from ampsclient.protocol.bookmarks import publisher_id_for
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient.protocol.message import split_sow_batch
from ampsclient_server_stub.config import ConfigError, SowTopicConfig, default_config
from ampsclient_server_stub.engine.broker import (
    PERSISTED_ACK_BATCH,
    SERVER_VERSION,
    Broker,
    BrokerHooks,
    Connection,
)
from ampsclient_server_stub.engine.topics import compile_topic, is_regex_topic
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import ManualTime
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

Frame = tuple[dict[str, Any], bytes]


class Client:
    """One fake connection to the broker."""

    def __init__(
        self,
        broker: Broker,
        name: str | None = "c",
        *,
        message_type: str | None = None,
        logon: bool = True,
    ) -> None:
        self.broker = broker
        self.session = FakeSession()
        self.conn: Connection = broker.connect(self.session, message_type=message_type)
        if logon:
            hdr: dict[str, Any] = {"c": "logon", "cid": "L", "a": "processed"}
            if name is not None:
                hdr["client_name"] = name
            self.cmd(hdr)
            (ack,) = self.take()
            assert ack[0]["status"] == "success"

    def cmd(self, hdr: dict[str, Any], body: bytes = b"") -> None:
        self.broker.handle(self.conn, encode_header(hdr) + body)

    def take(self) -> list[Frame]:
        """Every frame sent since the last call; sow batches are expanded into records."""
        out: list[Frame] = []
        for payload in self.session.sent:
            hdr, end = decode_header(payload)
            if hdr.get("c") == "sow":
                outer, records = split_sow_batch(payload)
                out.append((outer, b""))
                out.extend((dict(r.header), r.data) for r in records)
            else:
                out.append((hdr, payload[end:]))
        self.session.sent.clear()
        return out

    def commands(self) -> list[str]:
        return [str(h.get("c")) for h, _ in self.take()]


@pytest.fixture
def timers() -> ManualTime:
    return ManualTime()


@pytest.fixture
def broker(timers: ManualTime) -> Iterator[Broker]:
    config = default_config(tcp_port=0, ws_port=0)
    config = dataclasses.replace(
        config,
        sow_topics=(
            *config.sow_topics,
            SowTopicConfig("orders", "json", keys=("/id",)),
            SowTopicConfig("orders_eu", "json", keys=("/id",)),
            SowTopicConfig("prices", "msgpack", keys=("/sym",)),
        ),
    )
    b = Broker(config, call_later=timers.call_later, clock=lambda: 1_800_000_000.25)
    yield b
    b.close()


def acks(frames: list[Frame]) -> list[dict[str, Any]]:
    return [h for h, _ in frames if h.get("c") == "ack"]


def pub(client: Client, topic: str, doc: Any, **extra: Any) -> None:
    client.cmd({"c": "p", "t": topic, **extra}, json.dumps(doc, separators=(",", ":")).encode())


# --------------------------------------------------------------------------- topics


def test_topic_matcher_exact_and_regex() -> None:
    assert not is_regex_topic("orders")
    assert is_regex_topic("orders.*")
    assert compile_topic("orders").matches("orders")
    assert not compile_topic("orders").matches("orders2")
    m = compile_topic("^ord(ers|x)$")
    assert m.is_regex and m.matches("orders") and m.matches("ordx")
    assert not m.matches("orders2")
    # re.search semantics: unanchored
    assert compile_topic("rde.").matches("orders")


# --------------------------------------------------------------------------- logon


def test_logon_ack_shape(broker: Broker) -> None:
    c = Client(broker, logon=False)
    c.cmd(
        {
            "c": "logon",
            "cid": "auto0",
            "client_name": "demo",
            "mt": "json",
            "a": "processed",
            "version": "5.3.5.14:python",
        }
    )
    raw = c.session.sent[0]
    (frame,) = c.take()
    hdr = frame[0]
    assert hdr == {
        "c": "ack",
        "cid": "auto0",
        "a": "processed",
        "s": 0,
        "status": "success",
        "client_name": "demo",
        "version": SERVER_VERSION,
        "bm": f"{publisher_id_for('demo')}|0|",
    }
    assert b'"s":0,' in raw  # bare int, never last
    assert c.conn.logged_on and c.conn.mt == "json"


def test_logon_required(broker: Broker) -> None:
    c = Client(broker, logon=False)
    c.cmd({"c": "subscribe", "t": "x", "cid": "1", "a": "processed"})
    (ack,) = acks(c.take())
    assert ack["status"] == "failure" and ack["reason"] == "logon required"
    assert ack["cid"] == "1"
    assert c.session.closed is None
    c.cmd({"c": "p", "t": "x"}, b"{}")  # nothing requested: disconnect
    assert c.session.closed is not None
    assert c.conn.closed


def test_same_name_without_a_txlog_keeps_both_connections(broker: Broker) -> None:
    """AMPS enforces unique client names only with a transaction log (this broker has none;
    ``tests/server/test_client_names.py`` has both cases over sockets)."""
    first = Client(broker, "same")
    first.cmd({"c": "subscribe", "t": "t", "sub_id": "s1"})
    second = Client(broker, "same")
    assert first.session.closed is None and second.session.closed is None
    pub(second, "t", {"a": 1})
    assert [h.get("t") for h, _ in first.take() if h.get("c") == "p"] == ["t"]
    assert broker.connection_for("same") is second.conn


def test_logon_options_and_auth_hook(broker: Broker) -> None:
    c = Client(broker, logon=False)
    c.cmd({"c": "logon", "cid": "1", "client_name": "x", "o": "ack_conflation=100ms"})
    assert c.conn.ack_conflation == pytest.approx(0.1)
    broker = Broker(hooks=BrokerHooks(authenticate=lambda user, pw: pw == "secret"))
    bad = Client(broker, logon=False)
    bad.cmd({"c": "logon", "cid": "1", "client_name": "y", "user_id": "u", "pw": "nope"})
    (ack,) = acks(bad.take())
    assert ack["status"] == "failure" and ack["reason"] == "auth failure"
    assert bad.session.closed is not None
    good = Client(broker, logon=False)
    good.cmd({"c": "logon", "cid": "1", "client_name": "z", "user_id": "u", "pw": "secret"})
    assert acks(good.take())[0]["status"] == "success"


def test_hooks_are_frozen_once_the_broker_is_built(broker: Broker) -> None:
    with pytest.raises(AttributeError, match="cannot change once the broker is built"):
        broker.hooks.authenticate = lambda user, pw: True
    with pytest.raises(AttributeError, match="cannot change once the broker is built"):
        broker.hooks.queues = None
    assert broker.hooks.authenticate is None and broker.hooks.queues is None


def test_queues_without_a_queue_engine_are_refused() -> None:
    """The engine never imports the queues: a configuration with queues needs the factory
    (``Broker(..., queues=start_queues)``, as the server passes it)."""
    config = dataclasses.replace(
        default_config(tcp_port=0, ws_port=0),
        queues=(QueueConfig(name="work", message_type="json"),),
    )
    with pytest.raises(ConfigError, match="without a queue engine"):
        Broker(config)


# --------------------------------------------------------------------------- routing


def test_one_frame_per_session_with_all_matching_sids(broker: Broker) -> None:
    sub = Client(broker, "sub")
    sub.cmd({"c": "subscribe", "t": "t1", "sub_id": "a"})
    sub.cmd({"c": "subscribe", "t": "t1", "sub_id": "b", "filter": "/x > 1"})
    sub.cmd({"c": "subscribe", "t": "t.*", "sub_id": "c"})
    sub.cmd({"c": "subscribe", "t": "t1", "sub_id": "d", "filter": "/x > 100"})
    other = Client(broker, "other")
    other.cmd({"c": "subscribe", "t": "t1", "sub_id": "z"})
    publisher = Client(broker, "pub")
    pub(publisher, "t1", {"x": 5}, x="corr")
    (frame,) = sub.take()
    assert frame[0] == {"c": "p", "t": "t1", "sids": "a,b,c", "x": "corr"}
    assert frame[1] == b'{"x":5}'
    assert other.take() == [({"c": "p", "t": "t1", "sids": "z", "x": "corr"}, b'{"x":5}')]
    assert publisher.take() == []


def test_fast_path_publish_and_general_path_agree(broker: Broker) -> None:
    sub = Client(broker, "sub")
    sub.cmd({"c": "subscribe", "t": "t1", "sub_id": "a"})
    p = Client(broker, "pub")
    p.broker.handle(p.conn, b'{"c":"p","t":"t1"}{"n":1}')  # fast path
    p.broker.handle(p.conn, b'{"c":"publish","t":"t1","x":"q"}{"n":2}')  # JS spelling
    p.broker.handle(p.conn, b'{ "c" : "p", "t" : "t1" }{"n":3}')  # lenient header
    frames = sub.take()
    assert [f[1] for f in frames] == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    assert all(f[0]["sids"] == "a" for f in frames)


def test_regex_topics_and_bad_regex(broker: Broker) -> None:
    c = Client(broker)
    c.cmd({"c": "subscribe", "t": "^ord(ers|x)$", "sub_id": "r"})
    pub(c, "orders", {"id": 1})
    pub(c, "ordx", {"id": 2})
    pub(c, "orders2", {"id": 3})
    bodies = [b for h, b in c.take() if h["c"] == "p"]
    assert bodies == [b'{"id":1}', b'{"id":2}']
    c.cmd({"c": "subscribe", "t": "ord(", "cid": "1", "a": "processed"})
    (ack,) = acks(c.take())
    assert (ack["status"], ack["reason"]) == ("failure", "bad regex topic")


def test_filters_and_message_type_scoping(broker: Broker) -> None:
    c = Client(broker, "j")
    c.cmd({"c": "subscribe", "t": "t", "sub_id": "f", "filter": "/sym = 'IBM'"})
    pub(c, "t", {"sym": "IBM"})
    pub(c, "t", {"sym": "MSFT"})
    assert [b for _, b in c.take()] == [b'{"sym":"IBM"}']
    binary = Client(broker, "b", message_type="binary")
    binary.cmd({"c": "subscribe", "t": "t", "sub_id": "f", "filter": "/sym = 'IBM'"})
    binary.cmd({"c": "subscribe", "t": "t", "sub_id": "all"})
    binary.cmd({"c": "p", "t": "t"}, b'{"sym":"IBM"}')
    # a filter cannot match binary data; the unfiltered sub gets it; json subs do not
    assert [h["sids"] for h, _ in binary.take()] == ["all"]
    assert c.take() == []


def test_timestamp_option_adds_ts(broker: Broker) -> None:
    c = Client(broker)
    c.cmd({"c": "subscribe", "t": "t", "sub_id": "plain"})
    c.cmd({"c": "subscribe", "t": "t", "sub_id": "ts", "o": "timestamp"})
    pub(c, "t", {"a": 1})
    frames = c.take()
    assert len(frames) == 2
    assert frames[0][0] == {"c": "p", "t": "t", "sids": "plain"}
    assert frames[1][0] == {
        "c": "p",
        "t": "t",
        "sids": "ts",
        "ts": "20270115T080000.250000Z",
    }


def test_subscribe_failures_and_replace(broker: Broker) -> None:
    c = Client(broker)

    def reason(hdr: dict[str, Any]) -> str | None:
        c.cmd({"cid": "x", "a": "processed", **hdr})
        (ack,) = acks(c.take())
        return ack.get("reason") if ack["status"] == "failure" else None

    assert reason({"c": "subscribe"}) == "invalid topic"
    assert reason({"c": "subscribe", "t": "t", "filter": "/a = = 1"}) == "bad filter"
    assert reason({"c": "subscribe", "t": "t", "sub_id": "s"}) is None
    assert reason({"c": "subscribe", "t": "t", "sub_id": "s"}) == "subid in use"
    assert reason({"c": "subscribe", "t": "t", "sub_id": "a,b"}) == "invalid subId"
    assert reason({"c": "unsubscribe"}) == "invalid subId"
    assert reason({"c": "bogus"}) == "invalid command"
    assert reason({"c": "sow", "t": "not_sow"}) == "invalid topic"
    assert reason({"c": "sow", "t": "prices"}) == "invalid message type"
    assert reason({"c": "sow", "t": "orders", "orderby": "/x SIDEWAYS"}) == "invalid order by"
    assert reason({"c": "sow", "t": "orders", "o": "top_n=abc"}) == "invalid options"
    assert reason({"c": "sow_delete", "t": "not_sow", "filter": "1=1"}) == "invalid topic"
    assert reason({"c": "p", "t": "prices"}) == "invalid message type"
    assert reason({"c": "heartbeat", "o": "start,zero"}) == "invalid options"
    # replace swaps the filter in place
    assert (
        reason({"c": "subscribe", "t": "t", "sub_id": "s", "filter": "/a=1", "o": "replace"})
        is None
    )
    pub(c, "t", {"a": 2})
    pub(c, "t", {"a": 1})
    assert [b for _, b in c.take()] == [b'{"a":1}']
    # processed ack echoes sub_id (defaults to cid)
    c.cmd({"c": "subscribe", "t": "t", "cid": "auto9", "a": "processed"})
    (ack,) = acks(c.take())
    assert ack == {
        "c": "ack",
        "cid": "auto9",
        "a": "processed",
        "status": "success",
        "sub_id": "auto9",
    }


def test_ack_types_in_order_and_parsed_ignored(broker: Broker) -> None:
    c = Client(broker)
    c.cmd(
        {"c": "subscribe", "t": "t", "cid": "1", "a": "stats,completed,parsed,processed,received"}
    )
    assert [h["a"] for h in acks(c.take())] == ["received", "processed", "completed"]
    c.cmd({"c": "unsubscribe", "cid": "2", "sub_id": "1"})
    assert c.take() == []  # no ack requested: nothing


def test_unsubscribe_and_all(broker: Broker) -> None:
    c = Client(broker)
    for sid in ("a", "b", "c"):
        c.cmd({"c": "subscribe", "t": "t", "sub_id": sid})
    c.cmd({"c": "unsubscribe", "sub_id": "a,b"})
    pub(c, "t", {})
    assert [h["sids"] for h, _ in c.take()] == ["c"]
    c.cmd({"c": "unsubscribe", "sub_id": "all", "cid": "u", "a": "processed"})
    assert acks(c.take())[0]["status"] == "success"
    pub(c, "t", {})
    assert c.take() == []


def test_pause_and_resume_are_refused_on_a_plain_subscription(broker: Broker) -> None:
    """Only a bookmark subscription can be paused (its replay waits at its position in the
    log): a plain one is refused with ``invalid options`` at creation and by ``sub_id``, so
    nothing is ever buffered and then dropped (issue #28)."""
    c = Client(broker)

    def reason(hdr: dict[str, Any]) -> tuple[str, str]:
        c.cmd({**hdr, "cid": "x", "a": "processed"})
        (ack,) = [h for h, _ in c.take() if h.get("c") == "ack"]
        return ack["status"], ack.get("reason", "")

    assert reason({"c": "subscribe", "t": "t", "sub_id": "p", "o": "pause"}) == (
        "failure",
        "invalid options",
    )
    assert "p" not in c.conn.subs  # nothing installed
    assert reason({"c": "subscribe", "t": "t", "sub_id": "s1"}) == ("success", "")
    assert reason({"c": "subscribe", "sub_id": "s1", "o": "pause"}) == (
        "failure",
        "invalid options",
    )
    assert reason({"c": "subscribe", "t": "t", "sub_id": "s1", "o": "pause"}) == (
        "failure",
        "invalid options",
    )
    assert reason({"c": "subscribe", "sub_id": "s1", "o": "resume"}) == (
        "failure",
        "invalid options",
    )
    for n in range(3):  # the refused pauses changed nothing: each publish is delivered
        c.cmd({"c": "p", "t": "t"}, str(n).encode())
    assert [(h["sids"], body) for h, body in c.take()] == [
        ("s1", b"0"),
        ("s1", b"1"),
        ("s1", b"2"),
    ]


def test_bookmark_subscribe_without_txlog_fails(broker: Broker) -> None:
    """No transaction log: a bookmark subscription fails with ``invalid topic`` (issue #17;
    it used to be treated as NOW), and no subscription is installed."""
    c = Client(broker)
    c.cmd(
        {
            "c": "subscribe",
            "t": "t",
            "cid": "b",
            "sub_id": "bs",
            "bm": "0",
            "a": "processed,completed",
        }
    )
    assert [(h["a"], h["status"], h.get("reason")) for h in acks(c.take())] == [
        ("processed", "failure", "invalid topic"),
    ]
    pub(c, "t", {"live": True})
    assert c.take() == []


# --------------------------------------------------------------------------- SOW


def load_orders(c: Client, n: int = 5) -> None:
    for i in range(1, n + 1):
        pub(c, "orders", {"id": i, "x": i * 10, "sym": "A" if i % 2 else "B"})
    c.take()


def test_sow_query_batches_and_stats(broker: Broker) -> None:
    c = Client(broker)
    load_orders(c)
    c.cmd(
        {
            "c": "sow",
            "t": "orders",
            "cid": "q",
            "filter": "/x >= 20",
            "a": "processed,completed,stats",
            "bs": 2,
        }
    )
    frames = c.take()
    kinds = ["record" if "l" in h else h["c"] for h, _ in frames]
    assert kinds == [
        "ack",
        "group_begin",
        "sow",
        "record",
        "record",
        "sow",
        "record",
        "record",
        "group_end",
        "ack",
        "ack",
    ]
    processed = frames[0][0]
    assert processed == {
        "c": "ack",
        "cid": "q",
        "a": "processed",
        "status": "success",
        "query_id": "q",
    }
    assert frames[1][0] == {"c": "group_begin", "query_id": "q"}
    outers = [h for h, _ in frames if h.get("c") == "sow" and "l" not in h]
    assert [o["bs"] for o in outers] == [2, 2]
    assert all(o["t"] == "orders" and o["query_id"] == "q" for o in outers)
    records = [(h, b) for h, b in frames if "l" in h]
    assert [json.loads(b)["id"] for _, b in records] == [2, 3, 4, 5]
    for h, b in records:
        assert h["l"] == len(b) and h["k"] and h["bm"]
    group_end_at = [h.get("c") for h, _ in frames].index("group_end")
    tail = acks(frames[group_end_at:])
    assert [t["a"] for t in tail] == ["completed", "stats"]
    for t in tail:
        assert (t["records_returned"], t["topic_matches"], t["matches"]) == (4, 5, 4)
        assert t["query_id"] == "q"


def test_sow_default_batch_size_is_one_and_top_n_orderby(broker: Broker) -> None:
    c = Client(broker)
    load_orders(c)
    c.cmd(
        {
            "c": "sow",
            "t": "orders",
            "cid": "q",
            "orderby": "/x DESC",
            "top_n": 2,
            "a": "completed",
        }
    )
    frames = c.take()
    outers = [h for h, _ in frames if h.get("c") == "sow" and "bs" in h]
    assert [o["bs"] for o in outers] == [1, 1]
    bodies = [json.loads(b)["id"] for h, b in frames if "l" in h]
    assert bodies == [5, 4]
    (done,) = acks(frames)
    assert (done["records_returned"], done["matches"], done["topic_matches"]) == (2, 5, 5)
    # skip_n paging by option
    c.cmd({"c": "sow", "t": "orders", "cid": "q2", "orderby": "/id", "o": "top_n=2,skip_n=2"})
    assert [json.loads(b)["id"] for h, b in c.take() if "l" in h] == [3, 4]


def test_sow_regex_topic_over_several_sow_topics(broker: Broker) -> None:
    c = Client(broker)
    pub(c, "orders", {"id": 1})
    pub(c, "orders_eu", {"id": 1})
    pub(c, "orders_eu", {"id": 2})
    c.take()
    c.cmd({"c": "sow", "t": "^orders", "cid": "q", "bs": 10, "a": "completed"})
    frames = c.take()
    outers = [(h["t"], h["bs"]) for h, _ in frames if h.get("c") == "sow" and "bs" in h]
    assert outers == [("orders", 1), ("orders_eu", 2)]
    (done,) = acks(frames)
    assert done["records_returned"] == 3 and done["topic_matches"] == 3


def test_sow_select_projection_for_recovery_adapter(broker: Broker) -> None:
    c = Client(broker)
    pub(c, "/ADMIN/bookmark_store", {"clientName": "tracked", "subId": "bsub", "bookmark": "1|5|"})
    pub(c, "/ADMIN/bookmark_store", {"clientName": "other", "subId": "x", "bookmark": "1|6|"})
    c.take()
    c.cmd(
        {
            "c": "sow",
            "t": "/ADMIN/bookmark_store",
            "cid": "auto1",
            "filter": "/clientName='tracked'",
            "a": "processed",
            "query_id": "auto1",
            "bs": 10,
            "o": "select=[-/,+/subId,+/bookmark]",
        }
    )
    records = [b for h, b in c.take() if "l" in h]
    assert records == [b'{"subId":"bsub","bookmark":"1|5|"}']


def test_sow_keys_query(broker: Broker) -> None:
    c = Client(broker)
    load_orders(c, 3)
    keys = [broker.sow_topic("orders").compute_key({"id": i}) for i in (1, 3)]  # type: ignore[union-attr]
    c.cmd({"c": "sow", "t": "orders", "cid": "q", "sow_keys": ",".join(keys), "bs": 5})
    assert sorted(h["k"] for h, _ in c.take() if "l" in h) == sorted(keys)


def test_sow_and_subscribe_is_atomic_and_oof(broker: Broker) -> None:
    sub = Client(broker, "sub")
    publisher = Client(broker, "pub")
    load_orders(publisher, 3)
    sub.cmd(
        {
            "c": "sow_and_subscribe",
            "t": "orders",
            "cid": "s",
            "filter": "/x > 10",
            "o": "oof",
            "a": "processed,completed",
            "bs": 10,
        }
    )
    pub(publisher, "orders", {"id": 4, "x": 40})
    frames = sub.take()
    cmds = [h.get("c") for h, _ in frames]
    assert cmds[:2] == ["ack", "group_begin"]
    assert frames[0][0]["sub_id"] == "s" and frames[0][0]["query_id"] == "s"
    queried = [json.loads(b)["id"] for h, b in frames if "l" in h]
    assert queried == [2, 3]
    end = cmds.index("group_end")
    assert cmds[end + 1 :] == ["ack", "p"]  # completed, then the live publish
    live = frames[-1]
    assert live[0]["sids"] == "s" and json.loads(live[1])["id"] == 4
    assert live[0]["k"] == broker.sow_topic("orders").compute_key({"id": 4})  # type: ignore[union-attr]
    # record 2 leaves the filter: oof "match" with the new data
    pub(publisher, "orders", {"id": 2, "x": 0})
    (oof,) = sub.take()
    assert oof[0]["c"] == "oof" and oof[0]["reason"] == "match" and oof[0]["sids"] == "s"
    assert json.loads(oof[1]) == {"id": 2, "x": 0}
    # a record that never matched produces nothing
    pub(publisher, "orders", {"id": 1, "x": 5})
    assert sub.take() == []
    # deleted
    publisher.cmd({"c": "sow_delete", "t": "orders", "filter": "/id = 3"})
    (gone,) = sub.take()
    assert gone[0]["c"] == "oof" and gone[0]["reason"] == "deleted"
    assert json.loads(gone[1])["id"] == 3


def test_oof_expired(broker: Broker) -> None:
    sub = Client(broker, "sub")
    sub.cmd({"c": "sow_and_subscribe", "t": "orders", "cid": "s", "filter": "/x>0", "o": "oof"})
    sub.take()
    pub(sub, "orders", {"id": 9, "x": 1}, e="5")
    assert len(sub.take()) == 1
    assert broker.expire(1_800_000_000.25 + 4) == 0
    assert broker.expire(1_800_000_000.25 + 6) == 1
    (oof,) = sub.take()
    assert oof[0]["reason"] == "expired"


def test_sow_delete_forms_and_stats(broker: Broker) -> None:
    c = Client(broker)
    load_orders(c, 6)
    c.cmd(
        {
            "c": "sow_delete",
            "t": "orders",
            "cid": "d1",
            "filter": "/sym = 'A'",
            "a": "processed,stats",
            "sub_id": "d1",
            "query_id": "d1",
        }
    )
    processed, stats = acks(c.take())
    assert processed["a"] == "processed" and processed["status"] == "success"
    assert stats["a"] == "stats"
    assert (stats["records_deleted"], stats["matches"], stats["topic_matches"]) == (3, 3, 6)
    assert stats["cid"] == "d1" and stats["sub_id"] == "d1" and stats["query_id"] == "d1"
    sow = broker.sow_topic("orders")
    assert sow is not None
    c.cmd(
        {
            "c": "sow_delete",
            "t": "orders",
            "cid": "d2",
            "a": "stats",
            "sow_keys": sow.compute_key({"id": 2}),
        }
    )
    assert acks(c.take())[0]["records_deleted"] == 1
    c.cmd({"c": "sow_delete", "t": "orders", "cid": "d3", "a": "stats"}, b'{"id":4,"x":1}')
    assert acks(c.take())[0]["records_deleted"] == 1
    c.cmd({"c": "sow_delete", "t": "orders", "cid": "d4", "a": "completed,stats", "filter": "1=1"})
    done, stats = acks(c.take())
    assert done["a"] == "completed" and stats["records_deleted"] == 1 and len(sow) == 0


def test_delta_publish_merge_and_delta_subscribe(broker: Broker) -> None:
    full = Client(broker, "full")
    full.cmd({"c": "subscribe", "t": "orders", "sub_id": "f"})
    delta = Client(broker, "delta")
    delta.cmd({"c": "delta_subscribe", "t": "orders", "sub_id": "d"})
    quiet = Client(broker, "quiet")
    quiet.cmd({"c": "sow_and_delta_subscribe", "t": "orders", "cid": "q", "o": "no_empties"})
    quiet.take()
    p = Client(broker, "p")
    pub(p, "orders", {"id": 1, "x": 1, "y": "a"})
    assert json.loads(delta.take()[0][1]) == {"id": 1, "x": 1, "y": "a"}  # new record: full
    quiet.take()
    full.take()
    p.cmd({"c": "delta_publish", "t": "orders"}, b'{"id":1,"x":2}')
    assert json.loads(full.take()[0][1]) == {"id": 1, "x": 2, "y": "a"}  # merged record
    assert json.loads(delta.take()[0][1]) == {"id": 1, "x": 2}  # changed fields + key
    assert json.loads(quiet.take()[0][1]) == {"id": 1, "x": 2}
    sow = broker.sow_topic("orders")
    assert sow is not None and sow.doc(sow.compute_key({"id": 1})) == {"id": 1, "x": 2, "y": "a"}
    # an empty delta: sent (keys only) without no_empties, suppressed with it
    p.cmd({"c": "delta_publish", "t": "orders"}, b'{"id":1,"x":2}')
    assert json.loads(delta.take()[0][1]) == {"id": 1}
    assert quiet.take() == []
    assert len(full.take()) == 1
    # delta_publish on a non-SOW topic behaves as publish
    full.cmd({"c": "subscribe", "t": "plain", "sub_id": "pl"})
    p.cmd({"c": "delta_publish", "t": "plain"}, b'{"a":1}')
    assert full.take()[0][1] == b'{"a":1}'


# --------------------------------------------------------------------------- persisted acks


def test_dedup_and_conflated_persisted_acks(broker: Broker, timers: ManualTime) -> None:
    sub = Client(broker, "sub")
    sub.cmd({"c": "subscribe", "t": "t", "sub_id": "s"})
    p = Client(broker, "pub")
    for seq in (101, 102, 103):
        p.cmd({"c": "p", "t": "t", "a": "persisted", "s": seq}, b"{}")
    assert p.take() == []  # conflated: nothing until the timer fires
    assert len(timers.pending) == 1 and timers.pending[0].delay == pytest.approx(0.005)
    timers.fire()
    raw = p.session.sent[0]
    assert p.take() == [({"c": "ack", "s": 103, "a": "persisted", "status": "success"}, b"")]
    assert b'"s":103,' in raw
    assert len(sub.take()) == 3
    # replay after reconnect: duplicates are acked but not routed again
    p2 = Client(broker, "pub")
    assert broker.last_sequence("pub") == 103
    for seq in (102, 103, 104):
        p2.cmd({"c": "p", "t": "t", "a": "persisted", "s": seq}, b"{}")
    assert len(sub.take()) == 1
    # flush forces the pending persisted ack out before its own processed ack
    p2.cmd({"c": "flush", "cid": "f", "a": "processed"})
    frames = p2.take()
    assert [(h["a"], h.get("s")) for h in acks(frames)] == [("persisted", 104), ("processed", None)]
    assert timers.pending == []
    # a full batch is acked at once
    for seq in range(1000, 1000 + PERSISTED_ACK_BATCH):
        p2.cmd({"c": "p", "t": "t", "a": "persisted", "s": seq}, b"{}")
    assert [h["s"] for h in acks(p2.take())] == [1000 + PERSISTED_ACK_BATCH - 1]


def test_persisted_failure_ack_carries_sequence(broker: Broker) -> None:
    p = Client(broker, "pub")
    p.cmd({"c": "p", "t": "prices", "a": "persisted", "s": 7}, b"\x80")
    (ack,) = acks(p.take())
    assert ack == {
        "c": "ack",
        "s": 7,
        "a": "persisted",
        "status": "failure",
        "reason": "invalid message type",
    }


def test_sow_delete_with_sequence_is_deduplicated(broker: Broker, timers: ManualTime) -> None:
    c = Client(broker)
    load_orders(c, 2)
    hdr = {"c": "sow_delete", "t": "orders", "filter": "1=1", "a": "persisted,stats", "s": 5}
    c.cmd({**hdr, "cid": "1"})
    c.cmd({**hdr, "cid": "2"})  # replayed
    stats = acks(c.take())
    assert [s["records_deleted"] for s in stats] == [2, 0]
    timers.fire()
    assert acks(c.take())[0]["s"] == 5


# --------------------------------------------------------------------------- misc commands


def test_heartbeat_start_and_acks(broker: Broker) -> None:
    c = Client(broker)
    c.cmd({"c": "heartbeat", "o": "start,5", "cid": "h", "a": "received"})
    assert c.session.heartbeat == 5.0
    assert [h["a"] for h in acks(c.take())] == ["received"]
    c.cmd({"c": "heartbeat", "o": "beat"})
    assert c.take() == []  # beats are never echoed


def test_malformed_header_disconnects_only_that_client(broker: Broker) -> None:
    good = Client(broker, "good")
    good.cmd({"c": "subscribe", "t": "t", "sub_id": "s"})
    bad = Client(broker, "bad")
    broker.handle(bad.conn, b'{"c":"p","t":')
    assert bad.session.closed is not None
    pub(good, "t", {})
    assert len(good.take()) == 1


def test_handler_exception_becomes_failure_ack(broker: Broker) -> None:
    c = Client(broker)

    def boom(*args: Any) -> None:
        raise RuntimeError("boom")

    broker.commands["flush"] = boom
    c.cmd({"c": "flush", "cid": "f", "a": "processed"})
    (ack,) = acks(c.take())
    assert ack["status"] == "failure" and ack["reason"] == "internal error"
    assert c.session.closed is None


def test_msgpack_sow_topic(broker: Broker) -> None:
    import msgpack

    c = Client(broker, "m", message_type="msgpack")
    c.cmd({"c": "p", "t": "prices"}, msgpack.packb({"sym": "IBM", "px": 1}))
    c.cmd({"c": "p", "t": "prices"}, msgpack.packb({"sym": "IBM", "px": 2}))
    c.cmd({"c": "sow", "t": "prices", "cid": "q", "filter": "/px > 1"})
    records = [msgpack.unpackb(b) for h, b in c.take() if "l" in h]
    assert records == [{"sym": "IBM", "px": 2}]
