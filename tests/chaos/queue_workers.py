"""Queue consumers of the chaos run (:mod:`tests.chaos.run`) and their audit.

The chaos server declares a queue ``chaos_q`` over the journaled topic ``chaos`` that the
publishers write to. Each consumer is an :class:`HAClient` subscribed to the queue with
``max_backlog`` and auto-ack batching (``set_ack_batch_size``); one of them is slow. Their
acks go through the HA client's publish store with ``persisted`` acks.

A consumer's ledger (``<name>.ledger``, one ``write`` per line) holds:

* ``{"life": pid, "i": n, "pub": ..., "s": seq, "lp": ..., "t": time}``: the ``n``-th message
  this process processed (written in the handler, before it returns and auto-ack queues the
  ack), with the delivery's ``lp`` header: the server's lease end, ``LeasePeriod`` after the
  server leased it, so ``lp - LeasePeriod`` is when the server delivered it;
* ``{"life": pid, "upto": n, "t": time}``: written after ``flush_acks()`` and a successful
  ``publish_flush()``: the acks of messages ``i < n`` of this process are persisted on the
  server (handlers run one after the other, so when ``count`` messages were seen, the acks of
  the first ``count - 1`` are queued; the last handler may still be running).
* ``{"life": pid, "refused_ack": bookmarks, "reason": ...}``: an ack the server refused
  (``--disk-full``; written by the failed-write handler before the flush covering it returns,
  and a flush completes on refusals too): those messages are not acknowledged, so the audit
  does not hold their redelivery against a later ``upto``.

The audit (:func:`check_queue`), message by message: every message acknowledged to a
publisher was processed by some consumer (nothing lost); no message was *delivered by the
server* (``lp - LeasePeriod``, the server's clock, the same machine's) after a persisted
``upto`` line covered an earlier processing of it (an acknowledged message is never
redelivered once its ack is persisted); redeliveries (processings beyond the first) are
counted and reported. Processing times are not used for that check: a slow consumer
processes a message it was leased before the ack some time after it (its backlog waits in
its client), which is no redelivery after the ack.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

QUEUE = "chaos_q"

QUEUE_XML = """  <SOW>
    <Queue><Name>chaos_q</Name><MessageType>json</MessageType>
      <UnderlyingTopic>chaos</UnderlyingTopic>
      <LeasePeriod>{lease}</LeasePeriod>
      <MaxPerSubscriptionBacklog>20</MaxPerSubscriptionBacklog></Queue>
  </SOW>
"""
"""The queue the consumers read, inserted in the chaos server's configuration."""


def _append(fd: int, line: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())


def place_subscription(place: Callable[[], object], logged_on: Callable[[], bool]) -> None:
    """Place a worker's subscription, again when the connection dropped while it was in
    flight: the HA client re-places only subscriptions the server acknowledged, and a fault
    (a cut, the server killed) can land on the first placement of a worker just started."""
    from ampsclient.exceptions import DisconnectedError

    while True:
        try:
            place()
            return
        except DisconnectedError:
            while not logged_on():  # the HA client reconnects by itself: wait for it
                time.sleep(0.05)


