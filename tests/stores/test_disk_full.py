"""Issue #32, a full disk under the client's file stores (publish, bookmark): a real
size-limited tmpfs the test mounts (skipped where it may not). The publish that cannot be
stored raises a typed ``StoreError`` (never a ``SIGBUS``: segments are preallocated before
they are mapped) and is not sent; messages stored before it are delivered; once the server's
acks free the store's segments, publishing works again; every message is delivered exactly
once, in order. The bookmark store: see its test."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampsclient import Client, HAClient
from ampsclient.exceptions import StoreError
from ampsclient.stores import MMapBookmarkStore
from ampsclient.stores.publish import FilePublishStore
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

PAD = "x" * 1000


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (skips the test where mounting
    is not allowed)."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def on_full_disk(full: Path, *paths: Path) -> Iterator[None]:
    """Each of ``paths`` is a bind mount of a file on the full filesystem ``full`` while the
    block runs: whatever is written there fails with ``ENOSPC``."""
    mounted: list[Path] = []
    try:
        for n, path in enumerate(paths):
            target = full / f"f{n}"
            path.touch()
            done = subprocess.run(
                ["mount", "--bind", str(target), str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
            mounted.append(path)
        yield
    finally:
        for path in mounted:
            subprocess.run(["umount", str(path)], check=False)
            path.unlink(missing_ok=True)


class Inbox:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[int] = []

    def __call__(self, message: Any) -> None:
        with self.lock:
            self.seen.append(json.loads(message.get_data())["i"])


def fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` with one file; return it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_refuses_the_publish_and_publishing_resumes(tmp_path: Path) -> None:
    """The disk fills up with another file: the publish that cannot be stored raises
    ``StoreError`` and is not sent; what was stored is delivered; once the file is removed,
    publishing goes on where it stopped."""
    inbox = Inbox()
    with (
        small_filesystem(tmp_path / "fs", "8m") as fs,
        ServerThread(default_config(tcp_port=0, ws_port=0)) as server,
        Client("full-disk-sub") as sub,
    ):
        sub.connect(server.uri("tcp", "json"))
        sub.logon(5000)
        sub.subscribe(inbox, "t")
        store = FilePublishStore(fs / "store", fsync="never", segment_size=1 << 20)
        filler = fill(fs)
        publisher = HAClient("full-disk-pub")
        publisher.set_publish_store(store)
        publisher.get_server_chooser().add(server.uri("tcp", "json"))
        try:
            publisher.connect_and_logon()
            stored = 0
            with pytest.raises(StoreError, match="No space left on device"):
                for i in range(50_000):
                    publisher.publish("t", json.dumps({"i": i, "pad": PAD}))
                    stored += 1
            assert 0 < stored < 50_000
            publisher.publish_flush(30_000)  # what was stored is persisted...
            wait_for(lambda: len(inbox.seen) >= stored, what="the stored messages")
            assert inbox.seen == list(range(stored))  # ...and the refused one was not sent
            filler.unlink()  # space returns
            for i in range(stored, stored + 3_000):
                publisher.publish("t", json.dumps({"i": i, "pad": PAD}))
            publisher.publish_flush(30_000)
            wait_for(lambda: len(inbox.seen) >= stored + 3_000, what="every message")
            assert inbox.seen == list(range(stored + 3_000))  # once each, in order
        finally:
            publisher.close()


def test_persisted_segments_are_reclaimed_when_the_disk_is_full(tmp_path: Path) -> None:
    """The store itself fills the disk with messages not yet persisted. Once they are
    persisted, the next store reclaims their segments to make a new one (it used to keep
    refusing: old segments were deleted only after a new one had been made)."""
    with small_filesystem(tmp_path / "fs", "3584k") as fs:
        store = FilePublishStore(fs / "store", fsync="never", segment_size=1 << 20)
        try:
            payload = b"x" * 1000
            last = 0
            with pytest.raises(StoreError, match="No space left on device"):
                for _ in range(10_000):
                    last = store.store(lambda _s: payload)
            assert last > 2_000  # a few segments' worth
            store.discard_up_to(last)  # the server's persisted acks
            for _ in range(5_000):  # more than the disk holds, one segment at a time
                store.discard_up_to(store.store(lambda _s: payload))
            assert store.unpersisted_count == 0
        finally:
            store.close()


def test_a_full_disk_under_the_file_bookmark_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``MMapBookmarkStore`` whose file system fills while a subscriber discards what it
    processed: the discard that cannot be stored raises ``StoreError`` (the process goes on,
    no ``SIGBUS``: the store writes lines, it maps nothing), one warning says so until a write
    succeeds, one when it does; no line is half written (a torn line used to stay and later
    lines glued onto it, so the file could not be opened again). Reopened, the store resumes
    the subscription after the last message discarded: nothing of it again, nothing lost (a
    marker published after it is the next message)."""
    published = 600
    with (
        small_filesystem(tmp_path / "fs", "64k") as fs,
        ServerThread(default_config(tcp_port=0, ws_port=0)) as server,
        caplog.at_level(logging.WARNING, "ampsclient.stores"),
    ):
        with Client("bm-disk-full-pub") as pub:
            pub.connect(server.uri("tcp", "json"))
            pub.logon(5000)
            for i in range(published):
                pub.publish("t", json.dumps({"i": i}))
            pub.flush(10_000)
        store = MMapBookmarkStore(fs / "points")
        got: list[Any] = []
        with HAClient("bm-disk-full-sub", bookmark_store=store) as sub:
            sub.get_server_chooser().add(server.uri("tcp", "json"))
            sub.connect_and_logon()
            sub.bookmark_subscribe(got.append, "t", "0", sub_id="s")
            wait_for(lambda: len(got) >= published, what="the replay")
            for m in got[:200]:  # before
                store.discard_message(m)
            filler = fill(fs)
            refused = 0
            for m in got[200:400]:  # during
                try:
                    store.discard_message(m)
                except StoreError as exc:
                    assert "No space left on device" in str(exc)
                    refused += 1
            assert refused > 0
            filler.unlink()  # space returns
            for m in got[400:published]:  # after
                store.discard_message(m)
            last = got[published - 1].get_bookmark()
            assert store.get_most_recent("s") == last
        store.close()
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("ampsclient.stores")]
        assert len(lines) == 2, lines
        assert "cannot write recovery points" in lines[0]
        assert f"written again after {refused} failed update(s)" in lines[1]
        reopened = MMapBookmarkStore(fs / "points")  # every line whole: it opens
        assert reopened.get_most_recent("s") == last
        again: list[int] = []
        with HAClient("bm-disk-full-sub", bookmark_store=reopened) as sub:
            sub.get_server_chooser().add(server.uri("tcp", "json"))
            sub.connect_and_logon()
            sub.bookmark_subscribe(
                lambda m: again.append(json.loads(m.get_data())["i"]), "t", "recent", sub_id="s"
            )
            sub.publish("t", json.dumps({"i": -1}))  # the marker
            wait_for(lambda: -1 in again, what="the marker")
        assert again == [-1]
        reopened.close()
