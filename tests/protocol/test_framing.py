"""Golden bytes for both framers (:mod:`ampsclient.protocol.framing`), TCP and WebSocket, in
both directions. Every TCP framing case is also fed one byte at a time. The byte strings are
the ones captured from the official clients in shared/protocol.md.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient.exceptions import FrameTooLargeError, MalformedFrameError
from ampsclient.protocol import (
    TcpFramer,
    WsClientFramer,
    WsServerFramer,
    encode_ws_from_client,
    encode_ws_from_server,
    tcp_frame,
)

# the logon header of test_header.py's golden cases
LOGON = (
    b'{"c":"logon","cid":"auto0","client_name":"demo-client","mt":"json","a":"processed",'
    b'"version":"5.3.5.14.c6e65cc.784022:python"}'
)
PUBLISH = b'{"c":"p","t":"topicA"}{"x":1}'
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
