"""Routing and validation rules, and the resync starting point (no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampsclient_server_stub.config import (
    DestinationConfig,
    ReplicationTopicConfig,
    parse_config,
)
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.replication.protocol import proof, verify_proof
from ampsclient_server_stub.replication.rules import (
    DestinationRules,
    InstanceSummary,
    decode_path,
    encode_path,
    summarize,
    validate_destination,
)
from ampsclient_server_stub.replication.streams import resync_start


def dest(
    *topics: ReplicationTopicConfig, group: str | None = "HA", **kw: object
) -> DestinationConfig:
    return DestinationConfig(name="B", group=group, sync_type="sync", topics=topics, **kw)  # type: ignore[arg-type]


def summary(
    name: str,
    *,
    txlog: list[tuple[str, str | None]] | None = None,
    sow: list[tuple[str, str, list[str]]] | None = None,
    back: list[list[object]] | None = None,
    group: str = "HA",
    back_to: str = "A",
) -> InstanceSummary:
    dests = []
    if back is not None:
        dests.append(
            {"name": back_to, "group": "HA", "sync": "sync", "topics": back, "passthrough": []}
        )
    return InstanceSummary(name, group, txlog, sow or [], dests)


ORDERS = ReplicationTopicConfig("orders", "json")


def test_a_matching_pair_validates() -> None:
    local = summary("A", back=[["orders", "json", None, []]])
    remote = summary("B", txlog=[("orders", "json")], back=[["orders", "json", None, []]])
    assert validate_destination(local, dest(ORDERS), remote) == []


def test_each_check_and_its_exclusion() -> None:
    local = summary("A", sow=[("orders", "json", ["/id"])])
    remote = summary("B", txlog=[("other", "json")], sow=[("orders", "json", ["/key"])])
    problems = validate_destination(local, dest(ORDERS), remote)
    checks = sorted(p.split("]")[0][1:] for p in problems)
    assert checks == ["keys", "replicate", "txlog"]
    excluded = ReplicationTopicConfig(
        "orders", "json", exclude_validation=("txlog", "replicate", "keys")
    )
    assert validate_destination(local, dest(excluded), remote) == []


def test_sow_check_when_the_remote_has_no_sow() -> None:
    local = summary("A", sow=[("orders", "json", ["/id"])])
    remote = summary("B", back=[["orders", "json", None, []]])
    problems = validate_destination(local, dest(ORDERS), remote)
    assert len(problems) == 1 and problems[0].startswith("[sow]")


def test_cascade_and_replicate_filter() -> None:
    filtered = ReplicationTopicConfig("orders", "json", filter="/x > 1")
    local = summary("A")
    remote = summary("B", back=[["orders", "json", "/x > 2", ["txlog"]]])
    problems = validate_destination(local, dest(filtered), remote)
    assert sorted(p.split("]")[0][1:] for p in problems) == ["cascade", "replicate_filter"]
    relaxed = ReplicationTopicConfig(
        "orders", "json", filter="/x > 1", exclude_validation=("cascade", "replicate_filter")
    )
    assert validate_destination(local, dest(relaxed), remote) == []


def test_group_mismatch_cannot_be_excluded() -> None:
    remote = summary("B", group="OTHER", back=[["orders", "json", None, []]])
    problems = validate_destination(summary("A"), dest(ORDERS), remote)
    assert len(problems) == 1 and "expects group 'HA'" in problems[0]


def test_regex_topics_compare_by_text_and_literals_by_match() -> None:
    local = summary("A")
    remote = summary("B", txlog=[("ord.*", "json")], back=[["ord.*", "json", None, []]])
    assert validate_destination(local, dest(ORDERS), remote) == []
    regex = ReplicationTopicConfig("ord.*", "json")
    assert validate_destination(local, dest(regex), remote) == []
    other_regex = ReplicationTopicConfig("o.*", "json")
    assert validate_destination(local, dest(other_regex), remote) != []


def test_summary_of_a_seed_style_config() -> None:
    config = parse_config(
        """<AMPSConfig><Name>amps-1</Name><Group>DataCenter-NYC-1</Group>
        <Transports><Transport><Name>amps-replication</Name><Type>amps-replication</Type>
        <InetAddr>10004</InetAddr></Transport></Transports>
        <TransactionLog><JournalDirectory>j</JournalDirectory>
        <Topic><Name>topic</Name><MessageType>fix</MessageType></Topic></TransactionLog>
        <Replication><Destination><Topic><MessageType>fix</MessageType><Name>topic</Name>
        </Topic><Name>amps-2</Name><Group>DataCenter-NYC-1</Group><SyncType>sync</SyncType>
        <Transport><InetAddr>amps-2-server.example.com:10005</InetAddr>
        <Type>amps-replication</Type></Transport></Destination></Replication></AMPSConfig>""",
        base_dir=Path("/tmp"),
    )
    s = summarize(config, record_all_topics=True)
    assert s.name == "amps-1" and s.group == "DataCenter-NYC-1"
    assert s.txlog == [("topic", "fix")]
    assert s.destinations[0]["topics"] == [["topic", "fix", None, []]]
    assert InstanceSummary.from_wire(s.to_wire()) == s


def test_routing_topics_filters_passthrough_and_loops() -> None:
    d = DestinationConfig(
        name="B",
        group="G2",
        topics=(
            ReplicationTopicConfig("orders", "json", filter="/qty > 10"),
            ReplicationTopicConfig("^audit", None),
        ),
        passthrough=("^NYC",),
    )
    rules = DestinationRules(d, "A", "G1")
    assert rules.topic_matches("json", "orders", "p", b'{"qty": 11}')
    assert not rules.topic_matches("json", "orders", "p", b'{"qty": 1}')
    assert rules.topic_matches("json", "orders", "sow_delete", b"")  # filters: publishes only
    assert not rules.topic_matches("msgpack", "orders", "p", b"")
    assert rules.topic_matches("msgpack", "audit.log", "p", b"")
    assert rules.passes([("A", "G1")])  # published here
    assert rules.passes([("X", "NYC-1"), ("A", "G1")])  # from a passthrough group
    assert not rules.passes([("X", "LDN"), ("A", "G1")])
    loop_free = DestinationRules.loop_free
    assert loop_free([("A", "G1")], "B", "G2", "G1")
    assert not loop_free([("B", "G2"), ("A", "G1")], "B", "G2", "G1")  # visited instance
    assert not loop_free([("C", "G2"), ("A", "G1")], "B", "G2", "G1")  # left group G2 before
    assert loop_free([("C", "G1"), ("A", "G1")], "B", "G1", "G1")  # within its own group
    assert decode_path(encode_path([("A", "G,1")])) == [("A", "G,1")]
    assert decode_path("garbage") == []


def test_resync_start(tmp_path: Path) -> None:
    with Journal(tmp_path / "j", fsync="never") as journal:
        for seq in range(1, 11):
            journal.append(publisher_id=1, sequence=seq, topic="t", command="p", payload=b"")
            journal.append(publisher_id=2, sequence=seq, topic="t", command="p", payload=b"")
        assert resync_start(journal, {1: 10, 2: 10}) == journal.last_index + 1
        assert resync_start(journal, {1: 10, 2: 7}) == journal.find_bookmark(2, 7) + 1  # type: ignore[operator]
        assert resync_start(journal, {1: 3, 2: 7}) == journal.find_bookmark(1, 3) + 1  # type: ignore[operator]
        assert resync_start(journal, {1: 10}) == journal.first_index  # never saw publisher 2


def test_proofs() -> None:
    p = proof("secret", "dialer", "nonce", "A")
    assert verify_proof("secret", "dialer", "nonce", "A", p)
    assert not verify_proof("other", "dialer", "nonce", "A", p)
    assert not verify_proof("secret", "listener", "nonce", "A", p)
    assert not verify_proof("secret", "dialer", "nonce", "A", None)


@pytest.mark.parametrize("bad", [None, [], [[1, 2]], [[1, 2, 3, "p", "t", "not-bytes", {}]]])
def test_bad_record_bodies(bad: object) -> None:
    from ampsclient_server_stub.replication.protocol import unpack_records

    if bad == []:
        assert unpack_records(bad) == []
        return
    with pytest.raises(ValueError):
        unpack_records(bad)


def test_the_documented_configurations_parse(tmp_path: Path) -> None:
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "replication.md").read_text()
    found = re.findall(r"```xml\n(.*?)```", doc, re.S)
    blocks = [b for b in found if b.startswith("<AMPSConfig>")]
    fragments = [b for b in found if not b.startswith("<AMPSConfig>")]
    assert len(blocks) == 3
    assert len(fragments) == 1  # the <Destination> of the compression section
    wrapped = parse_config(
        f"<AMPSConfig><Replication>{fragments[0]}</Replication></AMPSConfig>", base_dir=tmp_path
    )
    assert wrapped.replication is not None
    assert wrapped.replication.destinations[0].compression == "zlib"
    configs = [parse_config(block, base_dir=tmp_path) for block in blocks]
    assert [c.name for c in configs] == ["amps-1", "E1", "U1"]
    amps1, e1, u1 = configs
    assert amps1.replication is not None and amps1.replication.downgrade is not None
    assert amps1.replication.destinations[0].sync_type == "sync"
    assert amps1.transports[1].extra["Secret"] == "change-me"
    assert e1.replication is not None and e1.replication.destinations[0].passthrough == ("^US",)
    assert u1.replication is not None
    assert [a.port for a in u1.replication.destinations[0].inet_addrs] == [10001, 10002]
    # E1's and U1's summaries validate against each other (E2 is E1 with names swapped)
    e1_sum = summarize(e1, record_all_topics=False)
    u1_sum = summarize(u1, record_all_topics=False)
    assert validate_destination(e1_sum, e1.replication.destinations[1], u1_sum) == []
    assert validate_destination(u1_sum, u1.replication.destinations[0], e1_sum) == []
