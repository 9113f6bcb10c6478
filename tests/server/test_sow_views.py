"""Views over SOW topics (``<SOW>/<View>``, AMPS User Guide "Aggregating and Analyzing Data").

Three layers: the configuration (errors name the element), the broker driven frame by frame
(every group value asserted after each publish, delta publish, delete and expiration; ``oof``
when a group leaves a subscriber's filter or empties; joins, which are left outer joins), and a
real server over TCP with the project's client and the official ``AMPS`` client (restart rebuild).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient.exceptions import InvalidTopicException
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.broker import Broker, Connection
from ampsclient_server_stub.testing import Inbox, ManualTime
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

ORDERS = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
      {orders_extra}</Topic>
    <Topic><Name>customers</Name><MessageType>json</MessageType><Key>/cid</Key></Topic>"""

BY_SYM = """<View><Name>by_sym</Name><MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <Projection>
        <Field>/sym</Field>
        <Field>COUNT(/id) AS /orders</Field>
        <Field>SUM(/qty) AS /qty</Field>
        <Field>AVG(/px) AS /avg_px</Field>
        <Field>MIN(/px) AS /low</Field>
        <Field>MAX(/px) AS /high</Field>
        <Field>COUNT_DISTINCT(/trader) AS /traders</Field>
        <Field>SUM(/qty * /px) AS /notional</Field>
      </Projection>
      <Grouping><Field>/sym</Field></Grouping>
    </View>"""

JOINED = """<View><Name>{name}</Name><MessageType>json</MessageType>
      <UnderlyingTopic><Join>{join}</Join></UnderlyingTopic>
      <Projection>
        <Field>[customers].[/cid] AS /customer</Field>
        <Field>[customers].[/name] AS /name</Field>
        <Field>COUNT([orders].[/id]) AS /orders</Field>
        <Field>SUM([orders].[/qty]) AS /qty</Field>
      </Projection>
      <Grouping><Field>[customers].[/cid]</Field><Field>[orders].[/cid]</Field></Grouping>
    </View>"""

ORDERS_FIRST = "[orders].[/cid] = [customers].[/cid]"
CUSTOMERS_FIRST = "[customers].[/cid]=[orders].[/cid]"


def xml(views: str, *, orders_extra: str = "", data: str = "") -> str:
    return f"""<AMPSConfig>
  <Name>views</Name>
  {data}
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>
    {ORDERS.format(orders_extra=orders_extra)}
    {views}
  </SOW>
</AMPSConfig>"""


# --------------------------------------------------------------------------- configuration


def test_a_view_over_a_sow_topic_is_read(tmp_path: Path) -> None:
    cfg = parse_config(xml(BY_SYM + JOINED.format(name="j", join=ORDERS_FIRST)), base_dir=tmp_path)
    by_name = {v.name: v for v in cfg.sow_views}
    assert by_name["by_sym"].topics == ("orders",)
    assert [f.aggregate for f in by_name["by_sym"].projection][:3] == [None, "COUNT", "SUM"]
    join = by_name["j"].join
    assert join is not None and (join.left, join.right, join.kind) == (
        "orders",
        "customers",
        "LEFT",  # AMPS's '=' (User Guide: "equivalent to a LEFT OUTER JOIN")
    )
    assert cfg.views == ()  # (views over queues)


