"""The reference server: a :class:`Broker` behind TCP and WebSocket listeners.

:class:`ReferenceServer` runs on the caller's event loop (``async with``); :class:`ServerThread`
runs one on its own loop in a background thread, for tests, the demo and synchronous code::

    with ServerThread() as server:          # port 0: free ports are picked
        client.connect(server.uri("tcp"))   # tcp://127.0.0.1:<port>/amps/json
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from websockets.asyncio.server import Server as WsServer

from ampsclient_server_stub.config import (
    ConfigError,
    ServerConfig,
    TransportConfig,
    default_config,
)
from ampsclient_server_stub.engine.broker import Authenticator, Broker
from ampsclient_server_stub.engine.hooks import BrokerHooks
from ampsclient_server_stub.engine.journal import FsyncPolicy, Journal
from ampsclient_server_stub.engine.storage_faults import StorageFaults
from ampsclient_server_stub.engine.txlog import PERSISTED_ACK_INTERVAL, TxLog
from ampsclient_server_stub.queues.plug import start_queues

from .admin.server import AdminServer
from .journal_actions import JournalActionRunner, journal_actions, open_journal
from .net.compressed import ZlibTcpSession
from .net.flow import FlowControl
from .net.session import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_WRITE_BUFFER
from .net.tcp import start_tcp_listener
from .net.unix import UnixListener, start_unix_listener
from .net.ws import start_ws_listener
from .replication.manager import ReplicationManager, start_replication
from .replication.plug import ReplicationPlug, replication_wanted
from .security.policy import ServerSecurity

__all__ = ["ReferenceServer", "ServerThread", "run_server"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

_EXPIRATION_INTERVAL = 1.0
"""Seconds between SOW expiration sweeps (and SOW recovery checkpoints)."""

INTERVAL_SYNC: float = 0.005
"""With ``fsync="interval"``, seconds between group commits."""


class Committer:
    """Group commit: one ``journal.sync()`` at a time in a worker thread.

    Requests arriving while a sync runs are covered by the next one, so one fsync serves every
    record appended meanwhile; when a sync returns, :meth:`Broker.on_durable` releases the
    persisted acks and bookmark deliveries it made safe. With the ``never`` policy there is
    nothing to wait for: the commit writes the buffer out on the loop
    (:meth:`Journal.write_through`) and ``on_durable`` runs at the loop's next turn, unless
    the journal has sealing or preallocation to do, which the thread does.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        journal: Journal,
        on_durable: Callable[[int], None],
        policy: str,
    ) -> None:
        self.loop = loop
        self.journal = journal
        self.on_durable = on_durable
        """``Broker.on_durable``: called with the durable index after each sync."""
        self.policy = policy
        self.interval = INTERVAL_SYNC
        """With ``interval``: seconds between group commits (``<FlushInterval>``)."""
        self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal")
        self.running = False
        self.again = False
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False
        self._announcing = False
        """An ``on_durable`` of a commit made on the loop is scheduled."""
        self.faults = StorageFaults()
        """Where a failing sync is reported (once while it fails; the broker's)."""

    def request(self) -> None:
        """Ask for a commit of everything appended so far."""
        if self.closed:
            return
        if self.running:
            self.again = True
            return
        if self.policy == "interval":
            if self.timer is None:
                self.timer = self.loop.call_later(self.interval, self._start)
            return
        if self.policy == "never" and self.journal.write_through() is not None:
            if not self._announcing:
                self._announcing = True
                self.loop.call_soon(self._announce)
            return
        self._start()

    def _announce(self) -> None:
        self._announcing = False
        if not self.closed:
            self.on_durable(self.journal.durable_index)

    def _start(self) -> None:
        self.timer = None
        if self.running or self.closed:
            return
        self.running = True
        self.again = False
        future = self.loop.run_in_executor(self.executor, self.journal.sync)
        future.add_done_callback(self._done)

    def _done(self, future: asyncio.Future[int]) -> None:
        self.running = False
        try:
            durable = future.result()
        except Exception as exc:
            fresh = "journal" not in self.faults.active
            self.faults.failed("journal", str(self.journal.directory), exc)
            if fresh:  # once while it lasts (a full disk retries every 0.1 s)
                logger.error(
                    "journal sync failed; no persisted acks until it works again",
                    exc_info=None if self.faults.active["journal"].disk_full else exc,
                )
            if not self.closed:
                self.loop.call_later(0.1, self.request)
            return
        if self.faults.active:
            self.faults.succeeded("journal")
        self.on_durable(durable)
        if self.again:
            # requested while this one ran. Records appended without a request (a queue
            # acknowledgement's) are not chased: their appender asks for the commit when it
            # wants one, and a commit chained after every such append kept the journal thread
            # busy, contending for the GIL with the event loop
            self.request()

    def close(self) -> None:
        """Stop committing (the journal's close does the final sync)."""
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        self.executor.shutdown(wait=True)


