"""Views and aggregated queries over composite message types (issue #28), as the AMPS User
Guide's "Composite Messages" allows them: ``composite-local`` messages "preserve information
about the individual parts for filtering, aggregation, and projection", and "views, joins, and
aggregation cannot project message types that use composite-global (however, composite
message types that use composite-global can be an UnderlyingTopic or one of the topics in a
Join)". A composite-local record is written as its messages are read: each projected field
begins with its part's position (``SUM(/1/Qty) AS /1/total`` is the ``total`` field of the
second part), a binary part is projected whole. Real server, real sockets; records read with
our ``CompositeMessageParser`` and the official client's."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient.compat import CompositeMessageBuilder, CompositeMessageParser
from ampsclient.exceptions import InvalidOptionsException
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

HAS_OFFICIAL = importlib.util.find_spec("AMPS") is not None
SOH = "\x01"

LOCAL = "cv-order-parts"  # json, nvfix, binary: composite-local
GLOBAL = "cv-images"  # json, binary: composite-global

TYPES = f"""<MessageTypes>
    <MessageType><Name>{LOCAL}</Name><Module>composite-local</Module>
      <MessagePart>json</MessagePart><MessagePart>nvfix</MessagePart>
      <MessagePart>binary</MessagePart></MessageType>
    <MessageType><Name>{GLOBAL}</Name><Module>composite-global</Module>
      <MessagePart>json</MessagePart><MessagePart>binary</MessagePart></MessageType>
  </MessageTypes>"""

VIEWS = f"""
    <View><Name>by-sym</Name><UnderlyingTopic>orders</UnderlyingTopic>
      <MessageType>{LOCAL}</MessageType>
      <Projection><Field>/0/sym</Field><Field>COUNT(/0/id) AS /0/n</Field>
        <Field>SUM(/1/Qty) AS /1/total</Field><Field>/2</Field></Projection>
      <Grouping><Field>/0/sym</Field></Grouping></View>
    <View><Name>by-fmt</Name><UnderlyingTopic>images</UnderlyingTopic>
      <MessageType>json</MessageType>
      <Projection><Field>/fmt</Field><Field>COUNT(/id) AS /n</Field></Projection>
      <Grouping><Field>/fmt</Field></Grouping></View>"""


def config(views: str = VIEWS) -> str:
    return f"""<AMPSConfig><Name>composite-views</Name>{TYPES}<SOW>
    <Topic><Name>orders</Name><MessageType>{LOCAL}</MessageType><Key>/0/id</Key></Topic>
    <Topic><Name>images</Name><MessageType>{GLOBAL}</MessageType><Key>/id</Key></Topic>
    {views}</SOW>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports></AMPSConfig>"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(parse_config(config(), base_dir=tmp_path), record_all_topics=False) as t:
        yield t


def client(server: ServerThread, message_type: str) -> Client:
    c = Client(f"cv-{time.time_ns()}")
    c.connect(server.uri("tcp", message_type))
    c.logon(5000)
    return c


def composite(*parts: str | bytes) -> bytes:
    builder = CompositeMessageBuilder()
    for part in parts:
        builder.append(part)
    return bytes(builder.get_data())


def order(oid: int, sym: str, qty: int, image: bytes) -> bytes:
    return composite(f'{{"id":{oid},"sym":"{sym}"}}', f"Qty={qty}{SOH}", image)


def parts(data: bytes) -> tuple[Any, str, bytes]:
    """``(json part, nvfix part, binary part)`` of a ``LOCAL`` record."""
    parser = CompositeMessageParser()
    assert parser.parse(data) == 3
    return json.loads(parser.get_part(0)), parser.get_part(1), bytes(parser.get_part_raw(2))


def query(c: Client, topic: str, options: str | None = None) -> list[bytes]:
    cmd = Command("sow").set_topic(topic).set_timeout(5000)
    if options is not None:
        cmd.set_options(options)
    return [m.get_data_raw() for m in c.execute(cmd) if m.get_command() == "sow"]


class Inbox:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: list[bytes] = []

    def __call__(self, message: Any) -> None:
        if message.get_command() == "publish":
            with self.lock:
                self.data.append(bytes(message.get_data_raw()))

    def snapshot(self) -> list[bytes]:
        with self.lock:
            return list(self.data)


def publish_orders(c: Client) -> None:
    c.publish("orders", order(1, "IBM", 100, b"\x89A"))
    c.publish("orders", order(2, "IBM", 50, b"\x89B"))
    c.publish("orders", order(3, "MSFT", 300, b"\x89C"))
    c.flush(5000)


