"""The official client's helpers (:mod:`ampsclient.compat`): Reason, VersionInfo, FIX/NV-FIX and
composite payloads, and ``ssl_init``, which refuses a library path."""

from __future__ import annotations

import pytest

from ampsclient import UsageError, compat
from ampsclient.protocol.message import Message


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