@pytest.mark.parametrize(
    ("view", "message"),
    [
        (
            BY_SYM.replace("orders</Under", "nope</Under"),
            "<UnderlyingTopic> 'nope' is not a queue, SOW",
        ),
        (BY_SYM.replace("<Name>by_sym", "<Name>orders"), "duplicate topic 'orders'"),
        (BY_SYM.replace("<Grouping><Field>/sym</Field></Grouping>", ""), "has no <Grouping>"),
        (BY_SYM.replace("COUNT(/id) AS /orders", "COUNT(/id)"), "needs 'AS /path'"),
        (BY_SYM.replace("SUM(/qty) AS", "SUM(/qty) + 1 AS"), "an aggregate inside a larger"),
        (BY_SYM.replace("</Grouping>", "</Grouping><Key>/sym</Key>"), "<Key> in <View> is not"),
        (BY_SYM.replace("</Grouping>", "</Grouping><HashIndex/>"), "<HashIndex> has no <Key>"),
        (
            BY_SYM.replace(">json<", ">binary<"),
            "binary message types cannot be the underlying topic for a view or the type of a view",
        ),
        (BY_SYM.replace("</Grouping>", "</Grouping><Colour/>"), "<Colour> is not a view element"),
        (
            JOINED.format(name="j", join=ORDERS_FIRST).replace(
                "</Grouping>", "</Grouping><Filter>1=1</Filter>"
            ),
            "<Filter> is only valid for a view over a single underlying topic",
        ),
        (
            JOINED.format(name="j", join=ORDERS_FIRST).replace("[orders].[/id]", "/id"),
            "in a join, name each field's topic",
        ),
        (
            JOINED.format(name="j", join=ORDERS_FIRST).replace(
                "[customers].[/name]", "[other].[/name]"
            ),
            "[other] is not an underlying topic of the view",
        ),
        (
            JOINED.format(name="j", join="[orders].[/cid] != [customers].[/cid]"),
            "is not '[topic].[/field]=[topic].[/field]'",
        ),
        (
            JOINED.format(name="j", join="[orders].[/cid] CROSS JOIN [customers].[/cid]"),
            "AMPS has no 'CROSS JOIN': a <Join> is the equality",
        ),
        (
            JOINED.format(name="j", join="[orders].[/cid] LEFT OUTER JOIN [customers].[/cid]"),
            "AMPS has no 'LEFT OUTER JOIN': a <Join> is the equality "
            "'[topic].[/field]=[topic].[/field]', which AMPS evaluates as a LEFT OUTER JOIN",
        ),
        (
            JOINED.format(name="j", join="[orders].[/cid] full outer join [customers].[/cid]"),
            "AMPS has no 'FULL OUTER JOIN'",
        ),
        (
            BY_SYM.replace("</Grouping>", "</Grouping><Conflation>sometimes</Conflation>"),
            "<Conflation> is none or inline, not 'sometimes'",
        ),
        (
            JOINED.format(name="j", join=ORDERS_FIRST).replace(
                "[orders].[/cid] =", "[xml].[orders].[/cid] ="
            ),
            "'[xml].[orders]' is not a queue, SOW topic or earlier view",
        ),
    ],
)
def test_bad_views_are_refused_naming_the_element(tmp_path: Path, view: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(xml(view), base_dir=tmp_path)
    assert message in str(info.value)
    assert str(info.value).startswith("line ")


# --------------------------------------------------------------------------- broker, frame by frame


def make_broker(tmp_path: Path, views: str, **kw: Any) -> tuple[Broker, ManualTime]:
    manual = ManualTime()
    broker = Broker(
        parse_config(xml(views, **kw), base_dir=tmp_path),
        call_later=manual.call_later,
        clock=manual.clock,
        monotonic=manual.clock,
    )
    return broker, manual


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker, _ = make_broker(
        tmp_path,
        BY_SYM
        + JOINED.format(name="left", join=ORDERS_FIRST)
        + JOINED.format(name="kept", join=CUSTOMERS_FIRST),
    )
    yield broker
    broker.close()


def logon(broker: Broker, name: str) -> tuple[Connection, FakeSession]:
    session = FakeSession()
    conn = broker.connect(session)
    broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": name}))
    return conn, session


def command(broker: Broker, conn: Connection, body: bytes = b"", **fields: Any) -> None:
    broker.handle(conn, encode_header(fields) + body)


def pub(broker: Broker, conn: Connection, topic: str, c: str = "p", **doc: Any) -> None:
    command(broker, conn, json.dumps(doc).encode(), c=c, t=topic)


def records(broker: Broker, topic: str) -> dict[Any, Any]:
    sow = broker.sow_topic(topic)
    assert sow is not None
    docs = [sow.doc(k) for k in sow]
    key = "sym" if topic == "by_sym" else "customer"
    return {(d.get(key), d.get("orders")) if key == "customer" else d[key]: d for d in docs}


def sym(broker: Broker, name: str) -> dict[str, Any] | None:
    return records(broker, "by_sym").get(name)


def test_group_values_follow_every_publish_delta_and_delete(broker: Broker) -> None:
    p, _ = logon(broker, "pub")
    pub(broker, p, "orders", id=1, sym="A", qty=10, px=2.0, trader="t1")
    assert sym(broker, "A") == {
        "sym": "A",
        "orders": 1,
        "qty": 10,
        "avg_px": 2.0,
        "low": 2.0,
        "high": 2.0,
        "traders": 1,
        "notional": 20.0,
    }
    pub(broker, p, "orders", id=2, sym="A", qty=30, px=4.0, trader="t2")
    assert sym(broker, "A") == {
        "sym": "A",
        "orders": 2,
        "qty": 40,
        "avg_px": 3.0,
        "low": 2.0,
        "high": 4.0,
        "traders": 2,
        "notional": 140.0,
    }
    pub(broker, p, "orders", id=3, sym="B", qty=5, px=1.5, trader="t1")
    assert sym(broker, "B") == {
        "sym": "B",
        "orders": 1,
        "qty": 5,
        "avg_px": 1.5,
        "low": 1.5,
        "high": 1.5,
        "traders": 1,
        "notional": 7.5,
    }
    # replacing order 2 (same key) moves its values: no double count
    pub(broker, p, "orders", id=2, sym="A", qty=1, px=8.0, trader="t1")
    assert sym(broker, "A") == {
        "sym": "A",
        "orders": 2,
        "qty": 11,
        "avg_px": 5.0,
        "low": 2.0,
        "high": 8.0,
        "traders": 1,
        "notional": 28.0,
    }
    # a delta publish merges into the record; the group follows the merged record
    pub(broker, p, "orders", c="delta_publish", id=1, qty=9)
    assert sym(broker, "A")["qty"] == 10 and sym(broker, "A")["notional"] == 26.0  # type: ignore[index]
    # an order moving to another group leaves the first one
    pub(broker, p, "orders", id=1, sym="B", qty=9, px=2.0, trader="t3")
    assert sym(broker, "A") == {
        "sym": "A",
        "orders": 1,
        "qty": 1,
        "avg_px": 8.0,
        "low": 8.0,
        "high": 8.0,
        "traders": 1,
        "notional": 8.0,
    }
    assert sym(broker, "B")["orders"] == 2 and sym(broker, "B")["traders"] == 2  # type: ignore[index]
    # sow_delete empties group A: its record is gone
    command(broker, p, c="sow_delete", t="orders", filter="/id = 2")
    assert sym(broker, "A") is None
    assert sym(broker, "B")["qty"] == 14  # type: ignore[index]


def test_subscribers_get_each_change_and_oof_when_a_group_leaves(broker: Broker) -> None:
    p, _ = logon(broker, "pub")
    s, session = logon(broker, "sub")
    pub(broker, p, "orders", id=1, sym="A", qty=10, px=1)
    command(
        broker,
        s,
        c="sow_and_subscribe",
        t="by_sym",
        sub_id="s",
        query_id="s",
        filter="/qty < 50",
        o="oof",
    )
    pub(broker, p, "orders", id=2, sym="A", qty=20, px=1)
    pub(broker, p, "orders", id=3, sym="A", qty=30, px=1)  # 60: leaves the filter
    pub(broker, p, "orders", id=3, sym="A", qty=1, px=1)  # 31: back in
    command(broker, p, c="sow_delete", t="orders", filter="/sym = 'A'")  # the group is gone
    got = [(h["c"], json.loads(b)["qty"], h.get("reason")) for h, b in _updates(session)]
    # the oof carries the record that left the filter; the delete removes the three orders
    # one by one, so the group shrinks (21, then 1) before it empties
    assert got == [
        ("p", 30, None),
        ("oof", 60, "match"),
        ("p", 31, None),
        ("p", 21, None),
        ("p", 1, None),
        ("oof", 1, "deleted"),
    ]


def _updates(session: FakeSession) -> list[tuple[dict[str, Any], bytes]]:
    """The ``p`` and ``oof`` frames, in the order sent."""
    out = []
    for payload in session.sent:
        hdr, end = decode_header(payload)
        if hdr.get("c") in ("p", "oof"):
            out.append((dict(hdr), payload[end:]))
    return out


def test_a_join_is_a_left_outer_join(broker: Broker) -> None:
    """AMPS User Guide, "Multiple Topic Aggregation: Join": a record of the topic on the left of
    ``=`` without a partner is projected with NULL for the other topic, one of the right-hand
    topic is not: "this is equivalent to a LEFT OUTER JOIN"."""
    p, _ = logon(broker, "pub")
    pub(broker, p, "orders", id=1, cid=7, qty=10)
    assert records(broker, "left") == {
        (None, 1): {"customer": None, "name": None, "orders": 1, "qty": 10}
    }
    assert records(broker, "kept") == {}  # (an order alone: orders are on the right there)
    pub(broker, p, "customers", cid=7, name="Ada")
    pub(broker, p, "customers", cid=8, name="Bob")
    assert records(broker, "left") == {
        (7, 1): {"customer": 7, "name": "Ada", "orders": 1, "qty": 10}
    }
    assert records(broker, "kept") == {
        (7, 1): {"customer": 7, "name": "Ada", "orders": 1, "qty": 10},
        (8, 0): {"customer": 8, "name": "Bob", "orders": 0, "qty": None},
    }
    pub(broker, p, "orders", id=2, cid=7, qty=5)
    assert records(broker, "left")[(7, 2)]["qty"] == 15
    command(broker, p, c="sow_delete", t="customers", filter="/cid = 7")
    assert records(broker, "left") == {
        (None, 2): {"customer": None, "name": None, "orders": 2, "qty": 15}
    }
    assert records(broker, "kept") == {
        (8, 0): {"customer": 8, "name": "Bob", "orders": 0, "qty": None}
    }


def test_a_single_topic_view_may_name_its_topic(tmp_path: Path) -> None:
    qualified = BY_SYM.replace("SUM(/qty) AS /qty", "SUM([orders].[/qty]) AS /qty")
    broker, _ = make_broker(tmp_path, qualified)
    try:
        p, _ = logon(broker, "pub")
        pub(broker, p, "orders", id=1, sym="Q", qty=3, px=1)
        pub(broker, p, "orders", id=2, sym="Q", qty=4, px=1)
        assert sym(broker, "Q")["qty"] == 7  # type: ignore[index]
    finally:
        broker.close()


def test_expiration_updates_the_group(tmp_path: Path) -> None:
    broker, manual = make_broker(tmp_path, BY_SYM, orders_extra="<Expiration>10s</Expiration>")
    try:
        p, _ = logon(broker, "pub")
        pub(broker, p, "orders", id=1, sym="A", qty=10, px=1)
        manual.advance(5)
        pub(broker, p, "orders", id=2, sym="A", qty=20, px=1)
        manual.advance(6)
        broker.expire(manual.clock())
        assert sym(broker, "A")["qty"] == 20  # type: ignore[index]
        manual.advance(6)
        broker.expire(manual.clock())
        assert sym(broker, "A") is None
    finally:
        broker.close()


# --------------------------------------------------------------------------- real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("views")
    views = BY_SYM + JOINED.format(name="left", join=ORDERS_FIRST)
    with ServerThread(parse_config(xml(views), base_dir=base)) as thread:
        yield thread


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    client = Client(f"views-{time.time_ns()}")
    client.connect(server.uri("tcp", "json"))
    client.logon(5000)
    yield client
    client.close()


def _docs(stream: Any) -> list[Any]:
    return [json.loads(m.get_data()) for m in stream if m.get_command() == "sow"]


@pytest.mark.integration
def test_sow_and_subscribe_to_a_view_over_tcp(client: Client) -> None:
    inbox = Inbox(keep=lambda m: m.get_command() in ("sow", "publish", "oof"))
    for n in range(3):
        client.publish("orders", json.dumps({"id": f"tcp-{n}", "sym": "TCP", "qty": 10, "px": 1}))
    client.flush(5000)
    client.execute_async(
        Command("sow_and_subscribe")
        .set_topic("by_sym")
        .set_filter("/sym = 'TCP' AND /qty < 40")
        .set_options("oof"),
        inbox,
    )
    inbox.wait_for_count(1, 10.0)
    client.publish("orders", json.dumps({"id": "tcp-3", "sym": "TCP", "qty": 10, "px": 1}))
    client.sow_delete("orders", "/sym = 'TCP'", timeout=5000)
    inbox.wait(lambda box: sum(m.get_command() == "oof" for m in box.snapshot()) == 2, 10.0)
    got = [
        (m.get_command(), json.loads(m.get_data())["qty"], m.get_reason()) for m in inbox.snapshot()
    ]
    # 40 leaves the filter; the delete removes the orders one by one: the group comes back
    # into the filter (30, 20, 10), then empties
    assert got == [
        ("sow", 30, None),
        ("oof", 40, "match"),
        ("publish", 30, None),
        ("publish", 20, None),
        ("publish", 10, None),
        ("oof", 10, "deleted"),
    ]
    assert client.sow("by_sym", "/sym = 'TCP'", timeout=5000) is not None
    assert _docs(client.sow("by_sym", "/sym = 'TCP'", timeout=5000)) == []


@pytest.mark.integration
def test_top_n_orderby_and_delta_subscribe_on_a_view(client: Client) -> None:
    for n, (s, qty) in enumerate([("O1", 5), ("O2", 50), ("O3", 500), ("O2", 1)]):
        client.publish("orders", json.dumps({"id": f"ob-{n}", "sym": s, "qty": qty, "px": 2}))
    client.flush(5000)
    found = client.sow("by_sym", "/sym LIKE '^O[0-9]'", top_n=2, order_by="/qty DESC", timeout=5000)
    assert [(d["sym"], d["qty"]) for d in _docs(found)] == [("O3", 500), ("O2", 51)]
    inbox = Inbox(keep=lambda m: m.get_command() == "publish")
    client.delta_subscribe(inbox, "by_sym", "/sym = 'O1'", timeout=5000)
    client.publish("orders", json.dumps({"id": "ob-9", "sym": "O1", "qty": 7, "px": 2}))
    inbox.wait_for_count(1, 10.0)
    delta = json.loads(inbox.snapshot()[0].get_data())
    # a delta: only the changed fields (and the group's key fields are not required)
    assert delta["qty"] == 12 and delta["orders"] == 2 and "high" not in delta


@pytest.mark.integration
def test_a_publish_to_a_view_is_refused(client: Client) -> None:
    cmd = Command("publish").set_topic("by_sym").set_data('{"sym":"w"}')
    with pytest.raises(InvalidTopicException, match="invalid topic"):
        client.execute_async(cmd.add_ack_type("processed").set_timeout(5000), lambda _m: None)


@pytest.mark.integration
def test_the_official_client_queries_a_view(server: ServerThread, client: Client) -> None:
    amps: Any = pytest.importorskip("AMPS")
    client.publish("customers", json.dumps({"cid": "off", "name": "Official"}))
    client.publish("orders", json.dumps({"id": "off-1", "cid": "off", "qty": 3, "sym": "OFF"}))
    client.publish("orders", json.dumps({"id": "off-2", "cid": "off", "qty": 4, "sym": "OFF"}))
    client.flush(5000)
    official = amps.Client(f"official-{time.time_ns()}")
    official.connect(server.uri("tcp", "json"))
    official.logon()
    try:
        docs = [
            json.loads(m.get_data())
            for m in official.sow("left", "/customer = 'off'", timeout=5000)
            if m.get_command() == "sow"
        ]
        assert docs == [{"customer": "off", "name": "Official", "orders": 2, "qty": 7}]
    finally:
        official.disconnect()


@pytest.mark.integration
def test_a_view_is_rebuilt_at_restart_from_the_underlying_sow(tmp_path: Path) -> None:
    cfg = parse_config(
        xml(
            BY_SYM,
            orders_extra="<FileName>orders.sow</FileName>",
            data="<DataDirectory>data</DataDirectory>",
        ),
        base_dir=tmp_path,
    )
    with ServerThread(cfg) as first:
        c = Client(f"restart-{time.time_ns()}")
        c.connect(first.uri("tcp", "json"))
        c.logon(5000)
        for n, qty in enumerate([1, 2, 4]):
            c.publish("orders", json.dumps({"id": n, "sym": "R", "qty": qty, "px": qty}))
        c.sow_delete("orders", "/id = 0", timeout=5000)
        c.close()
    with ServerThread(cfg) as second:
        c = Client(f"restart-{time.time_ns()}")
        c.connect(second.uri("tcp", "json"))
        c.logon(5000)
        try:
            assert _docs(c.sow("by_sym", timeout=5000)) == [
                {
                    "sym": "R",
                    "orders": 2,
                    "qty": 6,
                    "avg_px": 3.0,
                    "low": 2,
                    "high": 4,
                    "traders": 0,
                    "notional": 20,
                }
            ]
        finally:
            c.close()


# ------------------------------------------------------------------ aggregated subscriptions

AGG = "projection=[MAX(/px) AS /max,/sym as /ticker,COUNT(/id) AS /n],grouping=[/sym]"


def test_an_aggregated_sow_query_and_subscription(broker: Broker) -> None:
    p, _ = logon(broker, "pub")
    s, session = logon(broker, "sub")
    # the guide's example: four IBM prices, one projected record with the maximum
    for n, px in enumerate([150.34, 149.76, 149.32, 151.10], start=1):
        pub(broker, p, "orders", id=n, sym="IBM", px=px)
    pub(broker, p, "orders", id=5, sym="MSFT", px=62.3)
    command(broker, s, c="sow", t="orders", query_id="q", o=AGG, a="completed")
    got = [json.loads(b[b.index(b"{", 1) :]) for _h, b in session.frames("sow")]
    assert sorted(got, key=lambda d: d["ticker"]) == [
        {"max": 151.10, "ticker": "IBM", "n": 4},
        {"max": 62.3, "ticker": "MSFT", "n": 1},
    ]
    # a filtered sow_and_subscribe: the filter selects the underlying records
    command(
        broker,
        s,
        c="sow_and_subscribe",
        t="orders",
        sub_id="a",
        filter="/sym = 'IBM'",
        o=AGG + ",oof",
    )
    pub(broker, p, "orders", id=6, sym="IBM", px=160.0)
    pub(broker, p, "orders", id=7, sym="MSFT", px=1.0)  # not aggregated here
    command(broker, p, c="sow_delete", t="orders", filter="/sym = 'IBM' AND /id > 1")
    command(broker, p, c="sow_delete", t="orders", filter="/sym = 'IBM'")
    updates = [(h["c"], json.loads(b)) for h, b in _updates(session) if h.get("sids") == "a"]
    assert updates == [
        ("p", {"max": 160.0, "ticker": "IBM", "n": 5}),
        # the delete goes in write order: ids 2, 3, 4, then 6 (160: the maximum falls back)
        ("p", {"max": 160.0, "ticker": "IBM", "n": 4}),
        ("p", {"max": 160.0, "ticker": "IBM", "n": 3}),
        ("p", {"max": 160.0, "ticker": "IBM", "n": 2}),
        ("p", {"max": 150.34, "ticker": "IBM", "n": 1}),
        ("oof", {"max": 150.34, "ticker": "IBM", "n": 1}),
    ]
    # unsubscribed: no more updates
    command(broker, s, c="unsubscribe", sub_id="a")
    before = len(session.sent)
    pub(broker, p, "orders", id=8, sym="IBM", px=1.0)
    assert len(session.sent) == before


def test_an_aggregated_delta_subscription_sends_what_changed(broker: Broker) -> None:
    p, _ = logon(broker, "pub")
    s, session = logon(broker, "sub")
    pub(broker, p, "orders", id=1, sym="D", px=5.0)
    command(broker, s, c="sow_and_delta_subscribe", t="orders", sub_id="d", o=AGG)
    pub(broker, p, "orders", id=2, sym="D", px=1.0)  # max unchanged
    pub(broker, p, "orders", id=3, sym="D", px=9.0)
    got = [json.loads(b) for h, b in _updates(session) if h.get("sids") == "d"]
    assert got == [{"n": 2}, {"max": 9.0, "n": 3}]


def test_a_plain_subscribe_with_aggregation_options_is_refused(broker: Broker) -> None:
    s, session = logon(broker, "sub")
    command(broker, s, c="subscribe", t="orders", sub_id="x", o=AGG, a="processed")
    (ack,) = [h for h in session.headers("ack") if h.get("sub_id") == "x"]
    assert ack["status"] == "failure" and ack["reason"] == "invalid options"


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ("projection=[COUNT(/id) AS /n]", "needs both projection"),
        ("grouping=[/sym]", "needs both projection"),
        ("projection=[COUNT(/id)],grouping=[/sym]", "needs 'AS /path'"),
        ("projection=[/sym],grouping=[COUNT(/id)]", "cannot aggregate"),
        ("projection=/sym,grouping=[/sym]", "must be a list in brackets"),
    ],
)
def test_bad_aggregated_queries_are_refused(
    broker: Broker, options: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    s, session = logon(broker, "sub")
    with caplog.at_level(logging.INFO, logger="ampsclient_server_stub.engine.commands"):
        command(broker, s, c="sow", t="orders", cid="bad", o=options, a="processed")
    (ack,) = [h for h in session.headers("ack") if h.get("cid") == "bad"]
    assert ack["status"] == "failure" and ack["reason"] == "invalid options"
    assert [r.getMessage() for r in caplog.records if reason in r.getMessage()]  # the detail


@pytest.mark.integration
def test_an_aggregated_subscription_over_tcp(client: Client) -> None:
    for n, px in enumerate([10.0, 30.0, 20.0]):
        client.publish("orders", json.dumps({"id": f"agg-{n}", "sym": "AGG", "px": px}))
    client.flush(5000)
    inbox = Inbox(keep=lambda m: m.get_command() in ("sow", "publish"))
    client.sow_and_subscribe(inbox, "orders", "/sym = 'AGG'", timeout=5000, options=AGG)
    inbox.wait_for_count(1, 10.0)
    client.publish("orders", json.dumps({"id": "agg-9", "sym": "AGG", "px": 99.5}))
    inbox.wait_for_count(2, 10.0)
    got = [(m.get_command(), json.loads(m.get_data())) for m in inbox.snapshot()]
    assert got == [
        ("sow", {"max": 30.0, "ticker": "AGG", "n": 3}),
        ("publish", {"max": 99.5, "ticker": "AGG", "n": 4}),
    ]


BY_COUNT = """<View><Name>by_count</Name><MessageType>json</MessageType>
      <UnderlyingTopic>by_sym</UnderlyingTopic>
      <Projection><Field>/orders</Field><Field>COUNT(/sym) AS /symbols</Field>
        <Field>SUM(/qty) AS /qty</Field></Projection>
      <Grouping><Field>/orders</Field></Grouping>
    </View>"""


def test_a_view_over_a_view(tmp_path: Path) -> None:
    broker, _ = make_broker(tmp_path, BY_SYM + BY_COUNT)
    try:
        p, _ = logon(broker, "pub")
        s, session = logon(broker, "sub")
        command(broker, s, c="subscribe", t="by_count", sub_id="c", o="oof")
        pub(broker, p, "orders", id=1, sym="A", qty=1, px=1)
        pub(broker, p, "orders", id=2, sym="B", qty=2, px=1)
        pub(broker, p, "orders", id=3, sym="A", qty=4, px=1)  # A: 2 orders, B: 1

        def counts() -> dict[int, Any]:
            sow = broker.sow_topic("by_count")
            assert sow is not None
            return {sow.doc(k)["orders"]: sow.doc(k) for k in sow}

        assert counts() == {
            1: {"orders": 1, "symbols": 1, "qty": 2},
            2: {"orders": 2, "symbols": 1, "qty": 5},
        }
        got = [(h["c"], json.loads(b)) for h, b in _updates(session)]
        assert got == [
            ("p", {"orders": 1, "symbols": 1, "qty": 1}),  # A
            ("p", {"orders": 1, "symbols": 2, "qty": 3}),  # A, B
            ("p", {"orders": 1, "symbols": 1, "qty": 2}),  # A moved on
            ("p", {"orders": 2, "symbols": 1, "qty": 5}),
        ]
    finally:
        broker.close()


def test_a_sow_of_a_view_with_select(broker: Broker) -> None:
    p, _ = logon(broker, "pub")
    s, session = logon(broker, "sub")
    pub(broker, p, "orders", id=1, sym="A", qty=1, px=1)
    pub(broker, p, "orders", id=2, sym="B", qty=2, px=1)
    command(broker, s, c="sow", t="by_sym", query_id="q", o="select=[-/,+/sym,+/qty]")
    frames = session.frames("sow")
    docs = [json.loads(b[b.index(b"}") + 1 :]) for _h, b in frames]
    assert docs == [{"sym": "A", "qty": 1}, {"sym": "B", "qty": 2}]  # in write order


@pytest.mark.integration
def test_the_official_client_subscribes_to_a_view_with_oof(
    server: ServerThread, client: Client
) -> None:
    amps: Any = pytest.importorskip("AMPS")
    official = amps.Client(f"official-sub-{time.time_ns()}")
    official.connect(server.uri("tcp", "json"))
    official.logon()
    inbox = Inbox()  # copies: the official client reuses its Message object

    def keep(message: Any) -> None:
        if message.get_command() in ("sow", "publish", "oof"):
            inbox((message.get_command(), json.loads(message.get_data())["qty"]))

    try:
        client.publish("orders", json.dumps({"id": "os-1", "sym": "OS", "qty": 5, "px": 1}))
        client.flush(5000)
        official.sow_and_subscribe(keep, "by_sym", "/sym = 'OS'", oof_enabled=True, timeout=5000)
        client.publish("orders", json.dumps({"id": "os-2", "sym": "OS", "qty": 6, "px": 1}))
        client.sow_delete("orders", "/sym = 'OS'", timeout=5000)
        inbox.wait(lambda box: ("oof", 6) in box.snapshot(), 10.0)
        assert inbox.snapshot() == [("sow", 5), ("publish", 11), ("publish", 6), ("oof", 6)]
    finally:
        official.disconnect()


def test_publish_and_sow_delete_to_a_view_fail_with_invalid_topic(broker: Broker) -> None:
    s, session = logon(broker, "w")
    command(broker, s, b'{"sym":"w"}', c="p", t="by_sym", cid="p1", a="processed")
    command(broker, s, c="sow_delete", t="by_sym", cid="d1", filter="1=1", a="processed")
    acks = {h["cid"]: h for h in session.headers("ack") if h.get("cid") in ("p1", "d1")}
    assert acks["p1"]["reason"] == acks["d1"]["reason"] == "invalid topic"
