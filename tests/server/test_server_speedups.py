"""The server's optional C speedups (``ampsclient_server_stub/_speedups.c``) against their
pure-Python twins (``ampsclient_server_stub.accel.TWINS``), input by input, and the run path
they accelerate through a real server with each implementation.

The C tests are skipped when the extension is absent or ``AMPSCLIENT_PUREPYTHON=1``; the
twins are then checked against the hand-written expectations alone, and the server tests run
the Python path (the suite's pure-Python pass).
"""

from __future__ import annotations

import importlib
import json
import os
import random
import struct
import subprocess
import sys
import zlib
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ampsclient.exceptions import FrameTooLargeError, MalformedFrameError
from ampsclient.protocol.framing import TcpFramer, WsServerFramer, encode_ws_from_server
from ampsclient.transport.wsconn import frame_header
from ampsclient_server_stub import ServerThread, accel
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.engine import (
    delivery,
    journal as journal_module,
    journal_append,
    publishing,
    wire,
)
from ampsclient_server_stub.net import tcp, ws
from ampsclient_server_stub.testing import RawClient

needs_c = pytest.mark.skipif(not accel.SPEEDUPS, reason="server C speedups not in use")
IMPLS = ["python", pytest.param("c", marks=needs_c)]


def test_every_c_function_names_an_existing_twin() -> None:
    for name, qualname in accel.TWINS.items():
        module, attr = qualname.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), attr)), name
        if accel.SPEEDUPS:
            assert callable(getattr(accel, name)), name


# --------------------------------------------------------------------------- scan_publishes

PLAIN = b'{"c":"p","t":"%s"}%s'
OURS = b'{"c":"p","s":%d,"a":"persisted","t":"%s"}%s'
OFFICIAL = b'{"c":"p","t":"%s","a":"persisted","s":%d}%s'


def test_scan_publishes_takes_plain_publishes_to_known_topics() -> None:
    payloads = [
        PLAIN % (b"a", b"1"),
        PLAIN % (b"a", b"22"),
        PLAIN % (b"b", b"3"),
        PLAIN % (b"a", b"4"),
    ]
    assert wire.scan_publishes(payloads, 0, True, 10, {"a": True}) == (
        2,
        [(11, "a", b"1"), (12, "a", b"22")],
    )
    assert wire.scan_publishes(payloads, 2, True, 0, {"a": True}) == (2, [])
    assert wire.scan_publishes(payloads, 3, True, 7, {"a": True}) == (4, [(8, "a", b"4")])


def test_scan_publishes_takes_both_sequenced_shapes_and_stops_at_a_duplicate() -> None:
    payloads = [OURS % (5, b"t", b"x"), OFFICIAL % (b"t", 6, b"y"), OURS % (6, b"t", b"z")]
    assert wire.scan_publishes(payloads, 0, False, 4, {"t": 1}) == (
        2,
        [(5, "t", b"x"), (6, "t", b"y")],
    )
    assert wire.scan_publishes(payloads, 0, False, 5, {"t": 1}) == (0, [])
    # a plain publish is not a sequenced one, and the other way round
    assert wire.scan_publishes([PLAIN % (b"t", b"")], 0, False, 0, {"t": 1}) == (0, [])
    assert wire.scan_publishes(payloads, 0, True, 0, {"t": 1}) == (0, [])


def test_scan_publishes_leaves_odd_shapes_to_the_one_by_one_path() -> None:
    odd = [
        b'{"c":"p","t":"a\\"b"}x',  # an escape in the topic
        b'{"c":"p","t":""}x',  # empty topic
        b'{"c":"p","t":"a"',  # no closing brace
        b'{"c":"p","t":"\xff"}x',  # not UTF-8
        b'{"c":"x","s":1,"a":"persisted","t":"a"}x',  # not a publish
        OURS % (2**63, b"a", b""),  # beyond a signed 64-bit sequence
        b'{"c":"p","s":1x,"a":"persisted","t":"a"}',
    ]
    for payload in odd:
        for plain in (True, False):
            assert wire.scan_publishes([payload], 0, plain, 0, {"a": 1, "a\\": 1, "\xff": 1}) == (
                0,
                [],
            ), payload


def _random_payload(rng: random.Random) -> bytes:
    topic = rng.choice(
        [b"a", b"b", b"long/topic.name", b"a\\b", b"", b"\xc3\xa9t\xc3\xa9", b"\xff"]
    )
    body = rng.choice([b"", b"{}", b'{"id":1}', b"}" * rng.randint(0, 3)])
    seq = rng.choice([0, 1, 2, 3, 5, 8, 10**17, 10**18, 2**63 - 1, 2**63, 10**20])
    shape = rng.randrange(6)
    if shape == 0:
        return PLAIN % (topic, body)
    if shape == 1:
        return OURS % (seq, topic, body)
    if shape == 2:
        return OFFICIAL % (topic, seq, body)
    if shape == 3:
        return b'{"c":"p","s":0%d,"a":"persisted","t":"%s"}%s' % (seq, topic, body)
    whole = rng.choice([PLAIN % (topic, body), OURS % (seq, topic, body)])
    return whole[: rng.randrange(len(whole) + 1)]  # cut anywhere


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_scan_publishes_c_matches_its_twin(seed: int) -> None:
    assert accel.scan_publishes is not None
    rng = random.Random(seed)
    topics = {"a": True, "b": True, "long/topic.name": True, "été": True}
    for _ in range(50):
        payloads = [_random_payload(rng) for _ in range(rng.randint(0, 12))]
        if rng.random() < 0.5:  # runs that go on for a while
            payloads = [PLAIN % (b"a", b"%d" % i) for i in range(rng.randint(1, 20))] + payloads
        start = rng.randint(0, len(payloads))
        last_seq = rng.choice([0, 1, 4, 2**62])
        for plain in (True, False):
            args = (payloads, start, plain, last_seq, topics)
            assert accel.scan_publishes(*args) == wire.scan_publishes(*args), args


# --------------------------------------------------------------------------- frames


def test_delivery_frames_are_head_sequence_body() -> None:
    batch = [(7, "t", b'{"n":1}'), (123456789012, "t", b"")]
    assert wire.delivery_frames(b'{"c":"p","t":"t","sids":"s1","bm":"42|', batch) == [
        b'{"c":"p","t":"t","sids":"s1","bm":"42|7|"}{"n":1}',
        b'{"c":"p","t":"t","sids":"s1","bm":"42|123456789012|"}',
    ]


@needs_c
@pytest.mark.parametrize("seed", range(10))
def test_delivery_frames_c_matches_its_twin(seed: int) -> None:
    assert accel.delivery_frames is not None
    rng = random.Random(seed)
    for _ in range(20):
        head = rng.randbytes(rng.randint(0, 40))
        batch = [
            (
                rng.choice([0, 1, 99, 2**63 - 1]),
                "t",
                rng.randbytes(rng.randint(0, 300)),
            )
            for _ in range(rng.randint(0, 30))
        ]
        assert accel.delivery_frames(head, batch) == wire.delivery_frames(head, batch)


