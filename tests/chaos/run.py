"""Chaos run: publishers, subscribers and a server in separate processes, with faults.

    python -m tests.chaos.run --seconds 60          # from the repository root
    python tests/chaos/run.py --seconds 60 --seed 7
    python -m tests.chaos.run --seconds 60 --replicated   # a hot-hot pair instead of one server

Faults injected at random for ``--seconds``: ``kill -9`` of a publisher, of a subscriber or of
the server (each restarted at once: same name, same store files, same ports), every
connection cut by the loopback proxy, and the traffic stalled by the proxy. One subscriber is
slow (it sleeps on each message) on a server that offlines slow clients to disk.

Publishers are :class:`HAClient` s with a file publish store (fsync per message for even
``pub-N``, none for odd ones); after each batch they wait for
``publish_flush`` and write ``acked S`` to their ledger (everything up to sequence S is
persisted on the server). Subscribers are :class:`HAClient` s with a bookmark subscription
whose recovery points are kept by :class:`LedgerAdapter`: the line that records a processed
message and the line that moves its recovery point are ONE ``write``, so a subscriber killed at
any instant neither loses nor repeats a message.

Queue consumers (:mod:`tests.chaos.queue_workers`, single-server mode, ``--consumers``):
:class:`HAClient` s consuming the queue ``chaos_q`` over the topic ``chaos`` with
``max_backlog`` and auto-ack batches, one slow, killed by the ``kill_consumer`` fault; the
queue audit (:func:`~tests.chaos.queue_workers.check_queue`) checks them message by message.

The ledger check, after the faults stop and every publisher flushed: for every subscriber and
every publisher, each acknowledged sequence was delivered exactly once, and the sequences came
in increasing order. The server's RSS is sampled throughout. The figures are printed and the
exit status is 0 only when every check passed.

With ``--replicated`` (:func:`orchestrate_replicated`) the server is a hot-hot sync pair A/B;
faults also kill -9 A or B (never both: the killed one is restarted and caught up before the
next server kill) and partition/heal the A-B link; clients list both instances in their
chooser and some connect over WebSocket (``ws://`` through the byte-level proxy). After the
ledger check, both instances' journals are compared (EPOCH replays by bookmark and payload).

With ``--net-faults latency,fragment,coalesce,bandwidth,half_open`` (or ``all``; off by
default) the proxies also do what ``netem`` would (:mod:`tests.chaos.net_faults`): latency
with jitter, fragmented and coalesced byte streams, bandwidth limits, and one-way partitions
(``half_open`` connections) that the clients' heartbeats (``--heartbeat``, 1 s when
``half_open`` is on) and the server's detect; detection and failover times are reported.

Storage and clock faults, one server only, each behind a flag: ``--disk-full`` (the
transaction log on a tmpfs filled and freed, :mod:`tests.chaos.disk_faults`; publishes the
server refuses are recorded by the publishers and excluded from the check as not
acknowledged), ``--slow-disk`` (the server's fsyncs stalled or slowed) and ``--clock-steps``
(its wall clock stepped back or forward) through test-only hooks in the server process
(:mod:`tests.chaos.hook_faults`, :mod:`tests.chaos.server_hooks`), ``--corrupt-at-restart``
(a torn record appended to the journal between a kill and the restart) and
``--memory-limit MB`` (the server in a memory cgroup squeezed at fault times,
:mod:`tests.chaos.memory_faults`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.chaos.disk_faults import (  # noqa: E402
    inject_disk_full,
    mount_tmpfs,
    refused_sequences,
    tear_journal_tail,
    unmount,
)
from tests.chaos.hook_faults import (  # noqa: E402
    HookedServer,
    HookReport,
    inject_clock_step,
    inject_slow_disk,
)
from tests.chaos.memory_faults import MemoryCgroup, make_cgroup, squeeze  # noqa: E402
from tests.chaos.net_faults import NetReport, inject, parse_net_faults  # noqa: E402
from tests.chaos.queue_workers import (  # noqa: E402  (needs ROOT on the path)
    QUEUE_XML,
    QueueAudit,
    check_queue,
    parse_duration,
    place_subscription,
    queue_complete,
    run_consumer,
)

TOPIC = "chaos"
START_TIMEOUT = 120.0
"""Seconds a (re)started server has to listen: a restart replays its journal and queue state,
which takes long on a loaded machine (a 30-minute soak beside other work saw more than 30 s)."""

SERVER_XML = """<AMPSConfig>
  <Name>chaos</Name>
  <MessageMemoryLimit>16MB</MessageMemoryLimit>
  <ClientMaxCapacity>25%</ClientMaxCapacity>
  <MessageDiskPath>{disk}</MessageDiskPath>
  <TransactionLog><JournalDirectory>{journal}</JournalDirectory>
    <JournalSize>{journal_size}</JournalSize>
    <Topic><Name>chaos</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
    <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
  </Transports>
{queue}{actions}</AMPSConfig>
"""

REMOVE_JOURNAL_ACTION = """<Action>
      <On><Module>amps-action-on-schedule</Module><Options><Every>{every}</Every></Options></On>
      <Do><Module>amps-action-do-remove-journal</Module><Options><Age>{age}</Age></Options></Do>
    </Action>"""
"""``--remove-journal-age``: the journal files not written to for ``age`` removed every
``every`` (the AMPS configuration guide's ``amps-action-do-remove-journal``)."""


def journal_actions(args: argparse.Namespace) -> list[str]:
    """The ``<Action>`` elements the run's servers hold (``--remove-journal-age``)."""
    if not args.remove_journal_age:
        return []
    age, every = args.remove_journal_age, args.remove_journal_every
    return [REMOVE_JOURNAL_ACTION.format(age=age, every=every)]


# =========================================================================== workers


def _append(fd: int, line: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())


LEDGER_BLOCK = 1 << 16
"""Bytes :func:`last_points` reads at a time, from the end of a ledger backwards."""


def last_points(path: Path, sub_ids: tuple[str, ...]) -> dict[str, str]:
    """The last recovery point each of ``sub_ids`` wrote to the ledger at ``path``, read from
    the end backwards in :data:`LEDGER_BLOCK` blocks until every one is found (or the file's
    start is reached): a restarted subscriber reads its ledger's tail, not the whole file.

    The ledger grows by one line per delivery (190 MB per subscriber in a 16-minute soak);
    reading it whole at each ``kill_subscriber`` restart (``read_bytes().splitlines()`` and a
    ``json.loads`` per line) took the subscribers to 250-340 MB for the seconds of that read,
    which the soak's samples showed as subscriber RSS growth."""
    points: dict[str, str] = {}
    if not path.exists():
        return points
    wanted = set(sub_ids)
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        carry = b""  # the start of the line cut by the previous block's start
        while end > 0 and wanted:
            start = max(0, end - LEDGER_BLOCK)
            f.seek(start)
            chunk = f.read(end - start) + carry
            end = start
            lines = chunk.split(b"\n")
            carry = lines.pop(0) if start > 0 else b""
            for raw in reversed(lines):
                if not wanted:
                    break
                if b'"sub"' not in raw:
                    continue
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue  # a torn last line (never happens with one write per line)
                sub = line.get("sub")
                if sub in wanted:
                    points[sub] = line["point"]
                    wanted.discard(sub)
    return points


class LedgerAdapter:
    """A recovery point adapter whose file is also the subscriber's ledger of processed
    messages: ``update()`` writes the point together with the message being discarded."""

    def __init__(self, path: Path, *, sub_ids: tuple[str, ...] = ("s",)) -> None:
        self.path = path
        self.pending: dict[str, Any] | None = None
        self.points = last_points(path, sub_ids)
        """The last point of each of ``sub_ids`` in the ledger (those it has)."""
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def update(self, point: Any) -> None:
        line: dict[str, Any] = {"sub": point.sub_id, "point": point.bookmark}
        if self.pending is not None:
            line["msg"] = self.pending
            self.pending = None
        _append(self.fd, line)

    def purge(self, sub_id: str | None = None) -> None:
        return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __iter__(self) -> Iterator[Any]:
        from ampsclient.stores.recovery import RecoveryPoint

        for sub_id, bookmark in self.points.items():
            yield RecoveryPoint(sub_id, bookmark)


def _stop_requested(stop_file: Path) -> bool:
    return stop_file.exists()


def _worker_logging() -> None:
    import logging

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
    )


