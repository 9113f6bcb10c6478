"""``mypy --strict`` accepts the typing checks, the examples and the docs' code blocks.

One mypy run over:

* ``tests/typing/check_api.py``: ``assert_type`` on the public API (both call forms of
  subscribe/sow, publish returns, the HA client, stores, the package face);
* ``examples/``;
* every ``python`` code block of ``docs/*.md`` that imports something (extracted as
  ``tests/test_docs.py`` does). A runnable block (one that starts its own server, the ones
  ``test_docs.py`` runs) is checked as it is; any other block is a fragment that names objects
  an earlier block made (``client``, ``handler``), so undefined names are allowed in it, and
  everything else is checked;
* a negative control: a file whose one ``assert_type`` is wrong, which mypy must report (so a
  run that checks nothing cannot pass).
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
from test_docs import BLOCK, DOCS, examples  # type: ignore[import-not-found]  # tests/ is on sys.path

ROOT = pathlib.Path(__file__).resolve().parents[2]

NEGATIVE = """\
from typing import assert_type

from ampsclient import Client, MessageStream


def wrong(client: Client) -> None:
    assert_type(client.subscribe(print, "orders"), MessageStream)  # a handler: str
"""


def doc_blocks(into: pathlib.Path) -> tuple[list[pathlib.Path], list[pathlib.Path]]:
    """Write the docs' blocks that import something to ``into``: (runnable, fragments)."""
    runnable_code = {code for _, code in examples()}
    runnable: list[pathlib.Path] = []
    fragments: list[pathlib.Path] = []
    for page in sorted(DOCS.glob("*.md")):
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            if not re.search(r"^\s*(import|from)\s", code, re.M):
                continue
            path = into / f"doc_{page.stem.replace('-', '_')}_{i}.py"
            if code in runnable_code:
                path.write_text(code)
                runnable.append(path)
            else:
                path.write_text('# mypy: disable-error-code="name-defined"\n' + code)
                fragments.append(path)
    return runnable, fragments


@pytest.mark.timeout(600)
def test_mypy_strict_on_api_checks_examples_and_docs(tmp_path: pathlib.Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    runnable, fragments = doc_blocks(docs)
    assert len(runnable) >= 5
    assert len(fragments) >= 5
    negative = tmp_path / "negative_control.py"
    negative.write_text(NEGATIVE)
    examples_dir = ROOT / "examples"
    assert len(list(examples_dir.rglob("*.py"))) >= 5
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--hide-error-context",
            str(ROOT / "tests" / "typing" / "check_api.py"),
            str(examples_dir),
            *map(str, runnable + fragments),
            str(negative),
        ],
        cwd=ROOT,  # the project's mypy configuration (pyproject.toml) applies
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    # the negative control's one error, and nothing else
    control = [e for e in errors if e.startswith(str(negative))]
    assert len(control) == 1, done.stdout + done.stderr
    assert '"str", not "MessageStream"' in control[0]
    others = [e for e in errors if e not in control]
    assert others == [], "\n".join(others)
    assert done.returncode == 1, done.stderr
