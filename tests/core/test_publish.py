"""Golden bytes for the publish frame: the core's one encoder (:mod:`ampsclient.core.publish`)
and :meth:`ClientCore.publish`, with no socket.

Each case is a literal frame built from protocol.md §4.1 (``{"c":"p","t":"T"}BODY``; options
``"e":"5000"``, ``"x":"corr1"``, ``"k":"k1"``; ``delta_publish`` spelled in full; a stored
publish's ``s`` a bare integer with ``"a":"persisted"``), for every option combination the
client sends, as a TCP frame (4-byte big-endian length) and as the WebSocket messages the ws
transport sends for it (protocol.md §12: count, header, body).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from ampsclient.core import ClientCore, LogonAcked, encode_publish, publish_frame, publish_header
from ampsclient.exceptions import DisconnectedError, LocalProtocolError, UsageError
from ampsclient.stores.publish.base import join_seq
from ampsclient.transport.ws import ws_messages

SEQ = 1795334494549000001
BODY = b'{"id":1}'

GOLDEN: list[tuple[str, dict[str, Any], bytes]] = [
    ("publish", dict(), b'{"c":"p","t":"orders"}'),
    ("publish", dict(expiration=5000), b'{"c":"p","t":"orders","e":"5000"}'),
    ("publish", dict(correlation_id="corr1"), b'{"c":"p","t":"orders","x":"corr1"}'),
    ("publish", dict(sow_key="k1"), b'{"c":"p","t":"orders","k":"k1"}'),
    (
        "publish",
        dict(expiration=5000, correlation_id="corr1"),
        b'{"c":"p","t":"orders","e":"5000","x":"corr1"}',
    ),
    ("publish", dict(expiration=5000, sow_key="k1"), b'{"c":"p","t":"orders","e":"5000","k":"k1"}'),
    (
        "publish",
        dict(correlation_id="corr1", sow_key="k1"),
        b'{"c":"p","t":"orders","x":"corr1","k":"k1"}',
    ),
    (
        "publish",
        dict(expiration=5000, correlation_id="corr1", sow_key="k1"),
        b'{"c":"p","t":"orders","e":"5000","x":"corr1","k":"k1"}',
    ),
    (
        "publish",
        dict(sequence=SEQ, ack_type="persisted"),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders"}',
    ),
    (
        "publish",
        dict(expiration=5000, sequence=SEQ, ack_type="persisted"),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000"}',
    ),
    (
        "publish",
        dict(correlation_id="corr1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders","x":"corr1"}',
    ),
    (
        "publish",
        dict(sow_key="k1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders","k":"k1"}',
    ),
    (
        "publish",
        dict(expiration=5000, correlation_id="corr1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000","x":"corr1"}',
    ),
    (
        "publish",
        dict(expiration=5000, sow_key="k1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000","k":"k1"}',
    ),
    (
        "publish",
        dict(correlation_id="corr1", sow_key="k1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders","x":"corr1","k":"k1"}',
    ),
    (
        "publish",
        dict(
            expiration=5000,
            correlation_id="corr1",
            sow_key="k1",
            sequence=SEQ,
            ack_type="persisted",
        ),
        b'{"c":"p","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000","x":"corr1","k":"k1"}',
    ),
    ("delta_publish", dict(), b'{"c":"delta_publish","t":"orders"}'),
    ("delta_publish", dict(expiration=5000), b'{"c":"delta_publish","t":"orders","e":"5000"}'),
    (
        "delta_publish",
        dict(correlation_id="corr1"),
        b'{"c":"delta_publish","t":"orders","x":"corr1"}',
    ),
    ("delta_publish", dict(sow_key="k1"), b'{"c":"delta_publish","t":"orders","k":"k1"}'),
    (
        "delta_publish",
        dict(expiration=5000, correlation_id="corr1"),
        b'{"c":"delta_publish","t":"orders","e":"5000","x":"corr1"}',
    ),
    (
        "delta_publish",
        dict(expiration=5000, sow_key="k1"),
        b'{"c":"delta_publish","t":"orders","e":"5000","k":"k1"}',
    ),
    (
        "delta_publish",
        dict(correlation_id="corr1", sow_key="k1"),
        b'{"c":"delta_publish","t":"orders","x":"corr1","k":"k1"}',
    ),
    (
        "delta_publish",
        dict(expiration=5000, correlation_id="corr1", sow_key="k1"),
        b'{"c":"delta_publish","t":"orders","e":"5000","x":"corr1","k":"k1"}',
    ),
    (
        "delta_publish",
        dict(sequence=SEQ, ack_type="persisted"),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders"}',
    ),
    (
        "delta_publish",
        dict(expiration=5000, sequence=SEQ, ack_type="persisted"),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000"}',
    ),
    (
        "delta_publish",
        dict(correlation_id="corr1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders","x":"corr1"}',
    ),
    (
        "delta_publish",
        dict(sow_key="k1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders","k":"k1"}',
    ),
    (
        "delta_publish",
        dict(expiration=5000, correlation_id="corr1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000","x":"corr1"}',
    ),
    (
        "delta_publish",
        dict(expiration=5000, sow_key="k1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000","k":"k1"}',
    ),
    (
        "delta_publish",
        dict(correlation_id="corr1", sow_key="k1", sequence=SEQ, ack_type="persisted"),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders","x":"corr1","k":"k1"}',
    ),
    (
        "delta_publish",
        dict(
            expiration=5000,
            correlation_id="corr1",
            sow_key="k1",
            sequence=SEQ,
            ack_type="persisted",
        ),
        b'{"c":"delta_publish","s":1795334494549000001,"a":"persisted","t":"orders","e":"5000","x":"corr1","k":"k1"}',
    ),
]


def tcp(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.parametrize(("command", "options", "header"), GOLDEN)
def test_every_option_combination_as_a_tcp_frame(
    command: str, options: dict[str, Any], header: bytes
) -> None:
    assert encode_publish(command, "orders", BODY, **options) == tcp(header + BODY)


@pytest.mark.parametrize(("command", "options", "header"), GOLDEN)
def test_head_and_tail_splice_the_sequence_as_the_stores_do(
    command: str, options: dict[str, Any], header: bytes
) -> None:
    """``(head, tail)``: what a publish store joins around the sequence it allocates
    (``join_seq``), or, with no sequence, the whole header and nothing."""
    options = dict(options)
    seq = options.pop("sequence", None)
    head, tail = publish_header(command, "orders", sequenced=seq is not None, **options)
    if seq is None:
        assert (head, tail) == (header, b"")
    else:
        assert head == b'{"c":"%s","s":' % (b"p" if command == "publish" else b"delta_publish")
        assert join_seq(head, seq, tail + BODY) == header + BODY
    assert publish_frame(head, seq, tail, BODY) == tcp(header + BODY)


@pytest.mark.parametrize(("command", "options", "header"), GOLDEN)
@pytest.mark.parametrize("text", [True, False])
def test_what_the_ws_transport_sends(
    command: str, options: dict[str, Any], header: bytes, text: bool
) -> None:
    """The ws transport turns the TCP frame into three messages: the count (2,
    little-endian), the header and the body (text in a text session)."""
    frame = encode_publish(command, "orders", BODY, **options)
    assert ws_messages(frame, text) == [(b"\x02\x00\x00\x00", False), (header, text), (BODY, text)]


def test_p_and_publish_are_one_command() -> None:
    assert encode_publish("p", "orders", BODY) == encode_publish("publish", "orders", BODY)


def test_an_empty_body_and_sequence_zero() -> None:
    assert encode_publish("publish", "orders", b"") == tcp(b'{"c":"p","t":"orders"}')
    assert encode_publish("publish", "t", b"x", sequence=0, ack_type="persisted") == tcp(
        b'{"c":"p","s":0,"a":"persisted","t":"t"}x'
    )


def test_quotes_and_backslashes_are_escaped_and_utf8_is_raw() -> None:
    """protocol.md §1.1: the client escapes ``"`` and ``\\`` and leaves UTF-8 raw."""
    got = encode_publish(
        "publish", 'a"b\\c', BODY, correlation_id="é\t", sow_key='k"', expiration=-1
    )
    assert got == tcp(b'{"c":"p","t":"a\\"b\\\\c","e":"-1","x":"\xc3\xa9\t","k":"k\\""}' + BODY)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("the topic", {"topic": "t\ud800"}),
        ("the correlation id", {"correlation_id": "\ud800"}),
        ("the SOW key", {"sow_key": "\ud800"}),
    ],
)
def test_text_utf8_cannot_encode_is_refused_naming_the_field(
    field: str, kwargs: dict[str, Any]
) -> None:
    args = {"topic": "t", **kwargs}
    with pytest.raises(LocalProtocolError, match=field):
        encode_publish("publish", args.pop("topic"), BODY, **args)


