"""The queue acknowledgement's fast parse gives the header the general parse gives, or None."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient.protocol.header import decode_header, encode_header
from ampsclient_server_stub.engine.wire import parse_queue_ack

# what both clients send (../shared/queues.md §10), and look-alikes the fast parse must refuse
OFFICIAL = b'{"c":"sow_delete","t":"q","cid":"AMPS-queue-ack","bookmark":"1|1|,1|2|"}'
REFUSED = [
    b'{"c":"sow_delete","t":"q","cid":"AMPS-queue-ack","bookmark":"1|1|","o":"cancel"}',
    b'{"c":"sow_delete","t":"q","cid":"x","a":"persisted","s":7,"bookmark":"1|1|"}',
    b'{"c":"sow_delete","t":"q","cid":"x","bm":"1|1|"}',  # the short key: general parse
    b'{"c":"sow_delete","t":"q","cid":"x","bookmark":"1|1|"}{"a":1}',  # a body
    b'{"c":"sow_delete","t":"","cid":"x","bookmark":"1|1|"}',  # no topic
    b'{"c":"sow_delete","t":"q\\"x","cid":"x","bookmark":"1|1|"}',  # an escape
    b'{"c":"sow_delete","t":"q","cid":"x","bookmark":"1|1|","x":"y"}',
    b'{"c":"sow_delete","t":"q","cid":"x","bookmark":"a"b"}',
    b'{"c":"sow_delete","t":"q","cid":"x","bookmark":"\xff"}',  # not UTF-8
    b'{"c":"sow_delete","t":"q","cid":"x"}',
    b'{"c":"p","t":"q","cid":"x","bookmark":"1|1|"}',
]


def test_the_clients_shape_is_parsed_as_the_general_parse_does() -> None:
    assert parse_queue_ack(OFFICIAL) == decode_header(OFFICIAL)
    hdr, end = decode_header(OFFICIAL)
    assert hdr["bm"] == "1|1|,1|2|" and end == len(OFFICIAL)


@pytest.mark.parametrize("payload", REFUSED)
def test_other_shapes_are_left_to_the_general_parse(payload: bytes) -> None:
    assert parse_queue_ack(payload) is None


_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters='"\\'), max_size=12
)


@settings(max_examples=300, deadline=None)
@given(topic=_text, cid=_text, bookmarks=st.lists(_text, min_size=1, max_size=5))
def test_any_ack_the_encoder_makes_parses_the_same_both_ways(
    topic: str, cid: str, bookmarks: list[str]
) -> None:
    payload = encode_header(
        {"c": "sow_delete", "t": topic, "cid": cid, "bookmark": ",".join(bookmarks)}
    )
    fast = parse_queue_ack(payload)
    if fast is not None:
        assert fast == decode_header(payload)
    else:  # refused: only for what the encoder escapes, or an empty topic
        assert topic == "" or b"\\" in payload
