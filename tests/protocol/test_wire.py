"""Golden bytes for the header codec and both framers, in both directions.

Every framing case is also fed one byte at a time. The byte strings are the ones captured from
the official clients in shared/protocol.md.
"""

from __future__ import annotations

import ast
import pathlib
import struct

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient.exceptions import FrameTooLargeError, MalformedFrameError, ProtocolError
from ampsclient.protocol import (
    AckType,
    Message,
    TcpFramer,
    WsClientFramer,
    WsServerFramer,
    body_offset,
    decode_header,
    encode_header,
    encode_ws_from_client,
    encode_ws_from_server,
    find_sids,
    format_ack_types,
    parse_ack_types,
    split_sow_batch,
    tcp_frame,
)

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


# ------------------------------------------------------------------------- TCP framing

PUBLISH = b'{"c":"p","t":"topicA"}{"x":1}'
LOGON = HEADER_CASES[0][1]
TCP_CASES = [
    ([PUBLISH], b"\x00\x00\x00\x1d" + PUBLISH),
    # protocol.md prints this capture with a 127-byte prefix; the payload shown is 126 bytes
    ([LOGON], b"\x00\x00\x00\x7e" + LOGON),
    ([PUBLISH, LOGON], b"\x00\x00\x00\x1d" + PUBLISH + b"\x00\x00\x00\x7e" + LOGON),
    ([b""], b"\x00\x00\x00\x00"),
]


@pytest.mark.parametrize(("payloads", "raw"), TCP_CASES)
def test_tcp_framing_golden(payloads: list[bytes], raw: bytes) -> None:
    assert b"".join(tcp_frame(p) for p in payloads) == raw
    whole = TcpFramer()
    whole.receive_data(raw)
    assert whole.frames() == payloads
    assert whole.buffered == 0
    # one byte at a time
    framer = TcpFramer()
    got: list[bytes] = []
    for i in range(len(raw)):
        framer.receive_data(raw[i : i + 1])
        got.extend(framer.frames())
    assert got == payloads
    assert framer.buffered == 0


def test_tcp_framer_rejects_oversized_before_buffering() -> None:
    framer = TcpFramer(max_frame_size=100)
    with pytest.raises(FrameTooLargeError):
        framer.receive_data(struct.pack(">I", 101))
    framer = TcpFramer(max_frame_size=100)
    framer.receive_data(struct.pack(">I", 100) + b"x" * 100)
    assert framer.frames() == [b"x" * 100]
    # a length prefix split across reads is checked as soon as its fourth byte arrives
    framer = TcpFramer(max_frame_size=100)
    framer.receive_data(tcp_frame(b"ok") + struct.pack(">I", 101)[:2])
    assert framer.frames() == [b"ok"]
    with pytest.raises(FrameTooLargeError):
        framer.receive_data(struct.pack(">I", 101)[2:])


def test_tcp_framer_large_frame_in_many_pieces_of_any_buffer_type() -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    raw = tcp_frame(b"a") + tcp_frame(big) + tcp_frame(b"z")
    framer = TcpFramer()
    got: list[bytes] = []
    kinds = (bytes, bytearray, memoryview)
    for i, pos in enumerate(range(0, len(raw), 4093)):
        framer.receive_data(kinds[i % 3](raw[pos : pos + 4093]))
        got.extend(framer.frames())
        assert framer.buffered < 4 + len(big)
    assert got == [b"a", big, b"z"]
    assert all(type(p) is bytes for p in got)
    assert framer.buffered == 0


@given(st.lists(st.binary(max_size=50), max_size=8), st.data())
@settings(max_examples=200, deadline=None)
def test_tcp_framer_any_chunking(payloads: list[bytes], data: st.DataObject) -> None:
    raw = b"".join(tcp_frame(p) for p in payloads)
    framer = TcpFramer()
    got: list[bytes] = []
    pos = 0
    while pos < len(raw):
        n = data.draw(st.integers(min_value=1, max_value=len(raw) - pos))
        framer.receive_data(raw[pos : pos + n])
        got.extend(framer.frames())
        pos += n
    assert got == payloads


# -------------------------------------------------------------------- WebSocket framing


def test_ws_client_to_server_golden() -> None:
    header = b'{"c":"publish","t":"orders","a":"persisted","s":"1795335113369000001"}'
    messages = encode_ws_from_client(header, b'{"id":1}')
    assert messages == [b"\x02\x00\x00\x00", header, b'{"id":1}']
    assert encode_ws_from_client(b'{"c":"flush"}') == [b"\x01\x00\x00\x00", b'{"c":"flush"}']
    framer = WsServerFramer()
    assert framer.receive_message("text") is None
    assert framer.encoding == "text"
    assert framer.receive_message(messages[0]) is None
    assert framer.receive_message(messages[1].decode()) is None
    assert framer.receive_message(messages[2].decode()) == header + b'{"id":1}'
    assert framer.receive_message(b"\x01\x00\x00\x00") is None
    assert framer.receive_message(b'{"c":"flush"}') == b'{"c":"flush"}'


