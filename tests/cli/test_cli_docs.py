"""docs/cli.md's shell blocks, run in order as one bash script against a server process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT, ServerProcess

pytestmark = pytest.mark.integration

PAGE = ROOT / "docs" / "cli.md"


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_cli_page_examples_run(amps: ServerProcess, tmp_path: Path) -> None:
    blocks = shell_blocks()
    assert len(blocks) >= 6
    bindir = Path(sys.executable).parent
    script = "set -euo pipefail\n" + "\n".join(blocks)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=dict(os.environ, AMPSCLIENT_SERVER=amps.uri, PATH=f"{bindir}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout.splitlines()
    # what the page says the commands print
    assert out[:2] == ['{"id": 2, "qty": 50}', '{"id": 3, "qty": 500}']
    assert '{"headline": "hello"}' in out
    assert "deleted 2 of 2 matching records from orders" in out
    assert any(line.startswith(f"pong from {amps.uri}") for line in out)
    assert "sow failed with status 1" in out
    assert "publish: 3 messages in " in done.stderr and "3 persisted" in done.stderr
    # the spark syntax section
    assert out.count('orders {"id": 12, "qty": 3}') == 1
    assert out[out.index('orders {"id": 12, "qty": 3}') + 1] == 'orders {"id": 11, "qty": 2}'
    assert "deleted 3 of 3 matching records from orders" in out
    assert "refused with status 2" in out
    assert [line for line in out if line.startswith("replayed ")] == [
        f'replayed {{"id": {i}, "qty": {i - 9}}}' for i in (10, 11, 12)
    ]


def test_the_page_shows_the_configuration_its_examples_run_against() -> None:
    """docs/cli.md's ``cli.xml`` is the test's configuration, on the default ports."""
    from cli_helpers import CONFIG

    (shown,) = re.findall(r"```xml\n(.*?)```", PAGE.read_text(), re.S)
    assert shown.replace(":9007", ":0").replace(":9008", ":0").strip() == CONFIG.strip()
