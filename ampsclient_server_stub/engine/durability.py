"""Durability: publishers' persisted acks, conflated and released by group commits.

A publish asking for a ``persisted`` ack (``s`` plus ``a=persisted``) is acknowledged
cumulatively: the ack's ``s`` is the highest sequence of that client name that may be called
persisted. A recorded publish waits for the group commit that makes its journal record
durable (and, with replication, for the sync destinations: ``BrokerHooks.ack_limit``); a
duplicate or an unrecorded publish is acknowledged at once. Acks are conflated: at most one
per connection per ``ack_conflation`` interval, or after :data:`PERSISTED_ACK_BATCH`
messages, and always before a ``flush`` ack.

A ``flush`` is answered once everything its client published before is durable (and, with a
persisted ack requested, everything the server received).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ampsclient.protocol.header import Header

from .hooks import BrokerHooks
from .session import CallLater
from .state import Clients, ClientState, Connection
from .txlog import TxLog
from .wire import (
    COMPLETED,
    PERSISTED,
    PROCESSED,
    RECEIVED,
    ack_flags,
    persisted_ack,
    send_ack,
    send_acks,
)

__all__ = ["PERSISTED_ACK_BATCH", "Durability"]

PERSISTED_ACK_BATCH: Final = 256
"""A persisted ack is sent at once after this many persisted publishes."""


class Durability:
    """Publishers' persisted acks and deferred flushes.

    Args:
        clients: the connection registry (acks go to the connection of a client name).
        txlog: the transaction log, when messages are recorded.
        hooks: ``ack_limit`` is read at each durable point.
        request_sync: asks for a group commit.
        call_later: timers for conflated acks; ``None``: every ack goes out at once.
    """

    def __init__(
        self,
        clients: Clients,
        *,
        txlog: TxLog | None,
        hooks: BrokerHooks,
        request_sync: Callable[[], None],
        call_later: CallLater | None,
    ) -> None:
        self._clients = clients
        self._txlog = txlog
        self._hooks = hooks
        self._request_sync = request_sync
        self._call_later = call_later
        self._waiting: dict[str, ClientState] = {}
        self._flush_waits: list[tuple[int, Connection, Header]] = []
        """``flush`` commands asking for a persisted ack: (journal index, connection, header)."""

    def wait_durable(self, state: ClientState, index: int, seq: int) -> None:
        """Publish ``seq`` of ``state`` is journal record ``index``: its ack waits for it."""
        state.durable_wait.append((index, seq))
        self._waiting[state.name] = state

    def sequence_moved(self, state: ClientState) -> None:
        """``state.last_seq`` moved without a record of this server's client (replication):
        ``ack_seq`` follows at the next durable point."""
        self._waiting[state.name] = state

    def note_persisted(self, conn: Connection, index: int | None = None, seq: int = 0) -> None:
        """A publish asking for a persisted ack was accepted (or was a duplicate).

        ``index`` is its journal index when it was recorded: the ack then waits for the group
        commit that makes it durable (:meth:`on_durable`). Otherwise everything accepted so
        far is acknowledged, conflated, unless recorded publishes are still pending.
        """
        state = conn.state
        assert state is not None
        conn.persist_pending = True
        if index is not None:  # the ingest already asked for the group commit that covers it
            self.wait_durable(state, index, seq)
            return
        if state.durable_wait:
            return  # covered by the ack that follows the pending group commit
        state.ack_seq = state.last_seq
        conn.persist_count += 1
        if conn.persist_count >= PERSISTED_ACK_BATCH or self._call_later is None:
            self.flush_persisted(conn)
        elif conn.persist_timer is None:
            conn.persist_timer = self._call_later(
                conn.ack_conflation, lambda: self._persist_timer_fired(conn)
            )

    def _persist_timer_fired(self, conn: Connection) -> None:
        conn.persist_timer = None
        if not conn.closed:
            self.flush_persisted(conn)

    def flush_persisted(self, conn: Connection) -> None:
        """Send the pending conflated persisted ack of ``conn`` now (if any)."""
        timer = conn.persist_timer
        if timer is not None:
            conn.persist_timer = None
            timer.cancel()
        if not conn.persist_pending or conn.state is None:
            return
        conn.persist_pending = False
        conn.persist_count = 0
        conn.session.send(persisted_ack(conn.state.ack_seq))

    def on_durable(self, durable: int) -> None:
        """A group commit made every record up to ``durable`` durable: persisted acks go
        out and deferred flushes are answered."""
        limit = self._hooks.ack_limit
        acks_through = durable if limit is None else limit(durable)
        for name, state in list(self._waiting.items()):
            wait = state.durable_wait
            acked = None
            while wait and wait[0][0] <= acks_through:
                acked = wait.popleft()[1]
            if acked is not None and acked > state.ack_seq:
                state.ack_seq = acked
            if not wait:
                del self._waiting[name]
                if state.last_seq > state.ack_seq:
                    state.ack_seq = state.last_seq  # duplicates and unrecorded publishes
            conn = self._clients.connection(name)
            if conn is None or conn.closed:
                continue
            if acked is not None:
                conn.persist_pending = True
            self.flush_persisted(conn)
            if not wait and conn.deferred_flush:
                deferred, conn.deferred_flush = conn.deferred_flush, []
                for hdr in deferred:
                    self._flush_ack(conn, hdr)
        if self._flush_waits:
            ready = [w for w in self._flush_waits if w[0] <= acks_through]
            if ready:
                self._flush_waits = [w for w in self._flush_waits if w[0] > acks_through]
                for _target, waiting_conn, flush_hdr in ready:
                    if not waiting_conn.closed:
                        self._flush_ack(waiting_conn, flush_hdr)

    def flush(self, conn: Connection, hdr: Header) -> None:
        """The ``flush`` command: acked now, or once what it covers is durable."""
        state = conn.state
        if state is not None and state.durable_wait:
            # answer once everything this client published before is durable
            conn.deferred_flush.append(hdr)
            self._request_sync()
            return
        txlog = self._txlog
        if txlog is not None and ack_flags(hdr) & PERSISTED:
            # a persisted ack means everything received so far is durable (plain publishes too)
            target = txlog.journal.last_index
            if txlog.journal.durable_index < target:
                self._flush_waits.append((target, conn, hdr))
                self._request_sync()
                return
        self._flush_ack(conn, hdr)

    def _flush_ack(self, conn: Connection, hdr: Header) -> None:
        self.flush_persisted(conn)
        flags = ack_flags(hdr)
        send = conn.session.send
        send_acks(send, hdr, flags & (RECEIVED | PROCESSED))
        if flags & PERSISTED:
            send_ack(send, hdr, "persisted")
        send_acks(send, hdr, flags & COMPLETED)
