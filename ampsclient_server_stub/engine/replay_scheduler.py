"""The replay scheduler: bookmark subscriptions fed from the transaction log.

A bookmark subscription has a :class:`~.txlog.Replay` (its cursor over the journal) instead
of a place in the routing index. :meth:`ReplayScheduler.pump` sends what a replay may send
now: records up to the durable limit, paced by the session's backlog, a per-pump budget and
the ``rate`` option, in frames built straight from the journal's bytes where it can. A replay
leading a group (subscriptions resumed together) reads the log once for all its members.
``live`` replays are pumped after every journal append (:meth:`pump_live`), the others after
each group commit (:meth:`pump_all`). Bookmark subscriptions asking for ``persisted`` acks
get them from one periodic timer (:meth:`send_persisted_acks`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Final

from ampsclient.protocol.header import Header, encode_header

from .conflation import ReplayConflation, ReplayHeld
from .hooks import BrokerHooks
from .journal import RecordRow
from .session import CallLater, Session, TimerHandle
from .state import Connection, Subscription
from .txlog import REPLAY_BACKLOG, REPLAY_BATCH, REPLAY_FIRST_STEP, Replay, ReplayError, TxLog
from .wire import COMPLETED, PERSISTED, CommandFailure, send_ack

__all__ = ["ReplayScheduler"]

logger = logging.getLogger(__name__)

_STOP: Final = 0
"""A pump step ended the pump (it scheduled the next one, or the replay finished)."""
_EMPTY: Final = 1
"""A pump step found nothing more to read."""
_MORE: Final = 2
"""A pump step sent a batch: the pump goes on."""


class _Pass:
    """What one :meth:`ReplayScheduler.pump` call works with."""

    __slots__ = (
        "budget",
        "conf",
        "fast",
        "group",
        "has_end",
        "limit",
        "prev_bm",
        "rate",
        "simple",
        "skip_topic",
        "want_mt",
        "want_topic",
    )

    def __init__(self, replay: Replay[Subscription]) -> None:
        sub = replay.sub
        self.limit = replay.limit()
        self.group = (replay, *replay.members) if replay.members else None
        # the first step of a replay is short, so its first messages leave at once; only the
        # first (a replay reading other topics' records sets no last_bm: keyed on that, it
        # went on 32 records per loop turn, about 5 us per record skipped)
        self.budget = 5 * REPLAY_BATCH if replay.stepped else REPLAY_FIRST_STEP
        self.has_end = replay.end_index is not None or replay.end_time is not None
        self.rate = replay.rate
        self.conf = replay.conflation
        self.prev_bm = replay.last_bm  # (conflation) the bookmark of the record before the next
        matcher = sub.matcher
        self.simple = (
            self.group is None
            and sub.predicate is None
            and matcher.pattern is None
            and self.conf is None
        )
        self.want_topic = matcher.topic
        self.want_mt = sub.message_type
        # one exact topic, read for one subscription: the segments of the log known to hold
        # none of it are passed (a conflated replay sees every record's time: not that one)
        self.skip_topic = (
            matcher.topic
            if matcher.pattern is None and self.group is None and self.conf is None
            else None
        )
        self.fast = self.simple and self.rate is None
        if self.fast and replay.end_index is not None:
            # a range ending at a log position: the block path reads no further than its end
            last = replay.end_index if replay.end_inclusive else replay.end_index - 1
            self.limit = min(self.limit, last)


class ReplayScheduler:
    """Every bookmark subscription's replay, and when each one runs.

    Args:
        txlog: the transaction log.
        hooks: ``fully_durable_limit`` caps ``fully_durable`` replays (replication).
        counters: the broker's counters (``replay_waits``).
        clock: wall clock (epoch seconds).
        call_later: timers; ``None``: no pacing timers (pump by hand).
        persisted_ack_interval: seconds between persisted acks to bookmark subscriptions.
    """

    def __init__(
        self,
        txlog: TxLog | None,
        *,
        hooks: BrokerHooks,
        counters: dict[str, int],
        clock: Callable[[], float],
        call_later: CallLater | None,
        persisted_ack_interval: float,
    ) -> None:
        self._txlog = txlog
        self._hooks = hooks
        self._counters = counters
        self._clock = clock
        self._call_later = call_later
        self.persisted_ack_interval = persisted_ack_interval
        """Seconds between periodic persisted acks to bookmark subscriptions."""
        self._replays: dict[int, Replay[Subscription]] = {}
        self.live: set[Replay[Subscription]] = set()
        """The ``live`` replays (read-only for callers: ``if live: pump_live()``)."""
        self._ack_timer: TimerHandle | None = None

    @property
    def replays(self) -> list[Replay[Subscription]]:
        """Every running replay."""
        return list(self._replays.values())

    # ------------------------------------------------------------------ lifecycle

    def prepare(
        self, conn: Connection, sub: Subscription, bookmark: str, hdr: Header, flags: int
    ) -> None:
        """Attach a journal cursor to a bookmark subscription (before it is installed).

        Raises:
            CommandFailure: the topic is not recorded, or the bookmark is refused.
        """
        txlog = self._txlog
        assert txlog is not None
        if not txlog.covers(sub.message_type, sub.matcher):
            raise CommandFailure(
                "invalid topic", f"{sub.matcher.topic!r} is not recorded in the transaction log"
            )
        try:
            replay = Replay.start(txlog.journal, sub, bookmark)
        except ReplayError as exc:
            raise CommandFailure(exc.reason, str(exc)) from None
        if flags & COMPLETED:
            cid_hdr = {"cid": hdr.get("cid")}
            send = conn.session.send
            replay.send_completed = lambda: send_ack(send, cid_hdr, "completed", sub_id=sub.sub_id)
        replay.send_persisted = bool(flags & PERSISTED)
        fully_durable = self._hooks.fully_durable_limit
        if fully_durable is not None and "fully_durable" in sub.options:
            replay.cap = fully_durable  # replication: sync destinations have it
        if sub.conflation is not None:  # on the journal's timeline (see .conflation)
            replay.conflation = ReplayConflation(sub.conflation.spec)
            sub.conflation = None
        sub.replay = replay

    def add(self, replay: Replay[Subscription]) -> None:
        """Start feeding ``replay`` (its subscription was installed)."""
        self._replays[id(replay.sub)] = replay
        if replay.live:
            self.live.add(replay)
        if replay.send_persisted:
            self._schedule_persisted_acks()

    def remove(self, sub: Subscription) -> None:
        """Stop the replay of ``sub`` (removed); its group carries on under an heir."""
        replay = self._replays.pop(id(sub), None)
        if replay is None:
            return
        self.live.discard(replay)
        heir = self.ungroup(replay)
        replay.close()
        if heir is not None:
            if self._call_later is None:
                self.pump(heir)
            else:  # not from inside whatever is removing this subscription
                self._call_later(0.0, lambda: self.pump(heir))

    def close(self) -> None:
        """Stop the persisted-ack timer."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None

    def pump_live(self) -> None:
        """Journal records were appended: ``live`` replays move on."""
        if self.live:
            for replay in list(self.live):
                self.pump(replay)

    def pump_all(self) -> None:
        """A group commit: every replay moves on."""
        for replay in list(self._replays.values()):
            self.pump(replay)

    # ------------------------------------------------------------------ pumping

    def pump(self, replay: Replay[Subscription]) -> None:
        """Deliver what ``replay`` may deliver now, paced by its session's backlog.

        A replay leading a group (subscriptions resumed together) reads the log once for the
        whole group and sends each record once, with the ``sids`` of every member it matches.
        """
        sub = replay.sub
        conn = sub.conn
        if (
            replay.done
            or replay.leader is not None
            or sub.paused
            or conn.closed
            or replay.timer is not None
        ):
            return
        if replay.not_before is not None and self._before_start(replay):
            return
        session = conn.session
        p = _Pass(replay)
        replay.stepped = True
        while replay.position <= p.limit:
            if not self._may_read(replay, p, session):
                return
            if p.skip_topic is not None:
                nxt = replay.journal.next_for_topic(replay.position, p.skip_topic)
                if nxt > replay.position:
                    replay.advance(min(nxt, p.limit + 1))
                    continue
            count = min(REPLAY_BATCH, p.limit - replay.position + 1, p.budget)
            if p.fast:
                step = self._send_blocks(replay, p, session, count)
            else:
                step = self._send_rows(replay, p, session, count)
            if step != _MORE:
                if step == _STOP:
                    return
                break
        self._sync_members(replay)
        if replay.position > p.limit:
            self._at_limit(replay, p)

    def _may_read(self, replay: Replay[Subscription], p: _Pass, session: Session) -> bool:
        """Budget and backlog: may the pump read on, or does it come back later?"""
        if p.budget <= 0:
            self._counters["replay_yields"] += 1
            self._pump_later(replay, 0.0)
            self._sync_members(replay)
            return False
        if session.backlog() > REPLAY_BACKLOG and not (replay.live and replay.completed_sent):
            # A replay paces itself to its reader, except a live one past its replay: AMPS
            # sends what follows as it comes, so that subscriber is subject to slow-client
            # offlining (seed 000, "live" option) like a regular subscription.
            self._counters["replay_waits"] += 1
            self._pump_later(replay, 0.002)
            self._sync_members(replay)
            return False
        return True

    def _send_blocks(
        self, replay: Replay[Subscription], p: _Pass, session: Session, count: int
    ) -> int:
        """Plain replay: frames straight from the journal's bytes (``Replay.block_frames``);
        a range ending at a time finishes at the first record received after it."""
        blocks = replay.journal.read_blocks(replay.position, max_records=count)
        if not blocks:
            return _EMPTY
        out: list[bytes] = []
        pid = seq = 0
        past = -1
        block_frames = replay.block_frames
        for block in blocks:
            bpid, bseq, past = block_frames(block, out)
            if bpid or bseq:
                pid, seq = bpid, bseq
            if past >= 0:
                break
        if out:
            replay.delivered = True
            session.send_many(out)
        if pid or seq:
            replay.last_bm = f"{pid}|{seq}|"
        if past >= 0:
            self._finish(replay)
            return _STOP
        p.budget -= sum(block[3] for block in blocks)
        replay.advance(blocks[-1][2] + blocks[-1][3])
        return _MORE

    def _send_rows(
        self, replay: Replay[Subscription], p: _Pass, session: Session, count: int
    ) -> int:
        """Filtered, grouped, conflated, paced or bounded replay: record by record."""
        rows = replay.journal.read_rows(replay.position, max_records=count)
        if not rows:
            return _EMPTY
        out: list[bytes] = []  # the frames of one read, handed over together
        send = out.append
        row_frame = replay.row_frame
        last: RecordRow | None = None
        for row in rows:
            index, pid, seq, ts, command, topic, payload, fields, _size = row
            if index > p.limit:
                break
            if p.has_end and replay.past_end_at(index, ts):
                if out:
                    session.send_many(out)
                self._finish(replay)
                return _STOP
            if p.conf is not None:
                p.prev_bm = self._conflate_row(replay, p.conf, row, p.prev_bm, send)
                last = row
                continue
            frame: bytes | None
            if p.simple:
                frame = (
                    row_frame(pid, seq, ts, topic, payload, fields)
                    if topic == p.want_topic
                    and command != "sow_delete"
                    and fields.get("mt", "json") == p.want_mt
                    else None
                )
            else:
                frame = self._match_frame(replay, p.group, row)
            if frame is not None:
                if p.rate is not None:
                    wait = replay.rate_wait_at(ts)
                    if wait > 0:
                        if out:
                            session.send_many(out)
                        if last is not None:
                            replay.last_bm = f"{last[1]}|{last[2]}|"
                        replay.advance(index)
                        self._pump_later(replay, wait)
                        self._sync_members(replay)
                        return _STOP
                    replay.sent_bytes(len(payload))
                send(frame)
                replay.delivered = True
            last = row
        if out:
            session.send_many(out)
        if last is None:
            return _EMPTY
        replay.last_bm = f"{last[1]}|{last[2]}|"
        p.budget -= len(rows)
        replay.advance(last[0] + 1)
        return _MORE

    @staticmethod
    def _match_frame(
        replay: Replay[Subscription], group: tuple[Replay[Subscription], ...] | None, row: RecordRow
    ) -> bytes | None:
        """The frame of ``row`` for a filtered replay or a group (``None``: no match)."""
        _index, pid, seq, ts, command, topic, payload, fields, _size = row
        if group is None:
            if replay.row_matches(command, topic, payload, fields):
                return replay.row_frame(pid, seq, ts, topic, payload, fields)
            return None
        sids = []
        for member in group:
            if member.row_matches(command, topic, payload, fields):
                sids.append(member.sub.sid)
                member.delivered = True
        if not sids:
            return None
        return replay.row_frame(pid, seq, ts, topic, payload, fields, ",".join(sids))

    def _at_limit(self, replay: Replay[Subscription], p: _Pass) -> None:
        """The replay read everything it may: completed, finished, or waiting for more."""
        if replay.end_index is not None:
            end = replay.end_index
            if replay.position > end or (replay.position == end and not replay.end_inclusive):
                self._finish(replay)
        elif replay.end_time is not None:
            # a range ending at a time: completed (and the end) when that time has passed
            # and nothing received before it is still waiting to become durable
            now_us = int(self._clock() * 1_000_000)
            if replay.time_over(now_us) and not self._pending_before(replay, p.limit):
                self._finish(replay)
            elif self._call_later is not None and replay.end_timer is None:
                delay = max((replay.end_time - now_us) / 1_000_000, 0.0) + 0.001

                def wake(replay: Replay[Subscription] = replay) -> None:
                    replay.end_timer = None
                    self.pump(replay)

                replay.end_timer = self._call_later(min(delay, 60.0), wake)
        else:
            # caught up with the log: completed, and what follows is live
            if p.conf is not None:
                self._release_caught_up(replay, p.conf, p.limit)
            for member in p.group or (replay,):
                if not member.completed_sent:
                    member.completed_sent = True
                    if member.send_completed is not None:
                        member.send_completed()

    @staticmethod
    def _sync_members(replay: Replay[Subscription]) -> None:
        """Members of a group are where their leader is."""
        for member in replay.members:
            member.position = replay.position
            member.last_bm = replay.last_bm

    @staticmethod
    def _pending_before(replay: Replay[Subscription], limit: int) -> bool:
        """Is a record past ``limit`` (written, not yet deliverable) inside the range's time?"""
        journal = replay.journal
        if limit >= journal.last_index:
            return False
        nxt = journal.read(limit + 1, max_records=1)
        return bool(nxt) and not replay.past_end(nxt[0])

    def _before_start(self, replay: Replay[Subscription]) -> bool:
        """A replay whose start time is still ahead waits for it (True); once it has come,
        the replay starts at the first record received at or after it (False)."""
        start = replay.not_before
        assert start is not None
        now_us = int(self._clock() * 1_000_000)
        if now_us >= start:
            replay.not_before = None
            replay.position = max(replay.position, replay.journal.find_time(start))
            return False
        self._pump_later(replay, min((start - now_us) / 1_000_000 + 0.001, 60.0))
        return True

    def _pump_later(self, replay: Replay[Subscription], delay: float) -> None:
        if self._call_later is None or replay.timer is not None or replay.done:
            return

        def fire() -> None:
            replay.timer = None
            self.pump(replay)

        replay.timer = self._call_later(delay, fire)

    # ------------------------------------------------------------------ conflation

    def _conflate_row(
        self,
        replay: Replay[Subscription],
        conf: ReplayConflation,
        row: RecordRow,
        before_bm: str | None,
        send: Callable[[bytes], None],
    ) -> str:
        """A conflated replay reads ``row``: first the holds whose interval ended before the
        row's time go out (through ``send``), then the row is held if it matches. Returns the
        row's bookmark (the ``before_bm`` of the next row)."""
        ts = row[3]
        deadline = conf.holds.next_deadline()
        if deadline is not None and ts >= deadline:
            for held in conf.holds.release(ts):
                send(self._held_frame(replay, held))
            replay.delivered = True
        if replay.row_matches(row[4], row[5], row[6], row[7]):
            conf.offer(row, before_bm)
        return f"{row[1]}|{row[2]}|"

    @staticmethod
    def _held_frame(replay: Replay[Subscription], held: ReplayHeld) -> bytes:
        """The delivery of a hold: the latest record, under the first record's bookmark."""
        latest = held.latest
        return replay.row_frame(
            held.first_publisher, held.first_sequence, latest[3], latest[5], latest[6], latest[7]
        )

    def _send_replay_held(self, replay: Replay[Subscription], held: list[ReplayHeld]) -> None:
        if not held:
            return
        session = replay.sub.conn.session
        for item in held:
            session.send(self._held_frame(replay, item))
        replay.delivered = True

    def _release_caught_up(
        self, replay: Replay[Subscription], conf: ReplayConflation, limit: int
    ) -> None:
        """A conflated replay that has read everything it may: the journal's timeline is now
        the clock. Holds whose interval has passed go out, unless a record received inside
        their interval is written but not deliverable yet (the next durable pump sees it)."""
        if not conf.holds:
            return
        horizon = int(self._clock() * 1_000_000)
        journal = replay.journal
        pending = limit < journal.last_index
        if pending:
            nxt = journal.read_rows(limit + 1, max_records=1)
            if nxt:
                horizon = min(horizon, nxt[0][3])
        self._send_replay_held(replay, conf.holds.release(horizon))
        deadline = conf.holds.next_deadline()
        if deadline is None or pending or conf.timer is not None or self._call_later is None:
            return
        delay = max(0.0, deadline / 1_000_000 - self._clock())

        def wake() -> None:
            conf.timer = None
            self.pump(replay)

        conf.timer = self._call_later(delay + 0.0005, wake)

    # ------------------------------------------------------------------ ranges and groups

    def _finish(self, replay: Replay[Subscription]) -> None:
        """A range reached its end: ``completed``, then the subscription (or group) stops."""
        group = [replay, *replay.members]
        replay.members = []
        for member in group:
            member.leader = None
            if member.conflation is not None:  # the range is over: what is held goes out
                self._send_replay_held(member, member.conflation.holds.release_all())
            if not member.completed_sent:
                member.completed_sent = True
                if member.send_completed is not None:
                    member.send_completed()
        for member in group:
            sub = member.sub
            if sub.conn.subs.get(sub.sub_id) is sub:
                del sub.conn.subs[sub.sub_id]
            self.remove(sub)

    def ungroup(self, replay: Replay[Subscription]) -> Replay[Subscription] | None:
        """Take ``replay`` out of its group (it is paused or removed).

        Returns the member that now leads the rest of the group when ``replay`` led it (the
        caller pumps it), else ``None``.
        """
        leader = replay.leader
        if leader is not None:
            leader.members.remove(replay)
            replay.leader = None
            replay.advance(leader.position)
            return None
        if not replay.members:
            return None
        heir, *rest = replay.members
        replay.members = []
        heir.leader = None
        heir.members = rest
        for member in rest:
            member.leader = heir
        heir.rate = None if replay.rate is None else dataclasses.replace(replay.rate)
        heir.last_bm = replay.last_bm
        heir.advance(replay.position)
        return heir

    def group_resumed(self, replays: list[Replay[Subscription]]) -> None:
        """Subscriptions resumed by one command that can share a replay do (the seed: same
        connection, paused at the same point, same rate; here also the same range and
        ``timestamp`` option, and not ``live``); then every one of them is pumped."""
        groups: dict[tuple[Any, ...], list[Replay[Subscription]]] = {}
        for replay in replays:
            if (
                replay.done
                or replay.live
                or replay.conflation is not None
                or replay.leader is not None
                or replay.members
            ):
                groups[(id(replay),)] = [replay]
                continue
            options = replay.sub.options
            key = (
                replay.position,
                options.get("rate"),
                options.get("rate_max_gap"),
                replay.sub.timestamp,
                replay.end_index,
                replay.end_inclusive,
                replay.end_time,
                replay.end_time_inclusive,
            )
            groups.setdefault(key, []).append(replay)
        for leader, *members in groups.values():
            for member in members:
                member.leader = leader
                if member.timer is not None:
                    member.timer.cancel()
                    member.timer = None
                if member.pin is not None:
                    member.journal.unpin(member.pin)
                    member.pin = None
            leader.members.extend(members)
            self.pump(leader)

    # ------------------------------------------------------------------ persisted acks

    def _schedule_persisted_acks(self) -> None:
        """Start the server's persisted-ack timer (if it is not running)."""
        if (
            self._ack_timer is None
            and self._call_later is not None
            and self.persisted_ack_interval > 0
        ):
            self._ack_timer = self._call_later(
                self.persisted_ack_interval, self._persisted_ack_tick
            )

    def _persisted_ack_tick(self) -> None:
        self._ack_timer = None
        if self.send_persisted_acks():
            self._schedule_persisted_acks()

    def send_persisted_acks(self) -> bool:
        """Send a persisted ack to every bookmark subscription that asked for them and was
        delivered something since its last one (the server's timer calls this periodically).

        The ack's ``bm`` is a journal bookmark at or after everything delivered to the
        subscription (the last record its replay looked at), durable here and acknowledged by
        every sync replication destination (as a publisher's persisted ack: a ``live``
        subscriber resumes from it after a failover), and never past a conflated record
        still held. Returns whether any subscription still wants persisted acks (the timer
        stops when none does).
        """
        wanted = False
        durable = self._txlog.journal.durable_index if self._txlog is not None else 0
        if self._hooks.ack_limit is not None:  # and held by every sync destination
            durable = self._hooks.ack_limit(durable)
        for replay in list(self._replays.values()):
            if not replay.send_persisted or replay.done:
                continue
            wanted = True
            if not replay.delivered or replay.position - 1 > durable:
                continue
            bm = replay.last_bm
            if replay.conflation is not None:
                bm = replay.conflation.ack_bookmark(bm)
            if bm is None or bm == replay.acked_bm:
                continue
            replay.delivered = False
            replay.acked_bm = bm
            replay.sub.conn.session.send(
                encode_header(
                    {
                        "c": "ack",
                        "a": "persisted",
                        "status": "success",
                        "sub_id": replay.sub.sub_id,
                        "bm": bm,
                    }
                )
            )
        return wanted
