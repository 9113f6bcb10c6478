"""The official AMPS JavaScript client (npm ``amps``) against our server's ws:// listener.

The official client is a black-box test peer only (installed into ``tests/interop/js``
by ``make setup`` or ``npm install`` there; never a runtime dependency).  The scenario
lives in ``tests/interop/js/scenario.js``: it logs on, subscribes with a filter, publishes
matching and non-matching messages, unsubscribes, fills the ``/ADMIN/bookmark_store`` SOW
topic, queries it and disconnects, then prints one JSON line describing what it saw.  This
test re-checks that report message by message against expectations derived here.

On failure the assertion message carries the client's frame trace (stderr, ``--trace``) and
the server's DEBUG log (websocket frames) is in pytest's captured log.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread

pytestmark = pytest.mark.interop

JS_DIR = Path(__file__).resolve().parent / "js"
SCENARIO = JS_DIR / "scenario.js"
SCENARIO_TIMEOUT_MS = 20_000
PROCESS_TIMEOUT_S = 40.0

TOPIC_FILTER_QTY = 10  # the scenario subscribes with "/qty > 10"
EXPECTED_DELIVERED_IDS = [2, 4, 6, 99]
SOW_TOPIC = "/ADMIN/bookmark_store"


def _require_js_client() -> str:
    """Path of ``node``; skip when the JS toolchain or the npm packages are missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the official AMPS JS client cannot run")
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the official AMPS JS client cannot be installed")
    for package in ("amps", "websocket"):
        if not (JS_DIR / "node_modules" / package / "package.json").is_file():
            pytest.skip(
                f"npm package {package!r} is not installed in {JS_DIR} "
                "(run `make setup` or `npm install` there)"
            )
    return node


def _run_scenario(node: str, uri: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    try:
        proc = subprocess.run(
            [node, str(SCENARIO), uri, "--timeout", str(SCENARIO_TIMEOUT_MS), "--trace"],
            cwd=JS_DIR,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"scenario.js did not exit within {PROCESS_TIMEOUT_S} s\n"
            f"stdout:\n{exc.stdout!r}\nstderr:\n{exc.stderr!r}"
        )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"scenario.js printed nothing (exit {proc.returncode})\nstderr:\n{proc.stderr}"
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        pytest.fail(f"scenario.js printed no JSON result ({exc}):\n{proc.stdout}\n{proc.stderr}")
    return result, proc


def _diagnostics(result: dict[str, Any], proc: subprocess.CompletedProcess[str]) -> str:
    return (
        f"exit {proc.returncode}, reason: {result.get('reason')}\n"
        f"result: {json.dumps(result, indent=1, ensure_ascii=False)}\n"
        f"client frames (stderr):\n{proc.stderr}"
    )


def test_official_js_client_scenario(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    node = _require_js_client()
    caplog.set_level(logging.DEBUG, logger="ampsclient_server_stub")
    caplog.set_level(logging.DEBUG, logger="websockets.server")

    uri = server.uri("ws", "json")
    result, proc = _run_scenario(node, uri)
    info = _diagnostics(result, proc)

    assert result.get("ok") is True, info
    assert proc.returncode == 0, info
    assert result["uri"] == uri
    steps = result["steps"]
    assert steps["errors"] == [], info
    assert steps["last_chance"] == [], info

    # logon: the JS client needs status=success and a version in the logon ack
    connect = steps["connect"]
    client_name = connect["client_name"]
    assert connect["connected"] is True, info
    assert isinstance(connect["server_version"], str) and connect["server_version"], info
    assert connect["server_version_int"] > 0, info

    # subscribe: the processed ack resolves the promise with the sub id
    subscribe = steps["subscribe"]
    sub_id = subscribe["sub_id"]
    assert isinstance(sub_id, str) and sub_id, info
    topic = subscribe["topic"]

    # publish → only matching messages are delivered, in publish order, with their data
    publish = steps["publish"]
    published = publish["published"]
    expected = [m for m in published if m["qty"] > TOPIC_FILTER_QTY]
    assert [m["id"] for m in expected] == EXPECTED_DELIVERED_IDS, info
    assert publish["expected_ids"] == EXPECTED_DELIVERED_IDS, info
    delivered = publish["delivered"]
    assert [m["data"].get("id") for m in delivered] == EXPECTED_DELIVERED_IDS, info
    for index, (want, got) in enumerate(zip(expected, delivered, strict=True)):
        where = f"delivery {index} (id {want['id']})"
        assert got["data"] == want, f"{where}: data\n{info}"
        assert got["command"] in ("p", "publish"), f"{where}: command\n{info}"
        assert got["topic"] == topic, f"{where}: topic\n{info}"
        assert sub_id in got["sids"].split(","), f"{where}: sids\n{info}"

    # unsubscribe: acknowledged, and nothing delivered afterwards
    unsubscribe = steps["unsubscribe"]
    assert unsubscribe["sub_id"] == sub_id, info
    assert unsubscribe["deliveries_after"] == 0, info

    # SOW: last write per (/clientName, /subId) wins; filter on the client name; order by /subId
    sow = steps["sow"]
    assert sow["topic"] == SOW_TOPIC
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for record in sow["published"]:
        latest[(record["clientName"], record["subId"])] = record
    expected_records = sorted(
        (r for (name, _), r in latest.items() if name == client_name), key=lambda r: r["subId"]
    )
    assert len(expected_records) == 3, info
    assert sow["expected_records"] == expected_records, info

    messages = sow["messages"]
    query_id = sow["query_id"]
    assert isinstance(query_id, str) and query_id, info
    assert [m["command"] for m in messages] == (
        ["group_begin"] + ["sow"] * len(expected_records) + ["group_end"]
    ), info
    assert messages[0]["query_id"] == query_id, info
    assert messages[-1]["query_id"] == query_id, info
    records = messages[1:-1]
    for index, (want, got) in enumerate(zip(expected_records, records, strict=True)):
        where = f"sow record {index} (subId {want['subId']})"
        assert got["data"] == want, f"{where}: data\n{info}"
        assert got["topic"] == SOW_TOPIC, f"{where}: topic\n{info}"
        assert got["query_id"] == query_id, f"{where}: query_id\n{info}"
        assert isinstance(got["sow_key"], str) and got["sow_key"], f"{where}: sow key\n{info}"
    assert len({r["sow_key"] for r in records}) == len(records), f"sow keys not unique\n{info}"

    # disconnect
    assert steps["disconnect"]["connected"] is False, info
