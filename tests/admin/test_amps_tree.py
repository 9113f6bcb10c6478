"""The statistics tree as the AMPS monitoring guide lays it out (issue 33): every documented
path walked against a running server with traffic (clients, a SOW topic, a queue), in AMPS'
JSON form (``/amps.json``, ``<node>.json``), its XML form and the bare form; a monitoring tool
written for AMPS (``amps_monitor.py``) run unchanged; the ``/proc`` readers on real files."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Message
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.admin.system import HostSampler, parse_cpu_times
from ampsclient_server_stub.admin.tree import Entries, amps_document, amps_form, find, to_xml
from ampsclient_server_stub.config import AdminConfig, default_config
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import wait_for

from ._support import admin_port, get_json, request

pytestmark = pytest.mark.integration

N = 20
MONITOR = Path(__file__).with_name("amps_monitor.py")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    config = dataclasses.replace(
        default_config(tcp_port=0, ws_port=0, data_dir=tmp_path),
        queues=(QueueConfig(name="work", message_type="json", lease_period=60.0),),
        admin=AdminConfig(host="127.0.0.1", port=0),
    )
    thread = ServerThread(config, fsync="never").start()
    try:
        yield thread
    finally:
        thread.stop()


def by_id(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    assert isinstance(entries, list)
    assert all(isinstance(e, dict) and isinstance(e["id"], str) for e in entries)
    return {e["id"]: e for e in entries}


def amps(port: int) -> dict[str, Any]:
    document = get_json(port, "/amps.json")
    assert set(document) == {"amps"}
    tree: dict[str, Any] = document["amps"]
    return tree


def is_percent(value: Any) -> bool:
    return isinstance(value, float | int) and 0.0 <= value <= 100.0


def with_traffic(
    server: ServerThread, port: int, clients: list[Client]
) -> tuple[dict[str, int], list[Message]]:
    """Clients ``pub`` and ``sub`` (added to ``clients``); N publishes to ``orders`` (all
    delivered to ``sub``), 4 to the SOW topic (3 inserts, 1 update) and one of its records
    deleted, 2 publishes to the queue. The figures read before the traffic, and the
    deliveries."""
    pub, sub = Client("pub"), Client("sub")
    clients += (pub, sub)
    got: list[Message] = []
    for client in (pub, sub):
        client.connect(server.uri())
        client.logon()
    sub.subscribe(got.append, "orders")
    sub.flush()
    instance = amps(port)["instance"]
    clients = by_id(instance["clients"])
    all_ = by_id(instance["processors"])["all"]
    before = {
        "pub_in": clients["pub"]["messages_in"],
        "sub_out": clients["sub"]["messages_out"],
        "received": all_["messages_received"],
        "matched": all_["matches_found"],
    }
    for n in range(N):
        pub.publish("orders", json.dumps({"n": n}))
    for client_name in ("a", "b", "c", "a"):
        doc = json.dumps({"clientName": client_name, "subId": "1", "bookmark": "x"})
        pub.publish("/ADMIN/bookmark_store", doc)
    deleted = pub.sow_delete("/ADMIN/bookmark_store", "/clientName = 'b'", 5000)
    assert deleted.get_records_deleted() == 1
    for n in range(2):
        pub.publish("work", json.dumps({"job": n}))
    pub.flush()
    wait_for(lambda: len(got) == N, what=f"{N} deliveries")
    return before, got


def test_documented_paths_with_traffic(server: ServerThread) -> None:
    port = admin_port(server)
    opened: list[Client] = []
    try:
        traffic_from = time.monotonic()
        before, _ = with_traffic(server, port, opened)
        # interval figures need two samples (one per <Interval>, 1 s)
        wait_for(
            lambda: "idle_percent" in by_id(amps(port)["host"]["cpus"])["all"],
            what="a second host sample",
        )
        tree = amps(port)
        assert set(tree) >= {"host", "instance"}

        # /amps/host/cpus: the all aggregate, then each CPU (AMPS' example: "all", "cpu0"...)
        cpus = by_id(tree["host"]["cpus"])
        assert tree["host"]["cpus"][0]["id"] == "all"
        assert len(cpus) >= 2 and all(name.startswith("cpu") for name in cpus if name != "all")
        for cpu in cpus.values():
            shares = [cpu[f] for f in ("idle_percent", "iowait_percent", "system_percent")]
            shares.append(cpu["user_percent"])
            assert all(is_percent(v) for v in shares), cpu
            assert sum(shares) <= 100.01
        # /amps/host/memory
        memory = tree["host"]["memory"]
        assert isinstance(memory["total"], int) and 0 < memory["available"] <= memory["total"]
        # /amps/host/disks: the journal's file system with its free share (statvfs here too)
        disks = by_id(tree["host"]["disks"])
        journal_dir = server.server.journal.directory  # type: ignore[union-attr]
        st = os.statvfs(journal_dir)
        expected = 100 * st.f_bavail / st.f_blocks
        mounts = {d["mount_point"]: d for d in disks.values()}
        mount = next(
            m for m in sorted(mounts, key=len, reverse=True) if str(journal_dir).startswith(m)
        )
        assert abs(mounts[mount]["filesystem_free_percent"] - expected) < 1.0
        assert all(is_percent(d["filesystem_free_percent"]) for d in disks.values())
        # /amps/host/network: loopback carried our traffic
        network = by_id(tree["host"]["network"])
        assert network["lo"]["bytes_in"] > 0 and isinstance(network["lo"]["bytes_out"], int)

        instance = tree["instance"]
        # /amps/instance/clients: AMPS' field names, counts message by message
        clients = by_id(instance["clients"])
        pub, sub = clients["pub"], clients["sub"]
        assert pub["client_name"] == "pub" and pub["remote_address"].startswith("127.0.0.1:")
        # publishes, the sow_delete, the flush
        assert pub["messages_in"] == before["pub_in"] + N + 4 + 2 + 1 + 1
        assert sub["messages_out"] == before["sub_out"] + N
        for client in (pub, sub):
            for field in ("bytes_in", "bytes_out", "queue_depth_out", "queued_bytes_out"):
                assert isinstance(client[field], int) and client[field] >= 0
            for field in ("messages_in_per_sec", "messages_out_per_sec", "queue_max_latency"):
                assert isinstance(client[field], float | int)
            assert isinstance(client["connect_time"], str)
        # /amps/instance/processors: all, ingest, delivery
        processors = by_id(instance["processors"])
        assert set(processors) == {"all", "ingest", "delivery"}
        assert instance["processors"][0]["id"] == "all"
        everything = processors["all"]
        assert everything["messages_received"] == before["received"] + N + 4 + 2
        # matches: the N deliveries to sub, and the queue taking in its 2 messages
        assert everything["matches_found"] == before["matched"] + N + 2
        assert processors["delivery"]["matches_found"] == everything["matches_found"]
        assert processors["ingest"]["messages_received"] == everything["messages_received"]
        assert everything["denied_reads"] == 0 and everything["denied_writes"] == 0
        assert isinstance(everything["messages_received_per_sec"], float | int)
        # /amps/instance/sow and /amps/instance/queues
        sow = by_id(instance["sow"])["/ADMIN/bookmark_store"]
        assert sow["topic"] == "/ADMIN/bookmark_store" and sow["valid_keys"] == 2
        counts = (sow["insert_count"], sow["update_count"], sow["delete_count"])
        assert counts == (3, 1, 1)
        assert all(isinstance(sow[f"{k}s_per_sec"], float | int) for k in ("insert", "update"))
        assert isinstance(sow["deletes_per_sec"], float | int)
        queue = by_id(instance["queues"])["work"]
        assert queue["topic"] == "work" and queue["queue_depth"] == 2 and queue["backlog"] == 0
        # seconds_behind: the age of the oldest unacknowledged message, growing while it waits
        assert 0 <= queue["seconds_behind"] <= time.monotonic() - traffic_from
        wait_for(
            lambda: (
                by_id(amps(port)["instance"]["queues"])["work"]["seconds_behind"]
                > queue["seconds_behind"]
            ),
            what="the queued messages to age",
        )
        # /amps/instance/memory, /amps/instance/replication (none configured)
        assert 0 < instance["memory"]["rss"] <= instance["memory"]["vmsize"]
        assert instance["replication"] == []

        # one node in AMPS' JSON form: rooted at amps, an entry as a one-entry list with its id
        node = get_json(port, "/amps/instance/processors/all.json")
        (entry,) = node["amps"]["instance"]["processors"]
        assert entry["id"] == "all" and entry["matches_found"] == everything["matches_found"]
        leaf = get_json(port, "/amps/instance/sow/%2FADMIN%2Fbookmark_store/valid_keys.json")
        assert leaf == {
            "amps": {"instance": {"sow": [{"id": "/ADMIN/bookmark_store", "valid_keys": 2}]}}
        }
        assert "amps" in get_json(port, "/amps/host/cpus.json")
        assert get_json(port, "/amps/host/cpu/all/idle_percent") <= 100  # the guide's path
        assert isinstance(tree["host"]["name"], str) and tree["host"]["timestamp"][:2] == "20"
        # the bare form (what the dashboard reads): the same figures, collections keyed by id
        assert get_json(port, "/amps/instance/clients/sub/messages_out") == sub["messages_out"]
        assert get_json(port, "/amps/host/disks")[next(iter(disks))]["mount_point"]
        # XML where AMPS serves XML
        status, headers, body = request(port, "/amps/instance/processors/all.xml")
        assert status == 200 and headers["content-type"].startswith("application/xml")
        root = ET.fromstring(body)
        assert root.tag == "amps"
        (element,) = root.findall("instance/processors")
        assert element.get("id") == "all"
        assert int(element.findtext("matches_found") or "") == everything["matches_found"]
        status, _, body = request(port, "/amps.xml")
        assert status == 200
        cpus_xml = ET.fromstring(body).findall("host/cpus")
        assert cpus_xml[0].get("id") == "all" and cpus_xml[0].find("idle_percent") is not None
        # unknown nodes
        assert request(port, "/amps/instance/processors/nothing.json")[0] == 404
        assert request(port, "/amps/nothing.json")[0] == 404
    finally:
        for client in opened:
            client.close()


def test_a_monitoring_tool_written_for_amps_runs_unchanged(server: ServerThread) -> None:
    port = admin_port(server)
    opened: list[Client] = []
    try:
        before, _ = with_traffic(server, port, opened)
        wait_for(
            lambda: "idle_percent" in by_id(amps(port)["host"]["cpus"])["all"],
            what="a second host sample",
        )
        done = subprocess.run(
            [sys.executable, str(MONITOR), f"http://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        metrics = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
        assert float(metrics['amps_client_messages_out{client="sub"}']) == before["sub_out"] + N
        assert float(metrics["amps_processors_all_matches_found"]) == before["matched"] + N + 2
        topic = 'amps_sow_valid_keys{topic="/ADMIN/bookmark_store",message_type="json"}'
        assert float(metrics[topic]) == 2
        assert float(metrics[topic.replace("valid_keys", "update_count")]) == 1
        assert float(metrics['amps_queue_queue_depth{topic="work"}']) == 2
        assert 0 <= float(metrics["amps_host_cpu_idle_percent"]) <= 100
        assert any(k.startswith("amps_host_disk_filesystem_free_percent{") for k in metrics)
    finally:
        for client in opened:
            client.close()


def test_cpu_and_disk_figures_from_proc_files(tmp_path: Path) -> None:
    """The readers on a copy of /proc: percentages are the change between two samples."""
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "dev").write_text(
        "Inter-|   Receive\n face |bytes\n    lo: 1000 10 0 0 0 0 0 0 2000 20 1 0 0 0 0 0\n"
    )
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 250 kB\n")
    (proc / "mounts").write_text(f"/dev/vdz {tmp_path} ext4 rw 0 0\n")
    stat = "cpu  {u} 0 {s} {i} {w} 0 0 0 0 0\ncpu0 {u} 0 {s} {i} {w} 0 0 0 0 0\n"
    disk = "   8 0 vdz {r} 0 0 {rt} {wr} 0 0 {wt} 3 0 0 0 0\n"
    sampler = HostSampler(proc=proc)
    (proc / "stat").write_text(stat.format(u=100, s=50, i=800, w=50))
    (proc / "diskstats").write_text(disk.format(r=10, rt=100, wr=5, wt=50))
    sampler.sample()
    assert sampler.cpus() == {"all": {}, "cpu0": {}}  # one sample: nothing to tell yet
    (proc / "stat").write_text(stat.format(u=160, s=70, i=910, w=60))  # +60 +20 +110 +10
    (proc / "diskstats").write_text(disk.format(r=14, rt=120, wr=5, wt=50))  # 4 reads, 20 ms
    sampler.sample()
    cpu = sampler.cpus()["all"]
    assert cpu == {
        "user_percent": 30.0,
        "system_percent": 10.0,
        "idle_percent": 55.0,
        "iowait_percent": 5.0,
    }
    (vdz,) = sampler.disks().values()
    assert vdz["mount_point"] == str(tmp_path)
    assert (vdz["in_progress"], vdz["read_await"], vdz["write_await"]) == (3, 5.0, 0.0)
    assert is_percent(vdz["filesystem_free_percent"])
    assert sampler.memory() == {
        "total": 1024000,
        "free": 102400,
        "available": 256000,
        "in_use_percent": 75.0,
    }
    assert sampler.network()["lo"]["errors_out"] == 1
    assert parse_cpu_times("intr 1 2\n") == {}


def test_amps_form_of_nested_collections() -> None:
    """A collection in a collection (a client's subscriptions) keeps its name in AMPS' form;
    a node's document is rooted at amps with the path down to it."""
    subs = Entries({"s1": {"topic": "t"}})
    tree = {"instance": {"subscriptions": Entries({"watcher": subs}), "name": "n"}}
    assert amps_form(tree["instance"]["subscriptions"], "subscriptions") == [
        {"id": "watcher", "subscriptions": [{"id": "s1", "topic": "t"}]}
    ]
    path = ["amps", "instance", "subscriptions", "watcher"]
    node, steps = find(tree, path[1:])
    assert amps_document(path, node, [False, *steps]) == {
        "amps": {
            "instance": {
                "subscriptions": [{"id": "watcher", "subscriptions": [{"id": "s1", "topic": "t"}]}]
            }
        }
    }
    path = ["amps", "instance", "subscriptions", "watcher", "s1", "topic"]
    node, steps = find(tree, path[1:])
    assert amps_document(path, node, [False, *steps]) == {
        "amps": {
            "instance": {
                "subscriptions": [{"id": "watcher", "subscriptions": [{"id": "s1", "topic": "t"}]}]
            }
        }
    }
    xml = ET.fromstring(to_xml(amps_document(["amps"], tree, [False])))
    (element,) = xml.findall("instance/subscriptions/subscriptions")
    assert element.get("id") == "s1" and element.findtext("topic") == "t"
    assert xml.findtext("instance/name") == "n"
