"""AMPS-style XML configuration for the reference server.

The reference server reads the same XML dialect as a real AMPS instance (the parts of it
that it implements): an ``<AMPSConfig>`` root with ``<Name>``, ``<Group>``,
``<Transports>``, ``<SOW>``, ``<TransactionLog>``, ``<Replication>``, ``<Admin>`` and
``<Actions>`` sections.  :func:`load_config` / :func:`parse_config` turn such a document
into an immutable :class:`ServerConfig`; :func:`default_config` builds the configuration
used when the server is started without ``--config``.

Rules followed by the parser:

* Element names are matched case-sensitively, as AMPS does.  An element the reader does
  not know is ignored (logged at ``DEBUG``); unrecognised children of a ``<Transport>``,
  a replication ``<Destination>`` or the root are kept verbatim in an ``extra`` mapping
  (nested elements are flattened to ``"Parent/Child"`` keys).
* Message type names are lower-cased.
* Sizes (``10MB``, ``1GB``, ``512KB``, ``4096``) are parsed by :func:`parse_size`, time
  intervals (``10s``, ``500ms``, ``2m``, ``1h``, ``1d``) by :func:`parse_duration`.
* Relative paths (``JournalDirectory``, SOW ``FileName``, ...) are resolved against the
  server data directory, which is the non-AMPS ``<DataDirectory>`` element if present,
  otherwise the directory holding the configuration file (or the current directory).
* Documents containing a ``DOCTYPE`` or entity declarations are refused, so entity
  expansion attacks are impossible.  No ``${VAR}`` substitution is performed.

Every problem is reported as a :class:`ConfigError` whose message names the offending
element and, when known, its line number.
"""

from __future__ import annotations

import logging
import math
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal, NamedTuple, NoReturn, TypeVar
from xml.parsers import expat

from .errors import ServerError

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_JOURNAL_SIZE",
    "DEFAULT_PREALLOCATED_JOURNAL_FILES",
    "DEFAULT_SERVER_NAME",
    "DOWNGRADE_REPLICATION_MODULE",
    "SCHEDULE_MODULE",
    "TRANSPORT_TYPES",
    "UPGRADE_REPLICATION_MODULE",
    "ActionConfig",
    "ActionStep",
    "AdminConfig",
    "ConfigError",
    "DestinationConfig",
    "InetAddr",
    "ReplicationActionConfig",
    "ReplicationConfig",
    "ReplicationTopicConfig",
    "ServerConfig",
    "SowTopicConfig",
    "TransactionLogConfig",
    "TransportConfig",
    "TxlogTopic",
    "default_config",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_inet_addr",
    "parse_size",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_SERVER_NAME = "ampsclient-server"
"""Instance name used when ``<Name>`` is absent."""

DEFAULT_HOST = "127.0.0.1"
"""Host used for an ``InetAddr`` that is a bare port number."""

DEFAULT_JOURNAL_SIZE = 1024**3
"""AMPS default ``JournalSize`` (1GB)."""

DEFAULT_PREALLOCATED_JOURNAL_FILES = 2
"""AMPS default ``PreallocatedJournalFiles``."""

SCHEDULE_MODULE = "amps-action-on-schedule"
DOWNGRADE_REPLICATION_MODULE = "amps-action-do-downgrade-replication"
UPGRADE_REPLICATION_MODULE = "amps-action-do-upgrade-replication"

TransportType = Literal["tcp", "tcps", "ws", "wss", "amps-replication"]
SyncType = Literal["sync", "async"]

TRANSPORT_TYPES: Mapping[str, TransportType] = MappingProxyType(
    {
        "tcp": "tcp",
        "tcps": "tcps",
        "ws": "ws",
        "websocket": "ws",
        "wss": "wss",
        "amps-replication": "amps-replication",
    }
)
"""Accepted ``<Type>`` values (lower-cased) and the normalised type they map to."""

_MAX_SYNC_DESTINATIONS = 64
_MAX_SIZE = 2**63 - 1
_MAX_EXTRA_DEPTH = 8


def _empty_mapping() -> Mapping[str, str]:
    return MappingProxyType({})


# Validation checks that a replication topic may exclude; "queue" and "queue_underlying"
# are validated by AMPS but "cannot be excluded".
_EXCLUDABLE_VALIDATIONS = frozenset(
    {"txlog", "replicate", "sow", "cascade", "keys", "replicate_filter", "queue_passthrough"}
)
_UNEXCLUDABLE_VALIDATIONS = frozenset({"queue", "queue_underlying"})


class ConfigError(ServerError, ValueError):
    """An invalid configuration document or value; the message names the problem."""


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, slots=True)
class InetAddr:
    """A host/port pair parsed from an ``<InetAddr>`` element."""

    host: str
    port: int

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """A listening ``<Transports>/<Transport>``.

    ``type`` is normalised (``websocket`` becomes ``ws``).  ``message_type`` is ``None``
    when the transport accepts any message type.  ``extra`` holds every other child
    element verbatim (for instance ``ClientMessageAgeLimit`` or ``Entitlement/Module``).
    """

    name: str
    type: TransportType
    host: str
    port: int
    protocol: str = "amps"
    message_type: str | None = None
    extra: Mapping[str, str] = field(default_factory=_empty_mapping)

    @property
    def address(self) -> InetAddr:
        """The listening address as an :class:`InetAddr`."""
        return InetAddr(self.host, self.port)

    @property
    def is_websocket(self) -> bool:
        """True for ``ws``/``wss`` transports and for AMPS' ``tcp`` + ``websocket`` protocol."""
        return self.type in ("ws", "wss") or self.protocol == "websocket"

    @property
    def is_tls(self) -> bool:
        """True for ``tcps`` and ``wss`` transports."""
        return self.type in ("tcps", "wss")


