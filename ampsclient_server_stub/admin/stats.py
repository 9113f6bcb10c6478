"""The statistics tree of the admin interface, built from the server's public accessors.

:class:`StatisticsCollector` reads a running :class:`~ampsclient_server_stub.server.ReferenceServer`
on its event loop: the broker's connections and subscriptions, the network sessions' counters,
the SOW topics, the journal and the replication manager. :meth:`~StatisticsCollector.sample`
takes one :class:`Sample` of every cumulative counter (the admin server calls it once per
``<Admin><Interval>``, one second by default) and keeps the last :data:`HISTORY` of them;
``*_per_sec`` figures are the change over the last :data:`RATE_SPAN` seconds of samples.

The tree follows the AMPS monitoring guide's layout and metric names (``/amps/host/cpus``,
``/amps/instance/clients/<name>/messages_in_per_sec``, ``queue_depth_out``,
``/amps/instance/processors/all/messages_received_per_sec``,
``/amps/instance/replication/<destination>/seconds_behind``...); collections AMPS lists with
an ``id`` are :class:`~.tree.Entries` (see :mod:`.tree` for AMPS' JSON and XML forms).
``statistics``, ``topics``, ``subscriptions``, ``journal`` (the transaction log) and
``history`` are this server's additions. The host part comes from :class:`~.system.HostSampler`.

Building the tree must not stall messaging (it runs on the server's loop): the per-client
rates are computed in one pass over the rate window, :meth:`StatisticsCollector.build` builds
only the part a request asks for, and its per-connection loops hand the loop back every
:data:`CHUNK` connections, so with thousands of clients a poll costs the other clients a few
milliseconds at a time, not the whole build at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from ..engine.broker import SERVER_VERSION
from ..net.session import NetSession
from ..queues.plug import queue_engine
from . import topic_stats
from .system import HostSampler, process_memory
from .tree import Entries

if TYPE_CHECKING:
    from ..engine.broker import Connection
    from ..engine.journal_types import JournalRecord
    from ..engine.sow import SowTopic
    from .host import AdminHost

__all__ = ["HISTORY", "RATE_SPAN", "Sample", "StatisticsCollector", "client_key"]

HISTORY: Final = 60
"""Samples kept (one per interval): the dashboard's charts and the rates read them."""

RATE_SPAN: Final = 5.0
"""Seconds of samples a ``*_per_sec`` figure averages over (fewer right after start)."""

_CLIENT_FIELDS: Final = ("messages_in", "bytes_in", "messages_out", "bytes_out")

_SOW_COUNTS: Final = (
    ("insert_count", "inserts_per_sec"),
    ("update_count", "updates_per_sec"),
    ("delete_count", "deletes_per_sec"),
)
"""A SOW topic's counters and the names of their rates (AMPS' names)."""

CHUNK: Final = 200
"""Connections handled between two hand-backs of the loop while a tree is built."""

PARTS: Final = (
    "processors",
    "memory",
    "clients",
    "subscriptions",
    "topics",
    "sow",
    "queues",
    "views",
    "conflated_topics",
    "journal",
    "replication",
    "storage",
)
"""The parts of the tree that are built on their own (the rest is a few scalars)."""


def client_key(conn: Connection) -> str:
    """The name a connection is listed under: its client name, or ``connection-<id>`` before
    it logged on."""
    return conn.client_name or f"connection-{conn.id}"


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


@dataclass(slots=True)
class Sample:
    """Cumulative counters at one moment.

    Attributes:
        at: ``time.monotonic()`` of the sample; ``wall``: epoch seconds.
        totals: instance counters (``publishes``, ``messages_in``, ``messages_out``,
            ``bytes_in``, ``bytes_out``, ``fsyncs``, ``fsync_ns``, ...) and gauges
            (``clients``, ``subscriptions``, ``journal_bytes``, ``replication_lag``...).
        clients: per connection id, the session counters (``messages_in``, ...).
        destinations: per replication destination, messages sent.
        topics: per topic, ``(publishes, deliveries)``.
        sow: per SOW topic entry, its :data:`_SOW_COUNTS`.
    """

    at: float
    wall: float
    totals: dict[str, float] = field(default_factory=dict)
    clients: dict[int, tuple[int, ...]] = field(default_factory=dict)
    destinations: dict[str, int] = field(default_factory=dict)
    topics: dict[str, tuple[int, int]] = field(default_factory=dict)
    sow: dict[str, tuple[int, ...]] = field(default_factory=dict)