def run_publisher(args: argparse.Namespace) -> int:
    from ampsclient.exceptions import AMPSError
    from ampsclient.stores.publish import FilePublishStore
    from ampsclient.sync import HAClient

    _worker_logging()
    work = Path(args.work)
    ledger = os.open(work / f"{args.name}.ledger", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    first_written = (work / f"{args.name}.ledger").stat().st_size > 0
    stop_file = work / "stop-publishers"
    # the official form (a path: fsync per message) for even publishers; the odd ones do not
    # fsync (kill -9 loses nothing either way) and so publish through the C PublishLane
    path = str(work / f"{args.name}.store")
    odd = args.name[-1:].isdigit() and int(args.name[-1]) % 2 == 1
    client = HAClient(
        args.name, publish_store=FilePublishStore(path, fsync="never") if odd else path
    )
    client.set_reconnect_delay(100)

    def on_refused(message: Any, reason: str) -> None:
        # a failure persisted ack (a full disk): refused, not acknowledged; written before
        # the publish_flush that covers it returns (the flush completes on refusals too)
        _append(ledger, {"refused": message.get_sequence(), "reason": reason})

    client.set_failed_write_handler(on_refused)
    if args.heartbeat:
        client.set_heartbeat(args.heartbeat)
    for uri in args.uri.split(","):  # replicated mode: every instance, in preference order
        client.get_server_chooser().add(uri)
    client.connect_and_logon()
    k = 0
    last = 0
    pad = {"pad": "x" * args.pad} if args.pad else {}
    try:
        while not _stop_requested(stop_file):
            for _ in range(args.batch):
                k += 1
                last = client.publish(
                    TOPIC,
                    json.dumps({"pub": args.name, "k": k, "t": round(time.time(), 4), **pad}),
                )
                if not first_written:
                    _append(ledger, {"first": last})
                    first_written = True
            try:
                client.publish_flush(args.flush_timeout)
            except AMPSError:
                continue  # the server is away: keep storing, acknowledge later
            _append(ledger, {"acked": last})
            time.sleep(args.pause)
        while True:  # final flush: everything stored must be acknowledged
            try:
                client.publish_flush(5000)
                break
            except AMPSError:
                continue
        if last:
            _append(ledger, {"acked": last, "final": True})
    finally:
        client.close()
    return 0


def run_subscriber(args: argparse.Namespace) -> int:
    from ampsclient import Message
    from ampsclient.stores.bookmark import MemoryBookmarkStore
    from ampsclient.sync import HAClient

    _worker_logging()
    work = Path(args.work)
    adapter = LedgerAdapter(work / f"{args.name}.ledger")
    store = MemoryBookmarkStore(adapter)
    stop_file = work / f"stop-{args.name}"
    stats = Counter[str]()
    client = HAClient(args.name, bookmark_store=store)
    client.set_reconnect_delay(100)
    delay = args.delay

    def on_message(message: Message) -> None:
        bm = message.bookmark or ""
        parts = bm.split("|")
        body = json.loads(message.get_data())
        adapter.pending = {"pub": body["pub"], "k": body["k"], "pid": parts[0], "s": int(parts[1])}
        if "t" in body:  # publish and receipt times (the soak's latency and throughput windows)
            adapter.pending["t"] = body["t"]
            adapter.pending["rt"] = round(time.time(), 4)
        client.discard(message)
        if adapter.pending is not None:  # the recovery point did not move (not expected)
            _append(adapter.fd, {"msg": adapter.pending})
            adapter.pending = None
            stats["unpaired"] += 1
        stats["received"] += 1
        if delay:
            time.sleep(delay)
            if args.stall_every and stats["received"] % args.stall_every == 0:
                time.sleep(args.stall_for)  # a burst of slowness: the server queues for us

    def on_duplicate(message: Message) -> None:
        stats["duplicates_discarded"] += 1

    def on_unrouted(message: Message) -> None:
        # a delivery no subscription took: counted, so that a subscriber that got nothing
        # says whether the server sent it (the 30-minute soak's sub-2 could not, issue #32)
        if message.command == "publish":
            stats["unrouted"] += 1

    client.set_duplicate_message_handler(on_duplicate)
    client.set_last_chance_message_handler(on_unrouted)
    if args.heartbeat:
        client.set_heartbeat(args.heartbeat)
    for uri in args.uri.split(","):
        client.get_server_chooser().add(uri)
    start_point = store.get_most_recent("s")  # where this life resumes (diagnostics)
    client.connect_and_logon()
    place_subscription(
        lambda: client.bookmark_subscribe(
            on_message,
            TOPIC,
            HAClient.Bookmarks.MOST_RECENT,
            sub_id="s",
            options=args.options or None,
        ),
        lambda: client.logged_on,
    )
    try:
        while not _stop_requested(stop_file):
            time.sleep(0.05)
    finally:
        client.close()
        _append(adapter.fd, {"stats": dict(stats), "from": start_point})
        adapter.close()
    return 0


# =========================================================================== orchestrator


@dataclass
class Worker:
    role: str
    name: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    log: Path | None = None

    def start(self) -> None:
        assert self.log is not None
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--role", self.role, *self.args],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


@dataclass
class Report:
    seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    published_acked: int = 0
    checked: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    duplicates_discarded: int = 0
    max_rss_mb: float = 0.0
    rss_limit_mb: float = 0.0
    drain_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    """Wall seconds of the run's phases (start-up, faults, drain, stop, check)."""
    drain_parts: tuple[float, float] = (0.0, 0.0)
    slow_offlined: int = 0
    problems: list[str] = field(default_factory=list)
    # replicated mode only
    replicated: bool = False
    journal_records: tuple[int, int] = (0, 0)
    journals_equal: bool | None = None
    catch_up_max_s: float = 0.0
    ws_clients: int = 0
    # queue consumers (single-server mode)
    queue: QueueAudit = field(default_factory=QueueAudit)
    # --net-faults
    net: NetReport = field(default_factory=NetReport)
    # --disk-full
    refused: int = 0
    refused_delivered: int = 0
    disk_full_s: float = 0.0
    disk_full_no_refusal: int = 0
    # --corrupt-at-restart: restarts over a torn tail, torn tails the server logged cutting
    torn_restarts: int = 0
    torn_cut: int = 0
    # --memory-limit: squeezes (their tight limits, MB), server deaths found after one
    squeezes_mb: list[float] = field(default_factory=list)
    squeeze_refused: int = 0
    oom_killed: int = 0
    # --slow-disk, --clock-steps
    hooks: HookReport = field(default_factory=HookReport)

    @property
    def ok(self) -> bool:
        return (
            not self.problems
            and not self.queue.problems
            and self.queue.lost == 0
            and self.queue.after_persisted_ack == 0
            and self.lost == 0
            and self.duplicated == 0
            and self.out_of_order == 0
            and self.checked > 0
            and self.max_rss_mb <= self.rss_limit_mb
            and (not self.replicated or self.journals_equal is True)
        )

    def lines(self) -> list[str]:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        mode = " (replicated: hot-hot sync pair A/B)" if self.replicated else ""
        lines = [
            f"chaos run: {self.seconds:.0f} s of faults{mode}",
            f"faults injected: {sum(self.faults.values())} ({faults})",
            f"messages acknowledged to publishers: {self.published_acked}",
            f"deliveries checked (loss, duplicate, order; all subscribers): {self.checked}",
            f"losses: {self.lost}",
            f"delivered twice to the application: {self.duplicated}",
            f"out of order (per publisher): {self.out_of_order}",
            f"redeliveries discarded by the bookmark store: {self.duplicates_discarded}",
            f"server max RSS: {self.max_rss_mb:.1f} MB (limit {self.rss_limit_mb:.0f} MB)",
            f"slow client offline events logged by the server: {self.slow_offlined}",
            f"drain (publishers stopped to everything delivered): {self.drain_s:.1f} s "
            f"(subscribers {self.drain_parts[0]:.1f} s, "
            f"queue consumers {self.drain_parts[1]:.1f} s)",
        ]
        if self.phases:
            lines.append("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items()))
        lines += self.queue.lines()
        lines += self.net.lines()
        lines += self.hooks.lines()
        if self.squeezes_mb or self.squeeze_refused:
            tight = ", ".join(f"{mb:.0f}" for mb in self.squeezes_mb)
            lines.append(
                f"memory squeezes: {len(self.squeezes_mb)} (limits MB: {tight}; "
                f"{self.squeeze_refused} refused by the kernel); "
                f"server killed by the kernel: {self.oom_killed}"
            )
        if self.torn_restarts:
            lines.append(
                f"server restarts over a torn journal tail: {self.torn_restarts} "
                f"(tails the server logged cutting off: {self.torn_cut})"
            )
        if self.faults["disk_full"] or self.refused:
            lines += [
                f"journal disk full for {self.disk_full_s:.1f} s in all "
                f"({self.disk_full_no_refusal} episodes without a refusal)",
                f"publishes refused by the server (not acknowledged, excluded): {self.refused}",
                f"refused publishes delivered to a subscriber: {self.refused_delivered}",
            ]
        if self.replicated:
            a, b = self.journal_records
            lines += [
                f"WebSocket clients (ws:// through the proxy): {self.ws_clients}",
                f"longest wait for a restarted instance to catch up: {self.catch_up_max_s:.2f} s",
                f"journals (EPOCH replays): A {a} records, B {b} records, "
                + ("equal" if self.journals_equal else "DIFFERENT"),
            ]
        problems = self.problems + self.queue.problems
        lines.append("result: " + ("PASS" if self.ok else "FAIL " + "; ".join(problems)))
        return lines


def rss_mb(pid: int | None) -> float:
    """The resident set of process ``pid`` in MB (0 once it is gone)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The ledger's lines one at a time (a subscriber's ledger is hundreds of MB after a
    soak: the checks stream it instead of holding every line)."""
    if not path.exists():
        return
    with path.open("rb") as f:
        for raw in f:
            with contextlib.suppress(ValueError):
                yield json.loads(raw)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    return list(iter_lines(path))


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(LEDGER_BLOCK), b""))


