"""A small monitoring tool as an AMPS user writes it for a real AMPS instance: it reads the
admin interface's ``/amps.json`` and prints the figures a typical exporter collects, in
Prometheus' text format.

Written from the AMPS monitoring guide's names only (host interface: ``cpus`` with the ``all``
aggregate, ``disks``' ``filesystem_free_percent``; instance interface: ``clients``,
``processors``, ``sow``, ``queues``, ``replication``, ``memory``; the user guide's "Output
Formatting": a ``.json`` suffix gives a document rooted at ``amps`` whose collections are lists
of entries with an ``id``). Values go through ``float()``, as AMPS' own example prints them as
strings. It knows nothing of the reference server: the tests run it unchanged against it.

Usage: ``python amps_monitor.py http://127.0.0.1:8085`` (exit status 1 when a key is missing).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any


def fetch(base: str, path: str) -> Any:
    with urllib.request.urlopen(base.rstrip("/") + path, timeout=10) as response:
        return json.load(response)


def by_id(entries: list[dict[str, Any]], wanted: str) -> dict[str, Any]:
    for entry in entries:
        if entry["id"] == wanted:
            return entry
    raise KeyError(wanted)


def label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def collect(base: str) -> list[str]:
    amps = fetch(base, "/amps.json")["amps"]
    host, instance = amps["host"], amps["instance"]
    out: list[str] = []
    cpu = by_id(host["cpus"], "all")
    for field in ("idle_percent", "iowait_percent", "system_percent", "user_percent"):
        out.append(f"amps_host_cpu_{field} {float(cpu[field])}")
    for disk in host["disks"]:
        labels = f'disk="{label(disk["id"])}",mount_point="{label(disk["mount_point"])}"'
        out.append(
            f"amps_host_disk_filesystem_free_percent{{{labels}}} "
            f"{float(disk['filesystem_free_percent'])}"
        )
    memory = instance["memory"]
    out.append(f"amps_instance_memory_rss {float(memory['rss'])}")
    out.append(f"amps_instance_memory_vmsize {float(memory['vmsize'])}")
    processors = by_id(instance["processors"], "all")
    for field in (
        "messages_received",
        "messages_received_per_sec",
        "matches_found",
        "matches_found_per_sec",
        "denied_reads",
        "denied_writes",
    ):
        out.append(f"amps_processors_all_{field} {float(processors[field])}")
    for client in instance["clients"]:
        labels = f'client="{label(client["client_name"])}"'
        for field in (
            "messages_in",
            "messages_out",
            "bytes_in",
            "bytes_out",
            "messages_in_per_sec",
            "messages_out_per_sec",
            "queue_depth_out",
            "queued_bytes_out",
            "queue_max_latency",
            "denied_reads",
            "denied_writes",
        ):
            out.append(f"amps_client_{field}{{{labels}}} {float(client[field])}")
    for topic in instance["sow"]:
        labels = f'topic="{label(topic["topic"])}",message_type="{label(topic["message_type"])}"'
        out.append(f"amps_sow_valid_keys{{{labels}}} {float(topic['valid_keys'])}")
        for field in ("insert_count", "update_count", "delete_count"):
            out.append(f"amps_sow_{field}{{{labels}}} {float(topic[field])}")
    for queue in instance["queues"]:
        labels = f'topic="{label(queue["topic"])}"'
        for field in ("queue_depth", "backlog", "seconds_behind"):
            out.append(f"amps_queue_{field}{{{labels}}} {float(queue[field])}")
    for link in instance["replication"]:
        labels = f'destination="{label(link["name"])}"'
        out.append(f"amps_replication_seconds_behind{{{labels}}} {float(link['seconds_behind'])}")
        out.append(f"amps_replication_is_connected{{{labels}}} {float(link['is_connected'])}")
    # one node on its own, as dashboards poll it
    node = fetch(base, "/amps/instance/processors/all.json")
    rate = by_id(node["amps"]["instance"]["processors"], "all")["messages_received_per_sec"]
    out.append(f"amps_processors_all_poll_messages_received_per_sec {float(rate)}")
    return out


def main(argv: list[str]) -> int:
    try:
        lines = collect(argv[1] if len(argv) > 1 else "http://127.0.0.1:8085")
    except KeyError as exc:
        print(f"missing key in the AMPS admin tree: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