def by_sym(records: list[bytes]) -> dict[str, tuple[Any, str, bytes]]:
    out = {}
    for data in records:
        doc, nvfix, image = parts(data)
        out[doc["sym"]] = (doc, nvfix, image)
    return out


EXPECTED = {
    "IBM": ({"sym": "IBM", "n": 2}, f"total=150{SOH}", b"\x89B"),
    "MSFT": ({"sym": "MSFT", "n": 1}, f"total=300{SOH}", b"\x89C"),
}
"""The records of ``publish_orders``: each field in its part, the binary part the newest
message's."""


def test_a_view_of_a_composite_local_type_writes_each_field_in_its_part(
    server: ServerThread,
) -> None:
    with client(server, LOCAL) as c:
        publish_orders(c)
        wait_for(lambda: len(query(c, "by-sym")) == 2, what="both groups in the view")
        assert by_sym(query(c, "by-sym")) == EXPECTED
        inbox = Inbox()
        c.subscribe(inbox, "by-sym", timeout=5000)
        c.publish("orders", order(4, "IBM", 7, b"\x89D"))
        c.flush(5000)
        wait_for(lambda: inbox.snapshot(), what="the view's update")
        assert [parts(d) for d in inbox.snapshot()] == [
            ({"sym": "IBM", "n": 3}, f"total=157{SOH}", b"\x89D")
        ]


def test_a_json_view_over_a_composite_global_topic(server: ServerThread) -> None:
    """The guide: a composite-global type can be a view's underlying topic."""
    with client(server, GLOBAL) as pub, client(server, "json") as c:
        for oid, fmt in ((1, "png"), (2, "png"), (3, "jpg")):
            pub.publish("images", composite(f'{{"id":{oid},"fmt":"{fmt}"}}', b"\x00img"))
        pub.flush(5000)
        wait_for(lambda: len(query(c, "by-fmt")) == 2, what="both groups in the view")
        got = sorted((json.loads(d) for d in query(c, "by-fmt")), key=lambda d: d["fmt"])
        assert got == [{"fmt": "jpg", "n": 1}, {"fmt": "png", "n": 2}]


AGGREGATE = "projection=[/0/sym,COUNT(/0/id) AS /0/n,SUM(/1/Qty) AS /1/total,/2],grouping=[/0/sym]"


def test_an_aggregated_query_and_subscription_on_a_composite_local_topic(
    server: ServerThread,
) -> None:
    with client(server, LOCAL) as c:
        publish_orders(c)
        assert by_sym(query(c, "orders", AGGREGATE)) == EXPECTED
        inbox = Inbox()
        cmd = Command("sow_and_subscribe").set_topic("orders").set_options(AGGREGATE)
        c.execute_async(cmd.set_timeout(5000), inbox)
        c.publish("orders", order(3, "MSFT", 30, b"\x89E"))  # replaces order 3
        c.flush(5000)
        wait_for(lambda: inbox.snapshot(), what="the aggregated update")
        assert [parts(d) for d in inbox.snapshot()] == [
            ({"sym": "MSFT", "n": 1}, f"total=30{SOH}", b"\x89E")
        ]


@pytest.mark.parametrize(
    ("field", "why"),
    [
        ("COUNT(/0/id) AS /n", "begins with the position of its part"),
        ("/0/sym AS /7/sym", "begins with the position of its part"),
        ("/0/sym AS /2/sym", "part 2 is binary"),
        ("/0/sym AS /1/a/b", "no nested fields"),
    ],
)
def test_a_field_that_has_no_part_to_go_in_is_refused_by_name(
    server: ServerThread, tmp_path: Path, field: str, why: str
) -> None:
    with client(server, LOCAL) as c:
        options = f"projection=[{field}],grouping=[/0/sym]"
        with pytest.raises(InvalidOptionsException, match=why):
            query(c, "orders", options)
        query(c, "orders", AGGREGATE)  # the connection goes on
    view = VIEWS.replace("<Field>/2</Field>", f"<Field>{field}</Field>", 1)
    with pytest.raises(ConfigError, match=f"view 'by-sym'.*{why}"):
        parse_config(config(view), base_dir=tmp_path)


def test_a_view_or_an_aggregation_of_a_composite_global_type_is_refused(
    server: ServerThread, tmp_path: Path
) -> None:
    """The guide: views, joins and aggregation cannot project a composite-global type."""
    with client(server, GLOBAL) as c, pytest.raises(InvalidOptionsException, match="global"):
        query(c, "images", "projection=[/fmt],grouping=[/fmt]")
    view = VIEWS.replace("<MessageType>json</MessageType>", f"<MessageType>{GLOBAL}</MessageType>")
    with pytest.raises(ConfigError, match="cannot project a composite-global type"):
        parse_config(config(view), base_dir=tmp_path)


