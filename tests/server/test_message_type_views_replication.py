"""Views and replication filters, proven per message type (issue #28, docs/message-types.md
"Where each type is proven"): for every type the server parses, a ``<View>`` over a SOW topic
of that type projects and groups as AMPS documents (User Guide, "Defining Views and
Aggregations"), and a replication ``<Destination><Topic><Filter>`` of that type passes exactly
the messages that match (Configuration Guide, "Replication/Destination/Topic"). Real servers
over real sockets: one with the views, a replicated pair (a source and its destination) for
the filters."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.payload import decode, encode
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.testing import Inbox, wait_for

pytestmark = pytest.mark.integration

SOH = "\x01"


@dataclass(frozen=True)
class TypeCase:
    """How one message type names the fields ``id``, ``sym`` and ``qty`` and the view's
    output fields, and how it writes an order."""

    mt: str
    id: str
    sym: str
    qty: str
    out_sym: str
    out_total: str

    def order(self, oid: str, sym: str, qty: int) -> bytes:
        if self.mt in ("json", "msgpack", "bson"):
            return encode(self.mt, {"id": oid, "sym": sym, "qty": qty})
        if self.mt == "fix":
            return f"11={oid}{SOH}55={sym}{SOH}38={qty}{SOH}".encode()
        if self.mt == "nvfix":
            return f"id={oid}{SOH}sym={sym}{SOH}qty={qty}{SOH}".encode()
        assert self.mt == "xml"
        return f"<Order><id>{oid}</id><sym>{sym}</sym><qty>{qty}</qty></Order>".encode()

    def view_row(self, data: bytes) -> tuple[str, int]:
        """``(sym, total)`` of a view record of this type."""
        doc = decode(self.mt, data)
        assert doc is not None, data
        if self.mt == "xml":
            doc = doc["Totals"]
        name = lambda path: path.rsplit("/", 1)[-1]
        return str(doc[name(self.out_sym)]), int(float(doc[name(self.out_total)]))


CASES = [
    TypeCase("json", "/id", "/sym", "/qty", "/sym", "/total"),
    TypeCase("msgpack", "/id", "/sym", "/qty", "/sym", "/total"),
    TypeCase("bson", "/id", "/sym", "/qty", "/sym", "/total"),
    TypeCase("fix", "/11", "/55", "/38", "/55", "/14"),
    TypeCase("nvfix", "/id", "/sym", "/qty", "/sym", "/total"),
    TypeCase("xml", "/Order/id", "/Order/sym", "/Order/qty", "/Totals/sym", "/Totals/total"),
]
IDS = [c.mt for c in CASES]

TCP = """<Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport>"""


def _client(server: ServerThread, mt: str) -> Client:
    client = Client(f"types-{mt}-{time.time_ns()}")
    client.connect(server.uri("tcp", mt))
    client.logon(5000)
    return client


# --------------------------------------------------------------------------- views


def _view_config() -> str:
    topics = "".join(
        f"""<Topic><Name>orders_{c.mt}</Name><MessageType>{c.mt}</MessageType>
          <Key>{c.id}</Key></Topic>
        <View><Name>totals_{c.mt}</Name><MessageType>{c.mt}</MessageType>
          <UnderlyingTopic>orders_{c.mt}</UnderlyingTopic>
          <Projection><Field>{c.sym} AS {c.out_sym}</Field>
            <Field>SUM({c.qty}) AS {c.out_total}</Field></Projection>
          <Grouping><Field>{c.sym}</Field></Grouping></View>"""
        for c in CASES
    )
    return f"""<AMPSConfig><Name>type-views</Name><Transports>{TCP}</Transports>
      <SOW>{topics}</SOW></AMPSConfig>"""


@pytest.fixture(scope="module")
def view_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("type-views")
    with ServerThread(parse_config(_view_config(), base_dir=base)) as thread:
        yield thread


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_view_projects_and_groups_a_topic_of_each_type(
    view_server: ServerThread, case: TypeCase
) -> None:
    client = _client(view_server, case.mt)
    try:
        inbox = Inbox(keep=lambda m: m.get_command() == "publish")
        client.subscribe(inbox, f"totals_{case.mt}", timeout=5000)
        for oid, sym, qty in (("1", "IBM", 100), ("2", "IBM", 50), ("3", "MSFT", 10)):
            client.publish(f"orders_{case.mt}", case.order(oid, sym, qty))
        client.flush(5000)
        rows = sorted(
            case.view_row(m.get_data_raw())
            for m in client.sow(f"totals_{case.mt}", timeout=5000)
            if m.get_command() == "sow"
        )
        assert rows == [("IBM", 150), ("MSFT", 10)]
        client.publish(f"orders_{case.mt}", case.order("2", "IBM", 70))  # IBM 100 + 70
        # each publish changed one group: IBM 100, IBM 150, MSFT 10, then IBM 170
        inbox.wait_for_count(4, 10.0)
        got = [case.view_row(m.get_data_raw()) for m in inbox.snapshot()]
        assert got == [("IBM", 100), ("IBM", 150), ("MSFT", 10), ("IBM", 170)]
    finally:
        client.close()


# --------------------------------------------------------------------------- replication


def _receiver(port: int) -> str:
    return f"""<AMPSConfig><Name>Dest</Name><Transports>{TCP}
      <Transport><Name>repl</Name><Type>amps-replication</Type>
        <InetAddr>127.0.0.1:{port}</InetAddr></Transport></Transports>
      <TransactionLog><JournalDirectory>journal</JournalDirectory>
        <Topic><Name>orders_.*</Name></Topic></TransactionLog></AMPSConfig>"""


def _source(port: int) -> str:
    topics = "".join(
        f"""<Topic><Name>orders_{c.mt}</Name><MessageType>{c.mt}</MessageType>
          <Filter>{c.sym} = 'IBM'</Filter>
          <ExcludeValidation>replicate</ExcludeValidation></Topic>"""
        for c in CASES
    )
    return f"""<AMPSConfig><Name>Source</Name><Transports>{TCP}</Transports>
      <TransactionLog><JournalDirectory>journal</JournalDirectory>
        <Topic><Name>orders_.*</Name></Topic></TransactionLog>
      <Replication><Destination><Name>Dest</Name><SyncType>async</SyncType>{topics}
        <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{port}</InetAddr>
        </Transport></Destination></Replication></AMPSConfig>"""


def _journal(thread: ServerThread) -> list[tuple[str, bytes]]:
    """``(topic, payload)`` of every record in the instance's journal, in order."""
    j = thread.server.journal
    assert j is not None

    def read() -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        position = j.first_index
        while batch := j.read(position, max_records=5000):
            out += [(r.topic, bytes(r.payload)) for r in batch]
            position = batch[-1].index + 1
        return out

    return thread.call(read)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, ServerThread]]:
    base = tmp_path_factory.mktemp("type-replication")
    port = free_port()
    started: list[ServerThread] = []
    try:
        for name, xml in (("dest", _receiver(port)), ("src", _source(port))):
            (base / name).mkdir()
            thread = ServerThread(parse_config(xml, base_dir=base / name), fsync="never")
            started.append(thread.start())
        yield started[1], started[0]
    finally:
        for thread in reversed(started):
            thread.stop()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_filtered_replication_destination_passes_exactly_the_matches_of_each_type(
    pair: tuple[ServerThread, ServerThread], case: TypeCase
) -> None:
    src, dest = pair
    topic = f"orders_{case.mt}"
    sent = [
        case.order("1", "IBM", 1),
        case.order("2", "MSFT", 2),
        case.order("3", "IBM", 3),
        case.order("4", "IBMX", 4),
        case.order("5", "IBM", 5),
    ]
    client = _client(src, case.mt)
    try:
        for data in sent:
            client.publish(topic, data)
        client.flush(5000)
    finally:
        client.close()
    matching = [sent[0], sent[2], sent[4]]
    # the last match arriving proves the others were decided (the link keeps the order)
    wait_for(
        lambda: sent[4] in [p for t, p in _journal(dest) if t == topic],
        timeout=20.0,
        what=f"the last {case.mt} match on the destination",
    )
    assert [p for t, p in _journal(dest) if t == topic] == matching
    assert [p for t, p in _journal(src) if t == topic] == sent  # the source records all


