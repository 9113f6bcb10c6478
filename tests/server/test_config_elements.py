"""Every configuration element the reader accepts has an effect on a running server (#17).

The table is built from the reader itself: :data:`ampsclient_server_stub.config_elements.ELEMENTS`
lists every accepted element, and :data:`PROOFS` below must hold a proof for each (a new
accepted element without one fails :func:`test_every_accepted_element_has_a_proof`). A proof
is either

* a :class:`Probe`: a function here that starts a server (in process, real sockets on
  127.0.0.1, real files) with a configuration using the element and observes its effect, or
  that start-up fails with an error naming it; or
* a :class:`Covered`: an existing test that does so against a real server (the table test
  checks that the test exists, so a renamed or deleted test breaks the table).

The last tests show the elements and values the reader refuses instead of ignoring.
"""

from __future__ import annotations

import ast
import datetime
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.config_elements import DELEGATED, ELEMENTS
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.testing import RawClient
from ampsclient_server_stub.testing.wait import wait_for

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Probe:
    """A check in this file: ``run(tmp_path)`` starts a server and asserts the effect."""

    run: Callable[[Path], None]


@dataclass(frozen=True)
class Covered:
    """An existing real-server test proves the effect: ``"file.py::test_name"`` under tests/."""

    test: str


# --------------------------------------------------------------------------- helpers

TCP = "<Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>{extra}</Transport>"


def config_xml(body: str = "", *, transport: str = "", transports: str = "") -> str:
    listeners = TCP.format(extra=transport) + transports
    return f"<AMPSConfig><Name>probe</Name>{body}<Transports>{listeners}</Transports></AMPSConfig>"


