"""``<HashIndex>`` on SOW topics, views and conflated topics, and ``<Index>`` on SOW topics, on
a running server (AMPS User Guide, "Indexing SOW Topics",
https://docs.crankuptheamps.com/amps-user-guide/sow/sow_indexing).

Each topic has a twin without the index, fed the same messages (the same key domain, so the
same keys): every query gives the same records, message by message, on both; the admin
interface's ``hash_indexes`` statistics show which queries an index answered. A restart keeps
the index (rebuilt from the SOW file). Bad definitions fail the start naming the element.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient.protocol.header import decode_header
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import AdminConfig, ConfigError, parse_config
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

PAIR = ("/region", "/kind")


def config(extra: str = "") -> str:
    topic = """<Topic><Name>{name}</Name><MessageType>json</MessageType><Key>/id</Key>
      <KeyDomain>same</KeyDomain><FileName>sow/{name}.sqlite</FileName>{index}</Topic>"""
    view = """<View><Name>{name}</Name><MessageType>json</MessageType>
      <UnderlyingTopic>{under}</UnderlyingTopic><KeyDomain>v</KeyDomain>
      <Projection><Field>/region</Field><Field>COUNT(/id) AS /count</Field></Projection>
      <Grouping><Field>/region</Field></Grouping>{index}</View>"""
    conflated = """<ConflatedTopic><Name>{name}</Name><UnderlyingTopic>indexed</UnderlyingTopic>
      <MessageType>json</MessageType><Interval>100ms</Interval>{index}</ConflatedTopic>"""
    pair = "<HashIndex><Key>/region</Key><Key>/kind</Key></HashIndex>"
    return f"""<AMPSConfig><Name>hash-index</Name>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <SOW>
    {
        topic.format(
            name="indexed", index=pair + "<HashIndex><Key>/code</Key></HashIndex><Index>/n</Index>"
        )
    }
    {topic.format(name="plain", index="")}
    {view.format(name="view-i", under="indexed", index="<HashIndex><Key>/region</Key></HashIndex>")}
    {view.format(name="view-p", under="indexed", index="")}
    {conflated.format(name="conf-i", index=pair)}
    {conflated.format(name="conf-p", index="")}
    {extra}
  </SOW>
