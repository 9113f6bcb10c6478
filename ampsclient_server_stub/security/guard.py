"""The broker's security hook (``BrokerHooks.guard``): logon authentication and entitlements.

The broker calls:

* :meth:`SecurityGuard.authenticate` from ``logon`` (``retry`` sends the challenge back in a
  ``status: retry`` ack; ``failure`` sends ``auth failure`` and closes the connection);
* :meth:`SecurityGuard.check` before every command (literal topics of ``subscribe``, ``sow``
  and ``sow_delete``, with their ``delta``/``and`` variants);
* :meth:`SecurityGuard.check_write` for every publish (also on the broker's fast path), so a
  refused publish carrying ``s`` gets a failure persisted ack with reason ``not entitled``;
* :meth:`SecurityGuard.matcher` for regex topics: the subscription or query keeps only the
  topics the user is entitled to.

The policy of a connection is that of the transport it came in on (``session.policy``), else
the instance's.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final, Protocol

from ampsclient.protocol.header import Header
from ampsclient_server_stub.engine.topics import TopicMatcher, is_regex_topic
from ampsclient_server_stub.engine.wire import CommandFailure

from .auth import AuthVerdict
from .logon_tokens import LogonTokens
from .throttle import LogonThrottle

if TYPE_CHECKING:
    from .auth import AuthenticationModule, EntitlementModule

__all__ = ["NOT_ENTITLED", "EntitledTopicMatcher", "SecurityGuard", "operations_for"]

logger = logging.getLogger(__name__)

NOT_ENTITLED: Final = "not entitled"

_OPS: Final[dict[str, tuple[str, ...]]] = {
    "subscribe": ("subscribe",),
    "delta_subscribe": ("subscribe",),
    "sow": ("sow",),
    "sow_and_subscribe": ("sow", "subscribe"),
    "sow_and_delta_subscribe": ("sow", "subscribe"),
    "sow_delete": ("sow_delete",),
    "p": ("publish",),
    "publish": ("publish",),
    "delta_publish": ("publish",),
}
_STATE_LIMIT: Final = 10_000


def operations_for(command: str) -> tuple[str, ...]:
    """The entitlement operations a command needs (empty: not governed)."""
    return _OPS.get(command, ())


class Policy(Protocol):
    """What the guard reads of a transport's policy (``policy.TransportPolicy`` fits)."""

    @property
    def auth(self) -> AuthenticationModule | None:
        """The authentication module (``None``: not configured)."""

    @property
    def entitlements(self) -> EntitlementModule | None:
        """The entitlement module (``None``: every topic allowed)."""


class Policies(Protocol):
    """The instance's policies (``policy.ServerSecurity`` fits)."""

    @property
    def default(self) -> Policy:
        """The instance-level policy."""

    @property
    def logon_throttle(self) -> LogonThrottle:
        """Failed-logon lockouts (``<LogonFailureLimit>``, ``<LogonLockout>``)."""

    @property
    def logon_tokens(self) -> LogonTokens:
        """The admin query panel's single-use logon tokens."""


class Connection(Protocol):
    """What the guard reads of a connection (the engine's ``Connection`` fits)."""

    @property
    def id(self) -> int:
        """Connection number."""

    @property
    def user_id(self) -> str | None:
        """The user the connection logged on as."""

    @property
    def session(self) -> object:
        """The transport session (its ``policy`` attribute, when set, applies)."""


def _peer_host(conn: Connection) -> str:
    """The host part of the connection's peer address (``""`` when unknown)."""
    peer = str(getattr(conn.session, "peer", "") or "")
    return peer.rsplit(":", 1)[0] if ":" in peer else peer


class EntitledTopicMatcher(TopicMatcher):
    """A regex topic matcher that also requires the user's entitlement for each topic."""

    __slots__ = ("_cache", "_ents", "_ops", "_user")

    def __init__(
        self,
        base: TopicMatcher,
        entitlements: EntitlementModule,
        user: str | None,
        ops: tuple[str, ...],
    ) -> None:
        assert base.pattern is not None
        super().__init__(base.topic, base.pattern)
        self._ents = entitlements
        self._user = user
        self._ops = ops
        self._cache: dict[str, bool] = {}

    def matches(self, topic: str) -> bool:
        pattern = self.pattern
        if pattern is None or not pattern.test(topic):
            return False
        hit = self._cache.get(topic)
        if hit is None:
            hit = all(self._ents.allowed(self._user, op, topic) for op in self._ops)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[topic] = hit
        return hit


