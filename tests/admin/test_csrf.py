"""Admin actions need the admin token and a same-origin request; every request needs a ``Host``
that names the interface (issue 31: a cross-site GET cut the journal, DNS rebinding read client
names). Real server, real HTTP over 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampsclient import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.admin.origin import RequestOrigin, is_loopback
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.net.exposure import warn_if_exposed

from ._support import admin_port, admin_token, get_json, request, with_admin

pytestmark = pytest.mark.integration

SMALL_JOURNAL = """
<AMPSConfig>
  <Name>csrf</Name>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports>
  <TransactionLog>
    <JournalDirectory>journal</JournalDirectory>
    <JournalSize>16KB</JournalSize>
    <Topic><Name>.*</Name></Topic>
  </TransactionLog>
  <Admin><InetAddr>127.0.0.1:0</InetAddr><AllowedHosts>amps-admin.example.org</AllowedHosts>
  </Admin>
</AMPSConfig>
"""

REMOVE = "/amps/administrator/journal/remove?age=0s"


def test_cross_site_actions_are_refused_and_the_journal_stays(tmp_path: Path) -> None:
    config = parse_config(SMALL_JOURNAL, base_dir=tmp_path)
    with ServerThread(config) as thread:
        port = admin_port(thread)
        with HAClient("filler") as pub:
            pub.get_server_chooser().add(thread.uri())
            pub.connect_and_logon()
            for n in range(600):  # several sealed 16 KB files
                pub.publish("fill", json.dumps({"n": n, "pad": "x" * 60}))
            pub.publish_flush(10_000)
        first = get_json(port, "/amps/instance/journal")["first_index"]
        named = {"Host": f"amps-admin.example.org:{port}"}  # <AllowedHosts>
        assert request(port, "/amps/instance/name", headers=named)[0] == 200
        assert request(port, "/amps/instance/name", headers={"Host": "other.example"})[0] == 421
        token = admin_token(port)
        here = {"Host": f"127.0.0.1:{port}"}
        attempts = [
            ("GET", {}),  # what an <img src> of another page sends (no token)
            ("POST", {}),  # a cross-site form
            ("GET", {"Sec-Fetch-Site": "cross-site", "X-AMPS-Admin-Token": token}),
            ("POST", {"Origin": "http://evil.example", "X-AMPS-Admin-Token": token}),
            ("POST", {"Origin": "null", "X-AMPS-Admin-Token": token}),
            ("POST", {"X-AMPS-Admin-Token": "guessed"}),
        ]
        for method, headers in attempts:
            status, _, body = request(
                port,
                REMOVE,
                method=method,
                headers={**here, **headers},
                body=b"" if method == "POST" else None,
            )
            assert status == 403, (method, headers, status, body)
        assert b"admin token" in request(port, REMOVE)[2]  # the refusal says what to do
        journal = get_json(port, "/amps/instance/journal")
        assert journal["first_index"] == first  # nothing was removed
        assert sum(s["state"] == "sealed" for s in journal["segments"].values()) >= 2
        # the operator's own requests: AMPS' GET form with the token, and a same-origin POST
        status, _, body = request(
            port, f"/amps/administrator/journal/compress?age=1d&token={token}"
        )
        assert status == 200, body
        status, _, body = request(
            port,
            REMOVE,
            method="POST",
            body=b"",
            headers={
                "Origin": f"http://127.0.0.1:{port}",
                "Sec-Fetch-Site": "same-origin",
                "X-AMPS-Admin-Token": token,
            },
        )
        assert status == 200, body
        assert json.loads(body)["result"]  # now the sealed files go
        assert get_json(port, "/amps/instance/journal")["first_index"] > first
        status, _, body = request(
            port,
            "/amps/administrator/journal/compress?age=1d",
            method="POST",
            body=f"token={token}".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert status == 200, body  # a plain HTML form of the operator's


def test_host_must_name_the_interface() -> None:
    with ServerThread(with_admin(extra={"AllowedHosts": "ops.example.org, other.example"})) as t:
        port = admin_port(t)
        for host in ("evil.example", f"evil.example:{port}", f"rebind.attacker.test:{port}"):
            status, _, body = request(port, "/amps/instance/clients", headers={"Host": host})
            assert status == 421, (host, status)
            assert b"AllowedHosts" in body
        assert request(port, "/", headers={"Host": "evil.example"})[0] == 421
        ok = ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}",
              "ops.example.org", f"OTHER.example:{port}", "10.1.2.3:80")  # fmt: skip
        for host in ok:
            status, _, _ = request(port, "/amps/instance/clients", headers={"Host": host})
            assert status == 200, host
        assert request(port, "/", headers={"Host": "a:b:c"})[0] in (400, 421)


def test_token_is_on_the_dashboard_page_and_differs_per_instance() -> None:
    with ServerThread(with_admin()) as one, ServerThread(with_admin()) as two:
        token = admin_token(admin_port(one))
        status, headers, page = request(admin_port(one), "/")
        assert status == 200 and f'content="{token}"'.encode() in page
        assert headers["x-frame-options"] == "DENY"  # no clickjacking of its buttons
        assert admin_token(admin_port(two)) != token


def test_loopback_and_names(caplog: pytest.LogCaptureFixture) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert is_loopback("127.0.0.5")
    assert not is_loopback("0.0.0.0") and not is_loopback("") and not is_loopback("10.0.0.1")
    origin = RequestOrigin(bind_host="127.0.0.1", allowed_hosts=[" Ops.Example.org. "])
    assert "ops.example.org" in origin.names and "localhost" in origin.names
    # the start-up warning of a messaging listener (the tests never bind beyond loopback)
    assert not warn_if_exposed("tcp", "127.0.0.1", 9007, authenticated=False)
    assert not warn_if_exposed("tcp", "0.0.0.0", 9007, authenticated=True)
    with caplog.at_level("WARNING"):
        assert warn_if_exposed("ws", "0.0.0.0", 9008, authenticated=False)
    assert "SECURITY WARNING" in caplog.text and "0.0.0.0:9008" in caplog.text
