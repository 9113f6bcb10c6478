"""Every command option of the server's one table (``engine/command_options.py``), walked
through a real server over a real socket: each (command, option) cell proves an effect here,
or names the test that proves it, and an option a command does not accept is refused with
``invalid options`` and a ``reason_detail`` naming it (issue #28: nothing accepted and
ignored). The refusals are also checked with our client and with the official one."""

from __future__ import annotations

import ast
import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command
from ampsclient.exceptions import InvalidOptionsError
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.command_options import (
    COMMAND_OPTIONS,
    NOT_IMPLEMENTED,
    OPTION_EFFECTS,
)
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent.parent

CONFIG = """<AMPSConfig><Name>options</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>journal</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>jobs</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Queue><Name>work</Name><MessageType>json</MessageType>
      <UnderlyingTopic>jobs</UnderlyingTopic>
      <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue></SOW>
</AMPSConfig>"""

SUBSCRIBING = ("subscribe", "delta_subscribe", "sow_and_subscribe", "sow_and_delta_subscribe")

_ids = itertools.count()

Frame = tuple[dict[str, Any], bytes]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(parse_config(CONFIG, base_dir=tmp_path), fsync="never") as thread:
        yield thread


class Probe:
    """One logged-on raw connection and the frames it received."""

    def __init__(self, server: ServerThread) -> None:
        self.raw = RawClient.from_uri(server.uri("tcp", "json"), timeout=10.0)
        self.raw.logon(f"options-{next(_ids)}-{time.time_ns()}")
        self.pending: list[Frame] = []

    def command(self, c: str, **fields: Any) -> dict[str, Any]:
        """Send ``c`` asking for the processed ack and return that ack; the frames that come
        before it stay for :meth:`until`."""
        cid = f"c{next(_ids)}"
        self.raw.send({"c": c, "cid": cid, "a": "processed", **fields})
        deadline = time.monotonic() + 10.0
        while True:
            hdr, body = self.raw.recv(max(0.0, deadline - time.monotonic()))
            if hdr.get("c") == "ack" and hdr.get("cid") == cid and hdr.get("a") == "processed":
                return hdr
            self.pending.append((hdr, body))

    def until(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> list[Frame]:
        """The frames up to and including the first whose header satisfies ``pred``."""
        out: list[Frame] = []
        deadline = time.monotonic() + timeout
        while True:
            if self.pending:
                frame = self.pending.pop(0)
            else:
                frame = self.raw.recv(max(0.0, deadline - time.monotonic()))
            out.append(frame)
            if pred(frame[0]):
                return out

    def publish(self, topic: str, *docs: dict[str, Any]) -> None:
        """Publish ``docs`` in ONE write (one batch on the server) and wait for a flush."""
        frames = [(json.dumps({"c": "p", "t": topic}) + json.dumps(doc)).encode() for doc in docs]
        self.raw.send_raw(b"".join(len(f).to_bytes(4, "big") + f for f in frames))
        self.command("flush")

    def deliveries(self, count: int) -> list[dict[str, Any]]:
        """The bodies of the next ``count`` publishes delivered (``c`` ``p``)."""
        got: list[dict[str, Any]] = []
        while len(got) < count:
            hdr, body = self.until(lambda h: h.get("c") in ("p", "oof"))[-1]
            if hdr.get("c") == "p":
                got.append(json.loads(body) | {"_hdr": hdr})
        return got

    def close(self) -> None:
        self.raw.close()


@pytest.fixture
def probe(server: ServerThread) -> Iterator[Probe]:
    p = Probe(server)
    yield p
    p.close()


def subscribe(p: Probe, command: str, options: str, **fields: Any) -> dict[str, Any]:
    """``command`` on ``orders`` (unless ``t`` says otherwise) with ``options``; asserts the
    processed ack is a success (a query's results are read by the caller)."""
    ack = p.command(command, **({"t": "orders", "sub_id": f"s{next(_ids)}", "o": options} | fields))
    assert ack.get("status") == "success", ack
    return ack


def refused(ack: dict[str, Any], option: str) -> None:
    assert ack.get("status") == "failure", ack
    assert ack.get("reason") == "invalid options", ack
    assert f"option {option!r}" in ack.get("reason_detail", ""), ack


# ---------------------------------------------------------------------- the proofs


def prove_oof(p: Probe, command: str) -> None:
    subscribe(p, command, "oof", filter="/px > 10")
    p.publish("orders", {"id": "o", "px": 20}, {"id": "o", "px": 5})
    hdr, _ = p.until(lambda h: h.get("c") == "oof")[-1]
    assert hdr.get("reason") == "match"


def prove_replace(p: Probe, command: str) -> None:
    subscribe(p, command, "", sub_id="r", filter="/id = 'a'")
    assert p.command(command, t="orders", sub_id="r", filter="/id = 'b'")["reason"] == (
        "subid in use"
    )
    subscribe(p, command, "replace", sub_id="r", filter="/id = 'b'")
    p.publish("orders", {"id": "a", "px": 1}, {"id": "b", "px": 2})
    assert p.deliveries(1)[0]["id"] == "b"  # the replaced filter no longer delivers a


def prove_timestamp(p: Probe, command: str) -> None:
    if command == "sow":
        p.publish("orders", {"id": "t", "px": 1})
        ack = p.command("sow", t="orders", o="timestamp")
        assert ack["status"] == "success"
        frames = p.until(lambda h: h.get("c") == "group_end")
        body = b"".join(b for h, b in frames if h.get("c") == "sow")
        assert b'"ts":"' in body
        return
    subscribe(p, command, "timestamp")
    p.publish("orders", {"id": "t", "px": 1})
    assert "ts" in p.deliveries(1)[0]["_hdr"]


# the three publishes are one write, routed in one pass on the server's loop: the hold's timer
# cannot run between them, so a short interval conflates them as surely as a long one
def prove_conflation(p: Probe, command: str) -> None:
    subscribe(p, command, "conflation=100ms")
    p.publish("orders", {"id": "c", "px": 1}, {"id": "c", "px": 2}, {"id": "c", "px": 3})
    assert p.deliveries(1)[0]["px"] == 3  # px 1 and 2 were conflated away


def prove_conflation_key(p: Probe, command: str) -> None:
    subscribe(p, command, "conflation=100ms,conflation_key=[/sym]")
    p.publish("orders", {"id": "k1", "sym": "S", "px": 1}, {"id": "k2", "sym": "S", "px": 2})
    assert p.deliveries(1)[0]["id"] == "k2"  # one key for both records: only the latest


def prove_max_backlog(p: Probe, command: str) -> None:
    p.publish("jobs", *({"n": n} for n in range(4)))
    subscribe(p, command, "max_backlog=2", t="work")
    assert len(p.deliveries(2)) == 2
    p.command("sow", t="work", query_id="left")
    frames = p.until(lambda h: h.get("c") == "group_end")
    left = sum(int(h.get("bs", 0)) for h, _ in frames if h.get("c") == "sow")
    assert left == 2  # two leased (the default backlog leases one)


def prove_bookmark_not_found(p: Probe, command: str) -> None:
    ack = p.command(command, t="orders", sub_id="bnf", bm="123456|99|", o="bookmark_not_found=fail")
    assert ack.get("status") == "failure", ack  # with the default (now) it subscribes
    ack = p.command(command, t="orders", sub_id="bnf", bm="123456|99|")
    assert ack.get("status") == "success", ack


def prove_pause_resume(p: Probe, command: str) -> None:
    p.publish("orders", {"id": "p", "px": 1})
    subscribe(p, command, "pause", sub_id="ps", bm="0")
    subscribe(p, "subscribe", "", sub_id="marker", filter="/id = 'm'", t="orders")
    p.publish("orders", {"id": "m", "px": 0})
    assert [d["id"] for d in p.deliveries(1)] == ["m"]  # the paused replay sent nothing
    ack = p.command(command, sub_id="ps", o="resume")
    assert ack.get("status") == "success", ack
    assert p.deliveries(1)[0]["id"] == "p"


def prove_no_empties(p: Probe, command: str) -> None:
    subscribe(p, command, "no_empties")
    p.publish("orders", {"id": "e", "px": 1}, {"id": "e", "px": 1}, {"id": "e", "px": 2})
    got = p.deliveries(2)
    assert [d.get("px") for d in got] == [1, 2]  # the unchanged republish sent nothing


def prove_send_keys(p: Probe, command: str) -> None:
    subscribe(p, command, "send_keys")
    p.publish("orders", {"id": "sk", "px": 1, "q": 1}, {"id": "sk", "px": 2, "q": 1})
    assert p.deliveries(2)[1] | {"_hdr": None} == {"id": "sk", "px": 2, "_hdr": None}


def _query(p: Probe, command: str, options: str, **fields: Any) -> list[Frame]:
    p.publish("orders", *({"id": f"q{n}", "px": n, "g": n % 2} for n in range(4)))
    ack = p.command(command, **({"t": "orders", "o": options, "sub_id": "q"} | fields))
    assert ack.get("status") == "success", ack
    frames = p.until(lambda h: h.get("c") == "group_end")
    return [f for f in frames if f[0].get("c") == "sow"]


def _records(frames: list[Frame]) -> list[tuple[dict[str, Any], Any]]:
    """The records of ``sow`` frames (batch size 1: one header and body each)."""
    out = []
    for _hdr, body in frames:
        from ampsclient.protocol.header import decode_header

        inner, end = decode_header(body)
        out.append((inner, json.loads(body[end : end + int(inner["l"])])))
    return out


def prove_top_n(p: Probe, command: str) -> None:
    assert len(_records(_query(p, command, "top_n=2"))) == 2


def prove_skip_n(p: Probe, command: str) -> None:
    rows = _records(_query(p, command, "skip_n=3", orderby="/px"))
    assert [doc["px"] for _h, doc in rows] == [3]


def prove_orderby(p: Probe, command: str) -> None:
    rows = _records(_query(p, command, "orderby=/px DESC"))
    assert [doc["px"] for _h, doc in rows] == [3, 2, 1, 0]


def prove_select(p: Probe, command: str) -> None:
    rows = _records(_query(p, command, "select=[-/,+/id]", filter="/id = 'q1'"))
    assert [doc for _h, doc in rows] == [{"id": "q1"}]


def prove_no_sowkey(p: Probe, command: str) -> None:
    rows = _records(_query(p, command, "no_sowkey", filter="/id = 'q1'"))
    assert len(rows) == 1 and "k" not in rows[0][0]


def prove_aggregate(p: Probe, command: str) -> None:
    rows = _records(
        _query(p, command, "projection=[/g,COUNT(/id) AS /n],grouping=[/g]", orderby="/g")
    )
    assert [doc for _h, doc in rows] == [{"g": 0, "n": 2}, {"g": 1, "n": 2}]


def prove_queue_ack(option: str) -> Callable[[Probe, str], None]:
    def prove(p: Probe, command: str) -> None:
        p.publish("jobs", {"n": 1})
        subscribe(p, "subscribe", "", t="work")
        hdr = p.deliveries(1)[0]["_hdr"]
        ack = p.command(command, t="work", bm=hdr["bm"], o=option)
        assert ack.get("status") == "success", ack
        p.publish("jobs", {"n": 2})  # the marker, behind n=1 in the queue
        # cancel: n=1 is back in the queue and leased again first; expire: it is gone
        assert p.deliveries(1)[0]["n"] == (1 if option == "cancel" else 2)

    return prove


def prove_ack_conflation(p: Probe, command: str) -> None:
    raw = RawClient(p.raw.sock.getpeername()[1], timeout=10.0)
    try:
        raw.send(
            {
                "c": "logon",
                "cid": "L",
                "client_name": f"ac-{time.time_ns()}",
                "a": "processed",
                "o": "ack_conflation=nonsense",
            }
        )
        ack, _ = raw.recv_until(lambda h: h.get("cid") == "L")
        assert ack.get("reason") == "invalid options"  # the option is read: a bad value fails
    finally:
        raw.close()


def cited(test: str) -> Callable[[Probe, str], None]:
    """A cell proven by another test (``path::name`` under ``tests/``), which must exist."""

    def prove(_p: Probe, _command: str) -> None:
        path, name = test.split("::")
        tree = ast.parse((TESTS / path).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in names, f"{test} does not exist"

    prove.__doc__ = test
    return prove


BOOKMARK_TESTS = "txlog/test_bookmark_replay.py"
PROOFS: dict[str, Callable[[Probe, str], None]] = {
    "oof": prove_oof,
    "replace": prove_replace,
    "timestamp": prove_timestamp,
    "conflation": prove_conflation,
    "conflation_key": prove_conflation_key,
    "max_backlog": prove_max_backlog,
    "live": cited(f"{BOOKMARK_TESTS}::test_live_option_delivers_before_the_record_is_durable"),
    "fully_durable": cited(
        "replication/test_links.py::test_sync_ack_waits_for_the_destination_and_fully_durable_follows"
    ),
    "rate": cited(f"{BOOKMARK_TESTS}::test_rate_paces_the_replay"),
    "rate_max_gap": cited(
        f"{BOOKMARK_TESTS}::test_rate_as_a_multiple_of_the_original_pace_with_a_max_gap"
    ),
    "bookmark_not_found": prove_bookmark_not_found,
    "pause": prove_pause_resume,
    "resume": prove_pause_resume,
    "no_empties": prove_no_empties,
    "send_keys": prove_send_keys,
    "top_n": prove_top_n,
    "skip_n": prove_skip_n,
    "orderby": prove_orderby,
    "select": prove_select,
    "no_sowkey": prove_no_sowkey,
    "projection": prove_aggregate,
    "grouping": prove_aggregate,
    "cancel": prove_queue_ack("cancel"),
    "expire": prove_queue_ack("expire"),
    "ack_conflation": prove_ack_conflation,
}
"""How each option's effect is proven (one function per option, run for every command that
accepts it)."""

CELLS = sorted((c, o) for c, options in COMMAND_OPTIONS.items() for o in options)


def test_every_option_of_the_table_has_a_proof_and_a_doc_line() -> None:
    assert set(OPTION_EFFECTS) == {o for _c, o in CELLS}
    assert set(PROOFS) == {o for _c, o in CELLS}
    assert len(CELLS) > 60  # the walk sees the table


@pytest.mark.parametrize(("command", "option"), CELLS)
def test_each_accepted_option_has_its_effect(probe: Probe, command: str, option: str) -> None:
    PROOFS[option](probe, command)


@pytest.mark.parametrize("command", sorted(COMMAND_OPTIONS))
def test_an_option_a_command_does_not_take_is_refused_by_name(probe: Probe, command: str) -> None:
    if command == "logon":
        raw = RawClient(probe.raw.sock.getpeername()[1], timeout=10.0)
        try:
            raw.send({"c": "logon", "cid": "L", "client_name": "u", "a": "processed", "o": "x"})
            refused(raw.recv_until(lambda h: h.get("cid") == "L")[0], "x")
        finally:
            raw.close()
        return
    ack = probe.command(command, t="orders", sub_id="u", o="frobnicate=1")
    refused(ack, "frobnicate")


@pytest.mark.parametrize(("command", "option"), sorted(NOT_IMPLEMENTED))
def test_an_option_amps_documents_but_the_server_lacks_is_refused_by_name(
    probe: Probe, command: str, option: str
) -> None:
    if command == "logon":
        raw = RawClient(probe.raw.sock.getpeername()[1], timeout=10.0)
        try:
            raw.send({"c": "logon", "cid": "L", "client_name": "u", "a": "processed", "o": option})
            refused(raw.recv_until(lambda h: h.get("cid") == "L")[0], option)
        finally:
            raw.close()
        return
    ack = probe.command(command, t="orders", sub_id="n", o=f"{option}=[-/px]")
    refused(ack, option)
    assert "not implemented" in ack["reason_detail"]


def test_sow_delete_options_are_queue_acknowledgements_only(probe: Probe) -> None:
    refused(probe.command("sow_delete", t="orders", filter="/id = 'x'", o="cancel"), "cancel")


def test_queries_that_cannot_stamp_or_select_refuse_it(probe: Probe) -> None:
    refused(probe.command("sow", t="work", o="timestamp"), "timestamp")
    ack = probe.command(
        "sow", t="orders", o="projection=[/g,COUNT(/id) AS /n],grouping=[/g],select=[-/g]"
    )
    refused(ack, "select")


REFUSED = [("subscribe", "no_such_option"), *sorted(k for k in NOT_IMPLEMENTED if k[0] != "logon")]
"""What both clients send and get refused: an unknown option, and each one AMPS documents
that the server lacks (the logon one is below)."""


@pytest.mark.parametrize(("command", "option"), REFUSED)
def test_our_client_gets_invalid_options_naming_the_option(
    server: ServerThread, command: str, option: str
) -> None:
    with Client(f"ours-{time.time_ns()}") as client:
        client.connect(server.uri("tcp", "json"))
        client.logon(5000)
        cmd = Command(command).set_topic("orders").set_options(option).set_timeout(5000)
        with pytest.raises(InvalidOptionsError, match=f"option '{option}'") as info:
            client.execute(cmd)
        assert info.value.reason == "invalid options"
        # the connection goes on: the same command without the option is taken
        client.execute(Command(command).set_topic("orders").set_timeout(5000))


@pytest.mark.parametrize(("command", "option"), REFUSED)
def test_the_official_client_gets_invalid_options(
    server: ServerThread, command: str, option: str
) -> None:
    amps: Any = pytest.importorskip("AMPS")
    client = amps.Client(f"official-{time.time_ns()}")
    client.connect(server.uri("tcp", "json"))
    client.logon()
    try:
        with pytest.raises(amps.InvalidOptionsException, match=option):
            client.execute(
                amps.Command(command).set_topic("orders").set_options(option).set_timeout(5000)
            )
        client.execute(amps.Command(command).set_topic("orders").set_timeout(5000))
    finally:
        client.disconnect()


def test_the_official_client_s_pretty_logon_is_refused_by_name(server: ServerThread) -> None:
    """The official client sends the logon option ``pretty`` for a ``?pretty=true`` URI."""
    amps: Any = pytest.importorskip("AMPS")
    client = amps.Client(f"official-pretty-{time.time_ns()}")
    client.connect(server.uri("tcp", "json") + "?pretty=true")
    try:
        with pytest.raises(amps.InvalidOptionsException, match="pretty"):
            client.logon(5000)
    finally:
        client.disconnect()


def test_what_the_official_client_sends_in_normal_use_is_accepted(server: ServerThread) -> None:
    amps: Any = pytest.importorskip("AMPS")
    client = amps.Client(f"official-normal-{time.time_ns()}")
    client.connect(server.uri("tcp", "json"))
    client.logon()
    try:
        client.subscribe("orders", "/px > 1", "oof,timestamp", 5000)
        client.sow_and_subscribe("orders", None, oof_enabled=True, timeout=5000)
        client.sow_and_delta_subscribe("orders", None, timeout=5000)  # sends no_empties
        client.delta_subscribe("orders", None, "send_keys", 5000)
        client.sow("orders", None, timeout=5000, top_n=1, order_by="/px")
    finally:
        client.disconnect()


def test_the_docs_table_is_the_servers_table() -> None:
    """docs/server.md "Command options" shows exactly :data:`COMMAND_OPTIONS`."""
    page = (TESTS.parent / "docs" / "server.md").read_text()
    section = page[page.index("## Command options") :]
    section = section[: section.index("\n## ", 1)]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    commands = [cell.strip().strip("`") for cell in lines[0].split("|")[2:-2]]
    shown: dict[tuple[str, str], str] = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        for command, cell in zip(commands, cells[1:-1], strict=True):
            if cell:
                shown[(command, cells[0].strip("`"))] = cell
    expected = {(c, o): "yes" for c in commands for o in COMMAND_OPTIONS[c]}
    expected |= {key: "refused" for key in NOT_IMPLEMENTED if key[0] in commands}
    assert shown == expected


@pytest.mark.parametrize("command", SUBSCRIBING)
@pytest.mark.parametrize("option", ["oof", "timestamp", "conflation=1s", "live", "no_empties"])
def test_a_queue_subscription_refuses_what_it_does_not_implement(
    probe: Probe, command: str, option: str
) -> None:
    name = option.split("=")[0]
    if name not in COMMAND_OPTIONS[command]:
        pytest.skip(f"{command} does not take {name} anywhere (refused by the table)")
    ack = probe.command(command, t="work", sub_id="qs", o=option)
    refused(ack, name)
    assert "a subscription to a queue" in ack["reason_detail"]


def test_an_aggregation_on_a_plain_subscription_says_what_takes_it(probe: Probe) -> None:
    ack = probe.command("subscribe", t="orders", sub_id="agg", o="projection=[/g],grouping=[/g]")
    refused(ack, "projection")
    assert "need a sow, sow_and_subscribe or sow_and_delta_subscribe" in ack["reason_detail"]


MAX_BACKLOG_OUTSIDE_A_QUEUE = [
    (command, where)
    for command in SUBSCRIBING
    for where in ("topic", "regex", "bookmark")
    if where != "bookmark" or command in ("subscribe", "delta_subscribe")
]
"""Where ``max_backlog`` would be accepted and ignored: a subscription to a topic that is not
a queue, to a regular expression, and a bookmark replay of a queue's underlying topic (a
``sow_and_subscribe`` cannot take a bookmark)."""


@pytest.mark.parametrize(("command", "where"), MAX_BACKLOG_OUTSIDE_A_QUEUE)
def test_max_backlog_outside_a_queue_subscription_is_refused_by_name(
    probe: Probe, command: str, where: str
) -> None:
    """``max_backlog`` is a queue subscription option (AMPS developer guides, "Backlog and
    Smart Pipelining"); elsewhere it would lease nothing: refused, the same command without it
    taken."""
    fields: dict[str, Any] = {
        "topic": {"t": "orders"},
        "regex": {"t": "^ord.*"},
        "bookmark": {"t": "work", "bm": "0"},
    }[where]
    ack = probe.command(command, sub_id=f"mb{next(_ids)}", o="max_backlog=2", **fields)
    refused(ack, "max_backlog")
    assert "not a queue" in ack["reason_detail"]
    subscribe(probe, command, "", **fields)


def test_max_backlog_outside_a_queue_with_both_clients(server: ServerThread) -> None:
    """Our client's ``max_backlog`` keyword and the official client's
    ``Message.Options.MaxBacklog`` on a topic that is not a queue: refused by name."""
    with Client(f"ours-mb-{time.time_ns()}") as client:
        client.connect(server.uri("tcp", "json"))
        client.logon(5000)
        with pytest.raises(InvalidOptionsError, match="option 'max_backlog'"):
            client.subscribe("orders", max_backlog=2, timeout=5000)
        client.subscribe("work", max_backlog=2, timeout=5000)  # a queue takes it
    amps: Any = pytest.importorskip("AMPS")
    official = amps.Client(f"official-mb-{time.time_ns()}")
    official.connect(server.uri("tcp", "json"))
    official.logon()
    try:
        with pytest.raises(amps.InvalidOptionsException, match="max_backlog"):
            official.subscribe("orders", None, amps.Message.Options.MaxBacklog(2), 5000)
        official.subscribe("work", None, amps.Message.Options.MaxBacklog(2), 5000)
    finally:
        official.disconnect()
