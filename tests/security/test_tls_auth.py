"""TLS (tcps/wss), authentication modules, the logon retry challenge, entitlements, and the
users-file command line, end to end over real sockets on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _tls_certs import Certs, make_certs

from ampsclient import AsyncClient, ChallengeResponseAuthenticator, Client, Message, client_context
from ampsclient.exceptions import AMPSConnectionError, AuthenticationError, NotEntitledError
from ampsclient.ha import DefaultServerChooser, FixedDelayStrategy
from ampsclient.sync import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.security.users import add_user
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAST = {"scheme": "pbkdf2-sha256", "iterations": 1000}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def users_file(tmp: Path) -> Path:
    path = tmp / "users.json"
    alice_read = ["^orders_", "^prices$"]
    add_user(path, "alice", "alice-secret-1", read=alice_read, write=["^orders_"], **FAST)
    add_user(path, "bob", "bob-secret-2", read=[".*"], write=[".*"], **FAST)
    add_user(path, "repl", "repl-secret-3", read=[".*"], write=[".*"], **FAST)
    return path


def server_with(xml_transports: str, tmp: Path, root_extra: str = "") -> ServerThread:
    xml = f"""<AMPSConfig><Name>sec</Name>{root_extra}
      <SOW><Topic><Name>orders_sow</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
           <Topic><Name>secret_sow</Name><MessageType>json</MessageType><Key>/id</Key></Topic></SOW>
      <Transports>{xml_transports}</Transports></AMPSConfig>"""
    config = parse_config(xml, base_dir=tmp)
    return ServerThread(config).start()


# ------------------------------------------------------------------------------- TLS


def tls_transports(certs: Certs, *, require: bool = False) -> str:
    extra = f"<CAFile>{certs.ca}</CAFile><RequireClientCertificate>true</RequireClientCertificate>"
    opts = extra if require else ""
    return f"""
      <Transport><Name>tcps</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Certificate>{certs.server_cert}</Certificate><PrivateKey>{certs.server_key}</PrivateKey>{opts}
      </Transport>
      <Transport><Name>wss</Name><Type>wss</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Certificate>{certs.server_cert}</Certificate><PrivateKey>{certs.server_key}</PrivateKey>{opts}
      </Transport>"""


@pytest.mark.parametrize("kind", ["tcps", "wss"])
def test_tls_round_trip_and_verification_on_by_default(
    certs: Certs, tmp_path: Path, kind: str
) -> None:
    server = server_with(tls_transports(certs), tmp_path)
    try:
        uri = server.uri(kind)
        assert uri.startswith(f"{kind}://127.0.0.1:")
        # verification is on by default: our test CA is not in the system trust store
        with Client("no-ca") as bare, pytest.raises(AMPSConnectionError):
            bare.connect(uri, timeout=5)
        # a context that trusts another CA fails too
        wrong_ctx = client_context(cafile=certs.other_ca)
        with Client("wrong-ca", ssl_context=wrong_ctx) as wrong, pytest.raises(AMPSConnectionError):
            wrong.connect(uri, timeout=5)
        ctx = client_context(cafile=certs.ca)
        with Client("tls-sub", ssl_context=ctx) as sub, Client("tls-pub") as pub:
            sub.connect(uri, timeout=5)
            sub.logon(5000)
            got: list[Message] = []
            sub.subscribe(got.append, "t")
            pub.connect(uri, timeout=5, ssl_context=ctx)  # per-connect context
            pub.logon(5000)
            for i in range(50):
                pub.publish("t", json.dumps({"i": i}))
            pub.flush(5000)
            wait_for(lambda: len(got) == 50)
            assert [m.json()["i"] for m in got] == list(range(50))
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["tcps", "wss"])
def test_tls_client_certificate_required(certs: Certs, tmp_path: Path, kind: str) -> None:
    server = server_with(tls_transports(certs, require=True), tmp_path)
    try:
        uri = server.uri(kind)
        no_cert = client_context(cafile=certs.ca)
        with Client("no-cert", ssl_context=no_cert) as c, pytest.raises(AMPSConnectionError):
            c.connect(uri, timeout=5)
            c.logon(3000)  # TLS 1.3: the refusal may surface only at the first read
        with_cert = client_context(
            cafile=certs.ca, certfile=certs.client_cert, keyfile=certs.client_key
        )
        with HAClient("cert-ha", ssl_context=with_cert) as ha:
            ha.connect_and_logon(uri)
            ha.publish("t", '{"x":1}')
            ha.publish_flush(5000)
    finally:
        server.stop()


# ------------------------------------------------------------------------ authentication


def auth_transports(module: str, users: Path, *, entitlements: bool = False) -> str:
    ent = (
        f"<Entitlement><Module>amps-default-entitlement-module</Module>"
        f"<Options><UsersFile>{users}</UsersFile></Options></Entitlement>"
        if entitlements
        else ""
    )
    return f"""
      <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Authentication><Module>{module}</Module>
          <Options><UsersFile>{users}</UsersFile></Options></Authentication>{ent}
      </Transport>
      <Transport><Name>open</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>"""


def uri_with(server: ServerThread, user: str, password: str, kind: str = "tcp") -> str:
    plain = server.uri(kind)
    return plain.replace("://", f"://{user}:{password}@", 1)


def test_users_file_authentication_and_no_credentials_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users = users_file(tmp_path)
    server = server_with(auth_transports("users-file", users), tmp_path)
    caplog.set_level(logging.DEBUG)
    try:
        with Client("alice-1") as c:
            c.connect(uri_with(server, "alice", "alice-secret-1"))
            c.logon(5000)
            c.publish("orders_1", "{}")
            c.flush(5000)
        for user, password in (("alice", "wrong-pass-9"), ("nobody", "alice-secret-1")):
            with Client("bad") as c:
                c.connect(uri_with(server, user, password))
                with pytest.raises(AuthenticationError):
                    c.logon(5000)
        # the other transport configures no authentication
        with Client("anon") as c:
            c.connect(server.uri("ws"))
            c.logon(5000)
        stats = server.statistics()
        assert stats["auth_failures"] == 2
    finally:
        server.stop()
    text = caplog.text
    assert "logon refused" in text  # the failures were logged...
    for secret in ("alice-secret-1", "wrong-pass-9"):
        assert secret not in text  # ...without the credentials


def test_challenge_response_retry_flow(tmp_path: Path) -> None:
    users = users_file(tmp_path)
    server = server_with(auth_transports("challenge-response", users), tmp_path)
    try:
        with Client("cr-1") as c:
            c.connect(uri_with(server, "bob", "bob-secret-2"))
            c.logon(5000, ChallengeResponseAuthenticator())
            c.publish("x", "{}")
            c.flush(5000)
        with Client("cr-2") as c:  # right user, wrong password
            c.connect(uri_with(server, "bob", "not-it"))
            with pytest.raises(AuthenticationError):
                c.logon(5000, ChallengeResponseAuthenticator())
        with Client("cr-3") as c:  # the default authenticator cannot answer a challenge
            c.connect(uri_with(server, "bob", "bob-secret-2"))
            with pytest.raises(AuthenticationError):
                c.logon(5000)
        assert server.statistics()["challenges"] >= 3
    finally:
        server.stop()


async def test_challenge_response_async_client(tmp_path: Path) -> None:
    users = users_file(tmp_path)
    server = server_with(auth_transports("challenge-response", users), tmp_path)
    try:
        async with AsyncClient("cr-async") as c:
            await c.connect(uri_with(server, "alice", "alice-secret-1"))
            await c.logon(5000, ChallengeResponseAuthenticator())
            assert c.logged_on
    finally:
        server.stop()


def test_server_process_logs_carry_no_credentials(tmp_path: Path) -> None:
    users = users_file(tmp_path)
    config = tmp_path / "server.xml"
    config.write_text(
        f"""<AMPSConfig><Name>logs</Name><Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Authentication><Module>users-file</Module><Options><UsersFile>{users}</UsersFile>
        </Options></Authentication></Transport>
        <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
        </Transports></AMPSConfig>"""
    )
    proc = ServerProcess(config=config, extra_args=["--log-level", "DEBUG"])
    with proc:
        for password in ("alice-secret-1", "guess-0000"):
            with Client(f"p-{password[:5]}") as c:
                c.connect(f"tcp://alice:{password}@127.0.0.1:{proc.tcp_port}/amps/json")
                try:
                    c.logon(5000)
                except AuthenticationError:
                    pass
    log = "".join(proc.stderr_lines)
    assert "logged on" in log and "logon refused" in log
    assert "alice-secret-1" not in log and "guess-0000" not in log


# --------------------------------------------------------------------------- entitlements


@pytest.fixture
def entitled(tmp_path: Path) -> Iterator[ServerThread]:
    users = users_file(tmp_path)
    server = server_with(auth_transports("users-file", users, entitlements=True), tmp_path)
    try:
        yield server
    finally:
        server.stop()


def test_entitlements_on_commands(entitled: ServerThread) -> None:
    with Client("alice-e") as alice, Client("bob-e") as bob:
        alice.connect(uri_with(entitled, "alice", "alice-secret-1"))
        alice.logon(5000)
        bob.connect(uri_with(entitled, "bob", "bob-secret-2"))
        bob.logon(5000)
        with pytest.raises(NotEntitledError):
            alice.subscribe(lambda m: None, "secret_stuff")
        with pytest.raises(NotEntitledError):
            alice.sow(lambda m: None, "secret_sow")
        with pytest.raises(NotEntitledError):
            alice.sow_and_subscribe(lambda m: None, "secret_sow")
        with pytest.raises(NotEntitledError):
            alice.sow_delete("secret_sow", "/id = 1")
        with pytest.raises(NotEntitledError):
            alice.subscribe(lambda m: None, "prices_extra")  # read ^prices$ only
        alice.subscribe(lambda m: None, "prices")
        # a regex subscription sees only the topics the user may read
        seen: list[str] = []
        alice.subscribe(lambda m: seen.append(str(m.topic)), ".*")
        # orders_end is the marker: published last, it arrives after anything before it would
        for topic in ("orders_a", "secret_b", "prices", "orders_c", "other", "orders_end"):
            bob.publish(topic, "{}")
        bob.flush(5000)
        wait_for(lambda: "orders_end" in seen)
        assert seen == ["orders_a", "prices", "orders_c", "orders_end"]
        # sow with a regex topic: only entitled SOW topics
        bob.publish("orders_sow", '{"id":1}')
        bob.publish("secret_sow", '{"id":1}')
        bob.flush(5000)
        rows: list[str] = []
        alice.sow(lambda m: rows.append(str(m.topic)) if m.command == "sow" else None, ".*sow")
        assert rows == ["orders_sow"]
        # a plain publish (fast path, no ack asked) to a topic not entitled is dropped
        # (orders_q, published next by the same client, is the marker)
        got: list[Message] = []
        bob.subscribe(got.append, "^(secret|orders)_q$")
        alice.publish("secret_q", '{"leak":1}')
        alice.publish("orders_q", '{"ok":1}')
        alice.flush(5000)
        wait_for(lambda: any(str(m.topic) == "orders_q" for m in list(got)))
        assert [str(m.topic) for m in got] == ["orders_q"]
        assert entitled.statistics()["not_entitled"] == 6


def test_not_entitled_publish_goes_to_failed_write_handler(entitled: ServerThread) -> None:
    failed: list[tuple[str, str]] = []
    lock = threading.Lock()

    def on_failed(message: Message, reason: str) -> None:
        with lock:
            failed.append((str(message.topic), reason))

    with HAClient("alice-ha") as ha:
        ha.set_failed_write_handler(on_failed)
        ha.connect_and_logon(uri_with(entitled, "alice", "alice-secret-1"))
        ha.publish("orders_1", '{"n":1}')
        ha.publish("secret_1", '{"n":2}')
        ha.publish("orders_2", '{"n":3}')
        ha.publish_flush(5000)
        wait_for(lambda: len(failed) == 1)
        assert failed == [("secret_1", "not entitled")]
        assert ha.unpersisted_count == 0


class Vault:
    """An authenticator that looks the password up (none is in the URI); records its calls."""

    def __init__(self, secrets: dict[str, str]) -> None:
        self.secrets = secrets
        self.calls: list[str | None] = []

    def authenticate(self, user: str | None, password: str | None) -> str | None:
        self.calls.append(user)
        return self.secrets[user or ""]

    def retry(self, user: str | None, password: str | None) -> str | None:
        raise AuthenticationError("no retry")

    def completed(self, user: str | None, password: str | None, reason: str | None) -> None:
        return None


def test_ha_chooser_authenticator_per_uri(tmp_path: Path) -> None:
    """Each URI of a DefaultServerChooser logs on with its own authenticator, also after a
    failover to the second server."""
    users = users_file(tmp_path)
    a = server_with(auth_transports("users-file", users), tmp_path / "a")
    b = server_with(auth_transports("users-file", users), tmp_path / "b")
    vault_a, vault_b = Vault({"alice": "alice-secret-1"}), Vault({"bob": "bob-secret-2"})
    try:
        chooser = DefaultServerChooser()
        chooser.add(a.uri("tcp").replace("://", "://alice@", 1), vault_a)
        chooser.add(b.uri("tcp").replace("://", "://bob@", 1), vault_b)
        with HAClient(
            "per-uri", server_chooser=chooser, reconnect_delay_strategy=FixedDelayStrategy(50)
        ) as ha:
            ha.connect_and_logon()
            assert (vault_a.calls, vault_b.calls) == (["alice"], [])
            ha.publish("orders_1", '{"n":1}')
            ha.publish_flush(5000)
            a.stop()
            wait_for(lambda: vault_b.calls == ["bob"], what="the logon at B")
            ha.publish("orders_1", '{"n":2}')
            ha.publish_flush(10_000)
            assert ha.uri is not None and f":{b.tcp_port}/" in ha.uri
    finally:
        a.stop()
        b.stop()


def test_users_cli_adds_and_removes_users(tmp_path: Path) -> None:
    path = tmp_path / "cli-users.json"
    cmd = [sys.executable, "-m", "ampsclient_server_stub.security.users"]

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cmd, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=False,
        )

    done = run("add", str(path), "carol", "--password-stdin", "--read", "^a", stdin="pw-carol\n")
    assert done.returncode == 0, done.stderr
    data = json.loads(path.read_text())
    stored = data["users"]["carol"]["password"]
    assert stored.startswith("scrypt$") and "pw-carol" not in path.read_text()
    assert (path.stat().st_mode & 0o777) == 0o600
    listed = run("list", str(path))
    assert "carol" in listed.stdout and "^a" in listed.stdout
    assert run("remove", str(path), "carol").returncode == 0
    assert run("remove", str(path), "carol").returncode == 1
    from ampsclient_server_stub.security.passwords import verify_password

    assert verify_password("pw-carol", stored) and not verify_password("pw-caro", stored)