@pytest.mark.skipif(not HAS_OFFICIAL, reason="the official client (module AMPS) is not installed")
def test_the_official_client_reads_an_aggregated_composite_record(server: ServerThread) -> None:
    import AMPS  # type: ignore[import-not-found]

    with client(server, LOCAL) as c:
        publish_orders(c)
    official = AMPS.Client(f"cv-official-{time.time_ns()}")
    official.connect(server.uri("tcp", LOCAL))
    official.logon(5000)
    try:
        cmd = AMPS.Command("sow").set_topic("orders").set_options(AGGREGATE)
        got = {}
        for message in official.execute(cmd.set_timeout(5000)):
            if message.get_command() != "sow":
                continue
            parser = AMPS.CompositeMessageParser()
            assert parser.parse(message) == 3
            doc = json.loads(parser.get_part(0))
            got[doc["sym"]] = (doc, parser.get_part(1), parser.get_part_raw(2))
        assert got == EXPECTED
    finally:
        official.disconnect()


def test_a_composite_global_topic_in_a_join(tmp_path: Path) -> None:
    """The guide: a composite-global type "can be ... one of the topics in a Join": its merged
    identifiers (``[images]./owner``, from its json part) join a json topic's."""
    view = """
    <Topic><Name>owners</Name><MessageType>json</MessageType><Key>/owner</Key></Topic>
    <View><Name>per-owner</Name><MessageType>json</MessageType>
      <UnderlyingTopic><Join>[images].[/owner] = [owners].[/owner]</Join></UnderlyingTopic>
      <Projection><Field>[owners].[/name] AS /name</Field>
        <Field>COUNT([images].[/id]) AS /n</Field></Projection>
      <Grouping><Field>[images].[/owner]</Field></Grouping></View>"""
    xml = config(view)
    with (
        ServerThread(parse_config(xml, base_dir=tmp_path), record_all_topics=False) as server,
        client(server, GLOBAL) as pub,
        client(server, "json") as c,
    ):
        c.publish("owners", '{"owner":"u1","name":"Ann"}')
        c.publish("owners", '{"owner":"u2","name":"Bob"}')
        c.flush(5000)
        for oid, owner in ((1, "u1"), (2, "u1"), (3, "u2")):
            pub.publish("images", composite(f'{{"id":{oid},"owner":"{owner}"}}', b"\x00img"))
        pub.flush(5000)

        def records() -> list[Any]:
            return sorted((json.loads(d) for d in query(c, "per-owner")), key=lambda d: d["name"])

        wait_for(lambda: records() == [{"name": "Ann", "n": 2}, {"name": "Bob", "n": 1}])


OPAQUE_FILTER = "<Filter>/2 IS NULL</Filter>"


@pytest.mark.parametrize(
    ("options", "view"),
    [
        (
            "projection=[/0/sym,COUNT(/2) AS /0/n],grouping=[/0/sym]",
            VIEWS.replace("COUNT(/0/id) AS /0/n", "COUNT(/2) AS /0/n"),
        ),
        (
            "projection=[/0/sym],grouping=[/0/sym,/2]",
            VIEWS.replace("<Grouping><Field>/0/sym</Field>", "<Grouping><Field>/2</Field>", 1),
        ),
        (
            "projection=[/0/sym,/2/x AS /0/x],grouping=[/0/sym]",
            VIEWS.replace("<Field>/2</Field>", "<Field>/2/x AS /0/x</Field>", 1),
        ),
        (
            None,
            VIEWS.replace("</Grouping></View>", "</Grouping><Filter>/2 IS NULL</Filter></View>", 1),
        ),
    ],
    ids=["count", "grouping", "inside", "filter"],
)
def test_nothing_reads_inside_a_binary_part(
    server: ServerThread, tmp_path: Path, options: str | None, view: str
) -> None:
    """A binary part is opaque: an aggregate, a grouping, a field or a view filter reading it
    is refused by name (a projected field may copy the part whole, ``/2``: above)."""
    if options is not None:
        with client(server, LOCAL) as c, pytest.raises(InvalidOptionsException, match="opaque"):
            query(c, "orders", options)
    with pytest.raises(ConfigError, match=r"view 'by-sym'.*is opaque"):
        parse_config(config(view), base_dir=tmp_path)


