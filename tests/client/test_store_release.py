"""``HAClient.close()`` releases a file publish store of the official forms (the official
``PublishStore`` / ``HybridPublishStore`` have no ``close()``): a publisher restarted in the
same process opens the same path again and finds what was left unpersisted; the store object
itself stays usable with a new client (it reopens), as the official one does."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ampsclient as AMPS
from ampsclient_server_stub import ServerThread

pytestmark = pytest.mark.integration


def ctor(path: str) -> Any:
    return AMPS.HAClient("restarted", path)


def file_store(path: str) -> Any:
    client = AMPS.HAClient("restarted")
    client.set_publish_store(AMPS.PublishStore(path))
    return client


def hybrid_store(path: str) -> Any:
    client = AMPS.HAClient("restarted")
    client.set_publish_store(AMPS.HybridPublishStore(path, 1 << 20))
    return client


def publish_unconnected(client: Any, count: int) -> None:
    for n in range(count):
        try:
            client.publish("t", f'{{"n":{n}}}')
        except AMPS.DisconnectedException:
            pass  # (the official client raises here; the message stays in the store)


@pytest.mark.parametrize("make", [ctor, file_store, hybrid_store])
def test_a_closed_clients_store_path_opens_again_in_process(
    make: Callable[[str], Any], tmp_path: Path, server: ServerThread
) -> None:
    path = str(tmp_path / "pub.store")
    first = make(path)
    publish_unconnected(first, 3)
    assert first.get_unpersisted_count() == 3
    first.close()
    del first
    gc.collect()
    second = make(path)  # before: StoreError "... is in use by another store or process"
    assert second.get_unpersisted_count() == 3
    chooser = AMPS.DefaultServerChooser()
    chooser.add(server.uri("tcp", "json"))
    second.set_server_chooser(chooser)
    second.connect_and_logon()  # the three are replayed and persisted
    second.publish_flush(10000)
    assert second.get_unpersisted_count() == 0
    second.close()
    third = make(path)
    assert third.get_unpersisted_count() == 0
    third.close()


def test_an_official_store_object_is_usable_after_its_client_closed(
    tmp_path: Path, server: ServerThread
) -> None:
    store = AMPS.PublishStore(str(tmp_path / "pub.store"))
    for round_ in range(2):
        client = AMPS.HAClient("reused")
        client.set_publish_store(store)
        chooser = AMPS.DefaultServerChooser()
        chooser.add(server.uri("tcp", "json"))
        client.set_server_chooser(chooser)
        client.connect_and_logon()
        client.publish("t", "{}")
        client.publish_flush(10000)
        assert store.get_unpersisted_count() == 0, round_
        client.close()
        assert store.closed  # released with its client
