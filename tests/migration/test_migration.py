"""Migration by renaming the import: the same official-style script against our server, with
our package and (when installed) the official client; both must see the same things."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.integration
SCRIPT = pathlib.Path(__file__).with_name("official_style_script.py")
EXPECTED = {
    "stream": ["publish", "migration-stream", '{"n":1}'],
    "sow": ["a", "b", "c"],
    "command": ["b"],
    "deleted": 3,
    "bad_filter": "BadFilterException",
    "received": [6, 7, 8, 9],
}


def run_script(module: str, uri: str) -> dict[str, Any]:
    env = dict(os.environ, AMPS_MODULE=module)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), uri],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_script_runs_with_ampsclient(server_uri: str) -> None:
    result = run_script("ampsclient", server_uri)
    assert result == EXPECTED  # type(exc).__name__ is the official BadFilterException too


@pytest.mark.interop
def test_script_runs_with_official_client(server_uri: str) -> None:
    if importlib.util.find_spec("AMPS") is None:
        pytest.skip("the official AMPS client is not installed")
    assert run_script("AMPS", server_uri) == EXPECTED
