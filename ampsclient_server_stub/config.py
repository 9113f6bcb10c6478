"""AMPS-style XML configuration for the reference server.

The reference server reads the same XML dialect as a real AMPS instance (the parts of it
that it implements): an ``<AMPSConfig>`` root with ``<Name>``, ``<Group>``,
``<Transports>``, ``<SOW>``, ``<TransactionLog>``, ``<Replication>``, ``<Admin>`` and
``<Actions>`` sections.  :func:`load_config` / :func:`parse_config` turn such a document
into an immutable :class:`ServerConfig`; :func:`default_config` builds the configuration
used when the server is started without ``--config``.

Rules followed by the parser:

* Element names are matched case-sensitively, as AMPS does.  Every element must be one
  the server implements (:data:`~.config_elements.ELEMENTS`): any other is refused with an
  error naming it, nothing is accepted and ignored.  Elements interpreted by the security,
  slow-client and replication layers (``Authentication``, ``MessageDiskPath``, ``Secret``,
  ...) are passed to them in an ``extra`` mapping (nested elements flattened to
  ``"Parent/Child"`` keys).
* Message type names are lower-cased.
* Sizes (``10MB``, ``1GB``, ``512KB``, ``4096``) are parsed by :func:`parse_size`, time
  intervals (``10s``, ``500ms``, ``2m``, ``1h``, ``1d``) by :func:`parse_duration`.
* Relative paths of what the server writes (``JournalDirectory``, SOW ``FileName``,
  ``MessageDiskPath``, ...) are resolved against the server data directory: the
  ``data_dir`` given to :func:`load_config` (``--data-dir``), else the non-AMPS
  ``<DataDirectory>`` element, else the directory holding the configuration file (or the
  current directory).  Files the configuration reads (certificates, users and password
  files) are relative to the file's directory.
* Documents containing a ``DOCTYPE`` or entity declarations are refused, so entity
  expansion attacks are impossible.
* ``${VAR}`` / ``$VAR`` environment variables are expanded in texts and attributes (an
  undefined one is an error naming it) and ``<Include>`` elements are replaced by the
  elements of the file they name, before anything else is read (:mod:`.config_expand`).

The modules: :mod:`.config_values` (value syntax), :mod:`.config_model` (the dataclasses),
:mod:`.config_xml` (safe XML reading), :mod:`.config_reader` (the sections); this module is
the entry point and re-exports every public name.

Every problem is reported as a :class:`ConfigError` whose message names the offending
element and, when known, its line number.
"""

from __future__ import annotations

import os
from pathlib import Path

from .action_options import check_action_options
from .config_expand import expand_document
from .config_model import (
    DEFAULT_JOURNAL_SIZE,
    DEFAULT_PREALLOCATED_JOURNAL_FILES,
    DEFAULT_SERVER_NAME,
    DOWNGRADE_REPLICATION_MODULE,
    SCHEDULE_MODULE,
    TRANSPORT_TYPES,
    UPGRADE_REPLICATION_MODULE,
    ActionConfig,
    ActionStep,
    AdminConfig,
    DestinationConfig,
    ReplicationActionConfig,
    ReplicationConfig,
    ReplicationTopicConfig,
    ServerConfig,
    SowTopicConfig,
    TransactionLogConfig,
    TransportConfig,
    TxlogTopic,
)
from .config_reader import build_config
from .config_values import (
    DEFAULT_HOST,
    ConfigError,
    InetAddr,
    parse_duration,
    parse_inet_addr,
    parse_size,
)
from .config_xml import XmlDocument, read_xml

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
    "load_document",
    "parse_config",
    "parse_duration",
    "parse_inet_addr",
    "parse_size",
]


def parse_config(xml_text: str, *, base_dir: Path | None = None) -> ServerConfig:
    """Parse an ``<AMPSConfig>`` document.

    Args:
        xml_text: the XML document.
        base_dir: directory that relative paths are resolved against (and the default
            data directory); the current directory when ``None``.

    Raises:
        ConfigError: on malformed XML, a DOCTYPE/entity declaration, or invalid content.
    """
    doc = expand_document(read_xml(xml_text), None)
    config = build_config(doc, base_dir, None)
    check_action_options(config.actions)
    return config


def load_document(path: str | os.PathLike[str]) -> XmlDocument:
    """The configuration file at ``path``, parsed, its environment variables expanded and
    its ``<Include>`` files inlined (what AMPS keeps and shows).

    Raises:
        ConfigError: if a file cannot be read or is invalid; the message starts with the
            file name.
    """
    file = Path(path).expanduser()
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {file}: {exc}") from exc
    try:
        return expand_document(read_xml(data), file.absolute())
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from exc


def load_config(
    path: str | os.PathLike[str], *, data_dir: str | os.PathLike[str] | None = None
) -> ServerConfig:
    """Read and parse the configuration file at ``path``.

    Relative paths inside the file (journal, SOW files, ``MessageDiskPath``...) are resolved
    against the data directory: ``data_dir`` when given (``--data-dir``; it replaces the
    file's ``<DataDirectory>``), else the file's ``<DataDirectory>``, else the file's
    directory.  The files the configuration reads (certificates, keys, users and password
    files) stay relative to the file's directory.  The document's own encoding declaration
    is honoured.

    Raises:
        ConfigError: if the file cannot be read or is invalid; the message starts with
            the file name.
    """
    file = Path(path).expanduser()
    doc = load_document(file)
    try:
        override = Path(data_dir).expanduser().absolute() if data_dir is not None else None
        config = build_config(doc, file.absolute().parent, file.absolute(), override)
        check_action_options(config.actions)
        return config
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