@dataclass(frozen=True, slots=True)
class SowTopicConfig:
    """A State-of-the-World topic (``<SOW>/<Topic>`` or ``<TopicDefinition>``).

    ``file_name`` is ``None`` for an in-memory SOW; otherwise it is an absolute path
    (relative names are resolved against the data directory, ``%n`` is replaced by the
    topic name with ``/`` turned into ``_``).  ``expiration`` is in seconds.
    """

    topic: str
    message_type: str
    keys: tuple[str, ...] = ()
    file_name: Path | None = None
    key_domain: str | None = None
    expiration: float | None = None
    extra: Mapping[str, str] = field(default_factory=_empty_mapping)


class TxlogTopic(NamedTuple):
    """A topic recorded in the transaction log; ``message_type`` ``None`` means any."""

    name: str
    message_type: str | None


@dataclass(frozen=True, slots=True)
class TransactionLogConfig:
    """The ``<TransactionLog>`` section.

    ``journal_size`` is in bytes, ``flush_interval`` in seconds (``None``: server
    default).  ``topics`` lists ``(name, message_type)`` pairs; names may be regexes.
    """

    journal_directory: Path
    journal_size: int = DEFAULT_JOURNAL_SIZE
    preallocated_journal_files: int = DEFAULT_PREALLOCATED_JOURNAL_FILES
    topics: tuple[TxlogTopic, ...] = ()
    flush_interval: float | None = None
    archive_directory: Path | None = None
    extra: Mapping[str, str] = field(default_factory=_empty_mapping)


@dataclass(frozen=True, slots=True)
class ReplicationTopicConfig:
    """A ``<Destination>/<Topic>``: what to replicate, optionally content-filtered."""

    name: str
    message_type: str | None = None
    filter: str | None = None
    exclude_validation: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DestinationConfig:
    """A replication ``<Destination>``.

    ``inet_addrs`` is the prioritised list of downstream addresses; it is empty for a
    passive destination (one that only replicates over connections it receives).
    ``passthrough`` holds the ``<PassThrough>`` group-name regexes.  ``compression`` is the
    algorithm of ``<Compression>`` (in the destination or its ``<Transport>``; ``None``: not
    compressed).  ``extra`` holds unknown children; those of the nested ``<Transport>`` are
    prefixed ``Transport/``.
    """

    name: str
    group: str | None = None
    sync_type: SyncType = "async"
    topics: tuple[ReplicationTopicConfig, ...] = ()
    inet_addrs: tuple[InetAddr, ...] = ()
    transport_type: str = "amps-replication"
    passthrough: tuple[str, ...] = ()
    extra: Mapping[str, str] = field(default_factory=_empty_mapping)
    compression: str | None = None

    @property
    def is_passive(self) -> bool:
        """True when no address is configured (the instance never dials this destination)."""
        return not self.inet_addrs


@dataclass(frozen=True, slots=True)
class ReplicationActionConfig:
    """An automatic downgrade/upgrade of sync replication links (from ``<Actions>``).

    ``age`` is the ``Age`` threshold and ``every`` the ``amps-action-on-schedule``
    ``Every`` period, both in seconds.
    """

    kind: Literal["downgrade", "upgrade"]
    age: float
    every: float | None = None
    options: Mapping[str, str] = field(default_factory=_empty_mapping)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """The ``<Replication>`` section plus the replication-related ``<Actions>``."""

    destinations: tuple[DestinationConfig, ...] = ()
    actions: tuple[ReplicationActionConfig, ...] = ()

    @property
    def downgrade(self) -> ReplicationActionConfig | None:
        """The first configured downgrade action, if any."""
        return next((a for a in self.actions if a.kind == "downgrade"), None)

    @property
    def upgrade(self) -> ReplicationActionConfig | None:
        """The first configured upgrade action, if any."""
        return next((a for a in self.actions if a.kind == "upgrade"), None)


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """The ``<Admin>`` section (statistics/admin HTTP interface)."""

    host: str
    port: int
    interval: float | None = None
    file_name: Path | None = None
    extra: Mapping[str, str] = field(default_factory=_empty_mapping)


@dataclass(frozen=True, slots=True)
class ActionStep:
    """One ``<On>`` or ``<Do>`` of an ``<Action>``: a module plus its flattened options."""

    module: str
    options: Mapping[str, str] = field(default_factory=_empty_mapping)