def test_ws_server_framer_rejects_garbage() -> None:
    framer = WsServerFramer()
    framer.receive_message(b"\x01\x00\x00\x00")
    framer.receive_message(b'{"c":"flush"}')
    with pytest.raises(MalformedFrameError):
        framer.receive_message("hello")
    with pytest.raises(MalformedFrameError):
        WsServerFramer().receive_message(b"\x07\x00\x00\x00")
    small = WsServerFramer(max_frame_size=10)
    small.receive_message(b"\x01\x00\x00\x00")
    with pytest.raises(FrameTooLargeError):
        small.receive_message(b"x" * 11)


SOW_BATCH = (
    b'{"c":"sow","t":"topicS","query_id":"auto2","bs":2}'
    b'{"k":"k1","bm":"9|1|","l":8}{"id":1}'
    b'{"k":"k2","bm":"9|2|","l":8}{"id":2}'
)


def test_ws_server_to_client_golden() -> None:
    delivery = b'{"c":"p","t":"orders","sids":"auto1","bm":"1|3|"}{"x":1}'
    assert encode_ws_from_server(delivery) == [
        b'{"c":"p","t":"orders","sids":"auto1","bm":"1|3|"}',
        b'{"x":1}',
    ]
    ack = b'{"c":"ack","cid":"auto1","a":"processed","status":"success"}'
    assert encode_ws_from_server(ack) == [ack]
    parts = encode_ws_from_server(SOW_BATCH)
    assert parts == [
        b'{"c":"sow","t":"topicS","query_id":"auto2","bs":2}',
        b'{"k":"k1","bm":"9|1|","l":8}',
        b'{"id":1}',
        b'{"k":"k2","bm":"9|2|","l":8}',
        b'{"id":2}',
    ]
    # and the client framer reassembles exactly the TCP-shaped payloads, message by message
    framer = WsClientFramer()
    got = []
    for payload in (delivery, ack, SOW_BATCH):
        for part in encode_ws_from_server(payload):
            out = framer.receive_message(part.decode())
            if out is not None:
                got.append(out)
    assert got == [delivery, ack, SOW_BATCH]


# ----------------------------------------------------------------------- messages


def test_message_lazy_accessors() -> None:
    raw = b'{"c":"p","t":"orders","sids":"s1,s2","bm":"10|3|","s":7,"x":"corr"}{"id":1}'
    assert find_sids(raw) == "s1,s2"
    assert body_offset(raw) == raw.index(b"}{") + 1
    m = Message(raw, sub_id="s2")
    assert m.data == b'{"id":1}'
    assert m.get_data() == '{"id":1}'
    assert m.json() == {"id": 1}
    assert m.get_command() == "publish"  # official spelling of "c":"p"
    assert m.get_topic() == "orders"
    assert m.get_sub_id() == "s2"
    assert m.get_sub_ids() == "s1,s2"
    assert m.get_bookmark() == "10|3|"
    assert m.get_sequence() == 7
    assert m.get_correlation_id() == "corr"


def test_body_offset_with_braces_and_escapes_in_strings() -> None:
    raw = encode_header({"c": "p", "t": 'a}"b', "x": "}}"}) + b"{BODY}"
    assert raw[body_offset(raw) :] == b"{BODY}"
    raw = encode_header({"c": "p", "t": "a}b"}) + b"}"
    assert raw[body_offset(raw) :] == b"}"


def test_split_sow_batch() -> None:
    outer, records = split_sow_batch(SOW_BATCH)
    assert outer == {"c": "sow", "t": "topicS", "query_id": "auto2", "bs": 2}
    assert [r.get_sow_key() for r in records] == ["k1", "k2"]
    assert [r.get_bookmark() for r in records] == ["9|1|", "9|2|"]
    assert [r.data for r in records] == [b'{"id":1}', b'{"id":2}']
    assert all(r.get_topic() == "topicS" and r.get_query_id() == "auto2" for r in records)
    assert all(r.get_command() == "sow" for r in records)


def test_ack_types() -> None:
    flags = parse_ack_types("processed,completed")
    assert flags == AckType.PROCESSED | AckType.COMPLETED
    assert format_ack_types(flags | AckType.RECEIVED) == "received,processed,completed"
    assert parse_ack_types("") == AckType.NONE
    assert format_ack_types(AckType.NONE) == ""


def test_protocol_errors_share_a_base() -> None:
    assert issubclass(FrameTooLargeError, ProtocolError)
    assert issubclass(MalformedFrameError, ProtocolError)


def test_protocol_package_does_no_io() -> None:
    banned = {"asyncio", "socket", "threading", "websockets", "selectors", "ssl"}
    root = pathlib.Path(__file__).resolve().parents[2] / "ampsclient" / "protocol"
    checked = 0
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"
        checked += 1
    assert checked >= 5