class SecurityGuard:
    """Authentication and entitlement checks for a :class:`~.policy.ServerSecurity`."""

    def __init__(self, security: Policies) -> None:
        self.security = security
        self._states: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self.counters: dict[str, int] = {
            "auth_failures": 0,
            "not_entitled": 0,
            "challenges": 0,
            "denied_reads": 0,
            "denied_writes": 0,
            "logons_locked_out": 0,
        }
        """``not_entitled`` split as AMPS' monitoring names it: ``denied_writes`` (publish,
        sow_delete) and ``denied_reads`` (subscribe, sow)."""
        self._denied: OrderedDict[int, list[int]] = OrderedDict()
        """Per connection id, ``[denied reads, denied writes]`` (the most recent
        :data:`_STATE_LIMIT` connections refused anything)."""

    def policy(self, conn: Connection) -> Policy:
        """The policy of ``conn``'s transport."""
        found: Policy | None = getattr(conn.session, "policy", None)
        return found if found is not None else self.security.default

    # ------------------------------------------------------------------ logon

    def authenticate(self, conn: Connection, user: str, password: str) -> AuthVerdict | None:
        """Decide on a logon; ``None`` when the transport configures no authentication."""
        module = self.policy(conn).auth
        if module is None:
            return None
        throttle = self.security.logon_throttle
        host = _peer_host(conn)
        if throttle.locked(user, host) is not None:  # guessing gains nothing meanwhile
            self.counters["auth_failures"] += 1
            self.counters["logons_locked_out"] += 1
            return AuthVerdict("failure", "auth failure")
        if self.security.logon_tokens.redeem(user, password):  # the admin query panel's
            throttle.succeeded(user)
            return AuthVerdict("success")
        state = self._states.get(conn.id)
        if state is None:
            state = self._states[conn.id] = {}
            while len(self._states) > _STATE_LIMIT:
                self._states.popitem(last=False)
        try:
            verdict = module.authenticate(user, password, state)
        except Exception:
            logger.exception("authentication module failed for %r", conn)
            verdict = AuthVerdict("failure", "auth failure")
        if verdict.status == "retry":
            self.counters["challenges"] += 1
        else:
            self._states.pop(conn.id, None)
            if not verdict.ok:
                self.counters["auth_failures"] += 1
                logger.warning("%r: logon refused for user %r", conn, user)
                for what in throttle.failed(user, host):
                    logger.warning(
                        "%s locked out for %g s after %d failed logons (LogonFailureLimit)",
                        what,
                        throttle.lockout,
                        throttle.limit,
                    )
            else:
                throttle.succeeded(user)
        return verdict

    # ------------------------------------------------------------------ entitlements

    def _refuse(self, conn: Connection, op: str, topic: str) -> None:
        self.counters["not_entitled"] += 1
        write = op in ("publish", "sow_delete")
        self.counters["denied_writes" if write else "denied_reads"] += 1
        counts = self._denied.get(conn.id)
        if counts is None:
            counts = self._denied[conn.id] = [0, 0]
            if len(self._denied) > _STATE_LIMIT:
                self._denied.popitem(last=False)
        counts[write] += 1
        raise CommandFailure(NOT_ENTITLED, f"user {conn.user_id!r} may not {op} topic {topic!r}")

    def denied(self, conn_id: int) -> tuple[int, int]:
        """``(denied reads, denied writes)`` of a connection."""
        counts = self._denied.get(conn_id)
        return (counts[0], counts[1]) if counts is not None else (0, 0)

    def check(self, conn: Connection, command: object, hdr: Header) -> None:
        """Refuse (``CommandFailure('not entitled')``) a command on a topic the user may not
        use. Publishes are checked by :meth:`check_write`."""
        ents = self.policy(conn).entitlements
        if ents is None:
            return
        ops = _OPS.get(command) if isinstance(command, str) else None
        if not ops or ops == ("publish",):
            return
        raw = hdr.get("t")
        if raw is None or raw == "":
            return
        topic = str(raw)
        regex = is_regex_topic(topic)
        user = conn.user_id
        for op in ops:
            if not (ents.any_allowed(user, op) if regex else ents.allowed(user, op, topic)):
                self._refuse(conn, op, topic)

    def check_write(self, conn: Connection, topic: str) -> None:
        """Refuse a publish to ``topic`` the user may not write."""
        ents = self.policy(conn).entitlements
        if ents is not None and not ents.allowed(conn.user_id, "publish", topic):
            self._refuse(conn, "publish", topic)

    def matcher(self, conn: Connection, hdr: Header, matcher: TopicMatcher) -> TopicMatcher:
        """``matcher`` restricted to the topics the user is entitled to (regex topics only)."""
        if matcher.pattern is None:
            return matcher
        ents = self.policy(conn).entitlements
        if ents is None:
            return matcher
        ops = _OPS.get(str(hdr.get("c")), ())
        if not ops:
            return matcher
        return EntitledTopicMatcher(matcher, ents, conn.user_id, ops)
