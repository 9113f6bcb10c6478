"""The replication manager of one instance: listener, links, streams, acks, downgrades, admin.

Created by :class:`~ampsclient_server_stub.server.ReferenceServer` when its configuration
has an ``amps-replication`` transport or a ``<Replication>`` section. Everything runs on the
server's event loop. It plugs into the broker through three hooks:

* ``broker.hooks.ack_limit`` -- a publisher's persisted ack waits until every destination whose
  acknowledgment is sync (configured sync and not downgraded) has acknowledged;
* ``broker.hooks.fully_durable_limit`` -- the same limit for ``fully_durable`` bookmark replays;
  (these two are a :class:`~.plug.ReplicationPlug`'s, given to the hooks when the broker was
  built: the manager attaches to the plug when it starts, detaches when it stops);
* ``broker.hooks.durable_listeners`` -- after each group commit: push newly durable records to
  destinations, acknowledge upstream what became durable here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Final

from ampsclient.authenticator import Authenticator
from ampsclient_server_stub.config import (
    ConfigError,
    DestinationConfig,
    ReplicationActionConfig,
    ServerConfig,
    TransportConfig,
)
from ampsclient_server_stub.engine.broker import Broker
from ampsclient_server_stub.engine.journal import Journal
from ampsclient_server_stub.queues.plug import queue_engine
from ampsclient_server_stub.queues.replicated import REQUEST_FRAME, ManagerPort
from ampsclient_server_stub.security.auth import AuthVerdict, EntitlementModule
from ampsclient_server_stub.security.policy import ServerSecurity
from ampsclient_server_stub.security.replication import (
    authenticate_link,
    instance_credentials,
    link_entitlements,
    outgoing_credentials,
)

from .holds import SAVE_DELAY, HoldFile
from .inbound import ReplicatedStoreError
from .link import Link
from .origins import IndexRuns
from .plug import ReplicationPlug, replication_wanted
from .rules import InstanceSummary, queue_config_problems, summarize, validate_destination
from .streams import Inbound, Outbound, link_label

__all__ = [
    "DIAL_BACKOFF_MAX",
    "DIAL_BACKOFF_START",
    "ReplicationManager",
    "secret_for",
    "start_replication",
]

logger = logging.getLogger("ampsclient_server_stub.replication")

DIAL_BACKOFF_START: Final = 0.05
"""Seconds to wait after the first pass over a destination's address list failed."""

DIAL_BACKOFF_MAX: Final = 2.0
"""The wait grows (doubling) after each failed pass, up to this."""

DIAL_TIMEOUT: Final = 3.0

SECRET_KEY: Final = "Secret"
"""``<Transport><Secret>`` of the amps-replication transport (incoming links) and of a
``<Destination><Transport>`` (outgoing; defaults to the transport's)."""


def secret_for(transport: TransportConfig | None, dest: DestinationConfig | None = None) -> str:
    """The shared secret a link authenticates with ('' when none is configured)."""
    if dest is not None:
        own = dest.extra.get(f"Transport/{SECRET_KEY}") or dest.extra.get(SECRET_KEY)
        if own:
            return own
    if transport is not None:
        return transport.extra.get(SECRET_KEY, "")
    return ""


def _norm_addr(addr: str) -> str:
    host, _, port = addr.rpartition(":")
    host = host.strip("[]").lower()
    if host in ("localhost", "", "0.0.0.0"):
        host = "127.0.0.1"
    return f"{host}:{port}"


