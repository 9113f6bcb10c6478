"""Journal management actions, archive directory, preallocated files and instance prefixes
(issue #17, seed 000 ch. 14 "Managing Journal Files"; the AMPS configuration guide's
``amps-action-on-schedule`` and ``amps-action-do-{archive,compress,remove}-journal``).

Against the real server (ServerThread), real files and sockets: scheduled actions archive and
compress sealed files while a replay from EPOCH still reads every message through them (also
after a restart); a scheduled removal keeps the files a paused replay needs and removes them once
it is gone; two instances share a journal directory and each recovers only its own files;
preallocated files exist ahead and are topped up; ``FlushInterval`` sets the group-commit period;
a journal action that cannot run is refused at start-up with an error naming it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _txlog_support import Inbox, txlog_xml, unique, wait_durable, wait_until

from ampsclient import Client, Command
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.cluster import Cluster, ClusterNode
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.engine.journal import JournalRecord
from ampsclient_server_stub.journal_actions import Schedule, journal_actions, parse_every


def config_xml(
    name: str,
    *,
    journal: str = "journal",
    extra_txlog: str = "",
    actions: str = "",
    size: str = "16KB",
) -> str:
    return txlog_xml(
        name,
        f"""<JournalDirectory>{journal}</JournalDirectory>
    <JournalSize>{size}</JournalSize>
    {extra_txlog}
    <Topic><Name>.*</Name></Topic>""",
        more=actions,
    )


def action_xml(every: str, *steps: tuple[str, str]) -> str:
    dos = "".join(
        f"<Do><Module>amps-action-do-{op}-journal</Module><Options><Age>{age}</Age></Options></Do>"
        for op, age in steps
    )
    return (
        "<Actions><Action><On><Module>amps-action-on-schedule</Module>"
        f"<Options><Every>{every}</Every><Name>test-schedule</Name></Options></On>"
        f"{dos}</Action></Actions>"
    )


def publish_all(uri: str, topic: str, count: int) -> None:
    with Client(unique("pub")) as pub:
        pub.connect(uri)
        pub.logon(5000)
        for n in range(count):
            pub.publish(topic, json.dumps({"n": n, "pad": "x" * 40}))
        pub.flush(10_000)


def replay_ns(uri: str, topic: str) -> list[int]:
    """Every ``n`` a bookmark subscription from EPOCH delivers up to its ``completed`` ack."""
    with Client(unique("sub")) as sub:
        sub.connect(uri)
        sub.logon(5000)
        box = Inbox()
        cmd = Command("subscribe").set_topic(topic).set_bookmark("0").add_ack_type("completed")
        sub.execute_async(cmd.set_timeout(5000), box)
        box.wait_ack("completed")
        return [m.json()["n"] for m in box.messages]


# ------------------------------------------------------------------ the schedule (unit)


def test_every_takes_the_three_forms_of_the_guide() -> None:
    assert parse_every("4h") == Schedule("timer", interval=4 * 3600)
    assert parse_every("250ms").next_delay() == pytest.approx(0.25)
    assert parse_every("17:47") == Schedule("daily", hour=17, minute=47)
    assert parse_every("00:32Z") == Schedule("daily", hour=0, minute=32, utc=True)
    assert parse_every("Saturday at 11:00") == Schedule("weekly", hour=11, minute=0, weekday=5)
    assert parse_every("wednesday at 03:32Z") == Schedule(
        "weekly", hour=3, minute=32, weekday=2, utc=True
    )
    monday = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # a Monday, 10:00 UTC
    assert parse_every("10:30Z").next_delay(monday) == 30 * 60
    assert parse_every("09:30Z").next_delay(monday) == 23.5 * 3600  # tomorrow
    assert parse_every("Tuesday at 10:00Z").next_delay(monday) == 24 * 3600
    assert parse_every("Monday at 10:00Z").next_delay(monday) == 7 * 24 * 3600  # not now
    assert parse_every("Sunday at 09:00Z").next_delay(monday) == (6 * 24 - 1) * 3600


@pytest.mark.parametrize("every", ["Everyday", "25:00", "12:61", "Someday at 10:00", "0s", "-1h"])
def test_a_bad_every_is_refused_naming_it(every: str) -> None:
    with pytest.raises(ConfigError, match="Every"):
        parse_every(every)


_NO_AGE = (
    "<Actions><Action><On><Module>amps-action-on-schedule</Module><Options>"
    "<Every>1h</Every></Options></On><Do><Module>amps-action-do-remove-journal"
    "</Module></Do></Action></Actions>"
)
_NO_EVERY = (
    "<Actions><Action><On><Module>amps-action-on-schedule</Module></On><Do>"
    "<Module>amps-action-do-remove-journal</Module><Options><Age>1d</Age></Options>"
    "</Do></Action></Actions>"
)
_ON_ADMIN = (
    "<Actions><Action><On><Module>amps-action-on-admin</Module></On><Do>"
    "<Module>amps-action-do-compress-journal</Module><Options><Age>1d</Age></Options>"
    "</Do></Action></Actions>"
)


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (action_xml("1h", ("archive", "1d")), "JournalArchiveDirectory"),
        (action_xml("1h", ("remove", "soon")), "Age"),
        (action_xml("soon", ("compress", "1d")), "Every"),
        (_NO_EVERY, "requires an <Every>"),
        (_NO_AGE, "requires an <Age>"),
    ],
)
def test_a_journal_action_that_cannot_run_fails_the_start(
    tmp_path: Path, actions: str, message: str
) -> None:
    config = parse_config(config_xml("refused", actions=actions), base_dir=tmp_path)
    with pytest.raises(ConfigError, match=message):
        journal_actions(config)
    thread = ServerThread(config, fsync="never")
    with pytest.raises(ConfigError, match=message):
        thread.start()
    assert not (tmp_path / "journal").exists()  # refused before anything was opened


def test_a_journal_action_on_another_trigger_is_refused(tmp_path: Path) -> None:
    # the configuration reader refuses the trigger module (or journal_actions would)
    with pytest.raises(ConfigError, match="amps-action-on-admin"):
        journal_actions(
            parse_config(config_xml("admin-trigger", actions=_ON_ADMIN), base_dir=tmp_path)
        )


def test_journal_actions_without_a_transaction_log_are_refused(tmp_path: Path) -> None:
    xml = config_xml("no-log", actions=action_xml("1h", ("remove", "1d")))
    xml = xml[: xml.index("<TransactionLog>")] + xml[xml.index("</TransactionLog>") + 17 :]
    with pytest.raises(ConfigError, match="needs a <TransactionLog>"):
        journal_actions(parse_config(xml, base_dir=tmp_path))


# ------------------------------------------------------------------ on a running server


@pytest.mark.integration
def test_scheduled_archive_and_compress_keep_every_message_replayable(tmp_path: Path) -> None:
    xml = config_xml(
        "archiver",
        extra_txlog="<JournalArchiveDirectory>archive</JournalArchiveDirectory>",
        actions=action_xml("100ms", ("archive", "0s"), ("compress", "0s")),
    )
    archive = tmp_path / "archive"
    topic = unique("archived")
    with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never") as server:
        journal = server.server.journal
        assert journal is not None and journal.archive_directory == archive
        publish_all(server.uri("tcp", "json"), topic, 2000)
        wait_durable(server)

        def all_moved() -> bool:
            infos = server.call(journal.segments)
            old = [i for i in infos if i.state not in ("active", "sealing")]
            return len(old) >= 5 and all(i.archived and i.state == "compressed" for i in old)

        wait_until(all_moved, 20, "every sealed file archived and compressed")
        in_archive = sorted(p.name for p in archive.iterdir())
        assert in_archive
        assert all(n.startswith("archiver-") and n.endswith(".journal.gz") for n in in_archive)
        left = sorted(p.name for p in (tmp_path / "journal").glob("*.journal*"))
        assert len(left) == 1 and left[0].endswith(".journal")  # the active file only
        assert replay_ns(server.uri("tcp", "json"), topic) == list(range(2000))
    # a restart recovers the archived files as part of the log
    with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never") as server:
        assert replay_ns(server.uri("tcp", "json"), topic) == list(range(2000))


@pytest.mark.integration
def test_scheduled_remove_keeps_what_a_replay_needs_then_removes_it(tmp_path: Path) -> None:
    xml = config_xml("remover", actions=action_xml("50ms", ("remove", "0s")))
    topic = unique("removed")
    with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never") as server:
        journal = server.server.journal
        runner = server.server.journal_actions
        assert journal is not None and runner is not None
        uri = server.uri("tcp", "json")
        with Client(unique("sub")) as sub:
            sub.connect(uri)
            sub.logon(5000)
            # a replay from EPOCH, paused before it delivered anything: it needs every file
            box = Inbox()
            cmd = Command("subscribe").set_topic(topic).set_bookmark("0")
            cmd.set_sub_id("held").set_options("pause").add_ack_type("completed")
            sub.execute_async(cmd.set_timeout(5000), box)
            sub.flush(5000)
            publish_all(uri, topic, 2000)
            wait_durable(server)
            sealed = [s for s in server.call(journal.segments) if s.state == "sealed"]
            assert len(sealed) >= 5
            runs = runner.runs
            wait_until(lambda: runner.runs >= runs + 3, 10, "three more scheduled removals")
            assert server.call(lambda: journal.first_index) == 1  # nothing was removed
            sub.execute_async(Command("subscribe").set_sub_id("held").set_options("resume"))
            box.wait_ack("completed")
            assert [m.json()["n"] for m in box.messages] == list(range(2000))
            sub.unsubscribe("held")
            sub.flush(5000)
            wait_until(
                lambda: server.call(lambda: journal.first_index) > sealed[-1].last_index,
                10,
                "the released files removed by the schedule",
            )
        assert not any(s.path.exists() for s in sealed)
        first = server.call(lambda: journal.first_index)
        assert replay_ns(uri, topic) == list(range(first - 1, 2000))  # what is left replays


def test_scheduled_remove_frees_the_files_a_caught_up_replay_has_passed(tmp_path: Path) -> None:
    """A bookmark replay that keeps up and stays subscribed (issue #32's soak: one held the
    log) needs none of the files it has read: the schedule removes them while it goes on, and
    it gets every message, in order. Before, its pin moved only every 10,000 records, so with
    these 2,000 records nothing was removed ("still needed from index 1")."""
    xml = config_xml("passer", actions=action_xml("50ms", ("remove", "0s")))
    topic = unique("passed")
    with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never") as server:
        journal = server.server.journal
        runner = server.server.journal_actions
        assert journal is not None and runner is not None
        uri = server.uri("tcp", "json")
        with Client(unique("sub")) as sub:
            sub.connect(uri)
            sub.logon(5000)
            box = Inbox()
            cmd = Command("subscribe").set_topic(topic).set_bookmark("0").set_sub_id("passer")
            sub.execute_async(cmd.add_ack_type("completed").set_timeout(5000), box)
            box.wait_ack("completed")  # from EPOCH of an empty log: it pins index 1
            publish_all(uri, topic, 1000)
            box.wait(lambda b: len(b.messages) >= 1000, 20.0)
            wait_durable(server)
            wait_until(
                lambda: server.call(lambda: journal.first_index) > 900,
                20,
                "the files the replay has passed removed while it is subscribed",
            )
            publish_all(uri, topic, 1000)  # it goes on across the removals
            box.wait(lambda b: len(b.messages) >= 2000, 20.0)
            wait_until(lambda: server.call(lambda: journal.first_index) > 1900, 20, "again")
            assert [m.json()["n"] for m in box.messages] == list(range(1000)) * 2
            assert server.call(journal.counters)["pruned_segments"] >= 5  # several files


@pytest.mark.integration
def test_instances_sharing_a_directory_recover_only_their_own_files(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    topic = unique("own")
    configs = {
        name: parse_config(config_xml(name, journal=str(shared)), base_dir=tmp_path)
        for name in ("alpha", "beta")
    }
    with (
        ServerThread(configs["alpha"], fsync="never") as alpha,
        ServerThread(configs["beta"], fsync="never") as beta,
    ):
        publish_all(alpha.uri("tcp", "json"), topic, 300)
        publish_all(beta.uri("tcp", "json"), topic, 50)
    names = sorted(p.name for p in shared.iterdir())
    assert {n.split("-")[0].split(".")[0] for n in names} == {"alpha", "beta"}
    assert "alpha.clients" in names and "beta.lock" in names
    with ServerThread(configs["beta"], fsync="never") as beta:
        assert replay_ns(beta.uri("tcp", "json"), topic) == list(range(50))
    with ServerThread(configs["alpha"], fsync="never") as alpha:
        assert replay_ns(alpha.uri("tcp", "json"), topic) == list(range(300))


@pytest.mark.integration
def test_preallocated_journal_files_are_kept_ready(tmp_path: Path) -> None:
    xml = config_xml(
        "prealloc", extra_txlog="<PreallocatedJournalFiles>3</PreallocatedJournalFiles>"
    )
    topic = unique("pre")
    directory = tmp_path / "journal"
    with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never") as server:
        journal = server.server.journal
        assert journal is not None
        spares = sorted(p.name for p in directory.glob("prealloc.spare-*"))
        assert spares == ["prealloc.spare-1", "prealloc.spare-2"]
        publish_all(server.uri("tcp", "json"), topic, 2000)  # several files of 16 KB
        wait_durable(server)
        assert server.call(journal.statistics)["rotations"] >= 5
        wait_until(
            lambda: len(list(directory.glob("prealloc.spare-*"))) == 2, 10, "spares topped up"
        )
        assert replay_ns(server.uri("tcp", "json"), topic) == list(range(2000))
    # the default is 2: one spare beside the active file
    xml = config_xml("two", journal="j2")
    with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never"):
        assert [p.name for p in (tmp_path / "j2").glob("two.spare-*")] == ["two.spare-1"]


def test_preallocated_journal_files_below_one_is_refused(tmp_path: Path) -> None:
    xml = config_xml("zero", extra_txlog="<PreallocatedJournalFiles>0</PreallocatedJournalFiles>")
    with pytest.raises(ConfigError, match="PreallocatedJournalFiles"):
        parse_config(xml, base_dir=tmp_path)


@pytest.mark.integration
def test_flush_interval_sets_the_group_commit_period(tmp_path: Path) -> None:
    xml = config_xml("flusher", extra_txlog="<FlushInterval>400ms</FlushInterval>")
    topic = unique("flush")
    with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="interval") as server:
        journal = server.server.journal
        assert journal is not None
        with Client(unique("pub")) as pub:
            pub.connect(server.uri("tcp", "json"))
            pub.logon(5000)
            pub.publish(topic, "{}")
            began = time.monotonic()
            pub.flush(5000)  # processed: the record is appended
            wait_until(
                lambda: server.call(lambda: journal.durable_index >= journal.last_index),
                5,
                "the group commit",
            )
            # the commit waited for the interval (a bound it cannot beat)
            assert time.monotonic() - began >= 0.3


def test_the_configuration_guide_example_runs(tmp_path: Path) -> None:
    """docs/configuration.md's journal actions example (tests/test_docs.py runs only the
    examples that start ``ServerThread()`` without a configuration)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    section = page[page.index("### Journal management actions") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "replayed 500 messages" in done.stdout


def _live_records(node: ClusterNode) -> list[JournalRecord]:
    """``node.journal_records()`` of a node whose schedule removes files: a read-only open of
    its live directory races the removal (a file listed at open may be gone when it is read),
    so look again then (with a deadline)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return node.journal_records()
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise


@pytest.mark.integration
def test_scheduled_remove_keeps_what_a_replication_destination_has_not_acknowledged(
    tmp_path: Path,
) -> None:
    """Processes: A removes every sealed file each 100 ms; while B is down (kill -9) the
    files B has not acknowledged stay (A logs why), and go once B is back and caught up.

    The records are looked for in A's files once A said they are persisted (a ``flush``
    asking for a persisted ack): after a processed flush, the last ones may still be in A's
    append buffer, not in its files (a read then missed n 564..599 of 600 in 4 of 30 tries
    under load), which is not a removal."""
    cluster = Cluster(tmp_path, journal_size="16KB")
    a = cluster.add("A", extra_xml=action_xml("100ms", ("remove", "0s")))
    b = cluster.add("B")
    cluster.replicate(a, b, sync=False)
    cluster.replicate(b, a, sync=False)
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        topic = unique("replicated")
        publish_all(a.uri(), topic, 50)
        cluster.wait_caught_up()
        b.kill()  # SIGKILL and reaped: B acknowledges nothing published from here on
        with Client(unique("pub")) as pub:
            pub.connect(a.uri())
            pub.logon(5000)
            for n in range(50, 650):
                pub.publish(topic, json.dumps({"n": n, "pad": "x" * 40}))
            pub.publish_flush(10_000, "persisted")  # in A's files (fsync never: written out)
        line = a.wait_log("still needed from index", 20)  # the schedule ran, was held back
        records = {json.loads(r.payload)["n"]: r.index for r in _live_records(a)}
        assert set(range(50, 650)) <= set(records), sorted(set(range(50, 650)) - set(records))
        held = int(line.rsplit("still needed from index ", 1)[1].split()[0])
        assert held <= records[50]  # what holds the files: B's first unacknowledged record
        assert a.destination_status("B")["hold"] <= records[50]
        b.start()
        wait_until(lambda: len(b.journal_records()) >= 650, 30, "B to receive every message")

        def oldest_kept() -> int:
            return min(json.loads(r.payload)["n"] for r in _live_records(a))

        wait_until(
            lambda: oldest_kept() > 50, 30, "the files B acknowledged removed by the schedule"
        )


class _HoldRemoval(logging.Handler):
    """Holds the scheduled removal after its first removed file (its ``journal: removed``
    line, logged with no journal lock held) until :attr:`resume` is set."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.removing = threading.Event()
        self.resume = threading.Event()
        self.removed = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("journal: removed"):
            self.removed += 1
            self.removing.set()
            self.resume.wait(30)


