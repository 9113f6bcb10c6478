"""Test modules outside packages must have unique basenames.

pytest's default import mode puts each test directory without ``__init__.py`` on ``sys.path``
and imports its files by basename, so two ``test_config.py`` in two such directories make the
whole run stop at collection ("import file mismatch"), which a run of one directory never shows.
"""

from __future__ import annotations

import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent


def in_a_package(path: pathlib.Path) -> bool:
    return (path.parent / "__init__.py").exists()


def test_test_module_basenames_are_unique() -> None:
    modules = [
        p
        for p in TESTS.rglob("*.py")
        if "node_modules" not in p.parts and p.name not in ("conftest.py", "__init__.py")
    ]
    assert len(modules) > 100  # the scan sees the suite
    by_name = collections.defaultdict(list)
    for path in modules:
        if not in_a_package(path):
            by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each: {clashes}"
