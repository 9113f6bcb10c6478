"""Hash indexes of a SOW store (``engine.sow_index``, AMPS User Guide "Indexing SOW Topics"):
kept current through publish, delta_publish, delete, expiration, a rolled-back batch and a
restart (real SQLite files), and a query that an index answers gives the same records in the
same order as the scan of a store without the index, record by record."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.sow import SowTopic
from ampsclient_server_stub.engine.sow_index import HashIndex, equality_plan

INDEXES = (("/region", "/kind"), ("/code",), ("/a/b",))

# (filter, the fields of the index that answers it, or None: the records are scanned)
QUERIES: list[tuple[str, tuple[str, ...] | None]] = [
    ("/region = 'east' AND /kind = 'a'", ("/region", "/kind")),
    ("/kind = 'a' AND /region = 'east'", ("/region", "/kind")),
    ("'east' = /region AND 'b' = /kind", ("/region", "/kind")),
    ("(/region = 'west') AND (/kind = 'b')", ("/region", "/kind")),
    ("/region = 'east' AND (/kind = 'a' AND /region = 'east')", None),  # a field twice
    ("/region IN ('east', 'west') AND /kind = 'b'", ("/region", "/kind")),
    ("/region IN ('5', '07') AND /kind IN ('a', 'b', 'c')", ("/region", "/kind")),
    ("/region = '5' AND /kind = 'a'", ("/region", "/kind")),
    ("/region = '5.0' AND /kind = 'a'", ("/region", "/kind")),
    ("/region = '' AND /kind = 'a'", None),  # '' is NULL here, not a string
    ("/region = 'nowhere' AND /kind = 'a'", ("/region", "/kind")),
    ("/region = 5 AND /kind = 'a'", None),  # a numeric literal
    ("/region IN ('east', 5) AND /kind = 'a'", None),
    ("/region = 'east' AND /kind = 'a' AND /n > 3", None),  # an extra condition
    ("/region = 'east'", None),  # not every field of the index
    ("/region = 'east' OR /kind = 'a'", None),
    ("/region != 'east' AND /kind = 'a'", None),
    ("/region LIKE 'ea' AND /kind = 'a'", None),
    ("/region NOT IN ('east') AND /kind = 'a'", None),
    ("/region = /kind AND /kind = 'a'", None),
    ("/code = 'X1'", ("/code",)),
    ("/code = '1'", ("/code",)),
    ("/code = 'true'", ("/code",)),
    ("/code IN ('X1', '7', '1.0', 'tags')", ("/code",)),
    ("/code = 1", None),
    ("/code IS NULL", None),
    ("/a/b = 'q'", ("/a/b",)),
    ("/id = '3'", ("/id",)),  # the automatic index over the SOW key
]

REGIONS: list[Any] = ["east", "west", "5", 5, 5.0, "5.0", "07", 7, "", None, ["east", "x"], "EAST"]
KINDS: list[Any] = ["a", "b", "c", None, ["a", "b"], 1]
CODES: list[Any] = ["X1", "x1", 1, True, False, "1", 1.0, "7", ["tags", 7], {"o": 1}, None, ""]


def _doc(rng: random.Random, ident: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": ident, "n": rng.randrange(10)}
    for name, values in (("region", REGIONS), ("kind", KINDS), ("code", CODES)):
        value = rng.choice(values)
        if value is not None or rng.random() < 0.5:  # None: null or missing
            doc[name] = value
    if rng.random() < 0.5:
        doc["a"] = {"b": rng.choice(["q", "r", 3])}
    return doc


def _open(path: Path, name: str, *, indexed: bool) -> SowTopic:
    return SowTopic(
        name,
        keys=("/id",),
        filename=path / f"{name}.sqlite",
        key_domain="same",  # equal keys in both stores
        hash_indexes=INDEXES if indexed else (),
    )


def _index(sow: SowTopic, fields: tuple[str, ...]) -> HashIndex:
    return next(i for i in sow.hash_indexes if i.paths == fields)


def _compare(indexed: SowTopic, plain: SowTopic) -> None:
    for text, fields in QUERIES:
        predicate = compile_filter(text)
        before = {i.paths: i.queries for i in indexed.hash_indexes}
        got, got_matches = indexed.query(predicate, filter_text=text)
        want, want_matches = plain.query(predicate)  # no filter text: always a scan
        assert [(r.key, r.data) for r in got] == [(r.key, r.data) for r in want], text
        assert got_matches == want_matches, text
        after = {i.paths: i.queries for i in indexed.hash_indexes}
        used = [paths for paths in after if after[paths] != before[paths]]
        assert used == ([] if fields is None else [fields]), text
        # restricted to sow_keys, paged: through the index too
        some = list(plain)[::3]
        got, _ = indexed.query(predicate, keys=some, filter_text=text)
        assert [r.key for r in got] == [r.key for r in plain.query(predicate, keys=some)[0]]
        got, _ = indexed.query(predicate, filter_text=text, order_by=None, top_n=3, skip_n=1)
        want, _ = plain.query(predicate, top_n=3, skip_n=1)
        assert [r.key for r in got] == [r.key for r in want], text


def _publish(
    sow: SowTopic, doc: dict[str, Any], *, delta: bool = False, exp: float | None = None
) -> None:
    data = json.dumps(doc).encode()
    write = sow.delta_publish if delta else sow.publish
    write(data, doc=doc, sow_key=None, bookmark="", timestamp="", expiration=exp)


def test_the_same_records_with_and_without_the_index_through_every_change(tmp_path: Path) -> None:
    rng = random.Random(30)
    indexed = _open(tmp_path, "indexed", indexed=True)
    plain = _open(tmp_path, "plain", indexed=False)
    try:
        for ident in range(300):
            doc = _doc(rng, ident % 200)  # 100 replacements
            for sow in (indexed, plain):
                _publish(sow, doc)
        _compare(indexed, plain)
        for ident in range(0, 200, 3):  # delta: the merged record is re-indexed
            delta = {"id": ident, "region": rng.choice(REGIONS[:4]), "kind": "b"}
            for sow in (indexed, plain):
                _publish(sow, delta, delta=True)
        for sow in (indexed, plain):
            sow.delete(compile_filter("/n = 4"))
            sow.delete(keys=[str(k) for k in list(sow)[:5]])
        _compare(indexed, plain)
        for ident in range(200, 230):  # expiration
            doc = _doc(rng, ident) | {"region": "east", "kind": "a"}
            for sow in (indexed, plain):
                _publish(sow, doc, exp=100.0)
        _compare(indexed, plain)
        assert [r.key for r in indexed.expire(200.0)] == [r.key for r in plain.expire(200.0)]
        _compare(indexed, plain)
        with pytest.raises(RuntimeError), indexed.batch():  # a rolled-back batch
            _publish(indexed, {"id": 999, "region": "east", "kind": "a"})
            raise RuntimeError("roll back")
        _compare(indexed, plain)
    finally:
        indexed.close()
        plain.close()
    indexed = _open(tmp_path, "indexed", indexed=True)  # a restart rebuilds the index
    plain = _open(tmp_path, "plain", indexed=False)
    try:
        assert len(_index(indexed, ("/region", "/kind"))) > 0
        _compare(indexed, plain)
    finally:
        indexed.close()
        plain.close()


def test_a_lookup_reads_only_its_bucket(tmp_path: Path) -> None:
    sow = SowTopic("big", keys=("/id",), hash_indexes=[("/code",)])
    try:
        for n in range(2000):
            doc = {"id": n, "code": f"c{n}"}
            _publish(sow, doc)
        index = _index(sow, ("/code",))
        plan = equality_plan("/code IN ('c7', 'c1999', 'none')")
        assert plan is not None
        assert index.candidates(plan) == [sow.compute_key({"id": 7}), sow.compute_key({"id": 1999})]
    finally:
        sow.close()


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ((), "a hash index needs at least one <Key>"),
        (("/a", "/a"), "a hash index names a field twice"),
        (("a b",), "invalid XPath 'a b'"),
    ],
)
def test_a_bad_index_is_refused_naming_it(paths: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SowTopic("t", keys=("/id",), hash_indexes=[paths])