def _expected(work: Path, publishers: list[str]) -> dict[str, tuple[int, int]]:
    """``pub -> (first sequence, last acknowledged sequence)``."""
    out = {}
    for name in publishers:
        lines = _read_lines(work / f"{name}.ledger")
        first = next((line["first"] for line in lines if "first" in line), None)
        acked = max((line["acked"] for line in lines if "acked" in line), default=0)
        if first is not None and acked >= first:
            out[name] = (first, acked)
    return out


def _refused(work: Path, publishers: list[str]) -> set[tuple[str, int]]:
    """``(pub, sequence)`` of every publish the server refused (``--disk-full``)."""
    return {
        (name, seq)
        for name in publishers
        for seq in refused_sequences(_read_lines(work / f"{name}.ledger"))
    }


def _deliveries(work: Path, sub: str) -> list[tuple[str, int]]:
    return [
        (line["msg"]["pub"], line["msg"]["s"])
        for line in iter_lines(work / f"{sub}.ledger")
        if "msg" in line
    ]


def _complete(
    work: Path,
    subs: list[str],
    expected: dict[str, tuple[int, int]],
    refused: set[tuple[str, int]],
) -> bool:
    for sub in subs:
        got: dict[str, set[int]] = defaultdict(set)
        for pub, seq in _deliveries(work, sub):
            got[pub].add(seq)
        for pub, (first, last) in expected.items():
            if not all(s in got[pub] or (pub, s) in refused for s in range(first, last + 1)):
                return False
    return True


