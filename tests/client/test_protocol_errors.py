"""Local and remote protocol errors, split as h11 splits them.

A :class:`RemoteProtocolError` is the peer's fault: bytes received that are not AMPS (the
framers, the header decoder, the inflater). A :class:`LocalProtocolError` is ours: the
application asked to send something AMPS cannot carry (text UTF-8 cannot encode, an object
the message type cannot encode); it is raised before anything is queued, so the connection
goes on. Both are a ``ProtocolError`` (the official client's ``StreamException``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ampsclient import Client, Command, HAClient, Message
from ampsclient.exceptions import (
    CompressionError,
    FrameTooLargeError,
    LocalProtocolError,
    MalformedFrameError,
    ProtocolError,
    RemoteProtocolError,
    StreamException,
)
from ampsclient.protocol.compression import ZlibStream
from ampsclient.protocol.framing import TcpFramer, WsClientFramer
from ampsclient.protocol.header import decode_header, encode_header
from ampsclient_server_stub.testing import wait_for

LONE = "\ud800"  # a lone surrogate: a valid Python str, no UTF-8 form


def test_the_split_under_the_official_name() -> None:
    assert ProtocolError is StreamException
    for cls in (LocalProtocolError, RemoteProtocolError):
        assert issubclass(cls, StreamException)
    for cls in (FrameTooLargeError, MalformedFrameError, CompressionError):
        assert issubclass(cls, RemoteProtocolError)
        assert not issubclass(cls, LocalProtocolError)
    assert issubclass(LocalProtocolError, ValueError)  # what UnicodeEncodeError was


def test_received_bytes_that_are_not_amps_are_remote() -> None:
    framer = TcpFramer(max_frame_size=100)
    with pytest.raises(RemoteProtocolError):
        framer.receive_data(b"\x00\x00\x10\x00{}")
    with pytest.raises(RemoteProtocolError):
        decode_header(b'{"c":"p","t":')
    with pytest.raises(RemoteProtocolError):
        WsClientFramer().receive_message(b"\x01")
    with pytest.raises(RemoteProtocolError):
        ZlibStream().decompress(b"\xff\xff\xff not deflate")


def test_a_header_we_cannot_encode_is_local_and_names_the_field() -> None:
    with pytest.raises(LocalProtocolError, match="header field 'filter'") as info:
        encode_header({"c": "subscribe", "t": "t", "filter": f"/a = '{LONE}'"})
    assert isinstance(info.value.__cause__, UnicodeEncodeError)
    with pytest.raises(LocalProtocolError, match="the data"):
        Command("publish").set_topic("t").set_data(LONE)


@pytest.mark.integration
def test_what_we_cannot_send_is_refused_and_the_connection_goes_on(server: Any) -> None:
    uri = server.uri("tcp", "json")
    got: list[Message] = []
    with Client("local-errors") as client:
        client.connect(uri)
        client.logon(5000)
        client.subscribe(got.append, "local-t", timeout=5000)
        refused: list[Any] = [
            lambda: client.publish("local-t", "{" + LONE + "}"),  # data
            lambda: client.publish("local-" + LONE, "{}"),  # topic
            lambda: client.publish("local-t", "{}", correlation_id=LONE),  # a header field
            lambda: client.delta_publish("local-t", LONE),
            lambda: client.publish("local-t", {"not json": object()}),  # an object
            lambda: client.subscribe(lambda m: None, "local-t", f"/a = '{LONE}'", timeout=5000),
        ]
        for call in refused:
            with pytest.raises(LocalProtocolError):
                call()
        for i in range(3):  # the connection is intact: these arrive, and nothing else did
            client.publish("local-t", json.dumps({"i": i}))
        wait_for(lambda: len(got) >= 3, timeout=20.0, what="3 messages after the refusals")
        client.flush(10000)
        assert [m.json() for m in got] == [{"i": 0}, {"i": 1}, {"i": 2}]


@pytest.mark.integration
def test_the_ha_client_refuses_before_storing(server: Any) -> None:
    got: list[Message] = []
    with Client("local-sub") as sub, HAClient("local-ha") as ha:
        sub.connect(server.uri("tcp", "json"))
        sub.logon(5000)
        sub.subscribe(got.append, "local-ha-t", timeout=5000)
        ha.get_server_chooser().add(server.uri("tcp", "json"))
        ha.connect_and_logon()
        for call in (
            lambda: ha.publish("local-ha-t", "{" + LONE + "}"),
            lambda: ha.publish("local-ha-" + LONE, "{}"),
            lambda: ha.publish("local-ha-t", "{}", correlation_id=LONE),
        ):
            with pytest.raises(LocalProtocolError):
                call()
        assert ha.get_unpersisted_count() == 0  # nothing was stored
        seqs = [ha.publish("local-ha-t", json.dumps({"i": i})) for i in range(3)]
        assert seqs == sorted(seqs) and len(set(seqs)) == 3
        ha.publish_flush(10000)
        wait_for(lambda: len(got) >= 3, timeout=20.0, what="3 HA messages after the refusals")
        assert [m.json() for m in got] == [{"i": 0}, {"i": 1}, {"i": 2}]
