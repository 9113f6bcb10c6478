"""How AMPS joins, in our reading of the User Guide's "Multiple Topic Aggregation: Join"
(https://docs.crankuptheamps.com/amps-user-guide/views/defining-views; the public copies this
project can search stop before the rules: docs/views.md, "Joins", marks each as our reading):

* a company-volume view over nvfix topics (``[ORDERS]./Tick = [COMPANIES]./Tick``, fields
  written ``[COMPANIES]./Name`` without ``AS``) is read and computed;
* join values are compared as strings (12345 and 12345.0 differ; nvfix "7" is json 7);
* ``NULL``, missing and empty values match nothing, unless ``JoinNullEquivalency`` is
  ``enabled``;
* several ``Join`` elements relating the same two topics join on every field pair;
* ``<Conflation>inline</Conflation>`` is accepted (the final state is the same).

The broker frame by frame, and the company-volume view over TCP with the official client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient.protocol.header import encode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.broker import Broker, Connection
from ampsclient_server_stub.testing import ManualTime
from ampsclient_server_stub.testing.session import RecordingSession as FakeSession

SOH = "\x01"

GUIDE = """
    <Topic><Name>ORDERS</Name><MessageType>nvfix</MessageType><Key>/OrderID</Key></Topic>
    <Topic><Name>COMPANIES</Name><MessageType>nvfix</MessageType><Key>/CompanyId</Key></Topic>
    <View>
        <Name>TOTAL_COMPANY_VOLUME</Name>
        <UnderlyingTopic>
            <Join>[ORDERS]./Tick = [COMPANIES]./Tick</Join>
        </UnderlyingTopic>
        <MessageType>nvfix</MessageType>
        <Projection>
            <Field>[COMPANIES]./CompanyId</Field>
            <Field>[COMPANIES]./Tick</Field>
            <Field>[COMPANIES]./Name</Field>
            <Field>SUM([ORDERS]./Shares) AS /TotalVolume</Field>
        </Projection>
        <Grouping>
            <Field>[ORDERS]./Tick</Field>
        </Grouping>
        <Conflation>inline</Conflation>
    </View>"""

JSON_TOPICS = """
    <Topic><Name>a</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Topic><Name>b</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Topic><Name>n</Name><MessageType>nvfix</MessageType><Key>/id</Key></Topic>"""


def pair_view(name: str, joins: str, extra: str = "") -> str:
    return f"""<View><Name>{name}</Name><MessageType>json</MessageType>
      <UnderlyingTopic>{joins}</UnderlyingTopic>
      <Projection><Field>[a].[/id] AS /a</Field><Field>COUNT([b].[/id]) AS /b</Field></Projection>
      <Grouping><Field>[a].[/id]</Field></Grouping>{extra}</View>"""


VIEWS = (
    pair_view("by_x", "<Join>[a].[/x]=[b].[/x]</Join>")
    + pair_view(
        "by_x_null",
        "<Join>[a].[/x]=[b].[/x]</Join>",
        "<JoinNullEquivalency>enabled</JoinNullEquivalency>",
    )
    + pair_view("by_xy", "<Join>[a].[/x]=[b].[/x]</Join><Join>[b].[/y] = [a].[/y]</Join>")
    + """<View><Name>to_nv</Name><MessageType>json</MessageType>
      <UnderlyingTopic><Join>a./x = n/x</Join></UnderlyingTopic>
      <Projection><Field>[a].[/id] AS /a</Field><Field>COUNT([n].[/id]) AS /n</Field></Projection>
      <Grouping><Field>[a].[/id]</Field></Grouping></View>"""
)


def xml(sow: str) -> str:
    return f"""<AMPSConfig><Name>join-rules</Name>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>{sow}</SOW>
