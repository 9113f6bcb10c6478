"""A reference server started for a test: what the pytest plugin's ``amps_server`` yields.

It runs in this process (a :class:`~ampsclient_server_stub.ServerThread`, the default: it
starts in milliseconds) or as a child process (a
:class:`~ampsclient_server_stub.harness.ServerProcess`, for tests that ``kill -9`` and restart
it). Its configuration is the zero-configuration default, an AMPS-style XML document (text or
a file) or a :class:`~ampsclient_server_stub.config.ServerConfig`. Every client listener is
moved to ``127.0.0.1`` on a free port, so configurations written for a real instance (port
9007...) run side by side in a test session.

Example::

    with AmpsServer(config=XML, message_types=["json", "nvfix"]) as server:
        client = server.client("tester")            # connected and logged on
        client.publish("orders", '{"id": 1}')
        assert server.sow("orders") == ['{"id": 1}']
        server.uris                                    # {"json": "tcp://...", "nvfix": ...}
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

from ampsclient import Client
from ampsclient_server_stub.config import (
    DEFAULT_SERVER_NAME,
    ConfigError,
    ServerConfig,
    TransportConfig,
    default_config,
    parse_config,
)
from ampsclient_server_stub.engine.journal import FsyncPolicy
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.server import ServerThread

__all__ = ["AmpsServer", "ConfigSource"]

ConfigSource = str | os.PathLike[str] | ServerConfig | None
"""XML text (it starts with ``<``), a path to an XML file, a parsed config, or ``None``."""

_CLIENT_KINDS = ("tcp", "tcps", "ws", "wss")
_names = itertools.count(1)


def _kind(transport: TransportConfig) -> str:
    """``tcp``, ``tcps``, ``ws`` or ``wss``: the URI scheme a client uses for ``transport``."""
    base = "ws" if transport.is_websocket else "tcp"
    return base + ("s" if transport.is_tls else "")


def _to_loopback(config: ServerConfig) -> ServerConfig:
    """``config`` with every client listener on 127.0.0.1, port 0 (the admin one too)."""
    transports = tuple(
        dataclasses.replace(t, host="127.0.0.1", port=0) if t.type in _CLIENT_KINDS else t
        for t in config.transports
    )
    admin = config.admin
    if admin is not None:
        admin = dataclasses.replace(admin, host="127.0.0.1", port=0)
    return dataclasses.replace(config, transports=transports, admin=admin)


class AmpsServer:
    """A reference server for one test (or one session); see the module docstring.

    Args:
        config: XML text, a path to an XML file, a :class:`ServerConfig`, or ``None`` (the
            default configuration: ``tcp`` and ``ws`` transports for any message type, every
            topic recorded in a transaction log so bookmark subscriptions work).
        message_types: the message types :attr:`uris` lists (and :meth:`uri` defaults to the
            first); default: those the configuration's transports name, ``json`` for a
            transport of any type. One that no transport accepts is refused.
        data_dir: the server's data directory (default: a temporary one, removed by
            :meth:`stop`); relative paths of an XML configuration are resolved against it.
        process: run the server as a child process (:meth:`kill`, :meth:`restart`).
        name: the instance name (default: ``amps-test-N``).
        fsync: journal durability (``never``: the operating system decides; a test does not
            need power-loss safety, and ``kill -9`` loses nothing either way).

    Raises:
        ConfigError: the configuration is invalid, or accepts none of ``message_types``.
    """

    def __init__(
        self,
        *,
        config: ConfigSource = None,
        message_types: Sequence[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        process: bool = False,
        name: str | None = None,
        fsync: FsyncPolicy = "never",
    ) -> None:
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="amps-test-")
            data_dir = self._tempdir.name
        self.data_dir = Path(data_dir)
        """The server's data directory."""
        self.name = name or f"amps-test-{next(_names)}"
        self.fsync: FsyncPolicy = fsync
        self._xml: str | None = None
        self.config = self._load(config)
        """The configuration the server runs (listeners on 127.0.0.1, ports 0 in process)."""
        self.message_types = self._check_types(message_types)
        """The message types of :attr:`uris`, the first being the default of :meth:`uri`."""
        self.thread: ServerThread | None = None
        """The in-process server (``process=False``), once started."""
        self.process: ServerProcess | None = None
        """The child process (``process=True``), once started."""
        self._process_mode = process
        self._clients: list[Client] = []
        self._helpers: dict[str, Client] = {}

    # ------------------------------------------------------------------ configuration

    def _load(self, source: ConfigSource) -> ServerConfig:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if source is None:
            self._default = True
            return default_config(tcp_port=0, ws_port=0, data_dir=self.data_dir, name=self.name)
        self._default = False
        if isinstance(source, ServerConfig):
            return _to_loopback(source)
        if isinstance(source, str) and source.lstrip().startswith("<"):
            self._xml = source
        else:
            file = Path(source)
            try:
                self._xml = file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot read configuration file {file}: {exc}") from exc
        # relative paths (journal, SOW files) land in the data directory, not beside the file
        config = parse_config(self._xml, base_dir=self.data_dir)
        if config.name == DEFAULT_SERVER_NAME:
            config = dataclasses.replace(config, name=self.name)
        self.name = config.name
        return _to_loopback(config)

    def _check_types(self, wanted: Sequence[str] | None) -> tuple[str, ...]:
        listeners = [t for t in self.config.transports if t.type in _CLIENT_KINDS]
        if not listeners:
            raise ConfigError("the configuration has no client transport (tcp, tcps, ws, wss)")
        if isinstance(wanted, str):
            raise TypeError("message_types is a list of names, e.g. ['json']")
        if wanted is None:
            return tuple(dict.fromkeys(t.message_type or "json" for t in listeners))
        types = tuple(dict.fromkeys(m.lower() for m in wanted))
        if not types:
            raise ValueError("message_types is empty")
        for mt in types:
            if not any(t.message_type in (None, mt) for t in listeners):
                raise ConfigError(f"no transport of the configuration accepts message type {mt!r}")
        return types

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> AmpsServer:
        """Start the server and return once it listens."""
        if self._process_mode:
            if self.process is None:
                self.process = self._new_process()
            self.process.start(timeout)
        elif self.thread is None:
            thread = ServerThread(self.config, fsync=self.fsync, record_all_topics=self._default)
            thread.start(timeout)
            self.thread = thread
        return self

    def _new_process(self) -> ServerProcess:
        config_file: Path | None = None
        if self._xml is not None:
            config_file = self.data_dir / "config.xml"
            config_file.write_text(self._xml, encoding="utf-8")
        elif not self._default:
            raise ConfigError(
                "process=True needs the configuration as XML text or a file, "
                "not a ServerConfig object"
            )
        self._check_process_listeners()
        extra = ["--fsync", self.fsync]
        if self.config.admin is not None:
            extra += ["--admin-port", "127.0.0.1:0"]
        return ServerProcess(
            data_dir=self.data_dir,
            name=self.name,
            config=config_file,
            extra_args=extra,
            die_with_parent=True,
        )

    def _check_process_listeners(self) -> None:
        """The child moves its first ``tcp`` and first WebSocket transport to free loopback
        ports (``--tcp-port``/``--ws-port``) and no other: refuse a configuration with more,
        which would listen on the file's fixed ports."""
        tcp = [t for t in self.config.transports if t.type == "tcp" and not t.is_websocket]
        ws = [
            t
            for t in self.config.transports
            if t.type == "ws" or (t.type == "tcp" and t.is_websocket)
        ]
        tls = [t.name for t in self.config.transports if t.type in ("tcps", "wss")]
        if len(tcp) > 1 or len(ws) > 1 or tls:
            raise ConfigError(
                "process=True runs a configuration with at most one tcp and one ws transport "
                "and no tcps/wss (the child moves those two to free ports, not others: "
                f"{[t.name for t in self.config.transports if t.type in _CLIENT_KINDS]}); "
                "run this one in this process (process=False)"
            )

    def stop(self) -> None:
        """Close the clients it handed out, stop the server, remove a temporary data
        directory (idempotent)."""
        for client in [*self._clients, *self._helpers.values()]:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        self._helpers.clear()
        if self.thread is not None:
            self.thread.stop()
            self.thread = None
        if self.process is not None:
            self.process.stop()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def kill(self) -> None:
        """``kill -9`` the server (``process=True`` only); :meth:`restart` brings it back.
        The clients of :meth:`client` see the connection drop; those of :meth:`publish` and
        :meth:`sow` are replaced on next use."""
        process = self._require_process()
        self._drop_helpers()
        process.kill()

    def restart(self, timeout: float = 30.0) -> AmpsServer:
        """``kill -9`` and start again on the same ports and data directory
        (``process=True`` only)."""
        process = self._require_process()
        self._drop_helpers()
        process.kill()
        process.start(timeout)
        return self

    def _drop_helpers(self) -> None:
        helpers = list(self._helpers.values())
        self._helpers.clear()
        for client in helpers:
            with contextlib.suppress(Exception):
                client.close()

    def _require_process(self) -> ServerProcess:
        if self.process is None:
            raise RuntimeError("kill() and restart() need AmpsServer(process=True), started")
        return self.process

    @property
    def running(self) -> bool:
        """``True`` while the server runs."""
        if self.process is not None:
            return self.process.running
        return self.thread is not None

    def log_lines(self) -> list[str]:
        """The child process's log (``process=True``; in process, the server logs to the
        ``ampsclient_server_stub`` logger, which pytest captures)."""
        return list(self.process.stderr_lines) if self.process is not None else []

    def __enter__(self) -> AmpsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ addresses

    def _ports(self) -> list[tuple[TransportConfig, int]]:
        if self.thread is not None:
            return self.thread.server.listener_ports()
        if self.process is not None:
            # the child moves its first tcp and first ws transport to the harness's ports
            out: list[tuple[TransportConfig, int]] = []
            seen: set[str] = set()
            for t in self.config.transports:
                if t.type not in _CLIENT_KINDS:
                    continue
                base = "ws" if t.is_websocket else "tcp"
                if base in seen:
                    continue
                seen.add(base)
                port = self.process.ws_port if base == "ws" else self.process.tcp_port
                out.append((t, port))
            return out
        raise RuntimeError("the server is not started")

    def uri(
        self, kind: Literal["tcp", "tcps", "ws", "wss"] = "tcp", message_type: str | None = None
    ) -> str:
        """``tcp://127.0.0.1:PORT/amps/json``: the URI of the first ``kind`` listener that
        accepts ``message_type`` (default: the first of :attr:`message_types`).

        Raises:
            ValueError: no such listener.
        """
        mt = (message_type or self.message_types[0]).lower()
        for transport, port in self._ports():
            if _kind(transport) == kind and transport.message_type in (None, mt):
                return f"{kind}://127.0.0.1:{port}/amps/{mt}"
        raise ValueError(f"no {kind} listener of {self.name} accepts message type {mt!r}")

    @property
    def tcp(self) -> str:
        """The TCP URI for the default message type."""
        return self.uri("tcp")

    @property
    def ws(self) -> str:
        """The WebSocket URI for the default message type."""
        return self.uri("ws")

    @property
    def uris(self) -> dict[str, str]:
        """``{message type: tcp URI}`` for every one of :attr:`message_types`."""
        return {mt: self.uri("tcp", mt) for mt in self.message_types}

    @property
    def ws_uris(self) -> dict[str, str]:
        """``{message type: ws URI}`` for every one of :attr:`message_types`."""
        return {mt: self.uri("ws", mt) for mt in self.message_types}

    def port(self, kind: Literal["tcp", "tcps", "ws", "wss"] = "tcp") -> int:
        """The port of the first ``kind`` listener (e.g. for a fault proxy in front).

        Raises:
            ValueError: the server has no such listener.
        """
        for transport, port in self._ports():
            if _kind(transport) == kind:
                return port
        raise ValueError(f"{self.name} has no {kind} listener")

    # ------------------------------------------------------------------ clients

    def client(
        self,
        name: str | None = None,
        *,
        message_type: str | None = None,
        kind: Literal["tcp", "tcps", "ws", "wss"] = "tcp",
        timeout: int = 10_000,
    ) -> Client:
        """An ``ampsclient.Client`` connected and logged on; closed by :meth:`stop`."""
        client = Client(name or f"{self.name}-client-{next(_names)}")
        self._clients.append(client)
        client.connect(self.uri(kind, message_type))
        client.logon(timeout)
        return client

    def _helper(self, message_type: str | None) -> Client:
        mt = (message_type or self.message_types[0]).lower()
        helper = self._helpers.get(mt)
        if helper is None:
            helper = Client(f"{self.name}-helper-{mt}-{next(_names)}")
            helper.connect(self.uri("tcp", mt))
            helper.logon(10_000)
            self._helpers[mt] = helper
        return helper

    def publish(self, topic: str, data: str | bytes, *, message_type: str | None = None) -> None:
        """Publish ``data`` to ``topic`` and wait until the server has processed it."""
        helper = self._helper(message_type)
        helper.publish(topic, data)
        helper.flush(10_000)

    def publish_many(
        self, topic: str, items: Iterable[str | bytes], *, message_type: str | None = None
    ) -> None:
        """Publish each of ``items`` to ``topic``, then wait until all are processed."""
        helper = self._helper(message_type)
        for data in items:
            helper.publish(topic, data)
        helper.flush(10_000)

    def sow(
        self,
        topic: str,
        filter: str | None = None,
        *,
        message_type: str | None = None,
        timeout: int = 10_000,
    ) -> list[str]:
        """The bodies a SOW query of ``topic`` (with ``filter``) returns, in its order."""
        helper = self._helper(message_type)
        return [
            m.get_data()
            for m in helper.sow(topic, filter, timeout=timeout)
            if m is not None and m.get_command() == "sow"
        ]
