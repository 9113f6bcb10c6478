"""Replication security (seed 001, "Replication Security"): an instance whose
``amps-replication`` transport has ``<Authentication>`` makes every incoming link log on,
``<Entitlement>`` limits what a link may replicate, a destination's ``<Authenticator>``
supplies the credentials. Every instance is a real server process; what an instance holds is
read back over its client port (an EPOCH bookmark replay of its transaction log)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import pytest
from _replication_support import epoch_replay, wait_for

from ampsclient import Client
from ampsclient_server_stub.harness import ServerProcess, free_port
from ampsclient_server_stub.security.users import add_user

pytestmark = pytest.mark.integration

FAST: dict[str, Any] = {"scheme": "pbkdf2-sha256", "iterations": 1000}


@dataclass
class Node:
    """One instance: its configuration pieces and its process."""

    name: str
    base: Path
    repl_port: int | None = None
    replication_transport: str = ""
    """Extra XML inside the ``amps-replication`` transport (``None`` port: no transport)."""
    destinations: list[str] = field(default_factory=list)
    topics: tuple[str, ...] = ("orders", "prices")
    process: ServerProcess | None = None

    @property
    def data_dir(self) -> Path:
        return self.base / self.name

    def config_xml(self, tcp_port: int, ws_port: int) -> str:
        lines = [
            "<AMPSConfig>",
            f"  <Name>{self.name}</Name>",
            "  <Transports>",
            f"    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:{tcp_port}"
            "</InetAddr><Protocol>amps</Protocol></Transport>",
            f"    <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:{ws_port}"
            "</InetAddr></Transport>",
        ]
        if self.repl_port is not None:
            lines.append(
                "    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>"
                f"<InetAddr>127.0.0.1:{self.repl_port}</InetAddr>"
                f"{self.replication_transport}</Transport>"
            )
        lines += ["  </Transports>", "  <TransactionLog>", "    <JournalDirectory>journal"]
        lines[-1] += "</JournalDirectory>"
        lines += [f"    <Topic><Name>{t}</Name></Topic>" for t in self.topics]
        lines.append("  </TransactionLog>")
        if self.destinations:
            lines += ["  <Replication>", *self.destinations, "  </Replication>"]
        lines.append("</AMPSConfig>")
        return "\n".join(lines) + "\n"

    def start(self) -> Node:
        tcp_port, ws_port = free_port(), free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "config.xml"
        config.write_text(self.config_xml(tcp_port, ws_port))
        self.process = ServerProcess(
            data_dir=self.data_dir,
            name=self.name,
            tcp_port=tcp_port,
            ws_port=ws_port,
            config=config,
            extra_args=["--fsync", "never"],
        ).start()
        return self

    @property
    def uri(self) -> str:
        assert self.process is not None
        return self.process.uri()

    def log(self) -> str:
        assert self.process is not None
        return "".join(self.process.stderr_lines)

    def count(self, text: str) -> int:
        assert self.process is not None
        return sum(1 for line in list(self.process.stderr_lines) if text in line)


def destination(
    target: Node, topics: tuple[str, ...] = ("orders",), authenticator: str = ""
) -> str:
    """A one-way ``<Destination>`` towards ``target`` (nothing is replicated back)."""
    rules = "".join(
        f"<Topic><Name>{t}</Name><MessageType>json</MessageType>"
        "<ExcludeValidation>replicate</ExcludeValidation></Topic>"
        for t in topics
    )
    return (
        f"    <Destination><Name>{target.name}</Name><SyncType>async</SyncType>{rules}"
        f"<Transport><Type>amps-replication</Type>"
        f"<InetAddr>127.0.0.1:{target.repl_port}</InetAddr>{authenticator}</Transport>"
        "</Destination>"
    )


def authenticator(module: str = "amps-default-authenticator-module", **options: str) -> str:
    opts = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in options.items())
    return f"<Authenticator><Module>{module}</Module><Options>{opts}</Options></Authenticator>"


def secured_transport(users: Path, module: str = "amps-default-authentication-module") -> str:
    return (
        f"<Authentication><Module>{module}</Module><Options><UsersFile>{users}</UsersFile>"
        "</Options></Authentication>"
        "<Entitlement><Module>amps-default-entitlement-module</Module><Options>"
        f"<UsersFile>{users}</UsersFile></Options></Entitlement>"
    )


def publish(node: Node, topic: str, docs: list[dict[str, Any]]) -> None:
    with Client(f"pub-{node.name}-{topic}") as client:
        client.connect(node.uri)
        client.logon(5000)
        for doc in docs:
            client.publish(topic, json.dumps(doc))
        client.flush(10_000)


def held(node: Node, topic: str) -> list[dict[str, Any]]:
    """What ``node``'s transaction log holds for ``topic``, in order."""
    return [json.loads(body) for _, body in epoch_replay(node.uri, topic)]


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        if node.process is not None:
            node.process.stop()


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    add_user(path, "repl", "repl-pw", read=[".*"], write=["^orders$"], **FAST)
    return path


