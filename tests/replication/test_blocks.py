"""Journal blocks on the replication link (``replication/blocks.py``): an outbound stream
sends runs of its own records as the journal wrote them; the downstream decodes them into
the same records the record-by-record path sends.

The stream tests use a real journal and a small real host and link (as ``test_origins.py``
does; no sockets, nothing mocked); the pair test runs two server processes and checks every
message on B, in order, under the bookmark it has on A.
"""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
from _replication_support import epoch_replay, wait_for
from test_origins import Host

from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster
from ampsclient_server_stub.config import DestinationConfig, ReplicationTopicConfig
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.replication.blocks import BlockRuns, block_runs
from ampsclient_server_stub.replication.rules import PATH_FIELD, encode_path
from ampsclient_server_stub.replication.streams import Outbound


class BlockLink:
    """The link side of a stream: every ``rrec`` it is asked to send, block or list, as the
    records the downstream gets from it."""

    peer_name = "B"
    peer_group = "HB"
    peer_user: str | None = None
    paused = False
    closed = False
    close_reason = ""

    def __init__(self) -> None:
        self.outbound: dict[str, Outbound] = {}
        self.records: list[list[Any]] = []
        self.blocks = 0
        self.lists = 0

    def send(self, fields: dict[str, Any], body: Any = None) -> None:
        if fields["c"] != "rrec":
            return
        if "b" in fields:
            self.blocks += 1
            block = block_runs(body, fields["b"], fields["n"], fields["rp"])
            self.records.extend(list(r) for r in block.records())
        else:
            self.lists += 1
            self.records.extend(list(r) for r in body)

    def describe(self) -> str:
        return "block link"