@contextmanager
def serving(tmp_path: Path, xml: str, **kwargs: Any) -> Iterator[ServerThread]:
    server = ServerThread(parse_config(xml, base_dir=tmp_path), **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def client(server: ServerThread, name: str) -> RawClient:
    raw = RawClient(server.tcp_port)
    raw.logon(name)
    return raw


def publish(raw: RawClient, topic: str, docs: list[dict[str, Any]], first: int = 1) -> None:
    for seq, doc in enumerate(docs, start=first):
        raw.send({"c": "p", "t": topic, "s": seq}, json.dumps(doc).encode())
    raw.send({"c": "flush", "cid": "F", "a": "persisted"})
    raw.recv_until(lambda h: h.get("cid") == "F", 10)


def sow_query(raw: RawClient, topic: str) -> list[tuple[str, bytes]]:
    """``(key, record)`` of every record of a SOW query, until its completed ack."""
    raw.send({"c": "sow", "cid": "Q", "t": topic, "a": "completed"})
    out: list[tuple[str, bytes]] = []
    while True:
        hdr, body = raw.recv(10)
        if hdr.get("c") == "ack" and hdr.get("cid") == "Q":
            return out
        if hdr.get("c") == "sow":
            out.extend(_records(body))


def _records(batch: bytes) -> list[tuple[str, bytes]]:
    from ampsclient.protocol.header import decode_header

    out = []
    pos = 0
    while pos < len(batch):
        hdr, end = decode_header(batch[pos:])
        length = int(hdr["l"])
        out.append((str(hdr["k"]), batch[pos + end : pos + end + length]))
        pos += end + length
    return out


def bookmark_ack(raw: RawClient, topic: str) -> dict[str, Any]:
    cid = f"B-{topic}"
    raw.send({"c": "subscribe", "cid": cid, "t": topic, "bm": "0", "a": "processed"})
    return raw.recv_until(lambda h: h.get("cid") == cid, 10)[0]


def refused(tmp_path: Path, xml: str, pattern: str) -> None:
    """The configuration is refused (at load or at start) with a message matching ``pattern``."""
    with pytest.raises(ConfigError, match=pattern), serving(tmp_path, xml):
        pass


def admin_instance(server: ServerThread) -> dict[str, Any]:
    admin = server.server.admin
    assert admin is not None
    url = f"http://127.0.0.1:{admin.port}/amps/instance"
    with urllib.request.urlopen(url, timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


# --------------------------------------------------------------------------- instance


def probe_name_group(tmp_path: Path) -> None:
    body = "<Group>g-1</Group><Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>"
    xml = config_xml(body).replace("<Name>probe</Name>", "<Name>named-1</Name>")
    with serving(tmp_path, xml) as server:
        info = admin_instance(server)
        assert (info["name"], info["group"]) == ("named-1", "g-1")


def probe_data_directory(tmp_path: Path) -> None:
    body = (
        "<DataDirectory>state</DataDirectory><SOW><Topic><Name>s</Name>"
        "<MessageType>json</MessageType><Key>/id</Key><FileName>s.sqlite</FileName></Topic></SOW>"
    )
    with serving(tmp_path, config_xml(body)) as server, client(server, "d") as raw:
        publish(raw, "s", [{"id": 1}])
    assert (tmp_path / "state" / "s.sqlite").exists()


def probe_root_max_frame_size(tmp_path: Path) -> None:
    with serving(tmp_path, config_xml("<MaxFrameSize>4KB</MaxFrameSize>")) as server:
        with client(server, "small") as raw:
            raw.send({"c": "p", "t": "x", "s": 1}, b'{"pad": "' + b"x" * 8192 + b'"}')
            assert raw.wait_closed(10)
        with client(server, "fits") as raw:  # the server is fine; small frames pass
            publish(raw, "x", [{"n": 1}])


# --------------------------------------------------------------------------- transports


def probe_transport_name_type_inetaddr(tmp_path: Path) -> None:
    ws = "<Transport><Name>w</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>"
    with serving(tmp_path, config_xml(transports=ws)) as server:
        assert server.server.config.transport("w") is not None
        with Client("ws-probe") as ws_client:  # the ws listener speaks WebSocket
            ws_client.connect(server.uri("ws"))
            ws_client.logon(5000)
        with client(server, "tcp-probe"):  # the tcp listener speaks the framed protocol
            pass
        assert "listening tcp://127.0.0.1:" in server.server.listening_line()


def probe_protocol_websocket(tmp_path: Path) -> None:
    with serving(tmp_path, config_xml(transport="<Protocol>websocket</Protocol>")) as server:
        uri = f"ws://127.0.0.1:{server.server.ws_port}/amps/json"
        with Client("ws-on-tcp") as ws_client:
            ws_client.connect(uri)
            ws_client.logon(5000)


def probe_transport_message_type(tmp_path: Path) -> None:
    nvfix_port = free_port()
    other = (
        f"<Transport><Name>x</Name><Type>tcp</Type><InetAddr>127.0.0.1:{nvfix_port}</InetAddr>"
        "<MessageType>nvfix</MessageType></Transport>"
    )
    xml = config_xml(transport="<MessageType>json</MessageType>", transports=other)
    with (
        serving(tmp_path, xml) as server,
        client(server, "sub") as sub,
        RawClient(nvfix_port) as fix,
    ):
        fix.logon("fix-pub")
        sub.send({"c": "subscribe", "cid": "S", "t": "m", "a": "processed"})
        sub.wait_ack("processed")
        fix.send({"c": "p", "t": "m", "s": 1}, b"1=a\x01")
        fix.send({"c": "flush", "cid": "F", "a": "persisted"})
        fix.recv_until(lambda h: h.get("cid") == "F", 10)
        with client(server, "json-pub") as pub:
            publish(pub, "m", [{"marker": 1}])
        _, body = sub.recv_until(lambda h: h.get("c") == "p", 10)
        assert json.loads(body) == {"marker": 1}  # the nvfix message is another type


def probe_private_key_password(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, password=b"s3cret")
    tls = (
        "<Transport><Name>s</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>"
        f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
        "<PrivateKeyPassword>{pw}</PrivateKeyPassword></Transport>"
    )
    with serving(tmp_path, config_xml(transports=tls.replace("{pw}", "s3cret"))) as server:
        assert server.uri("tcps").startswith("tcps://")
    refused(tmp_path, config_xml(transports=tls.replace("{pw}", "wrong")), "'s'.*certificate")


def _self_signed(tmp_path: Path, *, password: bytes) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        )
    )
    return cert_path, key_path


def _slow_subscriber(tmp_path: Path, root: str, transport: str, counter: str) -> None:
    """A subscriber that never reads; ``counter`` (``slow_offlined`` or ``slow_disconnected``)
    must move once enough is published towards it."""
    with serving(tmp_path, config_xml(root, transport=transport)) as server:
        sub = RawClient(server.tcp_port, rcvbuf=4096)
        try:
            sub.logon("slow")
            sub.send({"c": "subscribe", "cid": "S", "t": "t", "a": "processed"})
            sub.wait_ack("processed")
            body = json.dumps({"pad": "x" * 8000}).encode()
            with client(server, "pub") as pub:
                deadline = time.monotonic() + 30
                sent = 0
                while server.statistics().get(counter, 0) == 0:
                    assert time.monotonic() < deadline, f"{counter} never moved"
                    for _ in range(100):
                        sent += 1
                        pub.send({"c": "p", "t": "t", "s": sent}, body)
                    pub.send({"c": "flush", "cid": "F", "a": "persisted"})
                    pub.recv_until(lambda h: h.get("cid") == "F", 10)
        finally:
            sub.close()


