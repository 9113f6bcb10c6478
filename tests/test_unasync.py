"""``ampsclient/sync_convenience.py`` is generated from ``ampsclient/convenience.py`` by
``tools/unasync.py`` (httpcore's unasync approach): the file in the tree is what the
generator makes now, so the synchronous facade cannot drift from the asyncio commands."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "tools" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("unasync", module)
    spec.loader.exec_module(module)
    return module


def test_the_sync_convenience_file_is_current() -> None:
    unasync = _unasync()
    current = (ROOT / "ampsclient" / "sync_convenience.py").read_text()
    assert current.startswith("# Generated from ampsclient/convenience.py by tools/unasync.py")
    assert current == unasync.generate(), "stale: run python tools/unasync.py"


def test_the_generator_translates_a_command_and_refuses_what_it_cannot() -> None:
    unasync = _unasync()
    source = (
        unasync.START
        + "    async def sow(self, topic: str) -> str:\n"
        + '        p = {"topic": topic}\n'
        + '        return await self.run_subscription("sow", None, p)\n'
    )
    assert unasync.unasync_lines(source) == (
        unasync.START
        + "    def sow(self, topic: str) -> str:\n"
        + '        p = {"topic": topic}\n'
        + '        return self._run(self._async.run_subscription("sow", None, p))\n'
    )
    with pytest.raises(ValueError, match="cannot translate"):
        unasync.unasync_lines(unasync.START + "        x = await self.other()\n")
