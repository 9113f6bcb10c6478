"""Tests for ampsclient.protocol.options: options strings, builders, durations and rates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient.exceptions import CommandError, InvalidOptionsError
from ampsclient.protocol.options import (
    Options,
    format_options,
    parse_duration,
    parse_options,
    parse_rate,
)

PARSE_CASES = [
    (None, {}),
    ("", {}),
    ("  ", {}),
    ("oof", {"oof": ""}),
    ("oof,", {"oof": ""}),
    (",,oof,,", {"oof": ""}),
    (
        "oof,conflation=1s,select=[-/,+/a]",
        {"oof": "", "conflation": "1s", "select": "[-/,+/a]"},
    ),
    (
        # the spacing of the AMPS blog's Python example
        "conflation=2s, conflation_key = [/tickerId]",
        {"conflation": "2s", "conflation_key": "[/tickerId]"},
    ),
    ("select=[-/,+/subId,+/bookmark]", {"select": "[-/,+/subId,+/bookmark]"}),
    ("top_n=10,skip_n=20", {"top_n": "10", "skip_n": "20"}),
    ("live,timestamp,rate=2x", {"live": "", "timestamp": "", "rate": "2x"}),
    ("rate=5X,rate_max_gap=10s", {"rate": "5X", "rate_max_gap": "10s"}),
    ("bookmark_not_found=epoch", {"bookmark_not_found": "epoch"}),
    ("start,5", {"start": "", "5": ""}),
    (
        "projection=[/id,SUM(/qty, /px) AS /n],grouping=[/id]",
        {"projection": "[/id,SUM(/qty, /px) AS /n]", "grouping": "[/id]"},
    ),
    (
        "projection=[CONCAT(/a, ')', ',') AS /b],oof",
        {"projection": "[CONCAT(/a, ')', ',') AS /b]", "oof": ""},
    ),
    ('projection=["]" AS /q]', {"projection": '["]" AS /q]'}),
    ("conflation_key=/o'brien,oof", {"conflation_key": "/o'brien", "oof": ""}),
    ("filter==x", {"filter": "=x"}),
    ("empty=", {"empty": ""}),
    ("top_n=1,top_n=2", {"top_n": "2"}),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES)
def test_parse_options(text: str | None, expected: dict[str, str]) -> None:
    assert parse_options(text) == expected


def test_parse_options_keeps_order() -> None:
    assert list(parse_options("c,a=1,b")) == ["c", "a", "b"]


BAD_OPTIONS = [
    "select=[-/,+/a",
    "select=-/,+/a]",
    "projection=(a,b",
    "projection=[a)",
    "projection=(a]",
    "x=[[a]",
    "projection=['a]",
    "=5",
    " = 5",
    "a b=1",
    "oof,=x",
    "[x]=1",
]


@pytest.mark.parametrize("text", BAD_OPTIONS)
def test_parse_options_rejects(text: str) -> None:
    with pytest.raises(InvalidOptionsError) as info:
        parse_options(text)
    assert info.value.reason == "invalid options"
    assert isinstance(info.value, CommandError)
    assert str(info.value).startswith("invalid options: ")


def test_parse_options_rejects_non_str() -> None:
    with pytest.raises(InvalidOptionsError):
        parse_options(5)  # type: ignore[arg-type]


def test_format_options() -> None:
    assert format_options({}) == ""
    assert format_options({"oof": None, "top_n": 5, "select": "[-/,+/a]"}) == (
        "oof,top_n=5,select=[-/,+/a]"
    )
    assert format_options({"live": True, "replace": False, "pause": ""}) == "live,pause"
    assert format_options({"rate": 0.5}) == "rate=0.5"
    assert format_options({"conflation": " 1s "}) == "conflation=1s"


@pytest.mark.parametrize(
    "options",
    [
        {"": "x"},
        {"a=b": "x"},
        {"a,b": "x"},
        {"a": "1,2"},
        {"a": "[1,2"},
        {"a": float("nan")},
        {"a": object()},
    ],
)
def test_format_options_rejects(options: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionsError):
        format_options(options)  # type: ignore[arg-type]


def test_official_constants_carry_a_trailing_comma() -> None:
    # Black-box values from amps-python-client 5.3.5.14's AMPS.Message.Options.
    official = {
        "OOF": "oof,",
        "Replace": "replace,",
        "Pause": "pause,",
        "Resume": "resume,",
        "Live": "live,",
        "NoEmpties": "no_empties,",
        "NoSowKey": "no_sowkey,",
        "SendKeys": "send_keys,",
        "Timestamp": "timestamp,",
        "Cancel": "cancel,",
        "FullyDurable": "fully_durable,",
        "Expire": "expire,",
        "BookmarkNotFoundEpoch": "bookmark_not_found=epoch,",
        "BookmarkNotFoundNow": "bookmark_not_found=now,",
        "BookmarkNotFoundFail": "bookmark_not_found=fail,",
    }
    for name, value in official.items():
        assert getattr(Options, name) == value, name
    snake = {
        "oof": "OOF",
        "replace": "Replace",
        "pause": "Pause",
        "resume": "Resume",
        "live": "Live",
        "no_empties": "NoEmpties",
        "no_sowkey": "NoSowKey",
        "send_keys": "SendKeys",
        "timestamp": "Timestamp",
        "cancel": "Cancel",
        "fully_durable": "FullyDurable",
        "expire": "Expire",
        "bookmark_not_found_epoch": "BookmarkNotFoundEpoch",
        "bookmark_not_found_now": "BookmarkNotFoundNow",
        "bookmark_not_found_fail": "BookmarkNotFoundFail",
    }
    for alias, name in snake.items():
        assert getattr(Options, alias) == getattr(Options, name), alias


def test_builders_match_the_official_client() -> None:
    assert Options.Conflation("1s") == "conflation=1s,"
    assert Options.ConflationKey("/a") == "conflation_key=/a,"
    assert Options.TopN(5) == "top_n=5,"
    assert Options.SkipN(3) == "skip_n=3,"
    assert Options.MaxBacklog(4) == "max_backlog=4,"
    assert Options.Rate("2X") == "rate=2X,"
    assert Options.Rate(1000) == "rate=1000,"
    assert Options.RateMaxGap("10s") == "rate_max_gap=10s,"
    assert Options.Select("/a,/b") == "select=[/a,/b],"
    assert Options.Projection("/a,/b") == "projection=[/a,/b],"
    assert Options.Grouping("/a,/b") == "grouping=[/a,/b],"
    assert Options.BookmarkNotFound("now") == "bookmark_not_found=now,"
    assert Options.AckConflationInterval("100ms") == "ack_conflation=100ms,"


def test_builders_beyond_the_official_client() -> None:
    assert Options.Select(["-/", "+/subId", "+/bookmark"]) == "select=[-/,+/subId,+/bookmark],"
    assert Options.Select("[-/,+/a]") == "select=[-/,+/a],"  # no double brackets
    assert Options.ConflationKey(["/a", "/b"]) == "conflation_key=[/a,/b],"
    assert Options.ConflationKey("/a,/b") == "conflation_key=[/a,/b],"
    assert Options.ConflationKey("[/a,/b]") == "conflation_key=[/a,/b],"
    assert Options.Conflation(2) == "conflation=2s,"
    assert Options.Conflation(0.25) == "conflation=250ms,"
    assert Options.Conflation(timedelta(microseconds=5)) == "conflation=5us,"
    assert Options.Conflation(1e-9) == "conflation=1ns,"
    assert Options.RateMaxGap(timedelta(minutes=1)) == "rate_max_gap=60s,"
    assert Options.BookmarkNotFound(" EPOCH ") == "bookmark_not_found=epoch,"


def test_snake_case_builders_are_the_same_functions() -> None:
    assert Options.conflation("1s") == Options.Conflation("1s")
    assert Options.conflation_key("/k") == Options.ConflationKey("/k")
    assert Options.top_n(1) == Options.TopN(1)
    assert Options.skip_n(1) == Options.SkipN(1)
    assert Options.max_backlog(1) == Options.MaxBacklog(1)
    assert Options.rate(".5X") == Options.Rate(".5X")
    assert Options.rate_max_gap("1s") == Options.RateMaxGap("1s")
    assert Options.projection(["/a"]) == Options.Projection(["/a"])
    assert Options.grouping(["/a"]) == Options.Grouping(["/a"])
    assert Options.select(["/a"]) == Options.Select(["/a"])
    assert Options.bookmark_not_found("fail") == Options.BookmarkNotFound("fail")
    assert Options.ack_conflation_interval("1s") == Options.AckConflationInterval("1s")


def test_concatenated_builders_parse() -> None:
    text = (
        Options.OOF
        + Options.TopN(10)
        + Options.SkipN(20)
        + Options.Select(["-/", "+/a"])
        + Options.Conflation(1.5)
        + Options.BookmarkNotFoundNow
    )
    assert parse_options(text) == {
        "oof": "",
        "top_n": "10",
        "skip_n": "20",
        "select": "[-/,+/a]",
        "conflation": "1500ms",
        "bookmark_not_found": "now",
    }


@pytest.mark.parametrize(
    ("builder", "arg"),
    [
        (Options.TopN, -1),
        (Options.TopN, True),
        (Options.SkipN, "3"),
        (Options.MaxBacklog, 1.5),
        (Options.Rate, "fast"),
        (Options.Rate, 0),
        (Options.Rate, True),
        (Options.Conflation, "soon"),
        (Options.Conflation, -1),
        (Options.Conflation, float("inf")),
        (Options.RateMaxGap, "1 fortnight"),
        (Options.BookmarkNotFound, "later"),
        (Options.Select, ["[a"]),
        (Options.ConflationKey, "/a,/b]"),
        (Options.Rate, "1,2"),
        (Options.Select, "a],[b"),
    ],
)
def test_builders_reject_bad_values(builder: object, arg: object) -> None:
    with pytest.raises(InvalidOptionsError):
        builder(arg)  # type: ignore[operator]


DURATIONS = [
    ("10ms", 0.01),
    ("1s", 1.0),
    ("2m", 120.0),
    ("1h", 3600.0),
    ("1d", 86400.0),
    ("1w", 604800.0),
    ("100us", 1e-4),
    ("5ns", 5e-9),
    ("1.5s", 1.5),
    (".5s", 0.5),
    ("2.s", 2.0),
    (" 30S ", 30.0),
    ("10 ms", 0.01),
    ("0", 0.0),
    ("250", 0.25),  # bare number: milliseconds by default
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_default_unit() -> None:
    assert parse_duration("5", default_unit="s") == 5.0
    assert parse_duration("5ms", default_unit="s") == pytest.approx(0.005)
    with pytest.raises(InvalidOptionsError):
        parse_duration("5", default_unit="fortnight")


@pytest.mark.parametrize(
    "text", ["", "s", "-1s", "1y", "1 s s", "1e3s", "1,5s", "one second", "1sec", "\u0661s"]
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(InvalidOptionsError) as info:
        parse_duration(text)
    assert info.value.reason == "invalid options"


RATES = [
    ("1000", ("msgs", 1000.0)),
    ("12.5", ("msgs", 12.5)),
    ("500KB", ("bytes", 512000.0)),
    ("500kb", ("bytes", 512000.0)),
    ("10MB", ("bytes", 10 * 1024**2)),
    ("1G", ("bytes", 1024**3)),
    ("64B", ("bytes", 64.0)),
    ("2X", ("multiple", 2.0)),
    ("2x", ("multiple", 2.0)),
    (".5X", ("multiple", 0.5)),
    (" 5X ", ("multiple", 5.0)),
]


@pytest.mark.parametrize(("text", "expected"), RATES)
def test_parse_rate(text: str, expected: tuple[str, float]) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text", ["", "X", "0", "0X", "-1", "-2X", "2Y", "fast", "1,000", "2XX"])
def test_parse_rate_rejects(text: str) -> None:
    with pytest.raises(InvalidOptionsError) as info:
        parse_rate(text)
    assert info.value.reason == "invalid options"


# --------------------------------------------------------------------------------------------
# property tests

names = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
plain_values = st.from_regex(r"[A-Za-z0-9_/.+\-]{1,12}", fullmatch=True)
list_values = st.lists(st.from_regex(r"[+\-]?/[A-Za-z0-9_]{0,6}", fullmatch=True), max_size=4).map(
    lambda xs: "[" + ",".join(xs) + "]"
)
values = st.one_of(st.none(), plain_values, list_values, st.integers(0, 10**9))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, values, max_size=6))
def test_format_then_parse_round_trips(options: dict[str, str | int | None]) -> None:
    text = format_options(options)
    expected = {k: "" if v is None else str(v) for k, v in options.items()}
    assert parse_options(text) == expected
    assert format_options(parse_options(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.text("ab=,[]()'\" ", max_size=40)))
def test_arbitrary_text_parses_or_raises_invalid_options(text: str) -> None:
    try:
        parsed = parse_options(text)
    except InvalidOptionsError as exc:
        assert exc.reason == "invalid options"
    else:
        assert all(isinstance(k, str) and k for k in parsed)
        assert all(isinstance(v, str) for v in parsed.values())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_arbitrary_duration_and_rate_text(text: str) -> None:
    for parse in (parse_duration, parse_rate):
        try:
            parse(text)
        except InvalidOptionsError as exc:
            assert exc.reason == "invalid options"