</AMPSConfig>"""


def start(tmp_path: Path, text: str | None = None) -> ServerThread:
    cfg = parse_config(text or config(), base_dir=tmp_path)
    cfg = dataclasses.replace(cfg, admin=AdminConfig(host="127.0.0.1", port=0))
    return ServerThread(cfg, fsync="never").start()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    thread = start(tmp_path)
    try:
        yield thread
    finally:
        thread.stop()


def connect(server: ServerThread) -> RawClient:
    raw = RawClient.from_uri(server.uri("tcp", "json"))
    raw.logon("hash-index")
    return raw


def admin(server: ServerThread, path: str) -> Any:
    assert server.server.admin is not None
    url = f"http://127.0.0.1:{server.server.admin.port}{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def index_queries(server: ServerThread, where: str) -> dict[tuple[str, ...], int]:
    """Per hash index of the topic at ``where`` (an admin path), the queries it answered."""
    return {tuple(i["keys"]): i["queries"] for i in admin(server, where)["hash_indexes"]}


def sow(
    raw: RawClient, topic: str, filter_text: str | None, **options: Any
) -> list[tuple[str, bytes]]:
    """The records of a ``sow`` query, ``(k, data)`` in the order they came."""
    header = {"c": "sow", "cid": "Q", "a": "processed,completed", "t": topic, "bs": 7} | options
    if filter_text is not None:
        header["filter"] = filter_text
    raw.send(header)
    out: list[tuple[str, bytes]] = []
    while True:
        head, body = raw.recv(10)
        if head.get("c") == "ack" and head.get("cid") == "Q":
            assert head.get("status") != "failure", head
            if head.get("a") == "completed":
                return out
        elif head.get("c") == "sow":
            pos = 0
            while pos < len(body):
                rec, end = decode_header(body[pos:])
                length = int(rec["l"])
                out.append((str(rec["k"]), body[pos + end : pos + end + length]))
                pos += end + length


VALUES: list[Any] = ["east", "west", "5", 5, 5.0, "07", None, ["east", "x"], "", True]
KINDS: list[Any] = ["a", "b", 1, None, ["a", "b"]]
CODES: list[Any] = ["X1", 1, "1", True, 7, "7.0", None, {"o": 1}]


def documents() -> list[dict[str, Any]]:
    out = []
    for n in range(120):
        doc: dict[str, Any] = {"id": n % 90, "n": n % 7}  # 30 replacements
        for name, values, step in (("region", VALUES, 1), ("kind", KINDS, 3), ("code", CODES, 5)):
            value = values[(n * step + n // 11) % len(values)]
            if value is not None or n % 2:
                doc[name] = value  # None: null or missing
        out.append(doc)
    return out


def feed(raw: RawClient, topics: tuple[str, ...]) -> None:
    for doc in documents():
        for topic in topics:
            raw.send({"c": "p", "t": topic}, json.dumps(doc).encode())
    for topic in topics:  # a delta re-indexes the merged record; a delete removes records
        raw.send({"c": "delta_publish", "t": topic}, b'{"id": 3, "region": "west", "kind": "b"}')
        raw.send({"c": "sow_delete", "t": topic, "filter": "/n = 4"})
    raw.send({"c": "flush", "cid": "F", "a": "processed"})
    raw.recv_until(lambda h: h.get("cid") == "F", 10)


# (filter, whether the (/region, /kind) index answers it on the SOW topic)
QUERIES: list[tuple[str | None, bool]] = [
    ("/region = 'east' AND /kind = 'a'", True),
    ("/kind = 'b' AND 'west' = /region", True),
    ("/region IN ('east', '5', '07') AND /kind IN ('a', '1')", True),
    ("/region = '5.0' AND /kind = 'a'", True),
    ("/region = 'true' AND /kind = '1'", True),
    ("/region = 'nowhere' AND /kind = 'a'", True),
    ("/region = 5 AND /kind = 'a'", False),  # a numeric literal
    ("/region = '' AND /kind = 'a'", False),  # '' is NULL
    ("/region = 'east' AND /kind = 'a' AND /n > 2", False),  # an extra condition
    ("/region = 'east'", False),  # not every field of the index
    ("/region = 'east' OR /kind = 'a'", False),
    ("/region LIKE 'st' AND /kind = 'a'", False),
    ("/region IS NULL AND /kind = 'a'", False),
    (None, False),
]


def compare(
    raw: RawClient, indexed: str, plain: str, queries: list[tuple[str | None, bool]]
) -> None:
    for text, _ in queries:
        got, want = sow(raw, indexed, text), sow(raw, plain, text)
        assert got == want, text  # message by message: key, data, order
        assert sow(raw, indexed, text, top_n=2, orderby="/n DESC") == sow(
            raw, plain, text, top_n=2, orderby="/n DESC"
        ), text


def test_the_index_answers_and_says_so(server: ServerThread) -> None:
    raw = connect(server)
    try:
        feed(raw, ("indexed", "plain"))
        assert sow(raw, "indexed", "/region = 'east' AND /kind = 'a'") != []  # not trivial
        compare(raw, "indexed", "plain", QUERIES)
        where = "/amps/instance/sow/indexed"
        for text, answered in QUERIES:
            before = index_queries(server, where)
            sow(raw, "indexed", text)
            after = index_queries(server, where)
            assert after[PAIR] - before[PAIR] == (1 if answered else 0), text
            assert after[("/code",)] == before[("/code",)], text
        before = index_queries(server, where)
        codes = "/code IN ('X1', '1', '7', 'true')"
        assert sow(raw, "indexed", codes) == sow(raw, "plain", codes) != []
        assert sow(raw, "indexed", "/code = 1") == sow(raw, "plain", "/code = 1")
        assert sow(raw, "indexed", "/id = '3'") == sow(raw, "plain", "/id = '3'") != []
        after = index_queries(server, where)
        assert after[("/code",)] - before[("/code",)] == 1
        assert after[("/id",)] - before[("/id",)] == 1  # the automatic index over the key
        entry = {tuple(i["keys"]): i for i in admin(server, where)["hash_indexes"]}
        assert entry[("/id",)]["automatic"] is True and entry[PAIR]["automatic"] is False
        # sow_and_subscribe's query uses it too
        raw.send(
            {
                "c": "sow_and_subscribe",
                "cid": "S",
                "sub_id": "S",
                "a": "processed,completed",
                "t": "indexed",
                "filter": "/region = 'west' AND /kind = 'b'",
            }
        )
        raw.recv_until(lambda h: h.get("c") == "ack" and h.get("a") == "completed", 10)
        assert index_queries(server, where)[PAIR] - after[PAIR] == 1
    finally:
        raw.close()


def test_views_and_conflated_topics_answer_from_their_index(server: ServerThread) -> None:
    raw = connect(server)
    try:
        feed(raw, ("indexed", "plain"))
        view_queries: list[tuple[str | None, bool]] = [
            ("/region = 'east'", True),
            ("/region IN ('east', '5', 'west', '07')", True),
            ("/region = 5", False),
            ("/region = 'east' AND /count > 1", False),
            (None, False),
        ]
        compare(raw, "view-i", "view-p", view_queries)
        before = index_queries(server, "/amps/instance/views/view-i")
        assert sow(raw, "view-i", "/region IN ('east', '5')") != []
        assert index_queries(server, "/amps/instance/views/view-i")[("/region",)] == (
            before[("/region",)] + 1
        )
        # the conflated topics copy the underlying records every 100ms
        want = len(sow(raw, "indexed", None))
        wait_for(lambda: len(sow(raw, "conf-i", None)) == len(sow(raw, "conf-p", None)) == want, 20)
        compare(raw, "conf-i", "conf-p", QUERIES)
        where = "/amps/instance/conflated_topics/conf-i"
        before = index_queries(server, where)
        sow(raw, "conf-i", "/region = 'east' AND /kind = 'a'")
        assert index_queries(server, where)[PAIR] == before[PAIR] + 1
    finally:
        raw.close()


def test_a_restart_rebuilds_the_index(tmp_path: Path) -> None:
    first = start(tmp_path)
    try:
        raw = connect(first)
        feed(raw, ("indexed", "plain"))
        raw.close()
    finally:
        first.stop()
    again = start(tmp_path)
    try:
        raw = connect(again)
        try:
            compare(raw, "indexed", "plain", QUERIES)
            stats = {
                tuple(i["keys"]): i
                for i in admin(again, "/amps/instance/sow/indexed")["hash_indexes"]
            }
            assert stats[PAIR]["records"] > 0 and stats[PAIR]["queries"] > 0
        finally:
            raw.close()
    finally:
        again.stop()


def test_memo_index_fields_are_listed(server: ServerThread) -> None:
    assert admin(server, "/amps/instance/sow/indexed")["memo_indexes"] == ["/n"]
    assert admin(server, "/amps/instance/sow/plain")["memo_indexes"] == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "<Topic><Name>t</Name><MessageType>json</MessageType><HashIndex/></Topic>",
            "SOW topic 't': <HashIndex> has no <Key>",
        ),
        (
            "<Topic><Name>t</Name><MessageType>json</MessageType>"
            "<HashIndex><Key>/a b</Key></HashIndex></Topic>",
            "SOW topic 't': <Key> of <HashIndex>: invalid XPath '/a b'",
        ),
        (
            "<Topic><Name>t</Name><MessageType>json</MessageType>"
            "<HashIndex><Key>/a</Key><Key>/a</Key></HashIndex></Topic>",
            "SOW topic 't': <HashIndex> names a field twice: /a, /a",
        ),
        (
            "<Topic><Name>t</Name><MessageType>json</MessageType>"
            "<HashIndex><Key>/a</Key></HashIndex><HashIndex><Key>/a</Key></HashIndex></Topic>",
            "SOW topic 't': two <HashIndex> over the same fields: /a",
        ),
        (
            "<Topic><Name>t</Name><MessageType>binary</MessageType>"
            "<HashIndex><Key>/a</Key></HashIndex></Topic>",
            "SOW topic 't': a <HashIndex> needs a message type the server parses",
        ),
        (
            "<Topic><Name>t</Name><MessageType>json</MessageType><Index>//</Index></Topic>",
            "SOW topic 't': <Index>: invalid XPath '//'",
        ),
        (
            "<View><Name>v</Name><MessageType>json</MessageType>"
            "<UnderlyingTopic>plain</UnderlyingTopic>"
            "<Projection><Field>/region</Field></Projection>"
            "<Grouping><Field>/region</Field></Grouping><HashIndex/></View>",
            "view 'v': <HashIndex> has no <Key>",
        ),
        (
            "<ConflatedTopic><Name>c</Name><UnderlyingTopic>plain</UnderlyingTopic>"
            "<MessageType>json</MessageType><HashIndex><Key>x</Key></HashIndex>"
            "</ConflatedTopic>",
            "conflated topic 'c': <Key> of <HashIndex>: invalid XPath 'x'",
        ),
    ],
)
def test_a_bad_index_fails_the_start_naming_it(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config(extra), base_dir=tmp_path)
    assert message in str(caught.value)


QUEUE_CONFIG = """<AMPSConfig><Name>hash-index-queue</Name>
  <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>journal</JournalDirectory>
    <Topic><Name>jobs</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>
    <Queue><Name>work</Name><MessageType>json</MessageType>
      <UnderlyingTopic>jobs</UnderlyingTopic></Queue>
    {views}
  </SOW>
