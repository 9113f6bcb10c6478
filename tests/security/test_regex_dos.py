"""One hostile regex must not stop the server (issue 31).

A content filter ``/sym LIKE '^(a+)+$'`` or a regex topic ``^(a+)+$`` plus one publish of
``"a" * 40 + "!"`` used to run Python's backtracking ``re`` on the event loop for ever: every
other client stopped. Patterns are now matched by RE2 (linear time) or, for the constructs only
a backtracking engine has (backreferences, lookaround), with a per-evaluation time limit.

Each test runs the server in its own process (so a hung one can be killed) and bounds every
wait: before the fix they fail at a deadline instead of hanging.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import AMPS
import pytest

from ampsclient.exceptions import BadFilterError, BadRegexTopicError
from ampsclient.sync import Client
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import Inbox, wait_for

pytestmark = pytest.mark.integration

EVIL = "a" * 40 + "!"
DEADLINE = 1.0
"""Seconds an unrelated client's logon + subscribe + publish + delivery may take."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(data_dir=tmp_path / "server", die_with_parent=True).start()
    try:
        yield proc
    finally:
        proc.kill()


def bounded(server: ServerProcess, work: Callable[[], Any], timeout: float) -> Any:
    """``work()`` in a thread; a server that does not answer in ``timeout`` s is killed."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(work).result(timeout)
    except FutureTimeout:
        server.kill()  # unblocks the worker; the test fails below
        pytest.fail(f"the server did not answer within {timeout} s")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def unrelated_round(server: ServerProcess, tag: str) -> float:
    """Seconds an unrelated client takes to log on, subscribe, publish and get its message."""

    def work() -> float:
        start = time.monotonic()
        with Client(f"victim-{tag}") as client:
            client.connect(server.uri(), timeout=5.0)
            client.logon(5000)
            inbox = Inbox()
            client.subscribe(inbox, f"calm-{tag}", timeout=5000)
            client.publish(f"calm-{tag}", json.dumps({"n": tag}))
            inbox.wait(lambda box: len(box.messages) >= 1, timeout=5.0)
            elapsed = time.monotonic() - start
            assert inbox.payloads() == [{"n": tag}]
        return elapsed

    elapsed: float = bounded(server, work, 10.0)
    return elapsed


def attack(
    server: ServerProcess, subscriptions: list[tuple[str, str | None]], publishes: list[Any]
) -> tuple[list[Inbox], float]:
    """Subscribe, publish ``(topic, body)`` pairs, then a marker; the inboxes once the marker
    arrived and the seconds from the first publish to the marker."""

    def work() -> tuple[list[Inbox], float]:
        with Client("attacker") as client:
            client.connect(server.uri(), timeout=5.0)
            client.logon(5000)
            inboxes = []
            for topic, filter_ in subscriptions:
                inbox = Inbox()
                client.subscribe(inbox, topic, filter_, timeout=5000)
                inboxes.append(inbox)
            marker = Inbox()
            client.subscribe(marker, "marker", timeout=5000)
            start = time.monotonic()
            for topic, body in publishes:
                client.publish(topic, body)
            client.publish("marker", "{}")
            marker.wait(lambda box: len(box.messages) >= 1, timeout=5.0)
            return inboxes, time.monotonic() - start

    result: tuple[list[Inbox], float] = bounded(server, work, 15.0)
    return result


def test_an_evil_filter_and_regex_topic_do_not_stop_the_server(server: ServerProcess) -> None:
    (by_filter, by_topic), took = attack(
        server,
        [("evil", "/sym LIKE '^(a+)+$'"), ("^(a+)+$", None)],
        [
            ("evil", json.dumps({"sym": EVIL})),  # catastrophic for a backtracking engine
            (EVIL, json.dumps({"n": 1})),  # the same, as a topic name
            ("evil", json.dumps({"sym": "aaaa"})),  # matches: the pattern still works
            ("aaa", json.dumps({"n": 2})),
        ],
    )
    assert took < DEADLINE, took
    # the marker came after them on one connection: nothing else will arrive
    assert by_filter.payloads() == [{"sym": "aaaa"}]
    assert by_topic.payloads() == [{"n": 2}]
    assert [m.get_topic() for m in by_topic.messages] == ["aaa"]
    for tag in ("first", "second"):
        assert unrelated_round(server, tag) < DEADLINE


def test_backtracking_only_constructs_are_time_limited(server: ServerProcess) -> None:
    # lookahead: RE2 cannot run it, so the time-limited engine does; each of these values
    # would take minutes of backtracking
    heavy = [("evil", json.dumps({"sym": "a" * (40 + i) + "c"})) for i in range(10)]
    (hostile, backref, nocase), took = attack(
        server,
        [
            ("evil", "/sym LIKE '(?:(a|aa)+)+(?=b)'"),
            ("evil", "/sym LIKE '(.)\\1'"),  # the LIKE page's own example (a backreference)
            ("evil", "/sym LIKE '(?i)^us$'"),  # the regular-expressions page's example
        ],
        [
            *heavy,
            ("evil", json.dumps({"sym": "aab"})),
            ("evil", json.dumps({"sym": "abc"})),
            ("evil", json.dumps({"sym": "uS"})),
        ],
    )
    assert took < DEADLINE, took
    # the time-limited pattern ran out of time on the heavy values (no match), and after three
    # such evaluations it was disabled: "aab", which it matches, is not delivered either
    assert hostile.payloads() == []
    assert backref.payloads() == [json.loads(body) for _, body in heavy] + [{"sym": "aab"}]
    assert nocase.payloads() == [{"sym": "uS"}]
    assert unrelated_round(server, "after") < DEADLINE


def test_a_bad_filter_says_what_is_wrong(server: ServerProcess) -> None:
    with Client("ours") as client:
        client.connect(server.uri(), timeout=5.0)
        client.logon(5000)
        with pytest.raises(BadFilterError) as caught:
            client.subscribe("t", "/x = ", timeout=5000)
        assert caught.value.reason == "bad filter"
        assert caught.value.ack.header["reason_detail"] == "unexpected end of filter (at offset 5)"
        assert str(caught.value) == "bad filter: unexpected end of filter (at offset 5)"
        with pytest.raises(BadFilterError) as caught:
            client.subscribe("t", "/x LIKE '(?=b)(a{100}){100}'", timeout=5000)
        detail = caught.value.ack.header["reason_detail"]
        assert "invalid perl operator: (?=" in detail and "at most 1000" in detail, detail
        with pytest.raises(BadRegexTopicError) as caught_topic:
            client.subscribe("^(a", timeout=5000)
        assert caught_topic.value.reason == "bad regex topic"
        detail = caught_topic.value.ack.header["reason_detail"]
        assert detail == "bad regex topic '^(a': missing ): ^(a"
    # the official client ignores the extra field: its exception and message are unchanged
    official = AMPS.Client("official")
    official.connect(server.uri())
    official.logon(5000)
    try:
        with pytest.raises(AMPS.BadFilterException, match="bad filter '/x = '"):
            for _ in official.subscribe("t", "/x = "):
                break
        with pytest.raises(AMPS.BadRegexTopicException):
            for _ in official.subscribe("^(a"):
                break
    finally:
        official.disconnect()
    # logged once per refused subscription (ours and the official client's)
    # (the lines reach us through a reader thread: wait for them, then check there are 2)
    wait_for(
        lambda: sum("unexpected end of filter" in line for line in server.stderr_lines) >= 2,
        what="the two log lines",
    )
    assert sum("unexpected end of filter" in line for line in server.stderr_lines) == 2