def check(work: Path, publishers: list[str], subs: list[str], report: Report) -> None:
    """The exact ledger check: every acknowledged publish (not refused) delivered exactly
    once, in order per publisher; none that the server refused delivered."""
    expected = _expected(work, publishers)
    refused = _refused(work, publishers)
    report.refused = len(refused)
    report.published_acked = sum(last - first + 1 for first, last in expected.values()) - sum(
        1 for pub, s in refused if pub in expected and expected[pub][0] <= s <= expected[pub][1]
    )
    for name in publishers:
        if name not in expected:
            report.problems.append(f"{name} had nothing acknowledged")
    for sub in subs:
        deliveries = _deliveries(work, sub)
        report.checked += len(deliveries)
        counts = Counter(deliveries)
        lost_any = False
        dups = [d for d, n in counts.items() if n > 1]
        report.duplicated += len(dups)
        if dups:
            report.problems.append(f"{sub}: delivered twice: {sorted(dups)[:5]}")
        last: dict[str, int] = {}
        for pub, seq in deliveries:
            if seq <= last.get(pub, 0):
                report.out_of_order += 1
            last[pub] = max(seq, last.get(pub, 0))
        got: dict[str, set[int]] = defaultdict(set)
        for pub, seq in deliveries:
            got[pub].add(seq)
        for pub, (first, last_acked) in expected.items():
            missing = [
                s
                for s in range(first, last_acked + 1)
                if s not in got[pub] and (pub, s) not in refused
            ]
            report.lost += len(missing)
            if missing:
                report.problems.append(f"{sub}: lost {pub} {missing[:5]}...")
                lost_any = True
        wrong = sorted(d for d in counts if d in refused)
        report.refused_delivered += len(wrong)
        if wrong:
            report.problems.append(f"{sub}: delivered although refused: {wrong[:5]}")
        last_stats: dict[str, Any] | None = None
        for line in iter_lines(work / f"{sub}.ledger"):
            if "stats" in line:
                last_stats = line
                report.duplicates_discarded += int(line["stats"].get("duplicates_discarded", 0))
                if line["stats"].get("unpaired"):
                    report.problems.append(f"{sub}: unpaired ledger writes")
        if lost_any and last_stats is not None:  # its last life: what it got, from where
            report.problems.append(f"{sub}: last life {json.dumps(last_stats)}")