def test_rogue_instances_are_refused_and_nothing_they_send_is_recorded(
    tmp_path: Path, nodes: list[Node], users: Path
) -> None:
    """T requires a logon on its replication transport. R1 has no <Authenticator> (it logs on
    as the user running it, with no password), R2 the right user with a wrong password: both
    are refused, with the reason logged on both sides, and none of their messages reaches T.
    G, with the right credentials, replicates; its last message is the marker that proves the
    rogues' messages had their chance to arrive."""
    t = Node("T", tmp_path, repl_port=free_port(), replication_transport=secured_transport(users))
    nodes.append(t.start())
    r1 = Node("R1", tmp_path, destinations=[destination(t)])
    r2 = Node(
        "R2",
        tmp_path,
        destinations=[destination(t, authenticator=authenticator(User="repl", Password="no"))],
    )
    (tmp_path / "repl.pw").write_text("repl-pw\n")
    g = Node(
        "G",
        tmp_path,
        destinations=[
            destination(
                t,
                authenticator=authenticator(
                    User="repl", PasswordFileName=str(tmp_path / "repl.pw")
                ),
            )
        ],
    )
    for node in (r1, r2, g):
        nodes.append(node.start())

    refused = "logon refused (auth failure) for an incoming replication connection"
    wait_for(
        lambda: t.count("claiming to be 'R1', user") >= 1 and t.count("claiming to be 'R2'") >= 1,
        20,
        "both rogues refused by T",
    )
    assert refused in t.log()
    assert "claiming to be 'R2', user 'repl'" in t.log()
    before = {r.name: t.count(f"claiming to be '{r.name}'") for r in (r1, r2)}
    for rogue in (r1, r2):
        publish(rogue, "orders", [{"src": rogue.name, "n": n} for n in range(5)])
    wait_for(
        lambda: all(r.count("refused this instance's logon as user") >= 1 for r in (r1, r2)),
        20,
        "the refusal logged by each rogue",
    )
    # each rogue dials again (with its messages waiting to be sent) and is refused again
    wait_for(
        lambda: all(t.count(f"claiming to be '{r.name}'") > before[r.name] for r in (r1, r2)),
        20,
        "the rogues refused again after publishing",
    )
    publish(g, "orders", [{"src": "G", "n": n} for n in range(5)] + [{"src": "G", "marker": 1}])
    wait_for(lambda: any("marker" in d for d in held(t, "orders")), 20, "G's marker on T")
    docs = held(t, "orders")
    assert [d["src"] for d in docs] == ["G"] * 6
    assert [d.get("n") for d in docs[:5]] == [0, 1, 2, 3, 4]
    assert "link up with 'R1'" not in t.log() and "link up with 'R2'" not in t.log()
    assert "link up with 'G'" in t.log()
    assert [d["src"] for d in held(r1, "orders")] == ["R1"] * 5  # they did have messages