def fill(journal: Journal) -> None:
    """300 records of three publishers: mostly plain json publishes from here, with xml ones,
    sow_deletes, extra fields and records replicated from elsewhere (a path) in between."""
    seq: dict[int, int] = {}
    other = encode_path([("C", "HC"), ("A", "HA")])
    from_peer = encode_path([("B", "HB"), ("A", "HA")])
    for n in range(300):
        pid = 1 + (n // 40) % 3
        seq[pid] = seq.get(pid, 0) + 1
        fields: dict[str, str | int] = {"mt": "json"}
        if n % 50 == 17:
            fields["mt"] = "xml"
        if n % 60 == 31:
            fields["x"] = f"cid-{n}"
        if 200 <= n < 210:
            fields[PATH_FIELD] = other if n % 2 else from_peer
        command = "sow_delete" if n % 70 == 5 else "p"
        journal.append(
            publisher_id=pid, sequence=seq[pid], topic=("orders", "quotes")[n % 2],
            command=command, payload=b'{"n":%d}' % n, fields=fields,
        )  # fmt: skip
    journal.sync()


TOPIC_SETS = {
    "json on every topic": (ReplicationTopicConfig(".*", "json"),),
    "every type on every topic": (ReplicationTopicConfig(".*", None),),
    "json and xml": (ReplicationTopicConfig(".*", "json"), ReplicationTopicConfig(".*", "xml")),
    "one topic": (ReplicationTopicConfig("orders", "json"),),
}


@pytest.mark.parametrize("topics", list(TOPIC_SETS))
@pytest.mark.parametrize("have", [{}, {1: 20, 3: 10_000}])
def test_blocks_carry_exactly_what_the_rules_decide(
    tmp_path: Path, topics: str, have: dict[int, int]
) -> None:
    """Against ``Outbound.wire`` record by record, fields and paths included: what a block
    carries, what goes in record lists, what neither sends (other types, the peer's records,
    sequences the downstream holds)."""
    loop = asyncio.new_event_loop()
    try:
        with Journal(tmp_path / "journal", fsync="never") as journal:
            fill(journal)
            dest = DestinationConfig(
                name="B", group="HB", topics=TOPIC_SETS[topics], passthrough=("^HC$",)
            )
            host = Host(journal, loop)
            host.name, host.group = "A", "HA"
            judge = Outbound(host, dest, hold=1)
            judge.sent_seq = dict(have)
            expected = []
            for row in journal.read_rows(1, max_records=1000):
                item = judge.wire(row)
                if item is not None:
                    expected.append(list(item))
                    judge.sent_seq[item[1]] = item[2]
            judge.close()
            out = Outbound(host, dest, hold=1)
            link = BlockLink()
            out.attach(link)
            out.on_have(dict(have))  # pumps: everything durable is sent
            assert link.records == expected
            assert out.counters["sent"] == len(expected)
            in_flight = [i for first, last, _ts in out.pending for i in range(first, last + 1)]
            assert in_flight == [r[0] for r in expected] and out.in_flight == len(expected)
            if expected:  # an ack in the middle of a run keeps the rest of it in flight
                indexes = [int(str(r[0])) for r in expected]
                middle = indexes[len(indexes) // 2]
                out.on_ack(middle)
                later = [i for i in indexes if i > middle]
                assert out.acked_through() == (later[0] - 1 if later else out.scan_pos - 1)
                assert out.in_flight == len(later)
                out.on_ack(indexes[-1])
                assert out.in_flight == 0 and not out.pending
            if topics == "one topic":
                assert link.blocks == 0  # not every topic: record by record only
            else:
                assert link.blocks > 0 and out.counters["blocks"] == link.blocks
            out.close()
    finally:
        loop.close()


def _record(index: int, pid: int, seq: int, body: bytes) -> bytes:
    fixed = struct.pack("<QQQQ", index, 1_700_000_000_000_000, pid, seq) + body
    return struct.pack("<II", len(fixed), zlib.crc32(fixed)) + fixed


def test_a_received_block_is_checked_record_by_record() -> None:
    good = [
        _record(5, 9, 1, msgpack.packb(["p", "t", b"a", {"mt": "json"}])),
        _record(6, 9, 2, msgpack.packb(["p", "t", b"b", {"mt": "json"}])),
        # a longer form than the shortest (str8 for "p"): decoded by the general path
        _record(7, 9, 3, b"\xd9\x01p".join([b"\x94", b"\xa1u\xc4\x01c\x80"])),
        _record(8, 4, 1, msgpack.packb(["sow_delete", "u", b"d", {}])),
    ]
    block = block_runs(b"".join(good), 5, 4, "A|HA")
    assert isinstance(block, BlockRuns)
    assert [(pid, cmd, fields, items) for pid, cmd, fields, items in block.runs] == [
        (9, "p", {"mt": "json"}, [(1, "t", b"a"), (2, "t", b"b")]),
        (9, "p", {}, [(3, "u", b"c")]),
        (4, "sow_delete", {}, [(1, "u", b"d")]),
    ]
    assert [r[0] for r in block.records()] == [5, 6, 7, 8]
    assert all(r[6][PATH_FIELD] == "A|HA" for r in block.records())
    data = b"".join(good)
    damaged = bytearray(data)
    damaged[len(good[0]) + 45] ^= 0x01  # inside the second record
    with pytest.raises(ValueError, match="CRC mismatch in record 6"):
        block_runs(bytes(damaged), 5, 4, "A|HA")
    with pytest.raises(ValueError, match="record index 5, expected 6"):
        block_runs(data, 6, 4, "A|HA")
    three = sum(len(r) for r in good[:3])
    with pytest.raises(ValueError, match="cut short at record 8"):
        block_runs(data[: three + 10], 5, 4, "A|HA")
    with pytest.raises(ValueError, match="bad record length 42 at record 7"):
        block_runs(data[: three - 1], 5, 4, "A|HA")
    with pytest.raises(ValueError, match="bytes after the last record"):
        block_runs(data, 5, 3, "A|HA")
    with pytest.raises(ValueError, match="must be bytes"):
        block_runs("text", 5, 4, "A|HA")
    not_a_map = _record(5, 9, 1, b"\x94\xa1p\xa1t\xc4\x01a\x01")  # fields: 1
    with pytest.raises(ValueError, match=r"not a map|wrong type"):
        block_runs(not_a_map, 5, 1, "A|HA")


pair = pytest.mark.integration


@pair
def test_a_sync_pair_replicates_in_blocks_in_order_under_the_same_bookmarks(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, fsync="never")
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.hot_hot(a, b)
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        with HAClient("blk-pub") as pub:
            pub.get_server_chooser().add(a.uri())
            pub.connect_and_logon()
            for n in range(5000):
                pub.publish("orders", json.dumps({"n": n}))
            pub.publish_flush(60_000)  # sync pair: persisted means on B too
        on_a = epoch_replay(a.uri(), "orders")
        wait_for(lambda: len(epoch_replay(b.uri(), "orders")) >= 5000, what="all on B")
        on_b = epoch_replay(b.uri(), "orders")
        assert [json.loads(body)["n"] for _, body in on_b] == list(range(5000))
        assert [bm for bm, _ in on_b] == [bm for bm, _ in on_a]
        status = a.destination_status("B")
        assert status["blocks"] > 0 and status["sent"] == 5000
