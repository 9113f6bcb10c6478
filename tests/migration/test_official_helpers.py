"""The official client's value types and helpers: an empty Message, its setters, the Options
builder, Reason, VersionInfo, FIX/NV-FIX and composite payloads, and the names that refuse."""

from __future__ import annotations

import pytest

from ampsclient import UsageError, compat
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


def test_reason_and_version_info() -> None:
    assert compat.Reason.NotEntitled == "not entitled"
    v = compat.VersionInfo("5.3.5.14")
    assert v.get_version_string() == "5.3.5.14"
    assert v.get_old_style_version() == 5030514
    assert v.get_version_number() == 500030000500014
    v.set_version("5.3.123.4567")
    assert v.get_old_style_version() == 5039999


def test_fix_and_nvfix() -> None:
    b = compat.FIXBuilder()
    b.append(35, "D")
    b.append(11, "abcdef", 1, 3)
    assert b.get_string() == "35=D\x0111=bcd\x01"
    assert compat.FIXShredder().to_map(b.get_string()) == {35: "D", 11: "bcd"}
    n = compat.NVFIXBuilder(b";")
    n.append("a", "b")
    assert n.get_string() == "a=b;"
    assert compat.NVFIXShredder(b";").to_map("a=b;cc=x;") == {"a": "b", "cc": "x"}
    n.reset()
    assert n.get_string() == ""


def test_composite_payloads() -> None:
    data = compat.CompositeMessageBuilder().append("abc").append(b'{"x":1}').get_data()
    assert data == b'\x00\x00\x00\x03abc\x00\x00\x00\x07{"x":1}'
    p = compat.CompositeMessageParser()
    assert p.parse(Message().set_data(data)) == 2 == p.size()
    assert p.get_part(0) == "abc" and p.get_part_raw(1) == b'{"x":1}' and p.get_part(2) is None


def test_ssl_init_takes_a_context_and_refuses_a_dll_path() -> None:
    import ssl

    with pytest.raises(UsageError, match="ssl_context"):
        compat.ssl_init("/usr/lib/libssl.so")
    ctx = ssl.create_default_context()
    compat.ssl_init(ssl_context=ctx)
    try:
        assert compat.ssl_get_context() is ctx
    finally:
        compat._ssl["context"] = None