def test_a_command_that_is_not_a_publish_is_refused() -> None:
    with pytest.raises(UsageError, match="not a publish command: 'sow_delete'"):
        publish_header("sow_delete", "orders")


# ------------------------------------------------------------------------ ClientCore.publish


def logged_on() -> ClientCore:
    core = ClientCore()
    core.connection_made()
    cid = core.send_logon(client_name="c1", user="u", password=None, message_type="json")
    core.data_to_send()
    payload = b'{"c":"ack","cid":"%s","a":"processed","status":"success"}' % cid.encode()
    core.receive_data(tcp(payload))
    assert isinstance(core.events_received()[-1], LogonAcked)
    return core


def test_the_core_queues_every_golden_publish_in_order() -> None:
    core = logged_on()
    sends: list[None] = []
    core.on_send = lambda: sends.append(None)
    for command, options, _header in GOLDEN:
        core.publish("orders", BODY, command=command, **options)
    assert core.data_to_send() == [tcp(header + BODY) for _c, _o, header in GOLDEN]
    assert sends == []  # a publish does not end a publish batch: the wing's writer wakes itself
    assert core.events_received() == []


def test_the_core_refuses_a_publish_while_disconnected_and_queues_nothing() -> None:
    core = ClientCore()
    with pytest.raises(DisconnectedError):
        core.publish("orders", BODY)
    core = logged_on()
    with pytest.raises(LocalProtocolError):
        core.publish("t\ud800", BODY)
    assert core.data_to_send() == []
