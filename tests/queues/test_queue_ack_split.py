"""An acknowledgement's bookmark list is read in one split when it is in the usual form
(``1|1|,1|2|``: no whitespace, no empty item), and journaled as it came when every bookmark
in it was removed: the C ``split_bookmarks`` against its twin and ``split_list``, and the
ack records a server writes for lists in every form."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _queue_support import IMPLS, Consumer, implementation, publish, start
from hypothesis import given, settings, strategies as st

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.engine.wire import split_list
from ampsclient_server_stub.queues import acking, speedups
from ampsclient_server_stub.queues.config import QueueConfig


@pytest.mark.parametrize("name", IMPLS)
def test_the_usual_form_is_split_and_every_other_is_left_to_split_list(name: str) -> None:
    split = implementation(name, speedups.split_bookmarks, acking.split_bookmarks)
    assert split("1|1|,1|2|") == ["1|1|", "1|2|"]
    assert split("1|1|") == ["1|1|"]
    assert split("ü|1|,é|2|,\U0001f600") == ["ü|1|", "é|2|", "\U0001f600"]
    assert split("a\x00b,\x1b,!") == ["a\x00b", "\x1b", "!"]  # control characters, not spaces
    for space in "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ":
        assert split(f"1|1|,a{space}b") is None
        assert split(f"ü,a{space}b") is None
    for other in [
        "",
        ",",
        ",1|1|",
        "1|1|,",
        "1|1|,,1|2|",
        " 1|1|",
        "1|1| ",
        "1|1|, 1|2|",
        "1|1|\t,1|2|",
        "a\nb",
        "a\x1cb",  # (str.isspace: the ASCII separators count)
        "a\x85b",  # NEL
        "a\u3000b",  # ideographic space
    ]:
        assert split(other) is None, other
    for not_text in [None, 5, b"1|1|", ["1|1|"], type("S", (str,), {})("1|1|")]:
        assert split(not_text) is None


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("1|,ab ü\t\u3000\x1c")), max_size=30))
def test_a_split_is_what_split_list_makes(value: str) -> None:
    for split in [acking.split_bookmarks, speedups.split_bookmarks]:
        if split is None:
            continue
        got = split(value)
        assert got is None or got == split_list(value)
    if speedups.split_bookmarks is not None:
        assert speedups.split_bookmarks(value) == acking.split_bookmarks(value)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    server = start(
        tmp_path,
        QueueConfig(
            name="work", message_type="json", leasing="strict", max_per_subscription_backlog=10
        ),
    )
    yield server
    server.stop()


def ack_records(server: ServerThread) -> list[str]:
    """The ``bm`` of each queue acknowledgement record in the journal, in order."""
    journal = server.server.journal
    assert journal is not None
    records: list[Any] = server.call(lambda: journal.read(1, max_records=100_000))
    return [r.fields["bm"] for r in records if r.command == "sow_delete" and r.topic == "work"]


def test_the_journal_gets_what_was_removed_in_every_form(server: ServerThread) -> None:
    a, b = Consumer(server, "a"), Consumer(server, "b")
    a.subscribe("work", o="max_backlog=3")
    publish(server, "work", [{"n": i} for i in range(3)])
    b.subscribe("work", o="max_backlog=3")
    publish(server, "work", [{"n": i} for i in range(3, 6)])
    mine = [hdr["bm"] for hdr, _ in a.sync()]
    theirs = [hdr["bm"] for hdr, _ in b.sync()]
    assert len(mine) == len(theirs) == 3
    # the usual form, all removed: journaled as it came
    a.ack("work", f"{mine[0]},{mine[1]}", a="processed")
    # strict leasing: b's lease is not a's to end; the record holds a's bookmark alone
    a.ack("work", f"{theirs[0]},{mine[2]}", a="processed")
    # another form (spaces, an empty item): the bookmarks as split_list reads them
    b.ack("work", f" {theirs[1]} ,,{theirs[2]}", a="processed")
    assert ack_records(server) == [
        f"{mine[0]},{mine[1]}",
        mine[2],
        f"{theirs[1]},{theirs[2]}",
    ]
    b.ack("work", theirs[0], key="bm", a="processed")
    assert ack_records(server)[-1] == theirs[0]
    assert a.sync() == [] and b.sync() == []  # every message acknowledged, none redelivered
    a.close()
    b.close()
