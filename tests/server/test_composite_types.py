"""Composite message types (issue #28), as the AMPS User Guide defines them ("Composite
Messages"): a ``<MessageTypes>`` declaration, the wire layout (each part preceded by its
4-byte big-endian length, as the official client's ``CompositeMessageBuilder`` writes it:
compared byte for byte), ``composite-local`` parts addressed by position (``/0/sym``) and
``composite-global`` parts merged into one document (``/sym``), binary parts opaque; then a
real server over real sockets: filters, SOW keys, ``orderby``, ``select``, ``delta_publish``
merge part by part, a transaction log ``<Filter>`` with bookmark replay, a malformed
composite payload refused once with the connection kept, and the official client publishing
and receiving composite messages."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient.compat import CompositeMessageBuilder, CompositeMessageParser
from ampsclient.exceptions import (
    BadFilterException,
    BadSowKeyException,
    CommandError,
    InvalidOptionsException,
    InvalidTopicException,
)
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.composite_codec import (
    CompositeFormatError,
    CompositeType,
    OpaquePart,
    decode_composite,
    split_composite,
)
from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.payload import decode, encode, is_parseable
from ampsclient_server_stub.testing import wait_for

HAS_OFFICIAL = importlib.util.find_spec("AMPS") is not None
SOH = "\x01"

LOCAL = "ct-order-parts"  # json, nvfix, binary: composite-local
GLOBAL = "ct-images"  # json, binary, binary: composite-global
OPAQUE = "ct-blobs"  # binary only: nothing to filter on

TYPES = f"""<MessageTypes>
    <MessageType><Name>{LOCAL}</Name><Module>composite-local</Module>
      <MessagePart>json</MessagePart><MessagePart>nvfix</MessagePart>
      <MessagePart>binary</MessagePart></MessageType>
    <MessageType><Name>{GLOBAL}</Name><Module>composite-global</Module>
      <MessagePart>json</MessagePart><MessagePart>binary</MessagePart>
      <MessagePart>binary</MessagePart></MessageType>
    <MessageType><Name>{OPAQUE}</Name><Module>composite-local</Module>
      <MessagePart>binary</MessagePart></MessageType>
  </MessageTypes>"""


def composite(*parts: str | bytes) -> bytes:
    builder = CompositeMessageBuilder()
    for part in parts:
        builder.append(part)
    return builder.get_data()


# --------------------------------------------------------------------------- the codec

PART_SETS: list[tuple[str | bytes, ...]] = [
    ('{"id":1}',),
    ('{"id":1}', b"\x00\x01\x02\xff", b""),
    ("", "Symbol=IBM\x01Qty=5\x01"),
    ("é ü", b"\x00" * 70_000),
]


@pytest.mark.interop
@pytest.mark.skipif(not HAS_OFFICIAL, reason="official client absent")
@pytest.mark.parametrize("parts", PART_SETS, ids=range(len(PART_SETS)))
def test_our_builder_and_parser_match_the_official_ones(parts: tuple[str | bytes, ...]) -> None:
    """Differential: the same parts give the same bytes, and each parser reads the other's."""
    import AMPS  # the official client: a black-box peer

    official = AMPS.CompositeMessageBuilder()
    for part in parts:
        official.append(part)
    theirs = official.get_data()
    ours = composite(*parts)
    assert ours == theirs
    raw = [p.encode() if isinstance(p, str) else p for p in parts]
    assert ours[:4] == len(raw[0]).to_bytes(4, "big")  # the 4-byte big-endian length
    their_parser = AMPS.CompositeMessageParser()
    our_parser = CompositeMessageParser()
    assert their_parser.parse(ours) == our_parser.parse(theirs) == len(parts)
    for index, part in enumerate(raw):
        assert our_parser.get_part_raw(index) == part
        assert their_parser.get_part_raw(index) == part


