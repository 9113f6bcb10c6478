"""The ``fix`` and ``nvfix`` message types (issue #28): the codec's golden bytes, then a real
server over real sockets where everything a document is used for works on them: content
filters (typed comparison), SOW keys, ``delta_publish`` merge (the AMPS FAQ's own example),
``orderby``, ``select``, a transaction log ``<Filter>`` and bookmark replay; and the official
client on the same server where it is installed."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.fix_codec import FixFormatError, decode_fix, encode_fix
from ampsclient_server_stub.engine.payload import decode, encode
from ampsclient_server_stub.testing import wait_for

SOH = "\x01"


def fix(*fields: str) -> str:
    """``"35=D", "55=IBM"`` -> ``"35=D\\x0155=IBM\\x01"``."""
    return "".join(f + SOH for f in fields)


# --------------------------------------------------------------------------- the codec


def test_decode_keeps_order_and_text_values() -> None:
    assert decode_fix(b"8=FIX.4.2\x0135=D\x0155=IBM\x0138=100\x01", numeric_tags=True) == {
        "8": "FIX.4.2",
        "35": "D",
        "55": "IBM",
        "38": "100",
    }
    assert list(decode_fix(b"b=1\x01a=2\x01", numeric_tags=False)) == ["b", "a"]


def test_decode_accepts_a_last_field_without_soh_and_skips_empty_fields() -> None:
    assert decode_fix(b"1=FOO\x015=TEST1", numeric_tags=True) == {"1": "FOO", "5": "TEST1"}
    assert decode_fix(b"a=1\x01\x01b=\x01", numeric_tags=False) == {"a": "1", "b": ""}
    assert decode_fix(b"", numeric_tags=False) == {}


def test_a_value_may_hold_an_equals_sign_and_repeats_become_a_list() -> None:
    doc = decode_fix(b"58=a=b\x01448=X\x01448=Y\x01", numeric_tags=True)
    assert doc == {"58": "a=b", "448": ["X", "Y"]}
    assert encode_fix(doc) == b"58=a=b\x01448=X\x01448=Y\x01"


@pytest.mark.parametrize(
    ("data", "numeric"),
    [(b"35D\x01", False), (b"=D\x01", False), (b"Symbol=IBM\x01", True), (b"\xff=1", False)],
)
def test_malformed_payloads_raise_value_errors(data: bytes, numeric: bool) -> None:
    with pytest.raises(ValueError):
        decode_fix(data, numeric_tags=numeric)


def test_encode_writes_every_field_with_its_soh() -> None:
    assert encode_fix({"35": "D", "38": 100, "44": 1.5, "f": True, "n": None}) == (
        b"35=D\x0138=100\x0144=1.5\x01f=true\x01n=\x01"
    )


@pytest.mark.parametrize(
    "doc", [["35=D"], {"a": {"b": 1}}, {"a=b": "1"}, {"": "1"}, {"a": "x\x01y"}]
)
def test_encode_refuses_what_it_cannot_write(doc: Any) -> None:
    with pytest.raises(FixFormatError):
        encode_fix(doc)


def test_payload_dispatches_both_types_and_a_bad_payload_is_not_a_document() -> None:
    assert decode("NVFIX", b"Symbol=IBM\x01") == {"Symbol": "IBM"}
    assert decode("fix", b"Symbol=IBM\x01") is None  # fix tags are numbers
    assert encode("fix", {"55": "IBM"}) == b"55=IBM\x01"
    with pytest.raises(ValueError):
        encode("nvfix", {"a": {"nested": 1}})


# --------------------------------------------------------------------------- a real server

CONFIG = """<AMPSConfig><Name>fix-types</Name>
  <SOW>
    <Topic><Name>orders</Name><MessageType>nvfix</MessageType><Key>/Symbol</Key></Topic>
    <Topic><Name>faq</Name><MessageType>fix</MessageType><Key>/5</Key></Topic>
    <Topic><Name>fills</Name><MessageType>fix</MessageType><Key>/5</Key></Topic>
    <Topic><Name>opaque-q</Name><MessageType>binary</MessageType></Topic>
  </SOW>
  <TransactionLog><JournalDirectory>{journal}</JournalDirectory>
    <Topic><Name>executions</Name><MessageType>fix</MessageType><Filter>/150 = 'F'</Filter></Topic>
  </TransactionLog>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports></AMPSConfig>"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    tmp: Path = tmp_path_factory.mktemp("fix")
    config = parse_config(CONFIG.format(journal=tmp / "journal"), base_dir=tmp)
    with ServerThread(config, record_all_topics=False) as thread:
        yield thread


