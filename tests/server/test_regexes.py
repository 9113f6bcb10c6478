"""The one compile function for client- and configuration-supplied regexes (issue 31):
RE2 in linear time, a time-limited backtracking engine for what only it can do, a clear
refusal otherwise; and every user of regexes goes through it."""

from __future__ import annotations

import logging
import time

import pytest

from ampsclient_server_stub.engine.filters import FilterError, compile_filter
from ampsclient_server_stub.engine.topics import TopicError, compile_topic
from ampsclient_server_stub.regexes import (
    EVALUATION_LIMIT,
    MAX_TIMEOUTS,
    RegexError,
    SafeRegex,
    compile_regex,
)
from ampsclient_server_stub.security.users import UserEntry, UsersFileError

EVIL = "a" * 10_000 + "!"


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        # the AMPS guide's examples (regular-expressions and like-operator pages, FAQ)
        ("^IB.?$", "IBM", True),
        ("^IB.?$", "IBMX", False),
        (r"^90\..*", "90.5", True),
        ("(?i)^us$", "uS", True),
        ("(?i)^apple$", "aPpLe", True),
        ("TRADE$", "FXTRADE", True),
        ("^US.*TRADE$", "USTRADE", True),
        ("z", "zebra", True),  # unanchored search
        # RE2 syntax beyond the examples
        (r"\d{4}-\d{2}", "on 2026-11 at", True),
        (r"\bword\b", "a word here", True),
        (r"\Qa.b\E", "axb", False),
        ("[[:alpha:]]+", "abc", True),
        ("(?s)a.b", "a\nb", True),
        ("(?m)^b$", "a\nb\nc", True),
        ("é", "café", True),
    ],
)
def test_linear_patterns_match_as_pcre_does(pattern: str, text: str, expected: bool) -> None:
    regex = compile_regex(pattern)
    assert regex.linear
    assert regex.test(text) is expected


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        (r"(.)\1", "abbc", True),  # the like-operator page's backreference example
        (r"(.)\1", "abc", False),
        ("a(?=b)", "ab", True),
        ("a(?!b)", "ab", False),
        ("(?<=a)b", "ab", True),
        ("(?<!a)b", "ab", False),
        ("(?>a+)b", "aab", True),
        ("a++b", "aab", True),
        (r"a\Z", "a", True),
        ("(?x) a b  c", "abc", True),
    ],
)
def test_backtracking_only_constructs_run_time_limited(
    pattern: str, text: str, expected: bool
) -> None:
    regex = compile_regex(pattern)
    assert not regex.linear
    assert regex.test(text) is expected


def test_catastrophic_patterns_take_linear_time() -> None:
    for pattern in ("^(a+)+$", "(a|aa)+$", "(a*)*b", "^(\\w+\\s?)*$"):
        regex = compile_regex(pattern)
        start = time.perf_counter()
        assert regex.test(EVIL) is False
        assert time.perf_counter() - start < 0.1, pattern


def test_a_time_limited_pattern_gives_up_then_is_disabled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    regex = compile_regex("(?:(a|aa)+)+(?=b)")
    assert regex.test("aab")
    caplog.set_level(logging.WARNING, logger="ampsclient_server_stub.regexes")
    for i in range(MAX_TIMEOUTS + 2):
        start = time.perf_counter()
        assert regex.test("a" * (40 + i) + "c") is False
        assert time.perf_counter() - start < EVALUATION_LIMIT + 0.05
    assert regex.test("xaab") is False  # disabled: it matches nothing any more
    assert len(caplog.records) == MAX_TIMEOUTS  # never per message
    assert "disabled" in caplog.records[-1].getMessage()


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("[a", "missing ]"),
        ("a{1001}", "invalid repetition size"),
        ("(?=b)(a{100}){100}", "invalid perl operator: (?= "),
        ("(?=b)(a{100}){100}", "at most 1000, not 10000"),
        ("x" * 9000, "9000 characters"),
    ],
)
def test_refusals_name_the_problem(pattern: str, words: str) -> None:
    with pytest.raises(RegexError) as caught:
        compile_regex(pattern)
    assert words.strip() in str(caught.value)


def test_results_are_cached_per_value() -> None:
    regex = compile_regex("^IB")
    assert regex.test("IBM") and regex.test("IBM") and not regex.test("MSFT")
    long_value = "IB" + "x" * 1000
    assert regex.test(long_value) and regex.test(long_value)


def test_filters_topics_and_entitlements_use_it() -> None:
    start = time.perf_counter()
    assert compile_filter("/sym LIKE '^(a+)+$'")({"sym": EVIL}) is False
    assert compile_filter("/sym NOT LIKE '^(a+)+$'")({"sym": EVIL}) is True
    assert compile_topic("^(a+)+$").matches(EVIL) is False
    entry = UserEntry.from_json("u", {"read": ["^(a+)+$"]}, "users.u")
    assert entry.allowed("subscribe", EVIL) is False
    assert time.perf_counter() - start < 0.5
    assert isinstance(compile_topic("^orders").pattern, SafeRegex)
    with pytest.raises(FilterError, match=r"invalid LIKE pattern '\[a': missing \]"):
        compile_filter("/x LIKE '[a'")
    with pytest.raises(TopicError, match=r"bad regex topic '\^\(a': missing \)"):
        compile_topic("^(a")
    with pytest.raises(UsersFileError, match="bad regular expression '\\[a'"):
        UserEntry.from_json("u", {"read": ["[a"]}, "users.u")
