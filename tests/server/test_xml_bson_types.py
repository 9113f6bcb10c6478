"""The ``xml`` and ``bson`` message types (issue #28): each codec's golden bytes (the AMPS
guide's own XML identifier example, the BSON specification's two examples), hostile XML
refused, then a real server over real sockets where filters, SOW keys, ``delta_publish``
merge, ``select``, ``orderby`` and a transaction log ``<Filter>`` with bookmark replay work
on both types, message by message; and the official client on the same server."""

from __future__ import annotations

import importlib.util
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.bson_codec import (
    Binary,
    BsonFormatError,
    DateTime,
    Int64,
    ObjectId,
    decode_bson,
    encode_bson,
)
from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.payload import decode, delta_merge, encode
from ampsclient_server_stub.engine.xml_codec import (
    MAX_XML_BYTES,
    XmlFormatError,
    decode_xml,
    encode_xml,
)
from ampsclient_server_stub.testing import wait_for

# --------------------------------------------------------------------------- xml codec

GUIDE_ORDER = b"""<Order update="full">
    <ClientID>12345</ClientID>
    <Symbol>IBM</Symbol>
    <OrderQty>1000</OrderQty>
</Order>"""


def test_the_guides_identifier_example_addresses_element_and_attribute() -> None:
    """AMPS User Guide, "AMPS Expressions / Identifiers": ``/Order/Symbol`` and
    ``/Order/@update`` on its ``<Order update="full">`` message."""
    doc = decode_xml(GUIDE_ORDER)
    assert doc == {
        "Order": {"@update": "full", "ClientID": "12345", "Symbol": "IBM", "OrderQty": "1000"}
    }
    assert compile_filter("/Order/Symbol = 'IBM' AND /Order/@update = 'full'")(doc)
    assert compile_filter("/Order/OrderQty > 999")(doc)  # typed comparison, as for FIX
    assert not compile_filter("/Order/OrderQty > 1000")(doc)


def test_xml_repeats_mixed_text_empty_elements_and_round_trip() -> None:
    data = b'<a x="1"><l>p</l><l>q</l><e/><t u="v">w &amp; z</t></a>'
    doc = decode_xml(data)
    assert doc == {"a": {"@x": "1", "l": ["p", "q"], "e": "", "t": {"@u": "v", "#text": "w & z"}}}
    assert encode_xml(doc) == data
    assert compile_filter("/a/l = 'q'")(doc)


@pytest.mark.parametrize(
    "data",
    [
        b'<!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>',  # DTD with an entity
        b'<!DOCTYPE a SYSTEM "file:///etc/passwd"><a/>',  # external DTD
        b"<a>&x;</a>",  # undefined entity
        b"<a><b></a>",  # not well-formed
        b"<a/><b/>",  # two roots
        b"",
        b"<a>" * 65 + b"</a>" * 65,  # too deep
        b"<a>" + b"x" * MAX_XML_BYTES + b"</a>",  # too large
    ],
)
def test_hostile_or_malformed_xml_is_refused(data: bytes) -> None:
    with pytest.raises(XmlFormatError):
        decode_xml(data)
    assert decode("xml", data) is None  # not a document: matches no filter, has no key


@pytest.mark.parametrize("doc", [{"a": 1, "b": 2}, ["a"], {"a b": "1"}, {"a": {"c": object()}}])
def test_encode_xml_refuses_what_it_cannot_write(doc: Any) -> None:
    with pytest.raises(XmlFormatError):
        encode_xml(doc)


# --------------------------------------------------------------------------- bson codec

SPEC_HELLO = b"\x16\x00\x00\x00\x02hello\x00\x06\x00\x00\x00world\x00\x00"
SPEC_AWESOME = (
    b"\x31\x00\x00\x00\x04BSON\x00\x26\x00\x00\x00\x020\x00\x08\x00\x00\x00awesome\x00"
    b"\x011\x00\x33\x33\x33\x33\x33\x33\x14\x40\x102\x00\xc2\x07\x00\x00\x00\x00"
)


def test_the_bson_specifications_examples_both_ways() -> None:
    """bsonspec.org "FAQ": ``{"hello": "world"}`` and ``{"BSON": ["awesome", 5.05, 1986]}``."""
    assert decode_bson(SPEC_HELLO) == {"hello": "world"}
    assert encode_bson({"hello": "world"}) == SPEC_HELLO
    assert decode_bson(SPEC_AWESOME) == {"BSON": ["awesome", 5.05, 1986]}
    assert encode_bson({"BSON": ["awesome", 5.05, 1986]}) == SPEC_AWESOME


