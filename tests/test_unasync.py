"""The synchronous facade is generated from the asyncio clients (httpcore's unasync approach):
``ampsclient/sync_convenience.py`` from ``ampsclient/convenience.py`` and
``ampsclient/sync_face.py`` from ``ampsclient/client.py`` and ``ampsclient/ha/client.py``, by
``tools/unasync.py``. The files in the tree are what the generator makes now, every public name
of the asyncio clients has its sync twin (or is one of the few documented async-only names),
and the generated twins have the asyncio methods' signatures and docstrings, so the
synchronous facade cannot drift from the asyncio one."""

from __future__ import annotations

import importlib.util
import inspect
import pathlib
import sys
from types import ModuleType

import pytest

from ampsclient.client import AsyncClient
from ampsclient.ha.client import AsyncHAClient
from ampsclient.sync import Client, HAClient
from ampsclient.sync_face import SyncClientFace, SyncHAClientFace

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAIRS = [(AsyncClient, Client, SyncClientFace), (AsyncHAClient, HAClient, SyncHAClientFace)]


def _unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "tools" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("unasync", module)
    spec.loader.exec_module(module)
    return module


def public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


@pytest.mark.parametrize("name", ["sync_convenience.py", "sync_face.py"])
def test_the_generated_files_are_current(name: str) -> None:
    unasync = _unasync()
    target = ROOT / "ampsclient" / name
    make = {path.name: make for path, make in unasync.GENERATED.items()}[name]
    current = target.read_text()
    assert current.startswith("# Generated from ampsclient/")
    assert "by tools/unasync.py: do not" in current.splitlines()[0]
    assert current == make(), "stale: run python tools/unasync.py"


@pytest.mark.parametrize(("async_cls", "sync_cls", "face"), PAIRS)
def test_every_public_async_name_has_its_sync_twin(
    async_cls: type, sync_cls: type, face: type
) -> None:
    async_only = set(_unasync().ASYNC_ONLY)
    assert async_only <= public(AsyncClient) | public(AsyncHAClient)  # the list is not stale
    missing = public(async_cls) - async_only - public(sync_cls)
    assert missing == set(), f"no sync twin: {sorted(missing)} (python tools/unasync.py)"


def _definition(cls: type, name: str) -> object:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AssertionError(name)


@pytest.mark.parametrize(("async_cls", "sync_cls", "face"), PAIRS)
def test_the_generated_twins_are_the_ones_called_and_mirror_the_async_methods(
    async_cls: type, sync_cls: type, face: type
) -> None:
    """Each generated twin is what the sync class runs (no hand-written method hides it), with
    the asyncio method's parameters, keyword-only options, return type and docstring."""
    twins = [n for n in face.__dict__ if not n.startswith("_")]
    assert len(twins) >= 20
    for name in twins:
        mine, theirs = face.__dict__[name], _definition(async_cls, name)
        assert _definition(sync_cls, name) is mine, f"{name} is hidden by a hand-written one"
        if isinstance(mine, property):
            assert isinstance(theirs, property), name
            assert mine.__doc__ == theirs.__doc__, name
            assert (mine.fset is None) == (theirs.fset is None), name
            continue
        assert callable(mine) and callable(theirs), name
        assert inspect.signature(mine) == inspect.signature(theirs), name
        assert inspect.getdoc(mine) == inspect.getdoc(theirs), name
        assert not inspect.iscoroutinefunction(mine), name


def test_a_coroutine_twin_blocks_and_a_plain_one_forwards() -> None:
    """Spot checks of the generated bodies: ``logon`` runs the coroutine on the loop thread,
    ``get_most_recent`` calls the HA client in the caller's thread."""
    text = (ROOT / "ampsclient" / "sync_face.py").read_text()
    assert "return self._run(self._async.logon(timeout, authenticator, options))" in text
    assert "return self._ha.get_most_recent(sub_id)" in text
    assert "self._run(\n            self._ha.publish_and_wait(" in text


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
