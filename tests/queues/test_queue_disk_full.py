"""Issue #32, a full disk under a queue's metadata files (``FileBackedMetadata``'s
``.queue.cache`` and the ``queues.ack`` points), with a real server process.

Both files live in the journal directory, and the journal's segment files are not reserved
space: on one full filesystem the journal's own writes fail first (``tests/txlog/
test_journal_disk_full.py``), and a queue's files are only rewritten once everything journaled
is durable, so they are not even tried. What is left to prove is what a failed rewrite does.
The test makes exactly those writes land on a full disk: the temporary files they are written
to (``<cache>.tmp`` then renamed over the file) are bind mounts of files on a full tmpfs the
test mounts (skipped with the reason where it may not), while the journal stays writable. Each
store's condition is reported once in the log and in ``/amps/instance/storage`` (it was a
traceback every second), the old files stand, they are written again by themselves once the
disk is back (the mounts removed), and after a ``kill -9`` every message acknowledged to its
publisher and not acked by a consumer comes back exactly once, in order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from _queue_support import QUEUE_XML, publish_durably
from test_queue_durability import RawConsumer
from test_queue_file_backed import consume_rest

from ampsclient_server_stub.harness import ServerProcess, free_port
from ampsclient_server_stub.testing import wait_for
from tests.admin._support import get_json
from tests.stores.test_disk_full import fill, on_full_disk, small_filesystem

pytestmark = pytest.mark.integration

CACHE = "Q.work.json.queue.cache"


def lines(server: ServerProcess, text: str) -> int:
    return sum(text in line for line in list(server.stderr_lines))


def logged_once(node: ServerProcess, text: str) -> bool:
    """``text`` is in the log exactly once (waiting until the reader thread has it)."""
    wait_for(lambda: lines(node, text) >= 1, timeout=10, what=text)
    return lines(node, text) == 1


def failed(admin: int, store: str) -> int:
    found: int = conditions(admin).get(store, {}).get("failed_writes", 0)
    return found


def conditions(admin: int) -> dict[str, Any]:
    found = get_json(admin, "/amps/instance/storage")["conditions"]
    return {c["id"]: c for c in found} if isinstance(found, list) else dict(found)


def test_full_disk_under_the_queue_files_is_reported_once_and_written_again(
    tmp_path: Path,
) -> None:
    admin = free_port()
    xml = QUEUE_XML.replace(
        "<MaxPerSubscriptionBacklog>",
        "<FileBackedMetadata>enabled</FileBackedMetadata><MaxPerSubscriptionBacklog>",
    ).replace("<AMPSConfig>", f"<AMPSConfig><Admin><InetAddr>127.0.0.1:{admin}</InetAddr></Admin>")
    config = tmp_path / "Q.xml"
    config.write_text(xml)
    journal = tmp_path / "data" / "journal"
    with small_filesystem(tmp_path / "full", "1m") as full:
        for n in range(2):
            (full / f"f{n}").touch()
        fill(full)
        server = ServerProcess(
            data_dir=tmp_path / "data", config=config, name="Q", log_level="INFO"
        ).start()
        try:
            publish_durably(server, 0, 40)  # before
            c = RawConsumer(server, "worker")
            c.subscribe(10)
            c.ack_durably([bm for bm, _ in c.take(10)[:5]])  # 0..4 done
            wait_for((journal / CACHE).exists, timeout=10, what="the queue.cache file")
            wait_for((journal / "Q.queues.ack").exists, timeout=10, what="the queues.ack file")
            store = "queue/work/json"
            with on_full_disk(full, journal / "Q.work.json.queue.tmp", journal / "Q.queues.tmp"):
                publish_durably(server, 40, 40)  # during
                k, n = 5, 80
                deadline = time.monotonic() + 30
                while not (  # the files are due again with every ack: until both failed 3 times
                    failed(admin, store) >= 3 and failed(admin, "queues/ack") >= 3
                ):
                    assert time.monotonic() < deadline, f"no failed writes: {conditions(admin)}"
                    c.ack_durably([c.take(k + 1)[k][0]])
                    publish_durably(server, n, 1)
                    k, n = k + 1, n + 1
                during = conditions(admin)
                assert during[store]["disk_full"] is True
                assert during["queues/ack"]["disk_full"] is True
                assert logged_once(server, f"storage: {store} cannot be written")
                assert logged_once(server, "storage: queues/ack cannot be written")
                assert lines(server, "Traceback") == 0
            deadline = time.monotonic() + 30
            while conditions(admin):  # space is back: written again at the next due writes
                assert time.monotonic() < deadline, f"still failing: {conditions(admin)}"
                c.ack_durably([c.take(k + 1)[k][0]])
                publish_durably(server, n, 1)
                k, n = k + 1, n + 1
            assert logged_once(server, f"storage: {store} is written again")
            assert logged_once(server, "storage: queues/ack is written again")
            c.close()
            publish_durably(server, n, 20)  # after
            server.kill()  # kill -9
            server.start()
            assert lines(server, f"from {CACHE}") == 1  # the file read back, not damaged
            consume_rest(server, list(range(k, n + 20)))
        finally:
            server.kill()
