"""The ``ampsclient`` command tells the truth, at once (issue 31, "Honest answers"): refused
publishes, wrong passwords, timeouts as bounds, HTTP ports, TLS options, passwords kept out
of the command line. A real command process against real server processes."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import ROOT, ServerProcess, cli, start_cli

from ampsclient import Client
from ampsclient.exceptions import FrameTooLargeError, NotAmpsPortError
from ampsclient.protocol.framing import TcpFramer
from ampsclient_server_stub.harness import ServerProcess as HarnessProcess
from ampsclient_server_stub.security.users import add_user

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from _tls_certs import Certs, make_certs  # the suite's test certificates

pytestmark = pytest.mark.integration


def test_refused_publishes_are_counted_each_reason_once_exit_1(amps: ServerProcess) -> None:
    """Messages the server refuses (not JSON for the SOW topic ``orders``) are not reported
    persisted: the summary counts them, each reason is printed once, the exit status is 1
    (it used to be "3 persisted" and 0)."""
    lines = ["not json", '{"id": 1, "ok": true}', "still not json", "nor this"]
    done = cli(
        "publish", "-s", amps.uri, "-t", "orders", "--format", "raw", stdin="\n".join(lines) + "\n"
    )
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ampsclient ")]
    assert len(errors) == 1, done.stderr  # one reason, printed once for its 3 messages
    assert errors[0].startswith("ampsclient publish: the server refused 3 message(s): ")
    assert "1 persisted, 3 refused" in done.stderr
    with Client("check") as client:  # what the server kept: the one good message
        client.connect(amps.uri)
        client.logon(5000)
        kept = [
            json.loads(m.get_data())
            for m in client.sow("orders", timeout=5000)
            if m.get_command() == "sow"
        ]
    assert kept == [{"id": 1, "ok": True}]


FAST = {"scheme": "pbkdf2-sha256", "iterations": 1000}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[HarnessProcess]:
    """A server process whose tcp transport checks a users file (alice / right-secret)."""
    users = tmp_path / "users.json"
    add_user(users, "alice", "right-secret", read=[".*"], write=[".*"], **FAST)
    config = tmp_path / "amps.xml"
    config.write_text(
        f"""<AMPSConfig><Name>sec</Name><Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
          <Authentication><Module>users-file</Module>
            <Options><UsersFile>{users}</UsersFile></Options></Authentication></Transport>
        <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
        </Transports></AMPSConfig>"""
    )
    server = HarnessProcess(data_dir=tmp_path / "data", config=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_wrong_password_fails_at_once_with_the_authentication_error(
    secured: HarnessProcess,
) -> None:
    """One refused logon ends the command with the authentication error (it used to be
    retried for --retry-time and end as "no server reachable"); the password is in no output."""
    uri = f"tcp://alice:wrong-secret@127.0.0.1:{secured.tcp_port}/amps/json"
    start = time.monotonic()
    done = cli("ping", "-s", uri, "--retry-time", "20000", "-v")
    took = time.monotonic() - start
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ampsclient ")]
    assert len(errors) == 1 and errors[0].startswith(
        "ampsclient ping: AuthenticationException: "
    ), done.stderr
    assert took < 10, took  # not --retry-time (20 s); start-up of the interpreter included
    assert "wrong-secret" not in done.stderr + done.stdout
    good = f"tcp://alice:right-secret@127.0.0.1:{secured.tcp_port}/amps/json"
    ok = cli("ping", "-s", good, "-q")
    assert ok.returncode == 0, ok.stderr


def test_ping_to_a_frozen_server_ends_within_retry_time(amps: ServerProcess) -> None:
    """A server that accepts connections and never answers (SIGSTOP): ``ping`` gives up
    after ``--retry-time`` (2 s here), not after ``--timeout`` (30 s) per logon attempt, and
    says how long it tried (it used to take 30 s and then say 5000 ms)."""
    amps.proc.send_signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        done = cli("ping", "-s", amps.uri, "--retry-time", "2000", "--timeout", "30000")
        took = time.monotonic() - start
    finally:
        amps.proc.send_signal(signal.SIGCONT)
    assert done.returncode == 3, done.stderr
    assert took < 2 + 4, took  # 2 s bound; the margin is the interpreter's start-up
    errors = [line for line in done.stderr.splitlines() if line.startswith("ampsclient ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("ampsclient ping: RetryLimitError: gave up reconnecting after ")
    spent = int(errors[0].split("gave up reconnecting after ")[1].split()[0])
    assert 2000 <= spent < 3000, errors[0]


def test_publish_timeout_bounds_the_flush_and_the_close_together(amps: ServerProcess) -> None:
    """``publish --timeout 3000`` to a server that froze after the first message: the
    persisted-ack wait and the close's flush share the 3 s (it used to wait 3 s, then 3 s
    more while closing)."""
    with Client("watcher-bound") as watcher:
        watcher.connect(amps.uri)
        watcher.logon(5000)
        stream = watcher.subscribe("bound", timeout=5000)
        pub = start_cli("publish", "-s", amps.uri, "-t", "bound", "--timeout", "3000")
        try:
            assert pub.stdin is not None
            pub.stdin.write(json.dumps({"n": 0}) + "\n")
            pub.stdin.flush()
            got = [m.json()["n"] for _, m in zip(range(1), stream.timeout(20_000), strict=False)]
            assert got == [0]  # the command is connected and publishing
            amps.proc.send_signal(signal.SIGSTOP)
            try:
                start = time.monotonic()
                _, err = pub.communicate(json.dumps({"n": 1}) + "\n", timeout=60)
                took = time.monotonic() - start
            finally:
                amps.proc.send_signal(signal.SIGCONT)
        finally:
            if pub.poll() is None:
                pub.kill()
                pub.communicate()
        stream.close()
    assert pub.returncode == 5, err
    assert 3 <= took < 3 + 1.5, took  # before: 6 s


def ws_port_of(amps: ServerProcess) -> int:
    for line in amps.log:
        if "listening " in line and " ws://" in line:
            return int(line.split(" ws://")[1].split()[0].rsplit(":", 1)[1])
    raise AssertionError("".join(amps.log))


def test_tcp_to_a_websocket_port_says_what_was_reached_at_once(amps: ServerProcess) -> None:
    """tcp:// to the server's ws port: the ws listener answers a non-HTTP first byte with an
    HTTP 400 at once, the client reads ``HTTP/`` where a frame length was expected and raises
    :class:`NotAmpsPortError`, and the command stops at once (it used to wait for the
    listener's 10 s handshake timeout, retry, and say "connection closed")."""
    uri = f"tcp://127.0.0.1:{ws_port_of(amps)}/amps/json"
    with Client("wrong-port") as client:
        start = time.monotonic()
        with pytest.raises(NotAmpsPortError, match=r"HTTP/1\.1 400 Bad Request"):
            client.connect(uri)
            client.logon(20_000)
        assert time.monotonic() - start < 5
    start = time.monotonic()
    done = cli("ping", "-s", uri, "--retry-time", "20000")
    took = time.monotonic() - start
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ampsclient ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("ampsclient ping: NotAmpsPortError: the server answered with HTTP")
    assert "WebSocket port" in errors[0]
    assert took < 8, took  # not --retry-time (20 s); the interpreter's start-up included


def test_an_http_answer_split_across_reads_is_recognised() -> None:
    framer = TcpFramer()
    framer.receive_data(b"HT")
    with pytest.raises(NotAmpsPortError, match=r"HTTP/1\.1 408"):
        framer.receive_data(b"TP/1.1 408 Request Timeout\r\n\r\n")
    with pytest.raises(FrameTooLargeError):  # any other oversized length stays what it was
        TcpFramer(max_frame_size=10).receive_data(b"\x00\x00\x01\x00rest")


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[HarnessProcess, Certs, int, int]]:
    """A server process with a tcps transport and one that requires a client certificate:
    ``(server, certs, tcps port, mutual tcps port)``."""
    certs = make_certs(tmp_path / "certs")
    config = tmp_path / "amps.xml"
    own = (
        f"<Certificate>{certs.server_cert}</Certificate><PrivateKey>{certs.server_key}</PrivateKey>"
    )
    config.write_text(
        f"""<AMPSConfig><Name>tls</Name><Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
        <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
        <Transport><Name>tls</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>{own}
        </Transport>
        <Transport><Name>mtls</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>{own}
          <CAFile>{certs.ca}</CAFile><RequireClientCertificate>true</RequireClientCertificate>
        </Transport></Transports></AMPSConfig>"""
    )
    server = HarnessProcess(data_dir=tmp_path / "data", config=config)
    server.start()
    try:
        line = next(x for x in server.stderr_lines if "listening" in x and "tcps://" in x)
        ports = [int(p.split(":")[-1]) for p in line.split() if p.startswith("tcps://")]
        yield server, certs, ports[0], ports[1]
    finally:
        server.stop()


