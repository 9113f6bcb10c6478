"""The downstream end of a replication stream: :class:`Inbound` (one per upstream stream on a
link) applies the records an upstream's :class:`~.streams.Outbound` sends and acknowledges them
once they are durable here (see :mod:`.streams` for positions and resync)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..errors import ReplicationError
from .blocks import BlockRuns, block_runs
from .origins import IndexRuns
from .protocol import RecordDecompressor, WireRecord, unpack_records
from .rules import PATH_FIELD, decode_path, encode_path

if TYPE_CHECKING:  # pragma: no cover
    from ampsclient_server_stub.engine.broker import Broker
    from ampsclient_server_stub.engine.journal import Journal
    from ampsclient_server_stub.security.auth import EntitlementModule

__all__ = ["MAX_INFLATED", "Inbound", "InboundHost", "InboundLink", "ReplicatedStoreError"]

_Fields = dict[str, str | int]

_Accepted = tuple[int, int, str, str, bytes, dict[str, str | int]]
"""A received record that passed the entitlement and loop checks: ``(publisher id,
sequence, command, topic, payload, fields with the extended path)``."""

MAX_INFLATED: Final = 256 * 1024 * 1024
"""The largest ``rrec`` body a compressed frame may inflate to (the link's frame limit)."""


class ReplicatedStoreError(ReplicationError):
    """A replicated record could not be journaled here (a full disk): the link is closed
    without acknowledging it, and the upstream instance sends it again once it reconnects."""


class InboundLink(Protocol):
    """What an inbound stream needs of its link (``link.Link`` fits)."""

    peer_name: str
    peer_user: str | None

    def send(self, fields: dict[str, Any], body: Any = None) -> None:
        """Queue one frame to the peer."""

    def describe(self) -> str:
        """The link, for log messages."""


class InboundHost(Protocol):
    """What an inbound stream needs of the instance's replication manager
    (``manager.ReplicationManager`` fits)."""

    name: str
    group: str
    journal: Journal
    broker: Broker
    entitlements: EntitlementModule | None
    origins: dict[str, IndexRuns]
    """Per upstream instance, the runs of local indexes applied from it."""

    def inbound_counters(self, peer: str, stream: str) -> dict[str, int]:
        """The counters of an inbound stream."""

    def not_entitled(self, link: Any, topic: str, operation: str) -> None:
        """A replicated message the link's user may not write was refused."""


class Inbound:
    """One upstream stream arriving on a link: applies records, acknowledges durability."""

    def __init__(self, manager: InboundHost, link: InboundLink, stream: str) -> None:
        self.manager = manager
        self.link = link
        self.stream = stream
        self.waiting: deque[tuple[int, int]] = deque()  # (local index needed, upstream index)
        self.last_acked = 0
        self.have_at: int | None = None
        self.have: dict[int, int] | None = None
        self._paths: dict[str, str] = {}
        self._decompressor: RecordDecompressor | None = None
        self.counters = manager.inbound_counters(link.peer_name, stream)
        """Totals for this upstream stream since the instance started (across links)."""

    def open(self) -> None:
        """``ropen``: answer with what this instance holds, once that is durable."""
        journal = self.manager.journal
        self.have = journal.last_sequences()
        self.have_at = journal.last_index
        self.waiting.clear()
        self.last_acked = 0
        self.maybe_send_have()
        if self.have is not None:
            self.manager.broker.request_sync()

    def maybe_send_have(self) -> None:
        if self.have is None or self.have_at is None:
            return
        if self.manager.journal.durable_index >= self.have_at:
            have, self.have = self.have, None
            self.link.send({"c": "rhave", "d": self.stream}, have)

    def decode(self, header: dict[str, Any], body: Any) -> list[WireRecord] | BlockRuns:
        """The records of an ``rrec`` frame: compressed when its header has ``z`` (the
        receiving side needs no configuration).

        Raises:
            ValueError: a malformed body or an unknown compression.
        """
        algorithm = header.get("z")
        if algorithm is None:
            first = header.get("b")
            if first is not None:  # journal records as written (see blocks.py)
                return block_runs(body, first, header.get("n"), str(header.get("rp", "")))
            return unpack_records(body)
        decompressor = self._decompressor
        if decompressor is None or decompressor.algorithm != algorithm:
            decompressor = RecordDecompressor(str(algorithm), max_size=MAX_INFLATED)
            self._decompressor = decompressor
        return decompressor.records(body)

    def on_records(self, records: list[WireRecord] | BlockRuns) -> None:
        """Apply what :meth:`decode` returned."""
        if type(records) is BlockRuns:
            if self.manager.entitlements is None:
                self._on_block(records)
                return
            records = records.records()  # entitlements are checked record by record
        assert type(records) is list
        manager = self.manager
        counters = self.counters
        paths = self._paths
        ents = manager.entitlements
        link = self.link
        last_u = 0
        accepted: list[_Accepted] = []
        for index, pid, seq, command, topic, payload, fields in records:
            counters["received"] += 1
            last_u = index
            if ents is not None:
                operation = "sow_delete" if command == "sow_delete" else "publish"
                if not ents.allowed(link.peer_user, operation, topic):
                    counters["not_entitled"] += 1
                    manager.not_entitled(link, topic, operation)
                    continue
            raw = str(fields.get(PATH_FIELD, ""))
            extended = paths.get(raw)
            if extended is None:
                extended = self._extend(raw)
            if not extended:
                counters["loops_refused"] += 1
                continue
            fields[PATH_FIELD] = extended
            accepted.append((pid, seq, command, topic, payload, fields))
        self._applied(self._apply(accepted), last_u)

    def _apply(self, accepted: list[_Accepted]) -> int:
        """Ingest ``accepted`` in order: a run of one publisher's publishes with the same
        fields as one batch (:class:`ReplicatedRun`: one journal append) when the broker
        takes it whole, else record by record. Returns the local journal index the ack
        waits for (0: nothing)."""
        needed = 0
        i, n = 0, len(accepted)
        while i < n:
            pid, _seq, command, _topic, _payload, fields = accepted[i]
            j = i + 1
            if command == "p":
                while j < n and (
                    (nxt := accepted[j])[0] == pid and nxt[2] == "p" and nxt[5] == fields
                ):
                    j += 1
            got = self._apply_group(
                pid, command, fields, [(r[1], r[3], r[4]) for r in accepted[i:j]]
            )
            needed = max(needed, got)
            i = j
        return needed

    def _apply_group(
        self, pid: int, command: str, fields: _Fields, items: list[tuple[int, str, bytes]]
    ) -> int:
        """Ingest ``items`` (``(sequence, topic, payload)`` of publisher ``pid``, in order,
        each with ``command`` and ``fields``): as one :class:`ReplicatedRun` when there are
        several publishes and the broker takes them whole, else one by one. Returns the
        local journal index the ack waits for (0: nothing)."""
        from .apply import ReplicatedRecord, ReplicatedRun

        manager = self.manager
        journal = manager.journal
        apply = manager.broker.ingest
        counters = self.counters
        runs = manager.origins.get(self.link.peer_name)
        if runs is None:
            runs = manager.origins[self.link.peer_name] = IndexRuns()
        if command == "p" and len(items) > 1:
            taken = apply(ReplicatedRun(pid, fields, items)).journaled
            if taken:
                needed = journal.last_index
                runs.add_range(needed - taken + 1, needed)
                counters["applied"] += taken
                return needed
        needed = 0
        for k, (seq, topic, payload) in enumerate(items):
            outcome = apply(
                ReplicatedRecord(
                    pid, seq, command, topic, payload, fields if k == 0 else dict(fields)
                )
            )
            if outcome.record is not None:
                counters["applied"] += 1
                needed = outcome.record.index
                runs.add(needed)
            elif outcome.failed:  # not stored: acknowledge nothing from it on
                raise ReplicatedStoreError(
                    f"cannot journal replicated record {pid}|{seq}| from {self.link.peer_name}"
                )
            else:
                if outcome.duplicate:
                    counters["duplicates"] += 1
                needed = max(needed, journal.last_index)
        return needed

    def _on_block(self, block: BlockRuns) -> None:
        """The records of a journal block (see :mod:`.blocks`): every one has the block's
        path; runs of one publisher's records with the same fields go in as one."""
        counters = self.counters
        raw = block.path
        extended = self._paths.get(raw)
        if extended is None:
            extended = self._extend(raw)
        counters["received"] += block.count
        needed = 0
        if not extended:
            counters["loops_refused"] += block.count
        else:
            for pid, command, fields, items in block.runs:
                own = dict(fields)
                own[PATH_FIELD] = extended
                needed = max(needed, self._apply_group(pid, command, own, items))
        self._applied(needed, block.first + block.count - 1)

    def _applied(self, needed: int, last_u: int) -> None:
        """Records up to upstream index ``last_u`` are in: acknowledge them once the local
        journal is durable through ``needed``."""
        if not last_u:
            return
        journal = self.manager.journal
        self.waiting.append((needed, last_u))
        if journal.durable_index >= needed:
            self.on_durable(journal.durable_index)
        else:
            self.manager.broker.request_sync()

    def _extend(self, raw: str) -> str:
        """The path ``raw`` plus this instance ('' when this instance is already on it)."""
        own = self.manager.name
        path = decode_path(raw)
        if any(name == own for name, _ in path):
            result = ""
        else:
            path.append((own, self.manager.group))
            result = encode_path(path)
        if len(self._paths) > 4096:
            self._paths.clear()
        self._paths[raw] = result
        return result

    def on_durable(self, durable: int) -> None:
        self.maybe_send_have()
        waiting = self.waiting
        acked = 0
        while waiting and waiting[0][0] <= durable:
            acked = waiting.popleft()[1]
        if acked > self.last_acked:
            self.last_acked = acked
            self.link.send({"c": "rack", "d": self.stream, "u": acked})

    def status(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "from": self.link.peer_name,
            "last_acked": self.last_acked,
            **self.counters,
        }