def orchestrate(args: argparse.Namespace) -> Report:
    from ampsclient_server_stub.harness import ServerProcess
    from ampsclient_server_stub.testing.proxy import LoopbackProxy

    rng = random.Random(args.seed)
    report = Report(seconds=args.seconds, rss_limit_mb=args.rss_limit_mb)
    t_phase = time.monotonic()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = work / "server.xml"
    queue_xml = QUEUE_XML.format(lease=args.lease) if args.consumers else ""
    actions = journal_actions(args)
    actions_xml = "  <Actions>\n    " + "\n    ".join(actions) + "\n  </Actions>\n"
    config.write_text(
        SERVER_XML.format(
            disk=work / "offline",
            journal=work / "journal",  # a tmpfs with --disk-full
            journal_size=args.journal_size,
            queue=queue_xml,
            actions=actions_xml if actions else "",
        )
    )
    journal = work / "journal"
    if args.disk_full:  # the transaction log on a small tmpfs the faults fill
        why = mount_tmpfs(journal, args.disk_full_size)
        if why is not None:
            report.problems.append(f"--disk-full: {why}")
            return report
    hooks = work / "hooks"  # --slow-disk, --clock-steps: the server's test-only hooks
    cgroup: MemoryCgroup | None = None
    limit = int(args.memory_limit * 1024 * 1024)
    if args.memory_limit:
        made = make_cgroup(limit)
        if isinstance(made, str):
            report.problems.append(f"--memory-limit: {made}")
            if args.disk_full:
                unmount(journal)
            return report
        cgroup = made
    server = (
        HookedServer(
            hooks=hooks,
            cgroup_procs=cgroup.procs if cgroup else None,
            data_dir=work / "server",
            config=config,
            name="chaos",
        )
        if args.slow_disk or args.clock_steps or cgroup
        else ServerProcess(data_dir=work / "server", config=config, name="chaos")
    )
    try:
        server.start(START_TIMEOUT)
    except BaseException:
        if args.disk_full:
            unmount(journal)
        raise
    proxy = LoopbackProxy("127.0.0.1", server.tcp_port).start()
    uri = f"tcp://127.0.0.1:{proxy.port}/amps/json"
    direct = server.uri()
    pubs = [f"pub-{i}" for i in range(args.publishers)]
    subs = [f"sub-{i}" for i in range(args.subscribers)]
    consumers = [f"consumer-{i}" for i in range(args.consumers)]
    workers: list[Worker] = []
    for i, name in enumerate(pubs):
        target = uri if i % 2 == 0 else direct
        workers.append(
            Worker(
                "publisher",
                name,
                [
                    "--name",
                    name,
                    "--uri",
                    target,
                    "--work",
                    str(work),
                    "--batch",
                    "20",
                    "--pause",
                    str(args.pause),
                    *("--pad", str(args.pad), "--flush-timeout", str(args.flush_timeout)),
                ],
            )
        )
    for i, name in enumerate(subs):
        delay = args.slow_delay if i == 0 else 0.0
        workers.append(
            Worker(
                "subscriber",
                name,
                ["--name", name, "--uri", uri, "--work", str(work), "--delay", str(delay)],
            )
        )
    for i, name in enumerate(consumers):  # the first one slow; all through the proxy
        delay = args.slow_delay * 10 if i == 0 else 0.0
        workers.append(
            Worker(
                "consumer",
                name,
                [
                    *("--name", name, "--uri", uri, "--work", str(work), "--delay", str(delay)),
                    *("--backlog", str(args.backlog), "--ack-batch", str(args.ack_batch)),
                ],
            )
        )
    kinds = ["kill_publisher", "kill_subscriber", "kill_server", "cut", "stall"]
    if consumers:
        kinds.append("kill_consumer")
    opt_in = [
        *args.net_faults,
        *(["disk_full"] if args.disk_full else []),
        *(["slow_disk"] if args.slow_disk else []),
        *(["clock_step"] if args.clock_steps else []),
        *(["corrupt_at_restart"] if args.corrupt_at_restart else []),
        *(["memory_squeeze"] if args.memory_limit else []),
    ]
    kinds += opt_in
    _add_heartbeat(workers, args)
    stop_rss = threading.Event()

    def sample() -> None:
        while not stop_rss.wait(0.25):
            report.max_rss_mb = max(report.max_rss_mb, rss_mb(server.pid))

    for w in workers:
        w.log = work / f"{w.name}.log"
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for w in workers:
            w.start()
        _wait_first_acks(work, pubs, report)
        t_phase = _phase(report, "start-up", t_phase)
        deadline = time.monotonic() + args.seconds
        bag: list[str] = []
        # --min-faults: past the deadline until that many faults were injected (the first
        # round holds every kind once, the opt-in ones first: a short run has each of them)
        while time.monotonic() < deadline or sum(report.faults.values()) < args.min_faults:
            time.sleep(rng.uniform(args.min_gap, args.max_gap))
            if not bag:  # every kind of fault once per round, in random order
                bag = list(kinds)
                rng.shuffle(bag)
                if not report.faults:  # the opt-in kinds first: a short run has each one
                    bag = [k for k in bag if k not in opt_in] + [k for k in bag if k in opt_in]
            fault = bag.pop()
            if fault == "kill_publisher":
                w = rng.choice([w for w in workers if w.role == "publisher"])
                w.kill()
                time.sleep(rng.uniform(0.05, 0.5))
                w.start()
            elif fault in ("kill_subscriber", "kill_consumer"):
                role = fault.removeprefix("kill_")
                w = rng.choice([w for w in workers if w.role == role])
                w.kill()
                time.sleep(rng.uniform(0.05, 0.5))
                w.start()
            elif fault == "kill_server":
                server.kill()
                _keep_life_log(work, server.stderr_lines)
                report.slow_offlined += sum("offlined" in line for line in server.stderr_lines)
                time.sleep(rng.uniform(0.05, 0.5))
                server.start(START_TIMEOUT)
            elif fault == "cut":
                proxy.cut()
            elif fault == "stall":
                proxy.stall(rng.uniform(0.2, 1.5))
            elif fault == "disk_full":
                full_s, refused = inject_disk_full(journal, rng, lambda: len(_refused(work, pubs)))
                report.disk_full_s += full_s
                report.disk_full_no_refusal += not refused
            elif fault == "slow_disk":
                inject_slow_disk(
                    hooks,
                    rng,
                    report.hooks,
                    sub_ledgers=[work / f"{s}.ledger" for s in subs],
                    pub_ledgers=[work / f"{p}.ledger" for p in pubs],
                    lines=_count_lines,
                )
            elif fault == "corrupt_at_restart":  # kill -9, a torn record appended, restart
                server.kill()
                _keep_life_log(work, server.stderr_lines)
                report.slow_offlined += sum("offlined" in line for line in server.stderr_lines)
                if tear_journal_tail(journal, rng):
                    report.torn_restarts += 1
                server.start(START_TIMEOUT)
                report.torn_cut += any("truncating a torn tail" in x for x in server.stderr_lines)
            elif fault == "memory_squeeze" and cgroup is not None:
                if str(server.pid) not in cgroup.procs.read_text().split():
                    report.problems.append(f"server pid {server.pid} not in its memory cgroup")
                tight = squeeze(cgroup, rss_mb(server.pid), limit, rng)
                if tight:
                    report.squeezes_mb.append(tight / 1024 / 1024)
                else:
                    report.squeeze_refused += 1
                if not server.running:  # the kernel killed it: restart, as after kill_server
                    report.oom_killed += 1
                    server.kill()
                    server.start(START_TIMEOUT)
            elif fault == "clock_step":
                inject_clock_step(hooks, rng, report.hooks)
            else:
                inject(fault, [proxy], rng, report.net, heartbeat=args.heartbeat, failover=False)
            report.faults[fault] += 1
        t_phase = _phase(report, "faults", t_phase)
        _drain(work, workers, pubs, subs, args.drain, report, consumers)
        t_phase = _phase(report, "drain", t_phase)
    finally:
        stop_rss.set()
        sampler.join(5)
        for w in workers:
            w.kill()
        proxy.stop()
        server.stop()
        if args.disk_full:
            unmount(journal)
        if cgroup is not None:
            cgroup.remove()
        (work / "server.log").write_text("".join(server.stderr_lines))  # for a look afterwards
    t_phase = _phase(report, "stop", t_phase)
    report.slow_offlined += sum("offlined" in line for line in server.stderr_lines)
    check(work, pubs, subs, report)
    lease = parse_duration(args.lease)
    report.queue = check_queue(
        work, consumers, _expected(work, pubs), lease_period=lease, refused=_refused(work, pubs)
    )
    _phase(report, "check", t_phase)
    return report


def _phase(report: Report, name: str, since: float) -> float:
    """Record the wall seconds of phase ``name`` (from ``since``); return now."""
    now = time.monotonic()
    report.phases[name] = now - since
    return now


def _keep_life_log(work: Path, lines: list[str]) -> None:
    """Append a killed server's log to ``server-lives.log`` (each restart starts a new
    ``stderr_lines``; ``server.log`` holds the last life): the journal removal's INFO lines
    (``not removing ... still needed from index N``) of every life stay readable."""
    with (work / "server-lives.log").open("a", encoding="utf-8") as f:
        f.writelines(lines)
        f.write("---- server killed\n")