def test_bson_types_survive_a_round_trip() -> None:
    doc = {
        "_id": ObjectId("5f1d7a3b9c0e4a2b8d6f1e0c"),
        "small64": Int64(7),
        "big": 2**40,
        "at": DateTime(1_700_000_000_000),
        "bin": Binary(b"\x00\x01", 4),
        "t": True,
        "n": None,
        "sub": {"x": -1},
    }
    back = decode_bson(encode_bson(doc))
    assert back == doc
    assert type(back["small64"]) is Int64 and type(back["big"]) is Int64
    assert type(back["at"]) is DateTime and back["bin"].subtype == 4
    assert compile_filter("/_id = '5f1d7a3b9c0e4a2b8d6f1e0c' AND /sub/x < 0")(back)


@pytest.mark.parametrize(
    "data",
    [
        SPEC_HELLO[:-1],  # truncated
        SPEC_HELLO + b"\x00",  # trailing byte
        b"\x05\x00\x00\x00\x01",  # no terminating NUL
        struct.pack("<i", 12) + b"\x13d\x00" + b"\x00" * 6 + b"\x00",  # decimal128 refused
        b"\x0c\x00\x00\x00\x08b\x00\x02\x00\x00\x00\x00"[:12],  # bad boolean
    ],
)
def test_malformed_or_unsupported_bson_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_bson(data)
    assert decode("bson", data) is None


def test_encode_bson_refuses_what_it_cannot_write() -> None:
    for doc in (["a"], {"a\x00": 1}, {"a": 2**64}, {"a": ObjectId("zz")}, {"a": object()}):
        with pytest.raises(BsonFormatError):
            encode_bson(doc)


def test_delta_merge_keeps_the_bson_types_and_xml_attributes() -> None:
    old = decode_bson(encode_bson({"id": Int64(1), "qty": 5, "px": 1.5}))
    merged = delta_merge(old, decode_bson(encode_bson({"qty": 6})))
    assert decode_bson(encode("bson", merged)) == {"id": 1, "qty": 6, "px": 1.5}
    assert type(decode_bson(encode("bson", merged))["id"]) is Int64
    xml_merged = delta_merge(
        decode("xml", b'<o id="1"><q>5</q><p>2</p></o>'), decode("xml", b"<o><q>6</q></o>")
    )
    assert encode("xml", xml_merged) == b'<o id="1"><q>6</q><p>2</p></o>'


# --------------------------------------------------------------------------- a real server

