"""A view over a replicated SOW topic: the underlying topic replicates, each instance computes
its own view (AMPS replicates the publishes, not the view). A hot-hot pair in this process;
waits are conditions with deadlines."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _replication_support import dest_state, wait_for

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.cluster import Cluster
from ampsclient_server_stub.config import parse_config

pytestmark = pytest.mark.integration

VIEW = """    <View><Name>by_sym</Name><MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <Projection><Field>/sym</Field><Field>SUM(/qty) AS /qty</Field>
        <Field>COUNT(/id) AS /n</Field></Projection>
      <Grouping><Field>/sym</Field></Grouping></View>
  </SOW>"""


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ServerThread, ServerThread]]:
    cluster = Cluster(tmp_path)
    sow = [("orders", "json", ("/id",))]
    a = cluster.add("A", group="HA", sow_topics=sow)
    b = cluster.add("B", group="HA", sow_topics=sow)
    cluster.hot_hot(a, b)
    threads = []
    for node in (a, b):
        node.data_dir.mkdir(parents=True, exist_ok=True)
        xml = cluster.config_xml(node).replace("  </SOW>", VIEW, 1)
        threads.append(
            ServerThread(parse_config(xml, base_dir=node.data_dir), fsync="never").start()
        )
    ta, tb = threads
    try:
        wait_for(
            lambda: dest_state(ta, "B")["connected"] and dest_state(tb, "A")["connected"],
            20,
            "the link",
        )
        yield ta, tb
    finally:
        for thread in threads:
            thread.stop()


def _view(thread: ServerThread) -> list[Any]:
    c = Client(f"reader-{time.time_ns()}")
    c.connect(thread.uri("tcp", "json"))
    c.logon(5000)
    try:
        found = c.sow("by_sym", timeout=5000)
        return sorted(
            (json.loads(m.get_data()) for m in found if m.get_command() == "sow"),
            key=lambda d: d["sym"],
        )
    finally:
        c.close()


def test_each_instance_computes_the_view_of_the_replicated_topic(
    pair: tuple[ServerThread, ServerThread],
) -> None:
    ta, tb = pair
    writers = []
    for thread, rows in ((ta, [(1, "X", 5), (2, "Y", 1)]), (tb, [(3, "X", 7), (1, "X", 6)])):
        c = Client(f"writer-{time.time_ns()}")
        c.connect(thread.uri("tcp", "json"))
        c.logon(5000)
        writers.append(c)
        for oid, sym, qty in rows:
            c.publish("orders", json.dumps({"id": oid, "sym": sym, "qty": qty}))
        c.flush(5000)
    try:
        expected = [{"sym": "X", "qty": 13, "n": 2}, {"sym": "Y", "qty": 1, "n": 1}]
        wait_for(lambda: _view(ta) == expected, 20, "the view on A")
        wait_for(lambda: _view(tb) == expected, 20, "the view on B")
        writers[0].sow_delete("orders", "/sym = 'Y'", timeout=5000)
        wait_for(lambda: _view(tb) == expected[:1], 20, "the delete on B's view")
    finally:
        for c in writers:
            c.close()
