"""Journal management actions: ``<Actions>`` that archive, compress and remove journal files on
a schedule, as the AMPS configuration guide describes them::

    <Actions>
      <Action>
        <On>
          <Module>amps-action-on-schedule</Module>
          <Options><Every>Saturday at 00:30</Every><Name>weekly</Name></Options>
        </On>
        <Do>
          <Module>amps-action-do-archive-journal</Module>
          <Options><Age>7d</Age></Options>
        </Do>
      </Action>
    </Actions>

``Every`` takes the guide's three forms: a duration (``4h``: a timer started with the instance,
reset after each run), a time of day (``17:47``: daily) or a day and a time (``Saturday at
11:00``: weekly), in local time or, with a trailing ``Z``, in UTC. Each ``<Do>`` module needs
``Age``: it processes the sealed journal files that have not been written to for longer than
that. ``amps-action-do-archive-journal`` moves them to the ``<TransactionLog>``'s
``<JournalArchiveDirectory>`` (required), ``amps-action-do-compress-journal`` compresses them in
place, ``amps-action-do-remove-journal`` deletes them, oldest first, stopping at the first file a
bookmark replay or a replication destination still needs (the next run removes it once it is
released). Archived and compressed files stay part of the transaction log.

Anything else about a journal action is refused at start-up with a :class:`ConfigError` that
names it: a missing or bad ``Every``/``Age``, another ``<On>`` module, archiving without an
archive directory, journal actions without a transaction log.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from .config import SCHEDULE_MODULE, ActionConfig, ConfigError, ServerConfig, parse_duration
from .engine.journal import FsyncPolicy, Journal

__all__ = [
    "ARCHIVE_MODULE",
    "COMPRESS_MODULE",
    "JOURNAL_MODULES",
    "REMOVE_MODULE",
    "JournalAction",
    "JournalActionRunner",
    "JournalStep",
    "Schedule",
    "journal_actions",
    "open_journal",
    "parse_every",
    "run_step",
]

logger = logging.getLogger(__name__)

ARCHIVE_MODULE: Final = "amps-action-do-archive-journal"
COMPRESS_MODULE: Final = "amps-action-do-compress-journal"
REMOVE_MODULE: Final = "amps-action-do-remove-journal"
Operation = Literal["archive", "compress", "remove"]
JOURNAL_MODULES: Final[Mapping[str, Operation]] = {
    ARCHIVE_MODULE: "archive",
    COMPRESS_MODULE: "compress",
    REMOVE_MODULE: "remove",
}
"""The ``<Do>`` modules this module runs, and the journal operation of each."""

_DAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_TIME_RE: Final = re.compile(r"(\d{1,2}):(\d{2})(z?)")
_WEEKLY_RE: Final = re.compile(r"([a-z]+)\s+at\s+(.+)")


@dataclass(frozen=True, slots=True)
class Schedule:
    """When an action runs (``amps-action-on-schedule``'s ``Every``).

    Attributes:
        kind: ``"timer"``, ``"daily"`` or ``"weekly"``.
        interval: seconds between runs of a timer.
        hour, minute: the time of a daily or weekly run.
        weekday: 0 (Monday) .. 6 (Sunday) for a weekly run.
        utc: the time is UTC (a trailing ``Z``), else local time.
    """

    kind: Literal["timer", "daily", "weekly"]
    interval: float = 0.0
    hour: int = 0
    minute: int = 0
    weekday: int = 0
    utc: bool = False

    def next_delay(self, now: datetime | None = None) -> float:
        """Seconds from ``now`` (default: the clock) to the next run."""
        if self.kind == "timer":
            return self.interval
        if now is None:
            now = datetime.now(UTC) if self.utc else datetime.now().astimezone()
        target = now.replace(hour=self.hour, minute=self.minute, second=0, microsecond=0)
        if self.kind == "weekly":
            target += timedelta(days=(self.weekday - now.weekday()) % 7)
        while target <= now:
            target += timedelta(days=7 if self.kind == "weekly" else 1)
        return (target - now).total_seconds()


def _time_of_day(text: str) -> tuple[int, int, bool] | None:
    m = _TIME_RE.fullmatch(text)
    if m is None:
        return None
    hour, minute = int(m.group(1)), int(m.group(2))
    if hour > 23 or minute > 59:
        return None
    return hour, minute, bool(m.group(3))


def parse_every(text: str) -> Schedule:
    """Parse ``Every``: ``4h`` (timer), ``17:47`` (daily), ``Saturday at 11:00`` (weekly);
    a trailing ``Z`` on a time means UTC.

    Raises:
        ConfigError: anything else.
    """
    spec = text.strip().lower()
    when = _time_of_day(spec)
    if when is not None:
        return Schedule("daily", hour=when[0], minute=when[1], utc=when[2])
    m = _WEEKLY_RE.fullmatch(spec)
    if m is not None:
        day = next((i for i, d in enumerate(_DAYS) if d.startswith(m.group(1))), None)
        when = _time_of_day(m.group(2).strip())
        if day is not None and len(m.group(1)) >= 3 and when is not None:
            return Schedule("weekly", hour=when[0], minute=when[1], weekday=day, utc=when[2])
    try:
        interval = parse_duration(spec)
    except ConfigError:
        interval = -1.0
    if interval > 0:
        return Schedule("timer", interval=interval)
    raise ConfigError(
        f"amps-action-on-schedule: <Every>{text}</Every> is not a schedule: expected a "
        "duration ('4h'), a time of day ('17:47', '17:47Z') or a day and a time "
        "('Saturday at 11:00')"
    )


@dataclass(frozen=True, slots=True)
class JournalStep:
    """One journal ``<Do>``: an operation on the files older than ``age`` seconds."""

    operation: Operation
    age: float


@dataclass(frozen=True, slots=True)
class JournalAction:
    """An ``<Action>`` whose ``<Do>`` steps manage the journal."""

    name: str
    schedule: Schedule
    steps: tuple[JournalStep, ...]


def _journal_action(position: int, action: ActionConfig, config: ServerConfig) -> JournalAction:
    where = f"<Actions> <Action> #{position}"
    steps: list[JournalStep] = []
    for step in action.do:
        operation = JOURNAL_MODULES.get(step.module)
        if operation is None:
            continue
        age_text = step.options.get("Age")
        if age_text is None:
            raise ConfigError(f"{where}: <Do> {step.module} requires an <Age> option")
        try:
            age = parse_duration(age_text)
        except ConfigError as exc:
            raise ConfigError(f"{where}: <Do> {step.module} <Age>: {exc}") from None
        txlog = config.transaction_log
        if txlog is None:
            raise ConfigError(f"{where}: <Do> {step.module} needs a <TransactionLog>")
        if operation == "archive" and txlog.archive_directory is None:
            raise ConfigError(
                f"{where}: <Do> {ARCHIVE_MODULE} needs <JournalArchiveDirectory> in the "
                "<TransactionLog>"
            )
        steps.append(JournalStep(operation, age))
    if len(action.on) != 1 or action.on[0].module != SCHEDULE_MODULE:
        modules = ", ".join(s.module for s in action.on) or "none"
        raise ConfigError(
            f"{where}: journal actions run on one <On> {SCHEDULE_MODULE} (found: {modules})"
        )
    options = action.on[0].options
    every = options.get("Every")
    if every is None:
        raise ConfigError(f"{where}: <On> {SCHEDULE_MODULE} requires an <Every> option")
    return JournalAction(options.get("Name", "unknown"), parse_every(every), tuple(steps))


def journal_actions(config: ServerConfig) -> tuple[JournalAction, ...]:
    """The journal actions of ``config`` (actions without a journal ``<Do>`` are not).

    Raises:
        ConfigError: a journal action that cannot run as configured (see the module docstring).
    """
    found = []
    for position, action in enumerate(config.actions, 1):
        if any(step.module in JOURNAL_MODULES for step in action.do):
            found.append(_journal_action(position, action, config))
    return tuple(found)


def _file_prefix(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.+@=-]+", "_", name).lstrip(".")
    return cleaned or "journal"


def open_journal(
    config: ServerConfig, directory: Path, *, journal_size: int, fsync: FsyncPolicy
) -> Journal:
    """Open the server's journal as ``config`` asks: with a ``<TransactionLog>``, the files
    carry the instance ``<Name>`` as prefix (only those are recovered), the
    ``<PreallocatedJournalFiles>`` are kept allocated ahead and ``<JournalArchiveDirectory>`` is
    where archived files live. Without one (zero configuration) the prefix is ``journal``
    and nothing is preallocated."""
    txlog = config.transaction_log
    if txlog is None:
        return Journal(directory, journal_size=journal_size, fsync=fsync, name="journal")
    return Journal(
        directory,
        journal_size=journal_size,
        fsync=fsync,
        name=_file_prefix(config.name),
        preallocated_files=txlog.preallocated_journal_files,
        archive_directory=txlog.archive_directory,
    )


def run_step(journal: Journal, step: JournalStep, *, now: float | None = None) -> list[Path]:
    """Run one step on ``journal`` (blocking file work: call it from a worker thread)."""
    if step.operation == "archive":
        return journal.archive(step.age, now=now)
    if step.operation == "compress":
        return journal.compress(step.age, now=now)
    return journal.prune(step.age, now=now)


class JournalActionRunner:
    """Runs journal actions on their schedules, each step in a worker thread.

    Args:
        journal: the server's open journal.
        actions: what to run (:func:`journal_actions`).
        on_run: called with ``(action, step, files)`` after each step (statistics, tests).
    """

    def __init__(
        self,
        journal: Journal,
        actions: Sequence[JournalAction],
        *,
        on_run: Callable[[JournalAction, JournalStep, list[Path]], None] | None = None,
    ) -> None:
        self.journal = journal
        self.actions = tuple(actions)
        self.on_run = on_run
        self.runs = 0
        """Steps run so far."""
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight: set[asyncio.Future[list[Path]]] = set()

    def start(self) -> None:
        """Start one timer task per action (on the running loop)."""
        for action in self.actions:
            self._tasks.append(asyncio.create_task(self._loop(action)))
            logger.info(
                "journal action %r scheduled (%s): %s",
                action.name,
                action.schedule,
                ", ".join(f"{s.operation} older than {s.age:g}s" for s in action.steps),
            )

    async def _loop(self, action: JournalAction) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(action.schedule.next_delay())
            for step in action.steps:
                work = loop.run_in_executor(None, run_step, self.journal, step)
                self._inflight.add(work)
                work.add_done_callback(self._inflight.discard)
                try:
                    files = await asyncio.shield(work)  # a stop waits for it, never cuts it
                except Exception:
                    logger.exception("journal action %r: %s failed", action.name, step.operation)
                    continue
                self.runs += 1
                if files:
                    logger.info(
                        "journal action %r: %s %d file(s)", action.name, step.operation, len(files)
                    )
                if self.on_run is not None:
                    self.on_run(action, step, files)

    async def stop(self) -> None:
        """Cancel the timers and wait for a running step to finish."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *self._inflight, return_exceptions=True)
