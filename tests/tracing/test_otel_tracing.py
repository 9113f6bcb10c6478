"""ampsclient.tracing (the otel extra) through a real reference server: spans message by
message, the trace id carried in the correlation id, SOW batch counts, metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from ampsclient import Client
from ampsclient.ha import FixedDelayStrategy
from ampsclient.sync import HAClient
from ampsclient.tracing import instrument
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def otel() -> Iterator[tuple[TracerProvider, InMemorySpanExporter, MeterProvider, Any]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield tracer_provider, exporter, meter_provider, reader
    tracer_provider.shutdown()
    meter_provider.shutdown()


_PUBLISH_ATTRS = (
    "messaging.system",
    "messaging.destination.name",
    "messaging.operation.type",
    "messaging.operation.name",
    "messaging.client.id",
    "server.address",
    "server.port",
)


def _metrics(reader: InMemoryMetricReader) -> dict[str, int]:
    totals: dict[str, int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                totals[metric.name] = sum(int(p.value) for p in metric.data.data_points)
    return totals


def test_publish_and_process_spans_carry_the_trace_through_the_correlation_id(
    server: ServerThread, otel: Any
) -> None:
    tracer_provider, exporter, meter_provider, reader = otel
    uri = server.uri("tcp", "json")
    got: list[tuple[str, str | None]] = []
    with Client("otel-sub") as sub, Client("otel-pub") as pub:
        for c in (sub, pub):
            instrument(
                c,
                tracer_provider=tracer_provider,
                meter_provider=meter_provider,
                propagate="correlation_id",
            )
            c.connect(uri)
            c.logon(5000)
        sub.subscribe(lambda m: got.append((m.get_data(), m.get_correlation_id())), "orders")
        pub.publish("orders", '{"n":0}')
        pub.publish("orders", '{"n":1}', correlation_id="mine")  # the user's: kept
        pub.publish("orders", '{"n":2}')
        wait_for(lambda: len(got) == 3, what="three deliveries")
    spans = exporter.get_finished_spans()
    publishes = [s for s in spans if s.kind is SpanKind.PRODUCER]
    processes = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert [s.name for s in publishes] == ["publish orders"] * 3
    assert [s.name for s in processes] == ["process orders"] * 3
    port = int(uri.split(":")[2].split("/")[0])
    for span in publishes:
        assert span.attributes is not None
        assert {k: span.attributes.get(k) for k in _PUBLISH_ATTRS} == {
            "messaging.system": "amps",
            "messaging.destination.name": "orders",
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
            "messaging.client.id": "otel-pub",
            "server.address": "127.0.0.1",
            "server.port": port,
        }
    assert [d for d, _ in got] == ['{"n":0}', '{"n":1}', '{"n":2}']
    # message by message: 0 and 2 carry their publish span's traceparent, 1 the user's id
    assert got[1][1] == "mine"
    for i in (0, 2):
        ctx = publishes[i].context
        flags = int(ctx.trace_flags)
        assert got[i][1] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"
        proc = processes[i]
        assert proc.parent is not None and proc.parent.span_id == ctx.span_id
        assert proc.context.trace_id == ctx.trace_id
        assert [link.context.span_id for link in proc.links] == [ctx.span_id]
        assert proc.attributes is not None
        assert proc.attributes["messaging.operation.type"] == "process"
        assert proc.attributes["messaging.client.id"] == "otel-sub"
    assert processes[1].parent is None  # "mine" is no traceparent: a root span
    assert publishes[1].attributes is not None and processes[1].attributes is not None
    assert publishes[1].attributes["messaging.message.conversation_id"] == "mine"
    assert processes[1].attributes["messaging.message.conversation_id"] == "mine"
    assert processes[1].context.trace_id != publishes[1].context.trace_id
    totals = _metrics(reader)
    assert totals["messaging.client.sent.messages"] == 3
    assert totals["messaging.client.consumed.messages"] == 3


def test_without_propagate_no_correlation_id_is_sent(server: ServerThread, otel: Any) -> None:
    tracer_provider, exporter, meter_provider, _ = otel
    got: list[str | None] = []
    with Client("otel-plain") as c:
        instrument(c, tracer_provider=tracer_provider, meter_provider=meter_provider)
        c.connect(server.uri("tcp", "json"))
        c.logon(5000)
        c.subscribe(lambda m: got.append(m.get_correlation_id()), "t")
        c.publish("t", "a")
        wait_for(lambda: len(got) == 1, what="the delivery")
    assert got == [None]
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["process t", "publish t"]


def test_sow_span_counts_the_batch(server: ServerThread, otel: Any) -> None:
    tracer_provider, exporter, meter_provider, _ = otel
    topic = "/ADMIN/bookmark_store"
    with Client("otel-sow") as c:
        c.connect(server.uri("tcp", "json"))
        c.logon(5000)
        for i in range(3):
            c.publish(topic, json.dumps({"clientName": f"c{i}", "subId": "s", "v": i}))
        c.flush(5000)
        instrument(c, tracer_provider=tracer_provider, meter_provider=meter_provider)
        commands: list[str] = []
        c.sow(lambda m: commands.append(m.get_command()), topic, timeout=5000)
        wait_for(
            lambda: any(s.name == f"sow {topic}" for s in exporter.get_finished_spans()),
            what="the sow span to end at group_end",
        )
    (sow,) = [s for s in exporter.get_finished_spans() if s.name == f"sow {topic}"]
    assert sow.kind is SpanKind.CLIENT
    assert sow.attributes is not None
    assert sow.attributes["messaging.batch.message_count"] == 3
    assert sow.attributes["messaging.operation.name"] == "sow"
    processes = [s for s in exporter.get_finished_spans() if s.name == f"process {topic}"]
    assert len(processes) == 3
    assert commands == ["group_begin", "sow", "sow", "sow", "group_end"]


def test_not_instrumented_creates_no_span(server: ServerThread, otel: Any) -> None:
    tracer_provider, exporter, meter_provider, _ = otel
    got: list[str] = []
    with Client("otel-off") as c:
        c.connect(server.uri("tcp", "json"))
        c.logon(5000)
        c.subscribe(lambda m: got.append(m.get_data()), "t")
        c.publish("t", "a")
        wait_for(lambda: got == ["a"], what="the delivery")
        inst = instrument(c, tracer_provider=tracer_provider, meter_provider=meter_provider)
        inst.uninstrument()
        c.publish("t", "b")  # instrumented, then not: no span either
        wait_for(lambda: got == ["a", "b"], what="the second delivery")
    assert exporter.get_finished_spans() == ()


def test_ha_failover_counter_and_store_gauge(tmp_path: Path, otel: Any) -> None:
    tracer_provider, exporter, meter_provider, reader = otel
    server = ServerProcess(data_dir=tmp_path / "s")
    with server, HAClient("otel-ha", reconnect_delay_strategy=FixedDelayStrategy(50)) as ha:
        instrument(ha, tracer_provider=tracer_provider, meter_provider=meter_provider)
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()
        for data in ("a", "b", "c"):  # the 2nd and 3rd would take the C lane: it is off
            ha.publish("t", data)
        ha.publish_flush(10000)
        assert _metrics(reader)["ampsclient.publish_store.unpersisted"] == 0
        spans = exporter.get_finished_spans()
        assert [(s.name, s.kind) for s in spans] == [("publish t", SpanKind.PRODUCER)] * 3
        assert _metrics(reader).get("ampsclient.failovers", 0) == 0
        server.restart()
        wait_for(
            lambda: _metrics(reader).get("ampsclient.failovers", 0) == 1,
            timeout=30,
            what="the failover counter after the restart",
        )


def test_importing_ampsclient_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, ampsclient, ampsclient.client, ampsclient.sync, ampsclient.tracing\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_instrument_without_opentelemetry_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if not installed\n"
        "from ampsclient import Client\n"
        "from ampsclient.exceptions import UsageError\n"
        "from ampsclient.tracing import TracingUnavailableError, instrument\n"
        "try:\n"
        "    instrument(Client('no-otel'))\n"
        "except TracingUnavailableError as exc:\n"
        "    assert isinstance(exc, UsageError)\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'ampsclient[otel]'" in out.stdout
