"""Issue #32, a slow or stalled disk: the journal's fsync hangs (an injected gate in front of
``os.fsync``, the only fault injected; the server, its sockets and its journal files are
real). Persisted acks wait for it and none is sent early; nothing else waits: a subscriber
gets the new message at once, a bookmark subscriber replays what was already durable, a new
client logs on. When the disk comes back the ack follows."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

Frame = tuple[dict[str, Any], bytes]


class StalledDisk:
    """``os.fsync`` that waits for :meth:`release` while :meth:`stall` is in force."""

    def __init__(self) -> None:
        self._real = os.fsync
        self._open = threading.Event()
        self._open.set()
        self.waiting = threading.Event()
        """Set once an fsync is held."""

    def fsync(self, fd: int) -> None:
        if not self._open.is_set():
            self.waiting.set()
            self._open.wait(30)  # bounded: a test that forgets to release still ends
        self._real(fd)

    def stall(self) -> None:
        self.waiting.clear()
        self._open.clear()

    def release(self) -> None:
        self._open.set()


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[StalledDisk]:
    fault = StalledDisk()
    monkeypatch.setattr(os, "fsync", fault.fsync)
    yield fault
    fault.release()


def start(tmp: Path) -> ServerThread:
    xml = f"""<AMPSConfig><Name>stalled</Name>
      <TransactionLog><JournalDirectory>{tmp / "journal"}</JournalDirectory>
        <Topic><Name>t</Name></Topic></TransactionLog>
      <Transports><Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Protocol>amps</Protocol></Transport></Transports></AMPSConfig>"""
    return ServerThread(parse_config(xml, base_dir=tmp), record_all_topics=False, fsync="always")


def read_until(raw: RawClient, done: Any, timeout: float = 10.0) -> list[Frame]:
    """Frames read until ``done(frames)`` holds (a deadline, not a sleep)."""
    frames: list[Frame] = []
    deadline = time.monotonic() + timeout
    while not done(frames):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out; got {[h for h, _ in frames]}")
        frames.extend(raw.read_some(1 << 16, timeout=left))
    return frames


def persisted(frames: list[Frame], seq: int) -> bool:
    return any(h.get("a") == "persisted" and int(h.get("s", 0)) >= seq for h, _ in frames)


def processed(frames: list[Frame], cid: str) -> bool:
    return any(h.get("a") == "processed" and h.get("cid") == cid for h, _ in frames)


def test_a_stalled_fsync_holds_persisted_acks_and_nothing_else(
    tmp_path: Path, disk: StalledDisk
) -> None:
    with start(tmp_path) as server:
        port = server.server.tcp_port
        with RawClient(port) as pub, RawClient(port) as live:
            pub.logon("pub")
            live.logon("live")
            live.send({"c": "subscribe", "cid": "L", "t": "t", "a": "processed"})
            read_until(live, lambda f: processed(f, "L"))
            pub.send({"c": "p", "t": "t", "s": 1, "a": "persisted"}, b'{"n":1}')
            read_until(pub, lambda f: persisted(f, 1))  # the disk works: durable
            read_until(live, lambda f: any(h.get("c") == "p" for h, _ in f))  # n=1

            disk.stall()
            started = time.monotonic()
            pub.send({"c": "p", "t": "t", "s": 2, "a": "persisted"}, b'{"n":2}')
            got = read_until(live, lambda f: any(h.get("c") == "p" for h, _ in f))
            assert [json.loads(b) for h, b in got if h.get("c") == "p"] == [{"n": 2}]
            assert disk.waiting.wait(10), "the group commit reached the stalled fsync"

            with RawClient(port) as newcomer:  # logons go on
                assert newcomer.logon("newcomer")["status"] == "success"
                newcomer.send({"c": "subscribe", "cid": "B", "t": "t", "bm": "0", "a": "processed"})
                replayed = read_until(  # what was durable before the stall replays now
                    newcomer, lambda f: any(h.get("c") == "p" for h, _ in f)
                )
                assert [json.loads(b) for h, b in replayed if h.get("c") == "p"] == [{"n": 1}]

            # the marker: a later command on the publisher's connection is answered while
            # the ack of the publish before it is still held (it would come first if sent)
            pub.send({"c": "subscribe", "cid": "M", "t": "other", "a": "processed"})
            marker = read_until(pub, lambda f: processed(f, "M"))
            assert not persisted(marker, 2), "a persisted ack went out before its fsync"
            assert time.monotonic() - started < 5.0  # all of it while the disk stalled

            disk.release()
            read_until(pub, lambda f: persisted(f, 2))
