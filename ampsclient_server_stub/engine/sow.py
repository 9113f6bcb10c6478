"""State-of-the-World (SOW) store for one topic: a pure engine, no sockets, no asyncio.

Semantics follow amps-semantics.md section 2:

* Records are keyed by an opaque ``k``: either the publisher's ``sow_key``
  (echoed verbatim) or a stable 64-bit checksum over the key domain (the topic
  unless ``key_domain`` is configured) and the value at each configured key
  path, in order.  A missing key field hashes as empty and logs a warning.
* ``delta_publish`` merges into the stored record (objects recursively,
  arrays/leaves replaced) and stores the merged full record.
* Queries filter with a caller-supplied predicate over parsed documents, can
  be restricted to ``sow_keys``, ordered (default: write order), and paged
  with ``top_n``/``skip_n``; the match count ignores paging.
* Hash indexes (``<HashIndex>``, and the automatic one over the key fields; :mod:`.sow_index`)
  are kept current with the document cache and narrow a query whose filter text they answer.

Storage is SQLite through sqlite-utils: one table per topic, primary key ``k``,
on disk (WAL, ``synchronous=NORMAL``; state survives re-opening) or in memory.
Parsed documents are cached in-process (``key -> doc``, kept in write order)
so filtered queries do not re-parse payloads; the cache is rebuilt on open.

Recovery checkpoint: a topic that is also recorded in the transaction log keeps, in the same
file (table ``journal_checkpoint``, one row per topic), the journal index its state reflects
(:attr:`SowTopic.journal_index`). A write given ``journal_index=`` updates it in the *same*
transaction as the data, so the two never disagree, whatever kills the process; after a restart
the broker re-applies only the journal records after it.

A :class:`SowTopic` is not thread-safe: callers must serialise access (the
connection is opened with ``check_same_thread=False`` so a single worker thread
other than the creator may use it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol, Self

import sqlite_utils

from .payload import OrderBy, decode, delta_merge, encode, lookup_path, parse_path
from .sow_index import HashIndex, equality_plan, index_steps

__all__ = ["SowRecord", "SowTopic", "SowWatcher", "table_name"]

_log = logging.getLogger(__name__)

_COLUMNS: Final = "k, data, bookmark, timestamp, correlation_id, expiration, seq"
_CHECKPOINTS: Final = "journal_checkpoint"
_SET_CHECKPOINT: Final = (
    f'INSERT OR REPLACE INTO "{_CHECKPOINTS}" (tbl, journal_index) VALUES (?, ?)'
)
_CHUNK: Final = 500  # keys per "IN (...)" statement, well under SQLite's variable limit

_Row = tuple[str, bytes, str | None, str | None, str | None, float | None, int]


@dataclass(slots=True)
class SowRecord:
    """One stored SOW record."""

    key: str  # the `k` sent to clients
    data: bytes  # the stored payload
    bookmark: str  # bookmark of the publish that last wrote it ("" if none)
    timestamp: str  # AMPS timestamp of that write, e.g. "20261122T180500.123456Z"
    correlation_id: str | None
    expiration: float | None  # absolute epoch seconds or None
    seq: int  # monotonically increasing write counter (insertion/update order)


class SowWatcher(Protocol):
    """Told of every change of a SOW topic's records (views over SOW topics, ``views``)."""

    def record_changed(self, sow: SowTopic, key: str, before: Any, after: Any) -> None:
        """Record ``key`` went from ``before`` to ``after`` (parsed documents; ``None``:
        absent or unparseable)."""

    def records_reloaded(self, sow: SowTopic) -> None:
        """A rolled-back batch reloaded every record: recompute from its records."""


def _record(row: _Row) -> SowRecord:
    key, data, bookmark, timestamp, correlation_id, expiration, seq = row
    return SowRecord(
        key=key,
        data=bytes(data),
        bookmark=bookmark or "",
        timestamp=timestamp or "",
        correlation_id=correlation_id,
        expiration=None if expiration is None else float(expiration),
        seq=int(seq),
    )


def table_name(topic: str) -> str:
    """A safe, unique SQLite identifier for ``topic`` (several topics may share a file)."""
    readable = re.sub(r"[^A-Za-z0-9_]", "_", topic)[:48]
    digest = hashlib.blake2b(topic.encode("utf-8"), digest_size=4).hexdigest()
    return f"sow_{readable}_{digest}"


