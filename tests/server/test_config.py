"""Tests for the reference server's AMPS-style XML configuration reader."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient_server_stub.config import (
    DEFAULT_JOURNAL_SIZE,
    DEFAULT_PREALLOCATED_JOURNAL_FILES,
    DEFAULT_SERVER_NAME,
    ConfigError,
    InetAddr,
    ServerConfig,
    TxlogTopic,
    default_config,
    load_config,
    parse_config,
    parse_duration,
    parse_inet_addr,
    parse_size,
)

# Modeled on the AMPS user guide examples (transaction log and replication chapters).
SAMPLE = """\
<?xml version="1.0" encoding="UTF-8"?>
<AMPSConfig>
    <Name>amps-1</Name>
    <Group>DataCenter-NYC-1</Group>
    <MessageMemoryLimit>10GB</MessageMemoryLimit>
    <MessageDiskPath>/mnt/fastio/AMPS/offline</MessageDiskPath>
    <ClientMessageAgeLimit>30s</ClientMessageAgeLimit>

    <Admin>
        <InetAddr>localhost:8085</InetAddr>
        <Interval>10s</Interval>
        <FileName>./stats.db</FileName>
    </Admin>

    <Transports>
        <Transport>
            <Name>amps-replication</Name>
            <Type>amps-replication</Type>
            <InetAddr>10004</InetAddr>
            <Entitlement>
                <Module>amps-default-entitlement-module</Module>
            </Entitlement>
        </Transport>
        <Transport>
            <Name>json-tcp</Name>
            <Type>tcp</Type>
            <InetAddr>9007</InetAddr>
            <MessageType>JSON</MessageType>
            <Protocol>amps</Protocol>
        </Transport>
        <Transport>
            <Name>low-priority-tcp</Name>
            <Type>tcp</Type>
            <InetAddr>0.0.0.0:9010</InetAddr>
            <MessageType>bson</MessageType>
            <ClientMessageAgeLimit>15s</ClientMessageAgeLimit>
            <ClientMaxCapacity>10%</ClientMaxCapacity>
        </Transport>
        <Transport>
            <Name>web</Name>
            <Type>websocket</Type>
            <InetAddr>localhost:9008</InetAddr>
        </Transport>
        <Transport>
            <Name>secure</Name>
            <Type>tcps</Type>
            <InetAddr>[::1]:9443</InetAddr>
        </Transport>
    </Transports>

    <SOW>
        <Topic>
            <Name>orders</Name>
            <MessageType>json</MessageType>
            <Key>/region</Key>
            <Key>/orderId</Key>
            <FileName>./sow/%n.sow</FileName>
            <Expiration>1d</Expiration>
        </Topic>
        <TopicDefinition>
            <Topic>positions</Topic>
            <MessageType>NVFIX</MessageType>
            <Key>/1</Key>
            <Key>/55</Key>
            <KeyDomain>positions-domain</KeyDomain>
        </TopicDefinition>
    </SOW>

    <TransactionLog>
        <JournalDirectory>./amps/journal/</JournalDirectory>
        <JournalArchiveDirectory>/mnt/somedev0/amps/journal</JournalArchiveDirectory>
        <PreallocatedJournalFiles>1</PreallocatedJournalFiles>
        <JournalSize>10MB</JournalSize>
        <FlushInterval>50ms</FlushInterval>
        <Topic>
            <Name>orders</Name>
            <MessageType>json</MessageType>
        </Topic>
        <Topic>
            <Name>positions</Name>
            <MessageType>nvfix</MessageType>
        </Topic>
        <Topic>
            <Name>^audit/.*</Name>
        </Topic>
    </TransactionLog>

    <Replication>
        <Destination>
            <Topic>
                <MessageType>json</MessageType>
                <Name>orders</Name>
                <ExcludeValidation>replicate,cascade</ExcludeValidation>
            </Topic>
            <Name>amps-2</Name>
            <Group>DataCenter-NYC-1</Group>
            <SyncType>sync</SyncType>
            <Transport>
                <InetAddr>amps-2-server.example.com:10005</InetAddr>
                <InetAddr>amps-2b.example.com:10005, [2001:db8::7]:10006</InetAddr>
                <Type>amps-replication</Type>
                <Authenticator>
                    <Module>amps-default-authenticator-module</Module>
                </Authenticator>
            </Transport>
        </Destination>
        <Destination>
            <Name>AMPS2-HKG</Name>
            <Transport>
                <Name>amps-replication</Name>
                <Type>amps-replication</Type>
                <InetAddr>secondaryhost:10010</InetAddr>
            </Transport>
            <Topic>
                <Name>/rep_topic</Name>
                <MessageType>fix</MessageType>
                <Filter>/55 = 'IBM'</Filter>
            </Topic>
            <Topic>
                <Name>/rep_topic2</Name>
                <MessageType>FIX</MessageType>
            </Topic>
            <SyncType>async</SyncType>
            <PassThrough>^NYC</PassThrough>
            <PassThrough>^LDN-[0-9]+$</PassThrough>
        </Destination>
    </Replication>

    <Actions>
        <Action>
            <On>
                <Module>amps-action-on-schedule</Module>
                <Options>
                    <Every>15s</Every>
                </Options>
            </On>
            <Do>
                <Module>amps-action-do-downgrade-replication</Module>
                <Options>
                    <Age>60s</Age>
                </Options>
            </Do>
            <Do>
                <Module>amps-action-do-upgrade-replication</Module>
                <Options>
                    <Age>10s</Age>
                </Options>
            </Do>
        </Action>
        <Action>
            <On>
                <Module>amps-action-on-schedule</Module>
                <Options><Every>1d</Every></Options>
            </On>
            <Do>
                <Module>amps-action-do-remove-journal</Module>
                <Options><Age>7d</Age></Options>
            </Do>
        </Action>
    </Actions>