</AMPSConfig>"""
QUEUE_VIEW = """<View><Name>{name}</Name><MessageType>json</MessageType>
      <UnderlyingTopic>work</UnderlyingTopic>
      <Projection><Field>/kind</Field><Field>/site</Field><Field>COUNT(/id) AS /waiting</Field>
      </Projection><Grouping><Field>/kind</Field><Field>/site</Field></Grouping>{index}</View>"""


def test_a_view_over_a_queue_answers_from_its_index(tmp_path: Path) -> None:
    views = QUEUE_VIEW.format(
        name="qv-i", index="<HashIndex><Key>/kind</Key><Key>/site</Key></HashIndex>"
    ) + QUEUE_VIEW.format(name="qv-p", index="")
    thread = start(tmp_path, QUEUE_CONFIG.format(views=views))
    try:
        raw = connect(thread)
        try:
            for n in range(60):
                job = {"id": n, "kind": VALUES[n % len(VALUES)], "site": ["x", "y", 7][n % 3]}
                raw.send({"c": "p", "t": "jobs"}, json.dumps(job).encode())
            raw.send({"c": "flush", "cid": "F", "a": "processed"})
            raw.recv_until(lambda h: h.get("cid") == "F", 10)
            wait_for(lambda: len(sow(raw, "qv-i", None)) == len(sow(raw, "qv-p", None)) > 5, 20)
            queries: list[tuple[str | None, bool]] = [
                ("/kind = 'east' AND /site = 'x'", True),
                ("/kind IN ('5', 'west', '07') AND /site IN ('7', 'y')", True),
                ("/kind = 5 AND /site = 'x'", False),
                ("/kind = 'east'", False),
                (None, False),
            ]
            where = "/amps/instance/views/qv-i"
            for text, answered in queries:
                before = index_queries(thread, where)[("/kind", "/site")]
                got = sow(raw, "qv-i", text)
                assert got == sow(raw, "qv-p", text), text
                after = index_queries(thread, where)[("/kind", "/site")]
                assert after - before == (1 if answered else 0), text
            assert sow(raw, "qv-i", "/kind = 'east' AND /site = 'x'") != []
        finally:
            raw.close()
    finally:
        thread.stop()