def test_tls_options(tls_server: tuple[HarnessProcess, Certs, int, int]) -> None:
    """``--cafile`` trusts the test CA, ``--cert``/``--key`` answer a server that requires a
    client certificate, ``--insecure`` skips verification; without them verification fails
    (the test CA is in no trust store); TLS options without a tcps:// server are refused."""
    _, certs, port, mutual = tls_server
    uri = f"tcps://127.0.0.1:{port}/amps/json"
    fast = ("--retry-time", "1000", "-q")
    assert cli("ping", "-s", uri, "--cafile", str(certs.ca), *fast).returncode == 0
    refused = cli("ping", "-s", uri, *fast)  # verification on by default
    assert refused.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
    assert cli("ping", "-s", uri, "--insecure", *fast).returncode == 0
    muri = f"tcps://127.0.0.1:{mutual}/amps/json"
    assert cli("ping", "-s", muri, "--cafile", str(certs.ca), *fast).returncode == 3
    cert = ("--cert", str(certs.client_cert), "--key", str(certs.client_key))
    done = cli("ping", "-s", muri, "--cafile", str(certs.ca), *cert, *fast)
    assert done.returncode == 0, done.stderr
    plain = cli("ping", "-s", "tcp://127.0.0.1:1/amps/json", "--cafile", str(certs.ca))
    assert plain.returncode == 2 and "apply to tcps:// and wss://" in plain.stderr
    missing = cli("ping", "-s", uri, "--cafile", str(certs.ca) + ".missing")
    assert missing.returncode == 2 and "TLS options" in missing.stderr