</AMPSConfig>
"""


@pytest.fixture
def sample(tmp_path: Path) -> ServerConfig:
    return parse_config(SAMPLE, base_dir=tmp_path)


def _raises(xml: str, *patterns: str) -> str:
    """Assert ``xml`` is rejected and that the message matches every regex in ``patterns``."""
    with pytest.raises(ConfigError) as info:
        parse_config(xml)
    message = str(info.value)
    for pattern in patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
    return message


def _wrap_transport(body: str) -> str:
    return f"<AMPSConfig><Transports><Transport>{body}</Transport></Transports></AMPSConfig>"


# --------------------------------------------------------------------------- full sample


def test_sample_instance_level(sample: ServerConfig, tmp_path: Path) -> None:
    assert sample.name == "amps-1"
    assert sample.group == "DataCenter-NYC-1"
    assert sample.effective_group == "DataCenter-NYC-1"
    assert sample.data_dir == tmp_path
    assert sample.source is None
    assert sample.message_memory_limit == 10 * 1024**3
    assert dict(sample.extra) == {
        "MessageDiskPath": "/mnt/fastio/AMPS/offline",
        "ClientMessageAgeLimit": "30s",
    }
    assert sample.admin is not None
    assert (sample.admin.host, sample.admin.port) == ("localhost", 8085)
    assert sample.admin.interval == 10.0
    assert sample.admin.file_name == tmp_path / "stats.db"


def test_sample_transports(sample: ServerConfig) -> None:
    names = [t.name for t in sample.transports]
    assert names == ["amps-replication", "json-tcp", "low-priority-tcp", "web", "secure"]

    repl = sample.transport("amps-replication")
    assert repl is not None
    assert (repl.type, repl.host, repl.port) == ("amps-replication", "127.0.0.1", 10004)
    assert dict(repl.extra) == {"Entitlement/Module": "amps-default-entitlement-module"}

    tcp = sample.transport("json-tcp")
    assert tcp is not None
    assert (tcp.type, tcp.host, tcp.port) == ("tcp", "127.0.0.1", 9007)
    assert tcp.message_type == "json"  # lower-cased
    assert tcp.protocol == "amps"
    assert not tcp.is_websocket and not tcp.is_tls
    assert dict(tcp.extra) == {}

    low = sample.transport("low-priority-tcp")
    assert low is not None
    assert low.address == InetAddr("0.0.0.0", 9010)
    assert low.message_type == "bson"
    assert dict(low.extra) == {"ClientMessageAgeLimit": "15s", "ClientMaxCapacity": "10%"}

    web = sample.transport("web")
    assert web is not None
    assert (web.type, web.host, web.port) == ("ws", "localhost", 9008)
    assert web.is_websocket and not web.is_tls
    assert web.message_type is None

    secure = sample.transport("secure")
    assert secure is not None
    assert (secure.type, secure.host, secure.port) == ("tcps", "::1", 9443)
    assert secure.is_tls
    assert str(secure.address) == "[::1]:9443"
    assert sample.transport("nope") is None


def test_sample_sow_topics(sample: ServerConfig, tmp_path: Path) -> None:
    assert [(s.topic, s.message_type) for s in sample.sow_topics] == [
        ("orders", "json"),
        ("positions", "nvfix"),
    ]
    orders = sample.sow_topic("orders", "JSON")
    assert orders is not None
    assert orders.keys == ("/region", "/orderId")
    assert orders.file_name == tmp_path / "sow" / "orders.sow"
    assert orders.expiration == 86400.0
    assert orders.key_domain is None

    positions = sample.sow_topic("positions")
    assert positions is not None
    assert positions.keys == ("/1", "/55")
    assert positions.file_name is None  # in memory
    assert positions.key_domain == "positions-domain"
    assert positions.expiration is None
    assert dict(positions.extra) == {}
    assert sample.sow_topic("orders", "fix") is None


def test_sample_transaction_log(sample: ServerConfig, tmp_path: Path) -> None:
    txlog = sample.transaction_log
    assert txlog is not None
    assert txlog.journal_directory == tmp_path / "amps" / "journal"
    assert txlog.archive_directory == Path("/mnt/somedev0/amps/journal")
    assert txlog.journal_size == 10 * 1024 * 1024
    assert txlog.preallocated_journal_files == 1
    assert txlog.flush_interval == pytest.approx(0.05)
    assert txlog.topics == (
        TxlogTopic("orders", "json"),
        TxlogTopic("positions", "nvfix"),
        TxlogTopic("^audit/.*", None),
    )
    name, message_type, filter_text = txlog.topics[0]
    assert (name, message_type, filter_text) == ("orders", "json", None)


def test_sample_replication(sample: ServerConfig) -> None:
    repl = sample.replication
    assert repl is not None
    sync_dest, async_dest = repl.destinations

    assert sync_dest.name == "amps-2"
    assert sync_dest.group == "DataCenter-NYC-1"
    assert sync_dest.sync_type == "sync"
    assert sync_dest.transport_type == "amps-replication"
    assert sync_dest.inet_addrs == (
        InetAddr("amps-2-server.example.com", 10005),
        InetAddr("amps-2b.example.com", 10005),
        InetAddr("2001:db8::7", 10006),
    )
    assert not sync_dest.is_passive
    assert len(sync_dest.topics) == 1
    topic = sync_dest.topics[0]
    assert (topic.name, topic.message_type, topic.filter) == ("orders", "json", None)
    assert topic.exclude_validation == ("replicate", "cascade")
    assert sync_dest.passthrough == ()
    assert dict(sync_dest.extra) == {
        "Transport/Authenticator/Module": "amps-default-authenticator-module"
    }

    assert async_dest.name == "AMPS2-HKG"
    assert async_dest.group is None
    assert async_dest.sync_type == "async"
    assert async_dest.inet_addrs == (InetAddr("secondaryhost", 10010),)
    assert [(t.name, t.message_type, t.filter) for t in async_dest.topics] == [
        ("/rep_topic", "fix", "/55 = 'IBM'"),
        ("/rep_topic2", "fix", None),
    ]
    assert async_dest.passthrough == ("^NYC", "^LDN-[0-9]+$")
    assert dict(async_dest.extra) == {"Transport/Name": "amps-replication"}


def test_sample_actions(sample: ServerConfig) -> None:
    repl = sample.replication
    assert repl is not None
    assert [(a.kind, a.age, a.every) for a in repl.actions] == [
        ("downgrade", 60.0, 15.0),
        ("upgrade", 10.0, 15.0),
    ]
    assert repl.downgrade is not None and repl.downgrade.age == 60.0
    assert repl.upgrade is not None and repl.upgrade.age == 10.0
    # All actions are kept raw, including ones the server does not interpret.
    assert len(sample.actions) == 2
    remove = sample.actions[1]
    assert [s.module for s in remove.on] == ["amps-action-on-schedule"]
    assert [s.module for s in remove.do] == ["amps-action-do-remove-journal"]
    assert dict(remove.do[0].options) == {"Age": "7d"}


def test_config_objects_are_immutable(sample: ServerConfig) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        sample.transports[2].extra["x"] = "y"  # type: ignore[index]
    assert not hasattr(sample, "__dict__")  # slots


def test_load_config_resolves_paths_against_the_file(tmp_path: Path) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    path = conf_dir / "amps.xml"
    path.write_text(SAMPLE, encoding="utf-8")
    config = load_config(path)
    assert config.source == path
    assert config.data_dir == conf_dir
    assert config.transaction_log is not None
    assert config.transaction_log.journal_directory == conf_dir / "amps" / "journal"
    assert load_config(str(path)) == config


def test_load_config_honours_encoding_declaration(tmp_path: Path) -> None:
    path = tmp_path / "latin.xml"
    xml = '<?xml version="1.0" encoding="ISO-8859-1"?><AMPSConfig><Name>café</Name></AMPSConfig>'
    path.write_bytes(xml.encode("latin-1"))
    assert load_config(path).name == "café"


def test_load_config_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.xml"
    with pytest.raises(ConfigError, match=r"cannot read configuration file .*missing\.xml"):
        load_config(missing)
    bad = tmp_path / "bad.xml"
    bad.write_text("<AMPSConfig>\n<Name>x</Name>\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.xml: malformed XML at line 3"):
        load_config(bad)


def test_data_directory_extension(tmp_path: Path) -> None:
    xml = """<AMPSConfig>
        <DataDirectory>state</DataDirectory>
        <SOW><Topic><Name>a</Name><MessageType>json</MessageType>
            <FileName>a.sow</FileName></Topic></SOW>
        <TransactionLog/>
    </AMPSConfig>"""
    config = parse_config(xml, base_dir=tmp_path)
    assert config.data_dir == tmp_path / "state"
    assert config.sow_topics[0].file_name == tmp_path / "state" / "a.sow"
    assert config.transaction_log is not None
    # Defaults of an empty <TransactionLog>.
    assert config.transaction_log.journal_directory == tmp_path / "state" / "journal"
    assert config.transaction_log.journal_size == DEFAULT_JOURNAL_SIZE
    assert config.transaction_log.preallocated_journal_files == DEFAULT_PREALLOCATED_JOURNAL_FILES
    assert config.transaction_log.topics == ()
    assert config.transaction_log.flush_interval is None


# --------------------------------------------------------------------------- defaults


def test_minimal_document_defaults(tmp_path: Path) -> None:
    config = parse_config("<AMPSConfig/>", base_dir=tmp_path)
    assert config.name == DEFAULT_SERVER_NAME
    assert config.group is None
    assert config.effective_group == DEFAULT_SERVER_NAME
    assert config.transports == ()
    assert config.sow_topics == ()
    assert config.transaction_log is None
    assert config.replication is None
    assert config.admin is None
    assert config.message_memory_limit is None
    assert config.actions == ()
    assert dict(config.extra) == {}
    assert config.data_dir == tmp_path


def test_parse_config_without_base_dir_uses_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_config("<AMPSConfig/>").data_dir == tmp_path


def test_transport_defaults() -> None:
    config = parse_config(_wrap_transport("<Type>TCP</Type><InetAddr>9100</InetAddr>"))
    (transport,) = config.transports
    assert transport.name == "tcp-1"
    assert (transport.type, transport.host, transport.port) == ("tcp", "127.0.0.1", 9100)
    assert transport.protocol == "amps"
    assert transport.message_type is None


def test_destination_defaults() -> None:
    config = parse_config(
        "<AMPSConfig><Replication><Destination><Name>dr</Name></Destination>"
        "</Replication></AMPSConfig>"
    )
    assert config.replication is not None
    (dest,) = config.replication.destinations
    assert dest.sync_type == "async"
    assert dest.is_passive and dest.inet_addrs == ()
    assert dest.topics == () and dest.passthrough == ()
    assert config.replication.actions == ()
    assert config.replication.downgrade is None


def test_default_config_in_memory() -> None:
    config = default_config()
    assert config.name == "ampsclient-server"
    assert config.data_dir is None
    assert config.transaction_log is None and config.replication is None
    tcp, ws = config.transports
    assert (tcp.type, tcp.host, tcp.port, tcp.protocol, tcp.message_type) == (
        "tcp",
        "127.0.0.1",
        9007,
        "amps",
        None,
    )
    assert (ws.type, ws.host, ws.port, ws.protocol, ws.message_type) == (
        "ws",
        "127.0.0.1",
        9008,
        "amps",
        None,
    )
    assert ws.is_websocket
    (store,) = config.sow_topics
    assert store.topic == "/ADMIN/bookmark_store"
    assert store.message_type == "json"
    assert store.keys == ("/clientName", "/subId")
    assert store.file_name is None


def test_default_config_with_data_dir(tmp_path: Path) -> None:
    config = default_config(host="0.0.0.0", tcp_port=0, ws_port=0, data_dir=tmp_path, name="x")
    assert config.name == "x"
    assert config.data_dir == tmp_path
    assert [(t.host, t.port) for t in config.transports] == [("0.0.0.0", 0), ("0.0.0.0", 0)]
    store = config.sow_topic("/ADMIN/bookmark_store", "json")
    assert store is not None
    assert store.file_name == tmp_path / "sow" / "bookmark_store.sqlite"
    with pytest.raises(ConfigError, match="tcp_port"):
        default_config(tcp_port=70000)


# --------------------------------------------------------------------------- value parsers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("4096", 4096),
        ("100B", 100),
        ("512KB", 512 * 1024),
        ("512kb", 512 * 1024),
        ("64K", 64 * 1024),
        ("10MB", 10 * 1024**2),
        ("10 MB", 10 * 1024**2),
        ("1GB", 1024**3),
        ("1.5GB", 3 * 1024**3 // 2),
        ("2GiB", 2 * 1024**3),
        ("1TB", 1024**4),
        (" 250MB ", 250 * 1024**2),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "10XB", "1e3", "ten", "10%", "9" * 30 + "TB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10s", 10.0),
        ("500ms", 0.5),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("250us", 0.00025),
        ("30ns", 30e-9),
        ("1.5s", 1.5),
        ("45", 45.0),
        (" 15S ", 15.0),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: str, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "s", "-5s", "5 parsecs", "1e3s", "inf", "nan", "9" * 400])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9007", InetAddr("127.0.0.1", 9007)),
        ("host:9007", InetAddr("host", 9007)),
        ("localhost:9007", InetAddr("localhost", 9007)),
        ("10.1.2.3:1", InetAddr("10.1.2.3", 1)),
        ("[::1]:9007", InetAddr("::1", 9007)),
        ("[fe80::1%eth0]:65535", InetAddr("fe80::1%eth0", 65535)),
        (" amps-1.example.com:0 ", InetAddr("amps-1.example.com", 0)),
    ],
)
def test_parse_inet_addr(text: str, expected: InetAddr) -> None:
    assert parse_inet_addr(text) == expected


@pytest.mark.parametrize(
    "text", ["", "host", "host:", ":9007", "::1:9007", "[::1]", "[::1]9007", "70000", "h st:1"]
)
def test_parse_inet_addr_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid InetAddr"):
        parse_inet_addr(text)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("xml", "pattern"),
    [
        ("", r"malformed XML at line 1"),
        ("<AMPSConfig>", r"malformed XML at line 1, column \d+: no element found"),
        ("<AMPSConfig>\n<Name>x</Nme>\n</AMPSConfig>", r"malformed XML at line 2.*mismatched tag"),
        ("<AMPSConfig>&foo;</AMPSConfig>", r"undefined entity"),
        ("not xml at all", r"malformed XML"),
    ],
)
def test_malformed_xml(xml: str, pattern: str) -> None:
    _raises(xml, pattern)


@pytest.mark.parametrize(
    "xml",
    [
        '<!DOCTYPE AMPSConfig [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>'
        "<AMPSConfig><Name>&b;</Name></AMPSConfig>",
        '<!DOCTYPE AMPSConfig [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
        "<AMPSConfig><Name>&xxe;</Name></AMPSConfig>",
        '<!DOCTYPE AMPSConfig SYSTEM "amps.dtd"><AMPSConfig/>',
    ],
)
def test_doctype_rejected(xml: str) -> None:
    _raises(xml, "DOCTYPE declarations are not allowed")


def test_transport_without_inet_addr_names_it() -> None:
    xml = """<AMPSConfig>
    <Transports>
        <Transport>
            <Name>json-tcp</Name>
            <Type>tcp</Type>
        </Transport>
    </Transports>