def test_frame_join_frames_each_payload() -> None:
    payloads: list[Any] = [b"abc", b"", bytearray(b"xy"), memoryview(b"0123456789")[2:5]]
    joined = tcp.frame_join(payloads)
    assert joined == b"\0\0\0\3abc" + b"\0\0\0\0" + b"\0\0\0\2xy" + b"\0\0\0\x03234"
    framer = TcpFramer()
    framer.receive_data(joined)
    assert framer.frames() == [b"abc", b"", b"xy", b"234"]


@needs_c
@pytest.mark.parametrize("seed", range(10))
def test_frame_join_c_matches_its_twin(seed: int) -> None:
    assert accel.frame_join is not None
    rng = random.Random(seed)
    for _ in range(20):
        payloads: list[Any] = [
            rng.randbytes(rng.choice([0, 1, 255, 256, 70000])) for _ in range(rng.randint(0, 8))
        ]
        if payloads and rng.random() < 0.5:
            payloads[0] = bytearray(payloads[0])
        assert accel.frame_join(payloads) == tcp.frame_join(payloads)
    with pytest.raises(TypeError):
        accel.frame_join(["text"])  # type: ignore[list-item]


# --------------------------------------------------------------------------- through a server


@pytest.fixture(params=IMPLS)
def impl_server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServerThread]:
    """A server (journal on, every topic recorded) using the C functions or their twins."""
    if request.param == "python":
        monkeypatch.setattr(publishing, "_scan", wire.scan_publishes)
        monkeypatch.setattr(delivery, "_frames", wire.delivery_frames)
        monkeypatch.setattr(tcp, "_frame_join", tcp.frame_join)
    else:
        monkeypatch.setattr(publishing, "_scan", accel.scan_publishes)
        monkeypatch.setattr(delivery, "_frames", accel.delivery_frames)
        monkeypatch.setattr(tcp, "_frame_join", accel.frame_join)
    thread = ServerThread(default_config(tcp_port=0, ws_port=0))
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


def _frame(hdr: dict[str, Any], body: bytes) -> bytes:
    payload = json.dumps(hdr, separators=(",", ":")).encode() + body
    return struct.pack(">I", len(payload)) + payload


def _subscribe(client: RawClient, topic: str, sub_id: str, **fields: Any) -> None:
    client.send(
        {"c": "subscribe", "cid": sub_id, "t": topic, "sub_id": sub_id, "a": "processed", **fields}
    )
    ack, _ = client.recv_until(lambda h: h.get("c") == "ack" and h.get("cid") == sub_id)
    assert ack["status"] == "success"


def _deliveries(client: RawClient, count: int) -> list[tuple[str, str, int]]:
    """``(sids, bookmark, n)`` of the next ``count`` deliveries."""
    out: list[tuple[str, str, int]] = []
    while len(out) < count:
        hdr, body = client.recv(10)
        if hdr.get("c") == "p":
            out.append((hdr["sids"], hdr["bm"], json.loads(body)["n"]))
    return out


def test_a_run_of_plain_publishes_reaches_each_subscription_in_order(
    impl_server: ServerThread,
) -> None:
    port = impl_server.tcp_port
    with RawClient(port) as one, RawClient(port) as two, RawClient(port) as pub:
        one.logon("one")
        _subscribe(one, "t1", "a")
        _subscribe(one, "t1", "b", filter="/n > 2")  # not a plain route: one by one
        two.logon("two")
        _subscribe(two, "t1", "c")
        _subscribe(two, "t2", "d")
        pub.logon("pub")
        topics = ["t1", "t1", "t1", "t1", "t1", "t2", "t1", "t3", "t1"]
        # one write: the server reads the whole run at once
        pub.send_raw(
            b"".join(_frame({"c": "p", "t": t}, b'{"n":%d}' % n) for n, t in enumerate(topics, 1))
        )
        got_one = _deliveries(one, 7)
        got_two = _deliveries(two, 8)
        for client in (one, two):  # a marker: nothing else came before it
            pub.send({"c": "p", "t": "t1"}, b'{"n":100}')
            assert _deliveries(client, 1)[0][2] == 100
    pid = got_one[0][1].split("|")[0]
    seqs = {n: int(bm.split("|")[1]) for _sids, bm, n in got_one + got_two}
    assert all(bm.startswith(pid + "|") and bm.endswith("|") for _s, bm, _n in got_one + got_two)
    assert [seqs[n] - seqs[1] for n in sorted(seqs)] == [n - 1 for n in sorted(seqs)]
    assert [(sids, n) for sids, _bm, n in got_one] == [
        ("a", 1),
        ("a", 2),
        ("a,b", 3),
        ("a,b", 4),
        ("a,b", 5),
        ("a,b", 7),
        ("a,b", 9),
    ]
    assert [(sids, n) for sids, _bm, n in got_two] == [
        ("c", 1),
        ("c", 2),
        ("c", 3),
        ("c", 4),
        ("c", 5),
        ("d", 6),
        ("c", 7),
        ("c", 9),
    ]


def test_a_run_of_sequenced_publishes_skips_duplicates_and_is_acked(
    impl_server: ServerThread,
) -> None:
    port = impl_server.tcp_port
    with RawClient(port) as sub, RawClient(port) as pub:
        sub.logon("sub")
        _subscribe(sub, "t", "s")
        pub.logon("pub")
        seqs = [1, 2, 3, 2, 4, 4, 5]
        pub.send_raw(
            b"".join(
                _frame({"c": "p", "s": s, "a": "persisted", "t": "t"}, b'{"n":%d}' % i)
                for i, s in enumerate(seqs)
            )
        )
        got = _deliveries(sub, 5)
        ack = pub.recv_until(lambda h: h.get("a") == "persisted" and h.get("s") == 5, 10)[0]
        assert ack["status"] == "success"
        pub.send({"c": "p", "t": "t"}, b'{"n":99}')  # marker: nothing else came before it
        assert _deliveries(sub, 1)[0][2] == 99
    assert [n for _sids, _bm, n in got] == [0, 1, 2, 4, 6]
    assert [bm.split("|")[1] for _sids, bm, _n in got] == ["1", "2", "3", "4", "5"]


# --------------------------------------------------------------------------- replay_frames

PREFIX: bytes = b"\x94\xa1p" + msgpack.packb("orders") + b"\xc4"
SUFFIX: bytes = msgpack.packb({"mt": "json"})


def _record(index: int, pid: int, seq: int, tail: bytes, ts: int = 1_700_000_000_000_000) -> bytes:
    fixed = struct.pack("<QQQQ", index, ts, pid, seq)
    return struct.pack("<II", len(fixed) + len(tail), zlib.crc32(fixed + tail)) + fixed + tail


