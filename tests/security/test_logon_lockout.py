"""Issue #31, password guessing: after ``LogonFailureLimit`` failed logons a user is locked out
for ``LogonLockout`` (every logon refused with ``auth failure``, the right password too), others
are not, and it ends by itself. A real server with users-file authentication over real
sockets; the throttle's arithmetic with an injected clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient.exceptions import AuthenticationError
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.security.throttle import HOST_FACTOR, LogonThrottle
from ampsclient_server_stub.security.users import add_user
from ampsclient_server_stub.testing import wait_for

FAST = {"scheme": "pbkdf2-sha256", "iterations": 1000}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_locks_a_user_out_and_lets_it_in_again() -> None:
    clock = Clock()
    throttle = LogonThrottle(limit=3, lockout=10.0, clock=clock)
    assert throttle.failed("alice", "h") == []
    assert throttle.failed("alice", "h") == []
    assert throttle.locked("alice", "h") is None
    assert throttle.failed("alice", "h") == ["user 'alice'"]
    assert throttle.locked("alice", "h") == 10.0
    assert throttle.locked("bob", "other-host") is None  # another user, another host
    clock.now += 9.5
    assert throttle.locked("alice", "h") == pytest.approx(0.5)
    clock.now += 0.5
    assert throttle.locked("alice", "h") is None  # over, and its failures forgotten
    assert throttle.failed("alice", "h") == []


def test_failures_older_than_the_window_do_not_count_and_success_clears() -> None:
    clock = Clock()
    throttle = LogonThrottle(limit=2, lockout=5.0, clock=clock)
    throttle.failed("alice", "h")
    clock.now += 6.0
    assert throttle.failed("alice", "h") == []  # the first one is out of the window
    throttle.succeeded("alice")
    assert throttle.failed("alice", "h") == []  # cleared by the success
    assert LogonThrottle(limit=0, clock=clock).failed("x", "h") == []  # 0: never


def test_a_host_guessing_many_names_is_locked_out() -> None:
    throttle = LogonThrottle(limit=3, lockout=10.0, clock=Clock())
    started = [what for n in range(3 * HOST_FACTOR) for what in throttle.failed(f"u{n}", "h")]
    assert started == ["host 'h'"]
    assert throttle.locked("anyone", "h") is not None
    assert throttle.locked("anyone", "elsewhere") is None


@pytest.mark.integration
def test_a_guessed_user_is_locked_out_on_a_real_server(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    add_user(users, "alice", "alice-secret-1", read=[".*"], write=[".*"], **FAST)  # type: ignore[arg-type]
    add_user(users, "bob", "bob-secret-2", read=[".*"], write=[".*"], **FAST)  # type: ignore[arg-type]
    xml = f"""<AMPSConfig><Name>lockout</Name>
      <LogonFailureLimit>3</LogonFailureLimit><LogonLockout>2s</LogonLockout>
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Authentication><Module>users-file</Module>
          <Options><UsersFile>{users}</UsersFile></Options></Authentication>
      </Transport></Transports></AMPSConfig>"""
    with ServerThread(parse_config(xml, base_dir=tmp_path)) as server:

        def logon(user: str, password: str) -> bool:
            uri = server.uri("tcp").replace("://", f"://{user}:{password}@", 1)
            with Client(f"{user}-{time.monotonic_ns()}") as client:
                client.connect(uri)
                try:
                    client.logon(5000)
                except AuthenticationError:
                    return False
                return True

        for _ in range(3):
            assert not logon("alice", "guess")
        locked_at = time.monotonic()
        assert not logon("alice", "alice-secret-1")  # locked: the right password too
        assert logon("bob", "bob-secret-2")  # bob is not
        assert server.statistics()["logons_locked_out"] >= 1
        wait_for(lambda: logon("alice", "alice-secret-1"), timeout=10.0, what="the lockout's end")
        assert time.monotonic() - locked_at >= 1.5  # not before (about) the 2 s lockout


@pytest.mark.integration
def test_guessing_on_the_admin_port_locks_the_user_out_everywhere(tmp_path: Path) -> None:
    """The admin interface's Basic logons share the lockout: three wrong admin passwords lock
    alice out of the admin port and of messaging, until the lockout ends."""
    import base64
    import http.client

    users = tmp_path / "users.json"
    add_user(users, "alice", "alice-secret-1", read=[".*"], write=[".*"], **FAST)  # type: ignore[arg-type]
    xml = f"""<AMPSConfig><Name>lockout-admin</Name>
      <LogonFailureLimit>3</LogonFailureLimit><LogonLockout>2s</LogonLockout>
      <Authentication><Module>users-file</Module>
        <Options><UsersFile>{users}</UsersFile></Options></Authentication>
      <Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      </Transport></Transports></AMPSConfig>"""
    with ServerThread(parse_config(xml, base_dir=tmp_path)) as server:
        admin = server.server.admin
        assert admin is not None

        def admin_status(password: str) -> int:
            token = base64.b64encode(f"alice:{password}".encode()).decode()
            conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=10)
            try:
                conn.request("GET", "/amps/instance", headers={"Authorization": f"Basic {token}"})
                return conn.getresponse().status
            finally:
                conn.close()

        def messaging(password: str) -> bool:
            uri = server.uri("tcp").replace("://", f"://alice:{password}@", 1)
            with Client(f"alice-{time.monotonic_ns()}") as client:
                client.connect(uri)
                try:
                    client.logon(5000)
                except AuthenticationError:
                    return False
                return True

        assert admin_status("alice-secret-1") == 200
        for _ in range(3):
            assert admin_status("guess") == 401
        assert admin_status("alice-secret-1") == 401  # locked out of the admin port...
        assert not messaging("alice-secret-1")  # ...and of messaging
        wait_for(lambda: admin_status("alice-secret-1") == 200, timeout=10.0, what="the end")
        assert messaging("alice-secret-1")