</AMPSConfig>"""
    message = _raises(xml, "json-tcp", "<InetAddr>")
    assert message.startswith("line 3:")


def test_nameless_transport_is_named_by_position() -> None:
    xml = (
        "<AMPSConfig><Transports>"
        "<Transport><Type>tcp</Type><InetAddr>1</InetAddr></Transport>"
        "<Transport><Type>tcp</Type></Transport>"
        "</Transports></AMPSConfig>"
    )
    _raises(xml, r"<Transport> #2 has no <InetAddr>")


@pytest.mark.parametrize(
    ("xml", "patterns"),
    [
        ("<Config/>", ["root element must be <AMPSConfig>"]),
        (
            "<AMPSConfig>\n<Name>a</Name>\n<Name>b</Name></AMPSConfig>",
            ["line 3", "duplicate <Name>"],
        ),
        ("<AMPSConfig><Name>  </Name></AMPSConfig>", ["<Name> in <AMPSConfig> is empty"]),
        (_wrap_transport("<Name>t</Name><InetAddr>1</InetAddr>"), ["'t' has no <Type>"]),
        (
            _wrap_transport("<Name>t</Name><Type>udp</Type><InetAddr>1</InetAddr>"),
            ["unsupported <Type> 'udp'", "tcp"],
        ),
        (
            _wrap_transport("<Name>t</Name><Type>tcp</Type><InetAddr>99999</InetAddr>"),
            ["<InetAddr>", "0..65535"],
        ),
        (
            _wrap_transport(
                "<Name>t</Name><Type>tcp</Type><InetAddr>1</InetAddr><InetAddr>2</InetAddr>"
            ),
            ["more than one <InetAddr>"],
        ),
        (
            "<AMPSConfig><Transports>"
            "<Transport><Name>t</Name><Type>tcp</Type><InetAddr>1</InetAddr></Transport>"
            "<Transport><Name>t</Name><Type>ws</Type><InetAddr>2</InetAddr></Transport>"
            "</Transports></AMPSConfig>",
            ["duplicate transport name 't'"],
        ),
        (
            "<AMPSConfig><Transports>"
            "<Transport><Name>a</Name><Type>tcp</Type><InetAddr>7</InetAddr></Transport>"
            "<Transport><Name>b</Name><Type>ws</Type><InetAddr>127.0.0.1:7</InetAddr></Transport>"
            "</Transports></AMPSConfig>",
            ["'b' reuses address 127.0.0.1:7"],
        ),
        (
            "<AMPSConfig><SOW><Topic><Name>orders</Name><Key>/id</Key></Topic></SOW></AMPSConfig>",
            ["SOW topic 'orders' has no <MessageType>"],
        ),
        (
            "<AMPSConfig><SOW><Topic><MessageType>json</MessageType></Topic></SOW></AMPSConfig>",
            ["SOW <Topic> has no <Name>"],
        ),
        (
            "<AMPSConfig><SOW>"
            "<Topic><Name>a</Name><MessageType>json</MessageType></Topic>"
            "<Topic><Name>a</Name><MessageType>JSON</MessageType></Topic>"
            "</SOW></AMPSConfig>",
            ["duplicate SOW topic 'a'"],
        ),
        (
            "<AMPSConfig><SOW><Topic><Name>a</Name><MessageType>json</MessageType>"
            "<Expiration>soon</Expiration></Topic></SOW></AMPSConfig>",
            ["<Expiration>", "invalid duration 'soon'"],
        ),
        (
            "<AMPSConfig><TransactionLog><JournalSize>huge</JournalSize></TransactionLog>"
            "</AMPSConfig>",
            ["<JournalSize>", "invalid size 'huge'"],
        ),
        (
            "<AMPSConfig><TransactionLog><JournalSize>0</JournalSize></TransactionLog>"
            "</AMPSConfig>",
            ["<JournalSize> must be positive"],
        ),
        (
            "<AMPSConfig><TransactionLog>"
            "<PreallocatedJournalFiles>0</PreallocatedJournalFiles></TransactionLog></AMPSConfig>",
            ["<PreallocatedJournalFiles> must be an integer >= 1"],
        ),
        (
            "<AMPSConfig><TransactionLog><Topic><MessageType>json</MessageType></Topic>"
            "</TransactionLog></AMPSConfig>",
            ["<TransactionLog> <Topic> has no <Name>"],
        ),
        (
            "<AMPSConfig><TransactionLog/><TransactionLog/></AMPSConfig>",
            ["duplicate <TransactionLog>"],
        ),
        (
            "<AMPSConfig><Replication><Destination><SyncType>sync</SyncType></Destination>"
            "</Replication></AMPSConfig>",
            ["replication <Destination> has no <Name>"],
        ),
        (
            "<AMPSConfig><Replication><Destination><Name>d</Name><SyncType>maybe</SyncType>"
            "</Destination></Replication></AMPSConfig>",
            ["'d'", "<SyncType> must be 'sync' or 'async'"],
        ),
        (
            "<AMPSConfig><Replication><Destination><Name>d</Name>"
            "<PassThrough>^NYC(</PassThrough></Destination></Replication></AMPSConfig>",
            ["invalid <PassThrough> regex"],
        ),
        (
            "<AMPSConfig><Replication><Destination><Name>d</Name><Topic><Name>t</Name>"
            "<ExcludeValidation>txlog,queue</ExcludeValidation></Topic>"
            "</Destination></Replication></AMPSConfig>",
            ["'queue' cannot be excluded"],
        ),
        (
            "<AMPSConfig><Replication><Destination><Name>d</Name><Topic><Name>t</Name>"
            "<ExcludeValidation>everything</ExcludeValidation></Topic>"
            "</Destination></Replication></AMPSConfig>",
            ["'everything' is not a known validation check"],
        ),
        (
            "<AMPSConfig><Replication><Destination><Name>d</Name><Transport>"
            "<Type>tcp</Type><InetAddr>h:1</InetAddr></Transport>"
            "</Destination></Replication></AMPSConfig>",
            ["must be amps-replication"],
        ),
        (
            "<AMPSConfig><Replication><Destination><Name>d</Name><Transport>"
            "<InetAddr>h:1, ::1:2</InetAddr></Transport>"
            "</Destination></Replication></AMPSConfig>",
            ["IPv6 addresses must be bracketed"],
        ),
        (
            "<AMPSConfig><Replication>"
            "<Destination><Name>d</Name></Destination><Destination><Name>d</Name></Destination>"
            "</Replication></AMPSConfig>",
            ["duplicate replication <Destination> 'd'"],
        ),
        (
            "<AMPSConfig><Actions><Action><Do>"
            "<Module>amps-action-do-downgrade-replication</Module>"
            "</Do></Action></Actions></AMPSConfig>",
            ["amps-action-do-downgrade-replication requires an <Age>"],
        ),
        (
            "<AMPSConfig><Actions><Action><On><Options/></On></Action></Actions></AMPSConfig>",
            ["<Action> <On> has no <Module>"],
        ),
        (
            "<AMPSConfig><Admin><Interval>1s</Interval></Admin></AMPSConfig>",
            ["<Admin> has no <InetAddr>"],
        ),
        (
            "<AMPSConfig><MessageMemoryLimit>lots</MessageMemoryLimit></AMPSConfig>",
            ["<MessageMemoryLimit>", "invalid size"],
        ),
    ],
)
def test_invalid_content(xml: str, patterns: list[str]) -> None:
    _raises(xml, *patterns)


def test_too_many_sync_destinations() -> None:
    dests = "".join(
        f"<Destination><Name>d{i}</Name><SyncType>sync</SyncType></Destination>" for i in range(65)
    )
    _raises(f"<AMPSConfig><Replication>{dests}</Replication></AMPSConfig>", "at most 64")


def test_elements_are_case_sensitive() -> None:
    # <name> is not <Name>: refused (nothing is accepted and ignored), naming the element.
    _raises("<AMPSConfig><name>lower</name></AMPSConfig>", r"<name> in <AMPSConfig>")
    # <inetaddr> is not <InetAddr>: refused as well.
    _raises(_wrap_transport("<Name>t</Name><Type>tcp</Type><inetaddr>1</inetaddr>"), "<inetaddr>")


@pytest.mark.parametrize(
    ("xml", "pattern"),
    [
        (
            "<AMPSConfig><Modules><Module><Name>m</Name></Module></Modules></AMPSConfig>",
            r"line 1: <Modules> in <AMPSConfig> is not supported .*accepted there: Actions",
        ),
        (
            "<AMPSConfig><SOW><View><Name>v</Name></View></SOW></AMPSConfig>",
            r"view 'v' has no <MessageType>",  # views over queues are read (view_config)
        ),
        (
            "<AMPSConfig><SOW><Topic><Name>t</Name><MessageType>json</MessageType>"
            "<Pattern>/t/.*</Pattern></Topic></SOW></AMPSConfig>",
            r"<Pattern> in <Topic> is not supported",
        ),
        (
            "<AMPSConfig><Name><First>x</First></Name></AMPSConfig>",
            r"<First> in <Name> is not supported .*no child elements",
        ),
    ],
)
def test_unknown_elements_are_refused(xml: str, pattern: str) -> None:
    _raises(xml, pattern)


def test_percentage_memory_limit_kept_raw() -> None:
    config = parse_config("<AMPSConfig><MessageMemoryLimit>25%</MessageMemoryLimit></AMPSConfig>")
    assert config.message_memory_limit is None
    assert config.extra["MessageMemoryLimit"] == "25%"


# --------------------------------------------------------------------------- property tests


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_only_raises_config_error(text: str) -> None:
    try:
        config = parse_config(text)
    except ConfigError as exc:
        assert str(exc)
    else:
        assert isinstance(config, ServerConfig)


_TAGS = [
    "Name",
    "Group",
    "Transports",
    "Transport",
    "Type",
    "InetAddr",
    "MessageType",
    "Protocol",
    "SOW",
    "Topic",
    "TopicDefinition",
    "Key",
    "FileName",
    "Expiration",
    "TransactionLog",
    "JournalDirectory",
    "JournalSize",
    "PreallocatedJournalFiles",
    "FlushInterval",
    "Replication",
    "Destination",
    "SyncType",
    "PassThrough",
    "ExcludeValidation",
    "Actions",
    "Action",
    "On",
    "Do",
    "Module",
    "Options",
    "Age",
    "Every",
    "Admin",
    "MessageMemoryLimit",
    "DataDirectory",
]
_VALUES = st.one_of(
    st.sampled_from(
        ["tcp", "ws", "sync", "async", "json", "9007", "h:1", "[::1]:2", "10MB", "5s", "~x/y"]
    ),
    st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), max_size=12),
)


def _render(tag: str, body: list[str] | str) -> str:
    inner = escape(body) if isinstance(body, str) else "".join(body)
    return f"<{tag}>{inner}</{tag}>"


_LEAVES = st.builds(_render, st.sampled_from(_TAGS), _VALUES)
_XML_TREES = st.recursive(
    _LEAVES,
    lambda children: st.builds(_render, st.sampled_from(_TAGS), st.lists(children, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_XML_TREES, max_size=5))
def test_structured_documents_only_raise_config_error(children: list[str]) -> None:
    xml = "<AMPSConfig>" + "".join(children) + "</AMPSConfig>"
    try:
        config = parse_config(xml, base_dir=Path("/srv/amps"))
    except ConfigError as exc:
        assert str(exc)
    else:
        assert isinstance(config, ServerConfig)
        assert config.name
        assert all(0 <= t.port <= 65535 for t in config.transports)


# --------------------------------------------------------------------------- documentation


def test_documentation_example_parses() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = doc.read_text(encoding="utf-8")
    blocks = re.findall(r"```xml\n(.*?)```", text, flags=re.DOTALL)
    complete = [b for b in blocks if b.lstrip().startswith("<?xml")]
    assert complete, "docs/configuration.md must contain a complete <?xml ...?> example"
    config = parse_config(complete[0], base_dir=Path("/srv/amps"))
    assert config.name == "amps-dev-1"
    assert {t.type for t in config.transports} >= {"tcp", "ws", "amps-replication"}
    assert config.transaction_log is not None
    assert config.replication is not None
    assert {d.sync_type for d in config.replication.destinations} == {"sync", "async"}
    assert config.sow_topic("/ADMIN/bookmark_store", "json") is not None