CONFIG = """<AMPSConfig><Name>xml-bson</Name>
  <SOW>
    <Topic><Name>orders</Name><MessageType>xml</MessageType><Key>/Order/@id</Key></Topic>
    <Topic><Name>orders</Name><MessageType>bson</MessageType><Key>/id</Key></Topic>
    <Queue><Name>work-xml</Name><MessageType>xml</MessageType>
      <UnderlyingTopic>work-xml-src</UnderlyingTopic>
      <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>
      <Filter>/Order/Qty > 100</Filter></Queue>
    <Queue><Name>work-bson</Name><MessageType>bson</MessageType>
      <UnderlyingTopic>work-bson-src</UnderlyingTopic>
      <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>
      <Filter>/qty > 100</Filter></Queue>
  </SOW>
  <TransactionLog><JournalDirectory>{journal}</JournalDirectory>
    <Topic><Name>fills-xml</Name><MessageType>xml</MessageType>
      <Filter>/Fill/Status = 'F'</Filter></Topic>
    <Topic><Name>fills-bson</Name><MessageType>bson</MessageType>
      <Filter>/status = 'F'</Filter></Topic>
    <Topic><Name>fills-msgpack</Name><MessageType>msgpack</MessageType>
      <Filter>/status = 'F'</Filter></Topic>
    <Topic><Name>fills-nvfix</Name><MessageType>nvfix</MessageType>
      <Filter>/status = 'F'</Filter></Topic>
    <Topic><Name>work-xml-src</Name><MessageType>xml</MessageType></Topic>
    <Topic><Name>work-bson-src</Name><MessageType>bson</MessageType></Topic>
  </TransactionLog>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports></AMPSConfig>"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    tmp: Path = tmp_path_factory.mktemp("xmlbson")
    config = parse_config(CONFIG.format(journal=tmp / "journal"), base_dir=tmp)
    with ServerThread(config, record_all_topics=False) as thread:
        yield thread


_names = iter(range(1_000_000))


def client(server: ServerThread, message_type: str) -> Client:
    c = Client(f"xb-{next(_names)}")
    c.connect(server.uri("tcp", message_type))
    c.logon(5000)
    return c


class Inbox:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: list[bytes] = []

    def __call__(self, message: Any) -> None:
        with self.lock:
            self.data.append(message.get_data_raw())

    def has(self, body: bytes) -> bool:
        with self.lock:
            return body in self.data


def xml_order(oid: str, sym: str, qty: int) -> bytes:
    return f'<Order id="{oid}"><Symbol>{sym}</Symbol><Qty>{qty}</Qty></Order>'.encode()


def bson_order(oid: str, sym: str, qty: int) -> bytes:
    return encode_bson({"id": oid, "sym": sym, "qty": qty})


def sow(c: Client, topic: str, **kwargs: Any) -> list[bytes]:
    return [
        m.get_data_raw() for m in c.sow(topic, timeout=5000, **kwargs) if m.get_command() == "sow"
    ]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("message_type", "make", "flt"),
    [
        ("xml", xml_order, "/Order/Symbol = 'IBM' AND /Order/Qty > 100 AND /Order/@id != 'x'"),
        ("bson", bson_order, "/sym = 'IBM' AND /qty > 100"),
    ],
)
def test_a_content_filter_on_xml_and_bson(
    server: ServerThread, message_type: str, make: Any, flt: str
) -> None:
    topic = f"live-{message_type}"
    inbox = Inbox()
    with client(server, message_type) as sub, client(server, message_type) as pub:
        sub.subscribe(inbox, topic, flt)
        bodies = [make("a", "IBM", 150), make("b", "MSFT", 150), make("c", "IBM", 99)]
        bodies.append(make("d", "IBM", 1000))
        for body in bodies:
            pub.publish(topic, body)
        pub.publish(topic, b"\x00not a document")  # matches nothing, connection kept
        marker = make("z", "IBM", 101)
        pub.publish(topic, marker)
        pub.flush(5000)
        wait_for(lambda: inbox.has(marker), what="the marker")
    assert inbox.data == [bodies[0], bodies[3], marker]


@pytest.mark.integration
def test_xml_sow_key_on_an_attribute_delta_merge_orderby_and_select(server: ServerThread) -> None:
    with client(server, "xml") as c:
        c.publish("orders", xml_order("1", "IBM", 100))
        c.publish("orders", xml_order("2", "MSFT", 300))
        c.publish("orders", xml_order("3", "AAPL", 200))
        c.delta_publish("orders", b'<Order id="1"><Qty>250</Qty></Order>')  # merged by name
        c.flush(5000)
        assert sow(c, "orders", order_by="/Order/Qty DESC") == [
            xml_order("2", "MSFT", 300),
            xml_order("1", "IBM", 250),
            xml_order("3", "AAPL", 200),
        ]
        assert sow(c, "orders", filter="/Order/@id = '1'") == [xml_order("1", "IBM", 250)]
        selected = [
            m.get_data_raw()
            for m in c.execute(
                Command("sow")
                .set_topic("orders")
                .set_filter("/Order/Symbol = 'MSFT'")
                .set_options("select=[-/Order/Qty]")
                .set_timeout(5000)
            )
            if m.get_command() == "sow"
        ]
        assert selected == [b'<Order id="2"><Symbol>MSFT</Symbol></Order>']


@pytest.mark.integration
def test_bson_sow_key_delta_merge_orderby_and_select(server: ServerThread) -> None:
    with client(server, "bson") as c:
        for oid, sym, qty in (("1", "IBM", 100), ("2", "MSFT", 300), ("3", "AAPL", 200)):
            c.publish("orders", bson_order(oid, sym, qty))
        c.delta_publish("orders", encode_bson({"id": "1", "qty": 250}))
        c.flush(5000)
        got = [decode_bson(b) for b in sow(c, "orders", order_by="/qty DESC")]
        assert got == [
            {"id": "2", "sym": "MSFT", "qty": 300},
            {"id": "1", "sym": "IBM", "qty": 250},
            {"id": "3", "sym": "AAPL", "qty": 200},
        ]
        selected = [
            decode_bson(m.get_data_raw())
            for m in c.execute(
                Command("sow")
                .set_topic("orders")
                .set_filter("/qty >= 250")
                .set_order_by("/id")
                .set_options("select=[-/,+/id]")
                .set_timeout(5000)
            )
            if m.get_command() == "sow"
        ]
        assert selected == [{"id": "1"}, {"id": "2"}]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("message_type", "make"),
    [
        ("xml", lambda i, s: f"<Fill><Id>{i}</Id><Status>{s}</Status></Fill>".encode()),
        ("bson", lambda i, s: encode_bson({"id": i, "status": s})),
        ("msgpack", lambda i, s: encode("msgpack", {"id": i, "status": s})),
        ("nvfix", lambda i, s: f"id={i}\x01status={s}\x01".encode()),
    ],
)
def test_a_transaction_log_filter_on_xml_and_bson_records_only_matches(
    server: ServerThread, message_type: str, make: Any
) -> None:
    topic = f"fills-{message_type}"
    inbox = Inbox()
    with client(server, message_type) as c:
        bodies = [make("a", "F"), make("b", "0"), make("c", "F")]
        marker = make("z", "F")
        for body in (*bodies, marker):
            c.publish(topic, body)
        c.flush(5000)
        c.subscribe(inbox, topic, bookmark="0")
        wait_for(lambda: inbox.has(marker), what="the replay's marker")
    assert inbox.data == [bodies[0], bodies[2], marker]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("message_type", "make", "flt"),
    [("xml", xml_order, "/Order/Symbol != 'MSFT'"), ("bson", bson_order, "/sym != 'MSFT'")],
)
def test_a_queue_filter_and_a_subscriber_filter_on_xml_and_bson(
    server: ServerThread, message_type: str, make: Any, flt: str
) -> None:
    """The queue's ``<Filter>`` (qty > 100) and the subscriber's filter both read the
    message: only messages passing both are delivered, in order."""
    inbox = Inbox()
    with client(server, message_type) as sub, client(server, message_type) as pub:
        sub.set_auto_ack(True)
        sub.subscribe(inbox, f"work-{message_type}", flt)
        bodies = [make("a", "IBM", 150), make("b", "IBM", 50), make("c", "MSFT", 500)]
        bodies.append(make("d", "AAPL", 101))
        marker = make("z", "IBM", 999)
        for body in (*bodies, marker):
            pub.publish(f"work-{message_type}-src", body)
        pub.flush(5000)
        wait_for(lambda: inbox.has(marker), what="the queue's marker")
    assert inbox.data == [bodies[0], bodies[3], marker]


@pytest.mark.interop
@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("AMPS") is None, reason="official client absent")
def test_the_official_client_filters_an_xml_topic(server: ServerThread) -> None:
    import AMPS  # the official client: a black-box peer

    got: list[str] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        with lock:
            got.append(message.get_data())

    official = AMPS.Client(f"xb-official-{next(_names)}")
    official.connect(server.uri("tcp", "xml"))
    official.logon(5000)
    try:
        official.subscribe(on_message, "official-xml", "/Order/@id = 'y' OR /Order/Qty > 10")
        bodies = [xml_order("x", "A", 5), xml_order("y", "B", 1), xml_order("w", "C", 11)]
        for body in bodies:
            official.publish("official-xml", body.decode())
        official.publish_flush(5000)

        def both() -> bool:
            with lock:
                return len(got) >= 2

        wait_for(both, what="two deliveries")
        marker = xml_order("m", "M", 99)
        official.publish("official-xml", marker.decode())
        wait_for(lambda: marker.decode() in got, what="the marker")
    finally:
        official.disconnect()
    assert got == [bodies[1].decode(), bodies[2].decode(), marker.decode()]


@pytest.mark.parametrize(
    "name", ["bflat", "BFlat", "protobuf", "composite-local", "composite-global"]
)
@pytest.mark.parametrize(
    "where",
    [
        "<SOW><Topic><Name>t</Name><MessageType>{mt}</MessageType><Key>/a</Key></Topic></SOW>",
        "<TransactionLog><JournalDirectory>j</JournalDirectory><Topic><Name>t</Name>"
        "<MessageType>{mt}</MessageType></Topic></TransactionLog>",
        "<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>"
        "<Protocol>amps</Protocol><MessageType>{mt}</MessageType></Transport></Transports>",
    ],
)
def test_a_message_type_the_server_cannot_implement_is_refused_at_start(
    tmp_path: Path, name: str, where: str
) -> None:
    """Issue #28: no ``<MessageType>`` is accepted and then ignored: ``bflat`` (its
    encoding is not in the AMPS guide), ``protobuf`` and the composite types (they need
    ``<MessageTypes>``) are refused by name, wherever a ``<MessageType>`` appears."""
    from ampsclient_server_stub.config import ConfigError

    xml = f"<AMPSConfig><Name>x</Name>{where.format(mt=name)}</AMPSConfig>"
    with pytest.raises(ConfigError, match=rf"<MessageType> '{name.lower()}' is not supported"):
        parse_config(xml, base_dir=tmp_path)


@pytest.mark.interop
@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("AMPS") is None, reason="official client absent")
def test_the_official_client_publishes_and_filters_bson(server: ServerThread) -> None:
    """The official client on a ``bson`` URI: its binary payloads are BSON documents to the
    server (a filter on them), and what it receives is the bytes it published."""
    import AMPS  # the official client: a black-box peer

    got: list[bytes] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        data = message.get_data()
        with lock:
            got.append(data if isinstance(data, bytes) else data.encode())

    official = AMPS.Client(f"xb-official-{next(_names)}")
    official.connect(server.uri("tcp", "bson"))
    official.logon(5000)
    try:
        official.subscribe(on_message, "official-bson", "/qty > 10")
        bodies = [bson_order("x", "A", 5), bson_order("y", "B", 11), bson_order("m", "M", 99)]
        for body in bodies:
            official.publish("official-bson", body)
        official.publish_flush(5000)

        def marker() -> bool:
            with lock:
                return bodies[2] in got

        wait_for(marker, what="the marker")
    finally:
        official.disconnect()
    assert got == bodies[1:]


AGG_BSON = "projection=[/sym AS /sym,SUM(/qty) AS /total,COUNT(/id) AS /n],grouping=[/sym]"


@pytest.mark.integration
def test_an_aggregated_query_and_subscription_on_bson_answer_in_bson(server: ServerThread) -> None:
    """Aggregated records come in the topic's type (they were json whatever the type)."""
    inbox = Inbox()
    with client(server, "bson") as c:
        c.publish("orders", bson_order("agg-1", "AGG", 10))
        c.publish("orders", bson_order("agg-2", "AGG", 5))
        c.flush(5000)
        got = sow(c, "orders", filter="/sym = 'AGG'", options=AGG_BSON)
        assert [decode_bson(b) for b in got] == [{"sym": "AGG", "total": 15, "n": 2}]
        c.sow_and_subscribe(inbox, "orders", "/sym = 'AGG'", options=AGG_BSON)
        c.publish("orders", bson_order("agg-3", "AGG", 1))
        expected = {"sym": "AGG", "total": 16, "n": 3}

        def arrived() -> bool:
            with inbox.lock:
                return any(_bson_or_none(b) == expected for b in inbox.data)

        wait_for(arrived, timeout=15)


