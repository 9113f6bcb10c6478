"""With ``<Admin><Certificate>`` and ``<PrivateKey>`` the admin interface is served over HTTPS,
as AMPS documents (configuration guide, "Admin Server and Statistics"); issue 31."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from pathlib import Path

import pytest
from _tls_certs import make_certs

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config

pytestmark = pytest.mark.integration


def xml(admin: str) -> str:
    return f"""<AMPSConfig><Name>https-admin</Name><Transports><Transport><Name>tcp</Name>
      <Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
      <Admin><InetAddr>127.0.0.1:0</InetAddr>{admin}</Admin></AMPSConfig>"""


def test_admin_over_https(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    config = parse_config(
        xml(
            f"<Certificate>certs/{certs.server_cert.name}</Certificate>"
            f"<PrivateKey>{certs.server_key}</PrivateKey>"
        ),
        base_dir=tmp_path,
    )
    with ServerThread(config) as thread:
        admin = thread.server.admin
        assert admin is not None and admin.url.startswith("https://127.0.0.1:")
        port = admin.port
        context = ssl.create_default_context(cafile=str(certs.ca))
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
        try:
            conn.request("GET", "/amps/administrator")
            response = conn.getresponse()
            token = json.loads(response.read())["token"]
            assert response.status == 200
            conn.request(
                "POST",
                "/amps/administrator/clients/nobody/disconnect",
                body=b"",
                headers={"X-AMPS-Admin-Token": token},
            )
            response = conn.getresponse()
            assert response.status == 404  # the action ran and found no such client
            assert b"no client" in response.read()
        finally:
            conn.close()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
            plain.sendall(b"GET /amps HTTP/1.1\r\nHost: localhost\r\n\r\n")
            try:
                answer = plain.recv(100)
            except ConnectionResetError:
                answer = b""
            assert not answer.startswith(b"HTTP/1.1 200")  # no plain HTTP on that port


@pytest.mark.parametrize(
    ("admin", "message"),
    [
        ("<PrivateKey>k.pem</PrivateKey>", "needs a <Certificate>"),
        ("<Certificate>missing.pem</Certificate>", "cannot load"),
    ],
)
def test_bad_https_settings_are_refused(tmp_path: Path, admin: str, message: str) -> None:
    thread = ServerThread(parse_config(xml(admin), base_dir=tmp_path))
    with pytest.raises(ConfigError, match=message):
        try:
            thread.start()
        finally:
            thread.stop()
