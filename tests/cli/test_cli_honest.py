"""The ``ampsclient`` command tells the truth, at once (issue 31, "Honest answers"): refused
publishes, wrong passwords, timeouts as bounds, HTTP ports, TLS options, passwords kept out
of the command line. A real command process against real server processes."""

from __future__ import annotations

import json

import pytest
from cli_helpers import ServerProcess, cli

from ampsclient import Client

pytestmark = pytest.mark.integration


def test_refused_publishes_are_counted_each_reason_once_exit_1(amps: ServerProcess) -> None:
    """Messages the server refuses (not JSON for the SOW topic ``orders``) are not reported
    persisted: the summary counts them, each reason is printed once, the exit status is 1
    (it used to be "3 persisted" and 0)."""
    lines = ["not json", '{"id": 1, "ok": true}', "still not json", "nor this"]
    done = cli(
        "publish", "-s", amps.uri, "-t", "orders", "--format", "raw", stdin="\n".join(lines) + "\n"
    )
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ampsclient ")]
    assert len(errors) == 1, done.stderr  # one reason, printed once for its 3 messages
    assert errors[0].startswith("ampsclient publish: the server refused 3 message(s): ")
    assert "1 persisted, 3 refused" in done.stderr
    with Client("check") as client:  # what the server kept: the one good message
        client.connect(amps.uri)
        client.logon(5000)
        kept = [
            json.loads(m.get_data())
            for m in client.sow("orders", timeout=5000)
            if m.get_command() == "sow"
        ]
    assert kept == [{"id": 1, "ok": True}]
