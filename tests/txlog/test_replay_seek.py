"""A bookmark replay of one topic in a journal that mostly holds other topics' records.

The server (in process, real TCP) skips other topics' records without pacing itself to them,
and passes whole journal segments known to hold none of the topic; what a replay delivers is
exactly what reading every record of the journal and keeping the topic's gives (differential).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from _txlog_support import Inbox, journal_config, unique, wait_durable

from ampsclient import Client, Command
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config_model import ServerConfig, TransactionLogConfig, TxlogTopic
from ampsclient_server_stub.engine.journal import MAX_SEGMENT_TOPICS, Journal


def fill(server: ServerThread, topic: str, count: int, publisher: int) -> None:
    """Append ``count`` records of ``topic`` as one publisher's batches (the broker's path)."""
    journal = server.server.journal
    assert journal is not None
    for i in range(0, count, 5000):
        n = min(5000, count - i)
        first = journal.last_sequence(publisher) + 1
        batch = [(first + k, topic, b'{"n":%d}' % (i + k)) for k in range(n)]
        server.call(lambda b=batch: journal.append_many(publisher, "p", b, {"mt": "json"}))
    server.call(server.broker.request_sync)  # a group commit (wait_durable waits for it)


def expected(journal: Journal, topic: str) -> list[tuple[str, bytes]]:
    """Every record of ``topic`` in the journal, read record by record (the full scan)."""
    out: list[tuple[str, bytes]] = []
    index = journal.first_index
    while index <= journal.last_index:
        records = journal.read(index, max_records=5000)
        for r in records:
            if r.topic == topic:
                out.append((r.bookmark, r.payload))
        index = records[-1].index + 1
    return out


def replay(uri: str, topic: str, bookmark: str) -> list[tuple[str, bytes]]:
    """What a bookmark replay (up to its ``completed`` ack) delivers, message by message."""
    with Client(unique("seek")) as client:
        client.connect(uri)
        client.logon(5000)
        box = Inbox()
        cmd = (
            Command("subscribe")
            .set_topic(topic)
            .set_bookmark(bookmark)
            .set_options("timestamp")
            .add_ack_type("completed")
        )
        client.execute_async(cmd, box)
        box.wait(lambda b: bool(b.acks("completed")), 30.0)
        return [(m.bookmark or "", m.data) for m in box.messages]


def small_files(tmp_path: Path) -> ServerConfig:
    """Every topic recorded, in journal files of 128 KB (about 2,500 of these records)."""
    txlog = TransactionLogConfig(
        journal_directory=tmp_path / "journal",
        journal_size=128 * 1024,
        topics=(TxlogTopic(".*", None),),
    )
    return dataclasses.replace(journal_config(tmp_path), transaction_log=txlog)


@pytest.fixture
def small_segments(tmp_path: Path) -> Iterator[ServerThread]:
    """A journaled server with small journal files."""
    server = ServerThread(small_files(tmp_path), fsync="never")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_records_of_other_topics_do_not_slow_a_replay_to_its_first_step(
    txserver: ServerThread,
) -> None:
    """40k records of another topic before 5 of the replayed one, all in one journal file:
    the replay skips them in a few pump passes (it was 32 records per loop turn: a replay that
    delivered nothing yet kept its short first step, 1,250 passes here)."""
    fill(txserver, "other", 40_000, 11)
    fill(txserver, "want", 5, 12)
    fill(txserver, "other", 100, 11)
    wait_durable(txserver)
    journal = txserver.server.journal
    assert journal is not None
    assert len(journal.segments()) == 1  # no segment is passed: the block path skips them
    counters = txserver.server.broker.counters
    before = counters["replay_yields"]
    got = replay(txserver.uri("tcp", "json"), "want", "[0:0|1|]")
    assert got == expected(journal, "want")
    assert [p for _, p in got] == [b'{"n":%d}' % n for n in range(5)]
    assert counters["replay_yields"] - before <= 10  # 40k / 10k per pass, and slack


def test_a_replay_passes_journal_files_without_its_topic(small_segments: ServerThread) -> None:
    """Files of other topics before, between and after the topic's: the replay reads only the
    files that hold it (counted bytes), and delivers what the full scan finds, in order."""
    server = small_segments
    fill(server, "other", 30_000, 11)
    fill(server, "want", 3_000, 12)
    fill(server, "other", 30_000, 11)
    fill(server, "want", 3_000, 12)
    fill(server, "other", 10_000, 11)
    wait_durable(server)
    journal = server.server.journal
    assert journal is not None
    segments = journal.segments()
    assert len(segments) > 20
    want = expected(journal, "want")
    assert len(want) == 6_000
    uri = server.uri("tcp", "json")
    for bookmark in ("[0:0|1|]", "0", f"({want[2999][0]}:0|1|]"):
        before = journal.counters()
        got = replay(uri, "want", bookmark)
        after = journal.counters()
        if bookmark.startswith("("):  # after the first run: the second run only
            assert got == want[3000:]
        else:
            assert got == want
        # about 3 of the ~40 files hold each run (and share it with other records): reading
        # the whole log would be ~13 MB; at most 8 files of 128 KB here
        assert after["read_bytes"] - before["read_bytes"] <= 8 * 128 * 1024
        assert after["skipped_segments"] > before["skipped_segments"]


def test_a_recovered_journal_is_read_whole_with_the_same_result(tmp_path: Path) -> None:
    """After a restart the files' topics are unknown: nothing is passed, the result is the
    same (and a new file written since is known again)."""
    config = small_files(tmp_path)
    with ServerThread(config, fsync="never") as server:
        fill(server, "other", 10_000, 11)
        fill(server, "want", 1_000, 12)
        wait_durable(server)
    with ServerThread(config, fsync="never") as server:
        journal = server.server.journal
        assert journal is not None
        want = expected(journal, "want")
        before = journal.counters()
        got = replay(server.uri("tcp", "json"), "want", "[0:0|1|]")
        after = journal.counters()
        assert got == want and len(want) == 1_000
        assert after["skipped_segments"] == before["skipped_segments"]


def test_a_file_of_many_topics_is_read_whole(tmp_path: Path) -> None:
    """A journal file written to more than MAX_SEGMENT_TOPICS topics forgets them (memory
    stays bounded): no replay passes it; a file of few topics is passed."""
    with Journal(tmp_path / "j", fsync="never", journal_size=64 * 1024) as journal:
        many = [(k + 1, f"t{k}", b"{}") for k in range(MAX_SEGMENT_TOPICS + 1)]
        journal.append_many(11, "p", many, {"mt": "json"})
        after_many = journal.last_index + 1
        journal.append_many(12, "p", [(k + 1, "few", b"{}") for k in range(2000)], {"mt": "json"})
        assert len(journal.segments()) >= 3
        assert journal.next_for_topic(1, "absent") == 1  # unknown: read
        files = [s.first_index for s in journal.segments()]
        beyond = [f for f in files if f > after_many]
        assert beyond  # a file holding "few" only: passed, up to the log's end
        assert journal.next_for_topic(beyond[0], "absent") == journal.last_index + 1
        assert journal.next_for_topic(beyond[0], "few") == beyond[0]
        got = [
            r.index
            for i in range(1, journal.last_index + 1, 500)
            for r in journal.read(i, max_records=500)
            if r.topic == "t5"
        ]
        assert got == [6]