def test_entitlement_limits_the_topics_a_link_may_replicate(
    tmp_path: Path, nodes: list[Node], users: Path
) -> None:
    """G replicates 'prices' and 'orders'; its user may only write '^orders$' on T: every
    price is refused (logged) and not recorded, the orders arrive."""
    t = Node("T", tmp_path, repl_port=free_port(), replication_transport=secured_transport(users))
    nodes.append(t.start())
    g = Node(
        "G",
        tmp_path,
        destinations=[
            destination(
                t,
                topics=("prices", "orders"),
                authenticator=authenticator(User="repl", Password="repl-pw"),
            )
        ],
    )
    nodes.append(g.start())
    publish(g, "prices", [{"sym": "X", "n": n} for n in range(3)])
    publish(g, "orders", [{"n": n} for n in range(3)] + [{"marker": 1}])
    wait_for(lambda: any("marker" in d for d in held(t, "orders")), 20, "the orders marker on T")
    assert [d.get("n") for d in held(t, "orders")] == [0, 1, 2, None]
    assert held(t, "prices") == []
    assert held(g, "prices") == [{"sym": "X", "n": n} for n in range(3)]
    line = next(x for x in t.log().splitlines() if "not entitled" in x)
    assert "publish on topic 'prices' from 'G' (user 'repl') refused: not entitled" in line


def test_without_secret_or_authentication_anyone_who_reaches_the_port_replicates(
    tmp_path: Path, nodes: list[Node]
) -> None:
    """No <Secret> and no <Authentication>: the start warns, and an instance nobody
    configured (no credentials, a name T never heard of) replicates into T: its messages are
    recorded and delivered as if published on T."""
    t = Node("T", tmp_path, repl_port=free_port())
    nodes.append(t.start())
    warning = (
        "no shared <Secret> and no <Authentication> on transport 'amps-replication': any "
        f"process that reaches 127.0.0.1:{t.repl_port} can replicate into this instance"
    )
    assert warning in t.log()
    stranger = Node("Stranger", tmp_path, destinations=[destination(t)])
    nodes.append(stranger.start())
    publish(stranger, "orders", [{"src": "stranger", "n": n} for n in range(3)])
    wait_for(lambda: len(held(t, "orders")) == 3, 20, "the stranger's messages on T")
    assert held(t, "orders") == [{"src": "stranger", "n": n} for n in range(3)]
    assert "link up with 'Stranger'" in t.log()


# --------------------------------------------------------------------------- in process


def start_thread(node: Node, threads: list[Any]) -> Any:
    """``node`` as a :class:`ServerThread` of this process (its XML, ports 0 for clients)."""
    from ampsclient_server_stub import ServerThread
    from ampsclient_server_stub.config import parse_config

    node.data_dir.mkdir(parents=True, exist_ok=True)
    config = parse_config(node.config_xml(0, 0), base_dir=node.data_dir)
    thread = ServerThread(config, fsync="never").start()
    threads.append(thread)
    return thread


@pytest.fixture
def threads() -> Iterator[list[Any]]:
    running: list[Any] = []
    yield running
    for thread in running:
        thread.stop()


