"""``/amps/instance/views`` and ``/amps/instance/conflated_topics`` (issue 30), walked on a
running server with traffic: a view over a SOW topic, a view over a queue and a conflated
topic, in AMPS' JSON form and the bare form (AMPS monitoring guide, "views (instance
statistics)")."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import AdminConfig, parse_config
from ampsclient_server_stub.testing import wait_for

from ._support import admin_port, get_json

pytestmark = pytest.mark.integration

CONFIG = """<AMPSConfig><Name>vs</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>jobs</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  <View><Name>by_sym</Name><MessageType>json</MessageType>
    <UnderlyingTopic>orders</UnderlyingTopic>
    <Projection><Field>/sym</Field><Field>SUM(/qty) AS /qty</Field></Projection>
    <Grouping><Field>/sym</Field></Grouping></View>
  <ConflatedTopic><Name>orders-C</Name><UnderlyingTopic>orders</UnderlyingTopic>
    <MessageType>json</MessageType><Interval>100ms</Interval></ConflatedTopic>
  <Queue><Name>work</Name><MessageType>json</MessageType>
    <UnderlyingTopic>jobs</UnderlyingTopic></Queue>
  <View><Name>by_kind</Name><MessageType>json</MessageType>
    <UnderlyingTopic>work</UnderlyingTopic>
    <Projection><Field>/kind</Field><Field>COUNT(/id) AS /waiting</Field></Projection>
    <Grouping><Field>/kind</Field></Grouping></View>
</SOW></AMPSConfig>"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    cfg = dataclasses.replace(
        parse_config(CONFIG, base_dir=tmp_path), admin=AdminConfig(host="127.0.0.1", port=0)
    )
    thread = ServerThread(cfg, fsync="never").start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    c = Client(f"vs-{time.time_ns()}")
    c.connect(server.uri("tcp", "json"))
    c.logon(5000)
    yield c
    c.close()


def by_id(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in entries}


def test_views_and_conflated_topics_in_the_tree(server: ServerThread, client: Client) -> None:
    port = admin_port(server)
    # 3 writes to one record and 2 to another: the conflated topic copies 2 records
    for n, (oid, sym, qty) in enumerate([(1, "A", 1), (1, "A", 2), (2, "B", 5), (1, "A", 3)]):
        client.publish("orders", json.dumps({"id": oid, "sym": sym, "qty": qty, "n": n}))
    client.publish("orders", json.dumps({"id": 2, "sym": "B", "qty": 7, "n": 4}))
    for n, kind in enumerate(["x", "x", "y"]):
        client.publish("jobs", json.dumps({"id": n, "kind": kind}))
    client.flush(5000)

    def conflated() -> dict[str, Any]:
        found: dict[str, Any] = get_json(port, "/amps/instance/conflated_topics/orders-C")
        return found

    wait_for(lambda: conflated()["updates_out"] == 2, timeout=20.0)
    seen = conflated()  # read once: the interval count moves on
    assert seen["intervals"] >= 1
    assert seen == {
        "topic": "orders-C",
        "message_type": "json",
        "underlying_topic": "orders",
        "interval": 0.1,
        "filter": "",
        "records": 2,
        # the hash index AMPS creates over the (underlying) key fields (built at its first query)
        "hash_indexes": [{"keys": ["/id"], "automatic": True, "records": 0, "queries": 0}],
        "intervals": seen["intervals"],
        "updates_in": 5,
        "updates_out": 2,
        "conflation_ratio": 2.5,
    }

    def queue_view() -> dict[str, Any]:
        found: dict[str, Any] = get_json(port, "/amps/instance/views/by_kind")
        return found

    wait_for(lambda: queue_view()["records"] == 2, timeout=20.0)
    assert queue_view() == {
        "topic": "by_kind",
        "message_type": "json",
        "underlying_topic": "work",
        "projection": ["/kind", "COUNT(/id) AS /waiting"],
        "grouping": ["/kind"],
        "conflation": "none",
        "conflation_ratio": 0.0,
        "queue_depth": 0,
        "records": 2,
        "hash_indexes": [],
    }
    # AMPS' JSON form: a collection of entries with their id, rooted at amps
    document = get_json(port, "/amps/instance/views.json")
    views = by_id(document["amps"]["instance"]["views"])
    assert sorted(views) == ["by_kind", "by_sym"]
    assert views["by_sym"] == {
        "id": "by_sym",
        "topic": "by_sym",
        "message_type": "json",
        "underlying_topic": "orders",
        "projection": ["/sym", "SUM(/qty) AS /qty"],
        "grouping": ["/sym"],
        "conflation": "none",
        "conflation_ratio": 0.0,
        "queue_depth": 0,
        "records": 2,
        "hash_indexes": [],
    }
    # the guide keeps a view's SOW figures under /sow, by the view's name
    assert get_json(port, "/amps/instance/sow/by_sym")["valid_keys"] == 2
    whole = get_json(port, "/amps.json")["amps"]["instance"]
    assert sorted(by_id(whole["conflated_topics"])) == ["orders-C"]
    assert sorted(by_id(whole["views"])) == ["by_kind", "by_sym"]


@pytest.mark.serial
def test_the_dashboard_lists_views_and_conflated_topics(
    server: ServerThread, client: Client
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):  # pragma: no cover - `make setup` installs it
        pytest.skip("chromium is not installed (make setup installs it)")
    port = admin_port(server)
    for n in range(3):
        client.publish("orders", json.dumps({"id": n % 2, "sym": "A", "qty": n}))
    client.flush(5000)
    wait_for(
        lambda: get_json(port, "/amps/instance/conflated_topics/orders-C")["updates_out"] == 2,
        timeout=20.0,
    )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_function(
                "document.querySelectorAll('#derived tbody tr').length === 3", timeout=30_000
            )
            rows = sorted(page.locator("#derived tbody tr").all_inner_texts())
        finally:
            browser.close()
    cells = [r.split("\t") for r in rows]
    assert [c[:4] for c in cells] == [
        ["by_kind", "view", "work", "0"],
        ["by_sym", "view", "orders", "1"],
        ["orders-C", "conflated", "orders", "2"],
    ]
    assert cells[2][5] == "1.50"  # 3 writes, 2 records copied