@dataclass(frozen=True, slots=True)
class ActionConfig:
    """A raw ``<Actions>/<Action>`` (all actions are kept, understood or not)."""

    on: tuple[ActionStep, ...] = ()
    do: tuple[ActionStep, ...] = ()


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """A complete reference-server configuration.

    ``data_dir`` is ``None`` only for a memory-only :func:`default_config`.  ``extra``
    holds top-level elements the server does not interpret (``MessageDiskPath``,
    ``ClientMessageAgeLimit``, ...) verbatim.
    """

    name: str = DEFAULT_SERVER_NAME
    group: str | None = None
    transports: tuple[TransportConfig, ...] = ()
    sow_topics: tuple[SowTopicConfig, ...] = ()
    transaction_log: TransactionLogConfig | None = None
    replication: ReplicationConfig | None = None
    admin: AdminConfig | None = None
    data_dir: Path | None = None
    message_memory_limit: int | None = None
    actions: tuple[ActionConfig, ...] = ()
    extra: Mapping[str, str] = field(default_factory=_empty_mapping)
    source: Path | None = None

    @property
    def effective_group(self) -> str:
        """The replication group: ``group`` or, as in AMPS, the instance name."""
        return self.group if self.group is not None else self.name

    def transport(self, name: str) -> TransportConfig | None:
        """The transport called ``name``, or ``None``."""
        return next((t for t in self.transports if t.name == name), None)

    def sow_topic(self, topic: str, message_type: str | None = None) -> SowTopicConfig | None:
        """The SOW topic ``topic`` (optionally of ``message_type``), or ``None``."""
        mt = message_type.lower() if message_type is not None else None
        for sow in self.sow_topics:
            if sow.topic == topic and (mt is None or sow.message_type == mt):
                return sow
        return None


# --------------------------------------------------------------------------- value parsers

_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zµ]*)")
_DURATION_UNITS: Mapping[str, float] = MappingProxyType(
    {
        "": 1.0,
        "ns": 1e-9,
        "us": 1e-6,
        "µs": 1e-6,
        "ms": 1e-3,
        "s": 1.0,
        "sec": 1.0,
        "m": 60.0,
        "min": 60.0,
        "h": 3600.0,
        "d": 86400.0,
        "w": 604800.0,
    }
)

_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)")
_SIZE_UNITS: Mapping[str, int] = MappingProxyType(
    {
        "": 1,
        "b": 1,
        "k": 1024,
        "kb": 1024,
        "kib": 1024,
        "m": 1024**2,
        "mb": 1024**2,
        "mib": 1024**2,
        "g": 1024**3,
        "gb": 1024**3,
        "gib": 1024**3,
        "t": 1024**4,
        "tb": 1024**4,
        "tib": 1024**4,
    }
)