class ReplicationManager:
    """Replication for one instance (see the module docstring).

    Args:
        config: the server configuration.
        broker: the running broker (it must have a transaction log).
        record_all_topics: whether an instance without ``<TransactionLog>`` records everything.
        security: the instance's security policies: the ``amps-replication`` transport's
            ``<Authentication>`` checks the logon of every link, its ``<Entitlement>`` every
            replicated record (``None``: no checks).
        plug: the plug whose limits the broker's hooks hold (:mod:`.plug`); ``None``: the
            broker was built without one, and persisted acks do not wait for destinations.

    Raises:
        SecurityConfigError: a destination's ``<Authenticator>`` cannot be used.
    """

    def __init__(
        self,
        config: ServerConfig,
        broker: Broker,
        *,
        record_all_topics: bool,
        security: ServerSecurity | None = None,
        plug: ReplicationPlug | None = None,
    ) -> None:
        if broker.txlog is None:
            raise ValueError("replication needs a transaction log")
        self.config = config
        self.broker = broker
        self.plug = plug
        """Where this manager's limits plug into the broker's hooks (:mod:`.plug`)."""
        self.journal: Journal = broker.txlog.journal
        self.loop = asyncio.get_running_loop()
        self.name = config.name
        self.group = config.effective_group
        self.summary: InstanceSummary = summarize(config, record_all_topics=record_all_topics)
        # one at most: a second one is a configuration error (config.py)
        transports = [t for t in config.transports if t.type == "amps-replication"]
        self.transport: TransportConfig | None = transports[0] if transports else None
        self.transport_name = self.transport.name if self.transport is not None else ""
        self.secret = secret_for(self.transport)
        self.security = security
        self.entitlements: EntitlementModule | None = (
            link_entitlements(security, self.transport_name) if security is not None else None
        )
        """What the links' users may replicate into this instance (``None``: everything)."""
        if config.source is not None:
            base_dir = config.source.parent
        elif config.data_dir is not None:
            base_dir = config.data_dir
        else:
            base_dir = Path.cwd()
        self._own_credentials = instance_credentials(config.extra, base_dir)
        self._credentials: dict[str, tuple[str, Authenticator]] = {
            dest.name: outgoing_credentials(dest, base_dir, instance_extra=config.extra)
            for dest in (config.replication.destinations if config.replication else ())
        }
        self._refused_topics: set[tuple[str, str]] = set()
        self.advertised_addr = ""
        self.server: asyncio.Server | None = None
        replication = config.replication
        self.destinations: tuple[DestinationConfig, ...] = (
            replication.destinations if replication is not None else ()
        )
        self.downgrade_action: ReplicationActionConfig | None = (
            replication.downgrade if replication is not None else None
        )
        self.upgrade_action: ReplicationActionConfig | None = (
            replication.upgrade if replication is not None else None
        )
        self.outbounds: dict[str, Outbound] = {}
        self.links: set[Link] = set()
        self.partitioned: set[str] = set()
        self.counters: dict[str, int] = {
            "auth_failures": 0,
            "validation_failures": 0,
            "links_up": 0,
            "downgrades": 0,
            "upgrades": 0,
        }
        self.last_problems: dict[str, list[str]] = {}
        """Validation problems last logged per peer (repeats are logged at DEBUG)."""
        self._inbound_totals: dict[tuple[str, str], dict[str, int]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rerun_scheduled = False
        self._stopping = False
        self.holds = HoldFile(
            self.journal.directory,
            self.name,
            durable=self.journal.fsync_policy != "never",
            faults=broker.storage_faults,
        )
        """The destinations' holds on the journal, kept across restarts (see ``holds.py``)."""
        self._hold_save: asyncio.TimerHandle | None = None
        self.origins: dict[str, IndexRuns] = {}
        """Per upstream instance, the runs of local journal indexes applied from it (an
        outbound stream to that instance jumps over them: see ``origins.py``)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind the listener, create the destination streams, start dialing."""
        self.holds.load()
        for dest in self.destinations:
            if not dest.topics:
                logger.warning(
                    "replication: destination %r has no <Topic>: nothing will be replicated",
                    dest.name,
                )
            hold = self.holds.restored(dest.name)
            self.outbounds[dest.name] = Outbound(self, dest, hold=hold)
            self._changed[dest.name] = asyncio.Event()
            if hold is not None and hold <= self.journal.last_index:
                logger.info(
                    "replication: destination %r holds the journal from index %d (saved by "
                    "the previous run)",
                    dest.name,
                    self.outbounds[dest.name].scan_pos,
                )
        self.save_holds()
        if self.transport is not None:
            t = self.transport
            self.server = await self.loop.create_server(
                lambda: Link(self, dialer=False, secret=self.secret),
                t.host,
                t.port,
                reuse_address=True,
            )
            port = self.server.sockets[0].getsockname()[1]
            host = t.host if t.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
            self.advertised_addr = f"{host}:{port}"
            logger.info(
                "replication: instance %r (group %r) listening amps-replication://%s",
                self.name,
                self.group,
                self.advertised_addr,
            )
        logon_checked = self.security is not None and (
            self.security.policy_for(self.transport_name).auth is not None
        )
        if self.transport is not None and not self.secret and not logon_checked:
            logger.warning(
                "replication: no shared <Secret> and no <Authentication> on transport %r: "
                "any process that reaches %s can replicate into this instance",
                self.transport_name,
                self.advertised_addr,
            )
        elif not self.secret and not all(secret_for(self.transport, d) for d in self.destinations):
            logger.warning(
                "replication: no shared <Secret> configured: the links' handshake is not "
                "authenticated with a secret%s",
                " (incoming links still log on with <Authentication>)" if logon_checked else "",
            )
        broker = self.broker
        if self.plug is not None:
            self.plug.attach(self)
        else:
            logger.warning(
                "replication: the broker was built without a replication plug: persisted "
                "acks do not wait for sync destinations"
            )
        broker.hooks.durable_listeners.append(self.on_durable)
        queues = queue_engine(broker)
        if queues is not None and queues.replica is not None:
            queues.replica.attach(ManagerPort(self), self.loop.call_later)
        for out in self.outbounds.values():
            if out.dest.inet_addrs:
                self._tasks.append(
                    asyncio.create_task(self._dial_loop(out), name=f"replication-{out.name}")
                )
        if self.downgrade_action is not None or self.upgrade_action is not None:
            self._tasks.append(asyncio.create_task(self._action_loop(), name="replication-actions"))
        for dest in self.destinations:
            logger.info(
                "replication: destination %r (%s, group %s) %s",
                dest.name,
                dest.sync_type,
                dest.group,
                "addresses " + ", ".join(str(a) for a in dest.inet_addrs)
                if dest.inet_addrs
                else "passive (waits for the destination to connect)",
            )

    async def stop(self) -> None:
        """Close the listener and every link; release journal pins."""
        self._stopping = True
        queues = queue_engine(self.broker)
        if queues is not None and queues.replica is not None:
            queues.replica.detach()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        if self.server is not None:
            self.server.close()
        for link in list(self.links):
            link.close("server shutting down")
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except TimeoutError:  # pragma: no cover
                pass
            self.server = None
        broker = self.broker
        if self.on_durable in broker.hooks.durable_listeners:
            broker.hooks.durable_listeners.remove(self.on_durable)
        if self.plug is not None:
            self.plug.detach()
        self.save_holds()
        for out in self.outbounds.values():
            out.close()

    # ------------------------------------------------------------------ broker hooks

    def ack_limit(self, durable: int) -> int:
        """Highest index a persisted ack may cover: durable here and at every sync
        destination."""
        limit = durable
        for out in self.outbounds.values():
            if out.effective_sync:
                through = out.acked_through()
                if through < limit:
                    limit = through
        return limit

    def fully_durable_limit(self) -> int:
        """Highest index a ``fully_durable`` bookmark replay may deliver."""
        return self.ack_limit(self.journal.durable_index)

    def on_durable(self, durable: int) -> None:
        """After a group commit (or a re-run): push and acknowledge."""
        for out in self.outbounds.values():
            out.pump()
        for link in list(self.links):
            for inbound in list(link.inbound.values()):
                inbound.on_durable(durable)

    def limits_changed(self) -> None:
        """An ack limit may have moved: re-run the broker's durable processing once."""
        if self._rerun_scheduled or self._stopping:
            return
        self._rerun_scheduled = True
        self.loop.call_soon(self._rerun)

    def _rerun(self) -> None:
        self._rerun_scheduled = False
        if self._stopping or self.journal.closed:
            return
        self.broker.on_durable(self.journal.durable_index)

    def hold_moved(self, *, backwards: bool) -> None:
        """A destination's journal pin moved: save the holds, at once when it moved
        backwards, else within ``SAVE_DELAY`` seconds (moves are coalesced)."""
        if backwards:
            self.save_holds()
        elif self._hold_save is None and not self._stopping:
            self._hold_save = self.loop.call_later(SAVE_DELAY, self.save_holds)

    def save_holds(self) -> None:
        """Write every destination's hold (the index its pin keeps) beside the journal."""
        if self._hold_save is not None:
            self._hold_save.cancel()
            self._hold_save = None
        self.holds.save({name: out.pin_at for name, out in self.outbounds.items()})
        if self.holds.unsaved and not self._stopping:  # a full disk: again until it is saved
            self._hold_save = self.loop.call_later(SAVE_DELAY, self.save_holds)

    def inbound_counters(self, peer: str, stream: str) -> dict[str, int]:
        """The running totals of upstream stream ``stream`` from instance ``peer``."""
        key = (peer, stream)
        counters = self._inbound_totals.get(key)
        if counters is None:
            counters = self._inbound_totals[key] = {
                "received": 0,
                "applied": 0,
                "duplicates": 0,
                "loops_refused": 0,
                "not_entitled": 0,
            }
        return counters

    # ------------------------------------------------------------------ links

    def is_partitioned(self, peer: str) -> bool:
        return peer in self.partitioned

    def check_logon(self, link: Link, user: str, password: str) -> AuthVerdict:
        """The peer of ``link`` logs on as ``user``: the transport's ``<Authentication>``."""
        if self.security is None:
            return AuthVerdict("success")
        return authenticate_link(
            self.security, self.transport_name, user, password, link.auth_state
        )

    def credentials_for(self, link: Link) -> tuple[str, Authenticator]:
        """What this instance logs on to ``link``'s peer with: the ``<Authenticator>`` of the
        destination the link serves (else the instance's)."""
        out = link.dialed_for
        if out is None:
            out = next((o for o in self.outbounds.values() if self.matches(o, link)), None)
        if out is not None:
            return self._credentials[out.name]
        return self._own_credentials

    def not_entitled(self, link: Link, topic: str, operation: str) -> None:
        """Log a record refused by the entitlements (once per peer and topic at WARNING)."""
        key = (link.peer_name, topic)
        first = key not in self._refused_topics
        if first and len(self._refused_topics) < 10_000:
            self._refused_topics.add(key)
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "replication: %s on topic %r from %r (user %r) refused: not entitled (the "
            "<Entitlement> of transport %r); not recorded",
            operation,
            topic,
            link.peer_name,
            link.peer_user,
            self.transport_name,
        )

    def matches(self, out: Outbound, link: Link) -> bool:
        """Does ``link``'s peer serve destination ``out``?"""
        dest = out.dest
        if link.dialed_for is out or dest.name == link.peer_name:
            return True
        if link.peer_addr:
            peer = _norm_addr(link.peer_addr)
            if any(_norm_addr(str(a)) == peer for a in dest.inet_addrs):
                return True
        return dest.is_passive and dest.group is not None and dest.group == link.peer_group

    def validate_peer(self, link: Link) -> list[str]:
        """Validation problems of this instance's destinations served by ``link``'s peer."""
        remote = link.peer_summary
        assert remote is not None
        problems: list[str] = []
        for out in self.outbounds.values():
            if self.matches(out, link):
                problems += validate_destination(self.summary, out.dest, remote)
        return problems

    def link_up(self, link: Link) -> None:
        if self._stopping:
            link.close("server shutting down")
            return
        if self.is_partitioned(link.peer_name):
            link.reject("partitioned by admin")
            return
        for other in list(self.links):
            if other.peer_name != link.peer_name or not other.is_up:
                continue
            # two links with the same peer (both dialed): keep the same one on both sides
            keep, drop = (other, link) if other.dialer_key <= link.dialer_key else (link, other)
            logger.info(
                "replication: two links with %r; keeping %s, closing %s",
                link.peer_name,
                keep.describe(),
                drop.describe(),
            )
            self._drop_streams(drop)
            drop.reject("duplicate link")
            if drop is link:
                self._attach_all()
                return
        self.links.add(link)
        self.counters["links_up"] += 1
        logger.info(
            "replication: link up with %r (group %r) %s",
            link.peer_name,
            link.peer_group,
            link.describe(),
        )
        self._attach_all()

    def _drop_streams(self, link: Link) -> None:
        self.links.discard(link)
        for out in list(link.outbound.values()):
            out.detach()
            self._wake(out)
        link.inbound.clear()

    def link_down(self, link: Link) -> None:
        was_up = link in self.links
        self._drop_streams(link)
        if was_up:
            logger.info("replication: link with %r closed (%s)", link.peer_name, link.close_reason)
        if not self._stopping:
            self._attach_all()

    def _attach_all(self) -> None:
        for out in self.outbounds.values():
            if out.link is not None:
                continue
            for link in self.links:
                if (
                    link.is_up
                    and link.accepted_by_peer
                    and not self.is_partitioned(link.peer_name)
                    and self.matches(out, link)
                ):
                    out.attach(link)
                    self._wake(out)
                    break

    def _wake(self, out: Outbound) -> None:
        event = self._changed.get(out.name)
        if event is not None:
            event.set()

    async def _dial_loop(self, out: Outbound) -> None:
        event = self._changed[out.name]
        backoff = DIAL_BACKOFF_START
        unreachable = False
        while not self._stopping:
            if out.attached():
                event.clear()
                if out.attached():
                    await event.wait()
                continue
            self._attach_all()
            if out.attached():
                continue
            connected = False
            errors: list[str] = []
            for addr in out.dest.inet_addrs:
                if out.attached() or self._stopping:
                    connected = out.attached()
                    break
                link = await self._dial(out, addr.host, addr.port, errors)
                if link is not None:
                    connected = True
                    break
            if connected:
                if unreachable:
                    logger.warning("replication: destination %r is reachable again", out.name)
                    unreachable = False
                backoff = DIAL_BACKOFF_START
                continue
            if errors and not unreachable and not self._stopping:
                unreachable = True  # said once per outage, not per attempt
                self._report_unreachable(out, errors)
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), backoff)
            except TimeoutError:
                pass
            backoff = min(backoff * 2, DIAL_BACKOFF_MAX)

    @staticmethod
    def _report_unreachable(out: Outbound, errors: list[str]) -> None:
        """Say once that a destination cannot be reached, and what that holds up."""
        if out.sync_configured and not out.downgraded:
            logger.warning(
                "replication: sync destination %r%s is unreachable (%s); persisted acks for the "
                "topics it replicates are held until it connects or is downgraded to async",
                out.name,
                link_label(out),
                "; ".join(errors),
            )
        else:
            logger.warning(
                "replication: destination %r%s is unreachable (%s); its records wait in the "
                "transaction log until it connects",
                out.name,
                link_label(out),
                "; ".join(errors),
            )

    async def _dial(
        self, out: Outbound, host: str, port: int, errors: list[str] | None = None
    ) -> Link | None:
        """Connect to one address of ``out``; ``None`` (and the reason in ``errors``) when it
        cannot be reached or the handshake fails."""
        secret = secret_for(self.transport, out.dest)
        addr = f"{host}:{port}"
        try:
            _transport, link = await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: Link(
                        self, dialer=True, secret=secret, dialed_for=out, dialed_addr=addr
                    ),
                    host,
                    port,
                ),
                DIAL_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            logger.debug(
                "replication: cannot reach %r%s at %s: %s", out.name, link_label(out), addr, exc
            )
            if errors is not None:
                errors.append(f"{addr}: {exc or type(exc).__name__}")
            return None
        try:
            ok = await asyncio.wait_for(asyncio.shield(link.ready), DIAL_TIMEOUT + 5)
        except TimeoutError:
            ok = False
        if not ok:
            link.close("handshake failed")
            return None
        return link

    # ------------------------------------------------------------------ frames

    def on_frame(self, link: Link, c: Any, header: dict[str, Any], body: Any) -> None:
        d = str(header.get("d", ""))
        if c == "rrec":
            inbound = link.inbound.get(d)
            if inbound is None:
                logger.warning(
                    "replication: records for unknown stream %r from %s", d, link.describe()
                )
                return
            try:
                inbound.on_records(inbound.decode(header, body))
            except ReplicatedStoreError as exc:  # the journal's condition is reported once
                logger.debug("replication: %s", exc)
                link.close("cannot store replicated records")
        elif c == "rack":
            out = link.outbound.get(d)
            u = header.get("u")
            if out is not None and isinstance(u, int):
                out.on_ack(u)
        elif c == "ropen":
            if link.peer_user is None:  # its logon was refused: accept none of its streams
                logger.warning(
                    "replication: %r (logon refused) tried to replicate %r to this instance "
                    "over %s; refused",
                    link.peer_name,
                    d,
                    link.describe(),
                )
                return
            inbound = Inbound(self, link, d)
            link.inbound[d] = inbound
            logger.info(
                "replication: %r starts replicating %r to this instance%s",
                link.peer_name,
                d,
                f" (compressed: {header['z']})" if header.get("z") else "",
            )
            inbound.open()
        elif c == "rhave":
            out = link.outbound.get(d)
            if out is not None:
                have = {int(k): int(v) for k, v in (body or {}).items()}
                out.on_have(have)
        elif c == REQUEST_FRAME and link.peer_user is not None and self.broker.queues:
            queues = queue_engine(self.broker)
            if queues is not None and queues.replica is not None:
                queues.replica.on_request(link.peer_name, header, body)
        else:
            logger.warning("replication: unknown frame %r from %s", c, link.describe())

    # ------------------------------------------------------------------ admin

    def on_admin(self, link: Link, header: dict[str, Any], body: Any) -> None:
        cmd = str(header.get("cmd", ""))
        args = body if isinstance(body, dict) else {}
        try:
            result = self.admin(cmd, **{str(k): v for k, v in args.items()})
        except Exception as exc:
            link.send({"c": "rresult", "ok": False, "error": str(exc)})
            return
        link.send({"c": "rresult", "ok": True}, result)

    def admin(self, cmd: str, **args: Any) -> Any:
        """Run an admin command: ``status``, ``downgrade``/``upgrade`` (``destination``),
        ``partition``/``heal`` (``peer``), ``journal``.

        Raises:
            ValueError: unknown command or destination.
        """
        if cmd == "status":
            return self.status()
        if cmd == "downgrade":
            return self.downgrade(str(args["destination"]))
        if cmd == "upgrade":
            return self.upgrade(str(args["destination"]))
        if cmd == "partition":
            self.partition(str(args["peer"]))
            return True
        if cmd == "heal":
            self.heal(str(args["peer"]))
            return True
        if cmd == "journal":
            j = self.journal
            return {
                "first_index": j.first_index,
                "last_index": j.last_index,
                "durable_index": j.durable_index,
            }
        raise ValueError(f"unknown replication admin command {cmd!r}")

    def _outbound(self, name: str) -> Outbound:
        out = self.outbounds.get(name)
        if out is None:
            raise ValueError(f"no replication destination {name!r}")
        return out

    def downgrade(self, destination: str, *, manual: bool = True, reason: str = "admin") -> bool:
        """Make a sync destination's acknowledgment async (``False`` if it was not sync)."""
        out = self._outbound(destination)
        if not out.effective_sync:
            if manual and out.downgraded:
                out.manual = True
            return False
        out.downgraded = True
        out.manual = manual
        self.counters["downgrades"] += 1
        logger.warning(
            "replication: destination %r downgraded to async acknowledgment (%s); publishers "
            "and bookmark subscribers must not fail over to it until it is upgraded",
            destination,
            reason,
        )
        self.limits_changed()
        return True

    def upgrade(self, destination: str, *, manual: bool = True, reason: str = "admin") -> bool:
        """Restore sync acknowledgment of a downgraded destination."""
        out = self._outbound(destination)
        if not (out.sync_configured and out.downgraded):
            return False
        out.downgraded = False
        out.manual = False
        self.counters["upgrades"] += 1
        logger.info(
            "replication: destination %r upgraded back to sync acknowledgment (%s)",
            destination,
            reason,
        )
        self.limits_changed()
        return True

    def partition(self, peer: str) -> None:
        """Cut and refuse every link with instance ``peer`` until :meth:`heal`."""
        self.partitioned.add(peer)
        logger.warning("replication: partitioned from %r by admin", peer)
        for link in list(self.links):
            if link.peer_name == peer:
                self._drop_streams(link)
                link.reject("partitioned by admin")

    def heal(self, peer: str) -> None:
        """Allow links with ``peer`` again."""
        self.partitioned.discard(peer)
        logger.info("replication: partition from %r healed by admin", peer)
        for out in self.outbounds.values():
            self._wake(out)
        self._attach_all()

    def status(self) -> dict[str, Any]:
        """A JSON-able snapshot of links, streams and counters."""
        j = self.journal
        return {
            "name": self.name,
            "group": self.group,
            "address": self.advertised_addr,
            "journal": {"last_index": j.last_index, "durable_index": j.durable_index},
            "ack_limit": self.ack_limit(j.durable_index),
            "partitioned": sorted(self.partitioned),
            "links": [
                {
                    "peer": link.peer_name,
                    "group": link.peer_group,
                    "remote": link.remote,
                    "dialed": link.dialer,
                    "bytes_sent": link.bytes_sent,
                    "bytes_received": link.bytes_received,
                }
                for link in self.links
            ],
            "destinations": [out.status() for out in self.outbounds.values()],
            "inbound": [
                {
                    "from": peer,
                    "stream": stream,
                    "connected": any(
                        link.peer_name == peer and stream in link.inbound for link in self.links
                    ),
                    **counters,
                }
                for (peer, stream), counters in self._inbound_totals.items()
            ],
            "counters": dict(self.counters),
        }

    async def _action_loop(self) -> None:
        down = self.downgrade_action
        up = self.upgrade_action
        every = next((a.every for a in (down, up) if a is not None and a.every is not None), None)
        if every is None:
            ages = [a.age for a in (down, up) if a is not None]
            every = max(0.05, min(ages) / 2)
        while not self._stopping:
            await asyncio.sleep(every)
            self.check_ages()

    def check_ages(self, now_us: int | None = None) -> None:
        """The downgrade/upgrade actions: compare each sync destination's oldest
        unacknowledged message with the configured ages."""
        now = time.time_ns() // 1000 if now_us is None else now_us
        down = self.downgrade_action
        up = self.upgrade_action
        for out in self.outbounds.values():
            if not out.sync_configured:
                continue
            age = out.oldest_unacked_age(now)
            if not out.downgraded:
                if down is not None and age is not None and age > down.age:
                    self.downgrade(
                        out.name,
                        manual=False,
                        reason=f"oldest unacknowledged message is {age:.1f}s old, "
                        f"above Age {down.age:g}s",
                    )
            elif (
                not out.manual
                and up is not None
                and out.state == "streaming"
                and (age is None or age < up.age)
            ):
                self.upgrade(
                    out.name,
                    manual=False,
                    reason="caught up"
                    if age is None
                    else f"oldest unacknowledged message is {age:.1f}s old, below Age {up.age:g}s",
                )


async def start_replication(
    config: ServerConfig,
    broker: Broker,
    *,
    record_all_topics: bool,
    security: ServerSecurity | None = None,
    plug: ReplicationPlug | None = None,
) -> ReplicationManager | None:
    """Start replication when ``config`` asks for it (an ``amps-replication`` transport or a
    ``<Replication>`` section); ``None`` otherwise, or without a transaction log (logged).
    ``security``, ``plug``: see :class:`ReplicationManager`."""
    wanted = replication_wanted(config)
    for problem in queue_config_problems(config):  # (also on an instance without replication)
        raise ConfigError(problem)
    if not wanted:
        return None
    if broker.txlog is None:
        logger.error(
            "replication: configured but this instance has no transaction log; replication "
            "needs one (add <TransactionLog>), so it is disabled"
        )
        return None
    manager = ReplicationManager(
        config, broker, record_all_topics=record_all_topics, security=security, plug=plug
    )
    await manager.start()
    return manager