</AMPSConfig>"""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    manual = ManualTime()
    broker = Broker(
        parse_config(xml(GUIDE + JSON_TOPICS + VIEWS), base_dir=tmp_path),
        call_later=manual.call_later,
        clock=manual.clock,
        monotonic=manual.clock,
    )
    yield broker
    broker.close()


def logon(broker: Broker, name: str, mt: str | None = None) -> Connection:
    conn = broker.connect(FakeSession(), message_type=mt)
    broker.handle(conn, encode_header({"c": "logon", "cid": "l", "client_name": name}))
    return conn


def send(broker: Broker, conn: Connection, topic: str, body: bytes, c: str = "p") -> None:
    broker.handle(conn, encode_header({"c": c, "t": topic}) + body)


def nv(**fields: Any) -> bytes:
    return "".join(f"{k}={v}{SOH}" for k, v in fields.items()).encode()


def docs(broker: Broker, topic: str, mt: str = "json") -> list[Any]:
    sow = broker.sow_topic(topic, mt)
    assert sow is not None
    return sorted((sow.doc(k) for k in sow), key=lambda d: json.dumps(d, sort_keys=True))


def test_the_guides_company_volume_example(broker: Broker) -> None:
    fix = logon(broker, "nv", "nvfix")
    send(broker, fix, "COMPANIES", nv(CompanyId=1, Tick="IBM", Name="International"))
    send(broker, fix, "ORDERS", nv(OrderID=1, Tick="IBM", Shares=100))
    send(broker, fix, "ORDERS", nv(OrderID=2, Tick="IBM", Shares=50))
    send(broker, fix, "COMPANIES", nv(CompanyId=2, Tick="MSFT", Name="Microsoft"))  # no order
    assert docs(broker, "TOTAL_COMPANY_VOLUME", "nvfix") == [
        {"CompanyId": "1", "Tick": "IBM", "Name": "International", "TotalVolume": 150}
    ]
    send(broker, fix, "ORDERS", nv(OrderID=3, Tick="ORCL", Shares=7))  # no company: NULLs
    view = docs(broker, "TOTAL_COMPANY_VOLUME", "nvfix")
    assert [d["TotalVolume"] for d in view] == [150, 7]
    assert view[1].get("Tick") is None and view[1].get("Name") is None


def test_join_values_are_compared_as_strings(broker: Broker) -> None:
    js = logon(broker, "js")
    fix = logon(broker, "nv", "nvfix")
    send(broker, js, "a", b'{"id":"a1","x":12345}')
    send(broker, js, "b", b'{"id":"b1","x":12345.0}')  # the same number, another string
    send(broker, fix, "n", nv(id="n1", x=12345))  # nvfix text "12345": the same string
    assert docs(broker, "by_x") == [{"a": "a1", "b": 0}]
    assert docs(broker, "to_nv") == [{"a": "a1", "n": 1}]
    send(broker, js, "b", b'{"id":"b2","x":"12345"}')
    assert docs(broker, "by_x") == [{"a": "a1", "b": 1}]


def test_null_and_empty_values_join_only_with_join_null_equivalency(broker: Broker) -> None:
    js = logon(broker, "js")
    send(broker, js, "a", b'{"id":"a1","x":""}')
    send(broker, js, "a", b'{"id":"a2"}')
    send(broker, js, "b", b'{"id":"b1","x":null}')
    send(broker, js, "b", b'{"id":"b2","x":""}')
    assert docs(broker, "by_x") == [{"a": "a1", "b": 0}, {"a": "a2", "b": 0}]
    assert docs(broker, "by_x_null") == [{"a": "a1", "b": 2}, {"a": "a2", "b": 2}]
    send(broker, js, "b", b'{"id":"b1","x":"v"}')
    assert docs(broker, "by_x_null") == [{"a": "a1", "b": 1}, {"a": "a2", "b": 1}]


def test_two_joins_of_the_same_topics_join_on_both_fields(broker: Broker) -> None:
    js = logon(broker, "js")
    send(broker, js, "a", b'{"id":"a1","x":1,"y":1}')
    send(broker, js, "b", b'{"id":"b1","x":1,"y":2}')
    send(broker, js, "b", b'{"id":"b2","x":1,"y":1}')
    assert docs(broker, "by_x") == [{"a": "a1", "b": 2}]
    assert docs(broker, "by_xy") == [{"a": "a1", "b": 1}]
    send(broker, js, "b", b'{"id":"b1","x":1,"y":1}', c="delta_publish")
    assert docs(broker, "by_xy") == [{"a": "a1", "b": 2}]
    broker.handle(logon(broker, "d"), encode_header({"c": "sow_delete", "t": "b", "f": "/id='b2'"}))
    assert docs(broker, "by_xy") == [{"a": "a1", "b": 1}]


def test_the_parsed_joins(tmp_path: Path) -> None:
    cfg = parse_config(xml(GUIDE + JSON_TOPICS + VIEWS), base_dir=tmp_path)
    by_name = {v.name: v for v in cfg.sow_views}
    guide = by_name["TOTAL_COMPANY_VOLUME"]
    assert guide.conflation == "inline"
    assert [(j.left, j.left_path, j.right, j.right_path, j.kind) for j in guide.joins] == [
        ("ORDERS", "/Tick", "COMPANIES", "/Tick", "LEFT")
    ]
    assert [f.path for f in guide.projection] == ["/CompanyId", "/Tick", "/Name", "/TotalVolume"]
    assert by_name["by_xy"].joins[0].more == (("/y", "/y"),)
    assert by_name["by_x_null"].join_null_equivalency
    assert not by_name["by_x"].join_null_equivalency
    assert by_name["to_nv"].topics == ("a", "n")


@pytest.mark.integration
def test_the_guides_example_over_tcp_with_the_official_client(tmp_path: Path) -> None:
    amps: Any = pytest.importorskip("AMPS")
    with ServerThread(parse_config(xml(GUIDE), base_dir=tmp_path)) as server:
        official = amps.Client(f"official-guide-{time.time_ns()}")
        official.connect(server.uri("tcp", "nvfix"))
        official.logon()
        try:
            official.publish("COMPANIES", nv(CompanyId=1, Tick="IBM", Name="Intl").decode())
            official.publish("ORDERS", nv(OrderID=1, Tick="IBM", Shares=100).decode())
            official.publish("ORDERS", nv(OrderID=2, Tick="IBM", Shares=25).decode())
            official.flush()
            found = [
                m.get_data()
                for m in official.sow("TOTAL_COMPANY_VOLUME", timeout=5000)
                if m.get_command() == "sow"
            ]
            assert found == [nv(CompanyId=1, Tick="IBM", Name="Intl", TotalVolume=125).decode()]
        finally:
            official.disconnect()


def test_rooted_rows_match_the_linked_records_evaluation() -> None:
    """Joins that keep the rows joined so far recompute the rows of the roots a change reaches
    (``JoinRows._change_rooted``); the same random changes through the general evaluation of
    linked records give the same rows after every change."""
    import random

    from ampsclient_server_stub.views.config import JoinSpec
    from ampsclient_server_stub.views.joins import JoinRows

    specs = [
        JoinSpec("o", "/c", "c", "/c", "LEFT", 0, 1),
        JoinSpec("o", "/p", "p", "/p", "LEFT", 0, 2, more=(("/q", "/q"),)),
        JoinSpec("c", "/r", "r", "/r", "LEFT", 1, 3),
    ]
    rooted = JoinRows(specs, ["json"] * 4)
    linked = JoinRows(specs, ["json"] * 4)
    linked._rooted = False  # (the general path, for comparison)
    rng = random.Random(30)
    for _ in range(1500):
        side = rng.randrange(4)
        key = f"k{rng.randrange(12)}"
        doc = None
        if rng.random() < 0.8:
            doc = {f: rng.choice([1, 2, 3, None, ""]) for f in ("c", "p", "q", "r")}
        rooted.change(side, key, doc)
        linked.change(side, key, doc)
        assert rooted._rows == linked._rows
        assert {r: rooted._doc(r) for r in rooted._rows} == {
            r: linked._doc(r) for r in linked._rows
        }


def test_the_statistics_show_the_configured_conflation(broker: Broker) -> None:
    from ampsclient_server_stub.admin.topic_stats import views

    stats = views(broker)
    assert stats["TOTAL_COMPANY_VOLUME"]["conflation"] == "inline"
    assert stats["by_x"]["conflation"] == "none"


def _brute_rows(specs: list[Any], docs: list[dict[str, Any]]) -> set[tuple[str | None, ...]]:
    """The rows of ``specs`` over ``docs`` from scratch, as the guide's '=' reads: each join in
    order, the records of its left-hand side kept without a partner."""
    from ampsclient_server_stub.views.joins import join_text

    def value(doc: dict[str, Any], paths: list[str]) -> Any:
        texts = tuple(join_text(doc.get(p.strip("/"))) for p in paths)
        return None if None in texts else texts

    first = specs[0].left_index
    rows: list[list[str | None]] = [[None] * len(docs) for _ in docs[first]]
    for row, key in zip(rows, sorted(docs[first]), strict=True):
        row[first] = key
    joined = {first}
    for spec in specs:
        pairs = [(spec.left_path, spec.right_path), *spec.more]
        sides = [
            (spec.left_index, [a for a, _ in pairs]),
            (spec.right_index, [b for _, b in pairs]),
        ]
        (acc, acc_paths), (new, new_paths) = sides if sides[0][0] in joined else sides[::-1]
        keep_acc, keep_new = acc == spec.left_index, new == spec.left_index
        out, matched = [], set()
        for row in rows:
            mine = row[acc]
            v = None if mine is None else value(docs[acc][mine], acc_paths)
            partners = [
                k
                for k, d in sorted(docs[new].items())
                if v is not None and value(d, new_paths) == v
            ]
            matched |= set(partners)
            out += [[*row[:new], k, *row[new + 1 :]] for k in partners]
            if not partners and keep_acc:
                out.append(row)
        if keep_new:
            for k in sorted(set(docs[new]) - matched):
                alone: list[str | None] = [None] * len(docs)
                alone[new] = k
                out.append(alone)
        rows = out
        joined.add(new)
    return {tuple(r) for r in rows if any(k is not None for k in r)}


@pytest.mark.parametrize(
    "joins",
    [
        ["[o].[/c]=[c].[/c]", "[o].[/p] = [p].[/p]", "[o].[/q]=[p].[/q]"],  # rooted
        ["[o].[/c]=[c].[/c]", "[p].[/p] = [o].[/p]"],  # products kept: the general path
        ["[c].[/c]=[o].[/c]", "[c].[/r]=[p].[/r]"],
    ],
)
def test_join_rows_match_a_from_scratch_evaluation(tmp_path: Path, joins: list[str]) -> None:
    """1,000 random publishes and deletes over three topics: after each, the view's rows are
    those a from-scratch evaluation of the guide's rules gives."""
    import random

    from ampsclient_server_stub.views.joins import JoinRows

    topics = "".join(
        f"<Topic><Name>{t}</Name><MessageType>json</MessageType><Key>/id</Key></Topic>"
        for t in "ocp"
    )
    fields = "<Field>COUNT([o].[/id]) AS /n</Field>"
    view = f"""<View><Name>v</Name><MessageType>json</MessageType><UnderlyingTopic>
      {"".join(f"<Join>{j}</Join>" for j in joins)}</UnderlyingTopic>
      <Projection>{fields}</Projection><Grouping><Field>[o].[/c]</Field></Grouping></View>"""
    cfg = parse_config(xml(topics + view), base_dir=tmp_path).sow_views[0]
    rows = JoinRows(cfg.joins, cfg.types)
    docs: list[dict[str, Any]] = [{} for _ in cfg.topics]
    rng = random.Random(7)
    for _ in range(1000):
        side, key = rng.randrange(3), f"k{rng.randrange(8)}"
        doc = None
        if rng.random() < 0.8:
            doc = {f: rng.choice(["1", "2", 3, None]) for f in ("c", "p", "q", "r")} | {"id": key}
            docs[side][key] = doc
        else:
            docs[side].pop(key, None)
        rows.change(side, key, doc)
        assert set(rows._rows) == _brute_rows(list(cfg.joins), docs)
