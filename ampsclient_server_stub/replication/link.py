"""One replication connection between two instances (or an admin connection).

A :class:`Link` is an ``asyncio.Protocol``. It runs the handshake (hello, mutual
challenge/response over the shared secret, the logon of each side to the other's
``amps-replication`` transport, configuration exchange and validation), then
hands frames to the :class:`~ampsclient_server_stub.replication.manager.ReplicationManager`.
A link carries replication in both directions: the streams of this instance's destinations
that match the peer (outbound) and the streams of the peer's destinations that match this
instance (inbound). See :mod:`~ampsclient_server_stub.replication.protocol` for the frames.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final, Protocol

from ampsclient.authenticator import Authenticator
from ampsclient.exceptions import AMPSError, FrameTooLargeError
from ampsclient.protocol.framing import TcpFramer

from .protocol import PROTOCOL_VERSION, decode_frame, encode_frame, make_nonce, proof, verify_proof
from .rules import InstanceSummary

if TYPE_CHECKING:  # pragma: no cover
    from ampsclient_server_stub.security.auth import AuthVerdict

    from .streams import Inbound, Outbound

__all__ = ["AUTH_FAILURE", "HANDSHAKE_TIMEOUT", "HEARTBEAT_INTERVAL", "Link", "LinkHost"]

logger = logging.getLogger("ampsclient_server_stub.replication")

AUTH_FAILURE: Final = "auth failure"
"""The reason of a refused logon (AMPS' reason for a failed logon)."""

HANDSHAKE_TIMEOUT: Final = 5.0
"""Seconds a connection may take to authenticate and validate."""

HEARTBEAT_INTERVAL: Final = 1.0
"""Seconds between heartbeats on an idle link."""

SILENCE_LIMIT: Final = 10.0
"""A link silent for this long is closed."""

MAX_FRAME: Final = 256 * 1024 * 1024

_WRITE_HIGH: Final = 4 * 1024 * 1024


class LinkHost(Protocol):
    """What a link needs of the instance's replication manager (``manager.ReplicationManager``
    fits; the manager imports this module, not the other way round). The manager's methods
    take the :class:`Link` itself, hence the ``Any`` parameters."""

    name: str
    group: str
    advertised_addr: str
    transport_name: str
    loop: asyncio.AbstractEventLoop
    summary: InstanceSummary
    counters: dict[str, int]
    last_problems: dict[str, list[str]]

    def is_partitioned(self, peer: str) -> bool:
        """Whether links to ``peer`` are cut by the admin ``partition`` command."""

    def check_logon(self, link: Any, user: str, password: str) -> AuthVerdict:
        """Decide on a peer's logon to this instance's replication transport."""

    def credentials_for(self, link: Any) -> tuple[str, Authenticator]:
        """The user and authenticator an outgoing link logs on with."""

    def validate_peer(self, link: Any) -> list[str]:
        """Configuration problems between this instance and the link's peer."""

    def link_up(self, link: Any) -> None:
        """The handshake completed."""

    def link_down(self, link: Any) -> None:
        """The link closed."""

    def on_frame(self, link: Any, c: Any, header: dict[str, Any], body: Any) -> None:
        """A replication frame arrived."""

    def on_admin(self, link: Any, header: dict[str, Any], body: Any) -> None:
        """An admin command arrived."""


class Link(asyncio.Protocol):
    """A replication (or admin) connection.

    Args:
        manager: the instance's replication manager.
        dialer: ``True`` for a connection this instance opened.
        secret: the shared secret this side authenticates with.
        dialed_for: the outbound stream whose address was dialed (dialer only).
        role: ``replication`` or, for the admin client, ``admin``.
    """

    def __init__(
        self,
        manager: LinkHost,
        *,
        dialer: bool,
        secret: str,
        dialed_for: Outbound | None = None,
        dialed_addr: str = "",
    ) -> None:
        self.manager = manager
        self.dialer = dialer
        self.secret = secret
        self.dialed_for = dialed_for
        self.dialed_addr = dialed_addr
        self.loop = manager.loop
        self.transport: asyncio.Transport | None = None
        self.framer = TcpFramer(max_frame_size=MAX_FRAME)
        self.state = "new"
        self.role = "replication"
        self.nonce = make_nonce()
        self.peer_nonce = ""
        self.peer_name = ""
        self.peer_group = ""
        self.peer_addr = ""
        self.peer_summary: InstanceSummary | None = None
        self.remote = ""
        self.sent_ready = False
        self.got_ready = False
        self.paused = False
        self.closed = False
        self.close_reason = ""
        self.peer_user: str | None = None
        """The user the peer logged on as (``None`` until this side accepted its logon)."""
        self.accepted_by_peer = False
        """The peer accepted this instance's logon: this instance's streams may use the link."""
        self.refused_by_peer = False
        self.peer_refused = False
        """The dialer refused the listener's logon: the link carries only the dialer's streams
        (nothing the listener sends is accepted), as an AMPS connection carries one way."""
        self.auth_state: dict[str, Any] = {}
        """The authentication module's state for the peer's logon (kept between retries)."""
        self._logon_user = ""
        self._authenticator: Authenticator | None = None
        self.ready: asyncio.Future[bool] = self.loop.create_future()
        self.outbound: dict[str, Outbound] = {}
        self.inbound: dict[str, Inbound] = {}
        self.last_received = self.loop.time()
        self.last_sent = self.loop.time()
        self.bytes_sent = 0
        """Bytes written to the connection (frames, length prefixes included)."""
        self.bytes_received = 0
        self._hb: asyncio.TimerHandle | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ identity

    @property
    def dialer_key(self) -> tuple[str, str]:
        """``(name of the instance that dialed, its nonce)``: orders duplicate links."""
        if self.dialer:
            return (self.manager.name, self.nonce)
        return (self.peer_name, self.peer_nonce)

    @property
    def is_up(self) -> bool:
        return self.state == "up" and not self.closed

    def describe(self) -> str:
        who = self.peer_name or "?"
        if not self.dialer:
            return f"{who}@{self.remote} (incoming)"
        name = self.dialed_for.dest.extra.get("Transport/Name") if self.dialed_for else None
        return f"{who}@{self.remote} (dialed" + (f" over transport {name!r})" if name else ")")

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=_WRITE_HIGH)
        peer: Any = transport.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._handshake_timer = self.loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_expired)
        if self.dialer:
            self.state = "await_challenge"
            self.send(
                {
                    "c": "rhello",
                    "name": self.manager.name,
                    "group": self.manager.group,
                    "addr": self.manager.advertised_addr,
                    "role": "replication",
                    "nonce": self.nonce,
                    "v": PROTOCOL_VERSION,
                }
            )
        else:
            self.state = "await_hello"
        self._hb = self.loop.call_later(HEARTBEAT_INTERVAL, self._heartbeat)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_received = self.loop.time()
        self.bytes_received += len(data)
        try:
            self.framer.receive_data(data)
        except FrameTooLargeError as exc:
            self.close(f"frame too large: {exc}")
            return
        for payload in self.framer.frames():
            if self._gone():
                return
            try:
                header, body = decode_frame(payload)
            except Exception as exc:
                logger.warning("replication: bad frame from %s: %s", self.describe(), exc)
                self.close("malformed frame")
                return
            try:
                self._dispatch(header, body)
            except Exception:
                logger.exception(
                    "replication: error handling %r from %s", header.get("c"), self.describe()
                )
                self.close("internal error")
                return

    def _gone(self) -> bool:
        return self.closed  # a method: handlers called in between may close the link

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.close_reason = self.close_reason or (str(exc) if exc else "connection closed")
        self._cancel_timers()
        if not self.ready.done():
            self.ready.set_result(False)
        self.manager.link_down(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for out in list(self.outbound.values()):
            out.schedule_pump()

    # ------------------------------------------------------------------ sending / closing

    def send(self, fields: dict[str, Any], body: Any = None) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        frame = encode_frame(fields, body)
        transport.write(frame)
        self.bytes_sent += len(frame)
        self.last_sent = self.loop.time()

    def close(self, reason: str) -> None:
        """Close the connection (what is queued is still written)."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        logger.debug("replication: closing link %s: %s", self.describe(), reason)
        if self.transport is not None:
            self.transport.close()

    def reject(self, reason: str, problems: list[str] | None = None) -> None:
        self.send({"c": "rreject", "reason": reason}, problems or [])
        self.close(reason)

    def _cancel_timers(self) -> None:
        for timer in (self._hb, self._handshake_timer):
            if timer is not None:
                timer.cancel()
        self._hb = self._handshake_timer = None

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if self.state not in ("up", "admin") and not self.closed:
            logger.warning(
                "replication: handshake with %s did not complete in %.0f s (state %s); closing",
                self.describe(),
                HANDSHAKE_TIMEOUT,
                self.state,
            )
            self.close("handshake timeout")

    def _heartbeat(self) -> None:
        self._hb = None
        if self.closed:
            return
        now = self.loop.time()
        if now - self.last_received > SILENCE_LIMIT and self.state != "admin":
            logger.warning(
                "replication: nothing received from %s for %.0f s; closing the link",
                self.describe(),
                now - self.last_received,
            )
            self.close("peer silent")
            return
        if now - self.last_sent >= HEARTBEAT_INTERVAL and self.state in ("up", "admin"):
            self.send({"c": "rhb"})
        self._hb = self.loop.call_later(HEARTBEAT_INTERVAL, self._heartbeat)

    # ------------------------------------------------------------------ handshake

    def _dispatch(self, header: dict[str, Any], body: Any) -> None:
        c = header.get("c")
        if c == "rhb":
            return
        if c == "rreject":
            self._rejected(str(header.get("reason", "")), body)
            return
        state = self.state
        if state == "up":
            self.manager.on_frame(self, c, header, body)
        elif state == "admin" and c == "radmin":
            self.manager.on_admin(self, header, body)
        elif state == "await_hello" and c == "rhello":
            self._on_hello(header)
        elif state == "await_challenge" and c == "rchallenge":
            self._on_challenge(header)
        elif state == "await_auth" and c == "rauth":
            self._on_auth(header)
        elif state == "await_logon" and c == "rlogon":
            self._on_logon(header)
        elif state == "await_logon" and c == "rlogonack":
            self._on_logon_ack(header)
        elif state == "await_config" and c in ("rconfig", "rready"):
            if c == "rconfig":
                self._on_config(body)
            else:
                self.got_ready = True
                self._maybe_up()
        else:
            logger.warning(
                "replication: unexpected %r from %s in state %s", c, self.describe(), state
            )
            self.close("protocol error")

    def _on_hello(self, header: dict[str, Any]) -> None:
        self.peer_name = str(header.get("name") or "")
        self.peer_group = str(header.get("group") or self.peer_name)
        self.peer_addr = str(header.get("addr") or "")
        self.peer_nonce = str(header.get("nonce") or "")
        self.role = str(header.get("role") or "replication")
        if header.get("v") != PROTOCOL_VERSION:
            logger.error(
                "replication: %s speaks replication protocol %r, this instance %r; refused",
                self.describe(),
                header.get("v"),
                PROTOCOL_VERSION,
            )
            self.reject("unsupported protocol version")
            return
        if not self.peer_nonce or (self.role == "replication" and not self.peer_name):
            self.reject("bad hello")
            return
        self.state = "await_auth"
        self.send(
            {
                "c": "rchallenge",
                "name": self.manager.name,
                "group": self.manager.group,
                "addr": self.manager.advertised_addr,
                "nonce": self.nonce,
                "proof": proof(self.secret, "listener", self.peer_nonce, self.manager.name),
            }
        )

    def _on_challenge(self, header: dict[str, Any]) -> None:
        self.peer_name = str(header.get("name") or "")
        self.peer_group = str(header.get("group") or self.peer_name)
        self.peer_addr = str(header.get("addr") or "")
        self.peer_nonce = str(header.get("nonce") or "")
        if not verify_proof(
            self.secret, "listener", self.nonce, self.peer_name, header.get("proof")
        ):
            logger.error(
                "replication: instance %r at %s failed authentication: it does not know this "
                "instance's shared secret (check <Secret> on both sides); not connecting",
                self.peer_name,
                self.remote,
            )
            self.manager.counters["auth_failures"] += 1
            self.reject("authentication failed")
            return
        if self.peer_name == self.manager.name:
            logger.error(
                "replication: %s is this instance itself (same <Name> %r); not connecting",
                self.remote,
                self.peer_name,
            )
            self.reject("same instance name")
            return
        if self.manager.is_partitioned(self.peer_name):
            self.reject("partitioned by admin")
            return
        self.send(
            {
                "c": "rauth",
                "proof": proof(self.secret, "dialer", self.peer_nonce, self.manager.name),
            }
        )
        self.state = "await_logon"
        self._send_logon()

    def _on_auth(self, header: dict[str, Any]) -> None:
        if not verify_proof(self.secret, "dialer", self.nonce, self.peer_name, header.get("proof")):
            logger.error(
                "replication: authentication failed for an incoming %s connection from %s "
                "claiming to be %r: wrong shared secret (check <Secret>); refused",
                self.role,
                self.remote,
                self.peer_name,
            )
            self.manager.counters["auth_failures"] += 1
            self.reject("authentication failed")
            return
        if self.role == "admin":
            self.state = "await_logon"
            return
        if self.peer_name == self.manager.name:
            logger.error(
                "replication: incoming connection from %s uses this instance's own name %r; "
                "refused (every instance needs a unique <Name>)",
                self.remote,
                self.peer_name,
            )
            self.reject("same instance name")
            return
        if self.manager.is_partitioned(self.peer_name):
            logger.info("replication: refusing %s: partitioned by admin", self.describe())
            self.reject("partitioned by admin")
            return
        self.state = "await_logon"

    # ------------------------------------------------------------------ logon

    def _send_logon(self) -> None:
        """Log on to the peer with this instance's credentials for it."""
        user, authenticator = self.manager.credentials_for(self)
        self._logon_user = user
        self._authenticator = authenticator
        try:
            password = authenticator.authenticate(user, None)
        except AMPSError as exc:
            logger.error("replication: cannot log on to %s: %s", self.describe(), exc)
            self.close("logon failed")
            return
        self.send({"c": "rlogon", "user": user, "pw": password or ""})

    def _on_logon(self, header: dict[str, Any]) -> None:
        """The peer logs on: check it with this instance's transport authentication."""
        user = str(header.get("user") or "")
        verdict = self.manager.check_logon(self, user, str(header.get("pw") or ""))
        if verdict.status == "retry":
            self.send({"c": "rlogonack", "status": "retry", "pw": verdict.challenge})
            return
        if not verdict.ok:
            reason = verdict.reason or AUTH_FAILURE
            self.manager.counters["auth_failures"] += 1
            if self.dialer:
                # the listener logging on in turn: keep the link for this instance's own
                # streams, accept none of the listener's
                logger.error(
                    "replication: logon refused (%s) for %r at %s, user %r, by the "
                    "<Authentication> of transport %r: nothing it replicates over this link "
                    "is accepted",
                    reason,
                    self.peer_name,
                    self.remote,
                    user,
                    self.manager.transport_name,
                )
                self.peer_refused = True
                self.send({"c": "rlogonack", "status": "failure", "reason": reason})
                self._logon_done()
                return
            logger.error(
                "replication: logon refused (%s) for an incoming %s connection from %s "
                "claiming to be %r, user %r: refused by the <Authentication> of transport %r",
                reason,
                self.role,
                self.remote,
                self.peer_name,
                user,
                self.manager.transport_name,
            )
            self.reject(reason)
            return
        self.peer_user = user
        self.send({"c": "rlogonack", "status": "success"})
        if self.role == "admin":
            self.state = "admin"
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
                self._handshake_timer = None
            self.send({"c": "rready"})
            return
        if not self.dialer:
            self._send_logon()  # the listener logs on in turn, to a dialer it accepted
        self._logon_done()

    def _on_logon_ack(self, header: dict[str, Any]) -> None:
        authenticator = self._authenticator
        status = header.get("status")
        if authenticator is None or status not in ("success", "retry", "failure"):
            logger.warning("replication: unexpected logon answer from %s", self.describe())
            self.close("protocol error")
            return
        if status == "success":
            authenticator.completed(self._logon_user, None, "success")
            self.accepted_by_peer = True
            self._logon_done()
            return
        if status == "failure":
            reason = str(header.get("reason") or AUTH_FAILURE)
            self.manager.counters["auth_failures"] += 1
            logger.error(
                "replication: %r at %s refused this instance's logon as user %r (%s): this "
                "instance's streams do not use this link (check the <Authenticator> of the "
                "destination here and the user's credentials there)",
                self.peer_name,
                self.remote,
                self._logon_user,
                reason,
            )
            self.refused_by_peer = True
            self._logon_done()
            return
        try:
            answer = authenticator.retry(self._logon_user, str(header.get("pw") or ""))
        except AMPSError as exc:
            logger.error(
                "replication: cannot answer the logon challenge of %s as user %r: %s",
                self.describe(),
                self._logon_user,
                exc,
            )
            self.close("logon failed")
            return
        self.send({"c": "rlogon", "user": self._logon_user, "pw": answer or ""})

    def _logon_done(self) -> None:
        peer_checked = self.peer_user is not None or self.peer_refused
        answered = self.accepted_by_peer or self.refused_by_peer
        if self.state != "await_logon" or not peer_checked or not answered:
            return
        self.state = "await_config"
        self.send({"c": "rconfig"}, self.manager.summary.to_wire())

    def _on_config(self, body: Any) -> None:
        try:
            summary = InstanceSummary.from_wire(body)
        except ValueError as exc:
            logger.error(
                "replication: %s sent a bad configuration summary: %s", self.describe(), exc
            )
            self.reject("bad configuration summary")
            return
        self.peer_summary = summary
        problems = self.manager.validate_peer(self)
        if problems:
            self.manager.counters["validation_failures"] += 1
            repeated = self.manager.last_problems.get(self.peer_name) == problems
            self.manager.last_problems[self.peer_name] = problems
            logger.log(
                logging.DEBUG if repeated else logging.ERROR,
                "replication: configuration validation failed for the link with %r (%s); "
                "not connecting. %d problem(s):\n  %s",
                self.peer_name,
                self.remote,
                len(problems),
                "\n  ".join(problems),
            )
            self.reject("validation failed", problems)
            return
        self.manager.last_problems.pop(self.peer_name, None)
        self.sent_ready = True
        self.send({"c": "rready"})
        self._maybe_up()

    def _maybe_up(self) -> None:
        if not (self.sent_ready and self.got_ready) or self.state == "up":
            return
        self.state = "up"
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        if not self.ready.done():
            self.ready.set_result(True)
        self.manager.link_up(self)

    def _rejected(self, reason: str, body: Any) -> None:
        name = self.peer_name or "?"
        if reason == AUTH_FAILURE:
            self.manager.counters["auth_failures"] += 1
            logger.error(
                "replication: %r at %s refused this instance's logon as user %r (%s): check the "
                "<Authenticator> of the destination here and the user's credentials there",
                name,
                self.remote,
                self._logon_user,
                reason,
            )
        elif reason == "authentication failed":
            self.manager.counters["auth_failures"] += 1
            logger.error(
                "replication: %r at %s refused this instance's credentials: the shared secrets "
                "differ (check <Secret> on both sides)",
                name,
                self.remote,
            )
        elif reason == "validation failed":
            self.manager.counters["validation_failures"] += 1
            details = "; ".join(str(p) for p in body) if isinstance(body, list) else ""
            logger.error(
                "replication: %r at %s refused the connection: replication configuration "
                "validation failed there (details in the log of %r): %s",
                name,
                self.remote,
                name,
                details,
            )
        elif reason == "duplicate link":
            logger.debug("replication: %s closed as a duplicate link", self.describe())
        else:
            logger.warning(
                "replication: %r at %s refused the connection: %s", name, self.remote, reason
            )
        self.close(f"rejected by peer: {reason}")
