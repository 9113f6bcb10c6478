"""Ack types (:mod:`ampsclient.protocol.acks`): the flags and their text, both ways."""

from __future__ import annotations

from ampsclient.protocol import AckType, format_ack_types, parse_ack_types


def test_ack_types() -> None:
    flags = parse_ack_types("processed,completed")
    assert flags == AckType.PROCESSED | AckType.COMPLETED
    assert format_ack_types(flags | AckType.RECEIVED) == "received,processed,completed"
    assert parse_ack_types("") == AckType.NONE
    assert format_ack_types(AckType.NONE) == ""
