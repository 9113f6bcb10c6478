"""Where deliveries go: subscription routes and the receive hot path (no I/O).

:class:`Routes` maps subscription ids to handlers and caches, for the fast path, the header
prefix of a delivery stream. :func:`deliver` is the Python twin of the C speedups' ``deliver``
(:mod:`ampsclient._accel`); a differential test runs both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

from ..calls import Handler
from ..protocol.framing import split_frames
from ..protocol.message import Message

__all__ = ["BM_NEXT", "Route", "Routes", "deliver", "deliver_stream"]

BM_NEXT: Final = b',"bm":"'
"""What follows the ``sids`` value of a delivery that carries a bookmark."""

_refcount: Final = sys.getrefcount

Route = tuple[
    str, "Handler | list[bytes]", bool, "Callable[[Message], int] | None", "Handler | None"
]
"""A learned route: sub id, handler (or a payload sink: a ``list`` the payload is appended
to), wants the bookmark, the bookmark store's ``log`` and the handler to call when ``log``
numbers the delivery (both ``None`` unless a bookmark store logs this subscription's
deliveries)."""


class Routes(dict[str, "Handler"]):
    """Subscription id -> handler, plus the receive fast path's cache.

    The cache maps the first bytes of a delivery, from ``{"c":"p"`` through the closing quote
    of its ``sids`` value, to the one subscription they route to. A stream of deliveries to one
    subscription shares that prefix, so routing costs one slice and one dict lookup. Any change
    of the routes clears it.
    """

    __slots__ = ("cache", "filled", "lengths")

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[bytes, Route] = {}
        """Delivery prefix -> route."""
        self.lengths: list[int] = []
        """The distinct prefix lengths in :attr:`cache` (at most 8)."""
        self.filled: list[Callable[[], None]] = []
        """The ``sink_filled`` of each payload sink in :attr:`cache`: called once after each
        pass of deliveries (a socket read), not per delivery."""

    def learn(self, prefix: bytes, sid: str, handler: Handler) -> None:
        """Remember that deliveries starting with ``prefix`` go to ``handler`` (sub ``sid``).

        A handler with a ``payload_sink`` (a ``list``) and a ``sink_filled`` (no arguments)
        is a payload sink: the fast path appends each routed payload (bytes, undecoded) to
        that list, builds no :class:`Message` and calls nothing per delivery, then calls
        ``sink_filled()`` once per pass. Deliveries the fast path does not route (the
        first one, before this) still reach the handler as messages.
        """
        if len(self.cache) >= 1024 or len(self.lengths) >= 8:
            self.forget()
        sink = getattr(handler, "payload_sink", None)
        if type(sink) is list:
            self.cache[prefix] = (sid, sink, False, None, None)
            self.filled.append(handler.sink_filled)  # type: ignore[attr-defined]
            if len(prefix) not in self.lengths:
                self.lengths.append(len(prefix))
            return
        # handlers of bookmark subscriptions (``bookmark_logged``) want the bookmark: read it
        # right after ``sids``; they offer the bookmark store's ``log`` (``bookmark_log``) and
        # the application's handler (``inner_handler``)
        wants_bm = bool(getattr(handler, "bookmark_logged", False))
        log = getattr(handler, "bookmark_log", None)
        inner = getattr(handler, "inner_handler", None)
        self.cache[prefix] = (sid, handler, wants_bm, log, inner)
        if len(prefix) not in self.lengths:
            self.lengths.append(len(prefix))

    def forget(self) -> None:
        """Empty the fast path's cache."""
        self.cache.clear()
        self.lengths.clear()
        self.filled.clear()

    def __setitem__(self, key: str, value: Handler) -> None:
        self.forget()
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.forget()
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        """Remove ``key`` (and empty the cache)."""
        self.forget()
        return super().pop(key, *default)

    def clear(self) -> None:
        """Remove every route (and empty the cache)."""
        self.forget()
        super().clear()


def deliver(
    payloads: list[bytes],
    cache: dict[bytes, Route],
    lengths: list[int],
    message_type: type[Message],
    unrouted: Callable[[bytes], None],
    report: Callable[[BaseException], None],
    bm_next: bytes,
) -> None:
    """Route ``payloads`` to handlers: the receive hot path.

    A payload whose first ``length`` bytes (for a ``length`` in ``lengths``) are a key of
    ``cache`` goes to that route's handler in a recycled ``message_type`` instance; any other
    goes to ``unrouted``. An :class:`Exception` raised by a handler goes to ``report``. For a
    route that wants the bookmark, a ``bm`` field right after the prefix (``bm_next``) is read
    into the message and the route's ``log`` decides whether its inner handler (logged) or
    its handler (a duplicate, or not logged) gets it. ``ampsclient/_speedups_src/deliver.c``
    has the same function in C (:mod:`ampsclient._accel`).

    The :class:`Message` handed to a handler is recycled for the next delivery when the
    handler kept no reference to it (its reference count is back to what this loop holds),
    the way CPython recycles the tuples of ``dict.items()``. A handler that stores the
    message, queues it or closes over it keeps a distinct object.

    A route to a payload sink (a ``list``, :meth:`Routes.learn`) gets the payload appended.
    """
    get = cache.get
    single = lengths[0] if len(lengths) == 1 else 0
    skip = len(bm_next)
    message = message_type()
    for payload in payloads:
        if single:
            route = get(payload[:single])
            length = single
        else:
            route = None
            for length in lengths:
                route = get(payload[:length])
                if route is not None:
                    break
        if route is None:
            unrouted(payload)
            continue
        handler = route[1]
        if isinstance(handler, list):
            handler.append(payload)
            continue
        try:
            if route[2] and payload.startswith(bm_next, length):
                end = payload.find(b'"', length + skip)
                if end > 0:
                    message.refill(payload, route[0], payload[length + skip : end].decode())
                    log = route[3]
                    if log is not None and log(message):
                        route[4](message)  # type: ignore[misc]
                    else:
                        handler(message)
                else:
                    message.refill(payload, route[0])
                    handler(message)
            else:
                message.refill(payload, route[0])
                handler(message)
        except Exception as exc:
            report(exc)
        if _refcount(message) > 2:
            message = message_type()


def deliver_stream(
    data: bytes,
    pos: int,
    limit: int,
    cache: dict[bytes, Route],
    lengths: list[int],
    message_type: type[Message],
    unrouted: Callable[[bytes], None],
    report: Callable[[BaseException], None],
    bm_next: bytes,
) -> tuple[int, int]:
    """:func:`~ampsclient.protocol.framing.split_frames` and :func:`deliver` in one pass: every
    whole 4-byte-length-prefixed payload of ``data[pos:]`` is routed as :func:`deliver` does.

    Returns the offset of the first byte not consumed (``-1 - offset`` of a length prefix
    above ``limit``: the payloads before it are delivered) and how many payloads were
    delivered. ``ampsclient/_speedups_src/deliver.c`` has the same function in C, which
    delivers each payload as it cuts it and refills one payload's bytes for the next when
    nothing but the recycled message held them (:mod:`ampsclient._accel`).
    """
    payloads: list[bytes] = []
    pos = split_frames(data, pos, limit, payloads)
    deliver(payloads, cache, lengths, message_type, unrouted, report, bm_next)
    return pos, len(payloads)