def _shorten(text: str, limit: int = 60) -> str:
    """``repr`` of ``text``, truncated so error messages stay readable."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def parse_duration(text: str) -> float:
    """Parse an AMPS time interval into seconds.

    Accepts a non-negative decimal number followed by an optional unit: ``ns``, ``us``,
    ``ms``, ``s``, ``m`` (minutes), ``h``, ``d`` or ``w`` (case-insensitive).  A bare
    number is seconds.  ``"500ms"`` -> ``0.5``, ``"2m"`` -> ``120.0``.

    Raises:
        ConfigError: if ``text`` is not a valid interval.
    """
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _DURATION_UNITS:
        raise ConfigError(
            f"invalid duration {_shorten(text)}: expected a number with an optional unit "
            "(ns, us, ms, s, m, h, d, w), e.g. '500ms' or '10s'"
        )
    value = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not math.isfinite(value):
        raise ConfigError(f"invalid duration {_shorten(text)}: value out of range")
    return value


def parse_size(text: str) -> int:
    """Parse an AMPS size into bytes.

    Accepts a non-negative decimal number followed by an optional (case-insensitive) unit
    ``B``, ``KB``, ``MB``, ``GB`` or ``TB`` (also ``K``/``KiB`` etc.); units are powers of
    1024, as in AMPS.  ``"10MB"`` -> ``10485760``; fractions are truncated to whole bytes.

    Raises:
        ConfigError: if ``text`` is not a valid size.
    """
    match = _SIZE_RE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ConfigError(
            f"invalid size {_shorten(text)}: expected a number with an optional unit "
            "(B, KB, MB, GB, TB), e.g. '10MB'"
        )
    try:
        value = int(Decimal(match.group(1)) * _SIZE_UNITS[match.group(2)])
    except (InvalidOperation, ValueError, OverflowError) as exc:  # pragma: no cover - regex
        raise ConfigError(f"invalid size {_shorten(text)}") from exc
    if value > _MAX_SIZE:
        raise ConfigError(f"invalid size {_shorten(text)}: larger than {_MAX_SIZE} bytes")
    return value


_HOST_RE = re.compile(r"[A-Za-z0-9_.*%-]+")
_PORT_RE = re.compile(r"[0-9]{1,5}")


def parse_inet_addr(text: str, *, default_host: str = DEFAULT_HOST) -> InetAddr:
    """Parse an ``InetAddr`` value: ``9007``, ``host:9007``, ``[::1]:9007``.

    A bare port means ``default_host`` (``127.0.0.1`` for the reference server).  IPv6
    literals must be bracketed.  Ports must be in ``0..65535`` (0 = pick a free port).

    Raises:
        ConfigError: if ``text`` is not a valid address.
    """
    value = text.strip()
    host: str
    if value.startswith("["):
        close = value.find("]")
        if close < 0 or value[close + 1 : close + 2] != ":":
            raise ConfigError(f"invalid InetAddr {_shorten(text)}: expected '[ipv6-address]:port'")
        host, port_text = value[1:close], value[close + 2 :]
        if not host or not re.fullmatch(r"[0-9A-Fa-f:.%A-Za-z]+", host):
            raise ConfigError(
                f"invalid InetAddr {_shorten(text)}: bad IPv6 address {_shorten(host)}"
            )
    elif ":" in value:
        host, _, port_text = value.rpartition(":")
        if ":" in host:
            raise ConfigError(
                f"invalid InetAddr {_shorten(text)}: IPv6 addresses must be bracketed, "
                "e.g. '[::1]:9007'"
            )
        if not _HOST_RE.fullmatch(host):
            raise ConfigError(f"invalid InetAddr {_shorten(text)}: bad host name {_shorten(host)}")
    else:
        host, port_text = default_host, value
    if not _PORT_RE.fullmatch(port_text) or int(port_text) > 65535:
        raise ConfigError(f"invalid InetAddr {_shorten(text)}: port must be a number in 0..65535")
    return InetAddr(host, int(port_text))


# --------------------------------------------------------------------------- XML reading


class _Document:
    """A parsed element tree plus the source line of every element."""

    def __init__(self, root: ET.Element, lines: dict[int, int]) -> None:
        self.root = root
        self._lines = lines

    def line(self, elem: ET.Element) -> int | None:
        return self._lines.get(id(elem))

    def fail(self, elem: ET.Element, message: str) -> NoReturn:
        line = self.line(elem)
        raise ConfigError(f"line {line}: {message}" if line is not None else message)


def _reject_doctype(*_args: object) -> None:
    raise ConfigError("DOCTYPE declarations are not allowed in the configuration")


def _reject_entity(*_args: object) -> None:
    raise ConfigError("entity declarations are not allowed in the configuration")


def _read_xml(data: str | bytes) -> _Document:
    """Parse ``data`` with expat into an ElementTree, recording element line numbers."""
    builder = ET.TreeBuilder()
    lines: dict[int, int] = {}
    parser = expat.ParserCreate()
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def start(tag: str, attrs: dict[str, str]) -> None:
        elem = builder.start(tag, attrs)
        lines[id(elem)] = parser.CurrentLineNumber

    parser.StartElementHandler = start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.StartDoctypeDeclHandler = _reject_doctype
    parser.EntityDeclHandler = _reject_entity
    parser.UnparsedEntityDeclHandler = _reject_entity
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise ConfigError(
            f"malformed XML at line {exc.lineno}, column {exc.offset + 1}: "
            f"{expat.ErrorString(exc.code)}"
        ) from exc
    except (UnicodeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"unreadable XML: {exc}") from exc
    root = builder.close()
    return _Document(root, lines)


class _Reader:
    """Walks the element tree and builds the dataclasses."""

    def __init__(self, doc: _Document, data_dir: Path) -> None:
        self.doc = doc
        self.data_dir = data_dir

    # -- generic helpers ---------------------------------------------------------------

    def fail(self, elem: ET.Element, message: str) -> NoReturn:
        self.doc.fail(elem, message)

    def single(self, parent: ET.Element, tag: str) -> ET.Element | None:
        found = parent.findall(tag)
        if len(found) > 1:
            self.fail(found[1], f"duplicate <{tag}> in <{parent.tag}>")
        return found[0] if found else None

    def text(self, parent: ET.Element, tag: str) -> str | None:
        elem = self.single(parent, tag)
        if elem is None:
            return None
        return self.elem_text(elem, parent)

    def elem_text(self, elem: ET.Element, parent: ET.Element) -> str:
        if len(elem):
            self.fail(elem, f"<{elem.tag}> in <{parent.tag}> must contain text, not elements")
        value = (elem.text or "").strip()
        if not value:
            self.fail(elem, f"<{elem.tag}> in <{parent.tag}> is empty")
        return value

    def required(self, parent: ET.Element, tag: str, what: str) -> str:
        value = self.text(parent, tag)
        if value is None:
            self.fail(parent, f"{what} has no <{tag}>")
        return value

    def convert(self, elem: ET.Element, func: Callable[[str], _T], text: str) -> _T:
        try:
            return func(text)
        except ConfigError as exc:
            self.fail(elem, f"<{elem.tag}>: {exc}")

    def duration(self, parent: ET.Element, tag: str) -> float | None:
        value = self.text(parent, tag)
        if value is None:
            return None
        return self.convert(self._child(parent, tag), parse_duration, value)

    def size(self, parent: ET.Element, tag: str) -> int | None:
        value = self.text(parent, tag)
        if value is None:
            return None
        return self.convert(self._child(parent, tag), parse_size, value)

    def integer(self, parent: ET.Element, tag: str, minimum: int) -> int | None:
        value = self.text(parent, tag)
        if value is None:
            return None
        if not re.fullmatch(r"[0-9]{1,18}", value) or int(value) < minimum:
            self.fail(
                self._child(parent, tag),
                f"<{tag}> must be an integer >= {minimum}, got {value!r}",
            )
        return int(value)

    def path(self, parent: ET.Element, tag: str, value: str) -> Path:
        try:
            path = Path(value).expanduser()
        except RuntimeError as exc:  # "~user" for an unknown user
            self.fail(self._child(parent, tag), f"<{tag}>: cannot expand {_shorten(value)}: {exc}")
        return path if path.is_absolute() else self.data_dir / path

    @staticmethod
    def _child(parent: ET.Element, tag: str) -> ET.Element:
        elem = parent.find(tag)
        assert elem is not None
        return elem

    def ignore_unknown(self, parent: ET.Element, known: Iterable[str]) -> None:
        known_set = set(known)
        for child in parent:
            if child.tag not in known_set:
                logger.debug(
                    "config: ignoring unknown element <%s> in <%s> (line %s)",
                    child.tag,
                    parent.tag,
                    self.doc.line(child),
                )

    def extras(self, parent: ET.Element, known: Iterable[str], prefix: str = "") -> dict[str, str]:
        known_set = set(known)
        out: dict[str, str] = {}
        for child in parent:
            if child.tag not in known_set:
                logger.debug(
                    "config: keeping <%s> in <%s> (line %s) as a raw extra",
                    child.tag,
                    parent.tag,
                    self.doc.line(child),
                )
                _flatten(child, prefix + child.tag, out, 0)
        return out

    # -- sections ----------------------------------------------------------------------

    def transports(self, section: ET.Element) -> tuple[TransportConfig, ...]:
        result: list[TransportConfig] = []
        for index, elem in enumerate(section.findall("Transport"), start=1):
            result.append(self.transport(elem, index))
        self.ignore_unknown(section, ["Transport"])
        names: set[str] = set()
        addrs: set[tuple[str, int]] = set()
        replication: TransportConfig | None = None
        for elem, transport in zip(section.findall("Transport"), result, strict=True):
            if transport.name in names:
                self.fail(elem, f"duplicate transport name {transport.name!r}")
            names.add(transport.name)
            if transport.type == "amps-replication":
                if replication is not None:
                    self.fail(
                        elem,
                        f"<Transport> {transport.name!r} is a second amps-replication transport "
                        f"({replication.name!r} is the first): an instance has one incoming "
                        "replication transport",
                    )
                replication = transport
            key = (transport.host, transport.port)
            if transport.port and key in addrs:
                self.fail(
                    elem,
                    f"<Transport> {transport.name!r} reuses address {transport.address}",
                )
            addrs.add(key)
        return tuple(result)

    def transport(self, elem: ET.Element, index: int) -> TransportConfig:
        name = self.text(elem, "Name")
        label = f"<Transport> {name!r}" if name else f"<Transport> #{index}"
        raw_type = self.text(elem, "Type")
        if raw_type is None:
            self.fail(elem, f"{label} has no <Type>")
        ttype = TRANSPORT_TYPES.get(raw_type.lower())
        if ttype is None:
            allowed = ", ".join(TRANSPORT_TYPES)
            self.fail(
                self._child(elem, "Type"),
                f"{label} has unsupported <Type> {raw_type!r} (expected one of {allowed})",
            )
        addr_elems = elem.findall("InetAddr")
        if not addr_elems:
            self.fail(elem, f"{label} has no <InetAddr>")
        if len(addr_elems) > 1:
            self.fail(addr_elems[1], f"{label} has more than one <InetAddr>")
        addr_text = self.elem_text(addr_elems[0], elem)
        addr = self.convert(addr_elems[0], parse_inet_addr, addr_text)
        protocol = (self.text(elem, "Protocol") or "amps").lower()
        message_type = self.text(elem, "MessageType")
        known = ("Name", "Type", "InetAddr", "Protocol", "MessageType")
        return TransportConfig(
            name=name or f"{ttype}-{index}",
            type=ttype,
            host=addr.host,
            port=addr.port,
            protocol=protocol,
            message_type=message_type.lower() if message_type else None,
            extra=MappingProxyType(self.extras(elem, known)),
        )

    def sow_topics(self, root: ET.Element) -> tuple[SowTopicConfig, ...]:
        elems: list[ET.Element] = []
        sow = self.single(root, "SOW")
        if sow is not None:
            elems += [c for c in sow if c.tag in ("Topic", "TopicDefinition")]
            self.ignore_unknown(sow, ["Topic", "TopicDefinition"])
        # Pre-5.0 AMPS spelled the SOW section <TopicMetaData><TopicDefinition>.
        meta = self.single(root, "TopicMetaData")
        if meta is not None:
            elems += meta.findall("TopicDefinition")
            self.ignore_unknown(meta, ["TopicDefinition"])
        result: list[SowTopicConfig] = []
        seen: set[tuple[str, str]] = set()
        for elem in elems:
            topic = self.sow_topic(elem)
            if (topic.topic, topic.message_type) in seen:
                self.fail(
                    elem,
                    f"duplicate SOW topic {topic.topic!r} of message type {topic.message_type!r}",
                )
            seen.add((topic.topic, topic.message_type))
            result.append(topic)
        return tuple(result)

    def sow_topic(self, elem: ET.Element) -> SowTopicConfig:
        name = self.text(elem, "Name")
        # Inside the old <TopicDefinition>, the topic name is a <Topic> child.
        legacy = self.text(elem, "Topic") if elem.tag == "TopicDefinition" else None
        if name is not None and legacy is not None:
            self.fail(elem, f"<{elem.tag}> has both <Name> and <Topic>")
        topic = name if name is not None else legacy
        if topic is None:
            self.fail(elem, f"SOW <{elem.tag}> has no <Name>")
        label = f"SOW topic {topic!r}"
        message_type = self.required(elem, "MessageType", label).lower()
        keys = tuple(self.elem_text(k, elem) for k in elem.findall("Key"))
        file_text = self.text(elem, "FileName")
        file_name = None
        if file_text is not None:
            file_name = self.path(elem, "FileName", file_text.replace("%n", _sanitize(topic)))
        expiration = None
        exp_text = self.text(elem, "Expiration")
        if exp_text is not None and exp_text.lower() not in ("disabled", "none"):
            expiration = self.convert(self._child(elem, "Expiration"), parse_duration, exp_text)
        known = ("Name", "Topic", "MessageType", "Key", "FileName", "KeyDomain", "Expiration")
        return SowTopicConfig(
            topic=topic,
            message_type=message_type,
            keys=keys,
            file_name=file_name,
            key_domain=self.text(elem, "KeyDomain"),
            expiration=expiration,
            extra=MappingProxyType(self.extras(elem, known)),
        )

    def transaction_log(self, elem: ET.Element) -> TransactionLogConfig:
        directory = self.text(elem, "JournalDirectory")
        archive = self.text(elem, "JournalArchiveDirectory")
        journal_size = self.size(elem, "JournalSize")
        if journal_size is not None and journal_size <= 0:
            self.fail(self._child(elem, "JournalSize"), "<JournalSize> must be positive")
        prealloc = self.integer(elem, "PreallocatedJournalFiles", minimum=1)
        topics: list[TxlogTopic] = []
        for topic_elem in elem.findall("Topic"):
            name = self.required(topic_elem, "Name", "<TransactionLog> <Topic>")
            message_type = self.text(topic_elem, "MessageType")
            self.ignore_unknown(topic_elem, ["Name", "MessageType"])
            topics.append(TxlogTopic(name, message_type.lower() if message_type else None))
        known = (
            "JournalDirectory",
            "JournalArchiveDirectory",
            "JournalSize",
            "PreallocatedJournalFiles",
            "FlushInterval",
            "Topic",
        )
        return TransactionLogConfig(
            journal_directory=(
                self.path(elem, "JournalDirectory", directory)
                if directory
                else self.data_dir / "journal"
            ),
            journal_size=journal_size if journal_size is not None else DEFAULT_JOURNAL_SIZE,
            preallocated_journal_files=(
                prealloc if prealloc is not None else DEFAULT_PREALLOCATED_JOURNAL_FILES
            ),
            topics=tuple(topics),
            flush_interval=self.duration(elem, "FlushInterval"),
            archive_directory=(
                self.path(elem, "JournalArchiveDirectory", archive) if archive else None
            ),
            extra=MappingProxyType(self.extras(elem, known)),
        )

    def replication(
        self, elem: ET.Element, actions: tuple[ReplicationActionConfig, ...]
    ) -> ReplicationConfig:
        destinations: list[DestinationConfig] = []
        names: set[str] = set()
        for dest_elem in elem.findall("Destination"):
            dest = self.destination(dest_elem)
            if dest.name in names:
                self.fail(dest_elem, f"duplicate replication <Destination> {dest.name!r}")
            names.add(dest.name)
            destinations.append(dest)
        self.ignore_unknown(elem, ["Destination"])
        sync_count = sum(1 for d in destinations if d.sync_type == "sync")
        if sync_count > _MAX_SYNC_DESTINATIONS:
            self.fail(
                elem,
                f"{sync_count} sync replication destinations configured; "
                f"at most {_MAX_SYNC_DESTINATIONS} are supported",
            )
        return ReplicationConfig(destinations=tuple(destinations), actions=actions)

    def destination(self, elem: ET.Element) -> DestinationConfig:
        name = self.required(elem, "Name", "replication <Destination>")
        label = f"replication <Destination> {name!r}"
        sync_text = self.text(elem, "SyncType")
        sync_type: SyncType = "async"
        if sync_text is not None:
            lowered = sync_text.lower()
            if lowered == "sync":
                sync_type = "sync"
            elif lowered != "async":
                self.fail(
                    self._child(elem, "SyncType"),
                    f"{label}: <SyncType> must be 'sync' or 'async', got {sync_text!r}",
                )
        topics = tuple(self.replication_topic(t, label) for t in elem.findall("Topic"))
        passthrough: list[str] = []
        for pt in elem.findall("PassThrough"):
            regex = self.elem_text(pt, elem)
            try:
                re.compile(regex)
            except re.error as exc:
                self.fail(pt, f"{label}: invalid <PassThrough> regex {regex!r}: {exc}")
            passthrough.append(regex)
        inet_addrs: list[InetAddr] = []
        transport_type = "amps-replication"
        extra: dict[str, str] = {}
        transport = self.single(elem, "Transport")
        if transport is not None:
            raw_type = self.text(transport, "Type")
            if raw_type is not None:
                transport_type = raw_type.lower()
                if transport_type != "amps-replication":
                    self.fail(
                        self._child(transport, "Type"),
                        f"{label}: <Transport> <Type> must be amps-replication, got {raw_type!r}",
                    )
            for addr_elem in transport.findall("InetAddr"):
                for part in self.elem_text(addr_elem, transport).split(","):
                    if part.strip():
                        inet_addrs.append(self.convert(addr_elem, parse_inet_addr, part))
            extra.update(
                self.extras(transport, ("Type", "InetAddr", "Compression"), prefix="Transport/")
            )
        compression = self.compression(elem, transport, label)
        known = ("Name", "Group", "SyncType", "Topic", "PassThrough", "Transport", "Compression")
        extra.update(self.extras(elem, known))
        return DestinationConfig(
            name=name,
            group=self.text(elem, "Group"),
            sync_type=sync_type,
            topics=topics,
            inet_addrs=tuple(inet_addrs),
            transport_type=transport_type,
            passthrough=tuple(passthrough),
            extra=MappingProxyType(extra),
            compression=compression,
        )

    def compression(self, elem: ET.Element, transport: ET.Element | None, label: str) -> str | None:
        """``<Compression>`` of a destination (directly in it, or in its ``<Transport>``)."""
        found = [(elem, c) for c in elem.findall("Compression")]
        if transport is not None:
            found += [(transport, c) for c in transport.findall("Compression")]
        if not found:
            return None
        if len(found) > 1:
            self.fail(found[1][1], f"{label}: more than one <Compression>")
        parent, comp = found[0]
        value = self.elem_text(comp, parent).lower()
        if value in _COMPRESSION_OFF:
            return None
        if value not in _COMPRESSIONS:
            self.fail(
                comp,
                f"{label}: unsupported <Compression> {value!r} (expected one of "
                f"{', '.join(_COMPRESSIONS)}, or none)",
            )
        return value

    def replication_topic(self, elem: ET.Element, label: str) -> ReplicationTopicConfig:
        name = self.required(elem, "Name", f"{label} <Topic>")
        message_type = self.text(elem, "MessageType")
        exclusions: list[str] = []
        excl_text = self.text(elem, "ExcludeValidation")
        if excl_text is not None:
            for raw in excl_text.split(","):
                check = raw.strip().lower()
                if not check:
                    continue
                if check not in _EXCLUDABLE_VALIDATIONS:
                    reason = (
                        "cannot be excluded"
                        if check in _UNEXCLUDABLE_VALIDATIONS
                        else "is not a known validation check"
                    )
                    self.fail(
                        self._child(elem, "ExcludeValidation"),
                        f"{label} <Topic> {name!r}: <ExcludeValidation> {check!r} {reason}",
                    )
                exclusions.append(check)
        self.ignore_unknown(elem, ["Name", "MessageType", "Filter", "ExcludeValidation"])
        return ReplicationTopicConfig(
            name=name,
            message_type=message_type.lower() if message_type else None,
            filter=self.text(elem, "Filter"),
            exclude_validation=tuple(exclusions),
        )

    def admin(self, elem: ET.Element) -> AdminConfig:
        addr_text = self.required(elem, "InetAddr", "<Admin>")
        addr = self.convert(self._child(elem, "InetAddr"), parse_inet_addr, addr_text)
        file_text = self.text(elem, "FileName")
        return AdminConfig(
            host=addr.host,
            port=addr.port,
            interval=self.duration(elem, "Interval"),
            file_name=self.path(elem, "FileName", file_text) if file_text else None,
            extra=MappingProxyType(self.extras(elem, ("InetAddr", "FileName", "Interval"))),
        )

    def actions(
        self, section: ET.Element
    ) -> tuple[tuple[ActionConfig, ...], tuple[ReplicationActionConfig, ...]]:
        raw: list[ActionConfig] = []
        replication: list[ReplicationActionConfig] = []
        self.ignore_unknown(section, ["Action"])
        for action in section.findall("Action"):
            on = tuple(self.action_step(s) for s in action.findall("On"))
            do = tuple(self.action_step(s) for s in action.findall("Do"))
            self.ignore_unknown(action, ["On", "Do"])
            raw.append(ActionConfig(on=on, do=do))
            every: float | None = None
            for step_elem, step in zip(action.findall("On"), on, strict=True):
                if step.module == SCHEDULE_MODULE and "Every" in step.options:
                    every = self.convert(step_elem, parse_duration, step.options["Every"])
            for step_elem, step in zip(action.findall("Do"), do, strict=True):
                kind: Literal["downgrade", "upgrade"]
                if step.module == DOWNGRADE_REPLICATION_MODULE:
                    kind = "downgrade"
                elif step.module == UPGRADE_REPLICATION_MODULE:
                    kind = "upgrade"
                else:
                    continue
                age_text = step.options.get("Age")
                if age_text is None:
                    self.fail(step_elem, f"<Do> {step.module} requires an <Age> option")
                age = self.convert(step_elem, parse_duration, age_text)
                replication.append(
                    ReplicationActionConfig(kind=kind, age=age, every=every, options=step.options)
                )
        return tuple(raw), tuple(replication)

    def action_step(self, elem: ET.Element) -> ActionStep:
        module = self.required(elem, "Module", f"<Action> <{elem.tag}>")
        options: dict[str, str] = {}
        opts = self.single(elem, "Options")
        if opts is not None:
            for child in opts:
                _flatten(child, child.tag, options, 0)
        self.ignore_unknown(elem, ["Module", "Options"])
        return ActionStep(module=module, options=MappingProxyType(options))


_COMPRESSIONS: Final = ("zlib",)
_COMPRESSION_OFF: Final = ("none", "off", "false", "disabled")


def _flatten(elem: ET.Element, key: str, out: dict[str, str], depth: int) -> None:
    """Store ``elem``'s text (or its descendants' texts) under ``/``-joined keys."""
    if depth >= _MAX_EXTRA_DEPTH:
        return
    if len(elem) == 0:
        value = (elem.text or "").strip()
        out[key] = f"{out[key]},{value}" if key in out else value
        return
    for child in elem:
        _flatten(child, f"{key}/{child.tag}", out, depth + 1)


def _sanitize(topic: str) -> str:
    """Make a topic name usable as a file name component."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", topic).strip("_.")
    return cleaned or "topic"