def _wait_first_acks(work: Path, pubs: list[str], report: Report, timeout: float = 120.0) -> None:
    """The faults start once every publisher has had something acknowledged: on a loaded
    machine the workers' start-up (interpreter, imports, logon) can take seconds, and a short
    run would otherwise end before a publisher published anything."""
    deadline = time.monotonic() + timeout
    while len(_expected(work, pubs)) < len(pubs):
        if time.monotonic() > deadline:
            report.problems.append(f"publishers not started within {timeout:.0f} s")
            return
        time.sleep(0.1)


def _add_heartbeat(workers: list[Worker], args: argparse.Namespace) -> None:
    """``--heartbeat``: every worker's client asks for heartbeats (so a half-open connection
    is noticed by both ends)."""
    if args.heartbeat:
        for w in workers:
            w.args += ["--heartbeat", str(args.heartbeat)]


def _drain(
    work: Path,
    workers: list[Worker],
    pubs: list[str],
    subs: list[str],
    seconds: float,
    report: Report,
    consumers: list[str] | None = None,
) -> None:
    """Publishers flush and stop, subscribers and queue consumers catch up (wait on their
    progress files, with a deadline), then every subscriber and consumer stops."""
    consumers = consumers or []
    t0 = time.monotonic()
    (work / "stop-publishers").touch()
    for w in workers:
        if w.role == "publisher" and w.wait(seconds) != 0:
            report.problems.append(f"{w.name} did not stop cleanly")
    expected = _expected(work, pubs)
    refused = _refused(work, pubs)
    end = time.monotonic() + seconds
    subs_done: float | None = None
    queue_done: float | None = None
    while time.monotonic() < end and (subs_done is None or queue_done is None):
        if subs_done is None and _complete(work, subs, expected, refused):
            subs_done = time.monotonic() - t0
        if queue_done is None and queue_complete(work, consumers, expected, refused):
            queue_done = time.monotonic() - t0
        if subs_done is None or queue_done is None:
            time.sleep(0.2)
    report.drain_s = time.monotonic() - t0
    report.drain_parts = (subs_done or -1.0, queue_done or -1.0)
    for w in workers:
        if w.role in ("subscriber", "consumer"):
            (work / f"stop-{w.name}").touch()
    for w in workers:
        if w.role in ("subscriber", "consumer") and w.wait(30) != 0:
            report.problems.append(f"{w.name} did not stop cleanly")


# =========================================================================== replicated mode

REPLICATED_EXTRA_XML = """  <MessageMemoryLimit>16MB</MessageMemoryLimit>
  <ClientMaxCapacity>25%</ClientMaxCapacity>
  <MessageDiskPath>{disk}</MessageDiskPath>"""


