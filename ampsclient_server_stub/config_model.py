"""The reference server's configuration as immutable dataclasses.

:class:`ServerConfig` and its sections (:class:`TransportConfig`, :class:`SowTopicConfig`,
:class:`TransactionLogConfig`, :class:`DestinationConfig`, ...) are what
:func:`~ampsclient_server_stub.config.load_config` returns and what the server reads; they
hold no parsing logic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, NamedTuple

from .config_values import InetAddr
from .queues.config import QueueConfig
from .queues.view_config import ViewConfig

if TYPE_CHECKING:
    from .engine.composite_codec import CompositeType
    from .views.config import SowViewConfig

__all__ = [
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
    "ConflatedTopicConfig",
    "DestinationConfig",
    "ReplicationActionConfig",
    "ReplicationConfig",
    "ReplicationTopicConfig",
    "ServerConfig",
    "SowTopicConfig",
    "SyncType",
    "TransactionLogConfig",
    "TransportConfig",
    "TransportType",
    "TxlogTopic",
]

DEFAULT_SERVER_NAME = "ampsclient-server"
"""Instance name used when ``<Name>`` is absent."""

DEFAULT_JOURNAL_SIZE = 1024**3
"""AMPS default ``JournalSize`` (1GB)."""

DEFAULT_PREALLOCATED_JOURNAL_FILES = 2
"""AMPS default ``PreallocatedJournalFiles``."""

SCHEDULE_MODULE = "amps-action-on-schedule"
DOWNGRADE_REPLICATION_MODULE = "amps-action-do-downgrade-replication"
UPGRADE_REPLICATION_MODULE = "amps-action-do-upgrade-replication"

TransportType = Literal["tcp", "tcps", "ws", "wss", "unix", "amps-replication"]
SyncType = Literal["sync", "async"]

TRANSPORT_TYPES: Mapping[str, TransportType] = MappingProxyType(
    {
        "tcp": "tcp",
        "tcps": "tcps",
        "ws": "ws",
        "websocket": "ws",
        "wss": "wss",
        "unix": "unix",
        "amps-replication": "amps-replication",
    }
)
"""Accepted ``<Type>`` values (lower-cased) and the normalised type they map to."""


def _empty_mapping() -> Mapping[str, str]:
    return MappingProxyType({})


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """A listening ``<Transports>/<Transport>``.

    ``type`` is normalised (``websocket`` becomes ``ws``).  ``message_type`` is ``None``
    when the transport accepts any message type.  ``extra`` holds the other accepted child
    elements (TLS, limits, pools, ``Authentication``/``Entitlement``, ``Secret``) verbatim,
    for the security and network layers.  ``path`` is the socket file of a ``unix``
    transport (``host``/``port`` are then empty); ``compression`` is ``"zlib"`` when the
    transport accepts compressed connections (``<Compression>zlib</Compression>``).
    """

    name: str
    type: TransportType
    host: str
    port: int
    protocol: str = "amps"
    message_type: str | None = None
    extra: Mapping[str, str] = field(default_factory=_empty_mapping)
    path: str | None = None
    compression: str | None = None

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
    history_window: float | None = None
    """``<History><Window>`` in seconds: how far back historical SOW queries reach
    (``None``: no history, a ``sow`` with a bookmark fails)."""
    history_granularity: float = 0.0
    """``<History><Granularity>`` in seconds: historical states are kept at this spacing (a
    query's time is rounded down to a multiple of it; 0: every change)."""
    preprocessing: tuple[str, ...] = ()
    """``<Preprocessing><Field>`` texts (``expr AS /path``): applied before the SOW key is
    computed (``engine.enrichment``)."""
    enrichment: tuple[str, ...] = ()
    """``<Enrichment><Field>`` texts: applied after the SOW key is computed."""
    hash_indexes: tuple[tuple[str, ...], ...] = ()
    """``<HashIndex>`` definitions, each its ``<Key>`` identifiers (``engine.sow_index``)."""
    memo_indexes: tuple[str, ...] = ()
    """``<Index>`` identifiers: fields AMPS pre-creates a memo index for (every record is held
    parsed here, which serves any field; the identifiers are checked and listed)."""


@dataclass(frozen=True, slots=True)
class ConflatedTopicConfig:
    """A conflated topic (``<SOW>/<ConflatedTopic>``, ``conflated_config``); ``interval`` in
    seconds (AMPS default 5s)."""

    name: str
    message_type: str
    underlying: str
    interval: float = 5.0
    filter: str | None = None
    hash_indexes: tuple[tuple[str, ...], ...] = ()
    """``<HashIndex>`` definitions, each its ``<Key>`` identifiers."""


class TxlogTopic(NamedTuple):
    """A topic recorded in the transaction log; ``message_type`` ``None`` means any.

    With a ``filter`` (the ``<Topic>``'s ``<Filter>``), only the messages matching it are
    recorded.
    """

    name: str
    message_type: str | None
    filter: str | None = None


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
    holds the accepted top-level elements that the security, slow-client and replication
    layers interpret (``MessageDiskPath``, ``ClientMessageAgeLimit``, ``Authenticator``, ...)
    verbatim.
    """

    name: str = DEFAULT_SERVER_NAME
    group: str | None = None
    transports: tuple[TransportConfig, ...] = ()
    sow_topics: tuple[SowTopicConfig, ...] = ()
    queues: tuple[QueueConfig, ...] = ()
    """``<SOW>/<Queue>``, ``<LocalQueue>``, ``<GroupLocalQueue>`` (``queues.config``)."""
    views: tuple[ViewConfig, ...] = ()
    """``<SOW>/<View>`` over queues (``queues.view_config``)."""
    sow_views: tuple[SowViewConfig, ...] = ()
    """``<SOW>/<View>`` over SOW topics, with joins (``views.config``)."""
    conflated_topics: tuple[ConflatedTopicConfig, ...] = ()
    """``<SOW>/<ConflatedTopic>`` (``conflated_config``)."""
    transaction_log: TransactionLogConfig | None = None
    replication: ReplicationConfig | None = None
    admin: AdminConfig | None = None
    data_dir: Path | None = None
    message_memory_limit: int | None = None
    actions: tuple[ActionConfig, ...] = ()
    message_types: tuple[CompositeType, ...] = ()
    """The composite types ``<MessageTypes>`` declares (registered as it was read)."""
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