# --------------------------------------------------------------------------- entry points

_ROOT_KNOWN = (
    "Name",
    "Group",
    "Transports",
    "SOW",
    "TopicMetaData",
    "TransactionLog",
    "Replication",
    "Admin",
    "Actions",
    "MessageMemoryLimit",
    "DataDirectory",
)


def _build(doc: _Document, base_dir: Path | None, source: Path | None) -> ServerConfig:
    root = doc.root
    if root.tag != "AMPSConfig":
        doc.fail(root, f"root element must be <AMPSConfig>, found <{root.tag}>")
    base = (base_dir if base_dir is not None else Path.cwd()).expanduser().absolute()
    reader = _Reader(doc, base)
    data_dir_text = reader.text(root, "DataDirectory")
    if data_dir_text is not None:
        reader.data_dir = reader.path(root, "DataDirectory", data_dir_text)

    transports_elem = reader.single(root, "Transports")
    transports = reader.transports(transports_elem) if transports_elem is not None else ()
    sow_topics = reader.sow_topics(root)
    txlog_elem = reader.single(root, "TransactionLog")
    txlog = reader.transaction_log(txlog_elem) if txlog_elem is not None else None

    actions: tuple[ActionConfig, ...] = ()
    repl_actions: tuple[ReplicationActionConfig, ...] = ()
    actions_elem = reader.single(root, "Actions")
    if actions_elem is not None:
        actions, repl_actions = reader.actions(actions_elem)
    repl_elem = reader.single(root, "Replication")
    replication = reader.replication(repl_elem, repl_actions) if repl_elem is not None else None
    if replication is None and repl_actions:
        logger.debug("config: replication actions configured without <Replication>; ignored")

    admin_elem = reader.single(root, "Admin")
    admin = reader.admin(admin_elem) if admin_elem is not None else None

    extra = reader.extras(root, _ROOT_KNOWN)
    memory_limit: int | None = None
    memory_text = reader.text(root, "MessageMemoryLimit")
    if memory_text is not None:
        if memory_text.endswith("%"):
            extra["MessageMemoryLimit"] = memory_text  # a share of host memory
        else:
            memory_limit = reader.convert(
                reader._child(root, "MessageMemoryLimit"), parse_size, memory_text
            )

    return ServerConfig(
        name=reader.text(root, "Name") or DEFAULT_SERVER_NAME,
        group=reader.text(root, "Group"),
        transports=transports,
        sow_topics=sow_topics,
        transaction_log=txlog,
        replication=replication,
        admin=admin,
        data_dir=reader.data_dir,
        message_memory_limit=memory_limit,
        actions=actions,
        extra=MappingProxyType(extra),
        source=source,
    )


