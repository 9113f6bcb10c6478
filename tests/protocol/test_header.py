"""Golden bytes for the header codec (:mod:`ampsclient.protocol.header`), in both directions,
and its reader's answer to malformed bytes. The byte strings are the ones captured from the
official clients in shared/protocol.md.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient.exceptions import MalformedFrameError
from ampsclient.protocol import decode_header, encode_header

# (fields, exact bytes) — the writer's output is canonical
HEADER_CASES = [
    (
        {
            "c": "logon",
            "cid": "auto0",
            "client_name": "demo-client",
            "mt": "json",
            "a": "processed",
            "version": "5.3.5.14.c6e65cc.784022:python",
        },
        b'{"c":"logon","cid":"auto0","client_name":"demo-client","mt":"json","a":"processed",'
        b'"version":"5.3.5.14.c6e65cc.784022:python"}',
    ),
    ({"c": "p", "t": "topicA"}, b'{"c":"p","t":"topicA"}'),
    # s is a bare integer and is never the last key (the JS client reads "s":(\d+),)
    (
        {"c": "ack", "a": "persisted", "status": "success", "s": 1795334494549000001},
        b'{"c":"ack","s":1795334494549000001,"a":"persisted","status":"success"}',
    ),
    (
        {"c": "sow", "t": "x", "query_id": "q", "bs": 2},
        b'{"c":"sow","t":"x","query_id":"q","bs":2}',
    ),
    # only " and \ are escaped; control characters and UTF-8 stay raw
    ({"c": "p", "t": 'a"b\\c\td\u00e9'}, b'{"c":"p","t":"a\\"b\\\\c\td\xc3\xa9"}'),
    ({"c": "heartbeat", "o": "beat", "x": None}, b'{"c":"heartbeat","o":"beat"}'),
]


@pytest.mark.parametrize(("fields", "raw"), HEADER_CASES)
def test_header_golden_both_ways(fields: dict[str, object], raw: bytes) -> None:
    assert encode_header(fields) == raw
    decoded, end = decode_header(raw + b"BODY")
    assert end == len(raw)
    expected = {k: v for k, v in fields.items() if v is not None}
    assert decoded == expected


def test_header_reader_is_lenient() -> None:
    raw = (
        b'{ "c" : "publish", "bookmark":"1|2|", "batch_size": 10, "f":"/x>1",'
        b' "t":"a\tb", "cmd_id":"7", "flag":true}{"x":1}'
    )
    header, end = decode_header(raw)
    assert header == {
        "c": "p",
        "bm": "1|2|",
        "bs": 10,
        "filter": "/x>1",
        "t": "a\tb",
        "cid": "7",
        "flag": True,
    }
    assert raw[end:] == b'{"x":1}'


def test_header_reader_long_header_beyond_probe() -> None:
    long_topic = "t" * 5000
    raw = encode_header({"c": "p", "t": long_topic}) + b"body"
    header, end = decode_header(raw)
    assert header["t"] == long_topic
    assert raw[end:] == b"body"


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b'{"c":"p"', b"[1,2]", b'{"c":{"x":1}}', b'{"c":[1]}', b"nonsense", b'"str"'],
)
def test_header_reader_rejects_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        decode_header(raw)


@given(st.binary(max_size=200))
@settings(max_examples=400, deadline=None)
def test_header_reader_fuzz_only_typed_errors(raw: bytes) -> None:
    try:
        header, end = decode_header(raw)
    except MalformedFrameError:
        return
    assert isinstance(header, dict)
    assert 0 < end <= len(raw)


@given(
    st.dictionaries(
        st.sampled_from(["c", "t", "cid", "sub_id", "bm", "o", "x", "filter", "s", "bs"]),
        st.one_of(st.text(max_size=30), st.integers(min_value=0, max_value=2**63)),
        min_size=1,
    )
)
@settings(max_examples=300, deadline=None)
def test_header_round_trip(fields: dict[str, object]) -> None:
    raw = encode_header(fields)
    assert b" " not in raw.replace(b'" "', b"") or any(
        isinstance(v, str) and " " in v for v in fields.values()
    )
    decoded, end = decode_header(raw)
    assert end == len(raw)
    assert decoded == fields
    if "s" in fields and len(fields) > 1:
        assert not raw.endswith(b"," + b'"s":' + str(fields["s"]).encode() + b"}")
