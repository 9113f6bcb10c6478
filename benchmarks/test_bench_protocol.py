"""pytest-benchmark: the pure protocol core (header codec, framer, lazy messages)."""

from __future__ import annotations

from typing import Any

from ampsclient.protocol import (
    Message,
    TcpFramer,
    decode_header,
    encode_header,
    find_sids,
    tcp_frame,
)

DELIVERY = b'{"c":"p","t":"orders","sids":"auto1","bm":"10620414156524534001|3|","s":7}{"id":1}'
ACK = {"c": "ack", "a": "persisted", "s": 1795334494549000001, "status": "success"}


def test_encode_header(benchmark: Any) -> None:
    assert benchmark(encode_header, ACK).startswith(b'{"c":"ack"')


def test_decode_header(benchmark: Any) -> None:
    header, _ = benchmark(decode_header, DELIVERY)
    assert header["sids"] == "auto1"


def test_find_sids(benchmark: Any) -> None:
    assert benchmark(find_sids, DELIVERY) == "auto1"


def test_message_data(benchmark: Any) -> None:
    assert benchmark(lambda: Message(DELIVERY).data) == b'{"id":1}'


def test_tcp_framer_10k_frames(benchmark: Any) -> None:
    stream = tcp_frame(DELIVERY) * 10_000

    def run() -> int:
        framer = TcpFramer()
        total = 0
        for i in range(0, len(stream), 65536):
            framer.receive_data(stream[i : i + 65536])
            total += len(framer.frames())
        return total

    assert benchmark(run) == 10_000
