"""Event topics: ``/AMPS/ClientStatus`` and ``/AMPS/SOWStats``.

AMPS User Guide, "Event Topics": client status events
(https://docs.crankuptheamps.com/amps-user-guide/events/client-status) are published whenever a
client logs on, disconnects, enters or removes a subscription (on a disconnect, one for each
subscription it had) or queries a SOW; each is ``{"ClientStatus": {...}}`` with
``timestamp``, ``event``, ``client_name``, ``connection_name``, ``auth_id`` and, when they
apply, ``topic``, ``filter``, ``options``, ``sub_id``, ``query_id``, ``correlation_id`` and
``reason``. SOW statistics events
(https://docs.crankuptheamps.com/amps-user-guide/events/sow-stats) are published every
``SOWStatsInterval``, one per SOW topic: ``{"SOWStats": {message_type, topic, record_count,
timestamp}}``.

The reference server builds the events in JSON and delivers them to ``json`` subscriptions
only (content filters apply as on any topic). A regular-expression subscription receives them
only when its pattern starts with ``/AMPS/`` (or ``^/AMPS/``): a catch-all ``.*`` subscriber
does not get the server's internal traffic.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .delivery import Delivery
from .routing import RoutingIndex
from .session import CallLater, TimerHandle
from .sow import SowTopic
from .state import Connection, Route, Subscription
from .wire import format_timestamp

__all__ = ["CLIENT_STATUS", "SOW_STATS", "EventTopics"]

logger = logging.getLogger(__name__)

CLIENT_STATUS: Final = "/AMPS/ClientStatus"
SOW_STATS: Final = "/AMPS/SOWStats"
_EVENT_MT: Final = "json"


def _wants_events(sub: Subscription) -> bool:
    matcher = sub.matcher
    if not matcher.is_regex:
        return True
    return matcher.topic.startswith(("/AMPS/", "^/AMPS/"))


class EventTopics:
    """Publishes the event topics of one broker.

    Args:
        index: the subscriptions' routing index.
        delivery: sends the events.
        clock: wall clock (epoch seconds) for the ``timestamp`` fields.
        server_name: the instance name (part of ``connection_name``).
    """

    def __init__(
        self,
        index: RoutingIndex,
        delivery: Delivery,
        *,
        clock: Callable[[], float],
        server_name: str,
    ) -> None:
        self._index = index
        self._delivery = delivery
        self._clock = clock
        self._server_name = server_name
        self._timer: TimerHandle | None = None
        self._closed = False
        self.published: dict[str, int] = {CLIENT_STATUS: 0, SOW_STATS: 0}
        """Events published per topic (whether or not anyone subscribed)."""

    def _route(self, topic: str) -> Route:
        route = self._index.route(_EVENT_MT, topic)
        if not route:
            return route
        kept = []
        for conn, subs in route:
            wanted = tuple(s for s in subs if _wants_events(s))
            if wanted:
                kept.append((conn, wanted))
        return tuple(kept)

    def _publish(self, topic: str, doc: dict[str, Any]) -> None:
        self.published[topic] += 1
        route = self._route(topic)
        if route:
            data = json.dumps(doc, separators=(",", ":")).encode()
            self._delivery.deliver_plain(route, topic, data, None, _EVENT_MT)

    # ------------------------------------------------------------------ /AMPS/ClientStatus

    def connection_name(self, conn: Connection) -> str:
        """The ``connection_name`` of ``conn`` (instance, transport, connection number)."""
        return f"{self._server_name}-{conn.transport}-{conn.id}"

    def client_event(self, conn: Connection, event: str, **fields: Any) -> None:
        """Publish a ``/AMPS/ClientStatus`` event of ``conn`` (``fields``: the event's own)."""
        status: dict[str, Any] = {
            "timestamp": format_timestamp(self._clock()),
            "event": event,
            "client_name": conn.client_name,
            "connection_name": self.connection_name(conn),
            "auth_id": conn.user_id,
        }
        status.update(fields)
        self._publish(CLIENT_STATUS, {"ClientStatus": status})

    def command_event(self, conn: Connection, event: str, fields: Mapping[str, str | None]) -> None:
        """A command's event (``logon``, ``sow``), for :attr:`.hooks.BrokerHooks.client_status`."""
        self.client_event(conn, event, **fields)

    def subscription_event(self, event: str, sub: Subscription) -> None:
        """``subscribe`` / ``unsubscribe`` of ``sub``."""
        if not sub.conn.logged_on:
            return
        options = ",".join(k if v in ("", None) else f"{k}={v}" for k, v in sub.options.items())
        self.client_event(
            sub.conn,
            event,
            topic=sub.matcher.topic,
            filter=sub.filter_text,
            options=options or None,
            sub_id=sub.sub_id,
        )

    # ------------------------------------------------------------------ /AMPS/SOWStats

    def sow_stats(self, topics: Sequence[SowTopic]) -> None:
        """Publish one ``/AMPS/SOWStats`` message per SOW topic."""
        stamp = format_timestamp(self._clock())
        for sow in topics:
            if sow.closed:
                continue
            stats = {
                "message_type": sow.message_type,
                "topic": sow.topic,
                "record_count": len(sow),
                "timestamp": stamp,
            }
            self._publish(SOW_STATS, {"SOWStats": stats})

    def start_sow_stats(
        self, interval: float, topics: Callable[[], Sequence[SowTopic]], call_later: CallLater
    ) -> None:
        """Publish the SOW statistics every ``interval`` seconds."""

        def tick() -> None:
            if self._closed:
                return
            try:
                self.sow_stats(topics())
            except Exception:  # pragma: no cover - a closed store; the next interval retries
                logger.exception("SOW statistics failed")
            self._timer = call_later(interval, tick)

        self._timer = call_later(interval, tick)

    def close(self) -> None:
        """Stop the SOW statistics timer."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
