"""The replication plug (``replication/plug.py``): the broker's hooks are frozen with no
exception; replication's limits are the plug's, given when the broker is built, and the
manager attaches to the plug while it runs (issue #29). That sync acks still wait for the
destination through it: ``test_links.py::test_sync_ack_waits_for_the_destination...``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _replication_support import dest_state, start_threads, wait_for

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.cluster import Cluster
from ampsclient_server_stub.engine.hooks import BrokerHooks
from ampsclient_server_stub.replication.plug import NO_CAP, ReplicationPlug


def test_frozen_hooks_refuse_every_field_replication_included() -> None:
    plug = ReplicationPlug()
    hooks = BrokerHooks(ack_limit=plug.ack_limit, fully_durable_limit=plug.fully_durable_limit)
    hooks.freeze()
    for name in ("ack_limit", "fully_durable_limit", "durable_listeners", "request_sync"):
        with pytest.raises(AttributeError, match="cannot change once the broker is built"):
            setattr(hooks, name, None)
    assert hooks.ack_limit == plug.ack_limit
    assert hooks.fully_durable_limit == plug.fully_durable_limit


class Limits:
    """A destination that has acknowledged through index 7."""

    def ack_limit(self, durable: int) -> int:
        return min(durable, 7)

    def fully_durable_limit(self) -> int:
        return 7


def test_a_detached_plug_limits_nothing_an_attached_one_forwards() -> None:
    plug = ReplicationPlug()
    assert (plug.ack_limit(10), plug.fully_durable_limit(), plug.attached) == (10, NO_CAP, False)
    manager = Limits()
    plug.attach(manager)
    plug.attach(manager)  # again: the same manager
    assert (plug.ack_limit(10), plug.ack_limit(3), plug.fully_durable_limit()) == (7, 3, 7)
    with pytest.raises(RuntimeError, match="attached already"):
        plug.attach(Limits())
    plug.detach()
    assert (plug.ack_limit(10), plug.fully_durable_limit()) == (10, NO_CAP)


@pytest.fixture
def threads() -> Iterator[dict[str, ServerThread]]:
    running: dict[str, ServerThread] = {}
    yield running
    for thread in running.values():
        thread.stop()


@pytest.mark.integration
def test_the_server_gives_the_plug_to_the_broker_and_its_manager(
    tmp_path: Path, threads: dict[str, ServerThread]
) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.add("A", group="HA")
    b = cluster.add("B", group="HA")
    cluster.hot_hot(a, b)
    threads.update(start_threads(cluster, a, b))
    ta = threads["A"]
    wait_for(lambda: dest_state(ta, "B")["connected"], 20, "the link")
    server = ta.server
    assert server.replication is not None and server.broker is not None
    plug = server.replication.plug
    assert plug is not None and plug.attached
    assert server.broker.hooks.ack_limit == plug.ack_limit
    assert server.broker.hooks.fully_durable_limit == plug.fully_durable_limit
    manager = server.replication
    durable = ta.call(lambda: manager.journal.durable_index)
    assert ta.call(lambda: plug.ack_limit(durable)) == ta.call(lambda: manager.ack_limit(durable))
    ta.stop()
    del threads["A"]
    assert not plug.attached  # the manager detached when it stopped


def test_a_server_without_replication_has_no_limits(server: ServerThread) -> None:
    assert server.server.replication is None
    broker = server.server.broker
    assert broker is not None and broker.hooks.ack_limit is None
    assert broker.hooks.fully_durable_limit is None
