"""Views joining three topics, and topics of different message types (AMPS User Guide,
"Defining Views and Aggregations": "You can join topics of different message types, and you
can project messages of a different type than the underlying topic"; Configuration Guide,
"SOW/View": ``UnderlyingTopic`` holds "any number of ``Join`` elements", each of which
"specifies two top[ics]").

The broker driven frame by frame (every view record asserted after each publish, delta
publish and delete; ``oof`` when a group leaves a subscriber's filter or empties), the
configuration's refusals, and a real server over TCP with the project's client and the
official ``AMPS`` client.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.broker import Broker, Connection
from ampsclient_server_stub.testing import Inbox, ManualTime
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

SOH = "\x01"

TOPICS = """
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Topic><Name>customers</Name><MessageType>json</MessageType><Key>/cid</Key></Topic>
    <Topic><Name>products</Name><MessageType>json</MessageType><Key>/pid</Key></Topic>
    <Topic><Name>regions</Name><MessageType>nvfix</MessageType><Key>/cid</Key></Topic>"""

THREE = """<View><Name>{name}</Name><MessageType>json</MessageType>
      <UnderlyingTopic>
        <Join>[orders].[/cid] = [customers].[/cid]</Join>
        <Join>[orders].[/pid] = [products].[/pid]</Join>
      </UnderlyingTopic>
      <Projection>
        <Field>[customers].[/cid] AS /cid</Field>
        <Field>[customers].[/name] AS /name</Field>
        <Field>COUNT([orders].[/id]) AS /orders</Field>
        <Field>SUM([orders].[/qty] * [products].[/price]) AS /value</Field>
        <Field>COUNT([products].[/pid]) AS /priced</Field>
      </Projection>
      <Grouping><Field>[customers].[/cid]</Field></Grouping>
    </View>"""

CROSS = """<View><Name>{name}</Name><MessageType>{mt}</MessageType>
      <UnderlyingTopic>
        <Join>[json].[customers].[/cid] = [nvfix].[regions].[/cid]</Join>
      </UnderlyingTopic>
      <Projection>
        <Field>[regions].[/region] AS {root}/region</Field>
        <Field>COUNT([customers].[/cid]) AS {root}/customers</Field>
      </Projection>
      <Grouping><Field>[regions].[/region]</Field></Grouping>
    </View>"""


def xml(views: str) -> str:
    return f"""<AMPSConfig>
  <Name>view-joins</Name>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>{TOPICS}
    {views}
  </SOW>