def parse_config(xml_text: str, *, base_dir: Path | None = None) -> ServerConfig:
    """Parse an ``<AMPSConfig>`` document.

    Args:
        xml_text: the XML document.
        base_dir: directory that relative paths are resolved against (and the default
            data directory); the current directory when ``None``.

    Raises:
        ConfigError: on malformed XML, a DOCTYPE/entity declaration, or invalid content.
    """
    return _build(_read_xml(xml_text), base_dir, None)


def load_config(path: str | os.PathLike[str]) -> ServerConfig:
    """Read and parse the configuration file at ``path``.

    Relative paths inside the file are resolved against the file's directory.  The
    document's own encoding declaration is honoured.

    Raises:
        ConfigError: if the file cannot be read or is invalid; the message starts with
            the file name.
    """
    file = Path(path).expanduser()
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {file}: {exc}") from exc
    try:
        return _build(_read_xml(data), file.absolute().parent, file.absolute())
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from exc


def default_config(
    *,
    host: str = DEFAULT_HOST,
    tcp_port: int = 9007,
    ws_port: int = 9008,
    data_dir: Path | None = None,
    name: str = DEFAULT_SERVER_NAME,
) -> ServerConfig:
    """The configuration used when the server is started without ``--config``.

    A ``tcp`` transport on ``host:tcp_port`` and a ``ws`` transport on ``host:ws_port``
    (both protocol ``amps``, any message type), and the ``/ADMIN/bookmark_store`` SOW
    topic (json, keyed by ``/clientName`` and ``/subId``).  The SOW is in memory unless
    ``data_dir`` is given, in which case it is stored in
    ``<data_dir>/sow/bookmark_store.sqlite``.  No transaction log is configured.
    """
    for label, port in (("tcp_port", tcp_port), ("ws_port", ws_port)):
        if not 0 <= port <= 65535:
            raise ConfigError(f"{label} must be in 0..65535, got {port}")
    resolved = data_dir.expanduser().absolute() if data_dir is not None else None
    bookmark_store = SowTopicConfig(
        topic="/ADMIN/bookmark_store",
        message_type="json",
        keys=("/clientName", "/subId"),
        file_name=resolved / "sow" / "bookmark_store.sqlite" if resolved is not None else None,
    )
    return ServerConfig(
        name=name,
        transports=(
            TransportConfig(name="tcp", type="tcp", host=host, port=tcp_port),
            TransportConfig(name="ws", type="ws", host=host, port=ws_port),
        ),
        sow_topics=(bookmark_store,),
        data_dir=resolved,
    )
