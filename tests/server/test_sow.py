"""Tests for ampsclient_server_stub.engine.sow.SowTopic against real SQLite."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ampsclient_server_stub.engine.payload import apply_select, encode, parse_order_by, parse_select
from ampsclient_server_stub.engine.sow import SowRecord, SowTopic

TS = "20261122T180500.123456Z"


def js(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def put(
    sow: SowTopic,
    doc: Any,
    *,
    bm: str = "",
    sow_key: str | None = None,
    expiration: float | None = None,
    cid: str | None = None,
) -> tuple[SowRecord, SowRecord | None]:
    return sow.publish(
        encode(sow.message_type, doc),
        doc=doc,
        sow_key=sow_key,
        bookmark=bm,
        timestamp=TS,
        correlation_id=cid,
        expiration=expiration,
    )


@pytest.fixture
def orders() -> Iterator[SowTopic]:
    sow = SowTopic("orders", keys=["/id"])
    yield sow
    sow.close()


@pytest.fixture(params=["memory", "disk"])
def any_sow(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SowTopic]:
    filename = None if request.param == "memory" else tmp_path / "sow.db"
    sow = SowTopic("orders", keys=["/id"], filename=filename)
    yield sow
    sow.close()


# ----------------------------------------------------------------------------- keys


def test_key_is_stable_across_instances_and_decimal_64_bit(tmp_path: Path) -> None:
    a = SowTopic("orders", keys=["/region", "/id"])
    b = SowTopic("orders", keys=["/region", "/id"], filename=tmp_path / "b.db")
    doc = {"id": 7, "region": "EU", "px": 1.5}
    key = a.compute_key(doc)
    assert key == b.compute_key({"region": "EU", "id": 7, "px": 99})  # only key fields count
    assert key.isdigit() and 0 <= int(key) < 2**64
    # pinned value: the checksum must not change between processes or releases
    assert key == "12790530439359367861"
    a.close()
    b.close()


def test_key_depends_on_domain_values_and_order() -> None:
    orders = SowTopic("orders", keys=["/a", "/b"])
    other = SowTopic("other", keys=["/a", "/b"])
    shared1 = SowTopic("t1", keys=["/a", "/b"], key_domain="D")
    shared2 = SowTopic("t2", keys=["/a", "/b"], key_domain="D")
    doc = {"a": "x", "b": "y"}
    assert orders.compute_key(doc) != other.compute_key(doc)
    assert shared1.compute_key(doc) == shared2.compute_key(doc)
    assert orders.compute_key({"a": "y", "b": "x"}) != orders.compute_key(doc)
    # values cannot run into each other
    assert orders.compute_key({"a": "ab", "b": "c"}) != orders.compute_key({"a": "a", "b": "bc"})
    # nested key paths
    nested = SowTopic("n", keys=["/o/id"])
    assert nested.compute_key({"o": {"id": 1}}) != nested.compute_key({"o": {"id": 2}})
    assert nested.compute_key({"o": {"id": 1}, "x": 1}) == nested.compute_key({"o": {"id": 1}})
    for sow in (orders, other, shared1, shared2, nested):
        sow.close()


def test_user_sow_key_wins_and_is_echoed(orders: SowTopic) -> None:
    assert orders.compute_key({"id": 1}, "my-key==") == "my-key=="
    rec, prev = put(orders, {"id": 1, "v": "a"}, sow_key="abc")
    assert rec.key == "abc" and prev is None
    rec2, prev2 = put(orders, {"id": 999, "v": "b"}, sow_key="abc")
    assert prev2 == rec and rec2.key == "abc" and rec2.seq > rec.seq
    assert len(orders) == 1
    assert orders.doc("abc") == {"id": 999, "v": "b"}


def test_missing_key_field_is_empty_and_warns(
    orders: SowTopic, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ampsclient_server_stub.engine.sow"):
        k1 = orders.compute_key({"other": 1})
    assert "/id" in caplog.text and "missing" in caplog.text
    assert k1 == orders.compute_key({"id": None})
    put(orders, {"x": 1})
    put(orders, {"x": 2})
    assert len(orders) == 1  # both collapse into one record


def test_bad_key_paths_rejected() -> None:
    for keys in (["id"], ["/"], ["/a//b"]):
        with pytest.raises(ValueError):
            SowTopic("t", keys=keys)
    with pytest.raises(TypeError):
        SowTopic("t", keys="/id")


# ----------------------------------------------------------------------------- publish


def test_publish_upsert_returns_previous(any_sow: SowTopic) -> None:
    rec1, prev1 = put(any_sow, {"id": 1, "v": "a"}, bm="1|1|", cid="c1", expiration=5.0)
    assert prev1 is None
    assert rec1.data == b'{"id":1,"v":"a"}'
    assert (rec1.bookmark, rec1.timestamp, rec1.correlation_id, rec1.expiration) == (
        "1|1|",
        TS,
        "c1",
        5.0,
    )
    rec2, prev2 = put(any_sow, {"id": 1, "v": "b"}, bm="1|2|")
    assert prev2 == rec1
    assert rec2.key == rec1.key and rec2.seq > rec1.seq
    assert rec2.correlation_id is None and rec2.expiration is None
    assert any_sow.get(rec1.key) == rec2
    assert any_sow.doc(rec1.key) == {"id": 1, "v": "b"}
    assert len(any_sow) == 1 and rec1.key in any_sow


def test_publish_decodes_doc_when_not_given(orders: SowTopic) -> None:
    rec, _ = orders.publish(
        js({"id": 3, "v": 1}), doc=None, sow_key=None, bookmark="", timestamp=TS
    )
    assert rec.key == orders.compute_key({"id": 3})
    assert orders.doc(rec.key) == {"id": 3, "v": 1}


def test_doc_missing_raises_key_error(orders: SowTopic) -> None:
    with pytest.raises(KeyError):
        orders.doc("nope")
    assert orders.get("nope") is None


def test_binary_topic_uses_sow_key_and_is_not_filterable() -> None:
    sow = SowTopic("bin", keys=[], message_type="binary")
    rec, _ = sow.publish(b"\x00\x01", doc=None, sow_key="k1", bookmark="", timestamp=TS)
    assert rec.data == b"\x00\x01" and sow.doc("k1") is None
    assert [r.key for r in sow.query()[0]] == ["k1"]
    assert sow.query(lambda d: True) == ([], 0)
    sow.close()


# ----------------------------------------------------------------------------- delta


def test_delta_publish_merges_nested_and_replaces_arrays(any_sow: SowTopic) -> None:
    put(
        any_sow,
        {"id": 42, "contents": {"packages": [{"basket": "apples"}], "owner": "me"}, "n": 1},
        bm="1|1|",
    )
    delta = {"id": 42, "contents": {"packages": [{"basket": "eggs"}]}, "m": 2}
    rec, prev, merged = any_sow.delta_publish(
        js(delta), doc=delta, sow_key=None, bookmark="1|2|", timestamp=TS, correlation_id="c"
    )
    expected = {
        "id": 42,
        "contents": {"packages": [{"basket": "eggs"}], "owner": "me"},
        "n": 1,
        "m": 2,
    }
    assert merged == expected
    assert prev is not None and json.loads(prev.data)["contents"]["packages"] == [
        {"basket": "apples"}
    ]
    assert json.loads(rec.data) == expected  # merged full record is stored
    assert rec.bookmark == "1|2|" and rec.correlation_id == "c"
    assert any_sow.doc(rec.key) == expected
    assert any_sow.get(rec.key) == rec


def test_delta_publish_without_record_is_plain_publish(orders: SowTopic) -> None:
    delta = {"id": 5, "v": 1}
    data = b'{"id": 5, "v": 1}'
    rec, prev, merged = orders.delta_publish(
        data, doc=delta, sow_key=None, bookmark="", timestamp=TS
    )
    assert prev is None and merged == delta and rec.data == data


def test_delta_publish_msgpack_reencodes() -> None:
    sow = SowTopic("mp", keys=["/id"], message_type="msgpack")
    put(sow, {"id": 1, "a": 1, "b": b"\x01"})
    delta = {"id": 1, "a": 2}
    rec, _, merged = sow.delta_publish(
        msgpack.packb(delta), doc=delta, sow_key=None, bookmark="", timestamp=TS
    )
    assert merged == {"id": 1, "a": 2, "b": b"\x01"}
    assert msgpack.unpackb(rec.data, raw=False) == merged
    sow.close()


# ----------------------------------------------------------------------------- query


@pytest.fixture
def filled(any_sow: SowTopic) -> SowTopic:
    for i, (name, qty) in enumerate(
        [("b", 5), ("a", 10), ("c", None), ("a", 1), ("d", 7)], start=1
    ):
        doc: dict[str, Any] = {"id": i, "name": name}
        if qty is not None:
            doc["qty"] = qty
        put(any_sow, doc, bm=f"1|{i}|")
    return any_sow


def ids(records: list[SowRecord]) -> list[int]:
    return [json.loads(r.data)["id"] for r in records]


def test_query_all_in_write_order(filled: SowTopic) -> None:
    records, matches = filled.query()
    assert ids(records) == [1, 2, 3, 4, 5] and matches == 5
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    put(filled, {"id": 2, "name": "a", "qty": 11})  # update moves it to the end
    assert ids(filled.query()[0]) == [1, 3, 4, 5, 2]


def test_query_predicate_and_keys(filled: SowTopic) -> None:
    records, matches = filled.query(lambda d: d["name"] == "a")
    assert ids(records) == [2, 4] and matches == 2
    k1, k4, k5 = (filled.compute_key({"id": i}) for i in (1, 4, 5))
    records, matches = filled.query(keys=[k5, k1, "unknown"])
    assert ids(records) == [1, 5] and matches == 2
    records, matches = filled.query(lambda d: d["name"] == "a", keys=[k1, k4])
    assert ids(records) == [4] and matches == 1


def test_query_order_by_top_n_skip_n(filled: SowTopic) -> None:
    ob = parse_order_by("/qty DESC")
    records, matches = filled.query(order_by=ob)
    assert ids(records) == [2, 5, 1, 4, 3] and matches == 5  # absent qty last for DESC
    records, matches = filled.query(order_by=ob, top_n=2)
    assert ids(records) == [2, 5] and matches == 5
    records, matches = filled.query(order_by=ob, top_n=2, skip_n=2)
    assert ids(records) == [1, 4] and matches == 5
    records, matches = filled.query(order_by=ob, top_n=2, skip_n=4)
    assert ids(records) == [3] and matches == 5
    assert filled.query(top_n=0) == ([], 5)  # the documented way to count
    assert filled.query(skip_n=10) == ([], 5)
    records, matches = filled.query(order_by=parse_order_by("/name, /id DESC"))
    assert ids(records) == [4, 2, 1, 3, 5]
    with pytest.raises(ValueError):
        filled.query(top_n=-1)
    with pytest.raises(ValueError):
        filled.query(skip_n=-1)


def test_query_with_select_projection(filled: SowTopic) -> None:
    records, _ = filled.query(lambda d: d["id"] == 2)
    sel = parse_select("[-/,+/name]")
    assert [apply_select(filled.doc(r.key), sel) for r in records] == [{"name": "a"}]


def test_recovery_point_adapter_flow() -> None:
    """The /ADMIN/bookmark_store topic keyed by /clientName,/subId (protocol.md 8.1)."""
    sow = SowTopic("/ADMIN/bookmark_store", keys=["/clientName", "/subId"])
    for client, sub, bm in [
        ("tracked", "bsub", "1|1|"),
        ("other", "bsub", "2|1|"),
        ("tracked", "bsub", "1|101|"),  # update of the first record
        ("tracked", "s2", "1|5|"),
    ]:
        put(sow, {"clientName": client, "subId": sub, "bookmark": bm})
    assert len(sow) == 3
    records, matches = sow.query(lambda d: d["clientName"] == "tracked")
    sel = parse_select("[-/,+/subId,+/bookmark]")
    out = [encode("json", apply_select(sow.doc(r.key), sel)) for r in records]
    assert out == [b'{"subId":"bsub","bookmark":"1|101|"}', b'{"subId":"s2","bookmark":"1|5|"}']
    assert matches == 2
    deleted = sow.delete(lambda d: d["clientName"] == "tracked" and d["subId"] == "bsub")
    assert [sow_doc["subId"] for sow_doc in (json.loads(r.data) for r in deleted)] == ["bsub"]
    assert len(sow) == 2
    sow.close()


# ----------------------------------------------------------------------------- delete


def test_delete_by_predicate(filled: SowTopic) -> None:
    deleted = filled.delete(lambda d: d["name"] == "a")
    assert ids(deleted) == [2, 4]
    assert ids(filled.query()[0]) == [1, 3, 5]
    assert filled.delete(lambda d: d["name"] == "zzz") == []


def test_delete_by_keys_and_data(filled: SowTopic) -> None:
    k1, k3 = filled.compute_key({"id": 1}), filled.compute_key({"id": 3})
    assert ids(filled.delete(keys=[k3, k1, "missing"])) == [1, 3]
    assert ids(filled.delete(data_doc={"id": 5, "name": "whatever"})) == [5]
    assert ids(filled.delete(data_doc={"id": 5})) == []
    # criteria combine with AND
    k2 = filled.compute_key({"id": 2})
    assert filled.delete(lambda d: d["name"] == "nope", keys=[k2]) == []
    assert filled.delete(keys=[k2], data_doc={"id": 4}) == []
    assert ids(filled.query()[0]) == [2, 4]
    assert len(filled) == 2
    assert ids(filled.delete()) == [2, 4]  # no criteria = everything (filter 1=1)
    assert len(filled) == 0 and filled.query() == ([], 0)


def test_delete_by_sow_key(orders: SowTopic) -> None:
    put(orders, {"id": 1}, sow_key="user-1")
    put(orders, {"id": 2}, sow_key="user-2")
    deleted = orders.delete(sow_key="user-1")
    assert [r.key for r in deleted] == ["user-1"]
    assert list(orders) == ["user-2"]


def test_bulk_delete_spanning_chunks_persists(tmp_path: Path) -> None:
    sow = SowTopic("bulk", keys=["/id"], filename=tmp_path / "bulk.db")
    for i in range(1200):  # more than one IN (...) chunk
        put(sow, {"id": i, "even": i % 2 == 0})
    deleted = sow.delete(lambda d: d["even"])
    assert len(deleted) == 600 and len(sow) == 600
    sow.close()
    with SowTopic("bulk", keys=["/id"], filename=tmp_path / "bulk.db") as again:
        assert len(again) == 600
        assert all(not again.doc(k)["even"] for k in again)


# ----------------------------------------------------------------------------- expiration


def test_expire(any_sow: SowTopic) -> None:
    put(any_sow, {"id": 1}, expiration=100.0)
    put(any_sow, {"id": 2})
    put(any_sow, {"id": 3}, expiration=200.0)
    put(any_sow, {"id": 4}, expiration=150.5)
    assert any_sow.expire(99.9) == []
    expired = any_sow.expire(150.5)
    assert ids(expired) == [1, 4]
    assert [r.expiration for r in expired] == [100.0, 150.5]
    assert ids(any_sow.query()[0]) == [2, 3]
    assert ids(any_sow.expire(1e12)) == [3]
    assert len(any_sow) == 1
    # republishing without expiration clears it
    put(any_sow, {"id": 2}, expiration=10.0)
    put(any_sow, {"id": 2})
    assert any_sow.expire(1e12) == []


# ----------------------------------------------------------------------------- persistence


def test_state_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "orders.db"
    sow = SowTopic("orders", keys=["/id"], filename=path)
    put(sow, {"id": 1, "v": "a"}, bm="1|1|", cid="c1", expiration=123.0)
    put(sow, {"id": 2, "v": "b"}, bm="1|2|")
    last, _ = put(sow, {"id": 1, "v": "a2"}, bm="1|3|")
    before = sow.query()[0]
    sow.close()
    assert sow.closed
    sow.close()  # idempotent
    with pytest.raises(RuntimeError):
        sow.query()

    reopened = SowTopic("orders", keys=["/id"], filename=path)
    after, matches = reopened.query()
    assert after == before and matches == 2
    assert reopened.doc(last.key) == {"id": 1, "v": "a2"}
    assert reopened.query(lambda d: d["v"] == "b")[1] == 1
    # the write counter continues after the stored maximum
    new, prev = put(reopened, {"id": 3})
    assert prev is None and new.seq > last.seq
    reopened.close()

    # on-disk format: WAL journal, one table with the documented columns
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        (table,) = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            if r[0].startswith("sow_")
        ]
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        assert cols == [
            "k",
            "data",
            "bookmark",
            "timestamp",
            "correlation_id",
            "expiration",
            "seq",
        ]
        assert conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == 3
    finally:
        conn.close()


def test_two_topics_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with SowTopic("a/b", keys=["/id"], filename=path) as t1:
        put(t1, {"id": 1})
    with SowTopic("a_b", keys=["/id"], filename=path) as t2:
        put(t2, {"id": 1})
        put(t2, {"id": 2})
    with SowTopic("a/b", keys=["/id"], filename=path) as t1:
        assert len(t1) == 1
    with SowTopic("a_b", keys=["/id"], filename=path) as t2:
        assert len(t2) == 2


def test_memory_topics_are_independent() -> None:
    with SowTopic("m", keys=["/id"]) as one, SowTopic("m", keys=["/id"]) as two:
        put(one, {"id": 1})
        assert len(one) == 1 and len(two) == 0
        assert "records=1" in repr(one)