def probe_transport_memory_pool(tmp_path: Path) -> None:
    disk = tmp_path / "offline"
    transport = (
        "<MessageMemoryLimit>1MB</MessageMemoryLimit><ClientMaxCapacity>50%</ClientMaxCapacity>"
    )
    _slow_subscriber(
        tmp_path, f"<MessageDiskPath>{disk}</MessageDiskPath>", transport, "slow_offlined"
    )


def probe_transport_disk_limit(tmp_path: Path) -> None:
    disk = tmp_path / "offline"
    transport = (
        "<MessageMemoryLimit>1MB</MessageMemoryLimit><MessageDiskLimit>2MB</MessageDiskLimit>"
    )
    _slow_subscriber(
        tmp_path, f"<MessageDiskPath>{disk}</MessageDiskPath>", transport, "slow_disconnected"
    )


def probe_transport_age_limit(tmp_path: Path) -> None:
    transport = "<ClientMessageAgeLimit>1s</ClientMessageAgeLimit>"
    _slow_subscriber(tmp_path, "", transport, "slow_disconnected")


# --------------------------------------------------------------------------- SOW


def _sow_topic(tag: str, section: str, extra: str) -> str:
    name = "<Topic>s</Topic>" if tag == "legacy" else "<Name>s</Name>"
    element = "TopicDefinition" if tag in ("definition", "legacy") else "Topic"
    return (
        f"<{section}><{element}>{name}<MessageType>json</MessageType><Key>/id</Key>"
        f"{extra}</{element}></{section}>"
    )


SOW_SPELLINGS = [("topic", "SOW"), ("definition", "SOW"), ("legacy", "TopicMetaData")]


def probe_sow(tmp_path: Path) -> None:
    """Name, MessageType, Key and FileName in each spelling: records with equal keys replace
    each other, and the SOW file keeps them across a restart."""
    for n, (tag, section) in enumerate(SOW_SPELLINGS):
        base = tmp_path / f"s{n}"
        xml = config_xml(_sow_topic(tag, section, "<FileName>s.sqlite</FileName>"))
        for restart in (False, True):
            with serving(base, xml) as server, client(server, "sow") as raw:
                if not restart:
                    publish(raw, "s", [{"id": 1, "v": "a"}, {"id": 2}, {"id": 1, "v": "b"}])
                records = sorted(json.loads(body).get("v", "") for _, body in sow_query(raw, "s"))
                assert records == ["", "b"], (tag, restart)
        assert (base / "s.sqlite").exists()


def probe_sow_key_domain(tmp_path: Path) -> None:
    """Two topics with the same KeyDomain give a document the same SOW key."""
    topics = (
        "".join(
            f"<Topic><Name>{t}</Name><MessageType>json</MessageType><Key>/id</Key>"
            f"<KeyDomain>shared</KeyDomain></Topic>"
            for t in ("a", "b")
        )
        + "<Topic><Name>c</Name><MessageType>json</MessageType><Key>/id</Key></Topic>"
    )
    with (
        serving(tmp_path, config_xml(f"<SOW>{topics}</SOW>")) as server,
        client(server, "k") as raw,
    ):
        keys: dict[str, str] = {}
        for topic in ("a", "b", "c"):
            publish(raw, topic, [{"id": 7}], first=len(keys) + 1)
            ((keys[topic], _),) = sow_query(raw, topic)
        assert keys["a"] == keys["b"] != keys["c"]


def probe_sow_expiration(tmp_path: Path) -> None:
    # one server per spelling, all running at once: their records expire together
    with ExitStack() as stack:
        raws: list[RawClient] = []
        for n, (tag, section) in enumerate(SOW_SPELLINGS):
            xml = config_xml(_sow_topic(tag, section, "<Expiration>1s</Expiration>"))
            server = stack.enter_context(serving(tmp_path / f"e{n}", xml))
            raw = stack.enter_context(client(server, "x"))
            raw.send({"c": "subscribe", "cid": "S", "t": "s", "o": "oof", "a": "processed"})
            raw.wait_ack("processed")
            publish(raw, "s", [{"id": 1}])
            raws.append(raw)
        for raw in raws:
            hdr, _ = raw.recv_until(lambda h: h.get("c") == "oof", 15)
            assert hdr["reason"] == "expired"
            assert sow_query(raw, "s") == []


def probe_sow_durability(tmp_path: Path) -> None:
    """transient: the SOW is in memory (empty after a restart); persistent needs a FileName
    and keeps the records; transient with a FileName is a contradiction."""
    for n, (tag, section) in enumerate(SOW_SPELLINGS):
        base = tmp_path / f"d{n}"
        xml = config_xml(_sow_topic(tag, section, "<Durability>transient</Durability>"))
        for restart in (False, True):
            with (
                serving(base, xml, record_all_topics=False) as server,
                client(server, "dur") as raw,
            ):
                if not restart:
                    publish(raw, "s", [{"id": 1}])
                assert len(sow_query(raw, "s")) == (0 if restart else 1)
        bad = _sow_topic(tag, section, "<Durability>persistent</Durability>")
        refused(base, config_xml(bad), "persistent needs a <FileName>")
        bad = _sow_topic(tag, section, "<Durability>transient</Durability><FileName>f</FileName>")
        refused(base, config_xml(bad), "transient with a <FileName>")


