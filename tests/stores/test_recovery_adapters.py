"""Recovery point adapters: the file adapter (crash safety, torn and corrupt files), the SOW
adapter against the reference server, the conflating adapter, and interoperability with the
official client's ``SOWRecoveryPointAdapter`` in both directions.

Waits are on conditions with deadlines; a few *negative* checks ("nothing was forwarded
yet") wait a bounded, short time on an event that must not fire.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, Command, Message
from ampsclient.exceptions import CorruptStoreError, StoreError
from ampsclient.protocol.bookmarks import BookmarkList, Timestamp, parse_bookmark
from ampsclient.stores import (
    ConflatingRecoveryPointAdapter,
    FileRecoveryPointAdapter,
    MemoryBookmarkStore,
    RecoveryPoint,
    SOWRecoveryPointAdapter,
)
from ampsclient.stores.recovery import EMPTY_POINT, RecoveryPointAdapter, iter_recovery_points
from ampsclient.sync import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import SowTopicConfig, default_config
from ampsclient_server_stub.testing import wait_for

TOPIC = "/ADMIN/bookmark_store"
ROOT = Path(__file__).resolve().parents[2]


def points(adapter: Any) -> dict[str, str]:
    return {p.sub_id: p.bookmark for p in iter_recovery_points(adapter)}


# ============================================================================== file adapter


def test_file_adapter_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "points"
    with FileRecoveryPointAdapter(path) as adapter:
        assert isinstance(adapter, RecoveryPointAdapter)
        assert points(adapter) == {}
        adapter.update(RecoveryPoint("s1", "1|5|"))
        adapter.update(RecoveryPoint("s2", "1|6|,2|3|"))
        adapter.update(RecoveryPoint("s1", "1|7|"))
        assert adapter.get("s1") == "1|7|"
        assert len(adapter) == 2
    with FileRecoveryPointAdapter(path) as adapter:
        assert points(adapter) == {"s1": "1|7|", "s2": "1|6|,2|3|"}
        # the official next(): points, then empty ones (safe past the end)
        got = [adapter.next(), adapter.next(), adapter.next(), adapter.next()]
        assert [p.sub_id for p in got] == ["s1", "s2", "", ""]
        assert got[2] == EMPTY_POINT and not got[2]
        adapter.purge("s1")
        adapter.purge("missing")
    with FileRecoveryPointAdapter(path) as adapter:
        assert points(adapter) == {"s2": "1|6|,2|3|"}
        adapter.purge()
    with FileRecoveryPointAdapter(path) as adapter:
        assert points(adapter) == {}
        adapter.close()
        with pytest.raises(StoreError):
            adapter.update(RecoveryPoint("s", "1|1|"))
        with pytest.raises(StoreError):
            adapter.purge("s")


def test_file_format_is_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "points"
    with FileRecoveryPointAdapter(path, fsync="never") as adapter:
        adapter.update(RecoveryPoint("orders-1", "10620414156524534001|3|"))
        adapter.purge("orders-1")
        adapter.update(RecoveryPoint("orders-2", "0"))
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    records = [json.loads(line) for line in lines[:-1]]
    assert records[0] == {"format": "ampsclient.recovery-points", "version": 1}
    assert records[1]["subId"] == "orders-1" and records[1]["bookmark"].endswith("|3|")
    assert isinstance(records[1]["time"], float)
    assert records[2] == {"purge": "orders-1"}
    assert records[3]["subId"] == "orders-2"


def test_file_adapter_compacts(tmp_path: Path) -> None:
    path = tmp_path / "points"
    with FileRecoveryPointAdapter(path, fsync="never", compact_after=10) as adapter:
        for i in range(100):
            adapter.update(RecoveryPoint(f"s{i % 2}", f"1|{i}|"))
        assert len(path.read_bytes().splitlines()) <= 1 + 2 + 10
        adapter.prune()
        assert len(path.read_bytes().splitlines()) == 3
    assert not (tmp_path / "points.tmp").exists()
    with FileRecoveryPointAdapter(path) as adapter:
        assert points(adapter) == {"s0": "1|98|", "s1": "1|99|"}


def test_file_adapter_tolerates_a_torn_last_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "points"
    with FileRecoveryPointAdapter(path) as adapter:
        adapter.update(RecoveryPoint("s1", "1|5|"))
        adapter.update(RecoveryPoint("s2", "1|6|"))
    full = path.read_bytes()
    path.write_bytes(full + b'{"subId":"s1","bookmark":"1|9')  # a write cut short
    with caplog.at_level(logging.WARNING), FileRecoveryPointAdapter(path) as adapter:
        assert points(adapter) == {"s1": "1|5|", "s2": "1|6|"}
        adapter.update(RecoveryPoint("s1", "1|10|"))  # must not glue onto the torn bytes
    assert "torn" in caplog.text
    with FileRecoveryPointAdapter(path) as adapter:
        assert points(adapter) == {"s1": "1|10|", "s2": "1|6|"}
    # a header cut short (the file was being created): an empty store
    path.write_bytes(b'{"format":"ampsclient.rec')
    with FileRecoveryPointAdapter(path) as adapter:
        assert points(adapter) == {}


@pytest.mark.parametrize(
    "content",
    [
        b"hello world\n",
        b'{"format":"something-else","version":1}\n',
        b'{"format":"ampsclient.recovery-points","version":99}\n',
        b'{"format":"ampsclient.recovery-points","version":1}\nnot json\n{"purge":"x"}\n',
        b'{"format":"ampsclient.recovery-points","version":1}\n{"subId":"s"}\n',
        b'{"format":"ampsclient.recovery-points","version":1}\n{"subId":1,"bookmark":"1|1|"}\n',
        b"garbage without a newline",
    ],
)
def test_file_adapter_rejects_a_corrupt_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "points"
    path.write_bytes(content)
    with pytest.raises(CorruptStoreError, match="points"):
        FileRecoveryPointAdapter(path)
    assert path.read_bytes() == content  # left alone for inspection


def test_file_adapter_use_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "points"
    with FileRecoveryPointAdapter(path) as adapter:
        adapter.update(RecoveryPoint("s", "1|5|"))
        adapter.update(RecoveryPoint("stamped", "1|5|,20200101T000000Z"))
        adapter.update(RecoveryPoint("epoch", "0"))
    with FileRecoveryPointAdapter(path, use_timestamp=True) as adapter:
        got = points(adapter)
    parsed = parse_bookmark(got["s"])
    assert isinstance(parsed, BookmarkList)
    assert isinstance(parsed.items[1], Timestamp)
    assert got["stamped"] == "1|5|,20200101T000000Z"  # already has one
    assert got["epoch"] == "0"


def test_file_adapter_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync"):
        FileRecoveryPointAdapter(tmp_path / "p", fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compact_after"):
        FileRecoveryPointAdapter(tmp_path / "p", compact_after=0)
    with pytest.raises(StoreError):
        FileRecoveryPointAdapter(tmp_path / "missing-dir" / "p")


CHILD = textwrap.dedent(
    """
    import sys
    from ampsclient.stores import FileRecoveryPointAdapter, RecoveryPoint
    adapter = FileRecoveryPointAdapter(sys.argv[1], fsync=sys.argv[2], compact_after=50)
    i = 0
    while True:
        i += 1
        for k in range(4):
            adapter.update(RecoveryPoint(f"s{k}", f"1|{i}|"))
            sys.stdout.write(f"s{k} {i}\\n")
            sys.stdout.flush()
    """
)


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_file_adapter_survives_kill_9(tmp_path: Path, fsync: str) -> None:
    """A child updates 4 subscriptions in a loop (compacting every 50 lines) and is killed
    with SIGKILL; the reloaded file has, per subscription, the last update the child
    reported complete or the one right after it (completed but not reported yet)."""
    path = tmp_path / "points"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), fsync],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    done: dict[str, int] = {}
    try:
        for line in child.stdout:
            sub, value = line.split()
            done[sub] = int(value)
            if done.get("s3", 0) >= 300:
                break
        os.kill(child.pid, signal.SIGKILL)
        for line in child.stdout:  # whatever was reported before the kill
            sub, value = line.split()
            done[sub] = int(value)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    with FileRecoveryPointAdapter(path) as adapter:
        got = {sub: int(bm.split("|")[1]) for sub, bm in points(adapter).items()}
    assert set(got) == {"s0", "s1", "s2", "s3"}
    for sub, reported in done.items():
        assert reported <= got[sub] <= reported + 1, (sub, reported, got[sub])


# ============================================================================== SOW adapter


@pytest.fixture
def connect(server: ServerThread) -> Iterator[Callable[[str], Client]]:
    clients: list[Client] = []

    def factory(name: str) -> Client:
        client = Client(f"{name}-{time.monotonic_ns()}")
        client.connect(server.uri("tcp", "json"))
        client.logon()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.close()


def sow_records(client: Client, topic: str = TOPIC) -> list[dict[str, Any]]:
    stream = client.execute(Command("sow").set_topic(topic).set_timeout(5000))
    return [json.loads(m.data) for m in stream if m.command == "sow"]


@pytest.mark.integration
def test_sow_adapter_update_reload_purge(connect: Callable[[str], Client]) -> None:
    store_client = connect("rp-store")
    adapter = SOWRecoveryPointAdapter(store_client, "tracked-app")
    assert points(adapter) == {}
    adapter.update(RecoveryPoint("s1", "10620414156524534001|3|"))
    adapter.update(RecoveryPoint("s2", "1|5|,2|7|"))
    adapter.update(RecoveryPoint("s1", "10620414156524534001|4|"))
    other = SOWRecoveryPointAdapter(store_client, "another-app")
    other.update(RecoveryPoint("s1", "9|9|"))
    store_client.flush(5000)
    # the document shape of shared/protocol.md §8.1
    assert {"clientName": "tracked-app", "subId": "s2", "bookmark": "1|5|,2|7|"} in sow_records(
        store_client
    )
    reread = SOWRecoveryPointAdapter(connect("rp-store-2"), "tracked-app", 5000)
    assert points(reread) == {"s1": "10620414156524534001|4|", "s2": "1|5|,2|7|"}
    assert sorted(reread.next().sub_id for _ in range(3)) == ["", "s1", "s2"]
    reread.purge("s1")
    assert points(SOWRecoveryPointAdapter(store_client, "tracked-app")) == {"s2": "1|5|,2|7|"}
    reread.purge()
    assert points(SOWRecoveryPointAdapter(store_client, "tracked-app")) == {}
    assert points(SOWRecoveryPointAdapter(store_client, "another-app")) == {"s1": "9|9|"}
    reread.close()
    with pytest.raises(StoreError):
        reread.update(RecoveryPoint("s", "1|1|"))
    assert store_client.connected  # close_client=False


@pytest.mark.integration
def test_sow_adapter_behind_a_bookmark_store(connect: Callable[[str], Client]) -> None:
    def mk(b: str) -> Message:
        return Message(header={"c": "p", "bm": b, "sub_id": "orders"}, data=b"{}")

    store_client = connect("rp")
    store = MemoryBookmarkStore(SOWRecoveryPointAdapter(store_client, "app", close_client=True))
    for b in ("7|1|", "8|1|", "7|2|"):
        m = mk(b)
        store.log(m)
        store.discard_message(m)
    assert store.get_most_recent("orders") == "7|2|,8|1|"
    store_client.flush(5000)
    store.close()
    assert not store_client.connected
    restarted = MemoryBookmarkStore(SOWRecoveryPointAdapter(connect("rp2"), "app"))
    assert restarted.get_most_recent("orders") == "7|2|,8|1|"
    assert restarted.is_duplicate(mk("7|2|"))


@pytest.mark.integration
def test_sow_adapter_with_an_ha_store_client(server: ServerThread) -> None:
    with HAClient("rp-ha") as store_client:
        store_client.get_server_chooser().add(server.uri("tcp", "json"))
        store_client.connect_and_logon()
        adapter = SOWRecoveryPointAdapter(store_client, "ha-app")
        adapter.update(RecoveryPoint("s", "3|3|"))
        store_client.flush(5000)
        assert points(SOWRecoveryPointAdapter(store_client, "ha-app")) == {"s": "3|3|"}
        adapter.purge()
        assert points(SOWRecoveryPointAdapter(store_client, "ha-app")) == {}


@pytest.mark.integration
def test_sow_adapter_use_timestamp(connect: Callable[[str], Client]) -> None:
    client = connect("rp")
    SOWRecoveryPointAdapter(client, "app").update(RecoveryPoint("s", "1|5|"))
    SOWRecoveryPointAdapter(client, "app2", timestamp_field="updated").update(
        RecoveryPoint("s", "1|6|")
    )
    client.flush(5000)
    stamped = points(SOWRecoveryPointAdapter(client, "app", 5000, True))["s"]
    head, stamp = stamped.split(",")
    assert head == "1|5|"
    assert isinstance(parse_bookmark(stamp), Timestamp)  # the record's last-update time
    assert points(SOWRecoveryPointAdapter(client, "app", 5000, False)) == {"s": "1|5|"}
    own = points(
        SOWRecoveryPointAdapter(client, "app2", use_timestamp=True, timestamp_field="updated")
    )
    assert own["s"].startswith("1|6|,") and isinstance(
        parse_bookmark(own["s"].split(",")[1]), Timestamp
    )
    record = next(r for r in sow_records(client) if r["clientName"] == "app2")
    assert set(record) == {"clientName", "subId", "bookmark", "updated"}


@pytest.mark.integration
def test_sow_adapter_custom_topic_and_fields() -> None:
    config = default_config(tcp_port=0, ws_port=0)
    config = dataclasses.replace(
        config,
        sow_topics=(
            *config.sow_topics,
            SowTopicConfig("/app/points", "json", keys=("/app", "/sid")),
        ),
    )
    with ServerThread(config) as server, Client("custom-rp") as client:
        client.connect(server.uri("tcp", "json"))
        client.logon()
        options: dict[str, Any] = {
            "topic": "/app/points",
            "client_name_field": "app",
            "sub_id_field": "sid",
        }
        adapter = SOWRecoveryPointAdapter(client, "it's-me", bookmark_field="bm", **options)
        adapter.update(RecoveryPoint("s'1", "1|1|"))
        adapter.update(RecoveryPoint("s2", "1|2|"))
        client.flush(5000)
        assert sow_records(client, "/app/points")[0] == {
            "app": "it's-me",
            "sid": "s'1",
            "bm": "1|1|",
        }
        again = SOWRecoveryPointAdapter(client, "it's-me", bookmark_field="bm", **options)
        assert points(again) == {"s'1": "1|1|", "s2": "1|2|"}
        again.purge("s'1")  # quotes in names are escaped in the filter
        assert points(
            SOWRecoveryPointAdapter(client, "it's-me", bookmark_field="bm", **options)
        ) == {"s2": "1|2|"}


@pytest.mark.integration
def test_sow_adapter_update_failure_raises_or_logs(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with Client("rp-fail-1") as throwing_client, Client("rp-fail-2") as logging_client:
        for client in (throwing_client, logging_client):
            client.connect(server.uri("tcp", "json"))
            client.logon()
        throwing = SOWRecoveryPointAdapter(throwing_client, "app", update_failure_throws=True)
        quiet = SOWRecoveryPointAdapter(logging_client, "app", update_failure_throws=False)
        seen: list[BaseException] = []
        quiet.set_exception_listener(seen.append)
        assert quiet.get_exception_listener() is not None
        server.stop()
        wait_for(lambda: not throwing_client.connected and not logging_client.connected)
        with pytest.raises(StoreError) as info:
            throwing.update(RecoveryPoint("s", "1|1|"))
        assert info.value.__cause__ is not None
        with caplog.at_level(logging.WARNING, logger="ampsclient.stores.recovery"):
            quiet.update(RecoveryPoint("s", "1|1|"))  # logged, not raised
        assert "recovery point update" in caplog.text
        assert len(seen) == 1
        with pytest.raises(StoreError):
            quiet.purge("s")  # an explicit purge always reports failure


@pytest.mark.integration
def test_sow_adapter_needs_a_connected_client() -> None:
    with Client("never-connected") as client, pytest.raises(StoreError):
        SOWRecoveryPointAdapter(client, "app")
    with pytest.raises(ValueError, match="tracked"):
        SOWRecoveryPointAdapter(Client("x"), "")


# ============================================================================== conflating


class RecordingDelegate:
    """Records calls; fails the test (via ``violations``) if two calls ever overlap."""

    def __init__(self, *, slow: float = 0.0, stored: dict[str, str] | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.violations = 0
        self.slow = slow
        self.stored = stored or {}
        self.changed = threading.Condition()
        self._inside = False
        self._guard = threading.Lock()

    def _enter(self) -> None:
        with self._guard:
            if self._inside:
                self.violations += 1
            self._inside = True

    def _leave(self, call: tuple[str, Any]) -> None:
        with self._guard:
            self._inside = False
        with self.changed:
            self.calls.append(call)
            self.changed.notify_all()

    def update(self, point: RecoveryPoint) -> None:
        self._enter()
        time.sleep(self.slow)  # widen the window for overlapping calls
        self.stored[point.sub_id] = point.bookmark
        self._leave(("update", (point.sub_id, point.bookmark)))

    def purge(self, sub_id: str | None = None) -> None:
        self._enter()
        self._leave(("purge", sub_id))

    def prune(self) -> None:
        self._enter()
        self._leave(("prune", None))

    def close(self) -> None:
        self._enter()
        self._leave(("close", None))

    def __iter__(self) -> Iterator[RecoveryPoint]:
        self._enter()
        result = [RecoveryPoint(k, v) for k, v in self.stored.items()]
        self._leave(("iter", None))
        return iter(result)

    def updates(self) -> list[tuple[str, str]]:
        return [args for name, args in self.calls if name == "update"]

    def wait_updates(self, n: int, timeout: float = 10.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.updates()) >= n, timeout)

    def saw_update_within(self, seconds: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.updates()) > 0, seconds)


def test_conflating_defaults_and_official_argument_names() -> None:
    delegate = RecordingDelegate()
    adapter = ConflatingRecoveryPointAdapter(
        delegate, update_threshold=10, timeout_millis=2000, update_interval_millis=50
    )
    defaults = ConflatingRecoveryPointAdapter(RecordingDelegate())
    assert (
        defaults.update_threshold,
        defaults.timeout_millis,
        defaults.update_interval_millis,
    ) == (
        10,
        2000,
        50,
    )
    defaults.close()
    adapter.close()
    with pytest.raises(ValueError, match="delegate"):
        ConflatingRecoveryPointAdapter(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        ConflatingRecoveryPointAdapter(RecordingDelegate(), 0)


def test_conflating_twenty_updates_fewer_calls_latest_wins() -> None:
    delegate = RecordingDelegate()
    adapter = ConflatingRecoveryPointAdapter(delegate, 10, 60_000, 10)
    for i in range(1, 21):
        adapter.update(RecoveryPoint("s", f"1|{i}|"))
    delegate.wait_updates(1)
    adapter.close()
    updates = delegate.updates()
    assert 1 <= len(updates) <= 2
    assert updates[-1] == ("s", "1|20|")
    assert delegate.calls[-1] == ("close", None)
    assert adapter.statistics() == {"forwarded": len(updates), "pending": 0}


def test_conflating_threshold_is_per_subscription() -> None:
    delegate = RecordingDelegate()
    adapter = ConflatingRecoveryPointAdapter(delegate, 5, 60_000, 10)
    for i in range(1, 5):
        adapter.update(RecoveryPoint("a", f"1|{i}|"))
    for sub in "bcd":
        adapter.update(RecoveryPoint(sub, "2|1|"))
    assert not delegate.saw_update_within(0.15)  # 7 updates, but no subscription has 5
    assert adapter.pending_count() == 4
    adapter.update(RecoveryPoint("a", "1|5|"))
    delegate.wait_updates(1)
    assert delegate.updates() == [("a", "1|5|")]
    assert adapter.pending_count() == 3
    adapter.close()
    assert sorted(delegate.updates()[1:]) == [("b", "2|1|"), ("c", "2|1|"), ("d", "2|1|")]
    with pytest.raises(StoreError):
        adapter.update(RecoveryPoint("a", "1|6|"))
    adapter.close()  # idempotent


@pytest.mark.serial
def test_conflating_timeout_from_the_first_pending_update() -> None:
    delegate = RecordingDelegate()
    adapter = ConflatingRecoveryPointAdapter(delegate, 1000, 150, 10)
    start = time.monotonic()
    adapter.update(RecoveryPoint("s", "1|1|"))
    adapter.update(RecoveryPoint("s", "1|2|"))
    delegate.wait_updates(1)
    elapsed = time.monotonic() - start
    assert delegate.updates() == [("s", "1|2|")]
    assert 0.14 <= elapsed < 5
    adapter.close()


def test_conflating_purge_drops_pending_and_passes_through() -> None:
    delegate = RecordingDelegate()
    adapter = ConflatingRecoveryPointAdapter(delegate, 1000, 60_000, 10)
    adapter.update(RecoveryPoint("a", "1|1|"))
    adapter.update(RecoveryPoint("b", "1|1|"))
    adapter.purge("a")
    assert delegate.calls == [("purge", "a")]
    adapter.update(RecoveryPoint("c", "1|1|"))
    adapter.purge()
    adapter.prune()
    adapter.close()
    assert delegate.calls == [("purge", "a"), ("purge", None), ("prune", None), ("close", None)]


def test_conflating_flush_and_iteration() -> None:
    delegate = RecordingDelegate(stored={"x": "5|5|"})
    adapter = ConflatingRecoveryPointAdapter(delegate, 1000, 60_000, 10)
    assert points(adapter) == {"x": "5|5|"}
    assert adapter.next() == RecoveryPoint("x", "5|5|")
    assert adapter.next() == EMPTY_POINT
    adapter.update(RecoveryPoint("y", "1|1|"))
    adapter.flush()
    assert delegate.updates() == [("y", "1|1|")]
    adapter.close()


def test_conflating_never_calls_the_delegate_concurrently() -> None:
    delegate = RecordingDelegate(slow=0.0005)
    adapter = ConflatingRecoveryPointAdapter(delegate, 3, 5, 1)
    stop = threading.Event()

    def hammer(k: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            adapter.update(RecoveryPoint(f"s{k}-{i % 5}", f"1|{i}|"))
            if i % 50 == 0:
                adapter.purge(f"s{k}-0")
            if i % 70 == 0:
                adapter.prune()
            if i % 90 == 0:
                adapter.flush()

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    delegate.wait_updates(200)
    stop.set()
    for t in threads:
        t.join()
    adapter.close()
    assert delegate.violations == 0
    assert delegate.calls[-1] == ("close", None)


def test_conflating_delegate_failure_is_logged_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Flaky(RecordingDelegate):
        def __init__(self) -> None:
            super().__init__()
            self.failures = 1

        def update(self, point: RecoveryPoint) -> None:
            if self.failures:
                self.failures -= 1
                raise StoreError("server down")
            super().update(point)

    delegate = Flaky()
    adapter = ConflatingRecoveryPointAdapter(delegate, 1, 50, 5)
    errors: list[BaseException] = []
    adapter.set_exception_listener(errors.append)
    with caplog.at_level(logging.WARNING, logger="ampsclient.stores.recovery"):
        adapter.update(RecoveryPoint("s", "1|1|"))
        delegate.wait_updates(1)
    assert delegate.updates() == [("s", "1|1|")]
    assert len(errors) == 1 and "server down" in caplog.text
    adapter.close()


def test_conflating_behind_a_memory_store(tmp_path: Path) -> None:
    delegate = RecordingDelegate()
    store = MemoryBookmarkStore(ConflatingRecoveryPointAdapter(delegate, 10, 60_000, 10))
    for i in range(1, 21):
        m = Message(header={"c": "p", "bm": f"7|{i}|", "sub_id": "s"}, data=b"")
        store.log(m)
        store.discard_message(m)
    store.close()  # flushes the conflated point, then closes the delegate
    assert delegate.updates()[-1] == ("s", "7|20|")
    assert len(delegate.updates()) <= 3
    assert delegate.calls[-1] == ("close", None)


# ============================================================================== interop

_names = iter(range(1_000_000))


def _official_client(amps: Any, server: ServerThread, prefix: str) -> Any:
    client = amps.Client(f"{prefix}-{next(_names)}-{time.time_ns()}")
    client.connect(server.uri("tcp", "json"))
    client.logon()
    return client


@pytest.mark.interop
@pytest.mark.integration
def test_official_adapter_reads_what_ours_wrote(server: ServerThread) -> None:
    amps: Any = pytest.importorskip("AMPS")
    ours = {"s1": "10620414156524534001|4|", "s2": "1|5|,2|7|", "s3": "0"}
    with Client("rp-ours") as client:
        client.connect(server.uri("tcp", "json"))
        client.logon()
        adapter = SOWRecoveryPointAdapter(client, "interop-app")
        for sub, b in ours.items():
            adapter.update(RecoveryPoint(sub, b))
        client.flush(5000)
    official_client = _official_client(amps, server, "rp-official")
    try:
        official = amps.SOWRecoveryPointAdapter(official_client, "interop-app", 200)
        got = [official.next() for _ in ours]  # never past the end: that crashes it
        assert {p.get_sub_id(): p.get_bookmark() for p in got} == ours
    finally:
        official_client.close()


@pytest.mark.interop
@pytest.mark.integration
def test_ours_reads_what_the_official_adapter_wrote(server: ServerThread) -> None:
    amps: Any = pytest.importorskip("AMPS")
    official_client = _official_client(amps, server, "rp-official")
    try:
        # the official adapter's update() cannot be called from Python (it raises
        # UnicodeDecodeError); its MemoryBookmarkStore drives it natively instead
        store = amps.MemoryBookmarkStore(
            amps.SOWRecoveryPointAdapter(official_client, "official-app", 200)
        )
        for sub, b in (("s1", "11|1|"), ("s1", "11|2|"), ("s2", "22|5|")):
            m = amps.Message()
            m.set_sub_id(sub)
            m.set_bookmark(b)
            store.log(m)
            store.discard_message(m)
        official_client.flush()
    finally:
        official_client.close()
    with Client("rp-ours") as client:
        client.connect(server.uri("tcp", "json"))
        client.logon()
        assert points(SOWRecoveryPointAdapter(client, "official-app")) == {
            "s1": "11|2|",
            "s2": "22|5|",
        }
        restarted = MemoryBookmarkStore(SOWRecoveryPointAdapter(client, "official-app"))
        assert restarted.get_most_recent("s1") == "11|2|"


@pytest.mark.interop
def test_official_recovery_points_from_a_python_adapter() -> None:
    """An adapter written for the official client (``next()`` returns ``AMPS.RecoveryPoint``
    objects, then the official end marker ``AMPS.RecoveryPoint()``) works with our store."""
    amps: Any = pytest.importorskip("AMPS")
    saved = [amps.RecoveryPoint("s", "1|3|,2|5|"), amps.RecoveryPoint("t", "7|7|")]

    class OfficialStyle:
        def next(self) -> Any:
            return saved.pop(0) if saved else amps.RecoveryPoint()

        def update(self, point: Any) -> None:
            pass

        def purge(self, sub_id: str | None = None) -> None:
            pass

        def close(self) -> None:
            pass

    store = MemoryBookmarkStore(OfficialStyle())
    assert store.get_most_recent("s") == "1|3|,2|5|"
    assert store.get_most_recent("t") == "7|7|"