@pytest.mark.interop
@pytest.mark.skipif(not HAS_OFFICIAL, reason="official client absent")
@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00\x00\x05abc",  # a part longer than what follows
        b"\x00\x00\x00\x02ab\x00\x00",  # a length prefix cut short
        b"\x00\x00\x00\x02ab\x00\x00\x00\x09xy",
        b"\x00\x00\x00\x02abtail",
        b"\x00\x00\x00\x00",
        b"",
    ],
)
def test_both_parsers_read_malformed_payloads_alike(data: bytes) -> None:
    """Differential, on bad input: the whole parts before the damage, nothing past it; an
    index out of range is ``None``."""
    import AMPS  # the official client: a black-box peer

    theirs = AMPS.CompositeMessageParser()
    ours = CompositeMessageParser()
    assert ours.parse(data) == theirs.parse(data)
    for index in range(-1, ours.size() + 1):
        assert ours.get_part_raw(index) == theirs.get_part_raw(index)
        assert ours.get_part(index) == theirs.get_part(index)


def test_the_layout_and_the_unparsed_payload() -> None:
    data = composite('{"a":1}', b"\x00\xff") + b"rest"
    assert split_composite(data, 2) == ([b'{"a":1}', b"\x00\xff"], b"rest")
    assert split_composite(data[:11], 2) == ([b'{"a":1}'], b"")  # fewer parts than declared
    for bad in (data[:3], data[:8], composite('{"a":1}')[:-1] + b"\x00\x00"):
        with pytest.raises(CompositeFormatError):
            split_composite(bad, 2)


def test_local_parts_by_position_global_parts_merged() -> None:
    local = CompositeType("l", "composite-local", ("json", "nvfix", "binary"))
    glob = CompositeType("g", "composite-global", ("json", "json", "binary"))
    data = composite('{"id":7,"px":{"bid":1}}', f"Sym=IBM{SOH}", b"\x00img") + b"tail"
    doc = decode_composite(local, data, decode)
    assert doc == {
        "0": {"id": 7, "px": {"bid": 1}},
        "1": {"Sym": "IBM"},
        "2": OpaquePart(b"\x00img"),
        "3": OpaquePart(b"tail"),
    }
    assert compile_filter("/0/id = 7 AND /1/Sym = 'IBM' AND /0/px/bid = 1")(doc)
    assert not compile_filter("/2 = 'img'")(doc) and not compile_filter("/id = 7")(doc)
    gdoc = decode_composite(
        glob, composite('{"id":7,"px":{"bid":1}}', '{"id":8,"px":{"ask":2}}'), decode
    )
    assert gdoc == {"id": [7, 8], "px": {"bid": 1, "ask": 2}}
    assert compile_filter("/id = 8 AND /px/ask = 2")(gdoc)
    with pytest.raises(CompositeFormatError, match="part 1 is not a valid json"):
        decode_composite(glob, composite("{}", "not json"), decode)


def test_a_local_document_is_written_back_part_by_part(tmp_path: Path) -> None:
    parse_config(f"<AMPSConfig><Name>c</Name>{TYPES}</AMPSConfig>", base_dir=tmp_path)
    data = composite('{"id":1,"q":2}', f"Sym=IBM{SOH}", b"\x00img") + b"tail"
    doc = decode(LOCAL, data)
    assert encode(LOCAL, doc) == data
    assert encode(LOCAL, {"0": {"id": 1}}) == composite('{"id":1}', "", b"")
    assert is_parseable(LOCAL) and is_parseable(GLOBAL) and not is_parseable(OPAQUE)
    with pytest.raises(ValueError, match="composite-global"):
        encode(GLOBAL, decode(GLOBAL, composite('{"id":1}')))


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("declaration", "pattern"),
    [
        (
            "<MessageType><Name>p</Name><Module>protobuf</Module></MessageType>",
            r"<Module> 'protobuf' is not supported: protobuf needs the \.proto files",
        ),
        (  # the AMPS User Guide's own sample ("Protobuf Message Types")
            "<MessageType><Name>my-protobuf-messages</Name><Module>protobuf</Module>"
            "<ProtoPath>proto-archive;/mnt/shared/protofiles</ProtoPath>"
            "<ProtoFile>proto-archive/person.proto</ProtoFile>"
            "<Type>MyNamespace.Message</Type></MessageType>",
            r"<MessageType> 'my-protobuf-messages': <Module> 'protobuf' is not supported",
        ),
        (
            "<MessageType><Name>f</Name><Module>fix</Module></MessageType>",
            r"<Module> 'fix' is not supported: .*only the composite-local and composite-global",
        ),
        (
            "<MessageType><Name>b</Name><Module>composite-local</Module>"
            "<MessagePart>bflat</MessagePart></MessageType>",
            r"<MessagePart> 'bflat' is not supported",
        ),
        (
            "<MessageType><Name>json</Name><Module>composite-local</Module>"
            "<MessagePart>json</MessagePart></MessageType>",
            r"'json' is a built-in message type name",
        ),
        (
            "<MessageType><Name>e</Name><Module>composite-local</Module></MessageType>",
            r"needs at least one <MessagePart>",
        ),
        (
            "<MessageType><Name>ct-twice</Name><Module>composite-local</Module>"
            "<MessagePart>json</MessagePart></MessageType>" * 2,
            r"'ct-twice' is declared twice",
        ),
        (
            "<MessageType><Name>ct-extra-child</Name><Module>composite-local</Module>"
            "<MessagePart>json</MessagePart><ProtoPath>p</ProtoPath></MessageType>",
            r"<ProtoPath> in <MessageType> is not supported",
        ),
    ],
)
def test_a_declaration_the_server_cannot_implement_is_refused_by_name(
    tmp_path: Path, declaration: str, pattern: str
) -> None:
    xml = f"<AMPSConfig><Name>x</Name><MessageTypes>{declaration}</MessageTypes></AMPSConfig>"
    with pytest.raises(ConfigError, match=pattern):
        parse_config(xml, base_dir=tmp_path)