# --------------------------------------------------------------------------- transaction log


def probe_txlog_topics(tmp_path: Path) -> None:
    """Topic Name and MessageType decide what is recorded; JournalDirectory where; JournalSize
    when a file is sealed (a small size makes several files)."""
    body = (
        "<TransactionLog><JournalDirectory>jdir</JournalDirectory><JournalSize>64KB</JournalSize>"
        "<PreallocatedJournalFiles>1</PreallocatedJournalFiles>"
        "<Topic><Name>^rec/.*</Name><MessageType>json</MessageType></Topic>"
        "<Topic><Name>other</Name><MessageType>nvfix</MessageType></Topic></TransactionLog>"
    )
    with serving(tmp_path, config_xml(body)) as server, client(server, "j") as raw:
        publish(raw, "rec/a", [{"pad": "x" * 1000, "n": n} for n in range(200)])
        assert bookmark_ack(raw, "rec/a")["status"] == "success"
        for topic in ("other", "elsewhere"):  # "other" is recorded for nvfix only
            ack = bookmark_ack(raw, topic)
            assert (ack["status"], ack["reason"]) == ("failure", "invalid topic")
    files = sorted((tmp_path / "jdir").glob("*.journal*"))
    assert len(files) >= 3  # 200 KB in 64 KB files


# --------------------------------------------------------------------------- the table

SECURITY = "security/test_tls_auth.py::"
LIMITS = "security/test_limits.py::"
REPL = "replication/test_links.py::"
REPL_SEC = "replication/test_security.py::"
JOURNAL = "txlog/test_journal_actions.py::"
DEAD = "queues/test_dead_letter.py::"
QUEUES = "queues/"
COMPOSITE = "server/test_composite_types.py::"

_AUTH = Covered(SECURITY + "test_users_file_authentication_and_no_credentials_in_logs")
_ENT = Covered(SECURITY + "test_entitlements_on_commands")
_SOW = Probe(probe_sow)
_KEY_DOMAIN = Probe(probe_sow_key_domain)
_EXPIRATION = Probe(probe_sow_expiration)
_DURABILITY = Probe(probe_sow_durability)
HISTORY = "server/test_config_history.py::"
_HISTORY = Covered(HISTORY + "test_a_historical_query_returns_the_sow_as_it_was")
_ENRICHMENT = Covered(
    "server/test_sow_enrichment.py::test_subscriber_sow_and_replay_see_the_processed_messages"
)