def _usual(payload: bytes) -> bytes:
    return PREFIX + bytes([len(payload)]) + payload + SUFFIX


def test_replay_frames_frames_the_usual_records_and_stops_at_the_first_other() -> None:
    records = [
        _record(5, 42, 1, _usual(b'{"n":1}')),
        _record(6, 42, 2, _usual(b"")),
        _record(7, 43, 3, _usual(b'{"n":3}')),  # another publisher
    ]
    data = b"".join(records)
    out: list[bytes] = []
    got = wire.replay_frames(data, 0, 5, 8, PREFIX, SUFFIX, b"H42|", 42, out)
    assert got == (len(records[0]) + len(records[1]), 7, 2)
    assert out == [b'H42|1|"}{"n":1}', b'H42|2|"}']
    assert wire.replay_frames(data, got[0], 7, 8, PREFIX, SUFFIX, b"H43|", 43, out)[1:] == (8, 3)
    # a bad CRC, a wrong index, another topic: nothing taken
    bad = bytearray(records[0])
    bad[-1] ^= 1
    for block, index in ((bytes(bad), 5), (records[0], 6), (_record(5, 42, 1, b"\x94\xa1px"), 5)):
        assert wire.replay_frames(block, 0, index, index + 1, PREFIX, SUFFIX, b"H", 42, out) == (
            0,
            index,
            -1,
        )


def test_replay_frames_skips_other_topics_of_any_publisher() -> None:
    other = b"\x94\xa1p" + msgpack.packb("other") + b"\xc4\x02{}" + SUFFIX
    delete = b"\x94\xaasow_delete" + msgpack.packb("orders") + b"\xc4\x02{}" + SUFFIX
    records = [
        _record(1, 42, 1, _usual(b"{}")),
        _record(2, 7, 1, other),  # another topic, another publisher: skipped
        _record(3, 42, 2, _usual(b"{}")),
        _record(4, 42, 3, delete),  # this topic, another command: the caller's
    ]
    data = b"".join(records)
    out: list[bytes] = []
    got = wire.replay_frames(data, 0, 1, 5, PREFIX, SUFFIX, b"H", 42, out)
    assert got == (sum(map(len, records[:3])), 4, 2)
    assert out == [b'H1|"}{}', b'H2|"}{}']
    # only skipped: no sequence framed
    assert wire.replay_frames(records[1], 0, 2, 3, PREFIX, SUFFIX, b"H", 42, out) == (
        len(records[1]),
        3,
        -1,
    )


def test_replay_frames_stamps_server_times_and_stops_after_until() -> None:
    ts = 1_764_288_001_000_042  # 2025-11-28T00:00:01.000042Z
    records = [_record(1 + k, 42, 1 + k, _usual(b"{}"), ts + k * 500_000) for k in range(4)]
    data = b"".join(records)
    out: list[bytes] = []
    got = wire.replay_frames(data, 0, 1, 5, PREFIX, SUFFIX, b"H", 42, out, True, ts + 1_000_000)
    assert got == (sum(map(len, records[:3])), 4, 3)  # the 4th is after `until`
    assert out == [
        b'H1|","ts":"20251128T000001.000042Z"}{}',
        b'H2|","ts":"20251128T000001.500042Z"}{}',
        b'H3|","ts":"20251128T000002.000042Z"}{}',
    ]
    late = _record(1, 42, 1, _usual(b"{}"), 253_402_300_800_000_000)  # the year 10000
    assert wire.replay_frames(late, 0, 1, 2, PREFIX, SUFFIX, b"H", 42, [], True) == (0, 1, -1)
    assert wire.replay_frames(late, 0, 1, 2, PREFIX, SUFFIX, b"H", 42, [])[1] == 2


@needs_c
@pytest.mark.parametrize("seed", range(20))
def test_replay_frames_c_matches_its_twin(seed: int) -> None:
    assert accel.replay_frames is not None
    rng = random.Random(seed)
    for _ in range(30):
        index = rng.randint(1, 1000)
        parts = []
        for k in range(rng.randint(0, 15)):
            payload = rng.randbytes(rng.choice([0, 5, 255, 256, 300]))
            tail = _usual(payload) if len(payload) < 256 else PREFIX + b"\x01" + payload
            if rng.random() < 0.3:  # another topic (or a topic name of another size)
                name = rng.choice(["other", "orders", "o" * 40, "p" * 300])
                tail = b"\x94\xa1p" + msgpack.packb(name) + b"\xc4\x01x" + SUFFIX
            if rng.random() < 0.1:
                tail = tail[: rng.randrange(len(tail) + 1)]
            pid = rng.choice([42, 42, 42, 7])
            seq = rng.choice([k + 1, 2**63 - 1, 2**63, 2**64 - 1])
            ts = rng.choice([0, 1_764_288_000_999_999 + k * 400_000, 2**63, 2**64 - 1])
            ts = rng.choice([ts, 253_402_300_799_999_999, 253_402_300_800_000_000])
            parts.append(_record(index + k, pid, seq, tail, ts))
        data = bytearray(b"".join(parts))
        if data and rng.random() < 0.3:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.2:
            data = data[: rng.randrange(len(data) + 1)]
        block = bytes(data)
        args = (block, 0, index, index + len(parts), PREFIX, SUFFIX, b'{"c":"p","bm":"42|', 42)
        until = rng.choice([-1, 0, 1_764_288_002_000_000, 2**63 - 1])
        for extra in ((), (rng.random() < 0.5,), (rng.random() < 0.5, until)):
            out_c: list[bytes] = []
            out_py: list[bytes] = []
            assert accel.replay_frames(*args, out_c, *extra) == wire.replay_frames(
                *args, out_py, *extra
            )
            assert out_c == out_py


# --------------------------------------------------------------------------- ws_client_frames