def test_deliveries_flow_while_the_scheduled_removal_of_many_files_runs(tmp_path: Path) -> None:
    """``amps-action-do-remove-journal`` removes files in a worker thread: with the removal of
    about 100 files held after its first one, publishes are still delivered and acknowledged
    (markers, waited for with a deadline); released, the removal goes on. (Measured: a 1 ms
    ticker on a loop appending to the journal had a max gap of 90-160 ms while 106-110 files
    were removed, 101-134 ms in the same time afterwards, on a machine at load 30.)"""
    xml = config_xml("remove-flow", actions=action_xml("50ms", ("remove", "0s")))
    topic = unique("flow")
    hold = _HoldRemoval()
    logger = logging.getLogger("ampsclient_server_stub.engine.journal")
    level = logger.level
    inbox = Inbox()
    try:
        with ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never") as server:
            journal = server.server.journal
            assert journal is not None
            uri = server.uri("tcp", "json")
            with Client(unique("sub")) as sub, Client(unique("pub")) as pub:
                sub.connect(uri)
                sub.logon(5000)
                sub.subscribe(inbox, topic)
                # a replay from EPOCH, paused: the scheduled removals keep every file for it
                held = Command("subscribe").set_topic(topic).set_bookmark("0")
                held.set_sub_id("held").set_options("pause")
                sub.execute_async(held.set_timeout(5000), lambda m: None)
                sub.flush(5000)
                pub.connect(uri)
                pub.logon(5000)
                for n in range(1600):  # ~100 files of 16 KB
                    pub.publish(topic, json.dumps({"n": n, "pad": "x" * 1000}))
                pub.flush(10_000)
                wait_durable(server)
                files = len(server.call(journal.segments))
                assert files >= 90, files
                logger.setLevel(logging.INFO)
                logger.addHandler(hold)
                sub.unsubscribe("held")  # released: the next scheduled run removes them all
                assert hold.removing.wait(30), "no scheduled removal"
                for n in range(1600, 1605):  # while the removal is held
                    pub.publish(topic, json.dumps({"n": n}))
                pub.flush(10_000)
                wait_until(lambda: len(inbox.messages) >= 1605, 10, "the markers")
                assert hold.removed == 1 and not hold.resume.is_set()
                hold.resume.set()
                wait_until(lambda: hold.removed >= files - 10, 30, "the removal to go on")
            assert [m.json()["n"] for m in inbox.messages] == list(range(1605))
    finally:
        hold.resume.set()
        logger.removeHandler(hold)
        logger.setLevel(level)
