"""The routing index: which live (non-bookmark) subscriptions a (message type, topic) reaches.

Exact topics are a dict lookup, regex topics are tried in turn; the result, grouped by
connection (one delivery frame per connection), is cached per (message type, topic) until a
subscription comes or goes.
"""

from __future__ import annotations

from typing import Final

from .state import Connection, Route, Subscription

__all__ = ["RoutingIndex"]

_ROUTE_CACHE_LIMIT: Final = 100_000


class RoutingIndex:
    """Subscriptions fed by routing (bookmark subscriptions are fed by their replay)."""

    def __init__(self) -> None:
        self._exact: dict[tuple[str, str], list[Subscription]] = {}
        self._regex: dict[str, list[Subscription]] = {}
        self.routes: dict[tuple[str, str], Route] = {}
        """The route cache (read-only for callers: ``routes.get(key) or route(mt, topic)``)."""

    def add(self, sub: Subscription) -> None:
        """Route matching publishes to ``sub`` from now on."""
        if sub.matcher.is_regex:
            self._regex.setdefault(sub.message_type, []).append(sub)
        else:
            self._exact.setdefault((sub.message_type, sub.matcher.topic), []).append(sub)
        self.routes.clear()

    def remove(self, sub: Subscription) -> None:
        """Stop routing to ``sub`` (no-op when it is not in the index)."""
        if sub.matcher.is_regex:
            regex_group = self._regex.get(sub.message_type)
            if regex_group is not None and sub in regex_group:
                regex_group.remove(sub)
                if not regex_group:
                    del self._regex[sub.message_type]
        else:
            key = (sub.message_type, sub.matcher.topic)
            exact_group = self._exact.get(key)
            if exact_group is not None and sub in exact_group:
                exact_group.remove(sub)
                if not exact_group:
                    del self._exact[key]
        self.routes.clear()

    def route(self, mt: str, topic: str) -> Route:
        """The subscriptions a publish of type ``mt`` to ``topic`` reaches, by connection."""
        key = (mt, topic)
        route = self.routes.get(key)
        if route is None:
            route = self._build(mt, topic)
            if len(self.routes) >= _ROUTE_CACHE_LIMIT:
                self.routes.clear()
            self.routes[key] = route
        return route

    def _build(self, mt: str, topic: str) -> Route:
        subs = list(self._exact.get((mt, topic), ()))
        for sub in self._regex.get(mt, ()):
            if sub.matcher.matches(topic):
                subs.append(sub)
        if not subs:
            return ()
        grouped: dict[int, tuple[Connection, list[Subscription]]] = {}
        for sub in subs:
            entry = grouped.get(sub.conn.id)
            if entry is None:
                grouped[sub.conn.id] = (sub.conn, [sub])
            else:
                entry[1].append(sub)
        return tuple((conn, tuple(group)) for conn, group in grouped.values())