_names = iter(range(1_000_000))


def client(server: ServerThread, message_type: str) -> Client:
    c = Client(f"fix-{next(_names)}")
    c.connect(server.uri("tcp", message_type))
    c.logon(5000)
    return c


class Inbox:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: list[str] = []

    def __call__(self, message: Any) -> None:
        with self.lock:
            self.data.append(message.get_data())


@pytest.mark.integration
@pytest.mark.parametrize("message_type", ["fix", "nvfix"])
def test_a_content_filter_matches_fix_fields_with_typed_comparison(
    server: ServerThread, message_type: str
) -> None:
    topic = f"trades-{message_type}"
    inbox = Inbox()
    with client(server, message_type) as sub, client(server, message_type) as pub:
        sub.subscribe(inbox, topic, "/35 = 'D' AND /38 > 100 AND /55 LIKE '^IB'")
        bodies = [
            fix("35=D", "55=IBM", "38=150"),  # matches (38 compared as a number)
            fix("35=F", "55=IBM", "38=150"),
            fix("35=D", "55=MSFT", "38=150"),
            fix("35=D", "55=IBM", "38=99"),
            fix("35=D", "55=IBMX", "38=1000"),  # matches
        ]
        for body in bodies:
            pub.publish(topic, body)
        marker = fix("35=D", "55=IBM", "38=101", "58=marker")
        pub.publish(topic, marker)
        pub.flush(5000)
        wait_for(lambda: marker in inbox.data, what="the marker")
    assert inbox.data == [bodies[0], bodies[4], marker]


@pytest.mark.integration
def test_the_amps_faq_delta_merge_on_a_fix_sow_keyed_by_a_tag(server: ServerThread) -> None:
    """AMPS FAQ "How does AMPS handle invalid FIX/NVFIX?": two delta publishes without a
    final SOH give ``1=FOO\\x015=TEST1\\x012=BAR\\x01``."""
    with client(server, "fix") as c:
        c.delta_publish("faq", "1=FOO\x015=TEST1")
        c.delta_publish("faq", "5=TEST1\x012=BAR")
        c.flush(5000)
        records = [m.get_data() for m in c.sow("faq", timeout=5000) if m.get_command() == "sow"]
    assert records == ["1=FOO\x015=TEST1\x012=BAR\x01"]


@pytest.mark.integration
def test_nvfix_sow_keys_orderby_select_and_filtered_queries(server: ServerThread) -> None:
    with client(server, "nvfix") as c:
        for sym, px in (("IBM", "120.5"), ("MSFT", "99"), ("AAPL", "230"), ("IBM", "121")):
            c.publish("orders", fix(f"Symbol={sym}", f"Price={px}", "Side=1"))
        c.flush(5000)

        def query(**kwargs: Any) -> list[str]:
            return [
                m.get_data()
                for m in c.sow("orders", timeout=5000, **kwargs)
                if m.get_command() == "sow"
            ]

        # one record per key (IBM replaced), ordered by price as a number
        assert query(order_by="/Price DESC") == [
            fix("Symbol=AAPL", "Price=230", "Side=1"),
            fix("Symbol=IBM", "Price=121", "Side=1"),
            fix("Symbol=MSFT", "Price=99", "Side=1"),
        ]
        assert query(filter="/Price < 200", order_by="/Symbol") == [
            fix("Symbol=IBM", "Price=121", "Side=1"),
            fix("Symbol=MSFT", "Price=99", "Side=1"),
        ]
        selected = [
            m.get_data()
            for m in c.execute(
                Command("sow")
                .set_topic("orders")
                .set_filter("/Symbol = 'IBM'")
                .set_options("select=[-/Side]")
                .set_timeout(5000)
            )
            if m.get_command() == "sow"
        ]
        assert selected == [fix("Symbol=IBM", "Price=121")]