</AMPSConfig>"""


VIEWS = (
    THREE.format(name="left3")
    + CROSS.format(name="by_region", mt="json", root="")
    + CROSS.format(name="by_region_fix", mt="nvfix", root="")
    + CROSS.format(name="by_region_xml", mt="xml", root="/Regions")
)


# --------------------------------------------------------------------------- configuration


def test_chained_joins_are_read_in_order(tmp_path: Path) -> None:
    cfg = parse_config(xml(VIEWS), base_dir=tmp_path)
    by_name = {v.name: v for v in cfg.sow_views}
    three = by_name["left3"]
    assert three.topics == ("orders", "customers", "products")
    assert [(j.left_index, j.right_index, j.kind) for j in three.joins] == [
        (0, 1, "LEFT"),
        (0, 2, "LEFT"),
    ]
    cross = by_name["by_region_fix"]
    assert (cross.message_type, cross.topics, cross.types) == (
        "nvfix",
        ("customers", "regions"),
        ("json", "nvfix"),
    )


JOIN2 = "<Join>[orders].[/cid] = [customers].[/cid]</Join>"


def _view(under: str, *, mt: str = "json", fields: str = "") -> str:
    fields = fields or "<Field>COUNT([orders].[/id]) AS /n</Field>"
    return f"""<View><Name>v</Name><MessageType>{mt}</MessageType>
      <UnderlyingTopic>{under}</UnderlyingTopic>
      <Projection>{fields}</Projection>
      <Grouping><Field>[orders].[/cid]</Field></Grouping></View>"""


@pytest.mark.parametrize(
    ("view", "message"),
    [
        (
            _view("<Join>[orders].[/cid] = [orders].[/id]</Join>"),
            "a topic joined with itself is not supported: AMPS names a join's topics by "
            "[type].[topic] only",
        ),
        (
            _view(JOIN2 + "<Join>[products].[/pid] = [regions].[/cid]</Join>"),
            "relates no topic of the <Join>s before it",
        ),
        (
            _view(
                JOIN2
                + "<Join>[orders].[/pid] = [products].[/pid]</Join>"
                + "<Join>[customers].[/x] = [products].[/x]</Join>"
            ),
            "relates two topics joined through others",
        ),
        (
            _view(JOIN2, mt="binary"),
            "binary message types cannot be the underlying topic for a view or the type of a view",
        ),
        (
            _view(JOIN2, mt="nvfix", fields="<Field>COUNT([orders].[/id]) AS /a/n</Field>"),
            "a nvfix message has no nested fields",
        ),
        (_view(JOIN2, mt="xml"), "an xml message has one root element"),
        (
            _view("<Join>[orders].[/cid] = [json].[regions].[/cid]</Join>"),
            "'[json].[regions]' is not a queue, SOW topic or earlier view",
        ),
    ],
)
def test_bad_joins_are_refused_naming_the_element(tmp_path: Path, view: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(xml(view), base_dir=tmp_path)
    assert message in str(info.value)
    assert str(info.value).startswith("line ")


def test_an_underlying_topic_defined_after_the_view_is_refused(tmp_path: Path) -> None:
    """User Guide, Understanding Views
    (https://docs.crankuptheamps.com/amps-user-guide/views/understanding-views): "the
    underlying topic for the view must be defined in the AMPS configuration file before the
    view itself is defined" (it was accepted wherever it stood)."""
    products = "<Topic><Name>products</Name><MessageType>json</MessageType><Key>/pid</Key></Topic>"
    assert products in TOPICS
    joined = xml(THREE.format(name="late")).replace(products, "")
    joined = joined.replace("</View>", "</View>" + products, 1)  # a join's second topic
    with pytest.raises(ConfigError, match=r"'products' is defined after the view: the under"):
        parse_config(joined, base_dir=tmp_path)
    single = """<View><Name>one</Name><MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <Projection><Field>/sym</Field></Projection><Grouping><Field>/sym</Field></Grouping>
    </View>"""
    late = xml(single).replace(TOPICS, "").replace("</View>", "</View>" + TOPICS, 1)
    with pytest.raises(ConfigError, match=r"'orders' is defined after the view"):
        parse_config(late, base_dir=tmp_path)
    assert parse_config(xml(single), base_dir=tmp_path).sow_views[0].topics == ("orders",)


def test_a_topic_name_of_two_types_must_name_its_type(tmp_path: Path) -> None:
    two = (
        TOPICS + "<Topic><Name>orders</Name><MessageType>nvfix</MessageType><Key>/id</Key></Topic>"
    )
    config = xml(_view(JOIN2)).replace(TOPICS, two)
    with pytest.raises(ConfigError, match=r"several message types are called 'orders'"):
        parse_config(config, base_dir=tmp_path)
    named = config.replace("[orders].[/cid] =", "[json].[orders].[/cid] =").replace(
        "COUNT([orders]", "COUNT([json].[orders]"
    )
    named = named.replace("<Field>[orders].[/cid]</Field>", "<Field>[json].[orders].[/cid]</Field>")
    view = parse_config(named, base_dir=tmp_path).sow_views[0]
    assert view.types == ("json", "json")


# --------------------------------------------------------------------------- broker, frame by frame


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    manual = ManualTime()
    broker = Broker(
        parse_config(xml(VIEWS), base_dir=tmp_path),
        call_later=manual.call_later,
        clock=manual.clock,
        monotonic=manual.clock,
    )
    yield broker
    broker.close()


def logon(broker: Broker, name: str, mt: str | None = None) -> tuple[Connection, FakeSession]:
    session = FakeSession()
    conn = broker.connect(session, message_type=mt)
    broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": name}))
    return conn, session


def command(broker: Broker, conn: Connection, body: bytes = b"", **fields: Any) -> None:
    broker.handle(conn, encode_header(fields) + body)


def pub(broker: Broker, conn: Connection, topic: str, c: str = "p", **doc: Any) -> None:
    command(broker, conn, json.dumps(doc).encode(), c=c, t=topic)


def fix(**fields: Any) -> bytes:
    return "".join(f"{k}={v}{SOH}" for k, v in fields.items()).encode()


def view(broker: Broker, topic: str) -> list[Any]:
    sow = broker.sow_topic(topic)
    assert sow is not None
    return sorted((sow.doc(k) for k in sow), key=json.dumps)


def test_a_three_topic_join_follows_publish_delta_and_delete(broker: Broker) -> None:
    """Two ``=`` joins: every order is kept, with NULL for a customer or product it lacks
    (our reading of the User Guide's "Multiple Topic Aggregation: Join", docs/views.md)."""
    p, _ = logon(broker, "pub")
    pub(broker, p, "customers", cid=1, name="Ada")
    pub(broker, p, "orders", id=10, cid=1, pid="x", qty=2)
    assert view(broker, "left3") == [  # no product x yet
        {"cid": 1, "name": "Ada", "orders": 1, "value": None, "priced": 0}
    ]
    pub(broker, p, "products", pid="x", price=5)
    assert view(broker, "left3") == [
        {"cid": 1, "name": "Ada", "orders": 1, "value": 10, "priced": 1}
    ]
    pub(broker, p, "orders", id=11, cid=1, pid="x", qty=3)
    pub(broker, p, "orders", id=12, cid=1, pid="y", qty=100)  # no product y: NULL price
    assert view(broker, "left3") == [
        {"cid": 1, "name": "Ada", "orders": 3, "value": 25, "priced": 2}
    ]
    # a price change (the third topic) reaches every row through order 10 and 11
    pub(broker, p, "products", c="delta_publish", pid="x", price=7)
    assert view(broker, "left3")[0]["value"] == 35
    # a delta publish to an order moves it to another product
    pub(broker, p, "products", pid="y", price=1)
    pub(broker, p, "orders", c="delta_publish", id=11, pid="y")
    assert view(broker, "left3") == [
        {"cid": 1, "name": "Ada", "orders": 3, "value": 117, "priced": 3}
    ]
    # a second customer; the first one's orders are not touched by it
    pub(broker, p, "customers", cid=2, name="Bob")
    pub(broker, p, "orders", id=20, cid=2, pid="y", qty=4)
    assert [d["cid"] for d in view(broker, "left3")] == [1, 2]
    # deleting the product: the orders stay, with NULL prices
    command(broker, p, c="sow_delete", t="products", filter="/pid = 'y'")
    assert view(broker, "left3") == [
        {"cid": 1, "name": "Ada", "orders": 3, "value": 14, "priced": 1},
        {"cid": 2, "name": "Bob", "orders": 1, "value": None, "priced": 0},
    ]
    # deleting the customer: its orders stay too, in the group of a NULL customer
    command(broker, p, c="sow_delete", t="customers", filter="/cid = 1")
    assert view(broker, "left3") == [
        {"cid": 2, "name": "Bob", "orders": 1, "value": None, "priced": 0},
        {"cid": None, "name": None, "orders": 3, "value": 14, "priced": 1},
    ]
    # a product without orders projects nothing (products are on the right of '=')
    pub(broker, p, "products", pid="z", price=9)
    assert len(view(broker, "left3")) == 2


def _updates(session: FakeSession) -> list[tuple[str, Any, str | None]]:
    out = []
    for payload in session.sent:
        hdr, end = decode_header(payload)
        if hdr.get("c") in ("p", "oof"):
            out.append((hdr["c"], json.loads(payload[end:])["value"], hdr.get("reason")))
    return out


def test_a_three_topic_view_sends_oof_when_a_group_leaves(broker: Broker) -> None:
    p, _ = logon(broker, "pub")
    s, session = logon(broker, "sub")
    pub(broker, p, "customers", cid=1, name="Ada")
    pub(broker, p, "products", pid="x", price=5)
    pub(broker, p, "orders", id=10, cid=1, pid="x", qty=2)
    command(
        broker,
        s,
        c="sow_and_subscribe",
        t="left3",
        sub_id="s",
        query_id="s",
        filter="/value < 50",
        o="oof",
    )
    pub(broker, p, "products", pid="x", price=20)  # 40
    pub(broker, p, "products", pid="x", price=30)  # 60: leaves the filter
    pub(broker, p, "products", pid="x", price=1)  # 2: back
    command(broker, p, c="sow_delete", t="orders", filter="/id = 10")  # the group is gone
    assert _updates(session) == [
        ("p", 40, None),
        ("oof", 60, "match"),
        ("p", 2, None),
        ("oof", 2, "deleted"),
    ]


def test_a_json_and_an_nvfix_topic_join_into_json_nvfix_and_xml_views(broker: Broker) -> None:
    p, _ = logon(broker, "pub")
    f, _ = logon(broker, "fix-pub", "nvfix")
    pub(broker, p, "customers", cid=1, name="Ada")
    pub(broker, p, "customers", cid=2, name="Bob")
    command(broker, f, fix(cid=1, region="EU"), c="p", t="regions")
    command(broker, f, fix(cid=2, region="EU"), c="p", t="regions")
    # the nvfix value "1" joins the json number 1 (join values are compared as strings)
    assert view(broker, "by_region") == [{"region": "EU", "customers": 2}]
    fix_view = broker.sow_topic("by_region_fix", "nvfix")
    xml_view = broker.sow_topic("by_region_xml", "xml")
    assert fix_view is not None and xml_view is not None
    assert [fix_view.get(k).data for k in fix_view] == [fix(region="EU", customers=2)]  # type: ignore[union-attr]
    assert [xml_view.get(k).data for k in xml_view] == [  # type: ignore[union-attr]
        b"<Regions><region>EU</region><customers>2</customers></Regions>"
    ]
    command(broker, p, c="sow_delete", t="customers", filter="/cid = 2")
    assert view(broker, "by_region") == [{"region": "EU", "customers": 1}]
    assert [fix_view.get(k).data for k in fix_view] == [fix(region="EU", customers=1)]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- over TCP


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("view-joins")
    with ServerThread(parse_config(xml(VIEWS), base_dir=base)) as thread:
        yield thread


def _client(server: ServerThread, mt: str = "json") -> Client:
    client = Client(f"joins-{mt}-{time.time_ns()}")
    client.connect(server.uri("tcp", mt))
    client.logon(5000)
    return client


@pytest.mark.integration
def test_a_three_topic_view_over_tcp_with_both_clients(server: ServerThread) -> None:
    amps: Any = pytest.importorskip("AMPS")
    client = _client(server)
    official = amps.Client(f"official-joins-{time.time_ns()}")
    try:
        inbox = Inbox(keep=lambda m: m.get_command() in ("publish", "oof"))
        client.subscribe(inbox, "left3", "/cid = 'tcp'", options="oof", timeout=5000)
        client.publish("customers", json.dumps({"cid": "tcp", "name": "Tee"}))
        client.publish("products", json.dumps({"pid": "tcp-p", "price": 3}))
        client.publish(
            "orders", json.dumps({"id": "tcp-1", "cid": "tcp", "pid": "tcp-p", "qty": 2})
        )
        client.publish(
            "orders", json.dumps({"id": "tcp-2", "cid": "tcp", "pid": "tcp-p", "qty": 1})
        )
        inbox.wait_for_count(2, 10.0)
        official.connect(server.uri("tcp", "json"))
        official.logon()
        docs = [
            json.loads(m.get_data())
            for m in official.sow("left3", "/cid = 'tcp'", timeout=5000)
            if m.get_command() == "sow"
        ]
        assert docs == [{"cid": "tcp", "name": "Tee", "orders": 2, "value": 9, "priced": 2}]
        client.sow_delete("products", "/pid = 'tcp-p'", timeout=5000)
        inbox.wait_for_count(3, 10.0)
        got = [(m.get_command(), json.loads(m.get_data())["value"]) for m in inbox.snapshot()]
        # the delete of the product changes its two rows in one change: the orders stay (a
        # left outer join), priced NULL
        assert got == [("publish", 6), ("publish", 9), ("publish", None)]
    finally:
        official.disconnect()
        client.close()


@pytest.mark.integration
def test_an_nvfix_view_over_tcp(server: ServerThread) -> None:
    json_client = _client(server)
    fix_client = _client(server, "nvfix")
    try:
        inbox = Inbox(keep=lambda m: m.get_command() == "publish")
        fix_client.subscribe(inbox, "by_region_fix", "/region = 'TCP'", timeout=5000)
        json_client.publish("customers", json.dumps({"cid": 901, "name": "Nv"}))
        fix_client.publish("regions", fix(cid=901, region="TCP").decode())
        inbox.wait_for_count(1, 10.0)
        assert inbox.snapshot()[0].get_data() == fix(region="TCP", customers=1).decode()
        found = fix_client.sow("by_region_fix", "/region = 'TCP'", timeout=5000)
        assert [m.get_data() for m in found if m.get_command() == "sow"] == [
            fix(region="TCP", customers=1).decode()
        ]
    finally:
        json_client.close()
        fix_client.close()


def test_the_docs_three_topic_example_prints_what_the_page_says(tmp_path: Path) -> None:
    """docs/views.md "Three or more topics": its example runs and prints the line after it."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "views.md").read_text()
    section = page[page.index("### Three or more topics") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    expected = re.search(r"print\(.*\)\n\s*# (.*)\n", code.group(1))
    assert expected is not None
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected.group(1)
