"""The official client's spellings on ``Message`` (:mod:`ampsclient.protocol.message_api`): an
empty Message, its setters, a received message's absent fields, the Options builder and the
constants, and ``ack`` refused without a delivering client."""

from __future__ import annotations

import pytest

from ampsclient import UsageError
from ampsclient.protocol.message import Message


def test_an_empty_message_reads_empty_like_the_official() -> None:
    m = Message()
    for name in ("topic", "bookmark", "sub_id", "command", "sequence", "options", "sow_key"):
        assert getattr(m, f"get_{name}")() == "", name
    assert m.get_data() == "" and m.get_data_raw() == b""
    assert m.getTopic() == "" and m.topic == ""
    assert m.get_bookmark_seq_no() == 0


def test_setters_chain_and_round_trip() -> None:
    m = Message().set_topic("orders").set_command("publish").set_data('{"a":1}')
    m.setSequence(7)
    m.set_sow_key("k1")
    assert (m.get_topic(), m.get_command(), m.get_sequence(), m.get_sow_key()) == (
        "orders",
        "publish",
        7,
        "k1",
    )
    assert m.header == {"t": "orders", "c": "p", "s": 7, "k": "k1"}
    assert m.get_data() == '{"a":1}'
    m.set_topic(None)
    assert m.get_topic() == ""
    m.reset()
    assert m.header == {} and m.get_data_raw() == b""


def test_a_received_message_keeps_none_for_absent_fields() -> None:
    m = Message(b'{"c":"p","t":"x","sids":"s1"}body')
    assert m.get_bookmark() is None and m.get_topic() == "x" and m.get_data() == "body"


def test_message_ack_needs_a_delivering_client() -> None:
    with pytest.raises(UsageError, match=r"client\.ack"):
        Message().set_topic("q").set_bookmark("1|1|").ack()


def test_options_builder_and_constants() -> None:
    opts = Message.Options().set_max_backlog(5).set_OOF().set_top_n(3)
    assert str(opts) == "max_backlog=5,oof,top_n=3"
    assert Message.Options.OOF == "oof,"
    assert Message.AckType.Persisted == "persisted"
    assert Message.AckType.PersistedEnum == 8
    assert Message.Command.SOWAndSubscribe == "sow_and_subscribe"