def _client_host(host: str) -> str:
    """A host a local client can dial for a listening address."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def _check_history(config: ServerConfig, txlog: TxLog | None) -> None:
    """A SOW topic with ``<History>`` must be recorded: its history is rebuilt from the log."""
    for sow in config.sow_topics:
        if sow.history_window is None:
            continue
        if txlog is None or not txlog.records(sow.message_type, sow.topic):
            raise ConfigError(
                f"SOW topic {sow.topic!r} has <History>, so the <TransactionLog> must record it "
                "(historical queries are answered from the transaction log)"
            )


class ReferenceServer:
    """An AMPS-compatible server on the running event loop.

    Args:
        config: transports and SOW topics; default :func:`default_config` with ports 0.
        max_frame_size: largest inbound payload; a larger one closes that connection.
        max_write_buffer: bytes queued towards one client before it is offlined to disk (or
            its share of the resource pool, if lower; slow-client management is always on).
        authenticate: ``(user_id, password) -> bool`` logon hook (default: allow all).
        fsync: journal durability (``always``, ``interval``, ``never``).
        record_all_topics: without a ``<TransactionLog>`` in the config, record every topic.
        persisted_ack_interval: seconds between the periodic persisted acks to bookmark
            subscriptions that were delivered something since their last one (``0``: none).
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
        authenticate: Authenticator | None = None,
        fsync: FsyncPolicy = "always",
        record_all_topics: bool = True,
        persisted_ack_interval: float = PERSISTED_ACK_INTERVAL,
    ) -> None:
        self.config = config if config is not None else default_config(tcp_port=0, ws_port=0)
        self.fsync: FsyncPolicy = fsync
        """Journal durability: ``always`` (group-committed fsync before persisted acks),
        ``interval`` (fsync every few ms), ``never`` (the OS decides; survives kill -9)."""
        self.record_all_topics = record_all_topics
        """Without a ``<TransactionLog>`` in the config, record every topic (zero config)."""
        self.persisted_ack_interval = persisted_ack_interval
        """Seconds between persisted acks to bookmark subscriptions."""
        self.journal: Journal | None = None
        self._committer: Committer | None = None
        self._tempdir: Any = None
        self.max_frame_size = max_frame_size
        self.max_write_buffer = max_write_buffer
        self.authenticate = authenticate
        self.broker: Broker | None = None
        self.security: ServerSecurity | None = None
        """TLS, authentication, entitlements, slow-client limits (``security`` package)."""
        self.flow: FlowControl | None = None
        """The running resource pools: slow-client offlining (``net.flow``)."""
        self._tcp: list[tuple[TransportConfig, asyncio.Server]] = []
        self._ws: list[tuple[TransportConfig, WsServer]] = []
        self._unix: list[tuple[TransportConfig, UnixListener]] = []
        self._expiry: asyncio.Task[None] | None = None
        self._started = False
        self.replication: ReplicationManager | None = None
        self.admin: AdminServer | None = None
        self.journal_actions: JournalActionRunner | None = None
        """The scheduled journal actions (``<Actions>``; ``journal_actions`` module), running."""
        """The admin interface (``<Admin>`` or ``--admin-port``; ``admin`` package), running."""
        """Replication and HA (``replication`` package), when configured."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the SOW topics and bind every listener."""
        if self._started:
            return
        loop = asyncio.get_running_loop()
        security = ServerSecurity.from_config(self.config)  # before anything is opened
        txlog = self._open_txlog()
        try:
            _check_history(self.config, txlog)
        except ConfigError:
            if self.journal is not None:
                self.journal.close()
                self.journal = None
            raise
        # replication's limits go into the hooks now: they are frozen once the broker is built
        plug = ReplicationPlug() if replication_wanted(self.config) else None
        hooks = BrokerHooks(
            authenticate=self.authenticate,
            guard=security.guard,
            ack_limit=plug.ack_limit if plug is not None else None,
            fully_durable_limit=plug.fully_durable_limit if plug is not None else None,
        )
        if txlog is not None:
            self._committer = self._make_committer(loop, txlog.journal)
            hooks.request_sync = self._committer.request
        self.broker = Broker(
            self.config,
            call_later=loop.call_later,
            txlog=txlog,
            persisted_ack_interval=self.persisted_ack_interval,
            hooks=hooks,
            queues=start_queues,
        )
        if self._committer is not None:
            self._committer.faults = self.broker.storage_faults
        self.security = security
        self._started = True
        try:
            self.flow = FlowControl()
            await self._start_listeners(self.broker, self.security, self.flow)
            self.replication = await start_replication(
                self.config,
                self.broker,
                record_all_topics=self.record_all_topics,
                security=self.security,
                plug=plug,
            )
            if self.journal_actions is not None:
                # after replication restored its holds: a removal never runs before the
                # files an unacknowledged destination needs are pinned again
                self.journal_actions.start()
            if self.config.admin is not None:
                self.admin = AdminServer.from_config(self, self.config.admin)
                await self.admin.start()
        except BaseException:
            await self.stop()
            raise
        self._expiry = asyncio.create_task(self._expire_loop())
        logger.info("%s", self.listening_line())

    async def _start_listeners(
        self, broker: Broker, security: ServerSecurity, flow: FlowControl
    ) -> None:
        """Bind a listener for every client transport of the config (tcp, tcps, ws, wss)."""
        for transport in self.config.transports:
            policy = security.policy_for(transport.name)
            tls = policy.ssl_context
            frame = policy.max_frame_size or self.max_frame_size
            if transport.protocol not in ("amps", "websocket"):
                raise ConfigError(
                    f"transport {transport.name!r}: <Protocol> {transport.protocol!r} is "
                    "not supported by the reference server (amps, websocket)"
                )
            if transport.type == "unix":
                assert transport.path is not None
                unix = await start_unix_listener(
                    broker,
                    transport.path,
                    message_type=transport.message_type,
                    max_frame_size=frame,
                    max_write_buffer=self.max_write_buffer,
                    policy=policy,
                    flow=flow,
                )
                self._unix.append((transport, unix))
            elif transport.type in ("ws", "wss") or (
                transport.type in ("tcp", "tcps") and transport.is_websocket
            ):
                ws = await start_ws_listener(
                    broker,
                    transport.host,
                    transport.port,
                    message_type=transport.message_type,
                    max_frame_size=frame,
                    max_write_buffer=self.max_write_buffer,
                    ssl_context=tls,
                    policy=policy,
                    flow=flow,
                    compression=transport.compression,
                )
                self._ws.append((transport, ws))
            elif transport.type in ("tcp", "tcps"):
                tcp = await start_tcp_listener(
                    broker,
                    transport.host,
                    transport.port,
                    message_type=transport.message_type,
                    max_frame_size=frame,
                    max_write_buffer=self.max_write_buffer,
                    ssl_context=tls,
                    policy=policy,
                    flow=flow,
                    session_class=ZlibTcpSession if transport.compression else None,
                )
                self._tcp.append((transport, tcp))
            elif transport.type != "amps-replication":  # that one: self.replication
                raise ConfigError(
                    f"transport {transport.name!r}: <Type> {transport.type!r} is not "
                    "supported by the reference server"
                )

    def _on_durable(self, durable: int) -> None:
        """The committer's callback: a group commit made ``durable`` durable."""
        if self.broker is not None:
            self.broker.on_durable(durable)

    def _make_committer(self, loop: asyncio.AbstractEventLoop, journal: Journal) -> Committer:
        committer = Committer(loop, journal, self._on_durable, self.fsync)
        txlog = self.config.transaction_log
        if txlog is not None and txlog.flush_interval:
            committer.interval = txlog.flush_interval  # <FlushInterval>: the commit period
        return committer

    def _open_txlog(self) -> TxLog | None:
        """The journal named by the config's ``<TransactionLog>`` (or the zero-config one),
        with its scheduled ``<Actions>`` (refused before anything is opened; started by
        :meth:`start` once replication has restored its holds)."""
        actions = journal_actions(self.config)
        cfg = self.config.transaction_log
        if cfg is None and not self.record_all_topics:
            return None
        if cfg is not None:
            directory = cfg.journal_directory
            size = cfg.journal_size
            topics: list[tuple[str, str | None]] | None = [
                (t.name, t.message_type) for t in cfg.topics if t.filter is None
            ]
            filters = [(t.name, t.message_type, t.filter) for t in cfg.topics if t.filter]
        else:
            if self.config.data_dir is not None:
                directory = self.config.data_dir / "journal"
            else:
                import tempfile

                self._tempdir = tempfile.TemporaryDirectory(prefix="ampsclient-journal-")
                directory = Path(self._tempdir.name)
            size = 64 * 1024 * 1024
            topics = None
            filters = []
        self.journal = open_journal(self.config, directory, journal_size=size, fsync=self.fsync)
        if actions:
            self.journal_actions = JournalActionRunner(self.journal, actions)  # started last
        logger.info(
            "transaction log at %s (%s; fsync=%s)",
            directory,
            "every topic" if topics is None else f"{len(topics)} topic rule(s)",
            self.fsync,
        )
        return TxLog(self.journal, topics, filters=filters)

    async def prune_journal(self, older_than: float) -> list[Path]:
        """Remove journal files whose newest record is older than ``older_than`` seconds.

        Files still needed by an active bookmark replay are kept (the journal's pins). Runs
        the file work in a worker thread.
        """
        journal = self.journal
        if journal is None:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, journal.prune, older_than)

    async def archive_journal(self, older_than: float) -> list[Path]:
        """Move journal files older than ``older_than`` seconds to the archive directory
        (still replayable). Raises ``JournalError`` without ``<JournalArchiveDirectory>``."""
        journal = self.journal
        if journal is None:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, journal.archive, older_than)

    async def compress_journal(self, older_than: float) -> list[Path]:
        """Compress journal files older than ``older_than`` seconds (still replayable)."""
        journal = self.journal
        if journal is None:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, journal.compress, older_than)

    async def retention_loop(self, max_age: float, every: float) -> None:
        """Prune the journal to ``max_age`` seconds every ``every`` seconds."""
        while True:
            try:
                removed = await self.prune_journal(max_age)
                if removed:
                    logger.info("journal retention removed %d file(s)", len(removed))
            except Exception:
                logger.exception("journal retention failed")
            await asyncio.sleep(every)

    async def stop(self) -> None:
        """Close the listeners and every connection, then the SOW topics."""
        if not self._started:
            return
        self._started = False
        try:  # one line for tools and benchmarks that run the server as a process
            logger.info("statistics %s", json.dumps(self.statistics(), sort_keys=True, default=str))
        except Exception:  # pragma: no cover - never let reporting stop a shutdown
            logger.exception("statistics at shutdown")
        if self.admin is not None:
            await self.admin.stop()
            self.admin = None
        if self._expiry is not None:
            self._expiry.cancel()
            try:
                await self._expiry
            except asyncio.CancelledError:
                pass
            self._expiry = None
        for _, tcp in self._tcp:
            tcp.close()
        for _, unix in self._unix:
            unix.close()
        for _, ws in self._ws:
            ws.close(close_connections=False)
        broker = self.broker
        if broker is not None:
            for conn in broker.connections:
                broker.flush_persisted(conn)
                broker.kick(conn, "server shutting down")
        for _, tcp in self._tcp:
            try:
                await asyncio.wait_for(tcp.wait_closed(), 5)
            except TimeoutError:  # pragma: no cover
                logger.warning("tcp listener did not close in time")
        for _, ws in self._ws:
            try:
                await asyncio.wait_for(asyncio.shield(ws.wait_closed()), 2)
            except TimeoutError:
                # peers that do not complete the closing handshake are cut off
                for connection in ws.connections:
                    if connection.transport is not None:
                        connection.transport.abort()
                try:
                    await asyncio.wait_for(ws.wait_closed(), 2)
                except TimeoutError:  # pragma: no cover
                    logger.warning("ws listener did not close in time")
        for _, unix in self._unix:
            try:
                await asyncio.wait_for(unix.wait_closed(), 5)
            except TimeoutError:  # pragma: no cover
                logger.warning("unix listener did not close in time")
        self._tcp.clear()
        self._ws.clear()
        self._unix.clear()
        if self.replication is not None:
            await self.replication.stop()
            self.replication = None
        if self.journal_actions is not None:
            await self.journal_actions.stop()
            self.journal_actions = None
        if self._committer is not None:
            self._committer.close()
            self._committer = None
        if self.journal is not None:
            self.journal.close()
            if broker is not None:
                broker.on_durable(self.journal.durable_index)
            self.journal = None
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None
        if broker is not None:
            broker.close()
        if self.flow is not None:
            self.flow.close()
        if self.security is not None:
            self.security.close()
        logger.info("server stopped")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(_EXPIRATION_INTERVAL)
            if self.broker is not None:
                self.broker.expire()
                self.broker.checkpoint_sows()

    # ------------------------------------------------------------------ addresses

    @staticmethod
    def _port(server: asyncio.Server | WsServer) -> int:
        sockets = server.sockets
        if not sockets:
            raise RuntimeError("listener has no socket")
        port: int = sockets[0].getsockname()[1]
        return port

    @property
    def tcp_port(self) -> int:
        """Port of the first TCP listener (the actual one when configured as 0)."""
        if not self._tcp:
            raise RuntimeError("no tcp listener is running")
        return self._port(self._tcp[0][1])

    @property
    def ws_port(self) -> int:
        """Port of the first WebSocket listener."""
        if not self._ws:
            raise RuntimeError("no ws listener is running")
        return self._port(self._ws[0][1])

    @property
    def host(self) -> str:
        """Host a local client should dial (the first listener's address)."""
        listeners = [t for t, _ in self._tcp] + [t for t, _ in self._ws]
        return _client_host(listeners[0].host) if listeners else "127.0.0.1"

    def uri(self, kind: str = "tcp", message_type: str = "json") -> str:
        """A client URI such as ``tcp://127.0.0.1:9007/amps/json`` (``kind``: tcp, ws, tcps
        or wss; ``tcp``/``ws`` pick a plain listener when there is one)."""
        listeners: list[tuple[TransportConfig, asyncio.Server | WsServer]]
        if kind in ("tcp", "tcps"):
            listeners = list(self._tcp)
        elif kind in ("ws", "wss"):
            listeners = list(self._ws)
        else:
            raise ValueError(f"kind must be 'tcp', 'ws', 'tcps' or 'wss', got {kind!r}")
        want_tls = kind in ("tcps", "wss")
        matching = [pair for pair in listeners if pair[0].is_tls == want_tls]
        if matching or want_tls:
            listeners = matching
        if not listeners:
            raise RuntimeError(f"no {kind} listener is running")
        transport, server = listeners[0]
        host = _client_host(transport.host)
        if ":" in host:
            host = f"[{host}]"
        base = "tcp" if kind in ("tcp", "tcps") else "ws"
        scheme = base + ("s" if transport.is_tls else "")
        return f"{scheme}://{host}:{self._port(server)}/amps/{message_type}"

    def unix_uri(self, message_type: str = "json") -> str:
        """``unix://localhost:0/amps/<type>?path=<socket>`` of the first unix listener."""
        if not self._unix:
            raise RuntimeError("no unix listener is running")
        return f"unix://localhost:0/amps/{message_type}?path={self._unix[0][1].path}"

    def listener_ports(self) -> list[tuple[TransportConfig, int]]:
        """``(transport, bound port)`` of every client listener: the tcp ones, then the ws
        ones, each in configuration order (a port 0 in the config shows the one picked)."""
        tcp = [(t, self._port(s)) for t, s in self._tcp]
        return tcp + [(t, self._port(s)) for t, s in self._ws]

    def listening_line(self) -> str:
        """``listening tcp://HOST:PORT ws://HOST:PORT`` for every listener."""
        parts = [f"tcp{'s' if t.is_tls else ''}://{t.host}:{self._port(s)}" for t, s in self._tcp]
        parts += [f"ws{'s' if t.is_tls else ''}://{t.host}:{self._port(s)}" for t, s in self._ws]
        parts += [f"unix://{u.path}" for _, u in self._unix]
        return "listening " + " ".join(parts)

    def replication_admin(self, cmd: str, **args: Any) -> Any:
        """Run a replication admin command on this instance (call on the server's loop):
        ``status``, ``downgrade``/``upgrade`` (``destination=``), ``partition``/``heal``
        (``peer=``), ``journal``. See :meth:`ReplicationManager.admin`."""
        if self.replication is None:
            raise RuntimeError("replication is not configured on this instance")
        return self.replication.admin(cmd, **args)

    def downgrade_replication(self, destination: str) -> bool:
        """Downgrade a sync replication destination to async acknowledgment by hand."""
        return bool(self.replication_admin("downgrade", destination=destination))

    def upgrade_replication(self, destination: str) -> bool:
        """Upgrade a downgraded replication destination back to sync acknowledgment."""
        return bool(self.replication_admin("upgrade", destination=destination))

    def statistics(self) -> dict[str, int]:
        """Broker counters (connections, publishes, heartbeats_sent, ...) and security ones
        (connections refused, slow clients offlined/disconnected, auth failures...)."""
        stats = self.broker.statistics() if self.broker is not None else {}
        journal = self.journal
        if journal is not None and not journal.closed:
            # group commit figures: fsyncs per 100k appends tells how well commits are shared
            counters = journal.counters()
            stats.update({f"journal_{name}": value for name, value in counters.items()})
        if self.flow is not None:
            stats.update(self.flow.statistics())
        if self.security is not None:
            stats.update(self.security.statistics())
            if self.security.guard is not None:
                stats.update(self.security.guard.counters)
        return stats


