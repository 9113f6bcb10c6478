"""Every self-contained example in docs/ runs (a block is self-contained when it starts its
own reference server with ``ServerThread()``, or drives the sans-I/O core by hand with
``ClientCore()``)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            if "ServerThread()" in code or "ClientCore()" in code:
                found.append((f"{page.name}#{i}", code))
    return found


@pytest.mark.parametrize(("name", "code"), examples(), ids=[n for n, _ in examples()])
def test_doc_example_runs(name: str, code: str, tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stderr}"


def test_there_are_runnable_examples() -> None:
    assert len(examples()) >= 2