def _bson_or_none(data: bytes) -> Any:
    try:
        return decode_bson(data)
    except BsonFormatError:
        return None


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("AMPS") is None, reason="official client absent")
def test_the_official_client_gets_an_xml_aggregated_sow_in_xml(server: ServerThread) -> None:
    import AMPS  # the official client: a black-box peer

    official = AMPS.Client(f"xb-official-{next(_names)}")
    official.connect(server.uri("tcp", "xml"))
    official.logon(5000)
    try:
        official.publish("orders", xml_order("ox-1", "OAGG", 7).decode())
        official.publish("orders", xml_order("ox-2", "OAGG", 8).decode())
        official.publish_flush(5000)
        cmd = (
            AMPS.Command("sow")
            .set_topic("orders")
            .set_filter("/Order/Symbol = 'OAGG'")
            .set_options(
                "projection=[/Order/Symbol AS /Agg/sym,SUM(/Order/Qty) AS /Agg/total],"
                "grouping=[/Order/Symbol]"
            )
        )
        got = [m.get_data() for m in official.execute(cmd) if m.get_command() == "sow"]
        assert [decode("xml", g.encode()) for g in got] == [{"Agg": {"sym": "OAGG", "total": "15"}}]
    finally:
        official.disconnect()


@pytest.mark.integration
def test_an_xml_delta_subscription_gets_the_changed_children_and_the_key(
    server: ServerThread,
) -> None:
    """An xml message is one root element, so the delta is taken under it: the changed child
    elements and the SOW key attribute (it was the whole message, the root being the only
    top-level field)."""
    inbox = Inbox()
    with client(server, "xml") as c:
        c.publish("orders", xml_order("dx-1", "IBM", 100))
        c.flush(5000)
        c.delta_subscribe(inbox, "orders", "/Order/@id = 'dx-1'", timeout=5000)
        c.publish("orders", xml_order("dx-1", "IBM", 150))
        c.publish("orders", xml_order("dx-1", "MSFT", 150))
        c.flush(5000)
        wait_for(lambda: len(inbox.data) >= 2, what="both deltas")
    assert inbox.data == [
        b'<Order id="dx-1"><Qty>150</Qty></Order>',
        b'<Order id="dx-1"><Symbol>MSFT</Symbol></Order>',
    ]