def run_consumer(args: argparse.Namespace) -> int:
    """A queue consumer process (``--role consumer``) until ``stop-<name>`` exists."""
    import logging

    from ampsclient import Message
    from ampsclient.exceptions import AMPSError
    from ampsclient.sync import HAClient

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
    )
    work = Path(args.work)
    fd = os.open(work / f"{args.name}.ledger", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stop_file = work / f"stop-{args.name}"
    life = os.getpid()
    lock = threading.Lock()
    seen = [0]
    client = HAClient(args.name)
    client.set_reconnect_delay(100)
    if args.heartbeat:
        client.set_heartbeat(args.heartbeat)
    delay = args.delay

    def on_message(message: Message) -> None:
        body = json.loads(message.get_data())
        pid, seq_text = (message.bookmark or "").split("|")[:2]
        seq = int(seq_text)
        with lock:
            i = seen[0]
            seen[0] += 1
        line = {"life": life, "i": i, "pub": body["pub"], "s": seq, "lp": message.lease_period}
        line["pid"] = pid
        line["t"] = time.time()
        _append(fd, line)
        if delay:
            time.sleep(delay)

    def on_refused(message: Message, reason: str) -> None:
        # an ack the server refused (a full disk): its messages are not acknowledged, the
        # server may lease them again; written before the publish_flush covering it returns
        _append(fd, {"life": life, "refused_ack": message.bookmark or "", "reason": reason})

    client.set_failed_write_handler(on_refused)
    for uri in args.uri.split(","):
        client.get_server_chooser().add(uri)
    client.connect_and_logon()
    client.set_auto_ack(True)
    client.set_ack_batch_size(args.ack_batch)
    client.set_ack_timeout(200)
    place_subscription(
        lambda: client.subscribe(on_message, QUEUE, max_backlog=args.backlog),
        lambda: client.logged_on,
    )
    try:
        while not stop_file.exists():
            time.sleep(0.2)
            with lock:
                upto = seen[0] - 1
            if upto <= 0:
                continue
            try:
                client.flush_acks()
                client.publish_flush(2000)
            except AMPSError:
                continue  # the server is away: the acks stay in the store, replayed later
            _append(fd, {"life": life, "upto": upto, "t": time.time()})
    finally:
        client.close()  # pending acks are sent first
        os.close(fd)
    return 0


@dataclass
class QueueAudit:
    """What :func:`check_queue` found."""

    consumers: int = 0
    processed: int = 0
    distinct: int = 0
    lost: int = 0
    redeliveries: int = 0
    after_persisted_ack: int = 0
    refused_acks: int = 0
    """Messages whose ack the server refused (``--disk-full``): not acknowledged, so their
    redelivery is no redelivery after a persisted ack."""
    acks_persisted: int = 0
    per_consumer: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The figures, for the run's report."""
        if not self.consumers:
            return []
        each = ", ".join(f"{k} {v}" for k, v in sorted(self.per_consumer.items()))
        return [
            f"queue {QUEUE}: {self.consumers} consumers, processed {self.processed} ({each}),"
            f" distinct messages {self.distinct}, acks known persisted {self.acks_persisted}",
            f"queue losses: {self.lost}",
            f"queue redeliveries (processings beyond a message's first): {self.redeliveries}",
            f"queue redelivered (by the server) after its ack was persisted: "
            f"{self.after_persisted_ack} (acks refused by the server: {self.refused_acks})",
        ]


def _read(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if path.exists():
        for raw in path.read_bytes().splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
    return out


def processed_keys(work: Path, consumers: list[str]) -> set[tuple[str, int]]:
    """Every ``(publisher, sequence)`` some consumer processed (for the drain's wait)."""
    return {
        (line["pub"], line["s"])
        for name in consumers
        for line in _read(work / f"{name}.ledger")
        if "i" in line
    }


def queue_complete(
    work: Path,
    consumers: list[str],
    expected: dict[str, tuple[int, int]],
    refused: Set[tuple[str, int]] = frozenset(),
) -> bool:
    """Every acknowledged publication (not ``refused`` by the server) processed by some
    consumer."""
    if not consumers:
        return True
    got = processed_keys(work, consumers)
    return all(
        (pub, s) in got or (pub, s) in refused
        for pub, (first, last) in expected.items()
        for s in range(first, last + 1)
    )


def parse_lp(lp: str) -> float:
    """Epoch seconds of an AMPS timestamp ``YYYYmmddTHHMMSS.ffffffZ`` (UTC)."""
    whole, _, frac = lp.rstrip("Z").partition(".")
    t = datetime.strptime(whole, "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    return t.timestamp() + (int(frac.ljust(6, "0")[:6]) / 1e6 if frac else 0.0)


def parse_duration(text: str) -> float:
    """Seconds of a configuration duration (``3s``, ``500ms``, ``1m``)."""
    for unit, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def check_queue(
    work: Path,
    consumers: list[str],
    expected: dict[str, tuple[int, int]],
    *,
    lease_period: float,
    refused: Set[tuple[str, int]] = frozenset(),
) -> QueueAudit:
    """The audit, message by message (see the module docstring); ``lease_period``: the
    queue's ``LeasePeriod`` in seconds; ``refused``: publishes the server refused (a full
    disk), not acknowledged so not expected."""
    audit = QueueAudit(consumers=len(consumers))
    if not consumers:
        return audit
    # every processing: (time, consumer, life, index, key); the time its ack was persisted
    processings: list[tuple[float, str, int, int, tuple[str, int]]] = []
    delivered: dict[tuple[str, int, int], float] = {}  # by the server: lp - LeasePeriod
    ack_persisted_at: dict[tuple[str, int, int], float] = {}
    refused_bookmarks: set[tuple[str, int]] = set()  # (publisher id, sequence)
    key_of: dict[tuple[str, int], tuple[str, int]] = {}  # (publisher id, sequence) -> key
    for name in consumers:
        lines = _read(work / f"{name}.ledger")
        marks: dict[int, list[tuple[int, float]]] = defaultdict(list)
        count = 0
        for line in lines:
            if "refused_ack" in line:
                for bm in str(line["refused_ack"]).split(","):
                    parts = bm.split("|")
                    if len(parts) >= 2 and parts[1].isdigit():
                        refused_bookmarks.add((parts[0], int(parts[1])))
            elif "i" in line:
                key = (line["pub"], int(line["s"]))
                if "pid" in line:
                    key_of[(line["pid"], int(line["s"]))] = key
                processings.append((line["t"], name, line["life"], line["i"], key))
                delivered[(name, line["life"], line["i"])] = parse_lp(line["lp"]) - lease_period
                count += 1
            elif "upto" in line:
                marks[line["life"]].append((line["upto"], line["t"]))
        audit.per_consumer[name] = count
        for life, points in marks.items():  # written in time order, upto never decreasing
            uptos = [upto for upto, _ in points]
            for t, n, lf, i, _ in processings:
                if n == name and lf == life:
                    at = bisect.bisect_right(uptos, i)  # the first mark with i < upto...
                    while at < len(points) and points[at][1] < t:
                        at += 1  # ...written after the processing
                    if at < len(points):
                        ack_persisted_at[(name, life, i)] = points[at][1]
    audit.processed = len(processings)
    audit.acks_persisted = len(ack_persisted_at)
    by_key: dict[tuple[str, int], list[tuple[float, str, int, int]]] = defaultdict(list)
    for t, name, life, i, key in processings:
        by_key[key].append((t, name, life, i))
    audit.distinct = len(by_key)
    counts = Counter({k: len(v) for k, v in by_key.items()})
    audit.redeliveries = sum(n - 1 for n in counts.values())
    refused_keys = {key_of[b] for b in refused_bookmarks if b in key_of}
    audit.refused_acks = len(refused_keys)
    for key, runs in by_key.items():
        if key in refused_keys:  # its ack was refused: the server may deliver it again
            continue
        persisted = [
            ack_persisted_at[(n, life, i)]
            for _, n, life, i in runs
            if (n, life, i) in ack_persisted_at
        ]
        if not persisted:
            continue
        first_ack = min(persisted)
        late = [
            (delivered[(n, life, i)], n)
            for _, n, life, i in runs
            if delivered[(n, life, i)] > first_ack
        ]
        if late:
            audit.after_persisted_ack += len(late)
            audit.problems.append(
                f"queue: {key} delivered to {late[0][1]} {late[0][0] - first_ack:.3f} s after "
                "its ack was persisted"
            )
    for pub, (first, last) in expected.items():
        missing = [
            s for s in range(first, last + 1) if (pub, s) not in by_key and (pub, s) not in refused
        ]
        audit.lost += len(missing)
        if missing:
            audit.problems.append(f"queue: lost {pub} {missing[:5]}...")
    if audit.processed == 0:
        audit.problems.append("queue: nothing processed")
    return audit