PROOFS: dict[str, Probe | Covered] = {
    "Name": Probe(probe_name_group),
    "Group": Probe(probe_name_group),
    "DataDirectory": Probe(probe_data_directory),
    "MessageDiskPath": Covered(
        LIMITS + "test_slow_subscriber_is_offlined_then_catches_up_in_order"
    ),
    "Authenticator/Module": Covered(
        REPL_SEC + "test_challenge_response_logon_without_the_password_on_the_wire"
    ),
    "Authenticator/Options/*": Covered(REPL_SEC + "test_an_unusable_authenticator_fails_the_start"),
    "ClientMessageAgeLimit": Covered(LIMITS + "test_age_limit_disconnects_a_stalled_subscriber"),
    "ClientMaxCapacity": Covered(
        LIMITS + "test_slow_subscriber_is_offlined_then_catches_up_in_order"
    ),
    "SOWStatsInterval": Covered(
        "server/test_event_topics.py::test_sow_stats_every_interval_one_message_per_sow_topic"
    ),
    "MessageMemoryLimit": Covered(
        LIMITS + "test_slow_subscriber_is_offlined_then_catches_up_in_order"
    ),
    "MessageDiskLimit": Covered(LIMITS + "test_disk_limit_disconnects_and_removes_the_file"),
    "MaxFrameSize": Probe(probe_root_max_frame_size),
    "MaxConnections": Covered(LIMITS + "test_connection_cap_per_transport"),
    "LogonTimeout": Covered(
        "security/test_idle_connections.py::"
        "test_connections_that_never_log_on_are_closed_and_free_their_places"
    ),
    "LogonFailureLimit": Covered(
        "security/test_logon_lockout.py::test_a_guessed_user_is_locked_out_on_a_real_server"
    ),
    "LogonLockout": Covered(
        "security/test_logon_lockout.py::test_a_guessed_user_is_locked_out_on_a_real_server"
    ),
    "Authentication/Module": _AUTH,
    "Authentication/Options/*": _AUTH,
    "Entitlement/Module": _ENT,
    "Entitlement/Options/*": _ENT,
    "Admin/InetAddr": Probe(probe_name_group),
    "Admin/Interval": Covered("admin/test_auth.py::test_unsupported_admin_options_are_refused"),
    "Admin/FileName": Covered("admin/test_auth.py::test_unsupported_admin_options_are_refused"),
    "Admin/WWWAuthenticate": Covered("admin/test_auth.py::test_credentials_and_entitlements"),
    "Admin/AnonymousPaths": Covered("admin/test_auth.py::test_anonymous_paths"),
    "Admin/Certificate": Covered("security/test_admin_https.py::test_admin_over_https"),
    "Admin/PrivateKey": Covered("security/test_admin_https.py::test_admin_over_https"),
    "Admin/AllowedHosts": Covered(
        "admin/test_csrf.py::test_cross_site_actions_are_refused_and_the_journal_stays"
    ),
    "Transports/Transport/Name": Probe(probe_transport_name_type_inetaddr),
    "Transports/Transport/Type": Probe(probe_transport_name_type_inetaddr),
    "Transports/Transport/InetAddr": Probe(probe_transport_name_type_inetaddr),
    "Transports/Transport/Protocol": Probe(probe_protocol_websocket),
    "Transports/Transport/MessageType": Probe(probe_transport_message_type),
    "Transports/Transport/Certificate": Covered(
        SECURITY + "test_tls_round_trip_and_verification_on_by_default"
    ),
    "Transports/Transport/PrivateKey": Covered(
        SECURITY + "test_tls_round_trip_and_verification_on_by_default"
    ),
    "Transports/Transport/PrivateKeyPassword": Probe(probe_private_key_password),
    "Transports/Transport/CAFile": Covered(SECURITY + "test_tls_client_certificate_required"),
    "Transports/Transport/RequireClientCertificate": Covered(
        SECURITY + "test_tls_client_certificate_required"
    ),
    "Transports/Transport/Path": Covered(
        "server/test_unix_listener.py::test_stale_socket_is_replaced_and_removed_on_stop"
    ),
    "Transports/Transport/Compression": Covered(
        "client/test_unix_zlib.py::test_compressed_round_trip_message_by_message"
    ),
    "Transports/Transport/Secret": Covered(
        REPL + "test_wrong_secret_is_refused_with_logs_on_both_sides"
    ),
    "Transports/Transport/ClientMessageAgeLimit": Probe(probe_transport_age_limit),
    "Transports/Transport/ClientMaxCapacity": Probe(probe_transport_memory_pool),
    "Transports/Transport/MessageMemoryLimit": Probe(probe_transport_memory_pool),
    "Transports/Transport/MessageDiskLimit": Probe(probe_transport_disk_limit),
    "Transports/Transport/MaxFrameSize": Covered(LIMITS + "test_max_frame_size_from_xml"),
    "Transports/Transport/MaxConnections": Covered(LIMITS + "test_connection_cap_per_transport"),
    "Transports/Transport/LogonTimeout": Covered(
        "security/test_idle_connections.py::test_defaults_and_zero_turns_the_deadline_off"
    ),
    "Transports/Transport/Authentication/Module": _AUTH,
    "Transports/Transport/Authentication/Options/*": _AUTH,
    "Transports/Transport/Entitlement/Module": _ENT,
    "Transports/Transport/Entitlement/Options/*": _ENT,
    **{
        f"{prefix}/{leaf}": proof
        for prefix in ("SOW/Topic", "SOW/TopicDefinition", "TopicMetaData/TopicDefinition")
        for leaf, proof in (
            ("Name", _SOW),
            ("MessageType", _SOW),
            ("Key", _SOW),
            ("FileName", _SOW),
            ("KeyDomain", _KEY_DOMAIN),
            ("Expiration", _EXPIRATION),
            ("Durability", _DURABILITY),
            ("History/Window", _HISTORY),
            ("History/Granularity", Covered(HISTORY + "test_granularity_rounds_the_time_down")),
            ("Preprocessing/Field", _ENRICHMENT),
            ("Enrichment/Field", _ENRICHMENT),
            (
                "HashIndex/Key",
                Covered("server/test_hash_index.py::test_the_index_answers_and_says_so"),
            ),
            ("Index", Covered("server/test_hash_index.py::test_memo_index_fields_are_listed")),
        )
    },
    "SOW/TopicDefinition/Topic": _SOW,
    "TopicMetaData/TopicDefinition/Topic": _SOW,
    "TransactionLog/JournalDirectory": Probe(probe_txlog_topics),
    "TransactionLog/JournalArchiveDirectory": Covered(
        JOURNAL + "test_scheduled_archive_and_compress_keep_every_message_replayable"
    ),
    "TransactionLog/JournalSize": Probe(probe_txlog_topics),
    "TransactionLog/PreallocatedJournalFiles": Covered(
        JOURNAL + "test_preallocated_journal_files_are_kept_ready"
    ),
    "TransactionLog/FlushInterval": Covered(
        JOURNAL + "test_flush_interval_sets_the_group_commit_period"
    ),
    "TransactionLog/Topic/Name": Probe(probe_txlog_topics),
    "TransactionLog/Topic/MessageType": Probe(probe_txlog_topics),
    "TransactionLog/Topic/Filter": Covered(
        "server/test_config_recording.py::test_txlog_topic_filter_records_only_matching_messages"
    ),
    "Replication/Destination/Name": Covered(
        REPL + "test_sync_ack_waits_for_the_destination_and_fully_durable_follows"
    ),
    "Replication/Destination/Group": Covered(
        "replication/test_topologies.py::test_regional_layout_with_passthrough_and_destination_failover"
    ),
    "Replication/Destination/SyncType": Covered(
        REPL + "test_sync_ack_waits_for_the_destination_and_fully_durable_follows"
    ),
    "Replication/Destination/Topic/Name": Covered(
        REPL_SEC + "test_entitlement_limits_the_topics_a_link_may_replicate"
    ),
    "Replication/Destination/Topic/MessageType": Covered(
        REPL + "test_sync_ack_waits_for_the_destination_and_fully_durable_follows"
    ),
    "Replication/Destination/Topic/Filter": Covered(
        "replication/test_topologies.py::test_regional_layout_with_passthrough_and_destination_failover"
    ),
    "Replication/Destination/Topic/ExcludeValidation": Covered(
        REPL + "test_exclude_validation_allows_the_link"
    ),
    "Replication/Destination/PassThrough": Covered(
        "replication/test_topologies.py::test_full_mesh_passthrough_everything_has_no_loops"
    ),
    "Replication/Destination/Compression": Covered(
        "replication/test_compression.py::test_compressed_link_delivers_the_same_messages_with_fewer_bytes"
    ),
    "Replication/Destination/Secret": Covered(
        REPL + "test_wrong_secret_is_refused_with_logs_on_both_sides"
    ),
    "Replication/Destination/Transport/Name": Covered(
        "server/test_config.py::test_sample_replication"
    ),
    "Replication/Destination/Transport/Type": Covered(
        "server/test_config.py::test_invalid_content"
    ),
    "Replication/Destination/Transport/InetAddr": Covered(
        "replication/test_failover.py::test_hot_hot_failover_exactly_once_and_resync"
    ),
    "Replication/Destination/Transport/Compression": Covered(
        "replication/test_compression.py::test_compression_setting"
    ),
    "Replication/Destination/Transport/Secret": Covered(
        REPL + "test_wrong_secret_is_refused_with_logs_on_both_sides"
    ),
    "Replication/Destination/Transport/Authenticator/Module": Covered(
        REPL_SEC + "test_rogue_instances_are_refused_and_nothing_they_send_is_recorded"
    ),
    "Replication/Destination/Transport/Authenticator/Options/*": Covered(
        REPL_SEC + "test_challenge_response_logon_without_the_password_on_the_wire"
    ),
    "Actions/Action/On/Module": Covered(JOURNAL + "test_the_configuration_guide_example_runs"),
    "Actions/Action/On/Options/Every": Covered(
        JOURNAL + "test_every_takes_the_three_forms_of_the_guide"
    ),
    "Actions/Action/On/Options/Name": Covered(
        JOURNAL + "test_the_configuration_guide_example_runs"
    ),
    "Actions/Action/Do/Module": Covered(REPL + "test_automatic_downgrade_then_upgrade"),
    "Actions/Action/Do/Options/Age": Covered(
        JOURNAL + "test_scheduled_remove_keeps_what_a_replay_needs_then_removes_it"
    ),
    "Actions/Action/On/Options/Topic": Covered(DEAD + "test_the_xml_configuration_runs"),
    "Actions/Action/On/Options/MessageType": Covered(DEAD + "test_the_xml_configuration_runs"),
    "Actions/Action/On/Options/Reason": Covered(DEAD + "test_the_xml_configuration_runs"),
    "Actions/Action/Do/Options/Topic": Covered(DEAD + "test_the_xml_configuration_runs"),
    "Actions/Action/Do/Options/MessageType": Covered(DEAD + "test_the_xml_configuration_runs"),
    "Actions/Action/Do/Options/Data": Covered(DEAD + "test_the_xml_configuration_runs"),
    "SOW/Queue/UnderlyingTopic": Covered(
        QUEUES + "test_queue_targets.py::"
        "test_a_regex_queue_takes_every_matching_topic_and_its_name_publishes_to_the_target"
    ),
    "SOW/Queue/DefaultPublishTarget": Covered(
        QUEUES + "test_queue_targets.py::test_a_publish_run_to_the_queue_name_is_rerouted"
    ),
    "SOW/Queue/ExpirationModel": Covered(
        QUEUES + "test_queue_expiration_model.py::test_each_model_combines_the_two_expirations"
    ),
    "SOW/Queue/TargetQueueDepth": Covered(
        QUEUES + "test_queue_target_depth.py::"
        "test_only_the_target_depth_is_active_and_the_rest_follows_in_order"
    ),
    "SOW/GroupLocalQueue/GroupLocalQueueDomain": Covered(
        QUEUES + "test_queue_domain.py::test_a_group_local_queue_with_a_domain_runs_on_one_instance"
    ),
    "SOW/Queue/FileBackedMetadata": Covered(
        QUEUES + "test_queue_file_backed.py::test_queued_bodies_stay_in_the_journal_not_in_memory"
    ),
    "MessageTypes/MessageType/Name": Covered(
        COMPOSITE + "test_a_filter_addresses_a_local_part_by_position"
    ),
    "MessageTypes/MessageType/Module": Covered(
        COMPOSITE + "test_a_filter_on_a_global_type_reads_the_merged_parts"
    ),
    "MessageTypes/MessageType/MessagePart": Covered(
        COMPOSITE + "test_sow_key_orderby_select_and_delta_merge_on_local_parts"
    ),
}
"""The proof of each accepted element."""

