"""A replicated cluster of reference servers, each a separate process on loopback.

For tests, examples and benchmarks of replication and failover::

    from ampsclient_server_stub.cluster import Cluster

    with Cluster(tmp_path) as cluster:
        a = cluster.add("A", group="NYC")
        b = cluster.add("B", group="NYC")
        cluster.replicate(a, b, sync=True)      # A -> B, sync acknowledgment
        cluster.replicate(b, a, sync=True)      # B -> A
        cluster.start()                          # writes the XML configs, starts both
        cluster.wait_streaming()                 # every link up and resynced
        ...                                      # clients use a.uri(), b.uri()
        a.kill()                                 # kill -9
        a.start()                                # same ports, same data directory
        cluster.partition(a, b)                  # drop the A-B link (both refuse it)
        cluster.heal(a, b)

Each node gets free ports (client TCP, WebSocket, amps-replication) at :meth:`Cluster.add`,
kept across restarts, and an AMPS-style XML configuration written to
``<base>/<name>/config.xml`` (see :meth:`Cluster.config_xml`); the journal lives in
``<base>/<name>/journal``. Links authenticate with a shared secret generated per cluster.
Partitions use the replication admin commands (``partition``/``heal``) over the nodes'
replication ports.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from xml.sax.saxutils import escape

from .engine.journal import Journal, JournalRecord
from .harness import ServerProcess, free_port
from .replication.admin import AdminError, admin_call

__all__ = ["Cluster", "ClusterNode", "Destination", "DowngradePolicy", "TopicRule"]


@dataclass(frozen=True)
class TopicRule:
    """A ``<Destination><Topic>``."""

    name: str = ".*"
    message_type: str | None = "json"
    filter: str | None = None
    exclude_validation: tuple[str, ...] = ()


@dataclass(frozen=True)
class DowngradePolicy:
    """The downgrade/upgrade actions (seconds)."""

    age: float = 2.0
    upgrade_age: float | None = 0.5
    every: float = 0.25


@dataclass
class Destination:
    """One ``<Destination>`` of a node."""

    name: str
    targets: list[ClusterNode]
    group: str | None
    sync: bool
    topics: list[TopicRule]
    passthrough: list[str]
    passive: bool = False
    secret: str | None = None


@dataclass
class ClusterNode:
    """One instance of the cluster (a :class:`ServerProcess` once started)."""

    cluster: Cluster
    name: str
    group: str | None
    data_dir: Path
    tcp_port: int
    ws_port: int
    repl_port: int
    secret: str
    sow_topics: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    txlog_topics: list[tuple[str, str | None]] = field(default_factory=list)
    destinations: list[Destination] = field(default_factory=list)
    downgrade: DowngradePolicy | None = None
    extra_xml: str = ""
    process: ServerProcess | None = None

    # ------------------------------------------------------------------ process control

    @property
    def config_path(self) -> Path:
        return self.data_dir / "config.xml"

    @property
    def journal_dir(self) -> Path:
        return self.data_dir / "journal"

    def _process(self) -> ServerProcess:
        if self.process is None:
            self.process = ServerProcess(
                data_dir=self.data_dir,
                name=self.name,
                tcp_port=self.tcp_port,
                ws_port=self.ws_port,
                config=self.config_path,
                extra_args=["--fsync", self.cluster.fsync],
            )
        return self.process

    def start(self, timeout: float = 30.0) -> ClusterNode:
        """Start (or restart after :meth:`kill`) on the same ports and data directory."""
        self.cluster.write_config(self)
        self._process().start(timeout)
        return self

    def kill(self) -> None:
        """``kill -9``."""
        if self.process is not None:
            self.process.kill()

    def stop(self, timeout: float = 10.0) -> None:
        """Clean shutdown (SIGTERM)."""
        if self.process is not None:
            self.process.stop(timeout)

    def restart(self) -> ClusterNode:
        """``kill -9`` then start again."""
        self.kill()
        return self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def uri(self, kind: str = "tcp", message_type: str = "json") -> str:
        port = self.tcp_port if kind == "tcp" else self.ws_port
        return f"{kind}://127.0.0.1:{port}/amps/{message_type}"

    def log_lines(self) -> list[str]:
        """The server's log (stderr) of its current or last run."""
        return list(self.process.stderr_lines) if self.process is not None else []

    def wait_log(self, text: str, timeout: float = 10.0) -> str:
        """Wait for a log line containing ``text``; return it."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_lines():
                if text in line:
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no log line with {text!r} in {timeout} s")
            time.sleep(0.01)

    # ------------------------------------------------------------------ admin

    def admin(self, cmd: str, **args: Any) -> Any:
        """A replication admin command (see :func:`admin_call`)."""
        return admin_call("127.0.0.1", self.repl_port, self.secret, cmd, **args)

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.admin("status")
        return result

    def destination_status(self, name: str) -> dict[str, Any]:
        for dest in self.status()["destinations"]:
            if dest["name"] == name:
                return dict(dest)
        raise KeyError(name)

    def downgrade_destination(self, name: str) -> bool:
        return bool(self.admin("downgrade", destination=name))

    def upgrade_destination(self, name: str) -> bool:
        return bool(self.admin("upgrade", destination=name))

    def journal_records(self) -> list[JournalRecord]:
        """Every record of the node's journal, in its log order (read-only; works while the
        node runs, for what it has handed to the OS)."""
        out: list[JournalRecord] = []
        with Journal(self.journal_dir, read_only=True) as journal:
            position = journal.first_index
            while True:
                batch = journal.read(position, max_records=10_000)
                if not batch:
                    return out
                out.extend(batch)
                position = batch[-1].index + 1


class Cluster:
    """N reference-server processes replicating to each other (see the module docstring).

    Args:
        base_dir: where each node's directory is created.
        secret: the shared replication secret (default: a random one).
        fsync: the nodes' journal policy (``never`` survives kill -9 and is fast).
        txlog_topics: the ``<TransactionLog>`` topics of every node (default: every json
            topic).
        downgrade: downgrade/upgrade actions for every node (``None``: none).
        journal_size: the nodes' ``<JournalSize>`` (e.g. ``"16KB"``; ``None``: the default).
        actions: more ``<Action>`` elements (XML text) in every node's ``<Actions>``, beside
            the downgrade ones (e.g. a journal removal on a schedule).
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        secret: str | None = None,
        fsync: str = "never",
        txlog_topics: Sequence[tuple[str, str | None]] = ((".*", "json"),),
        downgrade: DowngradePolicy | None = None,
        journal_size: str | None = None,
        actions: Sequence[str] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        self.secret = secret if secret is not None else secrets.token_hex(16)
        self.fsync = fsync
        self.txlog_topics = list(txlog_topics)
        self.downgrade = downgrade
        self.journal_size = journal_size
        self.actions = list(actions)
        self.nodes: dict[str, ClusterNode] = {}

    # ------------------------------------------------------------------ topology

    def add(
        self,
        name: str,
        *,
        group: str | None = None,
        sow_topics: Iterable[tuple[str, str, tuple[str, ...]]] = (),
        secret: str | None = None,
        downgrade: DowngradePolicy | None = None,
        extra_xml: str = "",
    ) -> ClusterNode:
        """Add an instance (not started). ``sow_topics``: ``(topic, message type, keys)``."""
        if name in self.nodes:
            raise ValueError(f"node {name!r} exists")
        used = {p for n in self.nodes.values() for p in (n.tcp_port, n.ws_port, n.repl_port)}
        ports: list[int] = []
        while len(ports) < 3:
            port = free_port()
            if port not in used and port not in ports:
                ports.append(port)
        node = ClusterNode(
            cluster=self,
            name=name,
            group=group,
            data_dir=self.base_dir / name,
            tcp_port=ports[0],
            ws_port=ports[1],
            repl_port=ports[2],
            secret=secret if secret is not None else self.secret,
            sow_topics=list(sow_topics),
            txlog_topics=list(self.txlog_topics),
            downgrade=downgrade if downgrade is not None else self.downgrade,
            extra_xml=extra_xml,
        )
        self.nodes[name] = node
        return node

    def node(self, name: str) -> ClusterNode:
        return self.nodes[name]

    def replicate(
        self,
        source: ClusterNode,
        targets: ClusterNode | Sequence[ClusterNode],
        *,
        name: str | None = None,
        group: str | None = None,
        sync: bool = True,
        topics: Sequence[TopicRule] = (TopicRule(),),
        passthrough: Sequence[str] = (),
        passive: bool = False,
        secret: str | None = None,
    ) -> Destination:
        """Add a ``<Destination>`` on ``source``: ``targets`` are the prioritised failover
        addresses (all must be one group); ``passive`` leaves out the addresses (the
        destination has to connect). The destination's name defaults to the single
        target's name, or its group for a list; its group to the targets' group."""
        target_list = [targets] if isinstance(targets, ClusterNode) else list(targets)
        if not target_list:
            raise ValueError("at least one target")
        groups = {t.group or t.name for t in target_list}
        if group is None:
            group = target_list[0].group if len(groups) == 1 else None
        if name is None:
            name = target_list[0].name if len(target_list) == 1 else (group or target_list[0].name)
        dest = Destination(
            name=name,
            targets=target_list,
            group=group,
            sync=sync,
            topics=list(topics),
            passthrough=list(passthrough),
            passive=passive,
            secret=secret,
        )
        source.destinations.append(dest)
        return dest

    def hot_hot(self, a: ClusterNode, b: ClusterNode, **kwargs: Any) -> None:
        """Sync replication both ways between ``a`` and ``b``."""
        self.replicate(a, b, sync=True, **kwargs)
        self.replicate(b, a, sync=True, **kwargs)

    # ------------------------------------------------------------------ configuration

    def config_xml(self, node: ClusterNode) -> str:
        """The AMPS-style XML configuration of ``node``."""
        e = escape
        lines = ["<AMPSConfig>", f"  <Name>{e(node.name)}</Name>"]
        if node.group is not None:
            lines.append(f"  <Group>{e(node.group)}</Group>")
        lines += [
            "  <Transports>",
            "    <Transport><Name>tcp</Name><Type>tcp</Type>"
            f"<InetAddr>127.0.0.1:{node.tcp_port}</InetAddr><Protocol>amps</Protocol></Transport>",
            "    <Transport><Name>ws</Name><Type>ws</Type>"
            f"<InetAddr>127.0.0.1:{node.ws_port}</InetAddr></Transport>",
            "    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>"
            f"<InetAddr>127.0.0.1:{node.repl_port}</InetAddr>"
            f"<Secret>{e(node.secret)}</Secret></Transport>",
            "  </Transports>",
            "  <TransactionLog>",
            "    <JournalDirectory>journal</JournalDirectory>",
        ]
        if self.journal_size is not None:
            lines.append(f"    <JournalSize>{e(self.journal_size)}</JournalSize>")
        for topic, mt in node.txlog_topics:
            mt_xml = f"<MessageType>{e(mt)}</MessageType>" if mt else ""
            lines.append(f"    <Topic><Name>{e(topic)}</Name>{mt_xml}</Topic>")
        lines.append("  </TransactionLog>")
        if node.sow_topics:
            lines.append("  <SOW>")
            for topic, mt, keys in node.sow_topics:
                key_xml = "".join(f"<Key>{e(k)}</Key>" for k in keys)
                lines.append(
                    f"    <Topic><Name>{e(topic)}</Name><MessageType>{e(mt)}</MessageType>"
                    f"{key_xml}</Topic>"
                )
            lines.append("  </SOW>")
        if node.destinations:
            lines.append("  <Replication>")
            for dest in node.destinations:
                lines += _destination_xml(dest)
            lines.append("  </Replication>")
        downgrade = node.downgrade if node.destinations else None
        if downgrade is not None or self.actions:
            lines.append("  <Actions>")
            if downgrade is not None:
                lines += _downgrade_actions_xml(downgrade)
            lines += [f"    {action.strip()}" for action in self.actions]
            lines.append("  </Actions>")
        if node.extra_xml:
            lines.append(node.extra_xml)
        lines.append("</AMPSConfig>")
        return "\n".join(lines) + "\n"

    def write_config(self, node: ClusterNode) -> Path:
        node.data_dir.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text(self.config_xml(node))
        return node.config_path

    # ------------------------------------------------------------------ lifecycle

    def start(self, *names: str, timeout: float = 30.0) -> None:
        """Start the given nodes (default: all), in parallel."""
        nodes = [self.nodes[n] for n in names] if names else list(self.nodes.values())
        errors: list[BaseException] = []

        def run(node: ClusterNode) -> None:
            try:
                node.start(timeout)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 5)
        if errors:
            raise errors[0]

    def stop(self) -> None:
        """Stop every node (clean shutdown, kill -9 when it hangs)."""
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.stop()

    def kill(self, node: ClusterNode) -> None:
        node.kill()

    def partition(self, a: ClusterNode, b: ClusterNode) -> None:
        """Cut the replication link between ``a`` and ``b`` (both refuse it) until
        :meth:`heal`. Nodes that are not running are skipped."""
        for x, y in ((a, b), (b, a)):
            if x.running:
                x.admin("partition", peer=y.name)

    def heal(self, a: ClusterNode, b: ClusterNode) -> None:
        for x, y in ((a, b), (b, a)):
            if x.running:
                x.admin("heal", peer=y.name)

    def wait_until(
        self, condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition"
    ) -> None:
        """Poll ``condition`` (admin errors while a node starts count as False)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except (AdminError, OSError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"cluster: timed out after {timeout} s waiting for {what}")
            time.sleep(0.02)

    def streaming(self, node: ClusterNode) -> bool:
        """Every destination of ``node`` with a running target is connected and resynced."""
        status = node.status()
        by_name = {d["name"]: d for d in status["destinations"]}
        partitioned = set(status["partitioned"])
        for dest in node.destinations:
            if not any(t.running and t.name not in partitioned for t in dest.targets):
                continue
            if by_name[dest.name]["state"] != "streaming":
                return False
        return True

    def wait_streaming(self, timeout: float = 20.0) -> None:
        """Wait until every running node's reachable destinations are streaming."""
        self.wait_until(
            lambda: all(self.streaming(n) for n in self.nodes.values() if n.running),
            timeout,
            "every replication link up",
        )

    def caught_up(self, node: ClusterNode) -> bool:
        """Nothing in flight or waiting for any streaming destination of ``node``."""
        status = node.status()
        journal = status["journal"]
        for dest in status["destinations"]:
            if dest["state"] != "streaming":
                continue
            if dest["in_flight"] or dest["scan_position"] <= journal["durable_index"]:
                return False
        return bool(journal["durable_index"] >= journal["last_index"])

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Wait until every running node has pushed and had acknowledged everything."""
        self.wait_until(
            lambda: all(self.caught_up(n) for n in self.nodes.values() if n.running),
            timeout,
            "replication to catch up",
        )

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _destination_xml(dest: Destination) -> list[str]:
    """The ``<Destination>`` element of ``dest``, one line per list item."""
    e = escape
    lines = ["    <Destination>", f"      <Name>{e(dest.name)}</Name>"]
    if dest.group is not None:
        lines.append(f"      <Group>{e(dest.group)}</Group>")
    lines.append(f"      <SyncType>{'sync' if dest.sync else 'async'}</SyncType>")
    for rule in dest.topics:
        parts = [f"<Name>{e(rule.name)}</Name>"]
        if rule.message_type:
            parts.append(f"<MessageType>{e(rule.message_type)}</MessageType>")
        if rule.filter:
            parts.append(f"<Filter>{e(rule.filter)}</Filter>")
        if rule.exclude_validation:
            excl = ",".join(rule.exclude_validation)
            parts.append(f"<ExcludeValidation>{e(excl)}</ExcludeValidation>")
        lines.append(f"      <Topic>{''.join(parts)}</Topic>")
    for regex in dest.passthrough:
        lines.append(f"      <PassThrough>{e(regex)}</PassThrough>")
    lines.append("      <Transport><Type>amps-replication</Type>")
    if not dest.passive:
        addrs = ",".join(f"127.0.0.1:{t.repl_port}" for t in dest.targets)
        lines.append(f"        <InetAddr>{addrs}</InetAddr>")
    if dest.secret is not None:
        lines.append(f"        <Secret>{e(dest.secret)}</Secret>")
    lines += ["      </Transport>", "    </Destination>"]
    return lines


def _downgrade_actions_xml(policy: DowngradePolicy) -> list[str]:
    """The ``<Action>`` that downgrades (and upgrades) replication on a schedule."""
    lines = [
        "    <Action>",
        "      <On><Module>amps-action-on-schedule</Module>"
        f"<Options><Every>{policy.every}s</Every></Options></On>",
        "      <Do><Module>amps-action-do-downgrade-replication</Module>"
        f"<Options><Age>{policy.age}s</Age></Options></Do>",
    ]
    if policy.upgrade_age is not None:
        lines.append(
            "      <Do><Module>amps-action-do-upgrade-replication</Module>"
            f"<Options><Age>{policy.upgrade_age}s</Age></Options></Do>"
        )
    return [*lines, "    </Action>"]