def test_a_view_of_a_global_type_is_refused(tmp_path: Path) -> None:
    """The guide: views, joins and aggregation cannot project a composite-global type."""
    xml = f"""<AMPSConfig><Name>x</Name>{TYPES}<SOW>
      <Topic><Name>images</Name><MessageType>{GLOBAL}</MessageType><Key>/id</Key></Topic>
      <View><Name>by-fmt</Name><UnderlyingTopic>images</UnderlyingTopic>
        <MessageType>{GLOBAL}</MessageType><Projection><Field>/fmt</Field></Projection>
        <Grouping><Field>/fmt</Field></Grouping></View></SOW></AMPSConfig>"""
    with pytest.raises(ConfigError, match=f"<View> of message type '{GLOBAL}' is not supported"):
        parse_config(xml, base_dir=tmp_path)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (
            f"""<TransactionLog><Topic><Name>t</Name><MessageType>{LOCAL}</MessageType>
              <Filter>/2 = 'x'</Filter></Topic></TransactionLog>""",
            "<TransactionLog> <Topic> 't'",
        ),
        (
            f"""<TransactionLog><Topic><Name>s</Name><MessageType>{LOCAL}</MessageType></Topic>
              </TransactionLog><SOW><Queue><Name>q</Name><MessageType>{LOCAL}</MessageType>
              <UnderlyingTopic>s</UnderlyingTopic><Filter>/0/a = 1 AND /2/b = 1</Filter>
              </Queue></SOW>""",
            "queue 'q'",
        ),
        (
            f"""<TransactionLog><Topic><Name>r</Name><MessageType>{LOCAL}</MessageType></Topic>
              </TransactionLog><Replication><Destination><Name>D</Name>
              <SyncType>async</SyncType><Topic><Name>r</Name><MessageType>{LOCAL}</MessageType>
              <Filter>/3 IS NULL</Filter></Topic><Transport><Type>amps-replication</Type>
              <InetAddr>127.0.0.1:1</InetAddr></Transport></Destination></Replication>""",
            "<Topic> 'r'",
        ),
        (
            f"""<SOW><Topic><Name>k</Name><MessageType>{LOCAL}</MessageType><Key>/0/id</Key>
              </Topic><ConflatedTopic><Name>c</Name><MessageType>{LOCAL}</MessageType>
              <UnderlyingTopic>k</UnderlyingTopic><Filter>/2 = 'x'</Filter></ConflatedTopic>
              </SOW>""",
            "conflated topic 'c'",
        ),
    ],
    ids=["txlog", "queue", "replication", "conflated"],
)
def test_a_configured_filter_inside_a_binary_part_is_refused_at_start(
    tmp_path: Path, body: str, where: str
) -> None:
    """As a subscriber's filter is: a binary part (or the unparsed payload, ``/3``) is
    opaque, a ``<Filter>`` reading it could only match nothing (or see its presence)."""
    xml = f"<AMPSConfig><Name>x</Name>{TYPES}{body}</AMPSConfig>"
    with pytest.raises(ConfigError, match=re.escape(where) + ".*is opaque"):
        parse_config(xml, base_dir=tmp_path)
    parse_config(xml.replace("/2", "/0").replace("/3 IS NULL", "/0/a = 1"), base_dir=tmp_path)