def _ws_frame(
    opcode: int, payload: bytes, *, fin: bool = True, mask: bytes = b"\x11\x22\x33\x44"
) -> bytes:
    """One client frame (masked unless ``mask`` is empty)."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + n.to_bytes(8, "big")
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if mask else payload
    return head + mask + body


def test_client_frames_unmasks_whole_data_frames_and_stops_at_anything_else() -> None:
    one = _ws_frame(2, b"\x01\x00\x00\x00")
    two = _ws_frame(1, '{"c":"p"}é'.encode())
    big = _ws_frame(2, b"x" * 70000)
    data = one + two + big
    assert ws.client_frames(data, -1) == (
        len(data),
        [(b"\x01\x00\x00\x00", False), ('{"c":"p"}é'.encode(), True), (b"x" * 70000, False)],
        True,
    )
    assert ws.client_frames(data[:-1], -1) == (
        len(one + two),
        [(b"\x01\x00\x00\x00", False), ('{"c":"p"}é'.encode(), True)],
        True,
    )
    assert ws.client_frames(data, 69999)[1:] == (
        [(b"\x01\x00\x00\x00", False), ('{"c":"p"}é'.encode(), True)],
        False,
    )
    for other in (
        _ws_frame(9, b"ping"),  # control frame
        _ws_frame(8, b""),  # close
        _ws_frame(1, b"half", fin=False),  # fragment
        _ws_frame(1, b"unmasked", mask=b""),  # protocol error: websockets answers it
        bytes([0xC1]) + _ws_frame(1, b"x")[1:],  # RSV1
    ):
        assert ws.client_frames(one + other + one, -1) == (
            len(one),
            [(b"\x01\x00\x00\x00", False)],
            False,
        ), other


@needs_c
@pytest.mark.parametrize("seed", range(20))
def test_client_frames_c_matches_its_twin(seed: int) -> None:
    assert accel.ws_client_frames is not None
    rng = random.Random(seed)
    texts = [
        b"",
        b"abc",
        "été".encode(),
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xc0\xaf",
        b"\xe2\x82",
        b"\xf0\x9f\x98\x80",
    ]
    for _ in range(30):
        frames = []
        for _k in range(rng.randint(0, 6)):
            opcode = rng.choice([1, 1, 2, 2, 0, 8, 9, 3])
            payload = (
                rng.choice(texts)
                if opcode == 1
                else rng.randbytes(rng.choice([0, 4, 125, 126, 300, 70000]))
            )
            frames.append(
                _ws_frame(
                    opcode,
                    payload,
                    fin=rng.random() > 0.1,
                    mask=rng.choice([b"\x00\x00\x00\x00", b"\x9a\x01\xff\x10", b""])
                    if rng.random() < 0.2
                    else b"\x12\x34\x56\x78",
                )
            )
        data = b"".join(frames)
        data = data[: rng.randint(0, len(data))] if rng.random() < 0.3 else data
        for limit in (-1, 0, 126, 100000):
            assert accel.ws_client_frames(data, limit) == ws.client_frames(data, limit)


@pytest.mark.parametrize("c", [False, pytest.param(True, marks=needs_c)])
def test_ws_frames_parsed_by_the_server_deliver_in_order_around_a_ping(
    c: bool, monkeypatch: pytest.MonkeyPatch, server: ServerThread
) -> None:
    """A raw ws:// client: publishes in frames split across writes, a ping in the middle
    (websockets answers it and parses the rest), then a text message that is not UTF-8
    where a count is expected: the server closes the connection (malformed framing)."""
    parse = accel.ws_client_frames if c else ws.client_frames
    assert parse is not None
    parsed: list[int] = []

    def counting(data: bytes, limit: int) -> tuple[int, list[tuple[bytes, bool]], bool]:
        end, messages, whole = parse(data, limit)
        parsed.append(len(messages))
        return end, messages, whole

    take = accel.ws_client_commands if c else ws.client_commands
    assert take is not None

    def counting_commands(data: bytes, max_message: int, max_size: int) -> tuple[int, list[bytes]]:
        end, payloads = take(data, max_message, max_size)
        parsed.append(3 * len(payloads))  # count, header, body: three messages each
        return end, payloads

    monkeypatch.setattr(ws, "_client_frames", counting)
    monkeypatch.setattr(ws, "_client_commands", counting_commands)
    import socket

    with RawClient(server.tcp_port) as sub:
        sub.logon("sub")
        _subscribe(sub, "w", "s")
        sock = socket.create_connection(("127.0.0.1", server.ws_port), timeout=10)
        sock.sendall(
            b"GET /amps/json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(4096)
        assert reply.startswith(b"HTTP/1.1 101")

        def command(hdr: dict[str, Any], body: bytes | None = None) -> bytes:
            out = _ws_frame(2, struct.pack("<I", 1 if body is None else 2))
            out += _ws_frame(1, json.dumps(hdr, separators=(",", ":")).encode())
            return out + (b"" if body is None else _ws_frame(1, body))

        stream = _ws_frame(1, b"text") + command(
            {"c": "logon", "cid": "L", "client_name": "wsp", "a": "processed"}
        )
        stream += b"".join(command({"c": "p", "t": "w"}, b'{"n":%d}' % n) for n in range(1, 6))
        stream += _ws_frame(9, b"hi")
        stream += b"".join(command({"c": "p", "t": "w"}, b'{"n":%d}' % n) for n in range(6, 11))
        for k in range(0, len(stream), 7):  # seven bytes per write: frames cut anywhere
            sock.sendall(stream[k : k + 7])
        assert [n for _s, _b, n in _deliveries(sub, 10)] == list(range(1, 11))
        assert sum(parsed) >= 3 * 5  # the publishes before the ping at least: parsed here
        got = b""
        while b"\x8a\x02hi" not in got:  # the pong
            got += sock.recv(65536)
        sock.sendall(_ws_frame(1, b"\xff\xfe"))
        got = b""
        while True:
            chunk = sock.recv(65536)
            got += chunk
            if not chunk or b"\x88\x02\x03\xe8" in got:
                break
        assert b"\x88\x02\x03\xe8" in got  # a close frame, code 1000
        sock.close()


# --------------------------------------------------------------------------- ws_server_frames


def test_server_frames_split_deliveries_as_encode_ws_from_server_does() -> None:
    payloads = [b'{"c":"p","t":"a}b","sids":"s"}{"n":1}', b'{"c":"p","t":"t"}' + b"x" * 200]
    framed = ws.server_frames(payloads, True)
    assert framed is not None
    expected = b""
    for payload in payloads:
        for part in encode_ws_from_server(payload):
            expected += frame_header(0x81, len(part), 0) + part
    assert framed == expected
    assert ws.server_frames(payloads, False) == expected.replace(b"\x81", b"\x82")
    for other in (
        b'{"c":"ack","cid":"1"}',
        b'{"c":"p","t":"a\\"b"}x',
        '{"c":"p","t":"é"}x'.encode(),
    ):
        assert ws.server_frames([payloads[0], other], True) is None, other
    assert ws.server_frames(['{"c":"p","t":"é"}x'.encode()], False) is not None


@needs_c
@pytest.mark.parametrize("seed", range(10))
def test_server_frames_c_matches_its_twin(seed: int) -> None:
    assert accel.ws_server_frames is not None
    rng = random.Random(seed)
    pieces = [
        b'{"c":"p",',
        b'"t":"',
        b"}",
        b'"',
        b"\\",
        b"x",
        "é".encode(),
        b"y" * 130,
        b"z" * 70000,
    ]
    for _ in range(40):
        payloads = [
            b'{"c":"p",' + b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
            if rng.random() < 0.9
            else b'{"c":"ack"}'
            for _ in range(rng.randint(0, 5))
        ]
        for text in (True, False):
            assert accel.ws_server_frames(payloads, text) == ws.server_frames(payloads, text)


# --------------------------------------------------------------------------- ws_commands


def _framer_payloads(messages: list[tuple[bytes, bool]], max_size: int) -> list[bytes] | str:
    """What an announced, idle WsServerFramer makes of ``messages`` (the reference)."""
    framer = WsServerFramer(max_frame_size=max_size)
    framer.receive_message(b"\x01\x00\x00\x00")
    framer.receive_message(b"{}")  # announced, idle
    out: list[bytes] = []
    try:
        for data, text in messages:
            payload = framer.receive_message(
                data.decode("utf-8", "replace") if text and len(data) <= 6 else data
            )
            if payload is not None:
                out.append(payload)
    except (MalformedFrameError, FrameTooLargeError) as exc:
        return type(exc).__name__
    return out


def test_ws_commands_assemble_what_the_framer_would() -> None:
    one = b"\x01\x00\x00\x00"
    two = b"\x02\x00\x00\x00"
    messages = [
        (two, False),
        (b'{"c":"p","t":"t"}', True),
        (b'{"n":1}', True),
        (one, False),
        (b'{"c":"flush"}', True),
    ]
    assert ws.ws_commands(messages, 0, 1000) == (5, [b'{"c":"p","t":"t"}{"n":1}', b'{"c":"flush"}'])
    assert ws.ws_commands(messages, 0, 20) == (0, [])  # too large: the framer refuses it
    assert ws.ws_commands(messages[:2], 0, 1000) == (0, [])  # not whole: the framer holds it
    for stop in ((b"text", True), (b"\x03\x00\x00\x00", False), (b"\x01\x00\x00", False)):
        assert ws.ws_commands([(one, False), (b"{}", False), stop], 0, 1000) == (2, [b"{}"])
    assert ws.ws_commands([(one, False), ("é".encode(), True)], 0, 1000) == (0, [])


@pytest.mark.parametrize("seed", range(20))
def test_ws_commands_then_the_framer_equal_the_framer_alone(seed: int) -> None:
    rng = random.Random(seed)
    impls = [ws.ws_commands] + ([accel.ws_commands] if accel.ws_commands is not None else [])
    for _ in range(40):
        messages: list[tuple[bytes, bool]] = []
        for _k in range(rng.randint(0, 8)):
            count = rng.choice([1, 2, 2, 0, 3])
            messages.append(
                (
                    struct.pack("<I", count) if rng.random() > 0.05 else b"\x01\x00",
                    rng.random() < 0.05,
                )
            )
            for _p in range(count if rng.random() > 0.1 else 1):
                part = rng.choice(
                    [b"{}", b'{"c":"p","t":"t"}', b"x" * 50, "é".encode(), b"\xff", b""]
                )
                messages.append((part, rng.random() < 0.7))
        limit = rng.choice([10, 60, 10_000])
        for impl in impls:
            end, taken = impl(messages, 0, limit)
            rest = _framer_payloads(messages[end:], limit)
            whole = _framer_payloads(messages, limit)
            assert (taken + rest if isinstance(rest, list) else rest) == whole
        if len(impls) == 2:
            assert impls[0](messages, 0, limit) == impls[1](messages, 0, limit)


# --------------------------------------------------------------------------- journal_frames

UINT64 = 2**64


def _expected_records(
    records: list[tuple[int, str, bytes]],
    index: int,
    pid: int,
    command: str,
    fields: dict[str, Any],
) -> list[bytes]:
    """What one Journal.append per record writes, built independently with msgpack."""
    out = []
    for k, (seq, topic, payload) in enumerate(records):
        tail = msgpack.packb([command, topic, payload, fields], use_bin_type=True)
        fixed = struct.pack("<QQQQ", index + k, 1_700_000_000_000_000, pid, seq)
        body = fixed + tail
        out.append(struct.pack("<II", len(body), zlib.crc32(body)) + body)
    return out


def test_journal_frames_writes_the_records_of_one_append_each_and_stops_at_the_limit() -> None:
    records = [(3, "orders", b'{"n":1}'), (9, "t" * 40, b"x" * 300), (10, "é", b"")]
    expected = _expected_records(records, 100, 42, "p", {"mt": "json"})
    fields = msgpack.packb({"mt": "json"})
    buf = bytearray(b"old")
    got = journal_append.journal_frames(
        buf, records, 0, 42, 100, 1_700_000_000_000_000, journal_append.record_prefix("p"),
        fields, 1000, 10**9, 2,
    )  # fmt: skip
    sizes = [len(r) for r in expected]
    assert got[0] == 3 and got[1] == 1000 + sum(sizes)
    assert buf == b"old" + b"".join(expected)
    assert array("Q", got[2]).tolist() == [1000, 1000 + sizes[0], 1000 + sizes[0] + sizes[1]]
    assert array("Q", got[3]).tolist() == [3, 9, 10]
    assert array("Q", got[4]).tolist() == [100, 101, 102]
    # a limit reached by the first record: one record taken, the rest for the next segment
    buf = bytearray()
    prefix = journal_append.record_prefix("p")
    args = (42, 100, 1_700_000_000_000_000, prefix, fields)
    assert journal_append.journal_frames(buf, records, 0, *args, 0, 1, 2)[:2] == (1, sizes[0])
    assert buf == expected[0]
    nxt = journal_append.journal_frames(buf, records, 1, 42, 101, *args[2:], 0, 10**9, 3)
    assert nxt[0] == 3 and buf == b"".join(expected)
    # a sequence not above the previous one (or not below 2**64): nothing appended
    for bad, prev, pos in (
        ([(5, "t", b"a"), (5, "t", b"b")], 0, 1),
        ([(5, "t", b"a")], 5, 0),
        ([(1, "t", b"a"), (UINT64, "t", b"b")], 0, 1),
        ([(0, "t", b"a")], 0, 0),
    ):
        buf = bytearray()
        got = journal_append.journal_frames(buf, bad, 0, *args, 0, 10**9, prev)
        assert got == (-1 - pos, 0, b"", b"", b"") and buf == b""


@needs_c
@pytest.mark.parametrize("seed", range(20))
def test_journal_frames_c_matches_its_twin(seed: int) -> None:
    assert accel.journal_frames is not None
    rng = random.Random(seed)
    topics = ["", "a", "x" * 31, "y" * 32, "z" * 255, "w" * 256, "ü€", "v" * 70_000]
    sizes = [0, 1, 7, 255, 256, 65_535, 65_536]
    for _ in range(20):
        seq = rng.choice([0, 1, 2**63 - 5, 2**64 - 8])
        prev = seq
        records: list[tuple[int, str, bytes]] = []
        for _k in range(rng.randint(0, 12)):
            seq += rng.choice([1, 1, 1, 2, 1000])
            if rng.random() < 0.05:
                seq -= rng.choice([1, 2])  # a duplicate or a step back
            payload = rng.randbytes(rng.choice(sizes) % 400) * rng.choice([1, 1, 200])
            records.append((seq, rng.choice(topics), payload))
        start = rng.randint(0, len(records))
        if start and rng.random() < 0.7:
            prev = records[start - 1][0]
        command = rng.choice(["p", "delta_publish", "sow_delete"])
        fields = msgpack.packb(rng.choice([{}, {"mt": "json"}, {"filter": "/a > 1", "k": 3}]))
        size = rng.randrange(10_000)
        limit = size + rng.choice([1, 100, 5_000, 10**9])
        args = (
            records, start, rng.choice([0, 42, UINT64 - 1]), rng.randint(1, 10**9),
            rng.randint(0, 2**60), journal_append.record_prefix(command), fields, size, limit,
            prev,
        )  # fmt: skip
        buf_c, buf_py = bytearray(b"pre"), bytearray(b"pre")
        assert accel.journal_frames(buf_c, *args) == journal_append.journal_frames(buf_py, *args)
        assert buf_c == buf_py


@pytest.mark.parametrize("impl", IMPLS)
def test_append_many_through_each_implementation_rotates_and_reads_back(
    impl: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = accel.journal_frames if impl == "c" else journal_append.journal_frames
    monkeypatch.setattr(journal_module, "_journal_frames", frames)
    j = journal_module.Journal(tmp_path / "j", fsync="never", journal_size=1_000)
    batch = [(s, f"t{s % 3}", b'{"n":%d}' % s) for s in range(1, 201)]
    first, _ts = j.append_many(9, "p", batch[:150], {"mt": "json"})
    assert first == 1
    with pytest.raises(journal_module.SequenceOrderError):
        j.append_many(9, "p", [(151, "t", b"a"), (150, "t", b"b")])
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        j.append_many(9, "p", [(UINT64, "t", b"a")])
    assert j.last_index == 150 and j.last_sequence(9) == 150
    j.append_many(9, "p", batch[150:], {"mt": "json"})
    assert len(j.segments()) > 5  # rotated inside the batches
    j.close()
    reopened = journal_module.Journal(tmp_path / "j", fsync="never")
    rows = reopened.read(1, max_records=1000)
    assert [(r.index, r.sequence, r.topic, r.payload) for r in rows] == [
        (s, s, t, p) for s, t, p in batch
    ]
    assert all(r.fields == {"mt": "json"} for r in rows)
    assert reopened.find_bookmark(9, 123) == 123
    reopened.close()


# ------------------------------------------------------------- journal_runs, journal_walk


def _journal_block(
    tmp_path: Path, records: list[tuple[int, str, str, bytes, dict[str, Any]]]
) -> bytes:
    """The raw bytes of ``records`` ``(pid, command, topic, payload, fields)`` as a real journal
    writes them (indexes from 1)."""
    j = journal_module.Journal(tmp_path / "blk", fsync="never")
    seqs: dict[int, int] = {}
    for pid, command, topic, payload, fields in records:
        seqs[pid] = seqs.get(pid, 0) + 1
        j.append(
            publisher_id=pid,
            sequence=seqs[pid],
            command=command,
            topic=topic,
            payload=payload,
            fields=fields,
        )
    ((data, _begin, first, n, _path),) = j.read_blocks(
        1, max_records=len(records), max_bytes=1 << 30
    )
    j.close()
    assert first == 1 and n == len(records)
    return data


def _raw_record(index: int, pid: int, seq: int, body: bytes) -> bytes:
    fixed = struct.pack("<QQQQ", index, 1_700_000_000_000_000, pid, seq) + body
    return struct.pack("<II", len(fixed), zlib.crc32(fixed)) + fixed


def _runs_cases(tmp_path: Path) -> list[bytes]:
    rng = random.Random(18)
    topics = ["orders", "x" * 31, "y" * 32, "z" * 255, "w" * 256, "t\u00e9", ""]
    payloads = [b"", b"a" * 255, b"b" * 256, b"c" * 65535, b"d" * 65536, b'{"n":1}']
    fields: list[dict[str, Any]] = [{"mt": "json"}, {}, {"mt": "xml", "k": 5}]
    records = []
    for i in range(300):
        command = "sow_delete" if i % 37 == 0 else "p"
        records.append(
            (
                rng.choice((1, 1, 1, 2**64 - 1)),
                command,
                rng.choice(topics),
                rng.choice(payloads),
                rng.choice(fields),
            )
        )
    data = _journal_block(tmp_path, records)
    cases = [data, data[:-1], data[: len(data) // 2]]
    for _ in range(40):  # damaged anywhere: a length, a CRC, an index, the msgpack part
        damaged = bytearray(data)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        cases.append(bytes(damaged))
    good = _raw_record(1, 5, 1, msgpack.packb(["p", "t", b"x", {"mt": "json"}]))
    for body in (  # shortest forms only: anything else stops both
        b"\x94\xd9\x01p\xa1t\xc4\x01x\x81\xa2mt\xa4json",
        b"\x94\xa1p\xda\x00\x01t\xc4\x01x\x80",
        b"\x94\xa1p\xa1t\xc5\x00\x01x\x80",
        b"\x94\xa1p\xa1t\xc4\x01x",  # no fields
        b"\x93\xa1p\xa1t\xc4\x01x",
        b"\x94\xa2\xff\xfe\xa1t\xc4\x01x\x80",  # not UTF-8
        b"\x94\xa1p\xa2\xc3\x28\xc4\x01x\x80",
        b"\x94\x01\xa1t\xc4\x01x\x80",
    ):
        cases.append(good + _raw_record(2, 5, 2, body) + good.replace(b"\x01\x00", b"\x03\x00", 1))
    return cases


@needs_c
def test_journal_runs_matches_its_twin(tmp_path: Path) -> None:
    from ampsclient_server_stub.replication import blocks

    assert accel.journal_runs is not None
    for data in _runs_cases(tmp_path):
        for pos, expected, stop in ((0, 1, 10**6), (0, 1, 3), (0, 2, 10**6), (5, 1, 10**6)):
            c_runs: list[Any] = []
            py_runs: list[Any] = []
            got = accel.journal_runs(data, pos, expected, stop, c_runs)
            assert got == blocks.journal_runs(data, pos, expected, stop, py_runs)
            assert c_runs == py_runs


def test_journal_runs_groups_and_stops(tmp_path: Path) -> None:
    from ampsclient_server_stub.replication import blocks

    records = [
        (7, "p", "a", b"1", {"mt": "json"}),
        (7, "p", "b", b"2", {"mt": "json"}),
        (8, "p", "a", b"3", {"mt": "json"}),
        (8, "sow_delete", "a", b"4", {"mt": "json"}),
    ]
    data = _journal_block(tmp_path, records)
    runs: list[Any] = []
    assert blocks.journal_runs(data, 0, 1, 10, runs) == (len(data), 5)
    packed = msgpack.packb({"mt": "json"})
    assert runs == [
        (7, "p", packed, [(1, "a", b"1"), (2, "b", b"2")]),
        (8, "p", packed, [(1, "a", b"3")]),
        (8, "sow_delete", packed, [(2, "a", b"4")]),
    ]
    bad = bytearray(data)
    bad[-1] ^= 1  # the last record's CRC no longer matches
    runs = []
    _pos, index = blocks.journal_runs(bytes(bad), 0, 1, 10, runs)
    assert index == 4 and sum(len(r[3]) for r in runs) == 3


def test_journal_walk_matches_its_twin(tmp_path: Path) -> None:
    from ampsclient_server_stub.replication import blocks

    rng = random.Random(19)
    records = [
        (
            rng.choice((1, 2, 3)),
            "p",
            "t",
            b"x" * rng.randrange(40),
            rng.choice(({"mt": "json"}, {}, {"mt": "xml"})),
        )
        for _ in range(200)
    ]
    data = _journal_block(tmp_path, records)
    suffix_sets = (None, blocks.mt_suffixes(["json"]), blocks.mt_suffixes(["xml"]), ())
    sent_sets: list[dict[Any, Any]] = [
        {},
        {1: 10, 2: 0},
        {1: -1},
        {2: 2**64},
        {3: "x"},
        {1: True},
        {1: 2**64 - 1},
        {3: 50},
    ]
    impls = [blocks.journal_walk] + ([accel.journal_walk] if accel.journal_walk else [])
    starts = [0]  # the offset of each record, and the end
    while starts[-1] < len(data):
        starts.append(starts[-1] + 8 + struct.unpack_from("<I", data, starts[-1])[0])
    ts_at = {i + 1: struct.unpack_from("<Q", data, at + 16)[0] for i, at in enumerate(starts[:-1])}
    for suffixes in suffix_sets:
        for sent in sent_sets:
            for pos, expected, count in ((0, 1, 500), (0, 1, 7), (0, 2, 500), (3, 1, 500)):
                outs = []
                for walk in impls:
                    mine = dict(sent)
                    outs.append((walk(data, pos, expected, count, mine, suffixes), mine))
                assert all(o == outs[0] for o in outs), (suffixes, sent, pos, outs)
                (taken, end, first_ts), _after = outs[0]
                assert first_ts == (ts_at[expected] if taken else 0)
                assert end == (starts[expected - 1 + taken] if taken else pos)
    # by hand: the sequence check, the type check and the update of sent_seq
    sent = {1: 0, 2: 0, 3: 0}
    taken, end, first_ts = blocks.journal_walk(data, 0, 1, 500, sent, None)
    assert taken == 200 and end == len(data) and first_ts == ts_at[1]
    assert sent == {pid: sum(1 for r in records if r[0] == pid) for pid in (1, 2, 3)}
    taken, _end, _went = blocks.journal_walk(data, 0, 1, 500, {records[0][0]: 1}, None)
    assert taken == 0  # the first record's sequence (1) is held downstream already


def test_journal_walk_stops_before_a_replicated_record(tmp_path: Path) -> None:
    """Blocks never carry a replicated record (its ``rp`` field, PATH_MARK, anywhere after
    the fixed fields stops the walk); the same bytes in the fixed fields do not."""
    from ampsclient_server_stub.replication import blocks

    assert blocks.PATH_MARK == b"\xa2rp"  # the C walk looks for these bytes
    in_header = int.from_bytes(b"\x00\xa2rp\x00\x00\x00\x00", "little")  # a publisher id
    rp: dict[str, Any] = {"mt": "json", "rp": [["A", "g"]]}
    records: list[tuple[int, str, str, bytes, dict[str, Any]]] = [
        (in_header, "p", "t", b"x", {"mt": "json"}),  # the mark's bytes in the fixed part
        (1, "p", "t", b"x", {"mt": "json"}),
        (1, "p", "t", b"x", rp),  # a replicated record (index 3)
        (1, "p", "t", b"x", {"mt": "json"}),
        (1, "p", "rp", b"x", {"mt": "json"}),  # a topic packing like the mark (index 5)
        (1, "p", "t", b"..\xa2r", {"mt": "json"}),  # the first bytes only
        (1, "p", "t", b"\xa2rp", {"mt": "json"}),  # in a payload (index 7)
        (2, "p", "t", b"x", {"mt": "json"}),
    ]
    data = _journal_block(tmp_path, records)
    starts = [0]
    while starts[-1] < len(data):
        starts.append(starts[-1] + 8 + struct.unpack_from("<I", data, starts[-1])[0])
    impls = [blocks.journal_walk] + ([accel.journal_walk] if accel.journal_walk else [])
    for walk in impls:
        got = [walk(data, starts[i], i + 1, 500, {}, None)[0] for i in range(len(records))]
        assert got == [2, 1, 0, 1, 0, 1, 0, 1], walk
        assert walk(data, starts[3], 4, 500, {}, blocks.mt_suffixes(["json"]))[0] == 1
    for cut in range(len(data) + 1):  # any prefix: both agree
        outs = [walk(data[:cut], 0, 1, 500, {}, None) for walk in impls]
        assert all(o == outs[0] for o in outs), cut


@needs_c
@pytest.mark.parametrize("chunk", [3, 7, 64, 32 * 1024])
def test_journal_walk_finds_the_mark_as_its_twin(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random records with the packed ``rp`` anywhere (fixed fields, body, across records):
    the C walk and the twin (searching in chunks of ``chunk`` bytes) stop at the same one."""
    from ampsclient_server_stub.replication import blocks

    assert accel.journal_walk is not None
    monkeypatch.setattr(blocks, "_MARK_CHUNK", chunk)
    rng = random.Random(chunk)
    marked_pid = int.from_bytes(b"\xa2rp\x00\x00\x00\x00\x00", "little")
    for _ in range(300):
        data = b""
        for i in range(1, rng.randrange(2, 40)):
            body = bytearray(rng.randbytes(rng.randrange(0, 120)))
            for _ in range(rng.randrange(3)):
                if len(body) > 3 and rng.random() < 0.3:
                    k = rng.randrange(len(body))
                    body[k : k + 3] = b"\xa2rp"
            data += _raw_record(i, rng.choice((1, marked_pid)), i, bytes(body))
        got = blocks.journal_walk(data, 0, 1, 1000, {}, None)
        assert got == accel.journal_walk(data, 0, 1, 1000, {}, None)


