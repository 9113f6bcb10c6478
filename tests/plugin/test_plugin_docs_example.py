"""The example test file of docs/testing-your-app.md runs, exactly as printed, in a project
of its own (``pytester``): the plugin's documentation cannot rot."""

from __future__ import annotations

import pathlib
import re

import pytest

pytest_plugins = ["pytester"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "testing-your-app.md"
BLOCK = re.compile(r"```python\n(# (test_\w+\.py)\n.*?)```", re.S)


def example_files() -> dict[str, str]:
    """``{file name: source}`` of every block that starts with ``# test_<name>.py``."""
    return {name: code for code, name in BLOCK.findall(PAGE.read_text())}


def test_the_page_has_its_example_file() -> None:
    files = example_files()
    assert list(files) == ["test_orders.py"]
    # the example shows every kind of fixture the page documents
    for fixture in ("amps_server", "amps_fault_proxy", "amps_replicated_pair", "amps_collector"):
        assert fixture in files["test_orders.py"]


def test_the_example_file_passes(pytester: pytest.Pytester) -> None:
    for name, code in example_files().items():
        (pytester.path / name).write_text(code)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function", "-v"
    )
    result.assert_outcomes(passed=5)