def test_a_name_declared_differently_in_the_same_process_is_refused(tmp_path: Path) -> None:
    def config(part: str) -> str:
        return (
            "<AMPSConfig><Name>x</Name><MessageTypes><MessageType><Name>ct-redefined</Name>"
            f"<Module>composite-local</Module><MessagePart>{part}</MessagePart></MessageType>"
            "</MessageTypes></AMPSConfig>"
        )

    parse_config(config("json"), base_dir=tmp_path)
    parse_config(config("json"), base_dir=tmp_path)  # the same declaration again: fine
    with pytest.raises(ConfigError, match="already defined differently in this process"):
        parse_config(config("xml"), base_dir=tmp_path)


# --------------------------------------------------------------------------- a real server

CONFIG = f"""<AMPSConfig><Name>composite</Name>
  {TYPES}
  <SOW>
    <Topic><Name>orders</Name><MessageType>{LOCAL}</MessageType><Key>/0/id</Key></Topic>
    <Topic><Name>images</Name><MessageType>{GLOBAL}</MessageType><Key>/id</Key></Topic>
    <Topic><Name>delta-orders</Name><MessageType>{LOCAL}</MessageType><Key>/0/id</Key></Topic>
    <Queue><Name>work</Name><MessageType>{LOCAL}</MessageType>
      <UnderlyingTopic>work-src</UnderlyingTopic>
      <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>
      <Filter>/1/Qty > 100</Filter></Queue>
  </SOW>
  <TransactionLog><JournalDirectory>{{journal}}</JournalDirectory>
    <Topic><Name>work-src</Name><MessageType>{LOCAL}</MessageType></Topic>
    <Topic><Name>fills</Name><MessageType>{LOCAL}</MessageType>
      <Filter>/1/Status = 'F'</Filter></Topic>
  </TransactionLog>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports></AMPSConfig>"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    tmp: Path = tmp_path_factory.mktemp("composite")
    config = parse_config(CONFIG.format(journal=tmp / "journal"), base_dir=tmp)
    with ServerThread(config, record_all_topics=False) as thread:
        yield thread


_names = iter(range(1_000_000))


def client(server: ServerThread, message_type: str) -> Client:
    c = Client(f"ct-{next(_names)}")
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


def order(oid: int, sym: str, qty: int, image: bytes = b"\x89PNG\x00") -> bytes:
    return composite(f'{{"id":{oid},"sym":"{sym}"}}', f"Qty={qty}{SOH}Status=N{SOH}", image)


def sow(c: Client, topic: str, **kwargs: Any) -> list[bytes]:
    return [
        m.get_data_raw() for m in c.sow(topic, timeout=5000, **kwargs) if m.get_command() == "sow"
    ]


@pytest.mark.integration
def test_a_filter_addresses_a_local_part_by_position(server: ServerThread) -> None:
    inbox = Inbox()
    with client(server, LOCAL) as sub, client(server, LOCAL) as pub:
        sub.subscribe(inbox, "live", "/0/sym = 'IBM' AND /1/Qty > 100")
        bodies = [order(1, "IBM", 150), order(2, "MSFT", 150), order(3, "IBM", 99)]
        bodies.append(order(4, "IBM", 1000, image=b""))  # an empty binary part
        for body in bodies:
            pub.publish("live", body)
        pub.publish("live", b"\x00\x00\x00\x09{}")  # a length past the end: matches nothing
        marker = order(9, "IBM", 101)
        pub.publish("live", marker)
        pub.flush(5000)
        wait_for(lambda: inbox.has(marker), what="the marker")
    assert inbox.data == [bodies[0], bodies[3], marker]


@pytest.mark.integration
def test_a_filter_on_a_global_type_reads_the_merged_parts(server: ServerThread) -> None:
    inbox = Inbox()
    with client(server, GLOBAL) as sub, client(server, GLOBAL) as pub:
        sub.subscribe(inbox, "live-images", "/width > 100 AND /fmt = 'png'")
        bodies = [
            composite('{"id":1,"width":640,"fmt":"png"}', b"thumb", b"full"),
            composite('{"id":2,"width":64,"fmt":"png"}', b"thumb", b"full"),
            composite('{"id":3,"width":640,"fmt":"jpg"}', b"", b""),
        ]
        marker = composite('{"id":9,"width":101,"fmt":"png"}', b"m", b"m")
        for body in (*bodies, marker):
            pub.publish("live-images", body)
        pub.flush(5000)
        wait_for(lambda: inbox.has(marker), what="the marker")
    assert inbox.data == [bodies[0], marker]


@pytest.mark.integration
def test_a_filter_on_a_type_of_binary_parts_only_is_refused(server: ServerThread) -> None:
    with client(server, OPAQUE) as c, pytest.raises(BadFilterException, match="bad filter"):
        c.subscribe(lambda _m: None, "blobs", "/0 = 1", timeout=5000)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("field", "where"),
    [
        ("filter", "/2 = 'x'"),
        ("filter", "/0/sym = 'IBM' OR /2/x IS NOT NULL"),
        ("filter", "/3 IS NULL"),  # the unparsed payload
        ("orderby", "/0/id, /2 DESC"),
    ],
)
def test_what_reads_inside_a_binary_part_is_refused(
    server: ServerThread, field: str, where: str
) -> None:
    """A binary part is opaque: a filter on it matched nothing (``IS NOT NULL`` only saw the
    part's presence) and an ``orderby`` on it sorted nothing. ``bad filter`` and
    ``invalid options`` naming it; ``select`` still keeps the part whole."""
    with client(server, LOCAL) as c:
        cmd = Command("sow").set_topic("orders").set_timeout(5000)
        if field == "filter":
            cmd.set_filter(where)
            error: type[Exception] = BadFilterException
        else:
            cmd.set_order_by(where)
            error = InvalidOptionsException
        with pytest.raises(error, match="is opaque"):
            c.execute(cmd)
        sow(c, "orders", filter="/0/id = 1")  # the connection goes on


@pytest.mark.integration
def test_sow_key_orderby_select_and_delta_merge_on_local_parts(server: ServerThread) -> None:
    with client(server, LOCAL) as c:
        c.publish("orders", order(1, "IBM", 100))
        c.publish("orders", order(2, "MSFT", 300, image=b"msft"))
        c.publish("orders", order(3, "AAPL", 200))
        c.publish("orders", order(1, "IBM", 120))  # the same key /0/id: replaces
        # a delta: part 0 merged by field, part 1 by name, the binary part (empty) kept
        c.delta_publish("orders", composite('{"id":3,"note":"x"}', f"Qty=250{SOH}", b""))
        c.flush(5000)
        aapl = composite(
            '{"id":3,"sym":"AAPL","note":"x"}', f"Qty=250{SOH}Status=N{SOH}", b"\x89PNG\x00"
        )
        assert sow(c, "orders", order_by="/1/Qty DESC") == [
            order(2, "MSFT", 300, image=b"msft"),
            aapl,
            order(1, "IBM", 120),
        ]
        assert sow(c, "orders", filter="/0/id = 1") == [order(1, "IBM", 120)]
        selected = [
            m.get_data_raw()
            for m in c.execute(
                Command("sow")
                .set_topic("orders")
                .set_filter("/0/sym = 'MSFT'")
                .set_options("select=[-/,+/0/sym,+/2]")
                .set_timeout(5000)
            )
            if m.get_command() == "sow"
        ]
        assert selected == [composite('{"sym":"MSFT"}', "", b"msft")]


@pytest.mark.integration
def test_a_delta_subscription_on_a_local_type_gets_the_changed_parts(
    server: ServerThread,
) -> None:
    """Parts are the top-level fields of a composite-local document, so a delta holds each
    changed part whole, the SOW key (in its part), and every unchanged part empty."""
    inbox = Inbox()
    with client(server, LOCAL) as c:
        c.publish("delta-orders", order(1, "IBM", 10, image=b"img"))
        c.flush(5000)
        c.execute_async(Command("delta_subscribe").set_topic("delta-orders"), inbox)
        c.publish("delta-orders", order(1, "IBM", 20, image=b"img"))
        c.publish("delta-orders", order(1, "MSFT", 20, image=b"img2"))
        c.flush(5000)
        wait_for(lambda: len(inbox.data) >= 2, what="two deltas")
    assert inbox.data == [
        composite('{"id":1}', f"Qty=20{SOH}Status=N{SOH}", b""),
        composite('{"id":1,"sym":"MSFT"}', "", b"img2"),
    ]


@pytest.mark.integration
def test_sow_key_on_a_global_type(server: ServerThread) -> None:
    with client(server, GLOBAL) as c:
        first = composite('{"id":"a","v":1}', b"t1", b"f1")
        second = composite('{"id":"b","v":2}', b"t2", b"f2")
        again = composite('{"id":"a","v":3}', b"t3", b"f3")
        for body in (first, second, again):
            c.publish("images", body)
        c.flush(5000)
        assert sow(c, "images", order_by="/v") == [second, again]


@pytest.mark.integration
@pytest.mark.parametrize("topic", ["images", "not-a-sow-topic"])
def test_delta_publish_on_a_global_type_is_refused(server: ServerThread, topic: str) -> None:
    """The guide: composite-global types support no delta publish. Refused (not stored as a
    plain publish, not merged), the connection kept: a marker published after it arrives."""
    inbox = Inbox()
    with client(server, GLOBAL) as c:
        c.subscribe(inbox, topic)
        delta = composite('{"id":"d","v":1}', b"", b"")
        cmd = Command("delta_publish").set_topic(topic).set_data(delta)
        with pytest.raises(CommandError, match="invalid message type"):
            c.execute_async(cmd.add_ack_type("processed").set_timeout(5000), lambda _m: None)
        marker = composite('{"id":"m","v":2}', b"", b"")
        c.publish(topic, marker)
        c.flush(5000)
        wait_for(lambda: inbox.has(marker), what="the marker")
    assert inbox.data == [marker]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("command", "options", "what"),
    [
        ("delta_subscribe", None, "a delta subscription"),
        ("sow_and_delta_subscribe", None, "a delta subscription"),
        ("sow", "select=[-/,+/id]", "select"),
    ],
)
def test_delta_subscriptions_and_select_on_a_global_type_are_refused(
    server: ServerThread, command: str, options: str | None, what: str
) -> None:
    """The guide: no delta subscribe and no projection for composite-global types. Refused
    with ``invalid options`` naming the type; the same connection then queries normally."""
    with client(server, GLOBAL) as c:
        cmd = Command(command).set_topic("images").set_timeout(5000)
        if options is not None:
            cmd.set_options(options)
        with pytest.raises(InvalidOptionsException, match=f"{what}.*'{GLOBAL}'"):
            c.execute_async(cmd.add_ack_type("processed"), lambda _m: None)
        c.publish("images", composite('{"id":"q","v":0}', b"", b""))
        c.flush(5000)
        assert composite('{"id":"q","v":0}', b"", b"") in sow(c, "images", filter="/id = 'q'")


@pytest.mark.integration
@pytest.mark.parametrize("message_type", [LOCAL, GLOBAL])
def test_event_topics_are_refused_on_a_composite_connection(
    server: ServerThread, message_type: str
) -> None:
    """The guide: composite types support no message the server constructs (``/AMPS/*``)."""
    with client(server, message_type) as c, pytest.raises(InvalidTopicException):
        c.subscribe(lambda _m: None, "/AMPS/ClientStatus", timeout=5000)


@pytest.mark.integration
@pytest.mark.parametrize("message_type", [LOCAL, GLOBAL])
def test_a_stats_ack_is_refused_on_a_composite_connection(
    server: ServerThread, message_type: str
) -> None:
    """The guide: composite types do not support stats acks (a message the server builds);
    the same query without ``stats`` is answered."""
    topic = "orders" if message_type == LOCAL else "images"
    with client(server, message_type) as c:
        cmd = Command("sow").set_topic(topic).set_timeout(5000).add_ack_type("stats")
        with pytest.raises(InvalidOptionsException, match="stats ack"):
            c.execute_async(cmd.add_ack_type("processed"), lambda _m: None)
        sow(c, topic)


@pytest.mark.integration
@pytest.mark.parametrize("message_type", [LOCAL, GLOBAL])
@pytest.mark.parametrize("command", ["sow_delete", "publish"])
def test_a_stats_ack_on_a_sow_delete_or_publish_is_refused_on_a_composite_connection(
    server: ServerThread, message_type: str, command: str
) -> None:
    """As for a query: a ``sow_delete`` (our client's and the official client's
    ``sow_delete`` ask for the stats ack) or a publish asking for ``stats`` is refused with
    ``invalid options`` and does nothing; without ``stats`` it runs."""
    topic = "orders" if message_type == LOCAL else "images"
    key = "/0/id" if message_type == LOCAL else "/id"
    oid = 9_100 + next(_names)
    body = order(oid, "DEL", 1) if message_type == LOCAL else composite(f'{{"id":{oid}}}')
    with client(server, message_type) as c:
        c.publish(topic, body)
        c.flush(5000)
        if command == "sow_delete":
            cmd = Command("sow_delete").set_topic(topic).set_filter(f"{key} = {oid}")
        else:
            cmd = Command("p").set_topic(topic).set_data(body + b"x")
        cmd = cmd.set_timeout(5000).add_ack_type("stats").add_ack_type("processed")
        with pytest.raises(InvalidOptionsException, match="stats ack"):
            c.execute_async(cmd, lambda _m: None)
        assert sow(c, topic, filter=f"{key} = {oid}") == [body]  # neither deleted nor replaced
        if command == "sow_delete":
            with pytest.raises(InvalidOptionsException, match="stats ack"):
                c.sow_delete(topic, f"{key} = {oid}", timeout=5000)  # the convenience asks stats
            plain = Command("sow_delete").set_topic(topic).set_filter(f"{key} = {oid}")
            c.execute_async(plain.add_ack_type("processed").set_timeout(5000), lambda _m: None)
        else:
            c.execute_async(
                Command("p").set_topic(topic).set_data(body).add_ack_type("processed"),
                lambda _m: None,
            )
            c.flush(5000)
        expected = [] if command == "sow_delete" else [body]
        assert sow(c, topic, filter=f"{key} = {oid}") == expected
    if command == "sow_delete" and HAS_OFFICIAL:
        import AMPS  # type: ignore[import-not-found]

        official = AMPS.Client(f"ct-official-del-{next(_names)}")
        official.connect(server.uri("tcp", message_type))
        official.logon(5000)
        try:
            with pytest.raises(AMPS.InvalidOptionsException):  # its text: "invalid options"
                official.sow_delete(topic, f"{key} = {oid}", 5000)
        finally:
            official.disconnect()


@pytest.mark.integration
def test_an_aggregation_on_a_composite_global_type_is_refused(server: ServerThread) -> None:
    """The guide's restriction (composite-local aggregation: ``test_composite_views.py``)."""
    with client(server, GLOBAL) as c:
        options = "projection=[/fmt],grouping=[/fmt]"
        cmd = Command("sow").set_topic("images").set_timeout(5000).set_options(options)
        with pytest.raises(InvalidOptionsException, match=r"aggregat.*composite-global"):
            c.execute_async(cmd.add_ack_type("processed"), lambda _m: None)


@pytest.mark.integration
def test_a_malformed_composite_payload_is_refused_once_and_the_connection_kept(
    server: ServerThread,
) -> None:
    """To a SOW topic keyed on a part: ``bad sow key`` (the server cannot compute the key),
    counted once in the failures, and the next publish on the same connection is stored."""

    def failures() -> int:
        return int(server.call(lambda: server.server.broker.counters["failures"]))  # type: ignore[union-attr]

    with client(server, LOCAL) as c:
        before = failures()
        bad = composite('{"id":5}')[:-2]  # its length runs past the end
        cmd = Command("publish").set_topic("orders").set_data(bad).add_ack_type("processed")
        with pytest.raises(BadSowKeyException, match="bad sow key"):
            c.execute_async(cmd.set_timeout(5000), lambda _m: None)
        assert failures() == before + 1
        c.publish("orders", order(5, "ORCL", 1))
        c.flush(5000)
        assert sow(c, "orders", filter="/0/id = 5") == [order(5, "ORCL", 1)]
        assert failures() == before + 1


@pytest.mark.integration
def test_a_transaction_log_filter_on_a_part_records_only_matches(server: ServerThread) -> None:
    def fill(i: int, status: str) -> bytes:
        return composite(f'{{"id":{i}}}', f"Status={status}{SOH}", b"")

    inbox = Inbox()
    with client(server, LOCAL) as c:
        bodies = [fill(1, "F"), fill(2, "N"), fill(3, "F")]
        marker = fill(9, "F")
        for body in (*bodies, marker):
            c.publish("fills", body)
        c.flush(5000)
        c.subscribe(inbox, "fills", bookmark="0")
        wait_for(lambda: inbox.has(marker), what="the replay's marker")
    assert inbox.data == [bodies[0], bodies[2], marker]


@pytest.mark.integration
def test_a_queue_filter_and_a_subscriber_filter_on_parts(server: ServerThread) -> None:
    """The queue's ``<Filter>`` (``/1/Qty > 100``) and the subscriber's (``/0/sym``) both read
    their part: only messages passing both are delivered, in order."""
    inbox = Inbox()
    with client(server, LOCAL) as sub, client(server, LOCAL) as pub:
        sub.set_auto_ack(True)
        sub.subscribe(inbox, "work", "/0/sym != 'MSFT'")
        bodies = [order(1, "IBM", 150), order(2, "IBM", 50), order(3, "MSFT", 500)]
        bodies.append(order(4, "AAPL", 101))
        marker = order(9, "IBM", 999)
        for body in (*bodies, marker):
            pub.publish("work-src", body)
        pub.flush(5000)
        wait_for(lambda: inbox.has(marker), what="the queue's marker")
    assert inbox.data == [bodies[0], bodies[3], marker]


@pytest.mark.interop
@pytest.mark.integration
@pytest.mark.skipif(not HAS_OFFICIAL, reason="official client absent")
def test_the_official_client_publishes_and_filters_composite_messages(
    server: ServerThread,
) -> None:
    """The official client's builder makes the payload; its subscription's filter addresses
    the parts; what it receives its parser splits into the parts published."""
    import AMPS  # the official client: a black-box peer

    got: list[bytes] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        data = message.get_data()
        with lock:
            got.append(data if isinstance(data, bytes) else data.encode("latin-1"))

    def build(oid: int, sym: str, qty: int) -> bytes:
        builder = AMPS.CompositeMessageBuilder()
        builder.append(f'{{"id":{oid},"sym":"{sym}"}}')
        builder.append(f"Qty={qty}{SOH}")
        builder.append(b"\x00\x01binary")
        data: bytes = builder.get_data()
        return data

    official = AMPS.Client(f"ct-official-{next(_names)}")
    official.connect(server.uri("tcp", LOCAL))
    official.logon(5000)
    try:
        official.subscribe(on_message, "official-live", "/0/sym = 'IBM' AND /1/Qty >= 10")
        bodies = [build(1, "IBM", 5), build(2, "IBM", 50), build(3, "MSFT", 50)]
        marker = build(9, "IBM", 10)
        for body in (*bodies, marker):
            official.publish("official-live", body)
        official.publish_flush(5000)

        def has_marker() -> bool:
            with lock:
                return marker in got

        wait_for(has_marker, what="the marker")
    finally:
        official.disconnect()
    assert got == [bodies[1], marker]
    parser = AMPS.CompositeMessageParser()
    assert parser.parse(got[0]) == 3
    assert parser.get_part(0) == '{"id":2,"sym":"IBM"}'
    assert parser.get_part_raw(2) == b"\x00\x01binary"


def test_the_docs_example_prints_what_the_page_says(tmp_path: Path) -> None:
    """docs/message-types.md, "Composite types": its example runs and prints the block that
    follows it."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "message-types.md").read_text()
    section = page[page.index("## Composite types") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    printed = re.search(r"prints\n\n```\n(.*?)```", section, re.S)
    assert code is not None and printed is not None
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed.group(1)