async def run_server(
    config: ServerConfig | None = None,
    *,
    stop: asyncio.Event | None = None,
    ready: Callable[[ReferenceServer], None] | None = None,
    **kwargs: Any,
) -> None:
    """Run a :class:`ReferenceServer` until ``stop`` is set (or the task is cancelled).

    Args:
        config: server configuration (default: :func:`default_config` with ports 0).
        stop: event that ends the server; ``None`` runs until cancelled.
        ready: called with the server once every listener is bound.
        **kwargs: passed to :class:`ReferenceServer`.
    """
    server = ReferenceServer(config, **kwargs)
    await server.start()
    try:
        if ready is not None:
            ready(server)
        if stop is None:
            await asyncio.Event().wait()
        else:
            await stop.wait()
    finally:
        await server.stop()


class ServerThread:
    """A :class:`ReferenceServer` on its own event loop in a daemon thread.

    ``start()`` returns once the ports are bound (and raises what startup raised); ``stop()``
    shuts the server down and joins the thread. Usable as a context manager.
    """

    def __init__(self, config: ServerConfig | None = None, **kwargs: Any) -> None:
        self.server = ReferenceServer(config, **kwargs)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopping: asyncio.Event | None = None

    def start(self, timeout: float = 30.0) -> Self:
        """Start the thread and wait until the server listens."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name="ampsclient-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("reference server did not start in time")
        if self._error is not None:
            self._thread.join(timeout)
            raise self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            self._stopping = asyncio.Event()
            loop.run_until_complete(self.server.start())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_until_complete(self._stopping.wait())
            loop.run_until_complete(self.server.stop())
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
        except Exception:  # pragma: no cover - logged, thread ends
            logger.exception("reference server thread failed")
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and join the thread (idempotent)."""
        thread = self._thread
        if thread is None:
            return
        loop, stopping = self.loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # loop closed meanwhile
                pass
        thread.join(timeout)
        if thread.is_alive():  # pragma: no cover
            logger.warning("reference server thread did not stop in %s s", timeout)
        self._thread = None

    def call(self, fn: Callable[[], _T], timeout: float = 10.0) -> _T:
        """Run ``fn()`` on the server's loop thread and return its result (thread-safe)."""
        loop = self.loop
        if loop is None:
            raise RuntimeError("server thread is not running")
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float = 30.0) -> _T:
        """Run a coroutine on the server's loop and wait for its result (thread-safe), e.g.
        ``thread.run(thread.server.prune_journal(3600))``."""
        loop = self.loop
        if loop is None:
            coro.close()
            raise RuntimeError("server thread is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    @property
    def broker(self) -> Broker:
        """The running broker (touch it only through :meth:`call` while running)."""
        if self.server.broker is None:
            raise RuntimeError("server not started")
        return self.server.broker

    @property
    def tcp_port(self) -> int:
        """Bound TCP port."""
        return self.server.tcp_port

    @property
    def ws_port(self) -> int:
        """Bound WebSocket port."""
        return self.server.ws_port

    def uri(self, kind: str = "tcp", message_type: str = "json") -> str:
        """Client URI, see :meth:`ReferenceServer.uri`."""
        return self.server.uri(kind, message_type)

    def unix_uri(self, message_type: str = "json") -> str:
        """``unix://`` URI of the first unix transport, see :meth:`ReferenceServer.unix_uri`."""
        return self.server.unix_uri(message_type)

    def statistics(self) -> dict[str, int]:
        """Broker counters, read on the loop thread."""
        return self.call(self.server.statistics)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
