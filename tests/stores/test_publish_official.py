"""The official client's publish store forms: ``PublishStore(filename, errorOnPublishGap,
blocksPerRealloc, blockSize)`` with ``truncate_on_close`` and ``set_resize_handler``,
``MemoryPublishStore(blocksPerRealloc, errorOnPublishGap, blockSize)``, and the default
durability of ``HAClient(name, "path")``: a ``kill -9`` loses nothing, without an fsync per
message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ampsclient import Client, Message
from ampsclient.exceptions import PublishStoreGapError, StoreError, UsageError
from ampsclient.protocol.header import decode_header
from ampsclient.stores import (
    BasePublishStore,
    FilePublishStore,
    HybridPublishStore,
    MemoryPublishStore,
    PublishStore,
)
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for


def payload(s: int, size: int = 10) -> bytes:
    return b'{"c":"p","t":"t","a":"persisted","s":%d}' % s + b"x" * size


def test_publish_store_is_a_file_store_named_by_its_filename(tmp_path: Path) -> None:
    name = tmp_path / "pub.store"
    store = PublishStore(str(name))
    assert isinstance(store, FilePublishStore) and isinstance(store, BasePublishStore)
    assert name.is_dir() and store.path == name
    assert store.fsync_policy == "interval"  # the official durability: no fsync per message
    assert store.get_error_on_publish_gap() is False
    seqs = [store.store(payload) for _ in range(200)]
    assert store.statistics()["fsyncs"] < 200
    store.discard_up_to(seqs[99])
    store.close()
    with PublishStore(str(name), True) as again:  # errorOnPublishGap, positional
        assert again.get_error_on_publish_gap() is True
        assert again.get_unpersisted_count() == 100
        assert again.get_lowest_unpersisted() == seqs[100]
        assert again.get_last_persisted() == seqs[99]
        replayed: list[int] = []
        assert again.replay(lambda m: replayed.append(m.sequence)) == 100
        assert replayed == seqs[100:]
        with pytest.raises(PublishStoreGapError):
            again.discard_up_to(seqs[5])


def test_blocks_set_the_segment_size(tmp_path: Path) -> None:
    with PublishStore(tmp_path / "s", False, 4, 256) as store:  # 1 KiB segments
        for _ in range(40):
            store.store(lambda s: payload(s, 100))
        assert len(store.segment_files()) > 3
    for bad in ((0, 2048), (10, 0), (-1, 5)):
        with pytest.raises(ValueError, match=r"blocksPerRealloc|blockSize"):
            PublishStore(tmp_path / "bad", False, *bad)


def test_a_regular_file_is_refused_by_name(tmp_path: Path) -> None:
    official_file = tmp_path / "official.store"
    official_file.write_bytes(b"\x00" * 64)
    with pytest.raises(StoreError, match=r"official\.store.*is a directory"):
        PublishStore(official_file)


def test_truncate_on_close(tmp_path: Path) -> None:
    name = tmp_path / "t"
    store = PublishStore(name)
    store.truncate_on_close()
    last = [store.store(payload) for _ in range(5)][-1]
    store.discard_up_to(last)
    store.close()
    assert sorted(p.name for p in name.iterdir()) == ["lock", "state"]  # no segment left
    kept = PublishStore(name)
    assert kept.next_sequence() == last + 1  # numbers keep rising
    kept.truncate_on_close()
    s = kept.store(payload)
    kept.close()  # not empty: nothing is dropped
    with PublishStore(name) as again:
        assert [m.sequence for m in _replayed(again)] == [s]
        assert again.segment_files()


def _replayed(store: BasePublishStore) -> list[Message]:
    out: list = []
    store.replay(out.append)
    return out


def test_resize_handler_is_asked_before_the_files_grow(tmp_path: Path) -> None:
    asked: list[tuple[object, int]] = []
    allow = [True]

    def handler(store: object, size: int) -> bool:
        asked.append((store, size))
        return allow[0]

    with PublishStore(tmp_path / "r", False, 4, 256) as store:
        store.set_resize_handler(handler)
        store.store(lambda s: payload(s, 600))
        assert asked == []  # fits in the first 1 KiB segment
        first = store.store(lambda s: payload(s, 600))  # does not fit: a new segment
        assert [a[0] for a in asked] == [store]
        assert asked[0][1] > 1024
        assert len(store.segment_files()) == 2
        allow[0] = False
        n = len(asked)
        with pytest.raises(StoreError, match="resize handler refused"):
            store.store(lambda s: payload(s, 5000))  # needs a longer segment: refused
        assert len(asked) > n
        assert store.get_unpersisted_count() == 2  # nothing of the refused one was kept
        store.set_resize_handler(None)
        second = store.store(lambda s: payload(s, 5000))
        assert second == first + 1
    with PublishStore(tmp_path / "r") as again:
        assert [m.sequence for m in _replayed(again)] == [first - 1, first, second]


def test_memory_publish_store_official_arguments() -> None:
    store = MemoryPublishStore(100, True, 512)
    assert store.get_error_on_publish_gap() is True
    assert MemoryPublishStore().get_error_on_publish_gap() is False
    assert MemoryPublishStore(errorOnPublishGap=True).error_on_publish_gap is True
    s = store.store(payload)
    assert store.get_unpersisted_count() == 1 and store.get_lowest_unpersisted() == s
    with pytest.raises(ValueError, match="blocksPerRealloc"):
        MemoryPublishStore(0)
    with pytest.raises(ValueError, match="blockSize"):
        MemoryPublishStore(10, False, -5)
    with pytest.raises(UsageError, match="set_resize_handler"):
        store.set_resize_handler(lambda st, size: True)


PUBLISHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from ampsclient.ha import FixedDelayStrategy
    from ampsclient.sync import HAClient

    uri, path, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
    first_file = Path(path + ".first")
    with HAClient("official-form", path, reconnect_delay_strategy=FixedDelayStrategy(100)) as c:
        store = c.publish_store
        if not first_file.exists():
            first_file.write_text(str(store.next_sequence()))
        first = int(first_file.read_text())
        print("policy", store.fsync_policy, flush=True)
        c.get_server_chooser().add(uri)
        c.connect_and_logon()
        for n in range(store.next_sequence() - first, total):
            assert c.publish("orders", '{"order_id":%d}' % n) == first + n
            if n % 500 == 0:
                print("stored", n, flush=True)
        c.publish_flush(60_000)
        print("done", c.get_unpersisted_count(), store.statistics()["fsyncs"], flush=True)
    """
)