DELEGATED_PROOFS = {
    path: Covered("queues/test_queue_config.py::test_refused") for path in DELEGATED
}


def test_every_accepted_element_has_a_proof() -> None:
    assert sorted(set(ELEMENTS) - set(PROOFS)) == [], "accepted elements without a proof"
    assert sorted(set(PROOFS) - set(ELEMENTS)) == [], "proofs of elements no longer accepted"


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    }


@pytest.mark.parametrize("path", sorted({*PROOFS, *DELEGATED_PROOFS}))
def test_the_covering_test_exists(path: str) -> None:
    proof = PROOFS.get(path) or DELEGATED_PROOFS[path]
    if isinstance(proof, Covered):
        file, _, name = proof.test.partition("::")
        assert name in _test_names(TESTS / file), f"{path}: {proof.test} does not exist"


_PROBES = sorted(
    {proof.run.__name__: proof.run for proof in PROOFS.values() if isinstance(proof, Probe)}.items()
)


@pytest.mark.parametrize("probe", [run for _, run in _PROBES], ids=[name for name, _ in _PROBES])
def test_probe(probe: Callable[[Path], None], tmp_path: Path) -> None:
    """Each probe once (several elements share one)."""
    probe(tmp_path)


# --------------------------------------------------------------------------- refused