class StatisticsCollector:
    """Samples a running server and builds its statistics tree (call on the server's loop)."""

    def __init__(self, server: AdminHost, *, history: int = HISTORY) -> None:
        self.server = server
        self.started = time.time()
        self.samples: deque[Sample] = deque(maxlen=history)
        """The last samples, oldest first."""
        self._totals = dict.fromkeys(_CLIENT_FIELDS, 0)
        self._last_clients: dict[int, tuple[int, ...]] = {}
        self._connected_at: dict[int, float] = {}
        journal = server.journal
        self.host = HostSampler(paths=[journal.directory] if journal is not None else [])
        """The ``/amps/host`` part (sampled with the rest)."""

    # ------------------------------------------------------------------ sampling

    def sample(self) -> Sample:
        """Take a sample of every counter and keep it."""
        now = time.monotonic()
        wall = time.time()
        broker = self.server.broker
        clients: dict[int, tuple[int, ...]] = {}
        subscriptions = 0
        connections = broker.connections if broker is not None else []
        for conn in connections:
            subscriptions += len(conn.subs)
            session = conn.session
            if isinstance(session, NetSession):
                clients[conn.id] = tuple(getattr(session, name) for name in _CLIENT_FIELDS)
            self._connected_at.setdefault(conn.id, wall)
        for conn_id, values in clients.items():
            before = self._last_clients.get(conn_id, (0,) * len(_CLIENT_FIELDS))
            for name, now_value, old in zip(_CLIENT_FIELDS, values, before, strict=True):
                self._totals[name] += max(0, now_value - old)
        for gone in set(self._connected_at) - {c.id for c in connections}:
            del self._connected_at[gone]
        self._last_clients = clients
        totals: dict[str, float] = {name: float(v) for name, v in self._totals.items()}
        stats = self.server.statistics()
        totals["publishes"] = float(stats.get("publishes", 0))
        totals["clients"] = float(len(connections))
        totals["subscriptions"] = float(subscriptions)
        journal = self.journal_figures(bookmarks=False)
        for name in ("bytes", "records", "fsyncs", "fsync_ns", "files"):
            totals[f"journal_{name}"] = float(journal.get(name, 0) or 0)
        destinations: dict[str, int] = {}
        lag = 0.0
        for dest in self.replication_status().get("destinations", []):
            destinations[str(dest["name"])] = int(dest.get("sent", 0))
            lag = max(lag, float(dest.get("oldest_unacked_age") or 0.0))
        totals["replication_lag"] = lag
        topics = broker.topic_counts.snapshot() if broker is not None else {}
        totals["deliveries"] = float(self._deliveries())
        self.host.sample()
        sow_counts = {name: counts for name, _sow, counts in self._sow_topics()}
        sample = Sample(now, wall, totals, clients, destinations, topics, sow_counts)
        self.samples.append(sample)
        return sample

    def _window(self) -> tuple[Sample, Sample] | None:
        """(oldest sample within :data:`RATE_SPAN` of the newest, newest)."""
        if len(self.samples) < 2:
            return None
        newest = self.samples[-1]
        oldest = newest
        for candidate in reversed(self.samples):
            if newest.at - candidate.at > RATE_SPAN + 1e-6:
                break
            oldest = candidate
        if oldest is newest:
            oldest = self.samples[-2]
        return oldest, newest

    def _deliveries(self) -> int:
        """Messages sent to subscribers so far (one per connection and message)."""
        broker = self.server.broker
        if broker is None:
            return 0
        counts = broker.topic_counts
        return sum(counts.deliveries.values()) + counts.other_deliveries

    def rate(self, name: str) -> float:
        """Per-second change of an instance counter over the rate window (0 before two
        samples exist)."""
        window = self._window()
        if window is None:
            return 0.0
        old, new = window
        return max(0.0, new.totals.get(name, 0.0) - old.totals.get(name, 0.0)) / (new.at - old.at)

    def _client_rates(self) -> dict[int, tuple[float, ...]]:
        """Per connection id, its counters' rates over the window (from the oldest sample in
        the window that has the connection), in one pass over the window's samples."""
        window = self._window()
        if window is None:
            return {}
        oldest, newest = window
        first: dict[int, Sample] = {}
        for sample in self.samples:
            if sample.at < oldest.at or sample is newest:
                continue
            for conn_id in sample.clients:
                first.setdefault(conn_id, sample)
        rates: dict[int, tuple[float, ...]] = {}
        for conn_id, now_values in newest.clients.items():
            old = first.get(conn_id)
            if old is None:
                continue
            dt = newest.at - old.at
            rates[conn_id] = tuple(
                max(0, a - b) / dt for a, b in zip(now_values, old.clients[conn_id], strict=True)
            )
        return rates

    def _topic_rates(self, topic: str) -> tuple[float, float]:
        window = self._window()
        if window is None:
            return 0.0, 0.0
        old, new = window
        now_values = new.topics.get(topic)
        if now_values is None:
            return 0.0, 0.0
        before = old.topics.get(topic, (0, 0))
        dt = new.at - old.at
        return (
            max(0, now_values[0] - before[0]) / dt,
            max(0, now_values[1] - before[1]) / dt,
        )

    def _destination_rate(self, name: str) -> float:
        window = self._window()
        if window is None:
            return 0.0
        old, new = window
        if name not in old.destinations or name not in new.destinations:
            return 0.0
        return max(0, new.destinations[name] - old.destinations[name]) / (new.at - old.at)

    # ------------------------------------------------------------------ parts

    def journal_figures(self, *, bookmarks: bool = True) -> dict[str, Any]:
        """Files, sizes, first and last bookmark (read from the journal unless ``bookmarks``
        is false), fsync counts and latency of the journal (``{}`` without one)."""
        journal = self.server.journal
        if journal is None or journal.closed:
            return {}
        counters = journal.counters()
        segments = journal.segments()
        out: dict[str, Any] = {
            "directory": str(journal.directory),
            "fsync_policy": journal.fsync_policy,
            "files": len(segments),
            "bytes": sum(s.file_bytes for s in segments),
            "data_bytes": sum(s.data_bytes for s in segments),
            "records": sum(s.records for s in segments),
            "first_index": journal.first_index,
            "last_index": journal.last_index,
            "durable_index": journal.durable_index,
            "appends": counters.get("appends", 0),
            "syncs": counters.get("syncs", 0),
            "fsyncs": counters.get("fsyncs", 0),
            "fsync_ns": counters.get("fsync_ns", 0),
            "fsync_last_us": counters.get("fsync_last_ns", 0) / 1000,
            "compressed_files": sum(1 for s in segments if s.state == "compressed"),
            "segments": Entries(
                (
                    s.path.name,
                    {
                        "state": s.state,
                        "first_index": s.first_index,
                        "last_index": s.last_index,
                        "records": s.records,
                        "file_bytes": s.file_bytes,
                        "data_bytes": s.data_bytes,
                        "first_timestamp": _iso(s.first_timestamp / 1e6) if s.records else None,
                        "last_timestamp": _iso(s.last_timestamp / 1e6) if s.records else None,
                    },
                )
                for s in segments
            ),
        }
        if bookmarks:
            out["first_bookmark"] = self._bookmark_at(journal.first_index)
            out["last_bookmark"] = self._bookmark_at(journal.last_index)
        return out

    def _bookmark_at(self, index: int) -> str | None:
        record = self._record_at(index)
        return record.bookmark if record is not None else None

    def _record_at(self, index: int) -> JournalRecord | None:
        journal = self.server.journal
        if journal is None or index < 1 or index > journal.last_index:
            return None
        try:
            records = journal.read(index, max_records=1)
        except Exception:  # a file pruned meanwhile: nothing this time
            return None
        return records[0] if records else None

    def _seconds_behind(self, acked: int, last: int) -> float | None:
        """AMPS' ``seconds_behind`` of a destination: the journal time of the newest record
        less that of the newest one the destination acknowledged (the oldest retained record
        when that one is gone); 0 when it acknowledged everything, ``None`` when a record
        cannot be read."""
        if acked >= last:
            return 0.0
        journal = self.server.journal
        first = journal.first_index if journal is not None else 0
        newest, behind = self._record_at(last), self._record_at(max(acked, first, 1))
        if newest is None or behind is None:
            return None
        return max(0, newest.timestamp - behind.timestamp) / 1e6

    def replication_status(self) -> Mapping[str, Any]:
        """The replication manager's status (``{}`` without replication)."""
        manager = self.server.replication
        return manager.status() if manager is not None else {}

    # ------------------------------------------------------------------ the tree

    def clients(self) -> Entries:
        """``/amps/instance/clients``: one entry per connection."""
        return Entries(self._client_entries())

    def _client_entries(self) -> Iterator[tuple[str, Any]]:
        broker = self.server.broker
        if broker is None:
            return
        now = time.time()
        all_rates = self._client_rates()
        zero = (0.0,) * len(_CLIENT_FIELDS)
        security = self.server.security
        guard = security.guard if security is not None else None
        for conn in broker.connections:
            session = conn.session
            entry: dict[str, Any] = {
                "client_name": conn.client_name,
                "connection_id": conn.id,
                "remote_address": conn.peer,
                "transport": conn.transport,
                "message_type": conn.mt,
                "authenticated_id": conn.user_id,
                "logged_on": conn.logged_on,
                "connect_time": _iso(self._connected_at.get(conn.id, now)),
                "subscription_count": len(conn.subs),
            }
            denied = guard.denied(conn.id) if guard is not None else (0, 0)
            entry["denied_reads"], entry["denied_writes"] = denied
            if isinstance(session, NetSession):
                rates = all_rates.get(conn.id, zero)
                for i, name in enumerate(_CLIENT_FIELDS):
                    entry[name] = getattr(session, name)
                    entry[f"{name}_per_sec"] = round(rates[i], 3)
                slow = session.slow
                entry["queued_bytes_out"] = session.backlog()
                entry["queue_depth_out"] = session.queued_messages
                entry["offline"] = bool(slow is not None and slow.offline)
                entry["offline_bytes"] = slow.pending_disk if slow is not None else 0
                entry["queue_max_latency"] = round(slow.oldest(now), 3) if slow is not None else 0
            yield client_key(conn), entry

    def subscriptions(self) -> Entries:
        """``/amps/instance/subscriptions/<client>/<sub id>``."""
        return Entries((key, subs) for key, subs in self._subscription_entries() if subs)

    def _subscription_entries(self) -> Iterator[tuple[str, Any]]:
        """Per connection (all of them, so that a caller may pause between them), its
        subscriptions (``{}`` for none)."""
        broker = self.server.broker
        if broker is None:
            return
        journal = self.server.journal
        last = journal.last_index if journal is not None and not journal.closed else 0
        for conn in broker.connections:
            subs = Entries()
            for sub_id, sub in conn.subs.items():
                entry: dict[str, Any] = {
                    "topic": sub.matcher.topic,
                    "regex": sub.matcher.is_regex,
                    "filter": sub.filter_text,
                    "options": sorted(sub.options),
                    "message_type": sub.message_type,
                    "paused": sub.paused,
                    "bookmark": None,
                }
                replay = sub.replay
                if replay is not None:
                    position = replay.position
                    entry["bookmark"] = {
                        "next_index": position,
                        "behind": max(0, last - position + 1),
                        "replaying": position <= last,
                        "bookmark": self._bookmark_at(position - 1),
                    }
                subs[sub_id] = entry
            yield client_key(conn), subs

    def _sow_topics(self) -> Iterator[tuple[str, SowTopic, tuple[int, ...]]]:
        """Per SOW topic: the name it is listed under, the topic, its counters."""
        broker = self.server.broker
        seen: set[str] = set()
        for sow in broker.sow_topics if broker is not None else []:
            name = sow.topic if sow.topic not in seen else f"{sow.topic} ({sow.message_type})"
            seen.add(name)
            yield name, sow, tuple(sow.counters[count] for count, _ in _SOW_COUNTS)

    def sow(self) -> Entries:
        """``/amps/instance/sow/<topic>``: the SOW topics with AMPS' names: ``valid_keys``
        (distinct records; ``records`` too), ``insert_count``, ``update_count``,
        ``delete_count`` and their rates."""
        out = Entries()
        window = self._window()
        for name, sow, counts in self._sow_topics():
            entry: dict[str, Any] = {
                "topic": sow.topic,
                "message_type": sow.message_type,
                "keys": list(sow.keys),
                "valid_keys": len(sow),
                "records": len(sow),
                "hash_indexes": sow.index_statistics(),
                "memo_indexes": list(sow.memo_indexes),
            }
            for (count, rate_name), value in zip(_SOW_COUNTS, counts, strict=True):
                entry[count] = value
                entry[rate_name] = 0.0
            if window is not None:
                old, new = window
                before, after = old.sow.get(name), new.sow.get(name)
                if before is not None and after is not None:
                    for i, (_, rate_name) in enumerate(_SOW_COUNTS):
                        rate = max(0, after[i] - before[i]) / (new.at - old.at)
                        entry[rate_name] = round(rate, 3)
            out[name] = entry
        return out

    def queues(self) -> Entries:
        """``/amps/instance/queues/<topic>``: per message queue, its depth, backlog (leased),
        expired leases, age of the oldest lease, owned messages and running totals."""
        engine = queue_engine(self.server.broker)
        if engine is None:
            return Entries()
        return Entries(engine.statistics())

    def views(self) -> Entries:
        """``/amps/instance/views/<view>``: the views (:mod:`.topic_stats`)."""
        return topic_stats.views(self.server.broker)

    def conflated_topics(self) -> Entries:
        """``/amps/instance/conflated_topics/<topic>`` (:mod:`.topic_stats`)."""
        return topic_stats.conflated_topics(self.server.broker)

    def topics(self) -> Entries:
        """``/amps/instance/topics/<topic>``: the topics published to, subscribed to or kept in
        a SOW: publishes and deliveries (messages sent, one per connection) with their rates,
        subscription counts, SOW records."""
        out = self._topic_base()
        if self.server.broker is None:
            return out
        for _ in self._count_subscriptions(out):
            pass
        self._add_sow_records(out)
        return out

    def _count_subscriptions(self, out: dict[str, dict[str, Any]]) -> Iterator[None]:
        """Add the subscription counts to the topics of ``out``, one step per connection."""
        broker = self.server.broker
        for conn in broker.connections if broker is not None else []:
            for sub in conn.subs.values():
                entry = out.setdefault(sub.matcher.topic, {"subscriptions": 0})
                entry["regex"] = sub.matcher.is_regex
                entry["subscriptions"] += 1
            yield None

    def _topic_base(self) -> Entries:
        broker = self.server.broker
        out = Entries()
        if broker is None:
            return out
        counts = broker.topic_counts
        for topic, (publishes, deliveries) in counts.snapshot().items():
            pub_rate, out_rate = self._topic_rates(topic)
            out[topic] = {
                "subscriptions": 0,
                "regex": False,
                "publishes": publishes,
                "publishes_per_sec": round(pub_rate, 3),
                "deliveries": deliveries,
                "deliveries_per_sec": round(out_rate, 3),
            }
        if counts.other_publishes or counts.other_deliveries:
            out["(other topics)"] = {
                "subscriptions": 0,
                "regex": False,
                "publishes": counts.other_publishes,
                "deliveries": counts.other_deliveries,
            }
        return out

    def _add_sow_records(self, out: dict[str, dict[str, Any]]) -> None:
        broker = self.server.broker
        if broker is None:
            return
        for sow in broker.sow_topics:
            entry = out.setdefault(sow.topic, {"subscriptions": 0, "regex": False})
            entry["sow_records"] = entry.get("sow_records", 0) + len(sow)

    def replication(self) -> Entries:
        """``/amps/instance/replication/<destination>`` with AMPS' metric names."""
        status = self.replication_status()
        if not status:
            return Entries()
        journal = self.server.journal
        last = journal.last_index if journal is not None and not journal.closed else 0
        out = Entries()
        for dest in status.get("destinations", []):
            name = str(dest["name"])
            acked = int(dest.get("acked_through") or 0)
            out[name] = {
                "name": name,
                "destination_name": dest.get("peer"),
                "replication_type": dest.get("effective"),
                "configured_type": dest.get("sync_type"),
                "downgraded": dest.get("downgraded"),
                "state": dest.get("state"),
                "is_connected": dest.get("connected"),
                "messages_out": int(dest.get("sent", 0)),
                "messages_out_per_sec": round(self._destination_rate(name), 3),
                "acked_through": acked,
                "messages_behind": max(0, last - acked),
                "in_flight": dest.get("in_flight"),
                "oldest_unacked_age": round(float(dest.get("oldest_unacked_age") or 0.0), 3),
            }
            behind = self._seconds_behind(acked, last)
            if behind is not None:
                out[name]["seconds_behind"] = round(behind, 3)
        return out

    def processors(self) -> Entries:
        """``/amps/instance/processors``: AMPS' message processors as this server's stages,
        ``ingest`` (publishes taken in: de-duplicated, journaled, applied to the SOW),
        ``delivery`` (each accepted publish routed to the subscriptions it matches) and their
        ``all`` aggregate."""
        stats = self.server.statistics()
        publishes = int(stats.get("publishes", 0))
        deliveries = self._deliveries()
        received = {
            "messages_received": publishes,
            "messages_received_per_sec": round(self.rate("publishes"), 3),
        }
        matched = {
            "matches_found": deliveries,
            "matches_found_per_sec": round(self.rate("deliveries"), 3),
        }
        out = Entries()
        denied = {name: int(stats.get(name, 0)) for name in ("denied_reads", "denied_writes")}
        out["all"] = {"description": "every stage", **received, **matched, **denied}
        out["ingest"] = {
            "description": "publishes accepted (de-duplicated, journaled, SOW applied)",
            **received,
            "denied_writes": denied["denied_writes"],
        }
        out["delivery"] = {
            "description": "accepted publishes routed to matching subscriptions",
            **received,
            **matched,
            "denied_reads": denied["denied_reads"],
        }
        return out

    def storage(self) -> dict[str, Any]:
        """``/amps/instance/storage``: the server's files whose writes fail now (a full
        disk), one condition per store (``journal``, ``sow/<topic>/<type>``,
        ``queue/<name>/<type>``, ``queues/ack``, ``replication/holds``), and how many ended."""
        broker = self.server.broker
        if broker is None:
            return {"conditions": Entries(), "conditions_ended": 0}
        snap = broker.storage_faults.snapshot()
        conditions = Entries()
        for store, fault in snap["conditions"].items():
            conditions[store] = {**fault, "since": _iso(fault["since"])}
        return {"conditions": conditions, "conditions_ended": snap["conditions_ended"]}

    @staticmethod
    def memory() -> dict[str, Any]:
        """``/amps/instance/memory``: ``rss`` and ``vmsize`` of the server process (bytes)."""
        return process_memory()

    def _journal(self) -> dict[str, Any]:
        """``/amps/instance/journal``: :meth:`journal_figures` with the fsync rates."""
        journal = self.journal_figures()
        window = self._window()
        fsync_avg_us = 0.0
        if window is not None:
            old, new = window
            count = new.totals["journal_fsyncs"] - old.totals["journal_fsyncs"]
            if count > 0:
                fsync_avg_us = (new.totals["journal_fsync_ns"] - old.totals["journal_fsync_ns"]) / (
                    count * 1000
                )
        if journal:
            journal["fsync_avg_us"] = round(fsync_avg_us, 1)
            journal["fsyncs_per_sec"] = round(self.rate("journal_fsyncs"), 3)
            journal["bytes_per_sec"] = round(self.rate("journal_bytes"), 1)
        return journal

    def _head(self) -> dict[str, Any]:
        """The scalars of the tree and its ``statistics``."""
        server = self.server
        stats = server.statistics()
        latest = self.samples[-1] if self.samples else None
        summary = {
            "publishes": stats.get("publishes", 0),
            "publishes_per_sec": round(self.rate("publishes"), 3),
            "messages_in": int(latest.totals["messages_in"]) if latest else 0,
            "messages_in_per_sec": round(self.rate("messages_in"), 3),
            "messages_out": int(latest.totals["messages_out"]) if latest else 0,
            "messages_out_per_sec": round(self.rate("messages_out"), 3),
            "bytes_in": int(latest.totals["bytes_in"]) if latest else 0,
            "bytes_in_per_sec": round(self.rate("bytes_in"), 1),
            "bytes_out": int(latest.totals["bytes_out"]) if latest else 0,
            "bytes_out_per_sec": round(self.rate("bytes_out"), 1),
        }
        broker = server.broker
        return {
            "name": server.config.name,
            "group": server.config.group,
            "version": SERVER_VERSION,
            "timestamp": _iso(time.time()),
            "uptime": round(time.time() - self.started, 3),
            "client_count": len(broker.connections) if broker is not None else 0,
            "statistics": {**stats, **summary},
        }

    def instance(self) -> dict[str, Any]:
        """The whole ``/amps/instance`` tree (built at once; see :meth:`build`)."""
        return {
            **self._head(),
            "processors": self.processors(),
            "memory": self.memory(),
            "clients": self.clients(),
            "subscriptions": self.subscriptions(),
            "topics": self.topics(),
            "sow": self.sow(),
            "queues": self.queues(),
            "views": self.views(),
            "conflated_topics": self.conflated_topics(),
            "journal": self._journal(),
            "replication": self.replication(),
            "storage": self.storage(),
        }

    async def build(self, part: str | None = None) -> Any:
        """The whole tree (``part`` ``None``) or one top-level part of it, handing the loop
        back every :data:`CHUNK` connections while it goes through them.

        Raises:
            KeyError: ``part`` is not a part of the tree.
        """
        if part is not None and part not in PARTS:
            return self._head()[part]
        if part is None:
            tree = self._head()
            for name in PARTS:
                tree[name] = await self._part(name)
            return tree
        return await self._part(part)

    async def _part(self, name: str) -> Any:
        if name == "clients":
            return await _gather(self._client_entries())
        if name == "subscriptions":
            entries = await _gather(self._subscription_entries())
            return Entries((key, subs) for key, subs in entries.items() if subs)
        if name == "topics":
            out = self._topic_base()
            for n, _ in enumerate(self._count_subscriptions(out), 1):
                if n % CHUNK == 0:
                    await asyncio.sleep(0)
            self._add_sow_records(out)
            return out
        if name == "journal":
            return self._journal()
        part: dict[str, Any] = getattr(self, name)()  # processors, memory, sow, queues...
        return part

    def history(self) -> list[dict[str, Any]]:
        """``/amps/instance/history``: per sample, the figures the dashboard draws (rates from
        each sample to the one before it)."""
        out: list[dict[str, Any]] = []
        previous: Sample | None = None
        for sample in self.samples:
            entry: dict[str, Any] = {
                "time": _iso(sample.wall),
                "clients": int(sample.totals["clients"]),
                "subscriptions": int(sample.totals["subscriptions"]),
                "journal_bytes": int(sample.totals["journal_bytes"]),
                "replication_lag": round(sample.totals["replication_lag"], 3),
            }
            for name in ("publishes", "messages_in", "messages_out"):
                rate = 0.0
                if previous is not None:
                    dt = sample.at - previous.at
                    rate = max(0.0, sample.totals[name] - previous.totals[name]) / dt
                entry[f"{name}_per_sec"] = round(rate, 3)
            out.append(entry)
            previous = sample
        return out


async def _gather(entries: Iterator[tuple[str, Any]]) -> Entries:
    """The collection of ``entries``, handing the loop back every :data:`CHUNK` of them."""
    out = Entries()
    for n, (key, value) in enumerate(entries, 1):
        out[key] = value
        if n % CHUNK == 0:
            await asyncio.sleep(0)
    return out