def test_challenge_response_logon_without_the_password_on_the_wire(
    tmp_path: Path, users: Path, threads: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """T's transport uses ``challenge-response``; G's ``<Authenticator>`` answers the
    challenge with the password from an environment variable; the admin client logs on too."""
    from ampsclient_server_stub.replication import AdminError, admin_call

    monkeypatch.setenv("REPL_PW", "repl-pw")
    t = Node(
        "T",
        tmp_path,
        repl_port=free_port(),
        replication_transport=secured_transport(users, "challenge-response"),
    )
    tt = start_thread(t, threads)
    g = Node(
        "G",
        tmp_path,
        destinations=[
            destination(
                t,
                authenticator=authenticator(
                    "challenge-response", User="repl", PasswordEnvironmentVariable="REPL_PW"
                ),
            )
        ],
    )
    start_thread(g, threads)
    assert t.repl_port is not None
    port = t.repl_port

    def status() -> dict[str, Any]:
        result: dict[str, Any] = admin_call(
            "127.0.0.1", port, "", "status", user="repl", password="repl-pw"
        )
        return result

    wait_for(lambda: any(i["connected"] for i in status()["inbound"]), 20, "G's stream on T")
    with pytest.raises(AdminError, match="auth failure"):
        admin_call("127.0.0.1", port, "", "status", user="repl", password="wrong")
    with pytest.raises(AdminError, match="auth failure"):
        admin_call("127.0.0.1", port, "", "status")
    assert [link["peer"] for link in status()["links"]] == ["G"]
    assert tt.server.replication.counters["auth_failures"] == 2
    from ampsclient_server_stub.replication.admin import main

    assert main([f"127.0.0.1:{port}", "journal", "--user", "repl"]) == 1  # no password
    monkeypatch.setenv("AMPS_REPLICATION_PASSWORD", "repl-pw")
    assert main([f"127.0.0.1:{port}", "journal", "--user", "repl"]) == 0


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (authenticator(Passwrd="x"), "unknown option <Passwrd>"),
        (authenticator("kerberos"), "unknown authenticator module 'kerberos'"),
        (
            authenticator(PasswordEnvironmentVariable="AMPSCLIENT_TEST_UNSET_VARIABLE"),
            "environment variable AMPSCLIENT_TEST_UNSET_VARIABLE is not set",
        ),
        (authenticator(PasswordFileName="missing.pw"), "cannot read the password file"),
    ],
)
def test_an_unusable_authenticator_fails_the_start(
    tmp_path: Path, threads: list[Any], xml: str, message: str
) -> None:
    from ampsclient_server_stub.security.auth import SecurityConfigError

    t = Node("T", tmp_path, repl_port=free_port())
    g = Node("G", tmp_path, destinations=[destination(t, authenticator=xml)])
    with pytest.raises(SecurityConfigError, match=message) as info:
        start_thread(g, threads)
    assert "the <Authenticator> of replication destination 'T'" in str(info.value)


def test_a_refused_listener_logon_keeps_the_link_one_way(
    tmp_path: Path, threads: list[Any]
) -> None:
    """Both instances require a logon. A's credentials for B are right, B's for A are wrong.
    As with AMPS' one-way connections, A replicates to B, and nothing of B reaches A: B's
    logon to A is refused both on the link A dialed and on B's own dials."""
    users = tmp_path / "users.json"
    add_user(users, "a-repl", "a-pw", read=[".*"], write=[".*"], **FAST)
    add_user(users, "b-repl", "b-pw", read=[".*"], write=[".*"], **FAST)
    a = Node("A", tmp_path, repl_port=free_port(), replication_transport=secured_transport(users))
    b = Node("B", tmp_path, repl_port=free_port(), replication_transport=secured_transport(users))
    a.destinations = [destination(b, authenticator=authenticator(User="a-repl", Password="a-pw"))]
    b.destinations = [destination(a, authenticator=authenticator(User="b-repl", Password="no"))]
    ta, tb = start_thread(a, threads), start_thread(b, threads)
    uri_a, uri_b = ta.uri("tcp", "json"), tb.uri("tcp", "json")
    for uri, name in ((uri_b, "B"), (uri_a, "A")):
        with Client(f"pub-{name}") as client:
            client.connect(uri)
            client.logon(5000)
            client.publish("orders", json.dumps({"src": name}))
            client.flush(10_000)
    wait_for(
        lambda: [json.loads(b)["src"] for _, b in epoch_replay(uri_b, "orders")] == ["B", "A"],
        20,
        "A's order on B",
    )
    # B keeps trying (its own dials, refused at A): wait for a few refusals, then check A

    def failures() -> int:
        return int(ta.call(lambda: ta.server.replication.counters["auth_failures"]))

    wait_for(lambda: failures() >= 3, 20, "B's logons refused by A")
    assert [json.loads(b)["src"] for _, b in epoch_replay(uri_a, "orders")] == ["A"]


