"""Per-queue statistics in the admin interface's ``/amps/instance/queues`` tree, read over
HTTP against real traffic, message by message."""

from __future__ import annotations

import dataclasses
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer, publish, queue_config

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import AdminConfig
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    cfg = queue_config(
        tmp_path,
        QueueConfig(
            name="work", message_type="json", max_per_subscription_backlog=3, lease_period=60.0
        ),
    )
    cfg = dataclasses.replace(cfg, admin=AdminConfig(host="127.0.0.1", port=0))
    thread = ServerThread(cfg, fsync="never").start()
    try:
        yield thread
    finally:
        thread.stop()


def get(server: ServerThread, path: str) -> Any:
    admin = server.server.admin
    assert admin is not None
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, body
        return json.loads(body)
    finally:
        conn.close()


def test_queue_statistics_follow_each_step(server: ServerThread) -> None:
    assert get(server, "/amps/instance/queues")["work"]["queue_depth"] == 0
    publish(server, "work", [{"n": i} for i in range(5)])
    q = get(server, "/amps/instance/queues/work")
    assert (q["queue_depth"], q["backlog"], q["enqueued"], q["subscriptions"]) == (5, 0, 5, 0)
    c = Consumer(server)
    c.subscribe("work", o="max_backlog=3")
    got = c.sync()
    q = get(server, "/amps/instance/queues/work")
    assert (q["queue_depth"], q["backlog"], q["delivered"], q["subscriptions"]) == (2, 3, 3, 1)
    assert q["age_of_oldest_lease"] >= 0 and q["owned"] == 5
    c.ack("work", got[0][0]["bm"])
    c.ack("work", got[1][0]["bm"], o="cancel")
    c.sync()
    q = get(server, "/amps/instance/queues/work")
    assert (q["acked"], q["cancelled"], q["returned"]) == (1, 1, 1)
    assert (q["queue_depth"], q["backlog"]) == (1, 3)  # 4 left: 3 leased, 1 waiting
    c.close()  # the leases come back when the server sees the connection go

    def returned() -> bool:
        q = get(server, "/amps/instance/queues/work")
        return bool((q["queue_depth"], q["backlog"], q["subscriptions"]) == (4, 0, 0))

    wait_for(returned, 10, "the leases returned")