@pytest.mark.integration
def test_a_transaction_log_filter_on_fix_records_only_what_it_matches(
    server: ServerThread,
) -> None:
    inbox = Inbox()
    with client(server, "fix") as c:
        bodies = [fix("11=a", "150=F"), fix("11=b", "150=0"), fix("11=c", "150=F")]
        marker = fix("11=z", "150=F", "58=marker")
        for body in (*bodies, marker):
            c.publish("executions", body)
        c.flush(5000)
        c.subscribe(inbox, "executions", bookmark="0")
        wait_for(lambda: marker in inbox.data, what="the replay's marker")
    assert inbox.data == [bodies[0], bodies[2], marker]


@pytest.mark.interop
@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("AMPS") is None, reason="official client absent")
def test_the_official_client_filters_an_nvfix_topic(server: ServerThread) -> None:
    import AMPS  # the official client: a black-box peer

    got: list[str] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        with lock:
            got.append(message.get_data())

    sub = AMPS.Client(f"official-fix-sub-{time.time_ns()}")
    pub = AMPS.Client(f"official-fix-pub-{time.time_ns()}")
    try:
        for c in (sub, pub):
            c.connect(server.uri("tcp", "nvfix"))
            c.logon()
        sub.subscribe(on_message, "official-nvfix", "/Side = '1' AND /Qty >= 10")
        pub.publish("official-nvfix", fix("Side=1", "Qty=5"))
        pub.publish("official-nvfix", fix("Side=2", "Qty=50"))
        pub.publish("official-nvfix", fix("Side=1", "Qty=10"))
        marker = fix("Side=1", "Qty=99", "Text=marker")
        pub.publish("official-nvfix", marker)
        pub.flush()
        wait_for(lambda: marker in got, what="the marker")
        assert got == [fix("Side=1", "Qty=10"), marker]
    finally:
        sub.disconnect()
        pub.disconnect()


