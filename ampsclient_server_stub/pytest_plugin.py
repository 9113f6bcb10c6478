"""The pytest plugin: reference servers, a replicated pair and a fault proxy as fixtures.

Installed with the package (``[project.entry-points.pytest11] ampsclient``), so a project
that depends on ``ampsclient`` tests its AMPS application with no licensed server and no
copied harness (see ``docs/testing-your-app.md``)::

    def test_orders(amps_server, amps_collector):
        client = amps_server.client("app")
        client.subscribe(amps_collector, "orders")
        amps_server.publish("orders", '{"id": 1}')
        assert amps_collector.wait_for_count(1)[0].get_data() == '{"id": 1}'

Fixtures (every server, proxy and client stops by itself at teardown):

* ``amps_server``: a server for this test (an :class:`AmpsServer`); configure it with
  ``@pytest.mark.amps_server(config=..., message_types=[...], process=True)``;
* ``amps_server_factory``: ``amps_server_factory(config=..., message_types=...)`` starts
  more, each an :class:`AmpsServer`;
* ``amps_server_session``: one server for the whole session (its options: override the
  ``amps_server_session_options`` fixture in a ``conftest.py``);
* ``amps_replicated_pair``: two instances replicating to each other (a
  :class:`ReplicatedPair`; ``@pytest.mark.amps_replicated_pair(sync=False, ...)``);
* ``amps_fault_proxy``: a :class:`FaultProxy` in front of ``amps_server``;
  ``amps_fault_proxy_factory(target)`` puts one in front of any server or pair node;
* ``amps_collector``: an :class:`Inbox`, a thread-safe message handler with
  ``wait_for_count(n, timeout)``;
* ``amps_topic``: a topic name of this test's own (for the session server).

Option: ``--amps-server-log-level=DEBUG`` sets the level of the ``ampsclient_server_stub``
logger while in-process servers run (unset: logging is left as it is).

This module imports nothing of the server at start-up (pytest loads it in every project that
installs the package): fixtures import what they start.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pytest

if TYPE_CHECKING:
    from ampsclient_server_stub.cluster import ClusterNode
    from ampsclient_server_stub.testing.amps_server import AmpsServer, ConfigSource
    from ampsclient_server_stub.testing.collect import Inbox
    from ampsclient_server_stub.testing.fault_proxy import FaultProxy
    from ampsclient_server_stub.testing.pair import ReplicatedPair

__all__ = [
    "AmpsServerFactory",
    "FaultProxyFactory",
    "amps_collector",
    "amps_fault_proxy",
    "amps_fault_proxy_factory",
    "amps_replicated_pair",
    "amps_server",
    "amps_server_factory",
    "amps_server_session",
    "amps_server_session_options",
    "amps_topic",
]

_LOGGER = "ampsclient_server_stub"


class AmpsServerFactory(Protocol):
    """What ``amps_server_factory`` is: call it to start a server (an :class:`AmpsServer`)."""

    def __call__(
        self,
        *,
        config: ConfigSource = None,
        message_types: Sequence[str] | None = None,
        process: bool = False,
        name: str | None = None,
    ) -> AmpsServer: ...


class FaultProxyFactory(Protocol):
    """What ``amps_fault_proxy_factory`` is: a started :class:`FaultProxy` to ``target``."""

    def __call__(
        self,
        target: AmpsServer | ClusterNode | int,
        *,
        kind: Literal["tcp", "ws"] = "tcp",
        message_type: str | None = None,
        seed: int | None = None,
    ) -> FaultProxy: ...


# --------------------------------------------------------------------------- hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ampsclient", "AMPS reference server (ampsclient)")
    group.addoption(
        "--amps-server-log-level",
        default=None,
        metavar="LEVEL",
        help="level of the ampsclient_server_stub logger while the plugin's in-process "
        "servers run (DEBUG, INFO, WARNING...; default: leave logging as it is)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "amps_server(config=None, message_types=None, process=False): options of the "
        "amps_server fixture (config: XML text or a file path)",
    )
    config.addinivalue_line(
        "markers",
        'amps_replicated_pair(sync=True, sow_topics=(), txlog_topics=((".*", "json"),)): '
        "options of the amps_replicated_pair fixture",
    )


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _server_log_level(config: pytest.Config) -> Iterator[None]:
    """The ``--amps-server-log-level`` for the ``with`` block (nothing when unset)."""
    level = config.getoption("amps_server_log_level")
    if not level:
        yield
        return
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise pytest.UsageError(f"--amps-server-log-level: unknown level {level!r}")
    logger = logging.getLogger(_LOGGER)
    previous = logger.level
    logger.setLevel(value)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _marker_kwargs(request: pytest.FixtureRequest, name: str) -> dict[str, Any]:
    """The keyword arguments of the closest ``name`` marker (positional ones are refused)."""
    marker = request.node.get_closest_marker(name)
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(f"@pytest.mark.{name} takes keyword arguments only")
    return dict(marker.kwargs)


@contextlib.contextmanager
def _servers(config: pytest.Config, base: Path) -> Iterator[AmpsServerFactory]:
    """A factory of :class:`AmpsServer` under ``base``; stops every one at exit."""
    from ampsclient_server_stub.testing.amps_server import AmpsServer

    started: list[AmpsServer] = []
    count = 0

    def start(
        *,
        config: ConfigSource = None,
        message_types: Sequence[str] | None = None,
        process: bool = False,
        name: str | None = None,
    ) -> AmpsServer:
        nonlocal count
        count += 1
        server = AmpsServer(
            config=config,
            message_types=message_types,
            data_dir=base / f"server-{count}",
            process=process,
            name=name,
        )
        started.append(server)
        return server.start()

    with _server_log_level(config):
        try:
            yield start
        finally:
            for server in reversed(started):
                server.stop()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def amps_server_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AmpsServerFactory]:
    """Start reference servers: ``amps_server_factory(config=XML or path, message_types=
    ["json", ...], process=False, name=None)`` returns a started :class:`AmpsServer`; each
    stops at the end of the test."""
    with _servers(request.config, tmp_path_factory.mktemp("amps")) as factory:
        yield factory


@pytest.fixture
def amps_server(
    request: pytest.FixtureRequest, amps_server_factory: AmpsServerFactory
) -> AmpsServer:
    """A reference server for this test (options: ``@pytest.mark.amps_server(...)``)."""
    return amps_server_factory(**_marker_kwargs(request, "amps_server"))


@pytest.fixture(scope="session")
def amps_server_session_options() -> dict[str, Any]:
    """The options of ``amps_server_session`` (``config``, ``message_types``, ``process``):
    override this fixture in a ``conftest.py`` to change them."""
    return {}


@pytest.fixture(scope="session")
def amps_server_session(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    amps_server_session_options: dict[str, Any],
) -> Iterator[AmpsServer]:
    """One reference server shared by every test of the session (give each test its own
    topics: ``amps_topic``)."""
    with _servers(request.config, tmp_path_factory.mktemp("amps-session")) as factory:
        yield factory(**amps_server_session_options)


@pytest.fixture
def amps_replicated_pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicatedPair]:
    """Instances ``A`` and ``B`` replicating to each other, started and streaming
    (options: ``@pytest.mark.amps_replicated_pair(sync=..., sow_topics=...)``)."""
    from ampsclient_server_stub.testing.pair import ReplicatedPair

    pair = ReplicatedPair(
        tmp_path_factory.mktemp("amps-pair"), **_marker_kwargs(request, "amps_replicated_pair")
    )
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()


@pytest.fixture
def amps_fault_proxy_factory() -> Iterator[FaultProxyFactory]:
    """Start fault proxies: ``amps_fault_proxy_factory(target, kind="tcp",
    message_type=None, seed=None)``, where ``target`` is an :class:`AmpsServer`, a pair's
    node or a port (``message_type``: the default of the proxy's ``uri()``, the server's own
    by default; ``seed``: of its random draws); each stops at the end of the test."""
    from ampsclient_server_stub.cluster import ClusterNode
    from ampsclient_server_stub.testing.fault_proxy import FaultProxy

    proxies: list[FaultProxy] = []

    def start(
        target: AmpsServer | ClusterNode | int,
        *,
        kind: Literal["tcp", "ws"] = "tcp",
        message_type: str | None = None,
        seed: int | None = None,
    ) -> FaultProxy:
        default_type = "json"
        if isinstance(target, int):
            port = target
        elif isinstance(target, ClusterNode):
            port = target.ws_port if kind == "ws" else target.tcp_port
        else:
            port = target.port(kind)
            default_type = target.message_types[0]
        proxy = FaultProxy(port, kind=kind, message_type=message_type or default_type, seed=seed)
        proxies.append(proxy)
        proxy.start()
        return proxy

    try:
        yield start
    finally:
        for proxy in reversed(proxies):
            proxy.stop()


@pytest.fixture
def amps_fault_proxy(
    amps_server: AmpsServer, amps_fault_proxy_factory: FaultProxyFactory
) -> FaultProxy:
    """A :class:`FaultProxy` in front of ``amps_server``'s TCP listener: connect to
    ``amps_fault_proxy.uri()``, then ``cut()``, ``stall(seconds)``, ``latency(seconds)``,
    ``fragment(max_bytes)``, ``bandwidth(bytes_per_second)``, ``partition(direction)``..."""
    return amps_fault_proxy_factory(amps_server)


@pytest.fixture
def amps_collector() -> Inbox:
    """A thread-safe message handler that keeps what it is given:
    ``amps_collector.wait_for_count(3, timeout=5)``."""
    from ampsclient_server_stub.testing.collect import Inbox

    return Inbox()


@pytest.fixture
def amps_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses: ``test/<test name>/<random>``."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", request.node.name).strip("_")[:60]
    return f"test/{name}/{uuid.uuid4().hex[:8]}"
