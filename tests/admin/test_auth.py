"""With security configured, the admin interface uses the server's own users file: HTTP Basic
credentials (401 without or with wrong ones) and the ``admin`` entitlement (403)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampsclient import AMPSError, Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.security.users import add_user
from ampsclient_server_stub.testing import wait_for

from ._support import action, admin_port, get_json, request

pytestmark = pytest.mark.integration

FAST = {"scheme": "pbkdf2-sha256", "iterations": 1000}


def secured(tmp_path: Path, admin_extra: str = "") -> ServerThread:
    users = tmp_path / "users.json"
    add_user(users, "ops", "ops-secret", read=[".*"], write=[".*"], admin=[".*"], **FAST)
    add_user(users, "viewer", "viewer-secret", admin=["^/amps/instance", "^/metrics$"], **FAST)
    add_user(users, "app", "app-secret", read=[".*"], write=[".*"], **FAST)
    xml = f"""<AMPSConfig><Name>secure</Name>
      <Authentication><Module>users-file</Module>
        <Options><UsersFile>{users}</UsersFile></Options></Authentication>
      <Entitlement><Module>amps-default-entitlement-module</Module>
        <Options><UsersFile>{users}</UsersFile></Options></Entitlement>
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type>
        <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
      <Admin><InetAddr>127.0.0.1:0</InetAddr>{admin_extra}</Admin></AMPSConfig>"""
    return ServerThread(parse_config(xml, base_dir=tmp_path)).start()


def test_credentials_and_entitlements(tmp_path: Path) -> None:
    thread = secured(tmp_path, '<WWWAuthenticate>Basic realm="Ops"</WWWAuthenticate>')
    try:
        port = admin_port(thread)
        status, headers, _ = request(port, "/amps/instance")
        assert status == 401
        assert headers["www-authenticate"].startswith('Basic realm="Ops"')
        assert request(port, "/amps/instance", auth=("ops", "wrong"))[0] == 401
        assert request(port, "/amps/instance", auth=("nobody", "x"))[0] == 401
        assert request(port, "/", headers={"Authorization": "Bearer abc"})[0] == 401
        assert request(port, "/", headers={"Authorization": "Basic !!!"})[0] == 401
        assert get_json(port, "/amps/instance/name", auth=("ops", "ops-secret")) == "secure"
        assert request(port, "/metrics", auth=("viewer", "viewer-secret"))[0] == 200
        assert request(port, "/amps/instance/clients", auth=("viewer", "viewer-secret"))[0] == 200
        status, _, body = request(
            port, "/amps/administrator/journal/archive", auth=("viewer", "viewer-secret")
        )
        assert status == 403 and b"not entitled" in body
        # an authenticated user without any admin pattern
        assert request(port, "/amps/instance", auth=("app", "app-secret"))[0] == 403
        # the ops user may run actions (this one is refused by the journal, not by security)
        status, _, _ = action(
            port, "/amps/administrator/journal/archive?age=1d", auth=("ops", "ops-secret")
        )
        assert status == 409  # no <JournalArchiveDirectory>
        assert request(port, "/", auth=("ops", "ops-secret"))[0] == 200
    finally:
        thread.stop()


def test_denied_reads_and_writes_are_counted_as_amps_names_them(tmp_path: Path) -> None:
    """/amps/instance/processors/all: ``denied_reads`` (a subscribe, a sow query) and
    ``denied_writes`` (a publish) refused by the entitlements, each counted once."""
    thread = secured(tmp_path)
    ops = ("ops", "ops-secret")
    try:
        port = admin_port(thread)
        watcher = Client("ops-watch")
        watcher.connect(thread.uri().replace("tcp://", "tcp://ops:ops-secret@"))
        watcher.logon()
        watcher.subscribe(lambda _m: None, "orders")  # entitled: nothing denied
        client = Client("no-rights")
        client.connect(thread.uri().replace("tcp://", "tcp://viewer:viewer-secret@"))
        client.logon()
        try:
            for refused in (
                lambda: client.subscribe(lambda _m: None, "orders"),
                lambda: client.sow(lambda _m: None, "orders"),
            ):
                with pytest.raises(AMPSError, match="not entitled"):
                    refused()
            client.publish("orders", "{}")
            client.flush()
            me = "/amps/instance/clients/no-rights"
            wait_for(
                lambda: get_json(port, me + "/denied_writes", auth=ops) == 1,
                what="the client's denied write",
            )
            assert get_json(port, me + "/denied_reads", auth=ops) == 2
            assert get_json(port, "/amps/instance/clients/ops-watch/denied_reads", auth=ops) == 0
        finally:
            client.close()
            watcher.close()

        def figures() -> tuple[int, int]:
            node = get_json(port, "/amps/instance/processors/all.json", auth=ops)
            (entry,) = node["amps"]["instance"]["processors"]
            return entry["denied_reads"], entry["denied_writes"]

        wait_for(lambda: figures() == (2, 1), what="2 denied reads, 1 denied write")
        ingest = get_json(port, "/amps/instance/processors/ingest", auth=ops)
        assert ingest["denied_writes"] == 1
    finally:
        thread.stop()


def test_anonymous_paths(tmp_path: Path) -> None:
    thread = secured(tmp_path, "<AnonymousPaths>^/metrics$</AnonymousPaths>")
    try:
        port = admin_port(thread)
        assert request(port, "/metrics")[0] == 200
        assert request(port, "/amps/instance")[0] == 401
    finally:
        thread.stop()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("<WWWAuthenticate>Negotiate</WWWAuthenticate>", "only Basic"),
        ("<SslCertificate>x.pem</SslCertificate>", "SslCertificate"),
        ("<Interval>100ms</Interval>", "at least 1s"),
        ("<FileName>stats.db</FileName>", "FileName"),
    ],
)
def test_unsupported_admin_options_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    xml = f"""<AMPSConfig><Name>x</Name><Transports><Transport><Name>tcp</Name><Type>tcp</Type>
      <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
      <Admin><InetAddr>127.0.0.1:0</InetAddr>{extra}</Admin></AMPSConfig>"""

    def start() -> None:  # refused by the config reader (unknown element) or at start-up
        thread = ServerThread(parse_config(xml, base_dir=tmp_path))
        try:
            thread.start()
        finally:
            thread.stop()

    with pytest.raises(ConfigError, match=message):
        start()
