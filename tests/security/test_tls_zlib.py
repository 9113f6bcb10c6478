"""compression=zlib over tcps: the deflate stream inside TLS, our client and the official one
against a tcps transport with <Compression>zlib</Compression> (issue 33)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from _tls_certs import Certs, make_certs

from ampsclient import Client, client_context
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import Inbox

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _server(certs: Certs, tmp: Path) -> ServerThread:
    xml = f"""<AMPSConfig><Name>tlszlib</Name><Transports>
      <Transport><Name>tcps</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Certificate>{certs.server_cert}</Certificate><PrivateKey>{certs.server_key}</PrivateKey>
        <Compression>zlib</Compression></Transport>
    </Transports></AMPSConfig>"""
    return ServerThread(parse_config(xml, base_dir=tmp)).start()


def test_compressed_tcps_round_trip(certs: Certs, tmp_path: Path) -> None:
    server = _server(certs, tmp_path)
    try:
        uri = server.uri("tcps") + "?compression=zlib"
        ctx = client_context(cafile=certs.ca)
        inbox = Inbox()
        with Client("tz-sub", ssl_context=ctx) as sub, Client("tz-pub", ssl_context=ctx) as pub:
            sub.connect(uri, timeout=5)
            sub.logon(5000)
            pub.connect(uri, timeout=5)
            pub.logon(5000)
            sub.subscribe(inbox, "tz")
            for i in range(1000):
                pub.publish("tz", json.dumps({"n": i}))
            pub.publish_flush(10_000)
            inbox.wait_messages(1000, timeout=20)
        assert inbox.ns() == list(range(1000))
    finally:
        server.stop()


def test_official_client_compressed_over_tcps(certs: Certs, tmp_path: Path) -> None:
    amps: Any = pytest.importorskip("AMPS")
    server = _server(certs, tmp_path)
    try:
        uri = server.uri("tcps") + "?compression=zlib"
        libssl = Path("/usr/lib/x86_64-linux-gnu/libssl.so.3")
        if not libssl.exists():
            pytest.skip("the official client loads OpenSSL from a path: libssl.so.3 not found")
        amps.ssl_init(str(libssl))
        client = amps.Client(f"tz-official-{time.time_ns()}")
        client.connect(uri)
        client.logon(5000)
        client.publish("tz-off", json.dumps({"n": 1}))
        client.publish_flush(5000)
        client.disconnect()
    finally:
        server.stop()
