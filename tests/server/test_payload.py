"""Tests for ampsclient_server_stub.engine.payload (codecs, merge, select, order_by, options)."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from ampsclient_server_stub.engine.payload import (
    OrderBy,
    OrderByError,
    OrderField,
    SelectDirective,
    SelectError,
    apply_select,
    decode,
    delta_merge,
    encode,
    is_parseable,
    lookup_path,
    parse_options,
    parse_order_by,
    parse_path,
    parse_select,
)

# ----------------------------------------------------------------------------- codecs


def test_decode_json() -> None:
    assert decode("json", b'{"a":1,"b":[1,2],"c":{"d":"x"}}') == {
        "a": 1,
        "b": [1, 2],
        "c": {"d": "x"},
    }


def test_decode_message_type_is_case_insensitive() -> None:
    assert decode("JSON", b"[1]") == [1]
    assert decode("MsgPack", msgpack.packb({"a": 1})) == {"a": 1}


def test_encode_json_is_compact() -> None:
    assert encode("json", {"a": 1, "b": [1, 2], "c": "x y"}) == b'{"a":1,"b":[1,2],"c":"x y"}'


@pytest.mark.parametrize(
    "doc",
    [
        {"id": 1, "name": "n\u00e9", "nested": {"list": [1, 2.5, None, True]}},
        [1, "two", {"three": 3}],
        "plain",
        42,
        None,
    ],
)
@pytest.mark.parametrize("mtype", ["json", "msgpack"])
def test_round_trip(mtype: str, doc: Any) -> None:
    data = encode(mtype, doc)
    assert isinstance(data, bytes)
    assert decode(mtype, data) == doc


def test_msgpack_bytes_values_round_trip() -> None:
    doc = {"blob": b"\x00\x01\xff", "s": "text"}
    data = encode("msgpack", doc)
    assert data == msgpack.packb(doc, use_bin_type=True)
    assert decode("msgpack", data) == doc


@pytest.mark.parametrize(
    ("mtype", "data"),
    [
        ("json", b"{not json"),
        ("json", b'{"a":1'),
        ("json", b"\xff\xfe\x00garbage"),
        ("json", b""),
        ("json", b'{"a":1} trailing'),
        ("msgpack", b"\xc1"),  # never-used msgpack byte
        ("msgpack", b"\x92\x01"),  # array of 2 with one element: truncated
        ("msgpack", msgpack.packb({"a": 1}) + b"\x01"),  # extra data
        ("msgpack", b""),
        ("msgpack", msgpack.packb({1: "int key"})),  # strict_map_key rejects non-str keys
    ],
)
def test_malformed_payload_decodes_to_none(mtype: str, data: bytes) -> None:
    assert decode(mtype, data) is None


@pytest.mark.parametrize("mtype", ["binary", "bflat"])
def test_opaque_types_are_not_parseable(mtype: str) -> None:
    assert not is_parseable(mtype)
    assert decode(mtype, b'{"a":1}') is None
    assert encode(mtype, b"raw bytes") == b"raw bytes"
    with pytest.raises(ValueError):
        encode(mtype, {"a": 1})


def test_encode_unserialisable_raises_value_error() -> None:
    with pytest.raises(ValueError):
        encode("json", {"a": object()})
    assert is_parseable("json") and is_parseable("msgpack")
    assert is_parseable("fix") and is_parseable("NVFIX")  # tests/server/test_fix_types.py
    assert is_parseable("xml") and is_parseable("BSON")  # tests/server/test_xml_bson_types.py


@settings(max_examples=50, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=10,
    )
)
def test_round_trip_property(doc: Any) -> None:
    for mtype in ("json", "msgpack"):
        assert decode(mtype, encode(mtype, doc)) == doc


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=32))
def test_decode_never_raises(data: bytes) -> None:
    for mtype in ("json", "msgpack", "binary"):
        decode(mtype, data)  # must not raise; value irrelevant


# ----------------------------------------------------------------------------- paths


def test_parse_path() -> None:
    assert parse_path("/") == ()
    assert parse_path("/a") == ("a",)
    assert parse_path("/a/b/c") == ("a", "b", "c")
    for bad in ("a", "", "/a//b", "/a/"):
        with pytest.raises(ValueError):
            parse_path(bad)


def test_lookup_path() -> None:
    doc = {"a": {"b": {"c": 3}}, "x": 0, "n": None}
    assert lookup_path(doc, "/a/b/c") == 3
    assert lookup_path(doc, "/a/b") == {"c": 3}
    assert lookup_path(doc, "/x") == 0
    assert lookup_path(doc, "/missing") is None
    assert lookup_path(doc, "/x/deeper") is None
    assert lookup_path(None, "/a") is None


# ----------------------------------------------------------------------------- delta merge


def test_delta_merge_overwrites_adds_and_keeps() -> None:
    old = {"id": 1, "price": 10, "qty": 5}
    merged = delta_merge(old, {"id": 1, "price": 11, "side": "buy"})
    assert merged == {"id": 1, "price": 11, "qty": 5, "side": "buy"}
    assert list(merged) == ["id", "price", "qty", "side"]
    assert old == {"id": 1, "price": 10, "qty": 5}  # not mutated


def test_delta_merge_nested_objects_merge_and_arrays_replace() -> None:
    old: dict[str, Any] = {
        "id": 42,
        "contents": {
            "packages": [{"basket": "apples"}, {"basket": "pears"}],
            "owner": "me",
            "meta": {"a": 1, "b": 2},
        },
    }
    delta = {"id": 42, "contents": {"packages": [{"basket": "eggs"}], "meta": {"b": 3}}}
    merged = delta_merge(old, delta)
    assert merged == {
        "id": 42,
        "contents": {
            "packages": [{"basket": "eggs"}],  # array replaced whole
            "owner": "me",  # sibling survives
            "meta": {"a": 1, "b": 3},  # recursive merge
        },
    }
    assert old["contents"]["meta"] == {"a": 1, "b": 2}


def test_delta_merge_null_is_stored_and_type_changes_replace() -> None:
    assert delta_merge({"a": 1, "b": 2}, {"a": None}) == {"a": None, "b": 2}
    assert delta_merge({"a": {"x": 1}}, {"a": 5}) == {"a": 5}
    assert delta_merge({"a": 5}, {"a": {"x": 1}}) == {"a": {"x": 1}}
    assert delta_merge(None, {"a": 1}) == {"a": 1}
    assert delta_merge([1, 2], [3]) == [3]


# ----------------------------------------------------------------------------- select


def test_select_recovery_adapter_projection_exact_order() -> None:
    doc = {"clientName": "tracked", "subId": "bsub", "bookmark": "10620414156524534001|101|"}
    out = apply_select(doc, parse_select("[-/,+/subId,+/bookmark]"))
    assert out == {"subId": "bsub", "bookmark": "10620414156524534001|101|"}
    assert list(out) == ["subId", "bookmark"]
    assert encode("json", out) == b'{"subId":"bsub","bookmark":"10620414156524534001|101|"}'
    # the positional reader takes first string = subId, second = bookmark
    assert list(out.values()) == ["bsub", "10620414156524534001|101|"]
    assert doc == {
        "clientName": "tracked",
        "subId": "bsub",
        "bookmark": "10620414156524534001|101|",
    }


def test_select_output_follows_source_order_not_directive_order() -> None:
    doc = {"a": 1, "b": 2, "c": 3}
    out = apply_select(doc, parse_select("[-/,+/c,+/a]"))
    assert list(out.items()) == [("a", 1), ("c", 3)]


def test_select_parse() -> None:
    sel = parse_select("[-/, +/event_id ,+/a/b]")
    assert sel.directives == (
        SelectDirective(False, ()),
        SelectDirective(True, ("event_id",)),
        SelectDirective(True, ("a", "b")),
    )
    assert str(sel) == "[-/,+/event_id,+/a/b]"
    assert parse_select("-/x").directives == (SelectDirective(False, ("x",)),)
    for bad in ("[]", "", "[/a]", "[+a]", "[-/a//b]", "[+/a", "*/a"):
        with pytest.raises(SelectError):
            parse_select(bad)
    assert issubclass(SelectError, ValueError)


def test_select_remove_fields_and_nested_paths() -> None:
    doc = {"id": 1, "x": {"y": 1, "z": 2, "w": {"deep": 1, "keep": 2}}, "tail": True}
    assert apply_select(doc, parse_select("[-/x/z,-/x/w/deep]")) == {
        "id": 1,
        "x": {"y": 1, "w": {"keep": 2}},
        "tail": True,
    }
    assert apply_select(doc, parse_select("[-/,+/x/w/keep,+/id]")) == {
        "id": 1,
        "x": {"w": {"keep": 2}},
    }
    assert apply_select(doc, parse_select("[-/x]")) == {"id": 1, "tail": True}
    # source untouched by nested removals
    assert doc["x"] == {"y": 1, "z": 2, "w": {"deep": 1, "keep": 2}}


def test_select_left_to_right() -> None:
    doc = {"a": 1, "b": 2, "c": {"d": 1, "e": 2}}
    assert apply_select(doc, parse_select("[+/a,-/]")) == {}
    assert apply_select(doc, parse_select("[-/,+/c,-/c/d]")) == {"c": {"e": 2}}
    assert apply_select(doc, parse_select("[-/c/d,+/c/d]")) == doc
    assert list(apply_select(doc, parse_select("[-/a,+/a]"))) == ["a", "b", "c"]
    assert apply_select(doc, parse_select("[-/,+/]")) == doc


def test_select_missing_paths_and_non_objects() -> None:
    doc = {"a": 1, "n": None, "s": "str"}
    assert apply_select(doc, parse_select("[-/,+/missing,+/s/x,+/n]")) == {"n": None}
    assert apply_select(doc, parse_select("[-/missing/deeper,-/s/x]")) == doc
    sel = parse_select("[-/,+/a]")
    assert apply_select(None, sel) is None
    assert apply_select([1, 2], sel) == [1, 2]
    assert sel.apply(doc) == {"a": 1}


# ----------------------------------------------------------------------------- order_by


def test_parse_order_by() -> None:
    ob = parse_order_by("/orderDate DESC, /customerName ASC,/a/b text desc, /z")
    assert ob.fields == (
        OrderField("/orderDate", descending=True),
        OrderField("/customerName"),
        OrderField("/a/b", descending=True, text=True),
        OrderField("/z"),
    )
    assert str(parse_order_by("/x desc")) == "/x DESC"


@pytest.mark.parametrize(
    "bad",
    ["", "   ", "/a,", ",/a", "a ASC", "/", "/a ASC DESC", "/a UP", "/a TEXT TEXT", "/a//b"],
)
def test_parse_order_by_errors(bad: str) -> None:
    with pytest.raises(OrderByError):
        parse_order_by(bad)
    assert issubclass(OrderByError, ValueError)


def _sorted(docs: list[Any], spec: str) -> list[Any]:
    ob = parse_order_by(spec)
    return sorted(docs, key=ob.key)


def test_order_by_mixed_types_none_first_for_asc() -> None:
    docs: list[Any] = [
        {"v": "b"},
        {"v": 10},
        {},
        {"v": 2.5},
        {"v": "a"},
        {"v": None},
        {"v": True},
        {"v": [1]},
    ]
    asc = [d.get("v", "<absent>") for d in _sorted(docs, "/v")]
    assert asc == ["<absent>", None, True, 2.5, 10, "a", "b", [1]]
    desc = [d.get("v", "<absent>") for d in _sorted(docs, "/v DESC")]
    assert desc == [[1], "b", "a", 10, 2.5, True, "<absent>", None]  # ties keep input order


def test_order_by_text_compares_string_form() -> None:
    docs = [{"v": 10}, {"v": 9}, {"v": 100}]
    assert [d["v"] for d in _sorted(docs, "/v")] == [9, 10, 100]
    assert [d["v"] for d in _sorted(docs, "/v TEXT")] == [10, 100, 9]
    assert [d["v"] for d in _sorted(docs, "/v DESC TEXT")] == [9, 100, 10]


def test_order_by_compound_and_nested() -> None:
    docs = [
        {"d": {"day": 1}, "name": "b"},
        {"d": {"day": 2}, "name": "a"},
        {"d": {"day": 1}, "name": "a"},
        {"d": {"day": 2}, "name": "c"},
    ]
    out = _sorted(docs, "/d/day DESC, /name ASC")
    assert [(d["d"]["day"], d["name"]) for d in out] == [(2, "a"), (2, "c"), (1, "a"), (1, "b")]
    assert isinstance(parse_order_by("/a"), OrderBy)
    assert _sorted([None, {"v": 1}], "/v") == [None, {"v": 1}]


# ----------------------------------------------------------------------------- options


def test_parse_options_bracketed_values_do_not_split() -> None:
    opts = parse_options("oof,select=[-/,+/subId,+/bookmark],top_n=5,conflation=1s")
    assert opts == {
        "oof": "",
        "select": "[-/,+/subId,+/bookmark]",
        "top_n": "5",
        "conflation": "1s",
    }
    assert list(opts) == ["oof", "select", "top_n", "conflation"]
    sel = parse_select(opts["select"])
    assert [str(d) for d in sel.directives] == ["-/", "+/subId", "+/bookmark"]


def test_parse_options_whitespace_empty_and_repeats() -> None:
    assert parse_options("") == {}
    assert parse_options(" , ,") == {}
    assert parse_options(" replace , top_n = 3 ,skip_n=6, ") == {
        "replace": "",
        "top_n": "3",
        "skip_n": "6",
    }
    assert parse_options("top_n=1,top_n=2") == {"top_n": "2"}
    assert parse_options("projection=[SUM(/q) AS /q,/id],grouping=[/id]") == {
        "projection": "[SUM(/q) AS /q,/id]",
        "grouping": "[/id]",
    }
    assert parse_options("TIMESTAMP,bookmark_not_found=now") == {
        "timestamp": "",
        "bookmark_not_found": "now",
    }
    assert parse_options("a=b=c") == {"a": "b=c"}


def test_parse_options_real_recovery_adapter_header() -> None:
    header = json.loads(
        '{"c":"sow","t":"/ADMIN/bookmark_store","filter":"/clientName=\'tracked\'",'
        '"o":"select=[-/,+/subId,+/bookmark]"}'
    )
    assert parse_options(header["o"]) == {"select": "[-/,+/subId,+/bookmark]"}