def test_password_file_keeps_the_password_out_of_the_command_line_and_logs(
    secured: HarnessProcess, tmp_path: Path
) -> None:
    """``--password-file`` gives the password of a URI that names only the user: the logon
    works, the password is in no output even at ``-vv``, and a file others can read is
    warned about; a wrong one fails at once with the authentication error."""
    uri = f"tcp://alice@127.0.0.1:{secured.tcp_port}/amps/json"
    secret = tmp_path / "alice.pw"
    secret.write_text("right-secret\n")
    secret.chmod(0o600)
    done = cli("ping", "-s", uri, "--password-file", str(secret), "-vv")
    assert done.returncode == 0, done.stderr
    assert "right-secret" not in done.stdout + done.stderr
    assert "warning" not in done.stderr
    secret.chmod(0o644)
    done = cli("ping", "-s", uri, "--password-file", str(secret), "-q")
    assert done.returncode == 0, done.stderr
    assert "can be read by other users" in done.stderr
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("wrong-secret\n")
    wrong.chmod(0o600)
    done = cli("ping", "-s", uri, "--password-file", str(wrong), "-vv")
    assert done.returncode == 3 and "AuthenticationException" in done.stderr
    assert "wrong-secret" not in done.stdout + done.stderr
    bare = f"tcp://127.0.0.1:{secured.tcp_port}/amps/json"  # no user to give it to
    done = cli("ping", "-s", bare, "--password-file", str(secret))
    assert done.returncode == 2 and "needs a user" in done.stderr


def run_on_a_terminal(argv: list[str], answer: str, timeout: float = 60) -> tuple[int, str]:
    """Run ``python -m ampsclient ARGV`` on a pseudo-terminal, answer its password prompt with
    ``answer``; ``(exit status, everything it wrote on the terminal)``."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its controlling terminal
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "ampsclient", *argv])
    out = b""
    answered = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if not answered and b"password for alice: " in out:
                os.write(fd, answer.encode() + b"\n")
                answered = True
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_ask_password_prompts_on_the_terminal_without_echo(secured: HarnessProcess) -> None:
    uri = f"tcp://alice@127.0.0.1:{secured.tcp_port}/amps/json"
    code, shown = run_on_a_terminal(["ping", "-s", uri, "--ask-password"], "right-secret")
    assert code == 0, shown
    assert "password for alice: " in shown and "pong from" in shown
    assert "right-secret" not in shown  # not echoed, not printed
    code, shown = run_on_a_terminal(["ping", "-s", uri, "--ask-password"], "wrong-secret")
    assert code == 3 and "AuthenticationException" in shown, shown
    assert "wrong-secret" not in shown
