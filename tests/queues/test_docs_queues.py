"""Every Python block of docs/queues.md runs, each in a fresh interpreter (its own server)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "queues.md"
BLOCKS = re.compile(r"```python\n(.*?)```", re.S).findall(PAGE.read_text())

pytestmark = pytest.mark.integration


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs(index: int, tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"block {index} failed:\n{done.stderr}"