# --------------------------------------------------------------------------- ws_client_commands


def _ws_stream(rng: random.Random) -> bytes:
    """Client WebSocket bytes: mostly whole commands, sometimes something else."""
    out = b""
    for _ in range(rng.randint(0, 8)):
        count = rng.choice([1, 2, 2, 2, 0, 3])
        if rng.random() < 0.05:
            out += _ws_frame(9, b"hi")  # a ping
        count_frame = struct.pack("<I", count) if rng.random() > 0.05 else b"\x01\x00"
        out += _ws_frame(
            1 if rng.random() < 0.05 else 2,
            count_frame,
            mask=rng.randbytes(4),
            fin=rng.random() > 0.02,
        )
        for _p in range(count if rng.random() > 0.1 else 1):
            part = rng.choice(
                [b"{}", b'{"c":"p","t":"t"}', b"x" * 50, "é".encode(), b"\xff", b"", b"y" * 300]
            )
            out += _ws_frame(
                1 if rng.random() < 0.7 else 2,
                part,
                mask=rng.randbytes(4) if rng.random() > 0.02 else b"",
            )
    return out[: rng.randint(0, len(out))] if rng.random() < 0.3 else out


def test_client_commands_take_whole_commands_and_leave_the_rest() -> None:
    one = _ws_frame(2, b"\x01\x00\x00\x00")
    two = _ws_frame(2, b"\x02\x00\x00\x00")
    flush = one + _ws_frame(1, b'{"c":"flush"}')
    publish = two + _ws_frame(1, b'{"c":"p","t":"t"}') + _ws_frame(2, b'{"n":1}')
    data = publish + flush
    assert ws.client_commands(data, -1, 1000) == (
        len(data),
        [b'{"c":"p","t":"t"}{"n":1}', b'{"c":"flush"}'],
    )
    assert ws.client_commands(data[:-1], -1, 1000) == (len(publish), [b'{"c":"p","t":"t"}{"n":1}'])
    assert ws.client_commands(data, -1, 20) == (0, [])  # too large a command
    assert ws.client_commands(data, 10, 1000) == (0, [])  # too large a message
    for stop in (_ws_frame(9, b"hi"), _ws_frame(2, b"x", fin=False), _ws_frame(1, b"text")):
        assert ws.client_commands(flush + stop + flush, -1, 1000) == (
            len(flush),
            [b'{"c":"flush"}'],
        )
    assert ws.client_commands(one + _ws_frame(1, "é".encode()), -1, 1000) == (0, [])