@pytest.mark.parametrize(
    ("xml", "pattern"),
    [
        (config_xml("<Modules/>"), r"<Modules> in <AMPSConfig> is not supported"),
        (config_xml(transport="<Protocol>fix</Protocol>"), r"<Protocol> 'fix' is not supported"),
        (
            config_xml(transport="<Certificate>c.pem</Certificate>"),
            r"<Certificate> applies to tcps and wss transports only",
        ),
        (config_xml(transport="<Secret>s</Secret>"), r"<Secret> applies to amps-replication"),
        (
            config_xml(
                "<Actions><Action><On><Module>amps-action-on-startup</Module></On><Do>"
                "<Module>amps-action-do-remove-journal</Module><Options><Age>1d</Age></Options></Do>"
                "</Action></Actions><TransactionLog/>"
            ),
            r"amps-action-on-schedule \(found: amps-action-on-startup\)",
        ),
        (
            config_xml(
                "<Replication/><Actions><Action><On><Module>amps-action-on-startup</Module></On>"
                "<Do><Module>amps-action-do-downgrade-replication</Module><Options><Age>5s</Age>"
                "</Options></Do></Action></Actions>"
            ),
            r"<On> module 'amps-action-on-startup' is not supported",
        ),
        (
            config_xml(
                "<Actions><Action><Do><Module>amps-action-do-echo</Module></Do></Action></Actions>"
            ),
            r"<Do> module 'amps-action-do-echo' is not supported",
        ),
        (
            config_xml(
                "<Actions><Action><On><Module>amps-action-on-schedule</Module></On></Action></Actions>"
            ),
            r"<Action> has no <Do>",
        ),
        (
            config_xml(
                "<Actions><Action><Do><Module>amps-action-do-downgrade-replication</Module>"
                "<Options><Age>5s</Age></Options></Do></Action></Actions>"
            ),
            r"downgrade/upgrade actions need a <Replication>",
        ),
        (
            config_xml(
                "<SOW><Topic><Name>h</Name><MessageType>json</MessageType><History>"
                "<Window>1d</Window><Snapshots>3</Snapshots></History></Topic></SOW>"
            ),
            r"<Snapshots> in <History> is not supported",
        ),
    ],
)
def test_refused_instead_of_ignored(tmp_path: Path, xml: str, pattern: str) -> None:
    refused(tmp_path, xml, pattern)


