"""Tests for ampsclient.protocol.bookmarks: every bookmark form, canonical text, bad input."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ampsclient.exceptions import CommandError, InvalidBookmarkError
from ampsclient.protocol.bookmarks import (
    EPOCH,
    MOST_RECENT,
    NOW,
    BookmarkId,
    BookmarkList,
    BookmarkRange,
    Bookmarks,
    Epoch,
    Now,
    Point,
    Timestamp,
    bookmark_list,
    format_timestamp,
    parse_bookmark,
    publisher_id_for,
    range_bookmark,
    timestamp_bookmark,
)

U64 = 2**64 - 1


def ts(
    year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int = 0
) -> Timestamp:
    return Timestamp(datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC))


# (text, parsed value, canonical text)
VALID = [
    ("0", Epoch(), "0"),
    ("0|1|", Now(), "0|1|"),
    ("0|0|", BookmarkId(0, 0), "0|0|"),
    ("10620414156524534001|3836|", BookmarkId(10620414156524534001, 3836), None),
    (f"{U64}|{U64}|", BookmarkId(U64, U64), None),
    ("007|01|", BookmarkId(7, 1), "7|1|"),
    ("  5|6|\t", BookmarkId(5, 6), "5|6|"),
    ("20150102T123500Z", ts(2015, 1, 2, 12, 35, 0), None),
    ("20150102T123500", ts(2015, 1, 2, 12, 35, 0), "20150102T123500Z"),
    ("20240229T235959Z", ts(2024, 2, 29, 23, 59, 59), None),
    ("20200604T000000.123456Z", ts(2020, 6, 4, 0, 0, 0, 123456), None),
    ("20200604T000000.5", ts(2020, 6, 4, 0, 0, 0, 500000), "20200604T000000.500000Z"),
    ("20200604T000000.123456789Z", ts(2020, 6, 4, 0, 0, 0, 123456), "20200604T000000.123456Z"),
    (
        "1|5|,2|9|",
        BookmarkList((BookmarkId(1, 5), BookmarkId(2, 9))),
        None,
    ),
    (
        "1|5|, 20200101T000000Z ,3|3|",
        BookmarkList((BookmarkId(1, 5), ts(2020, 1, 1, 0, 0, 0), BookmarkId(3, 3))),
        "1|5|,20200101T000000Z,3|3|",
    ),
    (
        "[20200604T000000:20200605T000000)",
        BookmarkRange(ts(2020, 6, 4, 0, 0, 0), True, ts(2020, 6, 5, 0, 0, 0), False),
        "[20200604T000000Z:20200605T000000Z)",
    ),
    (
        "(1|2|:3|4|]",
        BookmarkRange(BookmarkId(1, 2), False, BookmarkId(3, 4), True),
        None,
    ),
    (
        "[1|2|:3|4|]",
        BookmarkRange(BookmarkId(1, 2), True, BookmarkId(3, 4), True),
        None,
    ),
    (
        "(1|2|:3|4|)",
        BookmarkRange(BookmarkId(1, 2), False, BookmarkId(3, 4), False),
        None,
    ),
    (
        "[1|2|,5|6|:7|8|,20300101T000000Z)",
        BookmarkRange(
            BookmarkList((BookmarkId(1, 2), BookmarkId(5, 6))),
            True,
            BookmarkList((BookmarkId(7, 8), ts(2030, 1, 1, 0, 0, 0))),
            False,
        ),
        None,
    ),
    ("[0:0|1|]", BookmarkRange(Epoch(), True, Now(), True), None),
    ("[1|2|:)", BookmarkRange(BookmarkId(1, 2), True, None, False), None),
    (" ( 1|2| : ]", BookmarkRange(BookmarkId(1, 2), False, None, True), "(1|2|:]"),
]


@pytest.mark.parametrize(("text", "expected", "canonical"), VALID)
def test_valid_forms_parse_and_format(text: str, expected: object, canonical: str | None) -> None:
    parsed = parse_bookmark(text)
    assert parsed == expected
    assert type(parsed) is type(expected)
    assert str(parsed) == (text if canonical is None else canonical)
    # the canonical text is a fixed point
    assert parse_bookmark(str(parsed)) == parsed


INVALID = [
    "",
    "   ",
    "recent",
    "garbage",
    "1|2",
    "1|",
    "|1|",
    "1||",
    "1|2|3|",
    "a|1|",
    "1|-2|",
    "-1|2|",
    "+1|2|",
    "1_0|2|",
    "\u0661|2|",  # ARABIC-INDIC DIGIT ONE: not an ASCII digit
    "1 |2|",
    f"{U64 + 1}|1|",
    f"1|{U64 + 1}|",
    "1" * 5000 + "|1|",
    "00",
    "1",
    "20261340T000000",
    "20260230T000000Z",
    "20260101T250000Z",
    "20260101T126000",
    "20260101T000060",
    "00000101T000000Z",
    "2026-01-01T00:00:00Z",
    "20260101 000000",
    "20260101t000000",
    "20260101T000000z",
    "20260101T000000+0000",
    "20260101T000000.Z",
    "20260101T000000.1234567890Z",
    "1|2|,",
    ",1|2|",
    "1|2|,,3|4|",
    "1|2|,0",
    "1|2|,0|1|",
    "1|2|,recent",
    "[1|2|:3|4|",
    "1|2|:3|4|]",
    "[1|2|:3|4|}",
    "{1|2|:3|4|}",
    "[[1|2|:3|4|]]",
    "[1|2|:3|4|:5|6|]",
    "[1|2|]",
    "[:3|4|]",
    "[:]",
    "[]",
    "()",
    "[",
    ")",
    "[recent:1|2|]",
    "[1|2|:3|4]",
    "1|2|:3|4|",
    "x[1|2|:3|4|]",
]


@pytest.mark.parametrize("text", INVALID)
def test_invalid_forms_raise_invalid_bookmark(text: str) -> None:
    with pytest.raises(InvalidBookmarkError) as info:
        parse_bookmark(text)
    assert info.value.reason == "invalid bookmark"
    assert isinstance(info.value, CommandError)
    assert str(info.value).startswith("invalid bookmark: ")


def test_error_messages_explain_the_problem() -> None:
    with pytest.raises(InvalidBookmarkError, match="trailing '\\|'"):
        parse_bookmark("1|2")
    with pytest.raises(InvalidBookmarkError, match="never sent"):
        parse_bookmark(MOST_RECENT)
    with pytest.raises(InvalidBookmarkError, match="bad date"):
        parse_bookmark("20261340T000000")
    with pytest.raises(InvalidBookmarkError, match="unbalanced"):
        parse_bookmark("[1|2|:3|4|")
    with pytest.raises(InvalidBookmarkError, match="empty"):
        parse_bookmark("")


def test_error_message_truncates_long_input() -> None:
    with pytest.raises(InvalidBookmarkError) as info:
        parse_bookmark("x" * 10_000)
    assert len(str(info.value)) < 200


def test_non_str_is_rejected() -> None:
    with pytest.raises(InvalidBookmarkError):
        parse_bookmark(12)  # type: ignore[arg-type]


def test_constants_match_the_official_client() -> None:
    assert (EPOCH, NOW, MOST_RECENT) == ("0", "0|1|", "recent")
    assert (Bookmarks.EPOCH, Bookmarks.NOW, Bookmarks.MOST_RECENT) == (EPOCH, NOW, MOST_RECENT)
    assert str(Epoch()) == EPOCH and str(Now()) == NOW


def test_epoch_and_now_are_singletons() -> None:
    assert Epoch() is Epoch() and Now() is Now()
    assert Epoch() != Now()  # type: ignore[comparison-overlap]
    assert copy.deepcopy(Epoch()) is Epoch()
    assert pickle.loads(pickle.dumps(Now())) is Now()
    assert repr(Epoch()) == "Epoch()" and repr(Now()) == "Now()"
    assert parse_bookmark("0") is Epoch()


def test_bookmark_id_validation_and_order() -> None:
    assert BookmarkId(1, 2) < BookmarkId(1, 3) < BookmarkId(2, 0)
    assert str(BookmarkId(0, 2)) == "0|2|"
    for bad in ((-1, 0), (0, -1), (U64 + 1, 0), (0, U64 + 1), (0, 1)):
        with pytest.raises(InvalidBookmarkError):
            BookmarkId(*bad)
    with pytest.raises(InvalidBookmarkError):
        BookmarkId(True, 1)
    with pytest.raises(InvalidBookmarkError):
        BookmarkId("1", 1)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        BookmarkId(1, 2).sequence = 3  # type: ignore[misc]


def test_timestamp_normalises_to_utc() -> None:
    naive = Timestamp(datetime(2020, 1, 1, 12))
    assert naive.when == datetime(2020, 1, 1, 12, tzinfo=UTC)
    assert naive.when.tzinfo is UTC
    eastern = Timestamp(datetime(2020, 1, 1, 7, tzinfo=timezone(timedelta(hours=-5))))
    assert eastern == naive
    assert str(eastern) == "20200101T120000Z"
    with pytest.raises(InvalidBookmarkError):
        Timestamp("20200101T000000")  # type: ignore[arg-type]


def test_bookmark_list_and_range_validation() -> None:
    with pytest.raises(InvalidBookmarkError):
        BookmarkList(())
    with pytest.raises(InvalidBookmarkError):
        BookmarkList((Epoch(),))  # type: ignore[arg-type]
    assert BookmarkList([BookmarkId(1, 1)]).items == (BookmarkId(1, 1),)  # type: ignore[arg-type]
    assert str(BookmarkList((BookmarkId(1, 1),))) == "1|1|"
    with pytest.raises(InvalidBookmarkError):
        BookmarkRange("1|1|", True, None, False)  # type: ignore[arg-type]
    with pytest.raises(InvalidBookmarkError):
        BookmarkRange(Epoch(), True, "x", False)  # type: ignore[arg-type]


def test_format_timestamp() -> None:
    assert format_timestamp(datetime(2015, 1, 2, 12, 35, tzinfo=UTC)) == "20150102T123500Z"
    assert format_timestamp(datetime(2015, 1, 2, 12, 35)) == "20150102T123500Z"
    assert format_timestamp(datetime(2015, 1, 2, 12, 35, 0, 1)) == "20150102T123500.000001Z"
    assert format_timestamp(datetime(9, 3, 4, 5, 6, 7, tzinfo=UTC)) == "00090304T050607Z"
    plus_two = timezone(timedelta(hours=2))
    assert format_timestamp(datetime(2020, 1, 1, 1, tzinfo=plus_two)) == "20191231T230000Z"


def test_timestamp_bookmark() -> None:
    assert timestamp_bookmark(0) == "19700101T000000Z"
    assert timestamp_bookmark(1_420_202_100.0) == "20150102T123500Z"
    assert timestamp_bookmark(1.25) == "19700101T000001.250000Z"
    assert timestamp_bookmark(-1) == "19691231T235959Z"
    assert timestamp_bookmark(datetime(2015, 1, 2, 12, 35, tzinfo=UTC)) == "20150102T123500Z"
    for bad in (float("nan"), float("inf"), 1e20):
        with pytest.raises(InvalidBookmarkError):
            timestamp_bookmark(bad)
    with pytest.raises(InvalidBookmarkError):
        timestamp_bookmark("0")  # type: ignore[arg-type]


def test_range_bookmark() -> None:
    start = datetime(2020, 6, 4, tzinfo=UTC)
    end = datetime(2020, 6, 5, tzinfo=UTC)
    assert range_bookmark(start, end) == "[20200604T000000Z:20200605T000000Z)"
    assert range_bookmark("1|2|", "3|4|", start_inclusive=False, end_inclusive=True) == (
        "(1|2|:3|4|]"
    )
    assert range_bookmark("1|2|,5|6|", None) == "[1|2|,5|6|:)"
    assert range_bookmark(EPOCH, "20200101T000000") == "[0:20200101T000000Z)"
    assert range_bookmark(BookmarkId(1, 2), Timestamp(end)) == "[1|2|:20200605T000000Z)"
    for bad_start, bad_end in (
        ("[1|2|:3|4|]", None),
        ("1|2|", "(1|2|:3|4|)"),
        (MOST_RECENT, None),
        ("", None),
        ("1|2", None),
    ):
        with pytest.raises(InvalidBookmarkError):
            range_bookmark(bad_start, bad_end)
    with pytest.raises(InvalidBookmarkError):
        range_bookmark(3)  # type: ignore[arg-type]


def test_bookmark_list_builder() -> None:
    assert bookmark_list("1|5|", "2|9|") == "1|5|,2|9|"
    assert bookmark_list("1|5|,2|9|", " 3|1| ", "20200101T000000") == (
        "1|5|,2|9|,3|1|,20200101T000000Z"
    )
    assert bookmark_list("1|5|") == "1|5|"
    for bad in ((), ("0",), ("0|1|",), ("recent",), ("[1|2|:3|4|]",), ("1|5|", "oops")):
        with pytest.raises(InvalidBookmarkError):
            bookmark_list(*bad)


PUBLISHER_1 = 4799641043095818233  # computed once; must never change


def test_publisher_id_golden_value() -> None:
    assert publisher_id_for("publisher-1") == PUBLISHER_1
    assert publisher_id_for("publisher-2") != PUBLISHER_1
    assert 0 <= publisher_id_for("") <= U64
    assert str(BookmarkId(publisher_id_for("publisher-1"), 1)) == f"{PUBLISHER_1}|1|"


def test_publisher_id_is_stable_across_processes() -> None:
    code = (
        "from ampsclient.protocol.bookmarks import publisher_id_for;"
        "print(publisher_id_for('publisher-1'), publisher_id_for('é-name'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        cwd=str(Path(__file__).resolve().parents[2]),
    ).stdout.split()
    assert out == [str(PUBLISHER_1), str(publisher_id_for("é-name"))]


# --------------------------------------------------------------------------------------------
# property tests

ids = (
    st.tuples(st.integers(0, U64), st.integers(0, U64))
    .filter(lambda pair: pair != (0, 1))  # "0|1|" is NOW, not an id
    .map(lambda pair: BookmarkId(*pair))
)
times = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)).map(
    Timestamp
)
items = st.one_of(ids, times)
lists = st.lists(items, min_size=2, max_size=4).map(lambda xs: BookmarkList(tuple(xs)))
points = st.one_of(st.just(Epoch()), st.just(Now()), ids, times)
bounds = st.one_of(points, lists)

BOOKMARK_ALPHABET = "0123456789|,[]():TZ. -x"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.text(BOOKMARK_ALPHABET, max_size=40)))
def test_arbitrary_text_parses_or_raises_invalid_bookmark(text: str) -> None:
    try:
        parsed = parse_bookmark(text)
    except InvalidBookmarkError as exc:
        assert exc.reason == "invalid bookmark"
    else:
        assert parse_bookmark(str(parsed)) == parsed


@settings(max_examples=200, deadline=None)
@given(bounds, st.one_of(st.none(), bounds), st.booleans(), st.booleans())
def test_range_round_trip(
    start: Point | BookmarkList,
    end: Point | BookmarkList | None,
    start_inclusive: bool,
    end_inclusive: bool,
) -> None:
    text = range_bookmark(
        str(start),
        None if end is None else str(end),
        start_inclusive=start_inclusive,
        end_inclusive=end_inclusive,
    )
    assert parse_bookmark(text) == BookmarkRange(start, start_inclusive, end, end_inclusive)
    assert str(parse_bookmark(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.one_of(points, lists))
def test_canonical_text_round_trips(value: object) -> None:
    assert str(parse_bookmark(str(value))) == str(value)
    assert parse_bookmark(str(value)) == value


@settings(max_examples=100, deadline=None)
@given(st.lists(items, min_size=1, max_size=5))
def test_bookmark_list_round_trip(members: list[BookmarkId | Timestamp]) -> None:
    text = bookmark_list(*(str(m) for m in members))
    parsed = parse_bookmark(text)
    if len(members) == 1:
        assert parsed == members[0]
    else:
        assert parsed == BookmarkList(tuple(members))
