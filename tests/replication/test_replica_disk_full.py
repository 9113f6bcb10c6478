"""Issue #32, a full disk on the downstream instance of a replicated pair, with real server
processes: A replicates to B synchronously; B's journal directory (its transaction log and
what replication keeps there, ``B.replication-holds.json``) is a size-limited tmpfs the test
mounts (skipped with the reason where it may not) and fills mid-run.

While B cannot write, the publisher's persisted acks from A wait (a sync destination has not
acknowledged), B reports the condition once in its log and in ``/amps/instance/storage``
(it logged a traceback every 0.1 s), a record B could not journal is never acknowledged to A
(B closes the link instead; A sends it again); once space returns everything resumes by
itself and both journals hold every message exactly once, in order."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _replication_support import wait_for

from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster, ClusterNode
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.replication.holds import hold_file_name
from tests.admin._support import get_json
from tests.stores.test_disk_full import fill, on_full_disk, small_filesystem

pytestmark = pytest.mark.integration

PAD = "x" * 200


def ns(node: ClusterNode) -> list[int]:
    """The ``n`` of every record of ``node``'s journal, in journal order."""
    return [json.loads(r.payload)["n"] for r in node.journal_records()]


def lines(node: ClusterNode, text: str) -> int:
    return sum(text in line for line in node.log_lines())


def logged_once(node: ClusterNode, text: str) -> bool:
    """``text`` is in the log exactly once (waiting until the reader thread has it)."""
    wait_for(lambda: lines(node, text) >= 1, 10, text)
    return lines(node, text) == 1


def conditions(admin: int) -> dict[str, Any]:
    found = get_json(admin, "/amps/instance/storage")["conditions"]
    return {c["id"]: c for c in found} if isinstance(found, list) else dict(found)


def test_a_full_disk_on_the_sync_replica_holds_acks_then_resumes(tmp_path: Path) -> None:
    admin = free_port()
    cluster = Cluster(tmp_path, journal_size="1MB")
    a = cluster.add("A")
    b = cluster.add("B", extra_xml=f"  <Admin><InetAddr>127.0.0.1:{admin}</InetAddr></Admin>")
    cluster.replicate(a, b, sync=True)
    cluster.replicate(b, a, sync=False)  # the way back the connection-time validation asks
    b.journal_dir.parent.mkdir(parents=True, exist_ok=True)
    with small_filesystem(b.journal_dir, "24m") as fs, cluster:
        cluster.start()
        cluster.wait_streaming()
        pub = HAClient("disk-full-pub")
        pub.get_server_chooser().add(a.uri())
        pub.connect_and_logon()
        try:
            for n in range(500):  # before
                pub.publish("orders", json.dumps({"n": n, "pad": PAD}))
            pub.publish_flush(30_000)
            filler = fill(fs)
            for n in range(500, 3000):  # during: more than B's append buffer holds
                pub.publish("orders", json.dumps({"n": n, "pad": PAD}))
            flushed = threading.Event()

            def flush() -> None:
                pub.publish_flush(60_000)
                flushed.set()

            flusher = threading.Thread(target=flush, daemon=True)
            flusher.start()
            wait_for(
                lambda: conditions(admin).get("journal", {}).get("failed_writes", 0) >= 5,
                30,
                "B to fail five writes",
            )
            assert conditions(admin)["journal"]["disk_full"] is True
            assert not flushed.is_set()  # the acks wait for B
            assert logged_once(b, "storage: journal cannot be written")
            assert lines(b, "Traceback") == 0
            filler.unlink()  # space returns
            flusher.join(60)
            assert flushed.is_set(), "the acks did not resume"
            for n in range(3000, 3500):  # after
                pub.publish("orders", json.dumps({"n": n, "pad": PAD}))
            pub.publish_flush(30_000)
        finally:
            pub.close()
        cluster.wait_caught_up()
        wait_for(lambda: not conditions(admin), 30, "B's conditions to end")
        wait_for(
            lambda: (
                lines(b, "storage: journal is written again")
                == lines(b, "storage: journal cannot be written")
            ),
            10,
            "a line for every condition that ended",
        )
        for node in (a, b):
            got = ns(node)
            assert sorted(got) == list(range(3500)), node.name
            assert set(Counter(got).values()) == {1}, node.name  # each exactly once
        assert ns(b) == ns(a)  # the same order


def test_replication_holds_on_a_full_disk_are_reported_once_and_saved_again(
    tmp_path: Path,
) -> None:
    """What replication writes of its own: ``A.replication-holds.json``, the first journal
    index each destination may still need, rewritten as B acknowledges. Its temporary file is
    a bind mount of a file on a full tmpfs (the journal stays writable): the condition is
    reported once (it was a warning per save), the file is saved again as soon as the disk
    is back (a failed save used to wait for the hold's next move), and after a ``kill -9``
    of A, B still receives every message exactly once."""
    admin = free_port()
    cluster = Cluster(tmp_path, journal_size="1MB")
    a = cluster.add("A", extra_xml=f"  <Admin><InetAddr>127.0.0.1:{admin}</InetAddr></Admin>")
    b = cluster.add("B")
    cluster.replicate(a, b, sync=False)
    cluster.replicate(b, a, sync=False)
    holds = a.journal_dir / hold_file_name("A")
    with small_filesystem(tmp_path / "full", "1m") as full, cluster:
        (full / "f0").touch()
        fill(full)
        cluster.start()
        cluster.wait_streaming()
        publish(a, 0, 200)
        cluster.wait_caught_up()
        wait_for(holds.exists, 10, "the holds file")
        with on_full_disk(full, holds.with_name(holds.name + ".tmp")):
            n = 200
            deadline = time.monotonic() + 30
            while conditions(admin).get("replication/holds", {}).get("failed_writes", 0) < 3:
                assert time.monotonic() < deadline, conditions(admin)
                publish(a, n, n + 20)  # B acknowledges: the hold moves, a save is due
                cluster.wait_caught_up()
                n += 20
            assert conditions(admin)["replication/holds"]["disk_full"] is True
            assert logged_once(a, "storage: replication/holds cannot be written")
            stale = json.loads(holds.read_text())["holds"]["B"]
        wait_for(lambda: not conditions(admin), 30, "the holds to be saved again")
        assert logged_once(a, "storage: replication/holds is written again")
        assert json.loads(holds.read_text())["holds"]["B"] > stale
        a.kill()
        a.start()
        publish(a, n, n + 100)
        wait_for(lambda: len(ns(b)) >= n + 100, 30, "B to receive every message")
        got = ns(b)
        assert sorted(got) == list(range(n + 100))
        assert set(Counter(got).values()) == {1}


def publish(node: ClusterNode, start: int, stop: int) -> None:
    with HAClient(f"pub-{start}") as pub:
        pub.get_server_chooser().add(node.uri())
        pub.connect_and_logon()
        for n in range(start, stop):
            pub.publish("orders", json.dumps({"n": n, "pad": PAD}))
        pub.publish_flush(30_000)