# --------------------------------------------------------------------------- slow-client defaults


def test_slow_client_management_is_on_without_configuration() -> None:
    """The resource pool's defaults are the guide's (MessageMemoryLimit 10% of the host's memory
    or of ulimit -m, MessageDiskLimit 1GB or the memory limit if higher, MessageDiskPath
    /var/tmp), and a slow subscriber of a server started with no configuration is offlined
    to disk instead of being dropped (max_write_buffer caps its share of memory)."""
    from ampsclient_server_stub.config import default_config
    from ampsclient_server_stub.security.policy import DEFAULT_DISK_PATH, default_memory_limit

    COUNT = 800
    config = default_config(tcp_port=0, ws_port=0)
    with ServerThread(config, max_write_buffer=256 * 1024, record_all_topics=False) as server:
        security = server.server.security
        assert security is not None
        (pool,) = security.pools
        memory = default_memory_limit()
        assert (pool.memory_limit, pool.disk_limit) == (memory, max(1024**3, memory))
        assert pool.disk_path == DEFAULT_DISK_PATH == Path("/var/tmp")
        sub = RawClient(server.tcp_port, rcvbuf=4096)
        try:
            sub.logon("slow-default")
            sub.send({"c": "subscribe", "cid": "S", "t": "t", "a": "processed"})
            sub.wait_ack("processed")
            with client(server, "pub") as pub:
                body = json.dumps({"pad": "x" * 8000}).encode()
                # 6.4 MB towards a reader that reads nothing: more than the kernel's socket
                # buffers can absorb (loopback send buffers autotune up to tcp_wmem's 4 MB)
                for seq in range(1, COUNT + 1):
                    pub.send({"c": "p", "t": "t", "s": seq}, body)
                pub.send({"c": "flush", "cid": "F", "a": "persisted"})
                pub.recv_until(lambda h: h.get("cid") == "F", 10)
            wait_for(lambda: server.statistics()["slow_offlined"] >= 1, 10, "offlined")
            assert server.statistics()["slow_disconnected"] == 0
            got = 0
            while got < COUNT:  # everything arrives, in order, once the reader reads
                for hdr, body_ in sub.read_some(1 << 20, timeout=10):
                    if hdr.get("c") == "p":
                        got += 1
                        assert json.loads(body_)["pad"] == "x" * 8000
        finally:
            sub.close()


def test_a_built_config_with_an_unsupported_protocol_fails_the_start() -> None:
    """A ServerConfig built in code (not read from XML) is held to the same rule: a transport
    the server cannot serve fails the start, naming it (it used to be skipped with a warning)."""
    import dataclasses

    from ampsclient_server_stub.config import default_config

    config = default_config(tcp_port=0, ws_port=0)
    tcp = dataclasses.replace(config.transports[0], protocol="fix")
    thread = ServerThread(dataclasses.replace(config, transports=(tcp, config.transports[1])))
    try:
        with pytest.raises(ConfigError, match=r"transport 'tcp': <Protocol> 'fix'"):
            thread.start()
    finally:
        thread.stop()


def test_conflation_state_counts_toward_a_clients_memory(tmp_path: Path) -> None:
    """Messages held for a conflated subscription count toward the client's memory in its
    resource pool: 2.4 MB held for a reader with an empty socket backlog offlines it in a
    1 MB pool, while the same volume delivered to the same kind of reader does not."""
    body = (
        f"<MessageMemoryLimit>1MB</MessageMemoryLimit><MessageDiskPath>{tmp_path}</MessageDiskPath>"
    )
    docs = [{"k": n, "pad": "x" * 8000} for n in range(300)]
    for conflated in (False, True):
        with (
            serving(tmp_path, config_xml(body), record_all_topics=False) as server,
            client(server, "reader") as sub,
            client(server, "pub") as pub,
        ):
            options = {"o": "conflation=60s,conflation_key=/k"} if conflated else {}
            sub.send({"c": "subscribe", "cid": "S", "t": "c", "a": "processed", **options})
            assert sub.wait_ack("processed")["status"] == "success"
            publish(pub, "c", docs)
            if conflated:
                wait_for(lambda: server.statistics()["slow_offlined"] >= 1, 10, "offlined")
                continue
            got = [sub.recv_until(lambda h: h.get("c") == "p", 10) for _ in docs]
            assert [json.loads(b)["k"] for _, b in got] == list(range(300))
            stats = server.statistics()
            assert stats["slow_offlined"] == 0, stats