def test_a_peer_that_skips_the_logon_is_closed_and_nothing_is_recorded(
    tmp_path: Path, users: Path, threads: list[Any]
) -> None:
    """A hand-written client of the link protocol proves the (empty) secret, skips the logon
    and sends a stream of records: the link is closed at the first of them, nothing recorded."""
    import socket
    import struct

    from ampsclient_server_stub.replication.protocol import (
        PROTOCOL_VERSION,
        WireRecord,
        decode_frame,
        encode_frame,
        make_nonce,
        pack_records,
        proof,
    )

    t = Node("T", tmp_path, repl_port=free_port(), replication_transport=secured_transport(users))
    tt = start_thread(t, threads)
    assert t.repl_port is not None
    nonce = make_nonce()
    record: WireRecord = (1, 99, 1, "p", "orders", b'{"src":"rogue"}', {"mt": "json"})
    with socket.create_connection(("127.0.0.1", t.repl_port), timeout=10) as sock:
        sock.sendall(
            encode_frame(
                {
                    "c": "rhello",
                    "name": "Rogue",
                    "role": "replication",
                    "nonce": nonce,
                    "v": PROTOCOL_VERSION,
                }
            )
        )
        (size,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
        challenge, _ = decode_frame(sock.recv(size, socket.MSG_WAITALL))
        assert challenge["c"] == "rchallenge"
        sock.sendall(
            encode_frame({"c": "rauth", "proof": proof("", "dialer", challenge["nonce"], "Rogue")})
            + encode_frame({"c": "ropen", "d": "T", "sync": "async"})
            + encode_frame({"c": "rrec", "d": "T"}, pack_records([record]))
        )
        rest = b""
        while chunk := sock.recv(65536):  # the instance closes the connection
            rest += chunk
    assert held_thread(tt, "orders") == []
    assert tt.call(lambda: tt.server.replication.status()["links"]) == []


def test_a_peer_of_an_older_protocol_version_is_refused_at_the_hello(
    tmp_path: Path, threads: list[Any]
) -> None:
    """A peer speaking the version before journal blocks and queue transfers (2) gets an
    ``rreject`` naming the version as its first answer, and the link closes."""
    import socket
    import struct

    from ampsclient_server_stub.replication.protocol import (
        PROTOCOL_VERSION,
        decode_frame,
        encode_frame,
        make_nonce,
    )

    t = Node("T", tmp_path, repl_port=free_port())
    start_thread(t, threads)
    assert t.repl_port is not None and PROTOCOL_VERSION > 2
    hello = {"c": "rhello", "name": "Old", "role": "replication", "nonce": make_nonce(), "v": 2}
    with socket.create_connection(("127.0.0.1", t.repl_port), timeout=10) as sock:
        sock.sendall(encode_frame(hello))
        (size,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
        answer, _ = decode_frame(sock.recv(size, socket.MSG_WAITALL))
        assert answer["c"] == "rreject"
        assert answer["reason"] == "unsupported protocol version"
        assert sock.recv(1) == b""  # closed by the instance


def held_thread(thread: Any, topic: str) -> list[bytes]:
    """The payloads of ``topic`` in an in-process instance's journal."""
    journal = thread.server.journal

    def read() -> list[bytes]:
        out: list[bytes] = []
        position = journal.first_index
        while batch := journal.read(position, max_records=5000):
            out += [bytes(r.payload) for r in batch if r.topic == topic]
            position = batch[-1].index + 1
        return out

    return list(thread.call(read))
