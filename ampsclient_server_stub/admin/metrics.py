"""``/metrics``: the statistics tree in Prometheus' text exposition format (version 0.0.4).

Written by hand (the format is small): ``# HELP`` and ``# TYPE`` once per metric family, then
its samples; label values escaped as the format says (backslash, double quote, newline).
Counters end in ``_total``; per-second rates are gauges (Prometheus users would rather take
``rate()`` of the counters, the gauges are there to match the JSON tree).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["CONTENT_TYPE", "render_metrics"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_INSTANCE: Final = (
    ("publishes", "amps_publishes_total", "counter", "Publishes accepted."),
    ("messages_in", "amps_messages_in_total", "counter", "Payloads received from clients."),
    ("messages_out", "amps_messages_out_total", "counter", "Payloads sent to clients."),
    ("bytes_in", "amps_bytes_in_total", "counter", "Payload bytes received from clients."),
    ("bytes_out", "amps_bytes_out_total", "counter", "Payload bytes sent to clients."),
    ("publishes_per_sec", "amps_publishes_per_second", "gauge", "Publish rate."),
    ("messages_in_per_sec", "amps_messages_in_per_second", "gauge", "Inbound message rate."),
    ("messages_out_per_sec", "amps_messages_out_per_second", "gauge", "Outbound message rate."),
)

_CLIENT: Final = (
    ("messages_in", "amps_client_messages_in_total", "counter", "Payloads received."),
    ("messages_out", "amps_client_messages_out_total", "counter", "Payloads sent."),
    ("bytes_in", "amps_client_bytes_in_total", "counter", "Payload bytes received."),
    ("bytes_out", "amps_client_bytes_out_total", "counter", "Payload bytes sent."),
    ("messages_in_per_sec", "amps_client_messages_in_per_second", "gauge", "Inbound rate."),
    ("messages_out_per_sec", "amps_client_messages_out_per_second", "gauge", "Outbound rate."),
    ("queue_depth_out", "amps_client_queue_depth_out", "gauge", "Payloads queued to send."),
    ("queued_bytes_out", "amps_client_queued_bytes_out", "gauge", "Bytes queued to send."),
    ("offline", "amps_client_offline", "gauge", "1 while the client is offlined to disk."),
    ("offline_bytes", "amps_client_offline_bytes", "gauge", "Bytes waiting in its file."),
    ("subscription_count", "amps_client_subscriptions", "gauge", "Subscriptions."),
)

_TOPIC: Final = (
    ("publishes", "amps_topic_publishes_total", "counter", "Publishes to the topic."),
    ("deliveries", "amps_topic_deliveries_total", "counter", "Messages sent (per connection)."),
    ("publishes_per_sec", "amps_topic_publishes_per_second", "gauge", "Publish rate."),
    ("deliveries_per_sec", "amps_topic_deliveries_per_second", "gauge", "Delivery rate."),
    ("subscriptions", "amps_topic_subscriptions", "gauge", "Subscriptions to the topic."),
)

_JOURNAL: Final = (
    ("files", "amps_journal_files", "gauge", "Journal files."),
    ("bytes", "amps_journal_bytes", "gauge", "Journal bytes on disk."),
    ("records", "amps_journal_records", "gauge", "Records retained."),
    ("first_index", "amps_journal_first_index", "gauge", "Oldest retained record index."),
    ("last_index", "amps_journal_last_index", "gauge", "Newest record index."),
    ("durable_index", "amps_journal_durable_index", "gauge", "Newest durable record index."),
    ("fsyncs", "amps_journal_fsyncs_total", "counter", "Group-commit fsyncs."),
    ("fsync_avg_us", "amps_journal_fsync_average_microseconds", "gauge", "Recent fsync time."),
    ("compressed_files", "amps_journal_compressed_files", "gauge", "Compressed files."),
)

_PROCESSOR: Final = (
    ("messages_received", "amps_processor_messages_received_total", "counter", "Messages in."),
    ("matches_found", "amps_processor_matches_found_total", "counter", "Matches found."),
    ("denied_reads", "amps_processor_denied_reads_total", "counter", "Reads refused."),
    ("denied_writes", "amps_processor_denied_writes_total", "counter", "Writes refused."),
)

_CPU: Final = (
    ("user_percent", "amps_host_cpu_user_percent", "gauge", "User time, last interval."),
    ("system_percent", "amps_host_cpu_system_percent", "gauge", "System time, last interval."),
    ("idle_percent", "amps_host_cpu_idle_percent", "gauge", "Idle time, last interval."),
    ("iowait_percent", "amps_host_cpu_iowait_percent", "gauge", "I/O wait, last interval."),
)

_DISK: Final = (
    (
        "filesystem_free_percent",
        "amps_host_disk_filesystem_free_percent",
        "gauge",
        "Free share of the file system.",
    ),
    ("in_progress", "amps_host_disk_in_progress", "gauge", "I/O requests in progress."),
)

_NETWORK: Final = (
    ("bytes_in", "amps_host_network_bytes_in_total", "counter", "Bytes received."),
    ("bytes_out", "amps_host_network_bytes_out_total", "counter", "Bytes sent."),
)

_REPLICATION: Final = (
    ("messages_out", "amps_replication_messages_out_total", "counter", "Messages sent."),
    ("messages_out_per_sec", "amps_replication_messages_out_per_second", "gauge", "Send rate."),
    ("seconds_behind", "amps_replication_seconds_behind", "gauge", "Oldest unacknowledged age."),
    ("messages_behind", "amps_replication_messages_behind", "gauge", "Records not acknowledged."),
    ("is_connected", "amps_replication_connected", "gauge", "1 while streaming."),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    return None


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.declared: set[str] = set()

    def family(self, name: str, kind: str, help_text: str) -> None:
        if name not in self.declared:
            self.declared.add(name)
            self.lines.append(f"# HELP {name} {help_text}")
            self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: Any, labels: Mapping[str, str] | None = None) -> None:
        text = _number(value)
        if text is None:
            return
        if labels:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{inner}}} {text}")
        else:
            self.lines.append(f"{name} {text}")

    def table(
        self,
        spec: Iterable[tuple[str, str, str, str]],
        rows: Mapping[str, Mapping[str, Any]],
        label: str,
    ) -> None:
        for key, name, kind, help_text in spec:
            present = [(k, row[key]) for k, row in rows.items() if key in row]
            if not present:
                continue
            self.family(name, kind, help_text)
            for row_name, value in present:
                self.sample(name, value, {label: row_name})


def render_metrics(instance: Mapping[str, Any], host: Mapping[str, Any] | None = None) -> str:
    """The exposition text of an ``/amps/instance`` tree and an ``/amps/host`` one (see
    :mod:`.stats` and :mod:`.system`)."""
    out = _Writer()
    stats: Mapping[str, Any] = instance.get("statistics", {})
    out.family("amps_instance_info", "gauge", "The instance (always 1).")
    out.sample(
        "amps_instance_info",
        1,
        {"name": str(instance.get("name") or ""), "version": str(instance.get("version") or "")},
    )
    out.family("amps_uptime_seconds", "gauge", "Seconds since the admin interface started.")
    out.sample("amps_uptime_seconds", float(instance.get("uptime", 0.0)))
    for key, name, kind, help_text in _INSTANCE:
        if key in stats:
            out.family(name, kind, help_text)
            out.sample(name, stats[key])
    out.family("amps_clients", "gauge", "Open client connections.")
    out.sample("amps_clients", int(instance.get("client_count", 0)))
    out.family("amps_server_statistic", "untyped", "Every counter of server.statistics().")
    derived = {key for key, *_ in _INSTANCE} | {"bytes_in_per_sec", "bytes_out_per_sec"}
    for key in sorted(stats):
        if key not in derived:
            out.sample("amps_server_statistic", stats[key], {"name": key})
    out.table(_PROCESSOR, instance.get("processors", {}), "processor")
    memory: Mapping[str, Any] = instance.get("memory", {})
    for key, name in (
        ("rss", "amps_instance_memory_rss_bytes"),
        ("vmsize", "amps_instance_memory_vmsize_bytes"),
    ):
        if key in memory:
            out.family(name, "gauge", f"The server process' {key} (bytes).")
            out.sample(name, memory[key])
    if host is not None:
        out.table(_CPU, host.get("cpus", {}), "cpu")
        out.table(_DISK, host.get("disks", {}), "disk")
        out.table(_NETWORK, host.get("network", {}), "interface")
        host_memory: Mapping[str, Any] = host.get("memory", {})
        if host_memory:
            out.family("amps_host_memory_bytes", "gauge", "Host memory (/proc/meminfo).")
            for key in sorted(host_memory):
                if key != "in_use_percent":
                    out.sample("amps_host_memory_bytes", host_memory[key], {"kind": key})
    out.table(_CLIENT, instance.get("clients", {}), "client")
    topics: Mapping[str, Mapping[str, Any]] = instance.get("topics", {})
    out.table(_TOPIC, topics, "topic")
    sow: Mapping[str, Mapping[str, Any]] = instance.get("sow", {})
    if sow:
        out.family("amps_sow_records", "gauge", "Records in the SOW topic.")
        for row in sow.values():
            out.sample(
                "amps_sow_records",
                row["records"],
                {"topic": str(row["topic"]), "message_type": str(row["message_type"])},
            )
    journal: Mapping[str, Any] = instance.get("journal", {})
    for key, name, kind, help_text in _JOURNAL:
        if key in journal:
            out.family(name, kind, help_text)
            out.sample(name, journal[key])
    replication: Mapping[str, Mapping[str, Any]] = instance.get("replication", {})
    out.table(_REPLICATION, replication, "destination")
    if replication:
        out.family("amps_replication_sync", "gauge", "1 while acknowledgment is sync.")
        for dest, row in replication.items():
            out.sample(
                "amps_replication_sync",
                row.get("replication_type") == "sync",
                {"destination": dest},
            )
    return "\n".join(out.lines) + "\n"
