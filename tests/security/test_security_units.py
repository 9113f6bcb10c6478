"""Security building blocks without sockets: configuration errors, password hashes, the
replication hooks, stale offline files, the loopback-only proxy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ampsclient.authenticator import ChallengeResponseAuthenticator, challenge_response
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.net.flow import remove_stale_files
from ampsclient_server_stub.security import ServerSecurity
from ampsclient_server_stub.security.auth import ChallengeResponseAuthentication
from ampsclient_server_stub.security.passwords import hash_password, verify_password
from ampsclient_server_stub.security.replication import (
    authenticate_link,
    link_may_replicate,
    outgoing_credentials,
)
from ampsclient_server_stub.security.users import UsersFile, add_user
from ampsclient_server_stub.testing.proxy import LoopbackProxy

FAST: dict[str, Any] = {"scheme": "pbkdf2-sha256", "iterations": 1000}


def config(tmp: Path, transport: str, root: str = "", extra: str = "") -> Any:
    return parse_config(
        f"""<AMPSConfig><Name>u</Name>{root}<Transports>
        <Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>{transport}
        </Transport></Transports>{extra}</AMPSConfig>""",
        base_dir=tmp,
    )


def test_hashes_round_trip() -> None:
    for scheme in ("scrypt", "pbkdf2-sha256"):
        encoded = hash_password("s3cret", scheme=scheme, n=2**10, iterations=1000)  # type: ignore[arg-type]
        assert verify_password("s3cret", encoded)
        assert not verify_password("s3cret!", encoded)
        assert encoded != hash_password("s3cret", scheme=scheme, n=2**10, iterations=1000)  # type: ignore[arg-type]
    assert not verify_password("x", "md5$abc")


@pytest.mark.parametrize(
    ("transport", "message"),
    [
        ("<Authentication><Module>nope</Module></Authentication>", "unknown authentication"),
        ("<Authentication><Module>users-file</Module></Authentication>", "needs <UsersFile>"),
        (
            "<Entitlement><Module>users-file</Module><Options><UsersFile>missing.json</UsersFile>"
            "</Options></Entitlement>",
            "cannot read users file",
        ),
        ("<ClientMaxCapacity>150%</ClientMaxCapacity>", "ClientMaxCapacity"),
        ("<MaxConnections>many</MaxConnections>", "MaxConnections"),
        ("<Authentication><Module>os:nothing_here</Module></Authentication>", "cannot load"),
    ],
)
def test_configuration_errors(tmp_path: Path, transport: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ServerSecurity.from_config(config(tmp_path, transport))


def test_tls_transport_needs_a_certificate(tmp_path: Path) -> None:
    cfg = parse_config(
        """<AMPSConfig><Transports><Transport><Name>s</Name><Type>tcps</Type>
        <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports></AMPSConfig>""",
        base_dir=tmp_path,
    )
    with pytest.raises(ConfigError, match="needs a <Certificate>"):
        ServerSecurity.from_config(cfg)


def test_instance_level_settings_apply_to_every_transport(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    add_user(users, "a", "pw", **FAST)
    root = (
        "<Authentication><Module>users-file</Module><Options><UsersFile>users.json</UsersFile>"
        "</Options></Authentication><MessageMemoryLimit>8MB</MessageMemoryLimit>"
        "<MaxFrameSize>1MB</MaxFrameSize>"
    )
    sec = ServerSecurity.from_config(
        config(tmp_path, "<ClientMaxCapacity>50%</ClientMaxCapacity>", root)
    )
    try:
        policy = sec.policy_for("t")
        assert policy.auth is not None and policy.entitlements is None
        assert policy.pool is not None and policy.pool.memory_limit == 8 * 1024 * 1024
        assert policy.limits.max_capacity == 0.5
        assert policy.max_frame_size == 1024 * 1024
        assert sec.guard is not None
    finally:
        sec.close()


def test_replication_hooks(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    add_user(users, "repl", "repl-pw", read=[".*"], write=["^orders"], **FAST)
    secret = tmp_path / "repl.secret"
    secret.write_text("repl-pw\n")
    extra = """<Replication><Destination><Name>b</Name><Topic><Name>orders</Name>
        <MessageType>json</MessageType></Topic>
        <Transport><InetAddr>127.0.0.1:10005</InetAddr><Type>amps-replication</Type>
          <Authenticator><Module>challenge-response</Module>
            <Options><User>repl</User><PasswordFile>repl.secret</PasswordFile></Options>
          </Authenticator></Transport></Destination></Replication>"""
    transport = f"""<Authentication><Module>challenge-response</Module><Options>
        <UsersFile>{users}</UsersFile></Options></Authentication>
        <Entitlement><Module>users-file</Module><Options><UsersFile>{users}</UsersFile>
        </Options></Entitlement>"""
    cfg = config(tmp_path, transport, extra=extra)
    assert cfg.replication is not None
    user, auth = outgoing_credentials(cfg.replication.destinations[0], tmp_path)
    assert user == "repl" and isinstance(auth, ChallengeResponseAuthenticator)
    sec = ServerSecurity.from_config(cfg)
    try:
        state: dict[str, Any] = {}
        first = authenticate_link(sec, "t", "repl", auth.authenticate("repl", None) or "", state)
        assert first.status == "retry"
        answer = auth.retry("repl", first.challenge)
        assert authenticate_link(sec, "t", "repl", answer or "", state).ok
        wrong = {}
        authenticate_link(sec, "t", "repl", "", wrong)
        forged = challenge_response("repl", "guess", "hmac-sha256:x:AAAA:1000")
        assert not authenticate_link(sec, "t", "repl", forged, wrong).ok
        assert link_may_replicate(sec, "t", "repl", "orders")
        assert not link_may_replicate(sec, "t", "repl", "prices")
        assert authenticate_link(sec, "unknown-transport", "x", "y", {}).ok
    finally:
        sec.close()


def test_challenge_for_unknown_users_is_stable(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    add_user(users, "known", "pw", **FAST)
    module = ChallengeResponseAuthentication(UsersFile(users))
    salts = {module.authenticate("ghost", "", {}).challenge.split(":")[2] for _ in range(3)}
    assert len(salts) == 1


def test_stale_offline_files_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"ampsclient-offline-{2**22 + 12345}-abc"  # pid above pid_max: gone
    mine = tmp_path / f"ampsclient-offline-{os.getpid()}-abc"
    for directory in (dead, mine):
        directory.mkdir(mode=0o700)
        (directory / "c-1-1.offline").write_bytes(b"x")
    (dead / "keep.txt").write_bytes(b"not an offline file")
    other = tmp_path / f"c-{2**22 + 12345}-1-1.offline"  # another program's file
    other.write_bytes(b"x")
    assert remove_stale_files(tmp_path) == 1
    assert not (dead / "c-1-1.offline").exists() and (dead / "keep.txt").exists()
    assert (mine / "c-1-1.offline").exists() and other.exists()


def test_proxy_refuses_non_loopback_addresses() -> None:
    with pytest.raises(ValueError, match="loopback"):
        LoopbackProxy("192.0.2.1", 9007)
    with pytest.raises(ValueError, match="loopback"):
        LoopbackProxy("127.0.0.1", 9007, listen_host="0.0.0.0")