@pytest.mark.integration
def test_kill_9_with_the_default_path_store_loses_nothing(tmp_path: Path) -> None:
    """``HAClient(name, "path")`` killed with -9 twice mid-stream, then run to the end: the
    observer gets every order once, in order (stored messages are replayed, the server drops
    what it already had)."""
    total = 30_000
    script = tmp_path / "publisher.py"
    script.write_text(PUBLISHER)
    received: list[int] = []
    lock = threading.Lock()

    def on_order(message: Message) -> None:
        with lock:
            received.append(json.loads(message.get_data())["order_id"])

    def run(uri: str) -> subprocess.Popen[str]:
        args = [sys.executable, str(script), uri, str(tmp_path / "pub.store"), str(total)]
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    with ServerProcess(data_dir=tmp_path / "server") as server, Client("observer") as observer:
        observer.connect(server.uri())
        observer.logon(5000)
        observer.subscribe(on_order, "orders")
        kills = 0
        for target in (4_000, 15_000):
            proc = run(server.uri())
            assert proc.stdout is not None
            assert proc.stdout.readline().split() == ["policy", "interval"]
            for line in proc.stdout:
                if line.startswith("done") or int(line.split()[1]) >= target:
                    break
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
            proc.wait(30)
        final = run(server.uri())
        out, err = final.communicate(timeout=120)
        assert final.returncode == 0, err
        done = out.splitlines()[-1].split()
        assert done[:2] == ["done", "0"], out
        assert kills == 2
        wait_for(lambda: len(received) >= total, timeout=30)
        observer.flush(5000)
    with lock:
        assert received == list(range(total))


def test_hybrid_store_spills_beyond_its_memory_budget(tmp_path: Path) -> None:
    name = tmp_path / "hybrid"
    store = HybridPublishStore(str(name), 1000)  # 1000 bytes of payloads in memory
    assert store.max_memory_capacity == 1000 and store.fsync_policy == "interval"
    seqs = [store.store(lambda s: payload(s, 150)) for _ in range(20)]  # ~190 bytes each
    size = len(payload(seqs[0], 150))  # every payload has this size
    stats = store.statistics()
    assert stats["memory_bytes"] == (1000 // size) * size and stats["spilled"] == 20 - 1000 // size
    assert stats["spilled"] > 10
    replayed = _replayed(store)
    assert [m.sequence for m in replayed] == seqs  # spilled ones read back from disk
    assert all(m.payload == payload(m.sequence, 150) for m in replayed)
    got = store.get(seqs[-1])
    assert got is not None and got.payload == payload(seqs[-1], 150)
    assert store.replay_single(lambda m: None, seqs[-2])
    store.discard_up_to(seqs[9])  # frees budget: new messages stay in memory again
    spilled_before = store.statistics()["spilled_total"]
    more = store.store(lambda s: payload(s, 150))
    assert store.statistics()["spilled_total"] == spilled_before
    store.discard(seqs[15])
    store.close()
    with HybridPublishStore(name, 400, True) as again:  # a restart, a smaller budget
        assert again.get_error_on_publish_gap() is True
        expected = [s for s in seqs[10:] if s != seqs[15]] + [more]
        assert [m.sequence for m in _replayed(again)] == expected
        assert again.statistics()["memory_bytes"] <= 400
        assert again.statistics()["spilled"] == len(expected) - 400 // size
    with pytest.raises(ValueError, match="maxMemoryCapacity"):
        HybridPublishStore(tmp_path / "h2", -1)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_store_takes_a_built_message(tmp_path: Path, kind: str) -> None:
    """The official ``store(message)``: the message's header with ``s`` set, then its data;
    the server-side decoder reads back exactly those fields."""
    message = Message()
    message.set_command("publish")
    message.set_topic("orders")
    message.set_ack_type("persisted")
    message.set_data('{"id":7}')
    store: BasePublishStore = (
        MemoryPublishStore() if kind == "memory" else PublishStore(tmp_path / "m")
    )
    with store:
        s = store.store(message)
        stored = store.get(s)
        assert stored is not None
        header, body = decode_header(stored.payload)
        assert header == {"c": "p", "t": "orders", "a": "persisted", "s": s}
        assert stored.payload[body:] == b'{"id":7}'
        with pytest.raises(TypeError, match="build"):
            store.store(42)  # type: ignore[arg-type]
