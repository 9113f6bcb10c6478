"""One contract suite for every publish store (memory, and file with two fsync policies).

File-store-only behaviour (crash safety, corruption, compaction, the CLI) lives in
``test_publish_file.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient.exceptions import PublishStoreGapError, StoreError
from ampsclient.stores.publish import (
    FilePublishStore,
    MemoryPublishStore,
    PublishStore,
    StoredMessage,
    initial_sequence,
)


class Factory:
    """Opens the store under test; ``reopen`` closes it and opens it again (file stores)."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.path = tmp_path / "store"
        self.opened: list[PublishStore] = []

    @property
    def persistent(self) -> bool:
        return self.kind != "memory"

    def open(self, **kwargs: object) -> PublishStore:
        store: PublishStore
        if self.kind == "memory":
            store = MemoryPublishStore(**kwargs)  # type: ignore[arg-type]
        else:
            policy = self.kind.split("-", 1)[1]
            store = FilePublishStore(self.path, fsync=policy, segment_size=512, **kwargs)  # type: ignore[arg-type]
        self.opened.append(store)
        return store

    def reopen(self, store: PublishStore) -> PublishStore:
        store.close()
        return self.open()


@pytest.fixture(params=["memory", "file-always", "file-never"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    f = Factory(request.param, tmp_path)
    yield f
    for store in f.opened:
        store.close()


@pytest.fixture
def store(factory: Factory) -> PublishStore:
    return factory.open()


@pytest.fixture(params=["file-always", "file-never"])
def file_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """Only the stores that outlive ``close()``."""
    f = Factory(request.param, tmp_path)
    yield f
    for store in f.opened:
        store.close()


def payload_for(s: int) -> bytes:
    return b'{"c":"p","t":"orders","a":"persisted","s":%d}{"n":%d}' % (s, s % 1000)


def fill(store: PublishStore, n: int) -> list[int]:
    return [store.store(payload_for) for _ in range(n)]


def replayed(store: PublishStore) -> list[StoredMessage]:
    out: list[StoredMessage] = []
    assert store.replay(out.append) == len(out)
    return out


def seqs(store: PublishStore) -> list[int]:
    return [m.sequence for m in replayed(store)]


# ---------------------------------------------------------------------------------- sequences


def test_new_store_is_seeded_from_the_clock(factory: Factory) -> None:
    before = time.time_ns() // 1_000_000
    store = factory.open()
    after = time.time_ns() // 1_000_000
    first = store.next_sequence()
    assert before * 1_000_000 + 1 <= first <= after * 1_000_000 + 1
    assert first % 1_000_000 == 1
    assert store.next_sequence() == first  # a peek changes nothing
    assert store.store(payload_for) == first
    assert store.next_sequence() == first + 1
    assert store.last_persisted == 0


def test_initial_sequence_formula() -> None:
    assert initial_sequence(1_795_334_494_549_123_456) == 1_795_334_494_549_000_001


def test_build_receives_the_assigned_sequence(store: PublishStore) -> None:
    seen: list[int] = []

    def build(s: int) -> bytes:
        seen.append(s)
        return payload_for(s)

    s = store.store(build)
    assert seen == [s]
    message = store.get(s)
    assert message == StoredMessage(s, payload_for(s))


def test_failed_build_stores_nothing_and_keeps_the_sequence(store: PublishStore) -> None:
    nxt = store.next_sequence()

    def boom(s: int) -> bytes:
        raise ValueError("encode failed")

    with pytest.raises(ValueError, match="encode failed"):
        store.store(boom)
    assert store.next_sequence() == nxt
    assert store.unpersisted_count == 0
    assert store.store(payload_for) == nxt


def test_store_and_replay_in_order_with_exact_payloads(store: PublishStore) -> None:
    stored = fill(store, 50)
    assert stored == list(range(stored[0], stored[0] + 50))
    assert replayed(store) == [StoredMessage(s, payload_for(s)) for s in stored]
    assert store.unpersisted_count == store.get_unpersisted_count() == 50
    assert store.lowest_unpersisted == store.get_lowest_unpersisted() == stored[0]


def test_store_many(store: PublishStore) -> None:
    first = store.next_sequence()
    assert store.store_many([payload_for] * 7) == list(range(first, first + 7))
    assert store.store_many([]) == []
    assert store.store(payload_for) == first + 7
    assert seqs(store) == list(range(first, first + 8))


def test_store_parts_inserts_the_sequence(factory: Factory) -> None:
    """``store_parts`` (the HA client's path) stores exactly what ``store`` would, across
    segment rolls (segments are 512 bytes here) and a reopen."""
    store = factory.open()
    head, tail = b'{"c":"p","s":', b',"a":"persisted","t":"orders"}{"id":1}'
    expected: list[StoredMessage] = []
    for i in range(40):
        if i % 3 == 0:
            s = store.store(payload_for)
            expected.append(StoredMessage(s, payload_for(s)))
        else:
            s, payload = store.store_parts(head, tail)
            assert payload == head + str(s).encode() + tail
            expected.append(StoredMessage(s, payload))
    assert [m.sequence for m in expected] == list(
        range(expected[0].sequence, expected[0].sequence + 40)
    )
    assert replayed(store) == expected
    if factory.kind != "memory":
        assert replayed(factory.reopen(store)) == expected


def test_store_parts_default_matches_the_bundled_overrides() -> None:
    """A third-party store that only implements ``store`` gets ``store_parts`` for free."""

    class Minimal(MemoryPublishStore):
        store_parts = PublishStore.store_parts

    store = Minimal(next_sequence=7)
    assert store.store_parts(b"a", b"b") == (7, b"a7b")
    assert replayed(store) == [StoredMessage(7, b"a7b")]


def test_empty_payload_and_large_payload(store: PublishStore) -> None:
    big = bytes(range(256)) * 300  # > 64 KiB: the 32-bit length encoding
    a = store.store(lambda s: b"")
    b = store.store(lambda s: big)
    c = store.store(lambda s: b"m" * 300)  # 16-bit length encoding
    assert [m.payload for m in replayed(store)] == [b"", big, b"m" * 300]
    assert [a + 1, a + 2] == [b, c]


# ---------------------------------------------------------------------------------- discards


def test_discard_up_to_partial(store: PublishStore) -> None:
    stored = fill(store, 10)
    assert store.discard_up_to(stored[3]) == 4
    assert store.unpersisted_count == 6
    assert store.lowest_unpersisted == stored[4]
    assert store.last_persisted == store.get_last_persisted() == stored[3]
    assert seqs(store) == stored[4:]
    assert store.get(stored[3]) is None
    assert store.discard_up_to(stored[3]) == 0  # the same ack again
    assert store.discard_up_to(stored[5]) == 2
    assert seqs(store) == stored[6:]


def test_discard_up_to_everything_and_beyond(store: PublishStore) -> None:
    stored = fill(store, 5)
    beyond = stored[-1] + 1000
    assert store.discard_up_to(beyond) == 5
    assert store.unpersisted_count == 0
    assert store.lowest_unpersisted is None
    assert store.last_persisted == beyond
    assert store.next_sequence() == beyond + 1  # never reuse a number the server has seen
    assert replayed(store) == []
    assert store.store(payload_for) == beyond + 1


def test_discard_up_to_below_the_first_stored(store: PublishStore) -> None:
    stored = fill(store, 3)
    assert store.discard_up_to(stored[0] - 10) == 0
    assert store.last_persisted == stored[0] - 10
    assert store.unpersisted_count == 3


def test_publish_gap(store: PublishStore) -> None:
    stored = fill(store, 10)
    store.discard_up_to(stored[5])
    assert store.discard_up_to(stored[2]) == 0  # ignored by default
    assert (store.error_on_publish_gap, store.get_error_on_publish_gap()) == (False, False)
    store.set_error_on_publish_gap(True)
    assert (store.error_on_publish_gap, store.get_error_on_publish_gap()) == (True, True)
    with pytest.raises(PublishStoreGapError, match=str(stored[2])):
        store.discard_up_to(stored[2])
    assert store.discard_up_to(stored[5]) == 0  # equal is no gap
    assert store.discard_up_to(0) == 0  # fresh logon: never a gap
    assert store.last_persisted == stored[5]
    assert seqs(store) == stored[6:]
    store.error_on_publish_gap = False
    assert store.discard_up_to(stored[1]) == 0


def test_error_on_publish_gap_constructor_argument(factory: Factory) -> None:
    store = factory.open(error_on_publish_gap=True)
    s = fill(store, 2)
    store.discard_up_to(s[1])
    with pytest.raises(PublishStoreGapError):
        store.discard_up_to(s[0])


def test_discard_single(store: PublishStore) -> None:
    stored = fill(store, 6)
    assert store.discard(stored[2]) is True
    assert store.discard(stored[2]) is False
    assert store.discard(stored[-1] + 1) is False
    assert store.discard(stored[0] - 1) is False
    assert seqs(store) == [stored[0], stored[1], stored[3], stored[4], stored[5]]
    assert store.discard(stored[0]) is True  # the first: lowest moves on
    assert store.lowest_unpersisted == stored[1]
    assert store.discard(stored[5]) is True  # the last: the next number is still not reused
    assert store.next_sequence() == stored[5] + 1
    assert store.unpersisted_count == 3
    assert store.last_persisted == 0  # single discards are not acks
    assert store.discard(stored[1]) is True  # the hole at stored[2] is skipped too
    assert store.lowest_unpersisted == stored[3]
    assert store.discard_up_to(stored[3]) == 1
    assert seqs(store) == [stored[4]]
    assert store.discard(stored[4]) is True
    assert store.unpersisted_count == 0 and store.lowest_unpersisted is None


def test_discard_up_to_counts_only_messages_not_holes(store: PublishStore) -> None:
    stored = fill(store, 10)
    store.discard(stored[2])
    store.discard(stored[3])
    assert store.discard_up_to(stored[5]) == 4
    store.discard(stored[7])
    assert store.discard_up_to(stored[6]) == 1
    assert store.lowest_unpersisted == stored[8]  # skipped the hole at stored[7]
    assert seqs(store) == stored[8:]


def test_many_discards_keep_working_past_compaction(store: PublishStore) -> None:
    total = 0
    for _ in range(30):
        first = store.next_sequence()
        stored = store.store_many([payload_for] * 400)
        assert stored == list(range(first, first + 400))
        for s in stored[:-3:7]:
            total += store.discard_up_to(s)
        store.discard(stored[-2])
        total += store.discard_up_to(stored[-3]) + 1
        assert seqs(store) == [stored[-1]]
        assert store.get(stored[-1]) == StoredMessage(stored[-1], payload_for(stored[-1]))
    assert total == 30 * 400 - 1  # each round also acks the previous round's last message


# ---------------------------------------------------------------------------------- replay / get


def test_replay_single_and_get(store: PublishStore) -> None:
    stored = fill(store, 5)
    out: list[StoredMessage] = []
    assert store.replay_single(out.append, stored[3]) is True
    assert out == [StoredMessage(stored[3], payload_for(stored[3]))]
    store.discard(stored[2])
    store.discard_up_to(stored[0])
    for missing in (stored[0], stored[2], stored[-1] + 1, 0):
        assert store.replay_single(out.append, missing) is False
        assert store.get(missing) is None
    assert len(out) == 1


def test_replayer_may_call_back_into_the_store(store: PublishStore) -> None:
    stored = fill(store, 5)
    out: list[int] = []

    def replayer(message: StoredMessage) -> None:
        out.append(message.sequence)
        store.discard_up_to(message.sequence)  # an ack arriving during the replay

    assert store.replay(replayer) == 5
    assert out == stored
    assert store.unpersisted_count == 0


def test_stored_message_is_frozen() -> None:
    m = StoredMessage(1, b"x")
    with pytest.raises(AttributeError):
        m.sequence = 2  # type: ignore[misc]


# ---------------------------------------------------------------------------------- wait_for


def _wait_until_waiting(store: PublishStore) -> None:
    deadline = time.monotonic() + 10
    while store.statistics()["waiters"] == 0:
        assert time.monotonic() < deadline, "wait_for never started"
        time.sleep(0)  # yield the GIL; the waiter's state is the synchronisation


def test_wait_for_a_discard_from_another_thread(store: PublishStore) -> None:
    stored = fill(store, 3)

    def acker() -> None:
        _wait_until_waiting(store)
        store.discard_up_to(stored[1])  # not enough yet
        store.discard_up_to(stored[2])

    thread = threading.Thread(target=acker)
    thread.start()
    assert store.wait_for(stored[2], timeout=30) is True
    thread.join()
    assert store.unpersisted_count == 0


def test_wait_for_a_single_discard(store: PublishStore) -> None:
    stored = fill(store, 2)
    store.discard_up_to(stored[0])

    def discarder() -> None:
        _wait_until_waiting(store)
        store.discard(stored[1])

    thread = threading.Thread(target=discarder)
    thread.start()
    assert store.wait_for(stored[1], timeout=30) is True
    thread.join()


def test_wait_for_times_out(store: PublishStore) -> None:
    stored = fill(store, 3)
    store.discard_up_to(stored[0])
    start = time.monotonic()
    assert store.wait_for(stored[1], timeout=0.05) is False
    assert time.monotonic() - start >= 0.045
    assert store.wait_for(stored[0], timeout=0) is True  # already discarded
    assert store.wait_for(stored[0] - 5, timeout=None) is True
    assert store.statistics()["waiters"] == 0


def test_wait_for_on_an_empty_store(store: PublishStore) -> None:
    assert store.wait_for(store.next_sequence() + 10, timeout=0) is True


def test_close_wakes_wait_for(store: PublishStore) -> None:
    stored = fill(store, 1)
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            store.wait_for(stored[0], timeout=30)
        except StoreError as exc:
            errors.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    _wait_until_waiting(store)
    store.close()
    thread.join()
    assert len(errors) == 1


# ---------------------------------------------------------------------------------- lifecycle


def test_closed_store_rejects_mutations(store: PublishStore) -> None:
    s = fill(store, 1)[0]
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError):
        store.store(payload_for)
    with pytest.raises(StoreError):
        store.store_many([payload_for])
    with pytest.raises(StoreError):
        store.discard_up_to(s)
    with pytest.raises(StoreError):
        store.discard(s)


def test_context_manager_closes(factory: Factory) -> None:
    with factory.open() as store:
        fill(store, 1)
    with pytest.raises(StoreError):
        store.store(payload_for)


def test_statistics(store: PublishStore) -> None:
    stored = fill(store, 4)
    store.discard_up_to(stored[1])
    stats = store.statistics()
    assert stats["stored"] == 2
    assert stats["bytes"] == len(payload_for(stored[2])) + len(payload_for(stored[3]))
    assert stats["stored_total"] == 4
    assert stats["discarded_total"] == 2
    assert stats["next_sequence"] == stored[3] + 1
    assert stats["last_persisted"] == stored[1]
    assert stats["waiters"] == 0
    assert all(isinstance(v, int) for v in stats.values())


def test_publisher_and_acker_threads(factory: Factory) -> None:
    n = 100 if factory.kind == "file-always" else 20_000  # "always": one fsync per store
    store = factory.open()
    stored: list[int] = []
    done = threading.Event()

    def publisher() -> None:
        for _ in range(n):
            stored.append(store.store(payload_for))
        done.set()

    def acker() -> None:  # acks whatever has been published so far, like the event loop
        while not done.is_set() or store.unpersisted_count:
            if stored:
                store.discard_up_to(stored[-1])
            else:
                time.sleep(0)

    threads = [threading.Thread(target=publisher), threading.Thread(target=acker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stored == list(range(stored[0], stored[0] + n))
    assert store.unpersisted_count == 0
    assert store.last_persisted == stored[-1]
    assert store.statistics()["discarded_total"] == n


def test_concurrent_publishers_get_distinct_sequences(factory: Factory) -> None:
    store = factory.open()
    per_thread = 50 if factory.kind == "file-always" else 2000
    results: list[list[int]] = [[] for _ in range(4)]

    def publisher(out: list[int]) -> None:
        for _ in range(per_thread):
            out.append(store.store(payload_for))

    threads = [threading.Thread(target=publisher, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = sorted(s for r in results for s in r)
    assert everything == list(range(everything[0], everything[0] + 4 * per_thread))
    assert all(r == sorted(r) for r in results)
    assert [m.sequence for m in replayed(store)] == everything
    assert all(m.payload == payload_for(m.sequence) for m in replayed(store))


# ---------------------------------------------------------------------------------- reopening


def test_reopen_keeps_unpersisted_messages_and_continues(file_factory: Factory) -> None:
    store = file_factory.open()
    stored = fill(store, 40)  # several 512-byte segments
    store.discard_up_to(stored[9])
    store.discard(stored[20])
    store = file_factory.reopen(store)
    expected = [s for s in stored[10:] if s != stored[20]]
    assert replayed(store) == [StoredMessage(s, payload_for(s)) for s in expected]
    assert store.unpersisted_count == len(expected)
    assert store.lowest_unpersisted == stored[10]
    assert store.last_persisted == stored[9]
    assert store.next_sequence() == stored[-1] + 1
    assert store.store(payload_for) == stored[-1] + 1


def test_reopen_never_reuses_a_sequence(file_factory: Factory) -> None:
    store = file_factory.open()
    stored = fill(store, 3)
    store.discard(stored[2])  # the highest number is gone from the log's live set
    store = file_factory.reopen(store)
    assert store.next_sequence() == stored[2] + 1
    store.discard_up_to(stored[2] + 500)  # a logon ack from a server that saw more
    store = file_factory.reopen(store)
    assert store.next_sequence() == stored[2] + 501
    assert store.last_persisted == stored[2] + 500
    assert store.unpersisted_count == 0


def test_reopen_an_empty_store_keeps_its_sequence(file_factory: Factory) -> None:
    store = file_factory.open()
    first = store.next_sequence()
    store = file_factory.reopen(store)
    assert store.next_sequence() == first
    s = store.store(payload_for)
    store.discard_up_to(s)
    store = file_factory.reopen(store)
    assert store.next_sequence() == s + 1
    assert store.last_persisted == s


def test_reopen_after_a_gap_ack(file_factory: Factory) -> None:
    store = file_factory.open()
    stored = fill(store, 5)
    store.discard_up_to(stored[3])
    store = file_factory.reopen(store)
    store.set_error_on_publish_gap(True)
    with pytest.raises(PublishStoreGapError):
        store.discard_up_to(stored[1])
