"""The downstream side of a record: journal it under its original bookmark, update the SOW,
deliver it to local subscribers, and keep the publisher's dedup state right.

:meth:`Broker.apply_replicated <ampsclient_server_stub.engine.broker.Broker.apply_replicated>`
is the entry point; the work is here so the broker stays small.

* **Bookmark identity.** The record is appended with the *original* publisher id and
  sequence, so ``publisherId|sequence|`` names the same message on every instance (a
  bookmark subscriber can fail over and resume from the bookmark it last processed).
* **Dedup** is by ``(publisher id, sequence)``: a record whose sequence is not above the
  journal's :meth:`~ampsclient_server_stub.engine.journal.Journal.last_sequence` for that
  publisher is already here (replicated earlier, over another path, or published directly
  after a failover) and is dropped.
* **The client name's state.** The broker tracks dedup and the logon ack's ``s`` per client
  name, the journal per publisher id (a hash of the name). A publisher that fails over to
  this instance logs on and gets ``s`` from the journal. One that already has a state here
  (it was connected before) gets it raised: found by publisher id through an index of the
  broker's client states, so no name needs to travel.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ampsclient_server_stub.engine.filters import compile_filter
from ampsclient_server_stub.engine.journal import JournalRecord
from ampsclient_server_stub.engine.payload import decode
from ampsclient_server_stub.engine.topics import TopicError, compile_topic

if TYPE_CHECKING:  # pragma: no cover
    from ampsclient_server_stub.engine.broker import Broker, _ClientState

__all__ = ["ApplyOutcome", "ReplicatedRecord", "apply_replicated"]

logger = logging.getLogger(__name__)


class ReplicatedRecord(NamedTuple):
    """One record received over replication (fields already carry the updated path)."""

    publisher_id: int
    sequence: int
    command: str
    topic: str
    payload: bytes
    fields: dict[str, str | int]


@dataclass(frozen=True, slots=True)
class ApplyOutcome:
    """What :func:`apply_replicated` did: ``record`` is ``None`` unless it was journaled."""

    record: JournalRecord | None
    duplicate: bool = False
    unrecorded: bool = False


_DUPLICATE = ApplyOutcome(None, duplicate=True)
_UNRECORDED = ApplyOutcome(None, unrecorded=True)


_STATE_INDEX: weakref.WeakKeyDictionary[Broker, dict[int, _ClientState]] = (
    weakref.WeakKeyDictionary()
)
"""Per broker: publisher id -> client state (client states are only ever added)."""


def _state_for(broker: Broker, publisher_id: int) -> _ClientState | None:
    index = _STATE_INDEX.get(broker)
    states = broker._states
    if index is None or len(index) != len(states):
        index = {s.publisher_id: s for s in states.values()}
        _STATE_INDEX[broker] = index
    return index.get(publisher_id)


def apply_replicated(broker: Broker, rec: ReplicatedRecord) -> ApplyOutcome:
    """Apply ``rec`` to ``broker`` (see the module docstring). Never raises for bad data:
    a record that cannot be applied is logged and reported as unrecorded."""
    txlog = broker.txlog
    if txlog is None:
        return _UNRECORDED
    journal = txlog.journal
    pid = rec.publisher_id
    if rec.sequence <= journal.last_sequence(pid):
        return _DUPLICATE  # counted by the inbound stream, not as a client duplicate
    mt = str(rec.fields.get("mt", "json"))
    if not txlog.records(mt, rec.topic) and rec.command != "sow_delete":
        logger.debug("replicated record for unrecorded topic %r (%s) ignored", rec.topic, mt)
        return _UNRECORDED
    try:
        record = journal.append(
            publisher_id=pid,
            sequence=rec.sequence,
            topic=rec.topic,
            command=rec.command,
            payload=rec.payload,
            fields=rec.fields,
        )
    except Exception:
        logger.exception("replication: journal append failed for %s|%s|", pid, rec.sequence)
        return _UNRECORDED
    state = _state_for(broker, pid)
    if state is not None and rec.sequence > state.last_seq:
        state.last_seq = rec.sequence
        state.bookmark_seq = max(state.bookmark_seq, rec.sequence)
        broker._waiting[state.name] = state  # ack_seq follows at the next durable point
    try:
        if rec.command == "sow_delete":
            _apply_delete(broker, rec, mt, record.index)
        else:
            _apply_publish(broker, rec, mt, record)
    except Exception:
        logger.exception("replication: applying %s to %r failed", record.bookmark, rec.topic)
        # journaled but not in the SOW: the checkpoint must not pass it (re-applied at start)
        broker.hold_sow_checkpoints(rec.topic, record.index)
    broker.request_sync()
    live = broker._live
    if live:
        for replay in list(live):
            broker._pump(replay)
    return ApplyOutcome(record)


_broker_helpers: tuple[Any, Any, Any] | None = None


def _helpers() -> tuple[Any, Any, Any]:
    """``(_ABSENT, format_timestamp, _split_list)`` of the broker module (imported lazily:
    the broker imports this module lazily too)."""
    global _broker_helpers
    if _broker_helpers is None:
        from ampsclient_server_stub.engine import broker as module

        _broker_helpers = (module._ABSENT, module.format_timestamp, module._split_list)
    return _broker_helpers


def _apply_publish(broker: Broker, rec: ReplicatedRecord, mt: str, record: JournalRecord) -> None:
    broker.counters["publishes"] += 1
    topic = rec.topic
    x = rec.fields.get("x")
    correlation = None if x is None else str(x)
    sow = None
    for candidate in broker._sow_by_name.get(topic, ()):
        if candidate.message_type == mt:
            sow = candidate
            break
    if sow is None:
        route = broker._route(mt, topic)
        if route:
            broker._deliver_plain(route, topic, rec.payload, correlation, mt, record.bookmark)
        return
    absent, format_timestamp, _split = _helpers()
    doc = decode(mt, rec.payload)
    k = rec.fields.get("k")
    sow_key = str(k) if k is not None and doc is None else None
    key = sow.compute_key(doc, sow_key)
    prev_doc = sow.doc(key) if key in sow else absent
    now = record.timestamp / 1_000_000
    expiration = None
    e = rec.fields.get("e")
    if e is not None:
        try:
            seconds = float(e)
            expiration = now + seconds if seconds > 0 else None
        except ValueError:
            expiration = None
    sow_record, _previous = sow.publish(
        rec.payload,
        doc=doc,
        sow_key=sow_key,
        bookmark=record.bookmark,
        timestamp=format_timestamp(now),
        correlation_id=correlation,
        expiration=expiration,
        journal_index=record.index,
    )
    route = broker._route(mt, topic)
    if route:
        broker._deliver_sow(route, sow, sow_record, doc, prev_doc)


def _apply_delete(broker: Broker, rec: ReplicatedRecord, mt: str, journal_index: int) -> None:
    _split_list = _helpers()[2]
    try:
        matcher = compile_topic(rec.topic)
    except TopicError:
        return
    filter_text = rec.fields.get("filter")
    predicate = compile_filter(str(filter_text)) if filter_text else None
    keys_text = rec.fields.get("sow_keys")
    keys = _split_list(keys_text) if keys_text else None
    data_doc = decode(mt, rec.payload) if rec.payload else None
    k = rec.fields.get("k")
    sow_key = str(k) if k is not None else None
    for name, group in list(broker._sow_by_name.items()):
        if not matcher.matches(name):
            continue
        for sow in group:
            if sow.message_type != mt:
                continue
            gone = sow.delete(
                predicate,
                keys=keys,
                data_doc=data_doc,
                sow_key=sow_key if rec.payload or sow_key else None,
                journal_index=journal_index,
            )
            broker._sow_removed(sow, gone, "deleted")