def test_the_docs_example_prints_what_the_page_says(tmp_path: Path) -> None:
    """docs/message-types.md: its example runs and prints the block that follows it."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "message-types.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S)
    printed = re.search(r"prints\n\n```\n(.*?)```", page, re.S)
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


@pytest.mark.integration
def test_the_clients_fix_builder_and_shredder_round_trip_through_a_filtered_sow(
    server: ServerThread,
) -> None:
    """The official API's FIXBuilder/FIXShredder (ours, ``ampsclient.compat``) against the
    server: built messages are keyed, filtered and returned field for field."""
    from ampsclient import FIXBuilder, FIXShredder

    builder = FIXBuilder()
    with client(server, "fix") as c:
        for order_id, qty in (("o1", "10"), ("o2", "500"), ("o3", "75")):
            builder.reset()
            builder.append(5, order_id)  # the SOW key of topic "fills"
            builder.append(38, qty)
            c.publish("fills", builder.get_string())
        c.flush(5000)
        shredded = [
            FIXShredder().to_map(m.get_data())
            for m in c.sow("fills", "/38 >= 75", order_by="/38", timeout=5000)
            if m.get_command() == "sow"
        ]
    assert shredded == [{5: "o3", 38: "75"}, {5: "o2", 38: "500"}]


@pytest.mark.integration
@pytest.mark.parametrize("message_type", ["binary", "bflat"])
def test_a_filter_on_a_type_the_server_does_not_parse_is_refused(
    server: ServerThread, message_type: str
) -> None:
    """Issue #28: a content filter on an opaque type used to be accepted and then match
    nothing; it is refused with ``bad filter`` naming the type (the one check,
    ``engine.wire.command_filter``, serves every command that takes a filter), and the
    connection goes on (an unfiltered subscription still works)."""
    from ampsclient.exceptions import BadFilterError

    with client(server, message_type) as c:
        with pytest.raises(BadFilterError, match=message_type):
            c.subscribe(Inbox(), "opaque", "/a = 1")
        inbox = Inbox()
        c.subscribe(inbox, "opaque")
        c.publish("opaque", "<a>1</a>")
        wait_for(lambda: inbox.data == ["<a>1</a>"], what="the unfiltered delivery")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("command", "options", "header", "what"),
    [
        ("sow", "select=[-/,+/a]", {}, "option 'select'"),
        ("sow", None, {"orderby": "/a"}, "orderby"),
        ("sow", "orderby=/a DESC", {}, "orderby"),
        ("sow", "projection=[/a],grouping=[/a]", {}, "an aggregation"),
        ("delta_subscribe", None, {}, "a delta subscription"),
        ("sow_and_delta_subscribe", None, {}, "a delta subscription"),
    ],
)
def test_what_reads_fields_is_refused_on_a_type_the_server_does_not_parse(
    server: ServerThread,
    command: str,
    options: str | None,
    header: dict[str, str],
    what: str,
) -> None:
    """``select``, ``orderby``, an aggregation and a delta subscription on an opaque type were
    accepted and did nothing (records unchanged, unsorted, whole): the guide says binary
    supports no capability that relies on parsing data. Refused with ``invalid options``
    naming it; the connection goes on. (``opaque-q`` is a binary SOW topic: each of these
    commands was answered before.)"""
    from ampsclient.exceptions import InvalidOptionsError

    with client(server, "binary") as c:
        cmd = Command(command).set_topic("opaque-q").set_timeout(5000)
        if options is not None:
            cmd.set_options(options)
        if "orderby" in header:
            cmd.set_order_by(header["orderby"])
        with pytest.raises(InvalidOptionsError, match=re.escape(what) + ".*opaque"):
            c.execute(cmd)
        c.execute(Command("subscribe").set_topic("opaque-q").set_timeout(5000))  # goes on


@pytest.mark.integration
def test_a_delta_publish_on_a_type_the_server_does_not_parse_is_refused(
    server: ServerThread,
) -> None:
    """To a binary SOW topic keyed by its publishers (``k``) a ``delta_publish`` replaced the
    record whole (no merge is possible): now ``invalid message type``, as for a
    composite-global type, and the record is untouched."""
    from ampsclient_server_stub.testing import RawClient

    key = f"dp-{next(_names)}"
    with RawClient(server.tcp_port, timeout=10.0) as raw:
        raw.logon(f"dp-{key}", mt="binary")
        raw.send({"c": "p", "t": "opaque-q", "k": key, "cid": "p", "a": "processed"}, b"whole")
        assert raw.recv_until(lambda h: h.get("cid") == "p", 10)[0]["status"] == "success"
        hdr = {"c": "delta_publish", "t": "opaque-q", "k": key, "cid": "d", "a": "processed"}
        raw.send(hdr, b"delta")
        ack, _ = raw.recv_until(lambda h: h.get("cid") == "d", 10)
        assert (ack["status"], ack.get("reason")) == ("failure", "invalid message type")
        raw.send({"c": "sow", "t": "opaque-q", "cid": "q", "a": "completed", "sow_keys": key})
        bodies = []
        while True:
            head, body = raw.recv(10)
            if head.get("cid") == "q" and head.get("c") == "ack":
                break
            if head.get("c") == "sow":
                bodies.append(body)
        assert len(bodies) == 1 and bodies[0].endswith(b"whole")


def test_a_transaction_log_filter_on_an_unparsed_type_is_refused_at_start(
    tmp_path: Path,
) -> None:
    from ampsclient_server_stub.config import ConfigError

    xml = f"""<AMPSConfig><Name>x</Name><TransactionLog>
      <JournalDirectory>{tmp_path / "j"}</JournalDirectory>
      <Topic><Name>t</Name><MessageType>binary</MessageType><Filter>/a = 1</Filter></Topic>
      </TransactionLog></AMPSConfig>"""
    with pytest.raises(ConfigError, match=r"needs a message type the server parses.*'binary'"):
        parse_config(xml, base_dir=tmp_path)


@pytest.mark.parametrize(
    ("tag", "text"),
    [("Filter", "/a = 1"), ("BarrierExpression", "/barrier = 1"), ("Priority", "/p")],
)
def test_a_queue_expression_on_an_unparsed_type_is_refused_at_start(
    tmp_path: Path, tag: str, text: str
) -> None:
    """A queue of ``binary`` messages with a ``<Filter>`` was accepted and then delivered
    nothing (the filter never matches an opaque payload); so were a ``<BarrierExpression>``
    and a ``<Priority>`` that could never read a field. Without them the queue starts."""
    from ampsclient_server_stub.config import ConfigError

    def xml(extra: str) -> str:
        return f"""<AMPSConfig><Name>x</Name><TransactionLog>
          <JournalDirectory>{tmp_path / "j"}</JournalDirectory>
          <Topic><Name>s</Name><MessageType>binary</MessageType></Topic></TransactionLog>
          <SOW><Queue><Name>q</Name><MessageType>binary</MessageType>
            <UnderlyingTopic>s</UnderlyingTopic>{extra}</Queue></SOW></AMPSConfig>"""

    with pytest.raises(ConfigError, match=rf"queue 'q': a <{tag}> needs a message type .*'binary'"):
        parse_config(xml(f"<{tag}>{text}</{tag}>"), base_dir=tmp_path)
    parse_config(xml(""), base_dir=tmp_path)


@pytest.mark.parametrize("message_type", ["binary", "bflat-like-opaque"])
def test_a_sow_key_on_an_unparsed_type_is_refused_at_start(
    tmp_path: Path, message_type: str
) -> None:
    """``<Key>/id</Key>`` on a topic the server carries as opaque was accepted, then every
    publish without an explicit SOW key failed with ``bad sow key`` (the key can never be
    computed): AMPS keys such a topic by the publisher's SOW key only ("Understanding SOW
    Keys": a topic uses AMPS-generated or user-generated keys)."""
    from ampsclient_server_stub.config import ConfigError

    def xml(key: str) -> str:
        return f"""<AMPSConfig><Name>x</Name><SOW><Topic><Name>b</Name>
          <MessageType>{message_type}</MessageType>{key}</Topic></SOW></AMPSConfig>"""

    with pytest.raises(ConfigError, match=rf"SOW topic 'b': a <Key> needs .*'{message_type}'"):
        parse_config(xml("<Key>/id</Key>"), base_dir=tmp_path)
    parse_config(xml(""), base_dir=tmp_path)


def test_a_conflated_topic_filter_on_an_unparsed_type_is_refused_at_start(
    tmp_path: Path,
) -> None:
    """A ``<ConflatedTopic>`` over a ``binary`` SOW topic with a ``<Filter>`` was accepted and
    then conflated nothing (the filter never matches an opaque payload)."""
    from ampsclient_server_stub.config import ConfigError

    def xml(extra: str) -> str:
        return f"""<AMPSConfig><Name>x</Name><SOW>
          <Topic><Name>b</Name><MessageType>binary</MessageType></Topic>
          <ConflatedTopic><Name>c</Name><MessageType>binary</MessageType>
            <UnderlyingTopic>b</UnderlyingTopic>{extra}</ConflatedTopic></SOW></AMPSConfig>"""

    with pytest.raises(ConfigError, match=r"conflated topic 'c': a <Filter> needs .*'binary'"):
        parse_config(xml("<Filter>/a = 1</Filter>"), base_dir=tmp_path)
    parse_config(xml(""), base_dir=tmp_path)
