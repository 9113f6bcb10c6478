"""Command handlers: the dispatch table from a command name to its handler, ``logon``,
``heartbeat``, ``unsubscribe``, ``flush``, and the failure acks of refused commands.

The publish and subscription commands live in :mod:`.publishing` and :mod:`.subscribing`;
this module wires them into :attr:`CommandHandlers.table`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from ampsclient.protocol.header import Header, encode_header
from ampsclient_server_stub.config import parse_duration

from .composite_codec import (
    composite_refusal,
    composite_type,
    opaque_part_refusal,
    stats_ack_refusal,
)
from .durability import Durability
from .filter_syntax import FilterError, parse_identifier
from .hooks import BrokerHooks
from .payload import OrderByError, is_parseable, parse_order_by, unparsed_refusal
from .publishing import Publishing
from .state import Clients, Connection
from .subscribing import Subscribing
from .subscriptions import SubscriptionTable
from .wire import (
    ALL_ACKS,
    COMPLETED,
    DETAILED_REASONS,
    PERSISTED,
    PROCESSED,
    REASON_DETAIL,
    RECEIVED,
    STATS,
    SUBSCRIBE_COMMANDS,
    CommandFailure,
    ack_flags,
    command_options,
    int_field,
    persisted_ack,
    printable_detail,
    processed_ack_sent,
    send_ack,
    send_acks,
    split_list,
    text,
)

__all__ = ["CommandHandlers", "Handler"]

logger = logging.getLogger(__name__)

Handler = Callable[[Connection, Header, bytes, int], None]
"""``handler(conn, header, payload, body offset)``; refuses by raising."""


MAX_CLIENT_NAME: Final = 1024
"""Longest ``client_name`` (and ``user_id``) a logon may carry, in bytes (UTF-8)."""

MAX_PASSWORD: Final = 64 * 1024
"""Longest ``pw`` a logon may carry, in bytes (room for tokens such as Kerberos or JWT)."""


def check_logon_sizes(name: str | None, user: str, password: str) -> None:
    """Refuse a logon whose client name, user or password is beyond its documented bound
    (``client name too long``, ``user id too long``, ``password too long``)."""
    for value, limit, what in (
        (name or "", MAX_CLIENT_NAME, "client name"),
        (user, MAX_CLIENT_NAME, "user id"),
        (password, MAX_PASSWORD, "password"),
    ):
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise CommandFailure(f"{what} too long", f"{what} of {size} bytes (at most {limit})")


def _opaque_order(message_type: str, order_text: str) -> str | None:
    """Why an ``orderby`` on a composite-local type is refused: a field inside a binary part
    (opaque, it has no order); ``None`` otherwise (a malformed one fails later, by name)."""
    ctype = composite_type(message_type.lower())
    if ctype is None:
        return None
    try:
        paths = [parse_identifier(f.path) for f in parse_order_by(order_text).fields]
    except (OrderByError, FilterError):
        return None
    for steps in paths:
        refusal = opaque_part_refusal(ctype, steps)
        if refusal is not None:
            return f"orderby {refusal}"
    return None


def _refuse_parsing_on_opaque(conn: Connection, hdr: Header, *, delta: bool) -> None:
    """On a connection of a type the server does not parse (``binary``, ...), refuse what would
    read the messages' fields and be ignored: a delta subscription, ``select``, ``orderby``
    (header or option) and an aggregation (a content filter is refused as ``bad filter``).

    Raises:
        CommandFailure: ``invalid options``, naming what and the type.
    """
    if is_parseable(conn.mt):
        return
    options = command_options(hdr)
    what = None
    if delta:
        what = "a delta subscription"
    elif "select" in options:
        what = "option 'select'"
    elif "orderby" in options or hdr.get("orderby") is not None:
        what = "orderby"
    elif "projection" in options or "grouping" in options:
        what = "an aggregation (projection, grouping)"
    if what is not None:
        raise CommandFailure("invalid options", unparsed_refusal(conn.mt, what) or what)


def _composite_checked(conn: Connection, hdr: Header, *, delta: bool) -> Header:
    """``hdr`` of a subscription or query, refused on a composite connection when it asks for
    what the AMPS guide ("Composite Messages") does not support there: on any composite type
    the event topics (``/AMPS/...``) and a ``stats`` ack (messages the server constructs), on a
    composite-global
    one a delta subscription, ``select`` and an aggregation (``projection``/``grouping``). (On a
    composite-local type an aggregation's fields are checked by ``views.aggregated``.)

    Raises:
        CommandFailure: ``invalid topic`` or ``invalid options``, naming the type.
    """
    _refuse_parsing_on_opaque(conn, hdr, delta=delta)
    if composite_type(conn.mt.lower()) is None:
        return hdr
    topic = text(hdr.get("t")) or ""
    if topic.lstrip("^").startswith("/AMPS/"):
        raise CommandFailure(
            "invalid topic",
            f"{topic!r}: event topics are not delivered as {conn.mt!r}, a composite message "
            "type (AMPS User Guide, Composite Messages)",
        )
    stats_refusal = stats_ack_refusal(conn.mt) if ack_flags(hdr) & STATS else None
    if stats_refusal is not None:
        raise CommandFailure("invalid options", stats_refusal)
    options = command_options(hdr)
    refusal = None
    if delta:
        refusal = composite_refusal(conn.mt, "a delta subscription")
    if refusal is None and "select" in options:
        refusal = composite_refusal(conn.mt, "select (projection)")
    if refusal is None and ("projection" in options or "grouping" in options):
        refusal = composite_refusal(conn.mt, "aggregation (projection, grouping)")
    order_text = text(hdr.get("orderby")) or options.get("orderby")
    if refusal is None and order_text:
        refusal = _opaque_order(conn.mt, order_text)
    if refusal is not None:
        raise CommandFailure("invalid options", refusal)
    return hdr


class CommandHandlers:
    """Every command's handler, by command name (:attr:`table`)."""

    def __init__(
        self,
        *,
        clients: Clients,
        hooks: BrokerHooks,
        durability: Durability,
        publishing: Publishing,
        subscribing: Subscribing,
        table: SubscriptionTable,
        counters: dict[str, int],
        kick: Callable[[Connection, str], None],
        version: str,
        unique_names: bool = True,
    ) -> None:
        self._clients = clients
        self._unique_names = unique_names
        """A transaction log is configured: one connection per client name (AMPS)."""
        self._hooks = hooks
        self._durability = durability
        self._table = table
        self._counters = counters
        self._kick = kick
        self.version = version
        pub = publishing
        sub = subscribing
        self.table: dict[str, Handler] = {
            "logon": self.logon,
            "p": lambda c, h, p, e: pub.publish(c, h, p, e, delta=False),
            "delta_publish": lambda c, h, p, e: pub.publish(c, h, p, e, delta=True),
            "subscribe": lambda c, h, p, e: sub.subscribe(
                c, _composite_checked(c, h, delta=False), delta=False
            ),
            "delta_subscribe": lambda c, h, p, e: sub.subscribe(
                c, _composite_checked(c, h, delta=True), delta=True
            ),
            "sow": lambda c, h, p, e: sub.sow(
                c, _composite_checked(c, h, delta=False), subscribe=False, delta=False
            ),
            "sow_and_subscribe": lambda c, h, p, e: sub.sow(
                c, _composite_checked(c, h, delta=False), subscribe=True, delta=False
            ),
            "sow_and_delta_subscribe": lambda c, h, p, e: sub.sow(
                c, _composite_checked(c, h, delta=True), subscribe=True, delta=True
            ),
            "sow_delete": pub.sow_delete,
            "unsubscribe": self.unsubscribe,
            "flush": lambda c, h, p, e: durability.flush(c, h),
            "heartbeat": self.heartbeat,
        }
        """The dispatch table (tests may replace an entry)."""

    # ------------------------------------------------------------------ failures

    def failed(self, conn: Connection, hdr: Header, exc: Exception) -> None:
        """Answer a command that raised ``exc`` (``internal error`` unless it was a
        :class:`CommandFailure`).

        AMPS sends one ``processed`` ack per command: when the handler raised after that ack
        went out (a success), nothing more goes on the wire (the AMPS ack reference,
        docs.crankuptheamps.com/amps-command-reference/messages-from-amps/ack-messages, says
        nothing of a failure after it); the error is logged once with the command id and
        counted in ``failures``. The connection stays open.
        """
        self._counters["failures"] += 1
        if processed_ack_sent(hdr):
            logger.error(
                "%r: %s (cid %r) failed after its processed ack; nothing more sent",
                conn,
                hdr.get("c"),
                hdr.get("cid"),
                exc_info=exc,
            )
            return
        detail = None
        if isinstance(exc, CommandFailure):
            reason = exc.reason
            logger.info("%r: %s failed: %s (%s)", conn, hdr.get("c"), reason, exc)
            if reason in DETAILED_REASONS and str(exc) != reason:
                detail = str(exc)
        else:
            reason = "internal error"
            logger.exception("%r: error handling %r", conn, hdr.get("c"))
        try:
            self.send_failure(conn, hdr, reason, detail=detail)
        except Exception:  # pragma: no cover - never let one client's error escape
            logger.exception("%r: sending a failure ack", conn)

    def logon_required(self, conn: Connection, hdr: Header) -> None:
        """A command before ``logon``: refused when it asked for an ack, else the client is
        disconnected."""
        if ack_flags(hdr) & ALL_ACKS:
            self.send_failure(conn, hdr, "logon required", always_processed=True)
        else:
            logger.warning("%r sent %r before logon; disconnecting", conn, hdr.get("c"))
            self._kick(conn, "logon required")

    def send_failure(
        self,
        conn: Connection,
        hdr: Header,
        reason: str,
        *,
        always_processed: bool = False,
        detail: str | None = None,
    ) -> None:
        """The failure acks of a refused command (a persisted failure for a sequenced one).

        ``detail`` (what exactly is wrong) travels beside the exact AMPS ``reason`` in the
        processed ack's :data:`REASON_DETAIL` field.
        """
        flags = ack_flags(hdr)
        c = hdr.get("c")
        sub_id = text(hdr.get("sub_id"))
        if sub_id is None and c in SUBSCRIBE_COMMANDS:
            sub_id = text(hdr.get("cid"))
        send = conn.session.send
        if flags & RECEIVED:
            send_ack(send, hdr, "received", sub_id=sub_id)
        if flags & PROCESSED or always_processed:
            extra = None if detail is None else {REASON_DETAIL: printable_detail(detail)}
            send_ack(
                send, hdr, "processed", status="failure", reason=reason, sub_id=sub_id, extra=extra
            )
        if flags & PERSISTED and c in ("p", "delta_publish", "sow_delete"):
            try:
                seq = int_field(hdr.get("s"))
            except CommandFailure:
                seq = None
            if seq is not None and conn.logged_on:
                self._durability.flush_persisted(conn)
                send(persisted_ack(seq, reason=reason))

    # ------------------------------------------------------------------ logon

    def logon(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        """``logon``: authentication, options, client name.

        A client name belongs to the first authenticated user that logs on with it: another
        user's logon with that name (or an unauthenticated one) fails with ``name in use``.
        With a transaction log, an older connection of the same name (and user) is
        disconnected; without one, both stay connected (AMPS enforces unique client names
        only when a transaction log is configured).
        """
        name = text(hdr.get("client_name"))
        user = str(hdr.get("user_id") or "")
        password = str(hdr.get("pw") or "")
        check_logon_sizes(name, user, password)
        if conn.logged_on:
            if name is not None and name != conn.client_name:
                raise CommandFailure("name in use", "a connection can log on only once")
            self._logon_ack(conn, hdr)
            return
        vouched = self._authenticated(conn, hdr, user, password)
        if vouched is None:
            return
        if name is not None and not self._may_use_name(conn, hdr, name, user if vouched else None):
            return
        conflation = command_options(hdr).get("ack_conflation")
        if conflation is not None:
            try:
                value = float(conflation) if conflation.isdigit() else parse_duration(conflation)
            except (ValueError, TypeError):
                raise CommandFailure("invalid options", f"ack_conflation={conflation}") from None
            conn.ack_conflation = max(0.0, value)
        if conn.message_type is None:
            mt = text(hdr.get("mt"))
            conn.message_type = mt.lower() if mt else "json"
        if name is None:
            name = f"anonymous-{conn.id}"
        older = self._clients.connection(name)
        if older is not None and older is not conn and self._unique_names:
            self._kick(older, f"client name {name!r} logged on again from {conn.peer}")
        conn.user_id = user or None
        conn.logged_on = True
        self._clients.log_on(conn, name, owner=user if vouched else None)
        self._counters["logons"] += 1
        logger.info("%r logged on (mt=%s)", conn, conn.mt)
        self._logon_ack(conn, hdr)
        if self._hooks.client_status is not None:
            self._hooks.client_status(conn, "logon", {"correlation_id": text(hdr.get("x"))})

    def _may_use_name(self, conn: Connection, hdr: Header, name: str, user: str | None) -> bool:
        """``name`` is free or belongs to ``user`` (the authenticated user, ``None`` when no
        authentication vouched for one); else the logon fails with ``name in use`` and the
        connection is closed (AMPS: a logon with an existing client name and a different
        authenticated user fails)."""
        owner = self._clients.owner(name)
        if owner is None or owner == user:
            return True
        self._counters["failures"] += 1
        logger.warning(
            "%r: client name %r belongs to another user; logon of user %r refused",
            conn,
            name,
            user,
        )
        send_ack(conn.session.send, hdr, "processed", status="failure", reason="name in use")
        self._kick(conn, "name in use")
        return False

    def _authenticated(
        self, conn: Connection, hdr: Header, user: str, password: str
    ) -> bool | None:
        """Run the authentication hooks; answers a refusal or a challenge itself (``None``).
        ``True``: an authentication module vouched for ``user``; ``False``: none is
        configured."""
        guard = self._hooks.guard
        verdict = guard.authenticate(conn, user, password) if guard is not None else None
        send = conn.session.send
        if verdict is not None and verdict.status == "retry":
            extra = {"user_id": user, "pw": verdict.challenge}
            send_ack(send, hdr, "processed", status="retry", extra=extra)
            return None
        authenticate = self._hooks.authenticate
        if verdict is not None:
            ok = verdict.ok
        else:
            ok = authenticate is None or authenticate(user, password)
        if not ok:
            reason = verdict.reason if verdict is not None else "auth failure"
            send_ack(send, hdr, "processed", status="failure", reason=reason or "auth failure")
            self._kick(conn, "authentication failure")
            return None
        return verdict is not None or authenticate is not None

    def _logon_ack(self, conn: Connection, hdr: Header) -> None:
        state = conn.state
        assert state is not None
        conn.session.send(
            encode_header(
                {
                    "c": "ack",
                    "cid": text(hdr.get("cid")),
                    "a": "processed",
                    "s": state.ack_seq,
                    "status": "success",
                    "client_name": state.name,
                    "version": self.version,
                    "bm": f"{state.publisher_id}|{state.ack_seq}|",
                }
            )
        )

    # ------------------------------------------------------------------ the others

    def unsubscribe(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        """``unsubscribe`` by ``sub_id`` list, or ``all``."""
        ids = split_list(hdr.get("sub_id"))
        if not ids:
            raise CommandFailure("invalid subId", "unsubscribe without sub_id")
        if "all" in ids:
            for sub in list(conn.subs.values()):
                self._table.remove(sub)
        else:
            for sub_id in ids:
                found = conn.subs.get(sub_id)
                if found is not None:
                    self._table.remove(found)
        flags = ack_flags(hdr)
        send_acks(conn.session.send, hdr, flags & (RECEIVED | PROCESSED | COMPLETED))

    def heartbeat(self, conn: Connection, hdr: Header, payload: bytes, end: int) -> None:
        """``heartbeat`` (``o=start,N`` arms the session's heartbeat)."""
        options = split_list(hdr.get("o"))
        if options and options[0] == "start":
            interval: float | None = None
            if len(options) > 1:
                try:
                    interval = float(options[1])
                except ValueError:
                    interval = None
            if interval is None or interval <= 0:
                raise CommandFailure("invalid options", f"bad heartbeat options {hdr.get('o')!r}")
            conn.session.start_heartbeat(interval)
        flags = ack_flags(hdr)
        send_acks(conn.session.send, hdr, flags & (RECEIVED | PROCESSED))
