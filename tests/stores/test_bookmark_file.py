"""The official file-backed bookmark stores (``MMapBookmarkStore``, ``RingBookmarkStore``),
``RecoveryPoint()`` as the empty point, and the official adapter arguments; a subscriber
process killed with ``kill -9`` and restarted against the real server loses nothing and
sends the redelivered messages to its duplicate handler."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from ampsclient import Client
from ampsclient.exceptions import UsageError
from ampsclient.stores import (
    ConflatingRecoveryPointAdapter,
    MemoryBookmarkStore,
    MMapBookmarkStore,
    RecoveryPoint,
    RingBookmarkStore,
)
from ampsclient.stores.recovery import FileRecoveryPointAdapter
from ampsclient_server_stub.harness import ServerProcess


class Msg:
    """A delivered message as a bookmark store reads it."""

    def __init__(self, sub_id: str, bookmark: str) -> None:
        self.sub_id, self.bookmark = sub_id, bookmark

    def get_sub_id(self) -> str:
        return self.sub_id

    def get_bookmark(self) -> str:
        return self.bookmark


class ListAdapter:
    """A plain Python adapter speaking the official ``next()`` protocol."""

    def __init__(self, points: list[RecoveryPoint]) -> None:
        self.points = list(points)
        self.updates: list[tuple[str, str]] = []
        self.closed = False

    def next(self) -> RecoveryPoint:
        return self.points.pop(0) if self.points else RecoveryPoint()

    def update(self, point: RecoveryPoint) -> None:
        self.updates.append((point.get_sub_id(), point.get_bookmark()))

    def purge(self, sub_id: str | None = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_recovery_point_with_no_arguments_is_the_empty_point() -> None:
    empty = RecoveryPoint()
    assert not empty and empty.get_sub_id() == "" and empty.get_bookmark() == ""
    assert RecoveryPoint("s", "1|2|") and RecoveryPoint(sub_id="s", bookmark="1|2|").sub_id == "s"
    adapter = ListAdapter([RecoveryPoint("a", "7|3|"), RecoveryPoint("b", "8|5|")])
    store = MemoryBookmarkStore(adapter)  # next() until RecoveryPoint()
    assert store.get_most_recent("a") == "7|3|" and store.get_most_recent("b") == "8|5|"
    assert store.is_discarded(Msg("a", "7|2|")) and not store.is_discarded(Msg("a", "7|4|"))


def test_conflating_adapter_official_keywords(tmp_path: Path) -> None:
    delegate = ListAdapter([])
    adapter = ConflatingRecoveryPointAdapter(
        delegate=delegate, update_threshold=2, timeout_millis=60_000, update_interval_millis=10
    )
    adapter.update(RecoveryPoint("s", "1|1|"))
    assert delegate.updates == []
    adapter.update(RecoveryPoint("s", "1|2|"))  # the threshold: forwarded
    adapter.close()
    assert delegate.updates[-1] == ("s", "1|2|") and delegate.closed


@pytest.mark.parametrize("kind", ["mmap", "ring"])
def test_points_survive_a_reopen(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "bm.store"

    def open_store() -> MemoryBookmarkStore:
        return MMapBookmarkStore(path) if kind == "mmap" else RingBookmarkStore(str(path))

    store = open_store()
    for seq in range(1, 6):
        store.log(Msg("s1", f"11|{seq}|"))
    for seq in (1, 2, 3):
        store.discard("s1", seq)  # official discard(subid, seq)
    store.discard_message(Msg("s1", "11|5|"))  # 4 still pending: the point stays at 3
    assert store.get_most_recent("s1") == "11|3|"
    store.set_server_version("5.3.5.1")
    with pytest.raises(UsageError, match="set_resize_handler"):
        store.set_resize_handler(lambda s, size: True)
    store.close()
    again = open_store()
    assert again.get_most_recent("s1") == "11|3|"
    assert again.is_discarded(Msg("s1", "11|3|")) and not again.is_discarded(Msg("s1", "11|4|"))
    again.purge_sub_id("s1")
    assert again.get_most_recent("s1") == "0"
    again.close()
    assert open_store().get_most_recent("s1") == "0"


def test_mmap_store_prune_adapter_and_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "bm.store"
    side = ListAdapter([RecoveryPoint("only-in-adapter", "9|9|")])
    store = MMapBookmarkStore(str(path), False, side)
    assert store.get_most_recent("only-in-adapter") == "9|9|"
    for seq in range(1, 50):
        store.log(Msg("s", f"3|{seq}|"))
        store.discard_message(Msg("s", f"3|{seq}|"))
    assert side.updates[-1] == ("s", "3|49|")  # the adapter gets every update too
    lines = len(path.read_bytes().splitlines())
    store.prune(str(tmp_path / "prune.tmp"))
    assert len(path.read_bytes().splitlines()) < lines and not (tmp_path / "prune.tmp").exists()
    store.close()
    assert side.closed
    stamped = MMapBookmarkStore(path, use_last_modified_time=True)
    first, stamp = stamped.get_most_recent("s").split(",")
    assert first == "3|49|" and stamp[:8].isdigit() and stamp[8] == "T"
    stamped.close()
    assert FileRecoveryPointAdapter(path).get("s") == "3|49|"


SUBSCRIBER = textwrap.dedent(
    """
    import json, os, sys, threading
    from ampsclient.ha import FixedDelayStrategy
    from ampsclient.stores import MMapBookmarkStore, RingBookmarkStore
    from ampsclient.sync import HAClient

    uri, path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    store = MMapBookmarkStore(path) if kind == "mmap" else RingBookmarkStore(path)
    finished = threading.Event()
    with HAClient("bm-sub", bookmark_store=store,
                  reconnect_delay_strategy=FixedDelayStrategy(100)) as client:
        client.set_duplicate_message_handler(
            lambda m: os.write(1, ("dup %s\\n" % m.get_bookmark()).encode()))

        def on_message(m):
            body = json.loads(m.get_data())
            line = "msg %s %s %d\\n" % (m.get_bookmark(), body["p"], body["n"])
            os.write(1, line.encode())  # one write(): a kill never leaves half a line
            client.discard(m)
            if body["p"] == "stop":  # published after the kills: last in the journal
                finished.set()

        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        client.bookmark_subscribe(on_message, "orders", "recent", sub_id="s1")
        assert finished.wait(40), "the end markers did not arrive"
    print("exit", flush=True)
    """
)


def _read_run(proc: subprocess.Popen[str], stop_after: int | None) -> list[list[str]]:
    """The subscriber's output lines, split; kill -9 it after ``stop_after`` messages (then
    read on to the end: what it printed before it died is still in the pipe)."""
    assert proc.stdout is not None
    lines: list[list[str]] = []
    count = 0
    for line in proc.stdout:
        lines.append(line.split())
        if lines[-1][0] == "msg":
            count += 1
            if count == stop_after:
                os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return lines


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["mmap", "ring"])
def test_subscriber_killed_with_9_resumes_without_loss(tmp_path: Path, kind: str) -> None:
    """Two publishers interleaved; the subscriber is killed with -9 twice mid-replay and
    restarted: every message is processed, in publisher order, at most once more per kill
    (the one being handled when the kill came); every redelivered message the store knew
    went to the duplicate handler, and it was one processed by an earlier run."""
    per_publisher = 1500
    script = tmp_path / "subscriber.py"
    script.write_text(SUBSCRIBER)
    path = str(tmp_path / "sub.bookmarks")
    with ServerProcess(data_dir=tmp_path / "server") as server:
        with Client("pub-A") as a, Client("pub-B") as b:
            for c in (a, b):
                c.connect(server.uri())
                c.logon(5000)
            for n in range(per_publisher):
                a.publish("orders", json.dumps({"p": "A", "n": n}))
                b.publish("orders", json.dumps({"p": "B", "n": n}))
            a.flush(10_000)
            b.flush(10_000)
        runs = []
        for stop_after in (700, 900, None):
            if stop_after is None:
                with Client("pub-stop") as c:  # the final run ends when it gets this
                    c.connect(server.uri())
                    c.logon(5000)
                    c.publish("orders", json.dumps({"p": "stop", "n": 0}))
                    c.flush(10_000)
            proc = subprocess.Popen(
                [sys.executable, str(script), server.uri(), path, kind],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            runs.append(_read_run(proc, stop_after))
            assert proc.stderr is not None
            errors = proc.stderr.read()
            counts = [sum(1 for f in run if f[0] == "msg") for run in runs]
            if stop_after is not None:  # killed mid-stream
                assert proc.returncode == -signal.SIGKILL, (counts, errors[-3000:])
            else:
                assert proc.returncode == 0, (counts, errors[-3000:])
    assert runs[-1][-1] == ["exit"]
    processed: list[tuple[str, int]] = []
    bookmarks: dict[str, tuple[str, int]] = {}
    duplicates = 0
    for run in runs:
        earlier = set(bookmarks)
        last = {"A": -1, "B": -1}
        for fields in run:
            if fields[0] == "msg" and fields[2] == "stop":
                assert run is runs[-1] and fields is run[-2]  # processed last, once
            elif fields[0] == "msg":
                assert len(fields) == 4, fields
                _, bookmark, publisher, n = fields
                assert int(n) > last[publisher], "publisher order kept within a run"
                last[publisher] = int(n)
                processed.append((publisher, int(n)))
                bookmarks[bookmark] = (publisher, int(n))
            elif fields[0] == "dup":
                duplicates += 1
                assert fields[1] in earlier, "a duplicate is a message an earlier run processed"
    expected = {(p, n) for p in "AB" for n in range(per_publisher)}
    assert set(processed) == expected  # nothing lost
    again = [k for k, v in Counter(processed).items() if v > 1]
    assert len(again) <= 2, again  # at most the one in the handler at each kill
    print(f"{kind}: {duplicates} redelivered messages went to the duplicate handler")
    assert duplicates >= 1


def test_bookmark_store_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``python`` block of docs/bookmark-stores.md runs."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "bookmark-stores.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert any("MMapBookmarkStore" in block for block in blocks)
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "docs/bookmark-stores.md", "exec"), {"__name__": "__docs__"})


def test_persisted_index_and_memory_store_resize_refusal() -> None:
    """``persisted_index(sub_id, n)`` is ``persisted`` of the bookmark ``log`` numbered ``n``;
    once everything is discarded, that persisted point becomes the recovery point."""
    store = MemoryBookmarkStore()
    numbers = [store.log(Msg("s", f"5|{seq}|")) for seq in (1, 2, 3)]
    assert store.persisted_index("s", numbers[2]) is True
    assert store.persisted_index("s", 999) is False and store.persisted_index("x", 1) is False
    for seq in (1, 2, 3):
        store.discard_message(Msg("s", f"5|{seq}|"))
    assert store.get_most_recent("s") == "5|3|"
    with pytest.raises(UsageError, match=r"MemoryBookmarkStore\.set_resize_handler"):
        store.set_resize_handler(lambda s, size: True)