def _key_bytes(value: Any) -> bytes:
    """Canonical byte form of one key field value (absent/null is empty)."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str).encode("utf-8")


def _build_indexes(
    topic: str, keys: tuple[str, ...], configured: Sequence[Sequence[str]]
) -> tuple[HashIndex, ...]:
    out: list[HashIndex] = []
    for paths in configured:
        try:
            index = HashIndex(paths)
        except ValueError as exc:
            raise ValueError(f"bad hash index of {topic!r}: {exc}") from None
        if any(other.fields == index.fields for other in out):
            raise ValueError(f"{topic!r} has two hash indexes over {list(paths)!r}")
        out.append(index)
    try:
        automatic = HashIndex(keys, automatic=True) if keys else None
    except ValueError:  # a key path no filter can name (or named twice): no index over it
        automatic = None
    if automatic is not None and not any(i.fields == automatic.fields for i in out):
        out.append(automatic)
    return tuple(out)


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


class SowTopic:
    """The SOW of one topic.

    :param topic: topic name (also the default key domain and the table name seed).
    :param keys: key paths such as ``("/orderId",)``; several make a compound key.
        May be empty for topics whose publishers always supply ``sow_key``.
    :param message_type: payload type (``json``, ``msgpack``, ``binary``, ...).
    :param filename: SQLite file; ``None`` keeps the SOW in memory.
    :param key_domain: key domain for generated keys (default: the topic name).
    :param memo_indexes: the ``<Index>`` fields (checked and listed).
    :param hash_indexes: the configured hash indexes (``<HashIndex>``), each a sequence of
        identifiers; a topic with key fields also gets the automatic one over them
        (:mod:`.sow_index`).
    """

    def __init__(
        self,
        topic: str,
        *,
        keys: Sequence[str],
        message_type: str = "json",
        filename: str | os.PathLike[str] | None = None,
        key_domain: str | None = None,
        hash_indexes: Sequence[Sequence[str]] = (),
        memo_indexes: Sequence[str] = (),
    ) -> None:
        if isinstance(keys, str):
            raise TypeError("keys must be a sequence of paths, not a string")
        for path in keys:
            try:
                if not parse_path(path):
                    raise ValueError("'/' is not a key field")
            except ValueError as exc:
                raise ValueError(f"bad SOW key path {path!r} for {topic!r}: {exc}") from None
        self.topic: Final = topic
        self.keys: Final = tuple(keys)
        self.message_type: Final = message_type.lower()
        self.key_domain: Final = topic if key_domain is None else key_domain
        self.filename: Final = None if filename is None else os.fspath(filename)
        self.hash_indexes: Final = _build_indexes(topic, self.keys, hash_indexes)
        """The hash indexes over the records (the configured ones, then the automatic one
        over the key fields unless a configured one has the same fields)."""
        self._maintained: list[HashIndex] = [i for i in self.hash_indexes if not i.automatic]
        """The indexes kept current: the configured ones from the start, the automatic one
        from the first query it answers (a topic never queried by its key pays nothing)."""
        self.memo_indexes: Final = tuple(memo_indexes)
        """The ``<Index>`` fields: every record is held parsed (the document cache), which
        serves any field as AMPS' memo indexes do; kept to be listed."""
        for path in self.memo_indexes:
            index_steps(path)
        self._table: Final = table_name(topic)
        self._closed = False

        target = ":memory:" if self.filename is None else self.filename
        conn = sqlite3.connect(target, check_same_thread=False)
        self._conn: Final = conn
        self._db: Final = sqlite_utils.Database(conn)
        if self.filename is not None:
            self._db.enable_wal()
            conn.execute("PRAGMA synchronous=NORMAL")
        table = self._db.table(self._table)
        table.create(
            {
                "k": str,
                "data": bytes,
                "bookmark": str,
                "timestamp": str,
                "correlation_id": str,
                "expiration": float,
                "seq": int,
            },
            pk="k",
            not_null={"data", "seq"},
            if_not_exists=True,
        )
        table.create_index(["seq"], index_name=f"{self._table}_seq", if_not_exists=True)
        table.create_index(
            ["expiration"], index_name=f"{self._table}_expiration", if_not_exists=True
        )
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{_CHECKPOINTS}" '
            "(tbl TEXT PRIMARY KEY, journal_index INTEGER NOT NULL)"
        )
        conn.commit()
        self._journal_index = self._load_journal_index()
        self._held: int | None = None
        """A journal record this SOW should hold but could not apply (:meth:`hold_checkpoint`):
        the checkpoint stays below it for the rest of this process."""

        # key -> parsed doc (None when unparseable); insertion order == seq order.
        self._docs: dict[str, Any] = {}
        self._next_seq = 1
        self._batching = False
        self.counters: dict[str, int] = {"insert_count": 0, "update_count": 0, "delete_count": 0}
        """Since this start (AMPS' SOW statistics): records inserted, records replaced, records
        removed (deleted or expired); a rolled-back batch may leave them a little ahead."""
        self.watchers: list[SowWatcher] = []
        """Told of every record change (insert, replace, delete, expiration)."""
        self._load_docs()
        if self._docs:
            _log.info("SOW %r: loaded %d records from %s", topic, len(self._docs), target)

    def _load_docs(self) -> None:
        """(Re)build the document cache from the table."""
        self._docs.clear()
        for index in self._maintained:
            index.clear()
        load_sql = f'SELECT k, data, seq FROM "{self._table}" ORDER BY seq'
        for key, data, seq in self._conn.execute(load_sql):
            doc = decode(self.message_type, bytes(data))
            self._docs[key] = doc
            for index in self._maintained:
                index.add(key, doc, int(seq))
            self._next_seq = max(self._next_seq, int(seq) + 1)

    def _load_journal_index(self) -> int:
        row = self._conn.execute(
            f'SELECT journal_index FROM "{_CHECKPOINTS}" WHERE tbl = ?', (self._table,)
        ).fetchone()
        return 0 if row is None else int(row[0])

    # ------------------------------------------------------------------ keys

    def compute_key(self, doc: Any, sow_key: str | None = None) -> str:
        """Return the SOW key ``k`` for ``doc``.

        A non-empty user-supplied ``sow_key`` wins and is returned verbatim.
        Otherwise: decimal string of a 64-bit BLAKE2b checksum over the key
        domain and the value at each key path (length-prefixed, so values
        cannot run into each other); stable across processes.  A missing
        (or null) key field counts as empty and logs a warning.
        """
        if sow_key:
            return sow_key
        if not self.keys:
            _log.warning("SOW %r has no key fields and no sow_key was given", self.topic)
        digest = hashlib.blake2b(digest_size=8)
        for part in (self.key_domain.encode("utf-8"), *self._key_values(doc)):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
        return str(int.from_bytes(digest.digest(), "big"))

    def _key_values(self, doc: Any) -> Iterator[bytes]:
        for path in self.keys:
            value = lookup_path(doc, path)
            if value is None:
                _log.warning("SOW %r: key field %s missing; treated as empty", self.topic, path)
            yield _key_bytes(value)

    # ------------------------------------------------------------------ writes

    def publish(
        self,
        data: bytes,
        *,
        doc: Any,
        sow_key: str | None,
        bookmark: str,
        timestamp: str,
        correlation_id: str | None = None,
        expiration: float | None = None,
        journal_index: int | None = None,
    ) -> tuple[SowRecord, SowRecord | None]:
        """Insert or replace the record for ``doc``; return ``(new, previous or None)``.

        ``doc`` is the parsed payload; when ``None`` it is decoded from ``data``
        (stays ``None`` for opaque types, which then need ``sow_key``). ``journal_index``:
        the transaction-log record of this write (becomes :attr:`journal_index` atomically).
        """
        self._check_open()
        if doc is None:
            doc = decode(self.message_type, data)
        key = self.compute_key(doc, sow_key)
        previous = self.get(key)
        record = self._write(
            key, bytes(data), doc, bookmark, timestamp, correlation_id, expiration, journal_index
        )
        return record, previous

    def delta_publish(
        self,
        data: bytes,
        *,
        doc: Any,
        sow_key: str | None,
        bookmark: str,
        timestamp: str,
        correlation_id: str | None = None,
        expiration: float | None = None,
        journal_index: int | None = None,
    ) -> tuple[SowRecord, SowRecord | None, Any]:
        """Merge ``doc`` into the existing record (amps-semantics.md 2.2).

        Stores and returns the merged full record: ``(new, previous, merged_doc)``.
        Without an existing record, or when either side cannot be parsed (opaque
        message type, malformed payload), it behaves as a plain publish.
        """
        self._check_open()
        if doc is None:
            doc = decode(self.message_type, data)
        key = self.compute_key(doc, sow_key)
        previous = self.get(key)
        merged: Any = doc
        stored = bytes(data)
        if previous is not None:
            old = self._docs.get(key)
            if old is not None and doc is not None:
                merged = delta_merge(old, doc)
                stored = encode(self.message_type, merged)
            else:
                _log.debug("SOW %r: delta for %s not mergeable; replacing", self.topic, key)
        record = self._write(
            key, stored, merged, bookmark, timestamp, correlation_id, expiration, journal_index
        )
        return record, previous, merged

    def _write(
        self,
        key: str,
        data: bytes,
        doc: Any,
        bookmark: str,
        timestamp: str,
        correlation_id: str | None,
        expiration: float | None,
        journal_index: int | None = None,
    ) -> SowRecord:
        record = SowRecord(
            key=key,
            data=data,
            bookmark=bookmark,
            timestamp=timestamp,
            correlation_id=correlation_id,
            expiration=None if expiration is None else float(expiration),
            seq=self._next_seq,
        )
        journal_index = self._checkpoint_for(journal_index)
        try:
            self._conn.execute(
                f'INSERT OR REPLACE INTO "{self._table}" ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)',
                (
                    record.key,
                    record.data,
                    record.bookmark,
                    record.timestamp,
                    record.correlation_id,
                    record.expiration,
                    record.seq,
                ),
            )
            if journal_index is not None:
                self._conn.execute(_SET_CHECKPOINT, (self._table, journal_index))
            if not self._batching:
                self._conn.commit()
        except BaseException:
            if not self._batching:  # in a batch, batch() rolls everything back
                self._conn.rollback()
            raise
        if journal_index is not None:
            self._journal_index = journal_index
        self._next_seq += 1
        existed = key in self._docs
        before = self._docs.pop(key, None)  # re-insert at the end: dict order tracks seq
        self._docs[key] = doc
        for index in self._maintained:
            index.add(key, doc, record.seq)
        self.counters["update_count" if existed else "insert_count"] += 1
        for watcher in tuple(self.watchers):
            watcher.record_changed(self, key, before, doc)
        return record

    # ------------------------------------------------------------------ reads

    @property
    def last_seq(self) -> int:
        """The write counter of the latest insert or replace (0: none yet)."""
        return self._next_seq - 1

    def written_since(self, seq: int) -> list[SowRecord]:
        """The records inserted or replaced after write counter ``seq``, in write order."""
        self._check_open()
        sql = f'SELECT {_COLUMNS} FROM "{self._table}" WHERE seq > ? ORDER BY seq'
        return [_record(row) for row in self._conn.execute(sql, (seq,))]

    def get(self, key: str) -> SowRecord | None:
        """The record stored under ``key``, or ``None``."""
        self._check_open()
        if key not in self._docs:
            return None
        row = self._conn.execute(
            f'SELECT {_COLUMNS} FROM "{self._table}" WHERE k = ?', (key,)
        ).fetchone()
        return None if row is None else _record(row)

    def doc(self, key: str) -> Any:
        """Parsed document of the record ``key`` (cached; ``None`` if unparseable).

        Raises :class:`KeyError` when there is no such record.
        """
        return self._docs[key]

    def query(
        self,
        predicate: Callable[[Any], bool] | None = None,
        *,
        keys: Sequence[str] | None = None,
        order_by: OrderBy | None = None,
        top_n: int | None = None,
        skip_n: int = 0,
        filter_text: str | None = None,
    ) -> tuple[list[SowRecord], int]:
        """Return ``(records, matches)``.

        ``predicate`` is called with parsed documents; records whose payload
        cannot be parsed never match a predicate.  ``keys`` restricts to those
        SOW keys. ``filter_text``, the filter ``predicate`` was compiled from, lets a hash
        index (:attr:`hash_indexes`) narrow the records the predicate is run on when the
        filter is one it answers; the result is the same either way. ``matches`` counts
        every matching record before ``skip_n`` / ``top_n`` are applied. Default order is
        write order (``seq``); with ``order_by`` ties keep write order.
        """
        self._check_open()
        if top_n is not None and top_n < 0:
            raise ValueError(f"top_n must be >= 0, got {top_n}")
        if skip_n < 0:
            raise ValueError(f"skip_n must be >= 0, got {skip_n}")
        matched = self._select_keys(predicate, keys, filter_text)
        matches = len(matched)
        if order_by is not None:
            docs = self._docs
            matched.sort(key=lambda k: order_by.key(docs[k]))
        end = None if top_n is None else skip_n + top_n
        return self._fetch(matched[skip_n:end]), matches

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, key: object) -> bool:
        return key in self._docs

    def __iter__(self) -> Iterator[str]:
        """Iterate over SOW keys in write order (a snapshot)."""
        return iter(list(self._docs))

    def index_statistics(self) -> list[dict[str, Any]]:
        """Per hash index: its fields, whether it is the automatic one, the records it holds
        and the queries it answered (the admin interface's ``hash_indexes``)."""
        return [index.statistics() for index in self.hash_indexes]

    def index_for(self, filter_text: str | None) -> tuple[HashIndex, list[str]] | None:
        """The hash index that answers the filter ``filter_text`` and the records that can
        match it (write order), or ``None`` when the records must be scanned."""
        if not filter_text or not self.hash_indexes:
            return None
        plan = equality_plan(filter_text)
        if not plan:
            return None
        fields = frozenset(plan)
        for index in self.hash_indexes:
            if index.fields == fields:
                if index not in self._maintained:
                    # built from the cache; positions are in write order and below the
                    # write counter of every later write, so the order holds
                    for position, (key, doc) in enumerate(self._docs.items()):
                        index.add(key, doc, position)
                    self._maintained.append(index)
                return index, index.candidates(plan)
        return None

    def _select_keys(
        self,
        predicate: Callable[[Any], bool] | None,
        keys: Iterable[str] | None,
        filter_text: str | None = None,
    ) -> list[str]:
        docs = self._docs
        indexed = None if predicate is None else self.index_for(filter_text)
        if indexed is not None:
            candidates: Iterable[str] = indexed[1]
            if keys is not None:
                wanted = set(keys)
                candidates = [k for k in candidates if k in wanted]
        elif keys is not None:
            wanted = set(keys)
            candidates = (k for k in docs if k in wanted)
        else:
            candidates = docs
        if predicate is None:
            return list(candidates)
        out: list[str] = []
        for key in candidates:
            doc = docs[key]
            if doc is not None and predicate(doc):
                out.append(key)
        return out

    def _fetch(self, keys: Sequence[str]) -> list[SowRecord]:
        """Records for ``keys``, in the order given."""
        if not keys:
            return []
        by_key: dict[str, SowRecord] = {}
        for chunk in _chunks(keys):
            marks = ",".join("?" * len(chunk))
            sql = f'SELECT {_COLUMNS} FROM "{self._table}" WHERE k IN ({marks})'
            for row in self._conn.execute(sql, tuple(chunk)):
                by_key[row[0]] = _record(row)
        return [by_key[k] for k in keys if k in by_key]

    # ------------------------------------------------------------------ removal

    def delete(
        self,
        predicate: Callable[[Any], bool] | None = None,
        *,
        keys: Sequence[str] | None = None,
        data_doc: Any = None,
        sow_key: str | None = None,
        journal_index: int | None = None,
    ) -> list[SowRecord]:
        """Delete records and return them (write order).

        Criteria combine with AND: ``predicate`` over parsed documents,
        ``keys`` (``sow_keys``), and/or the record identified by a message body
        ``data_doc`` (its key per :meth:`compute_key`, or ``sow_key`` when given;
        ``sow_key`` alone addresses that key).  With no criteria at all every
        record is deleted (like the filter ``1=1``).  One transaction, which also
        sets :attr:`journal_index` when ``journal_index`` is given.
        """
        self._check_open()
        restrict: list[str] | None = None if keys is None else list(keys)
        if data_doc is not None or sow_key:
            target = self.compute_key(data_doc, sow_key)
            restrict = [target] if restrict is None or target in restrict else []
        victims = self._fetch(self._select_keys(predicate, restrict))
        self._remove(victims, journal_index)
        return victims

    def expire(self, now: float) -> list[SowRecord]:
        """Remove and return records whose expiration is ``<= now`` (write order)."""
        self._check_open()
        rows = self._conn.execute(
            f'SELECT {_COLUMNS} FROM "{self._table}" '
            "WHERE expiration IS NOT NULL AND expiration <= ? ORDER BY seq",
            (now,),
        ).fetchall()
        victims = [_record(row) for row in rows]
        self._remove(victims)
        return victims

    def _remove(self, victims: Sequence[SowRecord], journal_index: int | None = None) -> None:
        if not victims:
            return
        journal_index = self._checkpoint_for(journal_index)
        keys = [r.key for r in victims]
        with self._db.atomic():
            for chunk in _chunks(keys):
                marks = ",".join("?" * len(chunk))
                self._conn.execute(
                    f'DELETE FROM "{self._table}" WHERE k IN ({marks})', tuple(chunk)
                )
            if journal_index is not None:
                self._conn.execute(_SET_CHECKPOINT, (self._table, journal_index))
        if journal_index is not None:
            self._journal_index = journal_index
        for key in keys:
            before = self._docs.pop(key, None)
            for index in self._maintained:
                index.remove(key)
            for watcher in tuple(self.watchers):
                watcher.record_changed(self, key, before, None)
        self.counters["delete_count"] += len(keys)

    # ------------------------------------------------------------------ recovery checkpoint

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Make the writes inside one transaction (recovery re-applies thousands at a time).

        If anything raises, every write of the batch is rolled back (the cache is reloaded
        from the file, :attr:`journal_index` too) and the exception propagates. Nested
        batches are part of the outer one.
        """
        self._check_open()
        if self._batching:
            yield
            return
        self._batching = True
        try:
            yield
            self._conn.commit()
        except BaseException:
            self._conn.rollback()
            self._load_docs()
            self._journal_index = self._load_journal_index()
            for watcher in tuple(self.watchers):
                watcher.records_reloaded(self)
            raise
        finally:
            self._batching = False

    def take_back(
        self, written: Sequence[str], restore: Sequence[SowRecord], *, journal_index: int
    ) -> None:
        """Undo committed writes (their journal append failed): remove the records of keys
        ``written``, put back ``restore`` (records as they were before, e.g. a publish's
        previous record or a delete's victims) and the checkpoint ``journal_index``, in one
        transaction; the watchers are told the records were reloaded.

        Raises:
            sqlite3.Error: the file could not be written (nothing changed).
        """
        self._check_open()
        try:
            for chunk in _chunks(list(written)):
                marks = ",".join("?" * len(chunk))
                self._conn.execute(
                    f'DELETE FROM "{self._table}" WHERE k IN ({marks})', tuple(chunk)
                )
            self._conn.executemany(
                f'INSERT OR REPLACE INTO "{self._table}" ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)',
                [
                    (r.key, r.data, r.bookmark, r.timestamp, r.correlation_id, r.expiration, r.seq)
                    for r in restore
                ],
            )
            self._conn.execute(_SET_CHECKPOINT, (self._table, journal_index))
            self._conn.commit()
        except BaseException:
            self._conn.rollback()
            raise
        self._journal_index = journal_index
        self._load_docs()
        for watcher in tuple(self.watchers):
            watcher.records_reloaded(self)

    def hold_checkpoint(self, index: int) -> None:
        """Journal record ``index`` belongs in this SOW but could not be applied (a storage
        error while the record was already journaled, e.g. one received by replication).

        From now on, until the process ends, writes still apply but the checkpoint
        (:attr:`journal_index`) no longer moves: the next start re-applies everything after
        it, that record included, instead of skipping it for good.
        """
        if self._held is None or index < self._held:
            self._held = index
            _log.warning(
                "SOW %r: journal record %d is missing; it is re-applied at the next start",
                self.topic,
                index,
            )

    def _checkpoint_for(self, journal_index: int | None) -> int | None:
        """The checkpoint a write may record: none while a record is held."""
        return None if self._held is not None else journal_index

    @property
    def journal_index(self) -> int:
        """The transaction-log index this SOW's state reflects (0: none, rebuild it all).

        Every journal record at or below it that touches this topic is in the stored state.
        """
        return self._journal_index

    def set_journal_index(self, index: int) -> None:
        """Record that the state reflects every journal record up to ``index`` (its own
        transaction; call it when that is true, e.g. between two commands). Never at or past
        a record held by :meth:`hold_checkpoint`."""
        self._check_open()
        if self._held is not None:  # it may move back (a lost journal tail), never forward
            index = min(index, self._journal_index, self._held - 1)
        if index == self._journal_index:
            return
        try:
            self._conn.execute(_SET_CHECKPOINT, (self._table, index))
            self._conn.commit()
        except BaseException:
            self._conn.rollback()
            raise
        self._journal_index = index

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"SOW {self.topic!r} is closed")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Commit and close the database; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.commit()
        finally:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.filename or ":memory:"
        return f"SowTopic({self.topic!r}, keys={list(self.keys)!r}, records={len(self)}, {where})"
