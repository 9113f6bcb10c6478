"""The official Client/HAClient methods that ampsclient added for parity, against the reference
server (through a recording proxy where the effect is on the wire)."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import ampsclient as AMPS
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing.proxy import LoopbackProxy
from ampsclient_server_stub.testing.wait import wait_for

pytestmark = pytest.mark.integration


def headers(data: bytes | bytearray) -> list[dict[str, Any]]:
    out = []
    pos = 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        header, _ = json.JSONDecoder().raw_decode(bytes(data[pos + 4 : pos + 4 + n]).decode())
        out.append(header)
        pos += 4 + n
    return out


@pytest.fixture
def proxied(server: ServerThread) -> Iterator[tuple[LoopbackProxy, str]]:
    with LoopbackProxy("127.0.0.1", server.tcp_port, record=True) as proxy:
        yield proxy, f"tcp://127.0.0.1:{proxy.port}/amps/json"


def test_logon_correlation_data_and_transport_filter(proxied: tuple[LoopbackProxy, str]) -> None:
    proxy, uri = proxied
    client = AMPS.Client("official-logon")
    seen: list[tuple[bytes, bool]] = []
    client.set_transport_filter(lambda data, inbound: seen.append((bytes(data), inbound)))
    client.set_logon_correlation_data("Y29ycmVsYXRl")
    assert client.get_logon_correlation_data() == "Y29ycmVsYXRl"
    client.connect(uri)
    client.logon()
    client.publish("filtered", '{"a":1}')
    client.flush(5000)
    try:
        logon = headers(proxy.upstream or b"")[0]
        assert logon["c"] == "logon" and logon["x"] == "Y29ycmVsYXRl"
        sent = b"".join(d for d, inbound in seen if not inbound)
        assert [h["c"] for h in headers(sent)] == ["logon", "p", "flush"]
        received = [d for d, inbound in seen if inbound]
        assert received and all(d.startswith(b'{"c":"ack"') for d in received)
    finally:
        client.close()


def test_send_with_a_built_message_and_message_handlers(server_uri: str) -> None:
    client = AMPS.Client("official-send")
    client.connect(server_uri)
    client.logon()
    got: list[str] = []
    done = threading.Event()

    def on_message(message: AMPS.Message) -> None:
        if message.get_command() == "publish":
            got.append(message.get_data())
            done.set()

    try:
        sub = client.allocate_message()
        sub.set_command("subscribe").set_topic("sent-topic").set_sub_id("sent-sub")
        assert client.send(sub, on_message, 5000) == "sent-sub"
        pub = AMPS.Message().set_command("publish").set_topic("sent-topic").set_data('{"n":1}')
        client.send(pub)
        assert done.wait(5)
        assert got == ['{"n":1}']
        # a handler registered by id takes the deliveries of a subscription sent raw
        other: list[str] = []
        client.add_message_handler("raw-sub", lambda m: other.append(m.get_data()), "", True)
        raw = AMPS.Message().set_command("subscribe").set_topic("raw-topic")
        raw.set_sub_id("raw-sub").set_command_id("raw-sub").set_ack_type("processed")
        client.send(raw, None, 5000)
        client.publish("raw-topic", '{"n":2}')
        wait_for(lambda: other == ['{"n":2}'], what="the raw subscription's delivery")
        assert client.remove_message_handler("raw-sub") is True
        client.publish("raw-topic", '{"n":3}')
        client.publish("sent-topic", '{"n":"marker"}')
        wait_for(lambda: len(got) == 2, what="the marker")
        assert other == ['{"n":2}']  # nothing after the handler was removed
    finally:
        client.close()


def test_settings_with_effect_and_refusals(server_uri: str) -> None:
    client = AMPS.Client("official-settings")
    try:
        client.set_default_max_depth(7)
        client.connect(server_uri)
        client.logon()
        stream = client.subscribe("depth-topic", timeout=5000)
        assert stream.get_max_depth() == 7
        stream.close()
        assert client.getName() == "official-settings" == client.get_name()
        assert client.get_name_hash() == str(client.get_name_hash_value())
        assert AMPS.Client.convert_version_to_number("5.3.5.14") == 5030514
        assert client.get_retry_on_disconnect() is True  # the official default
        client.set_retry_on_disconnect(False)
        assert client.get_retry_on_disconnect() is False
        with pytest.raises(AMPS.UsageError, match="HAClient"):
            client.set_publish_store(AMPS.MemoryPublishStore())
        with pytest.raises(AMPS.UsageError, match="HAClient"):
            client.set_bookmark_store(AMPS.MemoryBookmarkStore())
        with pytest.raises(AMPS.UsageError, match="proxy"):
            client.add_http_preflight_header("Proxy-Authorization: x")
        with pytest.raises(AMPS.UsageError, match="ssl_context"):
            client.get_ssl()
        assert client.get_unpersisted_count() == 0
        client.publish_flush(5000)  # no store: the flush command
        # the official keyword names, where the official methods take keywords
        acks: list[str] = []
        client.set_global_command_type_message_handler(
            command="ack", message_handler=lambda m: acks.append(m.get_ack_type() or "")
        )
        client.set_heartbeat(interval_seconds=30, timeout_seconds=60)
        sub = AMPS.Command("subscribe").set_topic("kw-topic").set_sub_id("kw-sub")
        assert client.execute_async(command=sub, on_message=lambda m: None) == "kw-sub"
        assert "processed" in acks
        ran: list[str] = []
        client.set_thread_created_callback(lambda: ran.append(threading.current_thread().name))
        assert ran and ran[0].startswith("ampsclient")
    finally:
        client.close()


def test_ha_client_official_settings(proxied: tuple[LoopbackProxy, str]) -> None:
    proxy, uri = proxied
    with pytest.raises(AMPS.UsageError, match="no_store"):
        AMPS.HAClient("no-store", None, None, True)
    client = AMPS.HAClient("official-ha")
    try:
        store = AMPS.MemoryPublishStore()
        client.set_publish_store(store)
        assert client.publish_store is store
        client.set_logon_options("ack_conflation=10ms")
        assert client.get_logon_options() == "ack_conflation=10ms"
        client.set_timeout(3000)
        client.set_error_on_publish_gap(True)
        assert client.get_error_on_publish_gap() is True
        chooser = AMPS.DefaultServerChooser()
        chooser.add(uri)
        client.set_server_chooser(chooser)
        client.connect_and_logon()
        assert headers(proxy.upstream or b"")[0]["o"] == "ack_conflation=10ms"
        client.publish("ha-topic", '{"n":1}')
        client.publish_flush(5000, AMPS.Message.AckType.ProcessedEnum)
        assert store.get_unpersisted_count() == 0
        with pytest.raises(AMPS.UsageError, match="before connecting"):
            client.set_publish_store(AMPS.MemoryPublishStore())
    finally:
        client.close()
    official_form = AMPS.HAClient("official-ha-connect")
    try:
        chooser = AMPS.DefaultServerChooser()
        chooser.add(uri)
        official_form.set_server_chooser(chooser)
        official_form.connect()  # the official HAClient: connect() is connect_and_logon()
        assert official_form.logon() == ""  # and logon() has nothing left to do
        official_form.publish("ha-topic", '{"n":2}')
        official_form.publish_flush(5000)
        assert official_form.get_unpersisted_count() == 0
    finally:
        official_form.close()
    AMPS.HAClient.set_default_resubscription_timeout(1234)
    try:
        other = AMPS.HAClient("official-ha-2")
        assert other.get_resubscription_timeout() == 1234
        other.close()
    finally:
        AMPS.HAClient.set_default_resubscription_timeout(0)


def test_ha_client_path_stores_are_the_official_file_stores(tmp_path: Any) -> None:
    path = str(tmp_path / "bookmarks.mmap")
    client = AMPS.HAClient("official-paths", str(tmp_path / "publish.store"), path)
    try:
        assert isinstance(client.bookmark_store, AMPS.MMapBookmarkStore)
        assert isinstance(client.publish_store, AMPS.PublishStore)
        assert (tmp_path / "bookmarks.mmap").exists()
    finally:
        client.close()