JOINED = """
    <Topic><Name>desks</Name><MessageType>json</MessageType><Key>/sym</Key></Topic>
    <View><Name>per-desk</Name><MessageType>json</MessageType>
      <UnderlyingTopic><Join>[orders].[/0/sym] = [desks].[/sym]</Join></UnderlyingTopic>
      <Projection><Field>[desks].[/desk] AS /desk</Field>
        <Field>COUNT([orders].[/0/id]) AS /n</Field></Projection>
      <Grouping><Field>[orders].[/0/sym]</Field></Grouping></View>"""


@pytest.mark.parametrize(
    ("old", "new", "tag", "path"),
    [
        ("[orders].[/0/sym] =", "[orders].[/2/x] =", "Join", "/2/x"),
        ("[orders].[/0/sym] =", "[orders].[/2] =", "Join", "/2"),
        ("[orders].[/0/sym] =", "[orders].[/3] =", "Join", "/3"),
        ("COUNT([orders].[/0/id])", "COUNT([orders].[/2])", "Projection", "/2"),
        ("[desks].[/desk] AS /desk", "[orders].[/2/x] AS /desk", "Projection", "/2/x"),
        ("<Field>[orders].[/0/sym]</Field>", "<Field>[orders].[/2]</Field>", "Grouping", "/2"),
    ],
    ids=["join-inside", "join-whole", "join-payload", "count", "inside", "grouping"],
)
def test_nothing_in_a_join_reads_a_binary_part(
    tmp_path: Path, old: str, new: str, tag: str, path: str
) -> None:
    """A view over several topics reads no binary part of a composite-local one either (its
    ``<Join>`` compared the part's Python representation, a field inside it as NULL): refused
    at start-up, naming the view, the element, the topic and the path."""
    parse_config(config(JOINED), base_dir=tmp_path)  # the view as it is: accepted
    view = JOINED.replace(old, new, 1)
    assert view != JOINED
    why = rf"view 'per-desk': <{tag}>.*\[orders\].*'{path}'.*is opaque"
    with pytest.raises(ConfigError, match=why):
        parse_config(config(view), base_dir=tmp_path)


def test_a_single_topic_view_names_its_topic_and_reads_no_binary_part(tmp_path: Path) -> None:
    """A view over one topic may name it (``[orders].[/0/sym]``, as a join does): accepted,
    and refused by name when the field reads inside the binary part (it raised the filter
    parser's error, not a ``ConfigError``)."""
    named = VIEWS.replace(
        "<Field>/0/sym</Field><Field>COUNT",
        "<Field>[orders].[/0/sym] AS /0/sym</Field><Field>COUNT",
        1,
    )
    assert named != VIEWS
    parse_config(config(named), base_dir=tmp_path)
    inside = VIEWS.replace("<Field>/2</Field>", "<Field>[orders].[/2/x] AS /0/x</Field>", 1)
    with pytest.raises(ConfigError, match=r"view 'by-sym': <Projection>: \[orders\]: '/2/x'"):
        parse_config(config(inside), base_dir=tmp_path)


@pytest.mark.parametrize(
    ("view", "name"),
    [
        (JOINED.replace("[desks].[/desk] AS /desk", "[orders].[/2] AS /img", 1), "per-desk"),
        (
            VIEWS.replace("<Field>/2</Field>", "<Field>/2 AS /0/img</Field>", 1),
            "by-sym",
        ),
    ],
    ids=["json-view-of-a-join", "json-part"],
)
def test_a_binary_part_is_copied_whole_only_into_a_binary_part(
    tmp_path: Path, view: str, name: str
) -> None:
    """A part of another type cannot hold an opaque part: the view was accepted and then wrote
    no record ("cannot encode document as json: ... OpaquePart")."""
    with pytest.raises(ConfigError, match=rf"view '{name}': <Projection>: \[orders\]: '/2'"):
        parse_config(config(view), base_dir=tmp_path)


def test_an_aggregated_query_copies_a_binary_part_only_into_one(server: ServerThread) -> None:
    """``/2 AS /0/img``: refused with ``invalid options`` (the query's handler failed encoding
    the record); ``/2`` (above) is the accepted copy."""
    with client(server, LOCAL) as c:
        c.publish("orders", order(1, "A", 5, b"\x00img"))
        c.flush(5000)
        with pytest.raises(InvalidOptionsException, match=r"'/2'.*opaque"):
            query(c, "orders", "projection=[/0/sym,/2 AS /0/img],grouping=[/0/sym]")
        assert len(query(c, "orders", "projection=[/0/sym,/2],grouping=[/0/sym]")) == 1
