"""StoreAndForward (ampsclient/ha/store_forward.py): an HA client's publish store, gate, lock
and stored tails in one object. Real stores and a real client's writer; the last test over a
real server on 127.0.0.1."""

from __future__ import annotations

import threading

from ampsclient import Client, Message, _accel
from ampsclient.client import AsyncClient
from ampsclient.ha.client import AsyncHAClient
from ampsclient.ha.store_forward import STORED_P_HEAD, StoreAndForward
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import wait_for


def stored(store: MemoryPublishStore) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    store.replay(lambda m: out.append((m.sequence, m.payload)))
    return out


def test_a_closed_gate_stores_in_sequence_and_queues_nothing() -> None:
    writer = AsyncClient("sf-closed")._wiring.writer
    store = MemoryPublishStore()
    sf = StoreAndForward(store, writer)
    assert type(sf.fields) is _accel.StoreForwardFields
    assert not sf.gate_open and sf.store is store
    first = store.next_sequence()  # (a new store starts from the clock, as the official one)
    seqs = [sf.store_and_send(STORED_P_HEAD, sf.suffix("t") + b"x%d" % i) for i in range(3)]
    assert seqs == [first, first + 1, first + 2]
    assert stored(store) == [
        (s, b'{"c":"p","s":%d,"a":"persisted","t":"t"}x%d' % (s, s - first)) for s in seqs
    ]
    assert sf.fields.suffixes == {"t": b',"a":"persisted","t":"t"}'}  # the cache the lane reads
    assert len(writer._outq) == 0
    assert sf.queue_frame_now(b"\x00\x00\x00\x01x") is False  # (queue acks: gate closed)


def test_an_open_gate_queues_only_with_a_transport() -> None:
    """The gate open but no connection (the writer has no transport): stored, not queued."""
    writer = AsyncClient("sf-open")._wiring.writer
    sf = StoreAndForward(MemoryPublishStore(), writer)
    with sf.lock:
        sf.open_gate()
    assert sf.gate_open and sf.wait_open(0)
    assert sf.store_and_send(STORED_P_HEAD, sf.suffix("t") + b"x") == sf.store.next_sequence() - 1
    assert len(writer._outq) == 0 and sf.store.unpersisted_count == 1
    with sf.lock:
        sf.close_gate()
    assert not sf.gate_open and not sf.wait_open(0)
    sf.release_waiters()  # wakes waiters, leaves the gate closed
    assert sf.wait_open(0) and not sf.gate_open


def test_block_is_asked_only_while_the_gate_is_closed() -> None:
    writer = AsyncClient("sf-block")._wiring.writer
    asked: list[bool] = []
    sf = StoreAndForward(MemoryPublishStore(), writer, block=lambda: asked.append(True))
    sf.store_and_send(STORED_P_HEAD, sf.suffix("t") + b"a")
    assert asked == [True]
    with sf.lock:
        sf.open_gate()
    sf.store_and_send(STORED_P_HEAD, sf.suffix("t") + b"b")
    assert asked == [True]


def test_set_store_moves_every_write_to_the_new_store() -> None:
    writer = AsyncClient("sf-set")._wiring.writer
    first, second = MemoryPublishStore(), MemoryPublishStore()
    sf = StoreAndForward(first, writer)
    sf.store_and_send(STORED_P_HEAD, sf.suffix("t") + b"a")
    sf.set_store(second)
    expected = second.next_sequence()
    with sf.lock:
        seq, payload = sf.store_parts(STORED_P_HEAD, sf.suffix("t") + b"b")
    assert (seq, first.unpersisted_count, second.unpersisted_count) == (expected, 1, 1)
    assert payload == b'{"c":"p","s":%d,"a":"persisted","t":"t"}b' % expected


def test_the_gate_opens_after_logon_and_publishes_go_out_in_order() -> None:
    """Over a real server: the HA client's gate opens once logged on; each publish is stored
    and reaches a subscriber, in sequence order; persisted acks empty the store."""
    got: list[bytes] = []
    done = threading.Event()

    def on_message(message: Message) -> None:
        got.append(message.get_data_raw())
        if len(got) == 50:
            done.set()

    with ServerThread() as server, Client("sf-sub") as sub, HAClient("sf-pub") as pub:
        uri = server.uri("tcp", "json")
        sub.connect(uri)
        sub.logon()
        sub.subscribe(on_message, "orders")
        publishing = pub._async._publishing
        assert not publishing.gate_open
        pub.get_server_chooser().add(uri)
        pub.connect_and_logon()
        wait_for(lambda: publishing.gate_open, timeout=20)
        seqs = [pub.publish("orders", b'{"n":%d}' % i) for i in range(50)]
        assert seqs == list(range(seqs[0], seqs[0] + 50))
        pub.publish_flush(20_000)
        assert done.wait(20)
        assert got == [b'{"n":%d}' % i for i in range(50)]
        assert publishing.store.unpersisted_count == 0


def test_queue_acks_are_stored_in_the_store_set_publish_store_gave() -> None:
    """An HA client stores its queue acks in its publish store (replayed until persisted): in
    the one it uses now. Before StoreAndForward the ack writer kept the first store's
    ``store_parts``, so after ``set_publish_store`` acks went to a store nobody replays."""
    client = AsyncHAClient("sf-acks")
    first = client.publish_store
    second = MemoryPublishStore()
    client.set_publish_store(second)
    client.client.queue_acks.ack("queue", "1|1|", "cancel")  # with options: written at once
    assert (first.unpersisted_count, second.unpersisted_count) == (0, 1)
    ((_, payload),) = stored(second)
    assert payload.startswith(b'{"c":"sow_delete","s":') and b'"o":"cancel"' in payload
