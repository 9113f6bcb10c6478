"""Per-transport security and resource policy, built from the server configuration.

Every ``<Transport>`` gets a :class:`TransportPolicy`: its TLS context (``tcps``/``wss``), its
authentication and entitlement modules, its slow-client resource pool and client limits, its
maximum frame size and its connection cap. Settings a transport does not give are taken from
the instance level (the same elements directly under ``<AMPSConfig>``).

Elements read (all optional; paths are relative to the configuration file's directory, or the
data directory)::

    <Certificate>server.pem</Certificate>        <!-- tcps / wss: certificate chain (PEM) -->
    <PrivateKey>server.key</PrivateKey>          <!-- its key, when not in the certificate -->
    <CAFile>ca.pem</CAFile>                      <!-- CAs that client certificates chain to -->
    <RequireClientCertificate>true</RequireClientCertificate>
    <Authentication><Module>users-file</Module><Options><UsersFile>users.json</UsersFile>
        </Options></Authentication>
    <Entitlement><Module>amps-default-entitlement-module</Module><Options>
        <UsersFile>users.json</UsersFile></Options></Entitlement>
    <MessageMemoryLimit>64MB</MessageMemoryLimit> <MessageDiskLimit>1GB</MessageDiskLimit>
    <MessageDiskPath>offline</MessageDiskPath>   <!-- instance level only -->
    <ClientMessageAgeLimit>30s</ClientMessageAgeLimit> <ClientMaxCapacity>10%</ClientMaxCapacity>
    <MaxFrameSize>16MB</MaxFrameSize>            <!-- largest inbound frame -->
    <MaxConnections>1000</MaxConnections>        <!-- per transport, or the whole instance -->
    <LogonTimeout>30s</LogonTimeout>             <!-- extension: close if not logged on by then -->

Defaults (the guide documents neither a connection cap nor a logon deadline; without them
10,000 connections that never log on were kept for ever): the instance accepts at most
:func:`default_max_connections` connections, and a connection that has not logged on within
:data:`DEFAULT_LOGON_TIMEOUT` seconds is closed. ``<LogonTimeout>0</LogonTimeout>`` turns the
deadline off.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ampsclient.tls import server_context
from ampsclient_server_stub.config import (
    ConfigError,
    ServerConfig,
    TransportConfig,
    parse_duration as _parse_duration,
    parse_size as _parse_size,
)

from .auth import (
    AuthenticationModule,
    EntitlementModule,
    SecurityConfigError,
    build_authentication,
    build_entitlements,
)
from .logon_tokens import LogonTokens
from .throttle import DEFAULT_LOCKOUT, DEFAULT_LOGON_FAILURE_LIMIT, LogonThrottle
from .users import UsersFile

if TYPE_CHECKING:
    from .guard import SecurityGuard

__all__ = ["ClientLimits", "PoolLimits", "ServerSecurity", "TransportPolicy"]

logger = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes", "on")


def _options(extra: Mapping[str, str], section: str) -> dict[str, str]:
    prefix = section + "/Options/"
    return {k[len(prefix) :]: v for k, v in extra.items() if k.startswith(prefix)}


def _host_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 * 1024**3


def _cgroup_memory_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), ``None`` when there is none or it cannot be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _id, controllers, path = parts
        if controllers == "":
            files = [root / path.lstrip("/") / "memory.max"]
        elif "memory" in controllers.split(","):
            files = [root / "memory" / path.lstrip("/") / "memory.limit_in_bytes"]
        else:
            continue
        for file in files:
            try:
                text = file.read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 1 << 60:  # v1 writes "no limit" as ~2**63
                found.append(int(text))
    return min(found) if found else None


def process_memory_limit() -> int:
    """What this process may use: the host's memory, lowered by ``ulimit -m`` (RSS),
    ``ulimit -v`` (address space) and the memory limit of its cgroup."""
    limit = _host_memory()
    try:
        import resource

        for which in (resource.RLIMIT_RSS, resource.RLIMIT_AS):
            soft, _hard = resource.getrlimit(which)
            if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
                limit = min(limit, int(soft))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass
    cgroup = _cgroup_memory_limit()
    return limit if cgroup is None else min(limit, cgroup)


def default_memory_limit() -> int:
    """The guide's default ``MessageMemoryLimit``: 10% of the host's memory, or of what the
    process may use when that is lower (:func:`process_memory_limit`: a container's or a
    cgroup's limit, ``ulimit``), so that a stalled consumer is offlined to disk before the
    process is killed for memory."""
    return process_memory_limit() // 10


DEFAULT_DISK_PATH = Path("/var/tmp")
"""The guide's default ``MessageDiskPath``."""


def _size(text: str | None, what: str) -> int | None:
    if text is None or not text.strip():
        return None
    text = text.strip()
    if text.endswith("%"):
        return int(_host_memory() * _fraction(text, what))
    try:
        return _parse_size(text)
    except ConfigError as exc:
        raise SecurityConfigError(f"<{what}>: {exc}") from None


def _fraction(text: str | None, what: str) -> float:
    if text is None or not text.strip():
        return 1.0
    raw = text.strip().rstrip("%")
    try:
        value = float(raw) / 100.0
    except ValueError:
        raise SecurityConfigError(f"<{what}> must be a percentage, got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise SecurityConfigError(f"<{what}> must be in (0%, 100%], got {text!r}")
    return value


DEFAULT_LOGON_TIMEOUT = 30.0
"""Seconds a new connection has to log on before it is closed (``<LogonTimeout>``)."""

DEFAULT_MAX_CONNECTIONS = 5000
"""The instance's connection cap when ``<MaxConnections>`` is not set: an idle connection
costs about 9 KB of server memory (10,000 measured at +92 MB RSS), so 5,000 bound an idle flood
to some 50 MB, far above what one reference-server instance serves."""


def default_max_connections() -> int:
    """:data:`DEFAULT_MAX_CONNECTIONS`, or fewer when the process' file-descriptor limit is
    lower (128 descriptors are kept for journal, SOW and admin files)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX
        return DEFAULT_MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_CONNECTIONS
    return max(64, min(DEFAULT_MAX_CONNECTIONS, soft - 128))


def _duration(text: str | None, what: str) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        return _parse_duration(text)
    except ConfigError as exc:
        raise SecurityConfigError(f"<{what}>: {exc}") from None


def _count(text: str | None, what: str) -> int | None:
    if text is None or not text.strip():
        return None
    if not text.strip().isdigit():
        raise SecurityConfigError(f"<{what}> must be a whole number, got {text!r}")
    return int(text.strip())


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """Per-client policy of a transport (or the instance)."""

    age_limit: float | None = None
    """``ClientMessageAgeLimit`` in seconds (``None``: no limit)."""
    max_capacity: float = 1.0
    """``ClientMaxCapacity`` as a fraction of the pool's limits."""


@dataclass(frozen=True, eq=False)
class PoolLimits:
    """The configuration of one resource pool (the network layer's ``net.flow`` runs it).

    Pools compare by identity: transports given the same object share one budget.
    """

    name: str
    """For log messages."""
    memory_limit: int
    """``MessageMemoryLimit`` in bytes."""
    disk_limit: int
    """``MessageDiskLimit`` in bytes."""
    disk_path: Path
    """``MessageDiskPath``: where offline files go (created when needed)."""


class Peer(Protocol):
    """What a policy needs of a connection (the network layer's sessions fit)."""

    peer: str
    """The client's address, for log messages."""


@dataclass(eq=False)
class TransportPolicy:
    """What applies to the connections of one transport."""

    name: str
    security: ServerSecurity
    ssl_context: ssl.SSLContext | None = None
    auth: AuthenticationModule | None = None
    """``None``: not configured (the broker's plain ``authenticate`` hook applies)."""
    entitlements: EntitlementModule | None = None
    """``None``: every topic allowed."""
    pool: PoolLimits | None = None
    """``None``: no slow-client management (a client over its write buffer is dropped)."""
    limits: ClientLimits = field(default_factory=ClientLimits)
    max_frame_size: int | None = None
    max_connections: int | None = None
    logon_timeout: float | None = DEFAULT_LOGON_TIMEOUT
    """Seconds a connection has to log on (``None``: no deadline)."""
    sessions: set[Any] = field(default_factory=set)

    def attach(self, session: Peer) -> bool:
        """A connection opened on this transport: apply the connection caps.

        Returns ``False`` when a connection cap is reached (the caller closes it). The network
        layer sets up the connection's slow-client state from :attr:`pool` and :attr:`limits`.
        """
        sec = self.security
        if self.max_connections is not None and len(self.sessions) >= self.max_connections:
            logger.warning(
                "transport %r: connection from %s refused (MaxConnections %d)",
                self.name,
                session.peer,
                self.max_connections,
            )
            sec.refused += 1
            return False
        if sec.max_connections is not None and sec.connection_count >= sec.max_connections:
            logger.warning(
                "connection from %s refused (instance MaxConnections %d)",
                session.peer,
                sec.max_connections,
            )
            sec.refused += 1
            return False
        self.sessions.add(session)
        return True

    def detach(self, session: Peer) -> None:
        """The connection ended (idempotent)."""
        self.sessions.discard(session)


class ServerSecurity:
    """The security and resource policies of one server instance.

    Build with :meth:`from_config`; :attr:`guard` is the broker hook (``None`` when no
    transport configures authentication or entitlements).
    """

    def __init__(self) -> None:
        self.policies: dict[str, TransportPolicy] = {}
        self.default = TransportPolicy("<instance>", self)
        """Instance-level policy, for connections that come through no configured transport."""
        self.max_connections: int | None = None
        self.refused = 0
        self.pools: list[PoolLimits] = []
        """Every resource pool configured (the network layer's ``net.flow`` runs them)."""
        self.users_files: dict[Path, UsersFile] = {}
        self.guard: SecurityGuard | None = None
        self.logon_throttle = LogonThrottle()
        """Failed-logon lockouts (``<LogonFailureLimit>``, ``<LogonLockout>``: :mod:`.throttle`)."""
        self.logon_tokens = LogonTokens()
        """Single-use logon tokens the admin dashboard's query panel logs on with
        (:mod:`.logon_tokens`)."""

    @property
    def connection_count(self) -> int:
        """Open connections across every transport."""
        return sum(len(p.sessions) for p in self.policies.values()) + len(self.default.sessions)

    def policy_for(self, transport_name: str) -> TransportPolicy:
        """The policy of the transport called ``transport_name`` (else the instance's)."""
        return self.policies.get(transport_name, self.default)

    @classmethod
    def from_config(cls, config: ServerConfig) -> ServerSecurity:
        """Build every policy of ``config``.

        Raises:
            SecurityConfigError: a module, file or value that cannot be used.
        """
        self = cls()
        if config.source is not None:
            base = config.source.parent
        elif config.data_dir is not None:
            base = config.data_dir
        else:
            base = Path.cwd()
        root = dict(config.extra)
        if config.message_memory_limit is not None:
            root["MessageMemoryLimit"] = str(config.message_memory_limit)
        limit = _count(root.get("LogonFailureLimit"), "LogonFailureLimit")
        lockout = _duration(root.get("LogonLockout"), "LogonLockout")
        self.logon_throttle = LogonThrottle(
            limit=DEFAULT_LOGON_FAILURE_LIMIT if limit is None else limit,
            lockout=DEFAULT_LOCKOUT if lockout is None else lockout,
        )
        self.max_connections = _count(root.get("MaxConnections"), "MaxConnections")
        if self.max_connections is None:
            self.max_connections = default_max_connections()
        instance_pool = self._instance_pool(config, root, base)
        self.default = self._policy("<instance>", {}, root, base, instance_pool)
        for transport in config.transports:
            self.policies[transport.name] = self._transport_policy(
                transport, root, base, instance_pool
            )
        policies = [self.default, *self.policies.values()]
        if any(p.auth is not None or p.entitlements is not None for p in policies):
            from .guard import SecurityGuard

            self.guard = SecurityGuard(self)
        return self

    def _path(self, base: Path, text: str) -> Path:
        path = Path(text).expanduser()
        return path if path.is_absolute() else base / path

    def _instance_pool(
        self, config: ServerConfig, root: Mapping[str, str], base: Path
    ) -> PoolLimits:
        # As in AMPS, an instance-wide pool exists by default (seed 001, "Slow Client
        # Management"): slow-client offlining is on without any configuration.
        return self._new_pool("instance", root, root, base, config)

    def _new_pool(
        self,
        name: str,
        own: Mapping[str, str],
        root: Mapping[str, str],
        base: Path,
        config: ServerConfig | None = None,
    ) -> PoolLimits:
        memory = _size(
            own.get("MessageMemoryLimit") or root.get("MessageMemoryLimit"), "MessageMemoryLimit"
        )
        if memory is None:
            memory = default_memory_limit()
        disk = _size(
            own.get("MessageDiskLimit") or root.get("MessageDiskLimit"), "MessageDiskLimit"
        )
        if disk is None:
            disk = max(1024**3, memory)  # the guide: 1GB or MessageMemoryLimit, the higher
        path_text = root.get("MessageDiskPath")
        disk_path = self._path(base, path_text) if path_text else DEFAULT_DISK_PATH
        pool = PoolLimits(name, memory_limit=memory, disk_limit=disk, disk_path=disk_path)
        self.pools.append(pool)
        return pool

    def _policy(
        self,
        name: str,
        own: Mapping[str, str],
        root: Mapping[str, str],
        base: Path,
        instance_pool: PoolLimits | None,
    ) -> TransportPolicy:
        def pick(key: str) -> str | None:
            value = own.get(key)
            return value if value not in (None, "") else root.get(key)

        policy = TransportPolicy(name, self)
        for section in ("Authentication", "Entitlement"):
            for src in (own, root):
                if src.get(f"{section}/Module") is None and _options(src, section):
                    option = next(iter(_options(src, section)))
                    raise SecurityConfigError(
                        f"<{section}><Options><{option}> without a <{section}><Module>: no "
                        "module would read it"
                    )
        section_src = own if own.get("Authentication/Module") is not None else root
        module = section_src.get("Authentication/Module")
        if module is not None:
            policy.auth = build_authentication(
                module, _options(section_src, "Authentication"), base, cache=self.users_files
            )
        section_src = own if own.get("Entitlement/Module") is not None else root
        module = section_src.get("Entitlement/Module")
        if module is not None:
            policy.entitlements = build_entitlements(
                module, _options(section_src, "Entitlement"), base, cache=self.users_files
            )
        policy.limits = ClientLimits(
            age_limit=_duration(pick("ClientMessageAgeLimit"), "ClientMessageAgeLimit"),
            max_capacity=_fraction(pick("ClientMaxCapacity"), "ClientMaxCapacity"),
        )
        if own.get("MessageMemoryLimit") or own.get("MessageDiskLimit"):
            policy.pool = self._new_pool(f"transport {name}", own, root, base)
        elif instance_pool is not None:
            policy.pool = instance_pool
        elif own.get("ClientMessageAgeLimit") or own.get("ClientMaxCapacity"):
            policy.pool = self._new_pool(f"transport {name}", own, root, base)
        policy.max_frame_size = _size(pick("MaxFrameSize"), "MaxFrameSize")
        policy.max_connections = _count(own.get("MaxConnections"), "MaxConnections")
        logon = _duration(pick("LogonTimeout"), "LogonTimeout")
        if logon is not None:
            policy.logon_timeout = logon if logon > 0 else None
        return policy

    def _transport_policy(
        self,
        transport: TransportConfig,
        root: Mapping[str, str],
        base: Path,
        instance_pool: PoolLimits | None,
    ) -> TransportPolicy:
        own = transport.extra
        policy = self._policy(transport.name, own, root, base, instance_pool)
        if transport.is_tls:
            cert = own.get("Certificate")
            if not cert:
                raise SecurityConfigError(
                    f"transport {transport.name!r} ({transport.type}) needs a <Certificate>"
                )
            key = own.get("PrivateKey")
            ca = own.get("CAFile")
            require = (own.get("RequireClientCertificate") or "").strip().lower() in _TRUE
            try:
                policy.ssl_context = server_context(
                    certfile=self._path(base, cert),
                    keyfile=self._path(base, key) if key else None,
                    cafile=self._path(base, ca) if ca else None,
                    require_client_cert=require,
                    password=own.get("PrivateKeyPassword") or None,
                )
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise SecurityConfigError(
                    f"transport {transport.name!r}: cannot load its certificate: {exc}"
                ) from None
        return policy

    def statistics(self) -> dict[str, int]:
        """Counters: refused connections (slow clients: ``net.flow.FlowControl``)."""
        return {"connections_refused": self.refused}

    def close(self) -> None:
        """Nothing to release (``FlowControl.close`` drops the offline files); kept for the
        server's shutdown sequence."""