def test_the_message_type_proof_table_names_these_tests() -> None:
    """docs/message-types.md names a test in every view and replication cell."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "message-types.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in page.splitlines()
        if line.startswith("| `")
    }
    for case in CASES:
        row = rows[case.mt]
        assert f"test_a_view_projects_and_groups_a_topic_of_each_type[{case.mt}]" in row, row
        assert (
            "test_a_filtered_replication_destination_passes_exactly_the_matches_of_each_type"
            f"[{case.mt}]" in row
        ), row


def test_a_replication_filter_on_an_unparsed_type_is_refused_at_start(tmp_path: Path) -> None:
    """A ``binary`` payload has no fields: a ``<Filter>`` could only match nothing."""
    xml = _source(free_port()).replace(
        "<MessageType>json</MessageType>", "<MessageType>binary</MessageType>", 1
    )
    with pytest.raises(ConfigError, match=r"'orders_json': a <Filter> needs a message type"):
        parse_config(xml, base_dir=tmp_path)


# --------------------------------------------------------------------------- composite

PARTS = "tv-parts"  # composite-local: a json part, then a binary part
GLOBAL_PARTS = "tv-global-parts"  # composite-global: json, nvfix, binary parts merged
PARTS_TYPE = f"""<MessageTypes><MessageType><Name>{PARTS}</Name>
    <Module>composite-local</Module><MessagePart>json</MessagePart>
    <MessagePart>binary</MessagePart></MessageType>
  <MessageType><Name>{GLOBAL_PARTS}</Name>
    <Module>composite-global</Module><MessagePart>json</MessagePart>
    <MessagePart>nvfix</MessagePart><MessagePart>binary</MessagePart></MessageType>
  </MessageTypes>"""


def _framed(*parts: bytes) -> bytes:
    """A composite message as the official client's ``CompositeMessageBuilder`` writes it:
    each part preceded by its 4-byte big-endian length."""
    return b"".join(len(part).to_bytes(4, "big") + part for part in parts)


def _parts(oid: str, sym: str) -> bytes:
    """A ``tv-parts`` message: ``sym`` in the json part (``/0/sym``)."""
    return _framed(f'{{"id":"{oid}","sym":"{sym}"}}'.encode(), b"\x00\x01blob-" + oid.encode())


def _global_parts(oid: str, sym: str) -> bytes:
    """A ``tv-global-parts`` message: ``sym`` in the nvfix part, read as ``/sym`` once the
    parts are merged."""
    return _framed(
        f'{{"id":"{oid}"}}'.encode(),
        f"sym={sym}\x01qty=1\x01".encode(),
        b"\x00blob-" + oid.encode(),
    )


COMPOSITE_CASES = {
    "composite-local": ("orders_parts", PARTS, _parts),
    "composite-global": ("orders_global", GLOBAL_PARTS, _global_parts),
}
"""Per module: the destination topic, its type and how a message of it is built."""


@pytest.fixture(scope="module")
def composite_pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerThread, ServerThread]]:
    base = tmp_path_factory.mktemp("composite-replication")
    port = free_port()
    source = _source(port).replace(
        "<TransactionLog>",
        f"{PARTS_TYPE}<TransactionLog>",
        1,
    )
    # the composite types only: composite-local filtered on its json part (/0/sym),
    # composite-global on the merged parts (/sym, in its nvfix part)
    start = source.index("<Topic><Name>orders_json")
    end = source.index("<Transport><Type>amps-replication")
    source = (
        source[:start]
        + f"""<Topic><Name>orders_parts</Name><MessageType>{PARTS}</MessageType>
          <Filter>/0/sym = 'IBM'</Filter>
          <ExcludeValidation>replicate</ExcludeValidation></Topic>
          <Topic><Name>orders_global</Name><MessageType>{GLOBAL_PARTS}</MessageType>
          <Filter>/sym = 'IBM'</Filter>
          <ExcludeValidation>replicate</ExcludeValidation></Topic>"""
        + source[end:]
    )
    receiver = _receiver(port).replace("<TransactionLog>", f"{PARTS_TYPE}<TransactionLog>", 1)
    started: list[ServerThread] = []
    try:
        for name, xml in (("dest", receiver), ("src", source)):
            (base / name).mkdir()
            thread = ServerThread(parse_config(xml, base_dir=base / name), fsync="never")
            started.append(thread.start())
        yield started[1], started[0]
    finally:
        for thread in reversed(started):
            thread.stop()


@pytest.mark.parametrize("module", sorted(COMPOSITE_CASES))
def test_a_filtered_replication_destination_passes_exactly_the_matches_of_a_composite_type(
    composite_pair: tuple[ServerThread, ServerThread], module: str
) -> None:
    """A destination ``<Filter>`` on a composite type passes the matching messages whole
    (every part, byte for byte), in order: composite-local on a part (``/0/sym``),
    composite-global on the merged parts (``/sym``, found in its nvfix part)."""
    src, dest = composite_pair
    topic, mt, build = COMPOSITE_CASES[module]
    sent = [build("1", "IBM"), build("2", "MSFT"), build("3", "IBM"), build("4", "IBMX")]
    sent.append(build("5", "IBM"))
    client = _client(src, mt)
    try:
        for data in sent:
            client.publish(topic, data)
        client.flush(5000)
    finally:
        client.close()
    wait_for(
        lambda: sent[4] in [p for t, p in _journal(dest) if t == topic],
        timeout=20.0,
        what=f"the last {module} match on the destination",
    )
    assert [p for t, p in _journal(dest) if t == topic] == [sent[0], sent[2], sent[4]]
    assert [p for t, p in _journal(src) if t == topic] == sent


def test_every_test_the_message_type_proof_table_cites_exists() -> None:
    """Each ``file.py::test_name`` in docs/message-types.md (the proof table and the notes
    under it) names a test function of that file under ``tests/server/`` (or the path given),
    and no cell of the table says a place is unproven."""
    import ast
    import re

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "message-types.md").read_text()
    section = page[page.index("## Where each type is proven") :]
    section = section[: section.index("\n## ", 1)]
    assert "not proven" not in section
    cited = re.findall(r"`((?:[\w/]+/)?test_\w+\.py)::(test_\w+)", section)
    assert len(cited) > 40  # the table is read
    functions: dict[str, set[str]] = {}
    for path, name in cited:
        file = root / "tests" / (path if "/" in path else f"server/{path}")
        if path not in functions:
            tree = ast.parse(file.read_text())
            functions[path] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in functions[path], f"{path}::{name} does not exist"
