"""/metrics is valid Prometheus text (parsed by prometheus_client's own parser) and carries the
same figures as the JSON tree."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.admin.metrics import render_metrics
from ampsclient_server_stub.testing import wait_for

from ._support import admin_port, get_json, request, with_admin

pytestmark = pytest.mark.integration


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_parse_and_match_the_json_tree() -> None:
    with ServerThread(with_admin()) as thread:
        port = admin_port(thread)
        pub = Client('odd "name"\\x')  # label escaping
        sub = Client("metrics-sub")
        got: list[object] = []
        try:
            for client in (pub, sub):
                client.connect(thread.uri())
                client.logon()
            sub.subscribe(got.append, "m.topic")
            sub.flush()
            for n in range(25):
                pub.publish("m.topic", json.dumps({"n": n}))
            wait_for(lambda: len(got) == 25, what="25 deliveries")
            wait_for(
                lambda: get_json(port, "/amps/instance/clients/metrics-sub/messages_out") >= 26,
                what="the deliveries counted",
            )
            status, headers, body = request(port, "/metrics")
            assert status == 200
            assert headers["content-type"].startswith("text/plain; version=0.0.4")
            values = samples(body.decode())
            tree = get_json(port, "/amps/instance")
            assert values[("amps_publishes_total", ())] == tree["statistics"]["publishes"] == 25
            assert values[("amps_clients", ())] == 2
            name = 'odd "name"\\x'
            key = ("amps_client_messages_in_total", (("client", name),))
            assert values[key] == tree["clients"][name]["messages_in"]
            key = ("amps_client_messages_out_total", (("client", "metrics-sub"),))
            assert values[key] == tree["clients"]["metrics-sub"]["messages_out"]
            key = ("amps_topic_subscriptions", (("topic", "m.topic"),))
            assert values[key] == 1
            assert values[("amps_topic_publishes_total", (("topic", "m.topic"),))] == 25
            assert values[("amps_topic_deliveries_total", (("topic", "m.topic"),))] == 25
            key = (
                "amps_sow_records",
                (("message_type", "json"), ("topic", "/ADMIN/bookmark_store")),
            )
            assert values[key] == 0
            assert values[("amps_journal_last_index", ())] == tree["journal"]["last_index"] == 25
            info = (
                "amps_instance_info",
                (("name", "ampsclient-server"), ("version", tree["version"])),
            )
            assert values[info] == 1
            server_stat = ("amps_server_statistic", (("name", "logons"),))
            assert values[server_stat] == thread.statistics()["logons"]
            # the AMPS parts of the same tree: processors, process memory, host
            key = ("amps_processor_matches_found_total", (("processor", "all"),))
            assert values[key] == tree["processors"]["all"]["matches_found"] == 25
            key = ("amps_processor_messages_received_total", (("processor", "ingest"),))
            assert values[key] == 25
            assert values[("amps_instance_memory_rss_bytes", ())] > 0
            host = get_json(port, "/amps/host")
            disk, entry = next(iter(host["disks"].items()))
            key = (
                "amps_host_disk_filesystem_free_percent",
                (("disk", disk),),
            )
            assert abs(values[key] - entry["filesystem_free_percent"]) < 1.0
            assert values[("amps_host_memory_bytes", (("kind", "total"),))] > 0
            assert ("amps_host_network_bytes_in_total", (("interface", "lo"),)) in values
        finally:
            pub.close()
            sub.close()


def test_render_metrics_strict_format() -> None:
    text = render_metrics(
        {
            "name": "n",
            "version": "v",
            "uptime": 1.5,
            "client_count": 0,
            "statistics": {"publishes": 3, "publishes_per_sec": 0.5, "odd": 2},
            "clients": {"a\nb": {"messages_in": 4, "offline": True}},
            "replication": {
                "d": {"messages_out": 1, "is_connected": False, "replication_type": "async"}
            },
        }
    )
    lines = text.splitlines()
    assert text.endswith("\n")
    families = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(families) == len(set(families)), "a family declared twice"
    assert 'amps_client_messages_in_total{client="a\\nb"} 4' in lines
    assert 'amps_client_offline{client="a\\nb"} 1' in lines
    assert 'amps_replication_sync{destination="d"} 0' in lines
    values = samples(text)
    assert values[("amps_server_statistic", (("name", "odd"),))] == 2
    assert values[("amps_publishes_per_second", ())] == 0.5
