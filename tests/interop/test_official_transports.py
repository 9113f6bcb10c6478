"""The official AMPS Python client over unix:// and compression=zlib against a reference server
in a child process (issue 33).

Observed from the official client (5.3.5.14), black-box: ``compression=zlib`` makes it send one
raw DEFLATE stream from its very first byte (no zlib header), each write sync-flushed; it
accepts only a raw DEFLATE answer. ``unix://localhost:0/amps/json?path=...`` reaches a unix
socket; it refuses ``compression`` on unix:// ("The URI specified invalid properties").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub.harness import ServerProcess, free_port
from ampsclient_server_stub.testing import wait_for

AMPS: Any = pytest.importorskip("AMPS")

pytestmark = [pytest.mark.interop, pytest.mark.integration]

CONFIG = """<AMPSConfig>
  <Name>official-transports</Name>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic></SOW>
  <Transports>
    <Transport><Name>zipped</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol><Compression>zlib</Compression></Transport>
    <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
    <Transport><Name>plain</Name><Type>tcp</Type><InetAddr>127.0.0.1:{plain}</InetAddr>
      <Protocol>amps</Protocol></Transport>
    <Transport><Name>local</Name><Type>unix</Type><Path>{sock}</Path></Transport>
  </Transports>
</AMPSConfig>
"""


@pytest.fixture(scope="module")
def uris(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    base = tmp_path_factory.mktemp("official-transports")
    sock = base / "amps.sock"
    plain = free_port()
    config = base / "config.xml"
    config.write_text(CONFIG.format(plain=plain, sock=sock))
    with ServerProcess(config=config, data_dir=base / "data") as proc:
        yield {
            "zlib": proc.uri("tcp") + "?compression=zlib",
            "plain": f"tcp://127.0.0.1:{plain}/amps/json",
            "unix": f"unix://localhost:0/amps/json?path={sock}",
        }


def _client(uri: str, prefix: str) -> Any:
    client = AMPS.Client(f"{prefix}-{time.time_ns()}")
    client.connect(uri)
    client.logon(5000)
    return client


@pytest.mark.parametrize("kind", ["zlib", "unix"])
def test_official_client_round_trip(uris: dict[str, str], kind: str) -> None:
    uri = uris[kind]
    got: list[int] = []
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        with lock:
            got.append(json.loads(message.get_data())["n"])

    sub = _client(uri, f"off-{kind}-sub")
    pub = _client(uri, f"off-{kind}-pub")
    try:
        topic = f"official-{kind}"
        sub.subscribe(on_message, topic)
        for i in range(2000):
            pub.publish(topic, json.dumps({"n": i, "pad": "y" * (i % 40)}))
        pub.publish_flush(10_000)
        wait_for(lambda: len(got) >= 2000, timeout=20, what="2000 deliveries")
        assert got == list(range(2000))  # one by one: none lost, none twice, in order
        for i in range(3):
            pub.publish("orders", json.dumps({"id": i, "via": kind}))
        pub.publish_flush(5000)
        rows = [
            json.loads(m.get_data())["id"]
            for m in sub.sow("orders", f"/via = '{kind}'")
            if m.get_command() == "sow"
        ]
        assert sorted(rows) == [0, 1, 2]
    finally:
        sub.disconnect()
        pub.disconnect()


def test_official_compressed_client_against_a_plain_transport_fails(
    uris: dict[str, str],
) -> None:
    client = AMPS.Client(f"off-refused-{time.time_ns()}")
    client.connect(uris["plain"] + "?compression=zlib")
    with pytest.raises(AMPS.AMPSException):
        client.logon(5000)
    plain = _client(uris["plain"], "off-after")  # the server still serves others
    plain.disconnect()


def test_official_client_refuses_compression_on_unix(uris: dict[str, str]) -> None:
    client = AMPS.Client(f"off-unix-zlib-{time.time_ns()}")
    with pytest.raises(AMPS.InvalidUriException):
        client.connect(uris["unix"] + "&compression=zlib")
    assert Path(uris["unix"].split("path=")[1]).exists()
