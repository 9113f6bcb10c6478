"""``<Preprocessing>`` and ``<Enrichment>`` on a SOW topic (AMPS User Guide, "State of the World
Message Enrichment"): preprocessing runs before the SOW key is computed, enrichment after it;
both before the SOW, the transaction log and subscribers see the message. Configuration errors
name the element; a real server is checked message by message (subscriber, ``sow``, bookmark
replay, the official client)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.testing import Inbox

PRE = "<Preprocessing><Field>CONCAT(/cust, '-', /oid) AS /key</Field></Preprocessing>"
ENRICH = """<Enrichment><Field>/qty * /px AS /notional</Field>
  <Field>UPPER(/sym) AS /sym</Field><Field>/key AS /meta/key</Field></Enrichment>"""


def xml(stages: str = PRE + ENRICH, *, mt: str = "json") -> str:
    return f"""<AMPSConfig><Name>enrich</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  </Transport></Transports>
  <SOW><Topic><Name>orders</Name><MessageType>{mt}</MessageType><Key>/key</Key>
    {stages}</Topic></SOW>
  <TransactionLog><JournalSize>1MB</JournalSize>
    <PreallocatedJournalFiles>1</PreallocatedJournalFiles>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
</AMPSConfig>"""


def test_the_stages_are_read(tmp_path: Path) -> None:
    (sow,) = [t for t in parse_config(xml(), base_dir=tmp_path).sow_topics if t.topic == "orders"]
    assert sow.preprocessing == ("CONCAT(/cust, '-', /oid) AS /key",)
    assert sow.enrichment == ("/qty * /px AS /notional", "UPPER(/sym) AS /sym", "/key AS /meta/key")


@pytest.mark.parametrize(
    ("stages", "mt", "reason"),
    [
        (
            "<Enrichment><Field>NO_SUCH(/a) AS /b</Field></Enrichment>",
            "json",
            "SOW topic 'orders': <Enrichment> <Field> 'NO_SUCH(/a) AS /b': "
            "unknown function NO_SUCH()",
        ),
        (
            "<Preprocessing><Field>/a</Field></Preprocessing>",
            "json",
            "SOW topic 'orders': <Preprocessing> <Field> '/a' needs 'expression AS /path'",
        ),
        (
            "<Preprocessing><Field>/a AS b</Field></Preprocessing>",
            "json",
            "SOW topic 'orders': <Preprocessing> <Field> '/a AS b': 'b' is not a field path",
        ),
        (
            "<Enrichment><Filter>/a</Filter></Enrichment>",
            "json",
            "<Filter> in <Enrichment> is not supported by the reference server",
        ),
        (
            "<Enrichment><Field>REMOVE /qty</Field></Enrichment>",
            "json",
            "SOW topic 'orders': <Enrichment> <Field> 'REMOVE /qty': AMPS has no REMOVE "
            "directive: a field is removed with 'NULL AS /path HINT OPTIONAL'",
        ),
        (
            "<Enrichment><Field>/a AS /b HINT SOMETIMES</Field></Enrichment>",
            "json",
            "<Enrichment> <Field> '/a AS /b HINT SOMETIMES': unknown HINT SOMETIMES",
        ),
        (
            "<Preprocessing><Field>/a OF CURRENT AS /b</Field></Preprocessing>",
            "json",
            "OF CURRENT is an <Enrichment> modifier",
        ),
        ("<Enrichment></Enrichment>", "json", "SOW topic 'orders': <Enrichment> has no <Field>"),
        (
            "<Preprocessing><Field>/qty OF PREVIOUS AS /was</Field></Preprocessing>",
            "json",
            "<Preprocessing> <Field> '/qty OF PREVIOUS AS /was': OF PREVIOUS reads the record in "
            "the SOW, which only <Enrichment> has",
        ),
        (
            PRE + PRE,
            "json",
            "duplicate <Preprocessing> in <Topic>",
        ),
        (
            PRE,
            "fix",
            "SOW topic 'orders': <Preprocessing> needs a message type the reference server can "
            "rewrite (json, msgpack), not 'fix'",
        ),
    ],
)
def test_a_bad_stage_is_refused_naming_it(
    tmp_path: Path, stages: str, mt: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(xml(stages, mt=mt), base_dir=tmp_path)
    assert reason in str(info.value)


# --------------------------------------------------------------------------- real server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(parse_config(xml(), base_dir=tmp_path)) as thread:
        yield thread


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    c = Client(f"enrich-{time.time_ns()}")
    c.connect(server.uri("tcp", "json"))
    c.logon(5000)
    yield c
    c.close()


PUBLISHED = [
    {"cust": "A", "oid": 1, "sym": "ibm", "qty": 10, "px": 2},
    {"cust": "B", "oid": 1, "sym": "msft", "qty": 3, "px": 5},
    {"cust": "A", "oid": 1, "sym": "ibm", "qty": 20, "px": 2},  # the same key: replaces A-1
]
EXPECTED = [
    {"cust": "A", "oid": 1, "sym": "IBM", "qty": 10, "px": 2, "key": "A-1", "notional": 20,
     "meta": {"key": "A-1"}},
    {"cust": "B", "oid": 1, "sym": "MSFT", "qty": 3, "px": 5, "key": "B-1", "notional": 15,
     "meta": {"key": "B-1"}},
    {"cust": "A", "oid": 1, "sym": "IBM", "qty": 20, "px": 2, "key": "A-1", "notional": 40,
     "meta": {"key": "A-1"}},
]  # fmt: skip


def _docs(messages: list[Any], command: str) -> list[Any]:
    return [json.loads(m.get_data()) for m in messages if m.get_command() == command]


@pytest.mark.integration
def test_subscriber_sow_and_replay_see_the_processed_messages(client: Client) -> None:
    live = Inbox(keep=lambda m: m.get_command() == "publish")
    client.execute_async(Command("subscribe").set_topic("orders"), live)
    for doc in PUBLISHED:
        client.publish("orders", json.dumps(doc))
    client.flush(5000)
    live.wait_for_count(3, 20.0)
    assert _docs(live.snapshot(), "publish") == EXPECTED
    # the SOW keyed by the preprocessed /key: A-1 replaced, B-1 kept
    stored = _docs(list(client.sow("orders", timeout=5000)), "sow")
    assert sorted(stored, key=lambda d: d["key"]) == [EXPECTED[2], EXPECTED[1]]
    # the transaction log holds the processed messages: a replay from the start gets them
    replay = Inbox(keep=lambda m: m.get_command() == "publish")
    client.execute_async(Command("subscribe").set_topic("orders").set_bookmark("0"), replay)
    replay.wait_for_count(3, 20.0)
    assert _docs(replay.snapshot(), "publish") == EXPECTED


@pytest.mark.integration
def test_the_official_client_sees_the_enriched_record(server: ServerThread) -> None:
    amps = pytest.importorskip("AMPS")
    official = amps.Client(f"official-{time.time_ns()}")
    official.connect(server.uri("tcp", "json"))
    official.logon()
    try:
        official.publish("orders", json.dumps(PUBLISHED[1]))
        official.flush()
        got = [json.loads(m.get_data()) for m in official.sow("orders", timeout=5000)
               if m.get_command() == "sow"]  # fmt: skip
        assert got == [EXPECTED[1]]
    finally:
        official.disconnect()


# --------------------------------------------------------------------------- OF PREVIOUS

# the AMPS 5.2 announcement's example, as written there
# (https://www.crankuptheamps.com/blog/posts/2017/04/06/preprocessing-and-enrichment/)
BLOG = """<Preprocessing>
      <Field>CONCAT(/customer_id,"-",/order_id) as /order_key</Field>
    </Preprocessing>
    <Enrichment>
      <Field>IF(/qty &lt; 0, /qty OF PREVIOUS, /qty) as /qty</Field>
      <Field>IF(/price &lt; 0, /price OF PREVIOUS, /price) as /price</Field>
    </Enrichment>"""


@pytest.mark.integration
def test_of_previous_reads_the_record_the_message_replaces(tmp_path: Path) -> None:
    config = xml(BLOG).replace("<Key>/key</Key>", "<Key>/order_key</Key>")
    amps: Any = pytest.importorskip("AMPS")
    with ServerThread(parse_config(config, base_dir=tmp_path)) as server:
        client = Client(f"previous-{time.time_ns()}")
        client.connect(server.uri("tcp", "json"))
        client.logon(5000)
        try:
            live = Inbox(keep=lambda m: m.get_command() == "publish")
            client.execute_async(Command("subscribe").set_topic("orders"), live)
            order = {"customer_id": "A-111", "order_id": 1000}
            # the blog's message: no previous record, so /qty OF PREVIOUS is NULL
            client.publish("orders", json.dumps(order | {"qty": -1, "price": 100}))
            client.publish("orders", json.dumps(order | {"qty": 5, "price": 100}))
            client.publish("orders", json.dumps(order | {"qty": -1, "price": -3}))  # both kept
            client.publish("orders", json.dumps(order | {"order_id": 7, "qty": -2, "price": 1}))
            client.flush(5000)
            live.wait_for_count(4, 20.0)
            key = {"customer_id": "A-111", "order_id": 1000, "order_key": "A-111-1000"}
            assert _docs(live.snapshot(), "publish") == [
                key | {"qty": None, "price": 100},
                key | {"qty": 5, "price": 100},
                key | {"qty": 5, "price": 100},
                {"customer_id": "A-111", "order_id": 7, "order_key": "A-111-7", "qty": None,
                 "price": 1},
            ]  # fmt: skip
            official = amps.Client(f"official-previous-{time.time_ns()}")
            official.connect(server.uri("tcp", "json"))
            official.logon()
            try:
                found = official.sow("orders", "/order_id = 1000", timeout=5000)
                got = [json.loads(m.get_data()) for m in found if m.get_command() == "sow"]
                assert got == [key | {"qty": 5, "price": 100}]
            finally:
                official.disconnect()
        finally:
            client.close()


HINTS = """<Enrichment>
      <Field>IF(/source IN ('a','e','f'), /source, NULL) AS /source HINT OPTIONAL</Field>
      <Field>NULL AS /secret HINT OPTIONAL</Field>
      <Field>NULL AS /nothing HINT OPTIONAL</Field>
      <Field>NULL AS /shown</Field>
      <Field>/qty OF CURRENT * 2 AS /double HINT SET_CURRENT</Field>
      <Field>/double + 1 AS /after</Field>
      <Field>IF(/qty > 5, NULL, 'small') AS /size HINT SET_CURRENT,OPTIONAL</Field>
      <Field>COALESCE(/size, 'gone') AS /seen</Field>
    </Enrichment>"""


def test_hints_remove_null_fields_and_set_the_current_message() -> None:
    """User Guide, "Using HINT to Control Field Construction": ``HINT OPTIONAL`` removes the
    field when the value is NULL (the guide's /source example), ``HINT SET_CURRENT`` makes the
    value visible to the later fields; without a hint a NULL is written."""
    from ampsclient_server_stub.engine.enrichment import compile_stage

    fields = re.findall(r"<Field>(.*?)</Field>", HINTS)
    stage = compile_stage([f.replace("&gt;", ">") for f in fields], stage="Enrichment")
    doc = {"id": 1, "source": "z", "secret": "s", "qty": 3, "size": "big"}
    assert stage.apply(doc) == {
        "id": 1, "qty": 3, "shown": None, "double": 6, "after": 7, "size": "small",
        "seen": "small",
    }  # fmt: skip
    assert stage.apply(doc | {"source": "a", "qty": 9}) == {
        "id": 1, "source": "a", "qty": 9, "shown": None, "double": 18, "after": 19,
        "seen": "gone",
    }  # fmt: skip
    assert doc["source"] == "z" and doc["size"] == "big"  # (the input is left alone)


@pytest.mark.integration
def test_hint_optional_removes_a_field_over_tcp(tmp_path: Path) -> None:
    """Our client publishes and queries; the official client publishes a second record and
    reads both (the hints apply to every publisher)."""
    amps: Any = pytest.importorskip("AMPS")
    config = xml(HINTS.replace(" > 5", " &gt; 5"))
    with ServerThread(parse_config(config, base_dir=tmp_path)) as server:
        client = Client(f"hints-{time.time_ns()}")
        client.connect(server.uri("tcp", "json"))
        client.logon(5000)
        official = amps.Client(f"official-hints-{time.time_ns()}")
        official.connect(server.uri("tcp", "json"))
        official.logon()
        try:
            client.publish("orders", json.dumps({"key": "k", "source": "x", "secret": 1, "qty": 1}))
            client.flush(5000)
            official.publish("orders", json.dumps({"key": "o", "source": "e", "qty": 8}))
            official.flush()
            found = _docs(client.sow("orders", "/key = 'k'", timeout=5000), "sow")
            assert found == [
                {"key": "k", "qty": 1, "shown": None, "double": 2, "after": 3, "size": "small",
                 "seen": "small"}
            ]  # fmt: skip
            seen = [
                json.loads(m.get_data())
                for m in official.sow("orders", "/key = 'o'", timeout=5000)
                if m.get_command() == "sow"
            ]
            assert seen == [
                {"key": "o", "source": "e", "qty": 8, "shown": None, "double": 16, "after": 17,
                 "seen": "gone"}
            ]  # fmt: skip
        finally:
            official.disconnect()
            client.close()