@pytest.mark.parametrize("seed", range(20))
def test_client_commands_equal_client_frames_then_ws_commands(seed: int) -> None:
    """The reference: the messages client_frames parses, assembled by ws_commands; what is
    left after ``end`` parses to the messages ws_commands left."""
    rng = random.Random(seed)
    for _ in range(40):
        data = _ws_stream(rng)
        max_message = rng.choice([-1, 40, 100_000])
        max_size = rng.choice([10, 60, 10_000])
        _end, messages, _whole = ws.client_frames(data, max_message)
        i, payloads = ws.ws_commands(messages, 0, max_size)
        end, taken = ws.client_commands(data, max_message, max_size)
        assert taken == payloads
        assert ws.client_frames(data[end:], max_message)[1] == messages[i:]
        if accel.ws_client_commands is not None:
            assert accel.ws_client_commands(data, max_message, max_size) == (end, taken)


_CRC_CHECK = """
import msgpack, random
from ampsclient_server_stub import accel
from ampsclient_server_stub.engine import journal_append as ja
assert accel.journal_frames is not None
rng = random.Random(7)
for n in list(range(0, 300)) + [1024, 65_536, 70_001]:
    records = [(1, "t", rng.randbytes(n))]
    args = (records, 0, 1, 1, 1, ja.record_prefix("p"), msgpack.packb({}), 0, 10**12, 0)
    c, py = bytearray(), bytearray()
    assert accel.journal_frames(c, *args) == ja.journal_frames(py, *args), n
    assert c == py, n
print("same")
"""