def common_range(
    a: list[tuple[str, bytes]], b: list[tuple[str, bytes]]
) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """Both replays from where both journals still hold each publisher's messages: with
    journal files removed (``--remove-journal-age``) each instance removes its own old files
    on its own schedule, so the oldest records differ. Per publisher, the records older than
    the later of the two first sequences are dropped from both (a publisher found on one side
    only is dropped: its messages were all removed on the other; the subscribers' ledger
    check still covers every acknowledged message)."""

    def firsts(replay: list[tuple[str, bytes]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for bm, _ in replay:
            pid, seq = bm.split("|")[:2]
            out[pid] = min(out.get(pid, int(seq)), int(seq))
        return out

    fa, fb = firsts(a), firsts(b)
    cut = {pid: max(fa[pid], fb[pid]) for pid in fa.keys() & fb.keys()}

    def keep(replay: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        out = []
        for bm, body in replay:
            pid, seq = bm.split("|")[:2]
            if pid in cut and int(seq) >= cut[pid]:
                out.append((bm, body))
        return out

    return keep(a), keep(b)


def compare_journals(
    a: list[tuple[str, bytes]], b: list[tuple[str, bytes]], report: Report
) -> None:
    """Both instances hold the same messages under the same bookmarks, each bookmark once,
    and every publisher's messages in the same order."""
    report.journal_records = (len(a), len(b))
    equal = sorted(a) == sorted(b)
    if not equal:
        only_a = sorted(set(a) - set(b))[:3]
        only_b = sorted(set(b) - set(a))[:3]
        report.problems.append(f"journals differ: only on A {only_a}, only on B {only_b}")
    for name, replay in (("A", a), ("B", b)):
        dups = [bm for bm, n in Counter(bm for bm, _ in replay).items() if n > 1]
        if dups:
            equal = False
            report.problems.append(f"journal {name}: bookmarks twice: {dups[:5]}")

    def per_publisher(replay: list[tuple[str, bytes]]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for bm, _ in replay:
            out[bm.split("|")[0]].append(bm)
        return out

    if per_publisher(a) != per_publisher(b):
        equal = False
        report.problems.append("journals: per-publisher order differs between A and B")
    report.journals_equal = equal


def orchestrate_replicated(args: argparse.Namespace) -> Report:
    """The chaos run against a hot-hot pair A/B (sync replication both ways, downgrade of a
    dead peer). Extra faults: ``kill_A``/``kill_B`` (kill -9, restart, then wait until both
    links stream and everything is caught up before going on, so both are never down at
    once) and ``partition`` (the A-B link refused for 0.3-1.5 s, then healed). Clients list
    both instances; some connect over WebSocket. After the ledger check both journals are
    compared (EPOCH replays by bookmark and payload)."""
    from ampsclient_server_stub.cluster import Cluster, DowngradePolicy
    from ampsclient_server_stub.testing.log import read_log
    from ampsclient_server_stub.testing.proxy import LoopbackProxy

    rng = random.Random(args.seed)
    report = Report(seconds=args.seconds, rss_limit_mb=args.rss_limit_mb, replicated=True)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(
        work / "cluster",
        downgrade=DowngradePolicy(age=1.0, upgrade_age=0.5, every=0.2),
        journal_size=args.journal_size,
        actions=journal_actions(args),
    )
    # queue consumers (--consumers): the queue is replicated, one queue over both instances
    queue_xml = "\n" + QUEUE_XML.format(lease=args.lease) if args.consumers else ""
    a = cluster.add(
        "A", group="HA", extra_xml=REPLICATED_EXTRA_XML.format(disk=work / "offA") + queue_xml
    )
    b = cluster.add(
        "B", group="HA", extra_xml=REPLICATED_EXTRA_XML.format(disk=work / "offB") + queue_xml
    )
    cluster.hot_hot(a, b)
    nodes = {"A": a, "B": b}
    proxies: list[LoopbackProxy] = []
    offlined = Counter[str]()

    def count_offlined(node: Any) -> None:
        offlined[node.name] += sum("offlined" in line for line in node.log_lines())

    try:
        cluster.start(timeout=START_TIMEOUT)
        cluster.wait_streaming(30)
        for node in (a, b):
            proxies.append(LoopbackProxy("127.0.0.1", node.tcp_port).start())
        for node in (a, b):
            proxies.append(LoopbackProxy("127.0.0.1", node.ws_port).start())
        pa, pb, wa, wb = (p.port for p in proxies)
        tcp_ab = f"tcp://127.0.0.1:{pa}/amps/json,tcp://127.0.0.1:{pb}/amps/json"
        tcp_ba = f"tcp://127.0.0.1:{pb}/amps/json,tcp://127.0.0.1:{pa}/amps/json"
        ws_ab = f"ws://127.0.0.1:{wa}/amps/json,ws://127.0.0.1:{wb}/amps/json"
        ws_ba = f"ws://127.0.0.1:{wb}/amps/json,ws://127.0.0.1:{wa}/amps/json"
        direct_ba = f"{b.uri()},{a.uri()}"
        # publishers: A first through the proxy; WebSocket B first; B first directly
        pub_uris = [tcp_ab, ws_ba, direct_ba]
        # subscribers: the slow one A first; B first; WebSocket A first
        sub_uris = [tcp_ab, tcp_ba, ws_ab]
        pubs = [f"pub-{i}" for i in range(args.publishers)]
        subs = [f"sub-{i}" for i in range(args.subscribers)]
        consumers = [f"consumer-{i}" for i in range(args.consumers)]
        workers: list[Worker] = []
        for i, name in enumerate(pubs):
            target = pub_uris[i % len(pub_uris)]
            report.ws_clients += target.startswith("ws:")
            workers.append(
                Worker(
                    "publisher",
                    name,
                    [
                        *("--name", name, "--uri", target, "--work", str(work)),
                        *("--batch", "20", "--pause", str(args.pause)),
                    ],
                )
            )
        for i, name in enumerate(subs):
            target = sub_uris[i % len(sub_uris)]
            report.ws_clients += target.startswith("ws:")
            delay = args.slow_delay if i == 0 else 0.0
            workers.append(
                Worker(
                    "subscriber",
                    name,
                    [
                        *("--name", name, "--uri", target, "--work", str(work)),
                        *("--delay", str(delay), "--options", "fully_durable"),
                    ],
                )
            )
        for i, name in enumerate(consumers):  # A first and B first in turn; the first one slow
            target = (tcp_ab, tcp_ba)[i % 2]
            delay = args.slow_delay * 10 if i == 0 else 0.0
            workers.append(
                Worker(
                    "consumer",
                    name,
                    [
                        *("--name", name, "--uri", target, "--work", str(work)),
                        *("--delay", str(delay), "--backlog", str(args.backlog)),
                        *("--ack-batch", str(args.ack_batch)),
                    ],
                )
            )
        for w in workers:
            w.log = work / f"{w.name}.log"
        _add_heartbeat(workers, args)
        stop_rss = threading.Event()

        def sample() -> None:
            while not stop_rss.wait(0.25):
                rss = max(rss_mb(a.pid), rss_mb(b.pid))
                report.max_rss_mb = max(report.max_rss_mb, rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for w in workers:
                w.start()
            _wait_first_acks(work, pubs, report)
            deadline = time.monotonic() + args.seconds
            kinds = [
                "kill_publisher",
                "kill_subscriber",
                "kill_A",
                "kill_B",
                "partition",
                "cut",
                "stall",
                *(["kill_consumer"] if consumers else []),
                *args.net_faults,
            ]
            report.net.failover = True
            bag: list[str] = []
            rounds = 0
            # go on past the deadline until one full round is done (every kind at least once;
            # --seconds 0: that one round)
            while time.monotonic() < deadline or (rounds == 0 and (bag or not report.faults)):
                time.sleep(rng.uniform(args.min_gap, args.max_gap))
                if not bag:
                    if report.faults:
                        rounds += 1
                    if rounds and time.monotonic() >= deadline:
                        break
                    bag = list(kinds)
                    rng.shuffle(bag)
                fault = bag.pop()
                if fault in ("kill_publisher", "kill_subscriber", "kill_consumer"):
                    role = fault.removeprefix("kill_")
                    w = rng.choice([w for w in workers if w.role == role])
                    w.kill()
                    time.sleep(rng.uniform(0.05, 0.5))
                    w.start()
                elif fault in ("kill_A", "kill_B"):
                    node = nodes[fault[-1]]
                    node.kill()
                    count_offlined(node)
                    time.sleep(rng.uniform(0.05, 0.5))
                    node.start(START_TIMEOUT)
                    t0 = time.monotonic()
                    try:  # never both down: the next server kill waits for the catch-up
                        cluster.wait_streaming(60)
                        cluster.wait_caught_up(60)
                    except AssertionError as exc:
                        report.problems.append(f"after {fault}: {exc}")
                    report.catch_up_max_s = max(report.catch_up_max_s, time.monotonic() - t0)
                elif fault == "partition":
                    cluster.partition(a, b)
                    time.sleep(rng.uniform(0.3, 1.5))
                    cluster.heal(a, b)
                elif fault == "cut":
                    for proxy in proxies:
                        proxy.cut()
                elif fault == "stall":
                    seconds = rng.uniform(0.2, 1.5)
                    for proxy in proxies:
                        proxy.stall(seconds)
                else:
                    inject(fault, proxies, rng, report.net, heartbeat=args.heartbeat, failover=True)
                report.faults[fault] += 1
            _drain(work, workers, pubs, subs, args.drain, report, consumers)
        finally:
            stop_rss.set()
            sampler.join(5)
            for w in workers:
                w.kill()
        check(work, pubs, subs, report)
        lease = parse_duration(args.lease)
        report.queue = check_queue(
            work, consumers, _expected(work, pubs), lease_period=lease, refused=_refused(work, pubs)
        )
        try:
            cluster.wait_streaming(60)
            cluster.wait_caught_up(60)
            replay_a = read_log(a.uri(), TOPIC, timeout=60)
            replay_b = read_log(b.uri(), TOPIC, timeout=60)
            if args.remove_journal_age:
                replay_a, replay_b = common_range(replay_a, replay_b)
            compare_journals(replay_a, replay_b, report)
        except AssertionError as exc:
            report.journals_equal = False
            report.problems.append(f"journal comparison: {exc}")
    finally:
        for proxy in proxies:
            proxy.stop()
        for node in (a, b):
            count_offlined(node)
            # the instance's log, for a look afterwards
            (work / f"server-{node.name}.log").write_text("".join(node.log_lines()))
        cluster.stop()
    report.slow_offlined = sum(offlined.values())
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--role",
        choices=("orchestrator", "publisher", "subscriber", "consumer"),
        default="orchestrator",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to inject faults")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--work", default=None, help="working directory (default: a temp dir)")
    parser.add_argument("--publishers", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=3)
    parser.add_argument(
        "--slow-delay",
        type=float,
        default=0.0003,
        help="seconds the slow subscriber spends per message (and 1.5 s every 5000)",
    )
    parser.add_argument(
        "--min-faults",
        type=int,
        default=0,
        help="inject faults past --seconds until this many were injected (one server; the "
        "first round has every kind once, the opt-in kinds first)",
    )
    parser.add_argument("--min-gap", type=float, default=0.6)
    parser.add_argument("--max-gap", type=float, default=2.0)
    parser.add_argument("--drain", type=float, default=90.0)
    parser.add_argument("--rss-limit-mb", type=float, default=400.0)
    parser.add_argument("--pause", type=float, default=0.01)
    parser.add_argument("--name", default="")
    parser.add_argument("--uri", default="")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--options", default="", help="subscriber: subscription options")
    parser.add_argument(
        "--replicated",
        action="store_true",
        help="a hot-hot sync pair of instances instead of one server (see orchestrate_replicated)",
    )
    parser.add_argument(
        "--consumers",
        type=int,
        default=None,
        help="queue consumers of chaos_q, the first one slow (default: 3 with one server, "
        "none with --replicated, where the queue is replicated over both instances)",
    )
    parser.add_argument(
        "--journal-size",
        default=None,
        help="the servers' <JournalSize> (default: 8MB with one server, AMPS' default for the "
        "pair)",
    )
    parser.add_argument(
        "--remove-journal-age",
        default="",
        help="an amps-action-do-remove-journal action on the servers with this <Age> "
        "(e.g. 30s; none by default)",
    )
    parser.add_argument(
        "--remove-journal-every", default="10s", help="the removal action's <Every>"
    )
    parser.add_argument("--backlog", type=int, default=10, help="consumer: max_backlog")
    parser.add_argument("--ack-batch", type=int, default=5, help="consumer: ack batch size")
    parser.add_argument("--lease", default="3s", help="the queue's LeasePeriod")
    parser.add_argument("--stall-every", type=int, default=5000)
    parser.add_argument("--stall-for", type=float, default=1.5)
    parser.add_argument(
        "--net-faults",
        type=parse_net_faults,
        default=[],
        help="also inject these proxy faults: latency,fragment,coalesce,bandwidth,half_open "
        "(comma-separated) or all; none by default (see tests/chaos/net_faults.py)",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=0.0,
        help="clients' heartbeat interval in seconds (0: none; 1 with --net-faults half_open)",
    )
    parser.add_argument(
        "--disk-full",
        action="store_true",
        help="the server's transaction log on a small tmpfs (needs mount: root) that faults "
        "fill for 1-3 s; refused publishes are excluded from the ledger check (one server "
        "only; see tests/chaos/disk_faults.py)",
    )
    parser.add_argument("--disk-full-size", default="128m", help="the tmpfs' size")
    parser.add_argument(
        "--slow-disk",
        action="store_true",
        help="the server's fsyncs held (stalled) or slowed at fault times through a test-only "
        "hook (one server only; see tests/chaos/hook_faults.py)",
    )
    parser.add_argument(
        "--clock-steps",
        action="store_true",
        help="the server's wall clock stepped back or forward at fault times through a "
        "test-only hook (one server only; see tests/chaos/hook_faults.py)",
    )
    parser.add_argument(
        "--pad",
        type=int,
        default=None,
        help="publishers: bytes of padding in every message (default 0; 1000 with "
        "--disk-full, so that the server's journal buffer fills and it refuses publishes)",
    )
    parser.add_argument(
        "--flush-timeout",
        type=int,
        default=None,
        help="publishers: milliseconds a batch's publish_flush waits before the next batch "
        "(default 2000; 100 with --disk-full, so that publishing goes on while nothing is "
        "acknowledged)",
    )
    parser.add_argument(
        "--corrupt-at-restart",
        action="store_true",
        help="a server kill -9 after which a torn record is appended to the transaction log "
        "before the restart (one server only; see tests/chaos/disk_faults.py)",
    )
    parser.add_argument(
        "--memory-limit",
        type=float,
        default=0.0,
        help="MB: the server in a memory cgroup of this limit (needs root), squeezed to its RSS "
        "plus 8-32 MB at fault times (one server only; see tests/chaos/memory_faults.py)",
    )
    args = parser.parse_args(argv)
    for flag in ("disk_full", "slow_disk", "clock_steps", "corrupt_at_restart", "memory_limit"):
        if args.replicated and getattr(args, flag):
            parser.error(f"--{flag.replace('_', '-')}: one server only (not with --replicated)")
    if args.pad is None:
        args.pad = 1000 if args.disk_full else 0
    if args.flush_timeout is None:
        args.flush_timeout = 100 if args.disk_full else 2000
    if "half_open" in args.net_faults and not args.heartbeat:
        args.heartbeat = 1.0
    if args.consumers is None:
        args.consumers = 0 if args.replicated else 3
    if args.journal_size is None and not args.replicated:
        args.journal_size = "8MB"
    if args.role == "publisher":
        return run_publisher(args)
    if args.role == "subscriber":
        return run_subscriber(args)
    if args.role == "consumer":
        return run_consumer(args)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    import tempfile

    with contextlib.ExitStack() as stack:
        if args.work is None:
            args.work = stack.enter_context(tempfile.TemporaryDirectory(prefix="ampsclient-chaos-"))
        print(f"chaos: seed {args.seed}, work directory {args.work}", flush=True)
        report = orchestrate_replicated(args) if args.replicated else orchestrate(args)
        for line in report.lines():
            print(line, flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
