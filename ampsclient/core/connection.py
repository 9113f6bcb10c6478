"""The sans-I/O connection core: bytes and time in, bytes and events out.

:class:`ClientCore` holds a connection's state and logic and does no I/O: no socket, no event
loop, no thread. Its user (a *wing*: :class:`~ampsclient.client.AsyncClient` on asyncio, and
through it the HA client and the sync facade) feeds it what the transport read
(:meth:`ClientCore.receive_data` or, already split into frame payloads,
:meth:`ClientCore.receive_payloads`), the time (:meth:`ClientCore.heartbeat_tick`) and the
transport's fate (:meth:`ClientCore.connection_made`, :meth:`ClientCore.connection_lost`); it
writes what :meth:`ClientCore.data_to_send` returns (the asyncio wing reads the same queue,
:attr:`ClientCore.outq`, and is told by the ``on_send`` hook when frames were queued), and it
takes what happened with :meth:`ClientCore.events_received`: typed, frozen events
(:mod:`ampsclient.core.event_types`) such as ``LogonAcked``, ``CommandAcked``,
``StreamEnded``, ``HeartbeatTimedOut``, ``ConnectionLost``, on which it acts (resolve a
future, end a stream, close the transport, tell the listeners). The core never waits, never
resolves a future and never calls a listener.

The core owns:

* the state (:class:`~ampsclient.core.state.State`), moved only through the transition table
  (each move is a ``StateChanged`` event);
* the logon and its ack (``LogonAcked``);
* command correlation (:mod:`ampsclient.core.correlation`): every command that waits for acks
  has a :class:`Pending` entry keyed by its command id; the terminal-ack rules say which ack
  ends it;
* heartbeats and their timeout (:mod:`ampsclient.core.heartbeat`);
* the bookkeeping of subscriptions (routes), queries and message streams.

Deliveries are the one thing the core hands over directly: each message for a subscription,
query or requested ack goes straight to its handler (for a subscription, from the C
``deliver`` loop of :mod:`ampsclient._accel` or its twin :func:`~ampsclient.core.routes.deliver`),
as do the messages no handler took (the last-chance handler) and the global ``ack`` and
``heartbeat`` handlers. An event object per delivered message would cost an allocation, a
queue append and a dispatch for each of millions of messages a second, roughly doubling the
receive path's cost; a handler is the application's own choice of what to do per message, so
calling it is the delivery. Everything else (acks that resolve waiting calls, streams ending,
persisted acks, timeouts, the connection going away, a handler's exception) is an event.
"""

from __future__ import annotations

import collections
import logging
import struct
from collections.abc import Callable
from typing import Any, Final

from .. import _accel
from ..calls import Handler
from ..command import Command
from ..exceptions import AMPSError, DisconnectedError, error_for_reason
from ..protocol.acks import AckType, parse_ack_types
from ..protocol.framing import DEFAULT_MAX_FRAME_SIZE, TcpFramer, oversized
from ..protocol.header import encode_header
from ..protocol.message import Message, split_sow_batch
from .correlation import SUBSCRIBE_COMMANDS, Pending, Sink, ack_outcome, track
from .event_types import (
    CommandAcked,
    CommandFailed,
    ConnectionLost,
    Event,
    HandlerFailed,
    HeartbeatTimedOut,
    LogonAcked,
    PublishPersisted,
    StateChanged,
    StreamEnded,
    SubscriptionPersisted,
)
from .heartbeat import HEARTBEAT_BEAT, Heartbeat
from .publish import encode_publish
from .routes import BM_NEXT, Routes, deliver, deliver_stream
from .state import OPEN_STATES, State, check_transition

__all__ = [
    "CLIENT_VERSION",
    "HEARTBEAT_BEAT",
    "SUBSCRIBE_COMMANDS",
    "ClientCore",
    "Pending",
    "Sink",
]

log = logging.getLogger("ampsclient.client")