@needs_c
@pytest.mark.parametrize("clmul", [True, False])
def test_journal_frames_crc_equals_zlib_at_every_length(clmul: bool) -> None:
    """Records of 40 to 70k bytes: the CRC by carry-less multiplication (64 bytes and more,
    where the CPU has it) and by the table (shorter records, the rest, or
    AMPSCLIENT_NO_CLMUL=1 in a process of its own) equal zlib.crc32, which the twin uses."""
    env = dict(os.environ)
    env.pop("AMPSCLIENT_NO_CLMUL", None)
    if not clmul:
        env["AMPSCLIENT_NO_CLMUL"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", _CRC_CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "same"


@pytest.mark.parametrize("c", [False, pytest.param(True, marks=needs_c)])
def test_ws_commands_taken_from_the_bytes_reach_a_subscriber_in_order(
    c: bool, monkeypatch: pytest.MonkeyPatch, server: ServerThread
) -> None:
    """A raw ws:// client writes 200 publishes at once after its logon: the session takes
    them straight from the bytes (ws_client_commands or its twin), in order, and a flush
    after them is acknowledged."""
    import socket

    take = accel.ws_client_commands if c else ws.client_commands
    assert take is not None
    taken: list[int] = []

    def counting(data: bytes, max_message: int, max_size: int) -> tuple[int, list[bytes]]:
        end, payloads = take(data, max_message, max_size)
        taken.append(len(payloads))
        return end, payloads

    monkeypatch.setattr(ws, "_client_commands", counting)

    def command(hdr: dict[str, Any], body: bytes | None = None) -> bytes:
        out = _ws_frame(2, struct.pack("<I", 1 if body is None else 2))
        out += _ws_frame(1, json.dumps(hdr, separators=(",", ":")).encode())
        return out + (b"" if body is None else _ws_frame(2, body))

    with RawClient(server.tcp_port) as sub:
        sub.logon("sub")
        _subscribe(sub, "wt", "s")
        sock = socket.create_connection(("127.0.0.1", server.ws_port), timeout=10)
        sock.sendall(
            b"GET /amps/json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(4096)
        assert reply.startswith(b"HTTP/1.1 101")
        sock.sendall(
            _ws_frame(1, b"text")
            + command({"c": "logon", "cid": "L", "client_name": "wst", "a": "processed"})
        )
        got = b""
        while b'"c":"ack"' not in got:  # the logon's ack: the framer is idle from here
            got += sock.recv(65536)
        stream = b"".join(command({"c": "p", "t": "wt"}, b'{"n":%d}' % n) for n in range(200))
        sock.sendall(stream + command({"c": "flush", "cid": "F", "a": "completed"}))
        assert [n for _s, _b, n in _deliveries(sub, 200)] == list(range(200))
        got = b""
        while b'"cid":"F"' not in got:
            got += sock.recv(65536)
        # the publishes came this way; at most one command per read went through the framer
        # (one cut by the read's end), and the first read holds many
        assert sum(taken) >= 100
        sock.close()
