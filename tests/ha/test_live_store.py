"""The bookmark store's side of ``live`` subscriptions (``set_live``, persisted acks,
``rewind_live``), message by message, on the memory store and the file store (real files)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ampsclient.ha.bookmarks import mark_live, resume_point
from ampsclient.stores.bookmark import MemoryBookmarkStore, MMapBookmarkStore
from ampsclient.stores.bookmark.live import capped
from ampsclient.stores.recovery import FileRecoveryPointAdapter


class Delivered:
    def __init__(self, sub_id: str, bookmark: str) -> None:
        self.sub_id, self.bookmark = sub_id, bookmark

    def get_sub_id(self) -> str:
        return self.sub_id

    def get_bookmark(self) -> str:
        return self.bookmark


def process(store: MemoryBookmarkStore, sub_id: str, *bookmarks: str) -> None:
    for bm in bookmarks:
        message = Delivered(sub_id, bm)
        assert store.log(message) > 0, f"{bm} is new"
        store.discard_message(message)


@pytest.mark.parametrize(
    ("recovery", "persisted", "expected"),
    [
        ("7|10|", "7|6|", "7|6|"),  # the application is ahead of the server's disk
        ("7|3|", "7|6|", "7|3|"),  # behind it: the discarded point stands
        ("7|6|", "7|6|", "7|6|"),
        ("7|10|,8|4|", "7|6|", "8|4|,7|6|"),
        ("7|10|", "9|6|", "7|10|,9|6|"),  # not comparable: both, the server takes the older
        ("0", "7|6|", "0"),
        ("7|10|", "0", "0"),  # no ack yet for a subscription from EPOCH
        ("7|10|", "", "7|10|"),
    ],
)
def test_capped(recovery: str, persisted: str, expected: str) -> None:
    assert capped(recovery, persisted) == expected


def test_a_live_subscription_resumes_from_the_persisted_point() -> None:
    store = MemoryBookmarkStore()
    store.set_live("s")
    process(store, "s", "1|1|", "1|2|")
    assert store.get_most_recent("s") == "0", "no persisted ack yet: from its start"
    store.persisted("s", "1|2|")
    assert store.get_most_recent("s") == "1|2|"
    process(store, "s", "1|3|", "1|4|", "1|5|")
    assert store.get_most_recent("s") == "1|2|", "discarded 5, persisted 2"
    store.persisted("s", "1|4|")
    assert store.get_most_recent("s") == "1|4|"
    # behind the server: the discarded point is older than the persisted one
    pending = Delivered("s", "1|6|")
    assert store.log(pending) > 0
    store.persisted("s", "1|7|")
    assert store.get_most_recent("s") == "1|5|"
    store.discard_message(pending)
    assert store.get_most_recent("s") == "1|6|"


def test_without_live_a_persisted_ack_behind_delivery_is_ignored() -> None:
    store = MemoryBookmarkStore()
    process(store, "s", "1|1|", "1|2|", "1|3|")
    store.persisted("s", "1|2|")
    assert store.get_most_recent("s") == "1|3|"


def test_rewind_makes_what_followed_the_persisted_point_unseen() -> None:
    store = MemoryBookmarkStore()
    store.set_live("s")
    process(store, "s", "1|1|", "1|2|", "1|3|")
    store.persisted("s", "1|1|")
    for bm in ("1|1|", "1|2|", "1|3|"):
        assert store.is_duplicate(Delivered("s", bm))
    store.rewind_live("s")
    assert store.is_duplicate(Delivered("s", "1|1|"))
    assert not store.is_duplicate(Delivered("s", "1|2|"))
    assert not store.is_duplicate(Delivered("s", "1|3|"))
    assert store.get_most_recent("s") == "1|1|"
    process(store, "s", "1|2|", "1|3|")  # delivered to the application again
    store.persisted("s", "1|3|")
    assert store.get_most_recent("s") == "1|3|"


def test_rewind_leaves_other_subscriptions_alone() -> None:
    store = MemoryBookmarkStore()
    process(store, "plain", "1|1|", "1|2|")
    store.rewind_live("plain")
    assert store.is_duplicate(Delivered("plain", "1|2|"))
    assert store.get_most_recent("plain") == "1|2|"


def test_two_publishers() -> None:
    store = MemoryBookmarkStore()
    store.set_live("s")
    process(store, "s", "1|1|", "2|1|")
    store.persisted("s", "2|1|")
    assert set(store.get_most_recent("s").split(",")) == {"1|1|", "2|1|"}
    process(store, "s", "1|2|", "2|2|")  # not persisted
    assert set(store.get_most_recent("s").split(",")) == {"1|2|", "2|1|"}


def test_the_file_store_writes_the_capped_point_and_rewinds_on_restart(tmp_path: Path) -> None:
    path = tmp_path / "bm.mmap"
    store = MMapBookmarkStore(path)
    store.set_live("s")
    process(store, "s", "1|1|", "1|2|")
    store.persisted("s", "1|2|")
    process(store, "s", "1|3|", "1|4|")
    assert store.get_most_recent("s") == "1|2|"
    store.close()
    # what the file holds: read by a fresh adapter
    with FileRecoveryPointAdapter(path) as adapter:
        points = {p.sub_id: p.bookmark for p in adapter}
    assert points == {"s": "1|2|"}
    again = MMapBookmarkStore(path)
    try:
        assert again.get_most_recent("s") == "1|2|"
        again.set_live("s")  # the resubscription after the restart
        assert again.is_duplicate(Delivered("s", "1|2|"))
        assert not again.is_duplicate(Delivered("s", "1|3|"))
        process(again, "s", "1|3|")
        assert again.get_most_recent("s") == "1|2|", "capped until the next persisted ack"
    finally:
        again.close()


class DuckStore:
    """A duck-typed store (no BookmarkStore base): neither set_live nor rewind_live."""

    def get_most_recent(self, sub_id: str) -> str:
        return "5|5|"


def test_a_duck_typed_store_is_warned_about_and_still_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    duck: Any = DuckStore()
    with caplog.at_level(logging.WARNING, logger="ampsclient.stores.bookmark"):
        mark_live(duck, "s", "live,timestamp")
    assert "DuckStore does not track persisted points" in caplog.text
    assert resume_point(duck, "s", "0") == "5|5|"


def test_mark_live_reads_the_option() -> None:
    store = MemoryBookmarkStore()
    mark_live(store, "plain", "timestamp")
    mark_live(store, "live", "timestamp,live")
    process(store, "plain", "1|1|")
    process(store, "live", "1|1|")
    assert store.get_most_recent("plain") == "1|1|"
    assert store.get_most_recent("live") == "0", "capped at its start until a persisted ack"