CLIENT_VERSION: Final = "5.3.5.0.ampsclient-0.1.0:python"
"""Sent as ``version`` in the logon (the server may use it to pick protocol features)."""

_P_PREFIX: Final = b'{"c":"p"'
_SIDS_KEY: Final = b'"sids":"'
_pack_len = struct.Struct(">I").pack


class ClientCore:
    """One connection's state and logic, without I/O.

    Args:
        message_type: the class of delivered messages (a :class:`Message` subclass).
        on_send: called after frames were queued in :attr:`outq` (the wing wakes its writer);
            default: nothing (read them with :meth:`data_to_send`).
        max_frame_size: largest frame :meth:`receive_data` accepts.
    """

    def __init__(
        self,
        *,
        message_type: type[Message] = Message,
        on_send: Callable[[], None] | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.state = State.DISCONNECTED
        """The connection's state; moved only through the transition table."""
        self.outq: collections.deque[bytes] = collections.deque()
        """Frames (4-byte length + payload) waiting to be written, oldest first."""
        self.events: list[Event] = []
        """Events not yet taken by :meth:`events_received`, oldest first (a wing may test it
        for emptiness; only the core appends)."""
        self.persisted_events = False
        """Whether persisted acks that answer no command become events (an HA wing tracks
        them); otherwise they go to the last-chance handler at once, in stream order with
        the deliveries around them, as any unrouted message does."""
        self.on_sub_persisted: Callable[[Message], None] | None = None
        """Takes a subscription's persisted ack at once, in stream order with the deliveries
        around it (as an event after the whole read, an HA wing's bookmark store saw it after
        later messages: issue #32); ``None``: it becomes an event like a publish's."""
        self.on_send: Callable[[], None] | None = on_send
        """Called after a frame was queued."""
        self.message_type = message_type
        """Deliveries are instances of this class."""
        self.pending: dict[str, Pending] = {}
        """Command id -> the command waiting for acks."""
        self.routes = Routes()
        """Subscription id -> handler (with the receive fast path's cache)."""
        self.queries: dict[str, Handler] = {}
        """Query id -> handler of its ``sow`` records and group markers."""
        self.query_cids: dict[str, str] = {}
        """Query id -> command id."""
        self.streams: dict[str, Sink] = {}
        """Subscription id -> its message stream."""
        self.keep_routes_on_disconnect = False
        """Keep subscriptions and their streams across a disconnect (the HA client re-places
        them); else they end with the disconnect's error."""
        self.last_chance: Handler | None = None
        """Receives what no other handler took."""
        self.global_handlers: dict[str, Handler] = {}
        """``"ack"``/``"heartbeat"`` -> a handler that sees every such message."""
        self.transport_filter: Callable[[bytes, bool], Any] | None = None
        """Sees each received payload (``True``); the wing shows it the bytes it writes."""
        self.logon_ack: Message | None = None
        """The last successful logon ack."""
        self.server_version: str | None = None
        """The ``version`` of the last logon ack."""
        self.stats = {
            "messages_received": 0,
            "frames_received": 0,
            "frames_sent": 0,
            "caller_writes": 0,
        }
        """Counters (the writer counts ``frames_sent`` as it writes, and ``caller_writes``:
        the sends a publisher thread made itself, ``FrameWriter.write_from_caller``)."""
        self.heartbeat = Heartbeat()
        """Heartbeat settings and schedule."""
        self.rx = False
        """Something arrived since the last :meth:`heartbeat_tick`."""
        self._cid = 0
        self._max_frame_size = max_frame_size
        self._framer = TcpFramer(max_frame_size=max_frame_size)

    # ----------------------------------------------------------------------- state / output

    @property
    def is_open(self) -> bool:
        """``True`` while a transport is open (commands may be sent)."""
        return self.state in OPEN_STATES

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats (0: none)."""
        return self.heartbeat.interval

    @property
    def heartbeat_timeout(self) -> float:
        """Seconds of silence from the server after which the connection is dead."""
        return self.heartbeat.timeout

    def _set_state(self, wanted: State) -> None:
        old = self.state
        self.state = check_transition(old, wanted)
        self.events.append(StateChanged(old, wanted))

    def events_received(self) -> list[Event]:
        """Take every queued event, oldest first."""
        events = self.events
        self.events = []
        return events

    def next_cid(self) -> str:
        """A new command id."""
        self._cid += 1
        return f"auto{self._cid}"

    def send_payload(self, payload: bytes, *, notify: bool = True) -> None:
        """Queue one payload as a frame; ``notify``: call :attr:`on_send` (the writer's
        wake-up; not needed by a caller that writes the queue itself right after).

        Raises:
            DisconnectedError: no transport is open.
        """
        if self.state not in OPEN_STATES:
            raise DisconnectedError("not connected")
        self.outq.append(_pack_len(len(payload)) + payload)
        if notify and self.on_send is not None:
            self.on_send()

    def publish(
        self,
        topic: str,
        data: bytes,
        *,
        command: str = "p",
        sequence: int | None = None,
        ack_type: str | None = None,
        expiration: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
    ) -> None:
        """Queue one publish (``command`` ``"p"`` or ``"delta_publish"``), spelled by
        :func:`~ampsclient.core.publish.encode_publish` as every publish path spells it.

        :attr:`on_send` is not called: a publish does not end a publish batch (the asyncio
        wing's writer schedules itself; a sans-I/O user reads :meth:`data_to_send`).

        Raises:
            DisconnectedError: no transport is open.
            LocalProtocolError: text UTF-8 cannot encode (nothing is queued).
        """
        if self.state not in OPEN_STATES:
            raise DisconnectedError("not connected")
        self.outq.append(
            encode_publish(
                command,
                topic,
                data,
                sequence=sequence,
                ack_type=ack_type,
                expiration=expiration,
                correlation_id=correlation_id,
                sow_key=sow_key,
            )
        )

    def data_to_send(self) -> list[bytes]:
        """Take every queued frame, oldest first."""
        out = list(self.outq)
        self.outq.clear()
        return out

    def report(self, exc: BaseException) -> None:
        """A handler raised ``exc``: log it and queue a :class:`HandlerFailed`."""
        log.error("exception in a handler: %r", exc, exc_info=exc)
        self.events.append(HandlerFailed(exc))

    def _end(self, stream: Sink, error: BaseException | None = None) -> None:
        self.events.append(StreamEnded(stream, error))

    def _end_all(self, streams: list[Sink], error: BaseException | None) -> None:
        """End each of ``streams`` once (a subscription's stream is in two tables)."""
        for stream in {id(stream): stream for stream in streams}.values():
            self._end(stream, error)

    # ------------------------------------------------------------------------ lifecycle

    def connection_made(self) -> None:
        """A transport is open (the state moves to CONNECTED)."""
        self._set_state(State.CONNECTED)
        self.outq.clear()
        self._framer = TcpFramer(max_frame_size=self._max_frame_size)

    def send_logon(
        self,
        *,
        client_name: str,
        user: str | None,
        password: str | None,
        message_type: str,
        options: str | None = None,
        correlation_id: str | None = None,
        cid: str | None = None,
    ) -> str:
        """Send a logon (state LOGGING_ON); its ack comes back as a :class:`LogonAcked`.
        Returns its command id."""
        self._set_state(State.LOGGING_ON)
        cid = cid or self.next_cid()
        fields: dict[str, Any] = {
            "c": "logon",
            "cid": cid,
            "client_name": client_name,
            "user_id": user,
            "mt": message_type,
            "a": "processed",
            "version": CLIENT_VERSION,
            "pw": password,
            "o": options,
            "x": correlation_id,
        }
        self.pending[cid] = Pending(cid, "logon", True, None, AckType.NONE, AckType.PROCESSED)
        self.send_payload(encode_header(fields))
        return cid

    def _logon_acked(self, pending: Pending, ack: Message) -> None:
        """Apply a logon's ack: ``"success"`` (LOGGED_ON), ``"retry"`` (the authenticator is
        asked again; still LOGGING_ON) or ``"failure"`` (back to CONNECTED)."""
        self.pending.pop(pending.cid, None)
        status = ack.status or "success"
        if status == "success":
            self._set_state(State.LOGGED_ON)
            self.logon_ack = ack
            self.server_version = ack.get_version()
        elif status != "retry":
            status = "failure"
            self._set_state(State.CONNECTED)
        self.events.append(LogonAcked(pending.cid, status, ack))

    def logon_abandoned(self, cid: str) -> None:
        """The logon ``cid`` got no ack in time: forget it (back to CONNECTED if still open)."""
        self.pending.pop(cid, None)
        if self.state is State.LOGGING_ON:
            self._set_state(State.CONNECTED)

    def connection_lost(self, error: BaseException | None, *, by_user: bool = False) -> None:
        """The transport closed. Every awaited command fails (:class:`CommandFailed`);
        streams and routes end (:class:`StreamEnded`) unless :attr:`keep_routes_on_disconnect`
        (then only commands in flight end); then a :class:`ConnectionLost` carries the error
        the commands got (a :class:`DisconnectedError` wrapping ``error`` when it is not an
        :class:`AMPSError`). Nothing happens when nothing was open.
        """
        if self.state not in OPEN_STATES:
            return
        self._set_state(State.CLOSED if by_user else State.DISCONNECTED)
        err: BaseException = error or DisconnectedError("the connection was closed")
        if not isinstance(err, AMPSError):
            wrapped = DisconnectedError(str(err))
            wrapped.__cause__ = err
            err = wrapped
        events = self.events
        for pending in self.pending.values():
            if pending.wants_ack:
                events.append(CommandFailed(pending.cid, err))
        if not (self.keep_routes_on_disconnect and not by_user):
            # streams of commands still in flight (a query between its processed and completed
            # acks) end with the error too: take them before the table is emptied
            in_flight = [p.stream for p in self.pending.values() if p.stream is not None]
            self.pending.clear()
            self._end_all([*self.streams.values(), *in_flight], None if by_user else err)
            self.streams.clear()
            self.routes.clear()
            self.queries.clear()
            self.query_cids.clear()
        else:
            for cid, pending in list(self.pending.items()):
                if pending.sub_id is None:
                    self.pending.pop(cid, None)
                    if pending.stream is not None:
                        self._end(pending.stream, err)
        events.append(ConnectionLost(err, by_user))

    def end_streams(self) -> None:
        """End every stream quietly (the application is closing the connection): each is
        forgotten, so that closing the transport does not end it again."""
        in_flight = [p.stream for p in self.pending.values() if p.stream is not None]
        self._end_all([*self.streams.values(), *in_flight], None)
        self.streams.clear()
        for pending in self.pending.values():
            pending.stream = None

    def drop_subscription_commands(self) -> None:
        """Forget the commands of live subscriptions (their ids belonged to a lost
        connection; the subscriptions are about to be placed again)."""
        for cid, pending in list(self.pending.items()):
            if pending.sub_id is not None:
                del self.pending[cid]

    # ---------------------------------------------------------------------------- commands

    def request(
        self,
        name: str,
        fields: dict[str, Any],
        data: bytes = b"",
        *,
        awaited: AckType = AckType.PROCESSED,
    ) -> str:
        """Send a command whose ``awaited`` ack (processed unless told) comes back as a
        :class:`CommandAcked`; returns its command id.

        The wing calls :meth:`forget_command` once it stopped waiting.
        """
        cid = str(fields.get("cid") or self.next_cid())
        fields["cid"] = cid
        self.pending[cid] = Pending(cid, name, True, None, AckType.NONE, awaited, awaited=awaited)
        try:
            self.send_payload(encode_header(fields) + data)
        except BaseException:
            self.pending.pop(cid, None)
            raise
        return cid

    def forget_command(self, cid: str) -> None:
        """Stop tracking command ``cid``."""
        self.pending.pop(cid, None)

    def send_command(
        self,
        command: Command,
        handler: Handler | None,
        stream: Sink | None,
        *,
        route_handler: Handler | None = None,
    ) -> Pending | None:
        """Send ``command`` and track its acks and messages.

        Args:
            command: what to send (its ``cid``, ``sub_id`` and ``query_id`` are filled in).
            handler: receives messages and the acks the command asked for.
            stream: the stream the messages go to (``handler`` is then its ``put``).
            route_handler: what deliveries of a subscription go to (default ``handler``).

        Returns:
            The pending entry (its ``wants_ack`` says whether a :class:`CommandAcked` will
            come); ``None`` for a publish without acks (nothing to track).
        """
        cid = str(command.fields.get("cid") or self.next_cid())
        fields, pending = track(command, cid, handler, stream)
        payload = encode_header(fields) + (command.data or b"")
        if pending is None:
            self.send_payload(payload)
            if stream is not None:
                self._end(stream)
            return None
        self.pending[cid] = pending
        sub_id, query_id = pending.sub_id, pending.query_id
        if handler is not None:
            if sub_id is not None:
                self.routes[sub_id] = route_handler or handler
            if query_id is not None:
                self.queries[query_id] = handler
                self.query_cids[query_id] = cid
        if stream is not None:
            stream.command_id, stream.sub_id, stream.query_id = cid, sub_id, query_id
            if sub_id is not None:
                self.streams[sub_id] = stream
        try:
            self.send_payload(payload)
        except BaseException as exc:
            self.forget(pending, exc if isinstance(exc, AMPSError) else None)
            raise
        return pending

    def command_acked(self, pending: Pending, ack: Message) -> None:
        """The processed ack of ``pending`` arrived (the wing got its :class:`CommandAcked`).

        Raises:
            CommandError: the server refused the command (it is forgotten).
        """
        if ack.status == "failure":
            self.forget(pending)
            raise error_for_reason(ack.reason, ack=ack)
        if pending.terminal == AckType.NONE and pending.sub_id is None:
            self.pending.pop(pending.cid, None)

    def command_abandoned(self, pending: Pending, *, timed_out: bool) -> None:
        """The wing stopped waiting for ``pending``; after a timeout a subscription is
        cancelled on the server too (its ack may still come)."""
        self.forget(pending)
        if timed_out and pending.sub_id is not None and self.is_open:
            self.send_unsubscribe(pending.sub_id)

    def forget(self, pending: Pending, error: BaseException | None = None) -> None:
        """Stop tracking ``pending``: its routes go, its stream ends (with ``error``)."""
        self.pending.pop(pending.cid, None)
        if pending.sub_id is not None:
            self.routes.pop(pending.sub_id, None)
            self.streams.pop(pending.sub_id, None)
        if pending.query_id is not None:
            self.queries.pop(pending.query_id, None)
            self.query_cids.pop(pending.query_id, None)
        if pending.stream is not None:
            self._end(pending.stream, error)

    def send_unsubscribe(self, sub_id: str) -> None:
        """Queue an ``unsubscribe`` of ``sub_id``."""
        self.send_payload(
            encode_header({"c": "unsubscribe", "cid": self.next_cid(), "sub_id": sub_id})
        )

    def close_stream(self, stream: Sink, put: Handler) -> None:
        """The application closed ``stream`` (whose route handler is ``put``): forget it and
        unsubscribe its subscription."""
        sub_id = stream.sub_id
        if sub_id is not None and self.streams.get(sub_id) is stream:
            self.routes.pop(sub_id, None)
            self.streams.pop(sub_id, None)
            if self.is_open:
                try:
                    self.send_unsubscribe(sub_id)
                except AMPSError:
                    pass
        qid = stream.query_id
        if qid is not None and self.queries.get(qid) == put:
            self.queries.pop(qid, None)
            self.query_cids.pop(qid, None)
        if stream.command_id is not None:
            self.pending.pop(stream.command_id, None)

    def unsubscribe(self, sub_id: str = "all") -> None:
        """Forget one subscription (or ``"all"``), end its stream, and, when connected, send
        the ``unsubscribe``."""
        for sid in list(self.routes) if sub_id == "all" else [sub_id]:
            self.routes.pop(sid, None)
            stream = self.streams.pop(sid, None)
            if stream is not None:
                self._end(stream)
            for cid, pending in list(self.pending.items()):
                if pending.sub_id == sid:
                    self.pending.pop(cid, None)
                    if pending.query_id is not None:
                        self.queries.pop(pending.query_id, None)
                        self.query_cids.pop(pending.query_id, None)
        if self.is_open:
            self.send_unsubscribe(sub_id)

    def forget_routes(self, sub_ids: list[str]) -> None:
        """Drop the routes and streams of ``sub_ids`` without telling the server (it has
        none: the connection is down)."""
        for sid in sub_ids:
            self.routes.pop(sid, None)
            stream = self.streams.pop(sid, None)
            if stream is not None:
                self._end(stream)

    def add_message_handler(
        self, command_id: str, handler: Handler, acks: str | int = "", is_subscribe: bool = False
    ) -> None:
        """Route what the server sends for ``command_id`` to ``handler`` (official API)."""
        self.pending[command_id] = Pending(
            command_id,
            "",
            False,
            handler,
            parse_ack_types(acks) if isinstance(acks, str) else AckType(acks),
            AckType.NONE,
            None,
            command_id if is_subscribe else None,
        )
        if is_subscribe:
            self.routes[command_id] = handler

    def remove_message_handler(self, command_id: str) -> bool:
        """Stop routing ``command_id``; ``True`` if a handler was registered."""
        found = self.pending.pop(command_id, None) is not None
        return self.routes.pop(command_id, None) is not None or found

    # ---------------------------------------------------------------------------- heartbeats

    def set_heartbeat(self, interval: float, timeout: float | None = None) -> None:
        """Heartbeats every ``interval`` s; dead after ``timeout`` s (default ``2*interval``)."""
        self.heartbeat.set(interval, timeout)

    def start_heartbeat(self, now: float) -> float | None:
        """Ask the server for heartbeats (when set and connected). Returns how often (seconds)
        the wing should call :meth:`heartbeat_tick`, or ``None`` for no heartbeat."""
        if not self.is_open:
            return None
        started = self.heartbeat.start(now)
        if started is None:
            return None
        options, every = started
        self.send_payload(encode_header({"c": "heartbeat", "o": options}))
        self.rx = False
        return every

    def heartbeat_tick(self, now: float) -> None:
        """The time is ``now``: send a beat when due; queue a :class:`HeartbeatTimedOut` when
        the server has been silent longer than the timeout (the wing closes the connection)."""
        silence, beat = self.heartbeat.tick(now, self.rx)
        self.rx = False
        if silence is not None:
            log.warning("no traffic from the server for %.1f s: closing", silence)
            self.events.append(HeartbeatTimedOut(silence))
        elif beat and self.is_open:
            self.send_payload(HEARTBEAT_BEAT)

    # ----------------------------------------------------------------------------- receiving

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from a TCP stream (4-byte length framing), in any chunking.

        The receive hot path for tcp://: each payload is delivered as it is cut from
        ``data`` (:func:`~ampsclient.core.routes.deliver_stream`, one pass, no list of
        payloads); a payload split across reads is completed by the framer first.
        """
        framer = self._framer
        pos = framer.receive_head(data) if framer.buffered else 0
        held = framer.frames()
        if held:
            self.receive_payloads(held)
        end = len(data)
        if pos >= end:
            return
        if self.transport_filter is not None or type(data) is not bytes:
            framer.receive_data(data[pos:])
            payloads = framer.frames()
            if payloads:
                self.receive_payloads(payloads)
            return
        self.rx = True
        routes = self.routes
        limit = framer.max_frame_size
        pos, count = (_accel.deliver_stream or deliver_stream)(
            data,
            pos,
            limit,
            routes.cache,
            routes.lengths,
            self.message_type,
            self.receive_payload,
            self.report,
            BM_NEXT,
        )
        self.stats["frames_received"] += count
        if routes.filled:
            self._sinks_filled()
        if pos < 0:
            (n,) = struct.unpack_from(">I", data, -1 - pos)
            raise oversized(data, -1 - pos, n, limit)
        if pos < end:
            framer.receive_data(data[pos:])  # the incomplete tail: held for the next read

    def receive_payloads(self, payloads: list[bytes]) -> None:
        """Feed frame payloads: the receive hot path. A delivery whose header prefix was seen
        before is routed with one slice and one dict lookup, without parsing anything."""
        self.rx = True
        self.stats["frames_received"] += len(payloads)
        if self.transport_filter is not None:
            for payload in payloads:
                self.transport_filter(payload, True)
        routes = self.routes
        (_accel.deliver or deliver)(
            payloads,
            routes.cache,
            routes.lengths,
            self.message_type,
            self.receive_payload,
            self.report,
            BM_NEXT,
        )
        if routes.filled:
            self._sinks_filled()

    def _sinks_filled(self) -> None:
        """After a pass of deliveries: each payload sink's ``sink_filled``
        (:meth:`Routes.learn`)."""
        for filled in tuple(self.routes.filled):
            try:
                filled()
            except Exception as exc:
                self.report(exc)

    def receive_payload(self, payload: bytes) -> None:
        """Feed one payload the fast path did not route."""
        self.rx = True
        if payload.startswith(_P_PREFIX):
            i = payload.find(_SIDS_KEY)
            if i >= 0:
                j = payload.find(b'"', i + 8)
                if j > 0:
                    sids = payload[i + 8 : j].decode()
                    handler = self.routes.get(sids)
                    if handler is not None and "," not in sids:
                        self.routes.learn(payload[: j + 1], sids, handler)
                    self._deliver(payload, sids)
                    return
        try:
            message = self.message_type(payload)
            c = message.command
        except AMPSError as exc:
            log.warning("dropping a malformed frame: %s", exc)
            return
        try:
            if c == "publish" or c == "oof":
                routed = message.sub_ids
                if routed:
                    self._deliver(payload, routed, message)
                else:
                    self.unrouted(message)
            elif c == "ack":
                self._on_ack(message)
            elif c == "sow":
                self._on_sow(payload)
            elif c == "group_begin" or c == "group_end":
                self._on_group(message, c)
            elif c == "heartbeat":
                self._on_heartbeat(message)
            else:
                self.unrouted(message)
        except Exception as exc:
            self.report(exc)

    def _deliver(self, payload: bytes, sids: str, message: Message | None = None) -> None:
        self.stats["messages_received"] += 1
        routes = self.routes
        if "," not in sids:
            handler = routes.get(sids)
            if handler is None:
                self.unrouted(message or self.message_type(payload))
                return
            try:
                handler(self.message_type(payload, sids))
            except Exception as exc:
                self.report(exc)
            return
        for sid in sids.split(","):
            handler = routes.get(sid)
            m = self.message_type(payload, header=message.header if message else None, sub_id=sid)
            if handler is None:
                self.unrouted(m)
                continue
            try:
                handler(m)
            except Exception as exc:
                self.report(exc)

    def unrouted(self, message: Message) -> None:
        """Give ``message`` to the last-chance handler (if any)."""
        handler = self.last_chance
        if handler is None:
            log.debug("unrouted message: %r", message)
            return
        try:
            handler(message)
        except Exception as exc:
            self.report(exc)

    def _on_sow(self, payload: bytes) -> None:
        outer, records = split_sow_batch(payload)
        qid = outer.get("query_id") or outer.get("sub_id") or outer.get("cid")
        handler = self.queries.get(str(qid)) if qid is not None else None
        for record in records:
            self.stats["messages_received"] += 1
            if handler is None:
                self.unrouted(record)
                continue
            try:
                handler(record)
            except Exception as exc:
                self.report(exc)

    def _on_group(self, message: Message, c: str) -> None:
        qid = message.query_id or message.command_id
        handler = self.queries.get(qid) if qid is not None else None
        if handler is None:
            self.unrouted(message)
            return
        try:
            handler(message)
        except Exception as exc:
            self.report(exc)
        if c == "group_end" and qid is not None:
            cid = self.query_cids.get(qid)
            pending = self.pending.get(cid) if cid is not None else None
            if (
                pending is not None
                and pending.name == "sow"
                and not (pending.terminal & AckType.COMPLETED)
            ):
                self._complete(pending)

    def _on_heartbeat(self, message: Message) -> None:
        g = self.global_handlers.get("heartbeat")
        if g is not None:
            g(message)
        if self.is_open and message.options != "beat":
            self.send_payload(HEARTBEAT_BEAT)

    def _ack_pending(self, hdr: dict[str, Any]) -> Pending | None:
        cid = hdr.get("cid")
        if cid is not None:
            return self.pending.get(str(cid))
        qid = hdr.get("query_id")
        qcid = self.query_cids.get(str(qid)) if qid is not None else None
        return self.pending.get(qcid) if qcid is not None else None

    def _on_ack(self, message: Message) -> None:
        g = self.global_handlers.get("ack")
        if g is not None:
            g(message)
        hdr = message.header
        pending = self._ack_pending(hdr)
        if pending is None:
            if self.persisted_events and hdr.get("a", "") == "persisted":
                if "sub_id" in hdr and self.on_sub_persisted is not None:
                    try:
                        self.on_sub_persisted(message)
                    except Exception as exc:
                        self.report(exc)
                    return
                self.events.append(
                    SubscriptionPersisted(message) if "sub_id" in hdr else PublishPersisted(message)
                )
                return
            self.unrouted(message)
            return
        if pending.name == "logon":
            self._logon_acked(pending, message)
            return
        if message.status == "failure" and pending.stream is not None and not pending.wants_ack:
            # the server failed a command it had acknowledged (the reference server's sow
            # handler raising after its processed ack): its stream ends with the error, or
            # it waits forever for an end that never comes (the command timeout is over)
            self.forget(pending, error_for_reason(message.reason, ack=message))
            return
        outcome = ack_outcome(pending, message.ack_type)
        pending.seen |= message.ack_type & pending.terminal
        if outcome.resolves:
            pending.wants_ack = False  # got it: a disconnect no longer fails it
            self.events.append(CommandAcked(pending.cid, message))
        if outcome.unrouted:
            self.unrouted(message)  # requested, but nobody to give it to
        elif outcome.to_handler:
            try:
                pending.handler(message)  # type: ignore[misc]
            except Exception as exc:
                self.report(exc)
        elif outcome.to_stream:
            pending.stream.put(message)  # type: ignore[union-attr]
        if outcome.ends:
            self._complete(pending)

    def _complete(self, pending: Pending) -> None:
        self.pending.pop(pending.cid, None)
        if pending.sub_id is None and pending.query_id is not None:
            self.queries.pop(pending.query_id, None)
            self.query_cids.pop(pending.query_id, None)
        if pending.stream is not None and pending.sub_id is None:
            self._end(pending.stream)
