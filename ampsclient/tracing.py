"""OpenTelemetry instrumentation, opt in: ``pip install ampsclient[otel]``, then
:func:`instrument`.

Spans follow the OpenTelemetry messaging semantic conventions (v1.45,
https://opentelemetry.io/docs/specs/semconv/messaging/messaging-spans/): the span name is
``"{messaging.operation.name} {messaging.destination.name}"``:

* ``publish <topic>`` (kind PRODUCER, ``messaging.operation.type = "send"``): one per publish
  or delta publish, ended once the frame is queued;
* ``process <topic>`` (kind CONSUMER, ``"process"``): one per message handed to a handler of
  a subscription or query, around the handler; ``messaging.message.id`` is the bookmark when
  the message has one;
* ``sow <topic>`` (kind CLIENT, ``"receive"``): one per SOW query, from the command to its
  ``group_end``, with ``messaging.batch.message_count`` = the records it returned.

Each also has ``messaging.system = "amps"``, ``messaging.client.id`` (the client name) and
``server.address``/``server.port`` of the connection.

Trace context: AMPS messages have no free-form headers. With ``propagate="correlation_id"``
a publish *without* a correlation id is sent with the W3C ``traceparent`` of its publish span
as its correlation id (the ``x`` header); a publish with one keeps it (never overwritten). A
consumer whose message's correlation id is a ``traceparent`` makes its process span a child of
that publish span (and links to it). Without ``propagate``, nothing is sent.

Metrics (OpenTelemetry metrics API): ``messaging.client.sent.messages``,
``messaging.client.consumed.messages``, ``ampsclient.acks`` (ack messages handed to observed
handlers), ``ampsclient.failovers`` (reconnects: a logon after a disconnect) and, for an HA
client, the observable gauge ``ampsclient.publish_store.unpersisted``.

Nothing here is imported by ``import ampsclient``; OpenTelemetry is imported by
:func:`instrument` only. See docs/tracing.md.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from .core.events import ConnectionEvent, ConnectionState
from .exceptions import UsageError

if TYPE_CHECKING:
    from .calls import Handler
    from .client import AsyncClient
    from .command import Command
    from .protocol.message import Message

__all__ = ["Instrumentation", "TracingUnavailableError", "instrument"]

log = logging.getLogger("ampsclient.tracing")

SYSTEM = "amps"
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_SOW_COMMANDS = frozenset({"sow", "sow_and_subscribe", "sow_and_delta_subscribe"})


class TracingUnavailableError(UsageError):
    """OpenTelemetry is not installed: ``pip install ampsclient[otel]``."""


def _otel() -> tuple[Any, Any, Any]:
    try:
        trace = importlib.import_module("opentelemetry.trace")
        metrics = importlib.import_module("opentelemetry.metrics")
        propagate = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
    except ImportError as exc:
        raise TracingUnavailableError(
            "ampsclient.tracing needs OpenTelemetry: pip install 'ampsclient[otel]' "
            f"(the otel extra; {exc})"
        ) from exc
    return trace, metrics, propagate


def _async_client(client: Any) -> tuple[AsyncClient, Any]:
    """The :class:`AsyncClient` that sends and receives for ``client`` (a sync facade, an HA
    client or an AsyncClient), and the object whose connection events and store count."""
    from .client import AsyncClient

    outer = getattr(client, "async_client", client)  # the sync facades
    held = getattr(outer, "client", outer)  # an HA client holds its AsyncClient
    if not isinstance(held, AsyncClient):
        raise UsageError(f"instrument() takes an ampsclient client, not {type(client).__name__}")
    return held, outer


class Instrumentation:
    """The observer :func:`instrument` sets on a client (an
    :class:`~ampsclient.observer.ClientObserver`). :meth:`uninstrument` stops it."""

    def __init__(
        self,
        client: Any,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        propagate: Literal["correlation_id"] | None = None,
    ) -> None:
        if propagate not in (None, "correlation_id"):
            raise UsageError(f"propagate must be 'correlation_id' or None, not {propagate!r}")
        trace, metrics, tracecontext = _otel()
        from ._version import __version__

        self._trace = trace
        self._kind = trace.SpanKind
        self._client, self._outer = _async_client(client)
        self._tracer = trace.get_tracer("ampsclient", __version__, tracer_provider)
        meter = metrics.get_meter("ampsclient", __version__, meter_provider)
        self._propagator = tracecontext.TraceContextTextMapPropagator()
        self._propagate = propagate == "correlation_id"
        self._sent = meter.create_counter(
            "messaging.client.sent.messages", unit="{message}", description="Messages published"
        )
        self._consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Messages handed to observed handlers",
        )
        self._acks = meter.create_counter(
            "ampsclient.acks", unit="{ack}", description="Acks handed to observed handlers"
        )
        self._failovers = meter.create_counter(
            "ampsclient.failovers", unit="{reconnect}", description="Logons after a disconnect"
        )
        if hasattr(self._outer, "unpersisted_count"):
            meter.create_observable_gauge(
                "ampsclient.publish_store.unpersisted",
                callbacks=[self._observe_store],
                unit="{message}",
                description="Messages in the publish store the server has not persisted",
            )
        self._dropped = False
        self._attrs: dict[tuple[str | None, str | None, str, str], dict[str, Any]] = {}
        self._outer.add_connection_state_listener(self._on_state)
        self._outer.set_observer(self)  # an HA client also switches its C lane off

    def uninstrument(self) -> None:
        """Stop observing (the client's C publish lane stays off)."""
        self._outer.set_observer(None)
        try:
            self._outer.remove_connection_state_listener(self._on_state)
        except (AttributeError, ValueError):
            pass

    # ------------------------------------------------------------------ attributes

    def _attributes(self, topic: str | None, operation: str, kind: str) -> dict[str, Any]:
        """The span attributes (a fresh dict; built once per connection, topic and kind)."""
        uri = self._client.uri
        key = (uri, topic, operation, kind)
        attrs = self._attrs.get(key)
        if attrs is None:
            if len(self._attrs) >= 4096:
                self._attrs.clear()
            attrs = self._attrs[key] = {
                "messaging.system": SYSTEM,
                "messaging.operation.type": kind,
                "messaging.operation.name": operation,
                "messaging.client.id": self._client.name,
            }
            if topic:
                attrs["messaging.destination.name"] = topic
            if uri:
                from .uri import parse_uri

                parsed = parse_uri(uri)
                attrs["server.address"] = parsed.host
                attrs["server.port"] = parsed.port
        return dict(attrs)

    # ------------------------------------------------------------------ ClientObserver

    def publishing(self, topic: str, correlation_id: str | None) -> str | None:
        """Start and end the publish span; the correlation id to send."""
        attrs = self._attributes(topic, "publish", "send")
        if correlation_id is not None:  # "sometimes called correlation id" (semconv)
            attrs["messaging.message.conversation_id"] = correlation_id
        # started and ended here, not made current: nothing runs inside it
        span = self._tracer.start_span(
            f"publish {topic}", kind=self._kind.PRODUCER, attributes=attrs
        )
        if self._propagate and correlation_id is None:
            ctx = span.get_span_context()
            if ctx.is_valid:  # the W3C traceparent (version 00) of this span
                correlation_id = (
                    f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
                )
        span.end()
        self._sent.add(1, {"messaging.system": SYSTEM, "messaging.destination.name": topic})
        return correlation_id

    def handler_for(self, command: Command, handler: Handler) -> Handler:
        """A handler that traces each message, then calls ``handler``."""
        name = command.name
        topic = command.fields.get("t")
        sow: list[Any] = []  # [span, count] of a SOW query under way
        if name in _SOW_COMMANDS:
            span = self._tracer.start_span(
                f"sow {topic}",
                kind=self._kind.CLIENT,
                attributes=self._attributes(topic, "sow", "receive"),
            )
            sow.extend((span, 0))

        def observed(message: Message) -> Any:
            cmd = message.get_command()
            if cmd == "ack":
                self._acks.add(1, {"messaging.system": SYSTEM})
                return handler(message)
            if cmd == "group_end" or cmd == "group_begin":
                if cmd == "group_end" and sow:
                    sow[0].set_attribute("messaging.batch.message_count", sow[1])
                    sow[0].end()
                    sow.clear()
                return handler(message)
            if sow and cmd == "sow":
                sow[1] += 1
            return self._process(message, handler)

        return observed

    def _process(self, message: Message, handler: Handler) -> Any:
        topic = message.get_topic()
        attrs = self._attributes(topic, "process", "process")
        bookmark = message.get_bookmark()
        if bookmark:
            attrs["messaging.message.id"] = bookmark
        context = None
        links: list[Any] = []
        cid = message.get_correlation_id()
        if cid:
            attrs["messaging.message.conversation_id"] = cid
        if cid and self._propagate and _TRACEPARENT.match(cid):
            context = self._propagator.extract({"traceparent": cid})
            parent = self._trace.get_current_span(context).get_span_context()
            if parent.is_valid:
                links.append(self._trace.Link(parent))
            else:
                context = None
        self._consumed.add(1, {"messaging.system": SYSTEM, "messaging.destination.name": topic})
        with self._tracer.start_as_current_span(
            f"process {topic}",
            context=context,
            kind=self._kind.CONSUMER,
            attributes=attrs,
            links=links,
        ):
            return handler(message)

    # ------------------------------------------------------------------ connection events

    def _on_state(self, event: ConnectionEvent) -> None:
        state = getattr(event, "state", event)
        if state is ConnectionState.DISCONNECTED:
            self._dropped = True
        elif state is ConnectionState.LOGGED_ON and self._dropped:
            self._dropped = False
            self._failovers.add(1, {"messaging.system": SYSTEM})

    def _observe_store(self, options: Any) -> Iterable[Any]:
        metrics = importlib.import_module("opentelemetry.metrics")
        yield metrics.Observation(int(self._outer.unpersisted_count), {"messaging.system": SYSTEM})


def instrument(
    client: Any,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    propagate: Literal["correlation_id"] | None = None,
) -> Instrumentation:
    """Trace and count ``client``'s publishes and deliveries with OpenTelemetry.

    Args:
        client: an :class:`~ampsclient.AsyncClient`, :class:`~ampsclient.AsyncHAClient` or
            their sync facades. Instrument it before subscribing: handlers of commands sent
            earlier are not observed.
        tracer_provider: default: OpenTelemetry's global one.
        meter_provider: default: OpenTelemetry's global one.
        propagate: ``"correlation_id"``: carry the W3C ``traceparent`` in the correlation id
            of publishes that have none (see the module docstring).

    Raises:
        TracingUnavailableError: OpenTelemetry is not installed (the ``otel`` extra).
    """
    return Instrumentation(
        client, tracer_provider=tracer_provider, meter_provider=meter_provider, propagate=propagate
    )
