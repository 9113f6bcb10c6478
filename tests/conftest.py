"""Shared fixtures: a fresh reference server per test, on free ports of 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config

# --------------------------------------------------------------------------- child bytecode
#
# The suite starts a few hundred Python processes (servers, CLI runs, workers, examples).
# With PYTHONDONTWRITEBYTECODE set (as on some machines) each of them compiled every module
# it imports again, about 0.2 s a process. Children get a bytecode cache of their own for the
# session instead (PYTHONPYCACHEPREFIX: a temporary directory, so the tree gets no
# __pycache__), removed at the end. A prefix set by the caller is left as it is (`make test`
# sets one in the venv that every process shares, kept across passes and runs).

_PYCACHE_ENV = "PYTHONPYCACHEPREFIX"
_pycache_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _pycache_dir
    if os.environ.get(_PYCACHE_ENV):
        return
    _pycache_dir = tempfile.mkdtemp(prefix="ampsclient-tests-pycache-")
    os.environ[_PYCACHE_ENV] = _pycache_dir
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _pycache_dir
    if _pycache_dir is not None:
        if os.environ.get(_PYCACHE_ENV) == _pycache_dir:
            del os.environ[_PYCACHE_ENV]
        shutil.rmtree(_pycache_dir, ignore_errors=True)
        _pycache_dir = None


# --------------------------------------------------------------------------- long tests first
#
# `make test` runs two xdist workers with --dist worksteal: each gets half of the collection
# in order, and a worker with nothing left steals the other's last pending tests. A long test
# collected late can be the last one running while the other worker idles; run the modules
# whose tests take tens of seconds (JVMs, chaos runs, subprocess pipelines) first, so the
# pass ends on short ones. A stable sort by module: a module's tests stay together, in order.

LONG_FIRST = (
    "tests/spark/test_cluster.py",  # a standalone Spark cluster: a master and two workers
    "tests/spark/",
    "tests/chaos/",
    "tests/release/",
    "tests/cli/",
    "tests/examples/",
    "tests/typing/test_mypy_strict.py",
)


def _long_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next((i for i, p in enumerate(LONG_FIRST) if path.startswith(p)), len(LONG_FIRST))


# --------------------------------------------------------------------------- serial files
#
# `make test` runs the tests marked serial in a pass of their own over the files that
# tests/serial_files.txt names, not over the whole suite (collecting ~4,000 tests to run 24 cost
# about 10 s). A serial test in a file the list lacks would run in neither pass, so whenever a
# run collects the whole suite (the parallel pass does), the files of its serial tests are kept
# here before `-m` deselects them, and tests/test_serial_files.py fails naming any the list lacks.

TESTS = Path(__file__).resolve().parent
SERIAL_FOUND = pytest.StashKey[set[str]]()


def _collects_whole_suite(config: pytest.Config) -> bool:
    """Whether the run's arguments name ``tests/`` or a directory above it."""
    base = config.invocation_params.dir
    for arg in config.args:
        path = (base / arg.split("::", 1)[0]).resolve()
        if path == TESTS or path in TESTS.parents:
            return True
    return False


@pytest.hookimpl(tryfirst=True)  # before -m deselects anything
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_long_rank)
    if _collects_whole_suite(config):
        config.stash[SERIAL_FOUND] = {
            item.path.relative_to(TESTS.parent).as_posix()
            for item in items
            if item.get_closest_marker("serial") is not None
        }


@pytest.fixture
def serial_files_collected(pytestconfig: pytest.Config) -> set[str] | None:
    """The files holding tests marked serial, as this run collected them, or ``None`` when the
    run did not collect the whole suite."""
    return pytestconfig.stash.get(SERIAL_FOUND, None)


@pytest.fixture
def server() -> Iterator[ServerThread]:
    """A :class:`ServerThread` on ports 0 (tcp and ws), stopped after the test."""
    thread = ServerThread(default_config(tcp_port=0, ws_port=0))
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
def server_uri(server: ServerThread) -> str:
    """``tcp://127.0.0.1:<port>/amps/json`` of the ``server`` fixture."""
    return server.uri("tcp", "json")


# --------------------------------------------------------------------------- marker check
#
# A test that binds or connects an AF_INET/AF_INET6 socket (a server thread, a client, a raw
# socket) is an integration test and must carry ``@pytest.mark.integration`` (module-level
# ``pytestmark`` or a decorator), so that ``-m "not integration"`` runs the unit tests alone.
# With AMPSCLIENT_MARKER_CHECK=1 every unmarked test that touches the network fails, naming
# what it did (checked per test from setup to teardown, in every thread of this process).

_MARKER_CHECK = os.environ.get("AMPSCLIENT_MARKER_CHECK") == "1"
_net_use: list[str] | None = None


def _watch(name: str) -> None:
    original = getattr(socket.socket, name)

    def watched(self: socket.socket, address: Any, *args: Any) -> Any:
        used = _net_use
        if used is not None and self.family in (socket.AF_INET, socket.AF_INET6):
            used.append(f"{name} {address!r}")
        return original(self, address, *args)

    setattr(socket.socket, name, watched)


if _MARKER_CHECK:
    for _name in ("bind", "connect", "connect_ex"):
        _watch(_name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    global _net_use
    if not _MARKER_CHECK or item.get_closest_marker("integration") is not None:
        return (yield)
    _net_use = []
    try:
        return (yield)
    finally:
        used, _net_use = _net_use, None
        if used:
            item.add_report_section(
                "teardown", "marker check", f"unmarked test used the network: {used[:3]}"
            )
            _UNMARKED.append(f"{item.nodeid}: {used[0]}")


_UNMARKED: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _UNMARKED:
        terminalreporter.section("tests that use the network but are not marked integration")
        for line in _UNMARKED:
            terminalreporter.line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _UNMARKED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
