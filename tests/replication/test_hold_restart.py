"""The replication hold survives a restart (issue #17): a journal file a destination has not
acknowledged is kept after the source instance is killed (``kill -9``) and restarted, even
when journal management asks to remove it; the destination, back, receives everything.

Processes: two reference servers (a :class:`Cluster`), the source with small journal files
and an admin port whose ``journal/remove`` action is the retention that would drop them.
"""

from __future__ import annotations

import http.client
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _replication_support import wait_for

from ampsclient.sync import HAClient
from ampsclient_server_stub.cluster import Cluster, ClusterNode
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.replication.holds import hold_file_name

pytestmark = pytest.mark.integration

PAD = "x" * 80
"""About 100 bytes a message: 600 of them fill several 16 KB journal files."""


def publish(node: ClusterNode, start: int, stop: int) -> None:
    with HAClient(f"pub-{start}") as pub:
        pub.get_server_chooser().add(node.uri())
        pub.connect_and_logon()
        for n in range(start, stop):
            pub.publish("orders", json.dumps({"n": n, "pad": PAD}))
        pub.publish_flush(30_000)


def remove_journal_files(admin_port: int) -> list[str]:
    """The admin action ``journal/remove`` with age 0: every sealed file no pin needs."""
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=30)
    try:
        conn.request("GET", "/amps/administrator")
        token = json.loads(conn.getresponse().read())["token"]  # actions carry the admin token
        conn.request(
            "POST",
            "/amps/administrator/journal/remove?age=0s",
            headers={"X-AMPS-Admin-Token": token},
        )
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, body
        result: list[str] = json.loads(body)["result"]
        return result
    finally:
        conn.close()


def ns_by_index(node: ClusterNode) -> dict[int, int]:
    """Journal index -> ``n`` of every record of ``node``'s journal."""
    return {r.index: json.loads(r.payload)["n"] for r in node.journal_records()}


def journal_files(node: ClusterNode) -> set[str]:
    return {p.name for p in node.journal_dir.iterdir() if ".journal" in p.name}


def test_unacknowledged_files_survive_kill_9_and_retention(tmp_path: Path) -> None:
    admin_port = free_port()
    cluster = Cluster(tmp_path, journal_size="16KB")
    a = cluster.add("A", extra_xml=f"  <Admin><InetAddr>127.0.0.1:{admin_port}</InetAddr></Admin>")
    b = cluster.add("B")
    cluster.replicate(a, b, sync=False)
    cluster.replicate(b, a, sync=False)  # the way back the connection-time validation asks
    with cluster:
        cluster.start()
        cluster.wait_streaming()
        publish(a, 0, 50)
        cluster.wait_caught_up()
        b.kill()
        publish(a, 50, 650)  # B is down: it acknowledges none of these

        index_of = {n: i for i, n in ns_by_index(a).items()}
        first_missing = index_of[50]
        files_before = journal_files(a)
        assert len(files_before) >= 4, files_before  # several sealed files B still needs
        saved: dict[str, Any] = json.loads((a.journal_dir / hold_file_name("A")).read_text())
        assert 0 < saved["holds"]["B"] <= first_missing

        a.kill()  # kill -9: the in-memory pins are gone
        a.start()
        status = a.destination_status("B")
        assert status["state"] != "streaming"
        assert status["hold"] <= first_missing, status

        removed = remove_journal_files(admin_port)
        kept = ns_by_index(a)
        assert min(kept) <= first_missing, (removed, min(kept))
        assert set(range(50, 650)) <= set(kept.values())
        for name in removed:  # only files entirely before the hold may go
            assert name not in journal_files(a)

        b.start()
        wait_for(lambda: len(ns_by_index(b)) >= 650, 30, "B to receive every message")
        counts = Counter(ns_by_index(b).values())
        assert sorted(counts) == list(range(650))
        assert set(counts.values()) == {1}, "each message exactly once on B"

        # the marker that retention was only held back by B: once B has acknowledged, the
        # same action removes the files it kept
        wait_for(lambda: a.destination_status("B")["hold"] > index_of[649], 30, "B's ack")
        removed_after = remove_journal_files(admin_port)
        assert removed_after, "nothing held the files any more"
        assert min(ns_by_index(a)) > first_missing
