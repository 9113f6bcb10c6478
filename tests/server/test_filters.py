"""Tests for the AMPS content-filter engine (``ampsclient_server_stub.engine.filters``).

Spec: ``/work/shared/amps-semantics.md`` section 1; "spec L<n>" below cites a line of it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ampsclient_server_stub.engine.filters import (
    FilterError,
    compile_expression,
    compile_filter,
    get_path,
)

DOC: dict[str, Any] = {
    "x": 11,
    "price": 2.5,
    "qty": 4,
    "sym": "IBM",
    "name": "Gyro",
    "num_str": "47",
    "float_str": "2.0",
    "empty": "",
    "nul": None,
    "flag": True,
    "off": False,
    "neg": -5,
    "data": ["ant", "bee", "cat", "zebra"],
    "nums": [1, 5, 9],
    "no_items": [],
    "nested": {"a": {"b": 3}, "list": [10, 20]},
    "orders": [{"qty": 5, "tag": ["t1", "t2"]}, {"qty": 7}],
    "sp ace": "yes",
    "dash-name": 1,
    "55": "fix",
    "@attr": "at",
    "raw": b"bytes!",
    "unicode": "h\u00e9llo",
}


def matches(expression: str, doc: Any = None) -> bool:
    return compile_filter(expression)(DOC if doc is None else doc)


def value(expression: str, doc: Any = None) -> Any:
    return compile_expression(expression)(DOC if doc is None else doc)


# ---------------------------------------------------------------------------
# Documented comparison results (spec 1.4, L73-76) and coercion
# ---------------------------------------------------------------------------

COMPARISONS = [
    ("1 < 2", True),
    ("10 < '2'", False),  # spec L74: the string converts, 10 < 2 numerically
    ("'2.000' <> '2.0'", True),  # spec L74: two strings compare as strings
    ("2 = 2.0", True),
    ("10 < 'Crank It Up'", True),  # spec L75: non-numeric strings sort above numbers
    ("10 > 'Crank It Up'", False),
    ("10 = 'Crank It Up'", False),
    ("10 != 'Crank It Up'", True),
    ("10 < ''", False),  # spec L75-76: '' is NULL, so neither < nor > holds
    ("10 > ''", False),
    ("'' = ''", False),  # spec L76
    ("'' IS NULL", True),  # spec L76
    ("1 == 1", True),
    ("1 = 1", True),
    ("1 != 2", True),
    ("1 <> 1", False),
    ("2 <= 2", True),
    ("3 >= 4", False),
    ("3 > 2", True),
    ("'abc' < 'abd'", True),
    ("'B' < 'a'", True),  # byte order, not locale (spec L78)
    ("/num_str = 47", True),  # spec L71: "47" usable as a number
    ("/num_str > 46.5", True),
    ("/num_str = '47'", True),
    ("/num_str = '47.0'", False),  # string vs string stays a string compare
    ("/float_str = 2", True),
    ("/x = '11'", True),
    ("/x < 'abc'", True),
    ("/sym > 1000000", True),  # 'IBM' is not numeric: greater than any number
    ("TRUE = 1", True),  # spec L50: TRUE is literal 1, FALSE literal 0
    ("FALSE = 0", True),
    ("/flag = TRUE", True),
    ("/flag = 1", True),
    ("/off = 0", True),
    ("/flag = 'true'", False),  # documented choice: bool vs non-numeric string
    ("10 < /x", True),  # literal on the left
    ("/x > 10", True),
    ("/x>10", True),  # no spaces needed around comparison operators
    ("/x=11", True),
    ("/price = 2.5", True),
    ("/nested = 1", False),  # objects are compound: comparisons are NULL
    ("NOT (/nested = 1)", False),
]


@pytest.mark.parametrize(("expression", "expected"), COMPARISONS)
def test_comparisons(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


# ---------------------------------------------------------------------------
# NULL and three-valued logic (spec 1.7, L113-118)
# ---------------------------------------------------------------------------

NULL_CASES = [
    ("/missing = 1", False),
    ("/missing != 1", False),  # spec L117-118: != does not match a missing field
    ("NOT (/missing = 1)", False),  # spec L117: NOT NULL = NULL
    ("/missing IS NULL", True),
    ("/missing IS NOT NULL", False),
    ("/nul IS NULL", True),  # JSON null
    ("/empty IS NULL", True),  # spec L68: empty string is NULL
    ("/empty = ''", False),
    ("/no_items IS NULL", True),  # spec L122: empty array is NULL
    ("/nested IS NULL", False),  # an object is a value, not NULL
    ("/x IS NOT NULL", True),
    ("NULL IS NULL", True),
    ("NULL = NULL", False),
    ("NULL OR TRUE", True),  # spec L116
    ("NULL AND FALSE", False),
    ("NOT (NULL AND FALSE)", True),
    ("NOT (NULL AND TRUE)", False),  # NULL AND TRUE = NULL, NOT NULL = NULL
    ("NOT (NULL OR FALSE)", False),
    ("NOT NULL", False),
    ("NOT NOT NULL", False),
    ("/missing = 1 OR /x = 11", True),
    ("/missing = 1 AND /x = 11", False),
    ("NOT (/missing = 1 AND /x = 12)", True),  # NULL AND FALSE = FALSE
    ("NOT (/missing = 1 OR /x = 12)", False),  # NULL OR FALSE = NULL
    ("/missing + 1 IS NULL", True),  # spec L96: arithmetic with NULL is NULL
    ("/missing * 0 = 0", False),
    ("/x / 0 IS NULL", True),  # documented choice: division by zero is NULL
    ("/x % 0 IS NULL", True),
    ("(/missing = 1) IS NULL", True),
    ("/x IN (1, NULL)", False),  # spec L86-88: a NULL in the list never matches
    ("NOT (/x IN (1, NULL))", False),  # ... and NOT IN with a NULL in the list is NULL
    ("/x NOT IN (1, NULL)", False),
    ("/x IN (11, NULL)", True),
    ("/missing IN (1, 2)", False),
    ("/missing NOT IN (1, 2)", False),
    ("/missing BETWEEN 1 AND 2", False),
    ("/missing NOT BETWEEN 1 AND 2", False),
    ("/x BETWEEN NULL AND 20", False),
    ("/x NOT BETWEEN NULL AND 5", True),  # x <= 5 is FALSE, so the AND is FALSE
    ("/missing LIKE 'a'", False),
    ("/missing NOT LIKE 'a'", False),
    ("/missing BEGINS WITH ('a')", False),
    ("/missing NOT BEGINS WITH ('a')", False),
    ("/missing", False),
    ("NOT /missing", False),
]


@pytest.mark.parametrize(("expression", "expected"), NULL_CASES)
def test_null_semantics(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


# ---------------------------------------------------------------------------
# Logic, precedence, keyword case (spec 1.5)
# ---------------------------------------------------------------------------

LOGIC_CASES = [
    ("TRUE OR FALSE AND FALSE", True),  # spec L93: A OR B AND C = A OR (B AND C)
    ("(TRUE OR FALSE) AND FALSE", False),
    ("NOT FALSE AND FALSE", False),  # NOT binds tighter than AND
    ("NOT (FALSE AND FALSE)", True),
    ("NOT /x = 12", True),  # comparison binds tighter than NOT
    ("/x > 10 and /sym = 'IBM'", True),  # spec L99-101: lowercase keywords
    ("/x > 10 And /sym = 'XYZ' oR /qty = 4", True),
    ("not /x = 11", False),
    ("1=1", True),
    ("1=0", False),
    ("TRUE", True),
    ("FALSE", False),
    ("true", True),
    ("/flag", True),  # a bare value is a predicate through its truth value
    ("/off", False),
    ("NOT /off", True),
    ("/x", True),  # non-zero number is true
    ("/num_str", True),
    ("/sym", False),  # a non-numeric string is neither true nor false
    ("NOT /sym", False),
    ("/a = 1 OR /b = 2 OR /x = 11 OR /c = 3", True),
    ("/x = 11 AND /qty = 4 AND /sym = 'IBM' AND /price = 2.5", True),
    ("/x = 11 AND /qty = 4 AND /sym = 'IBM' AND /price = 2.6", False),
    ("((((/x = 11))))", True),
    ("(/x = 11) = TRUE", True),
    ("(/x = 12) = FALSE", True),
]


@pytest.mark.parametrize(("expression", "expected"), LOGIC_CASES)
def test_logic_and_precedence(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


# ---------------------------------------------------------------------------
# IN, BETWEEN, LIKE, BEGINS/ENDS WITH
# ---------------------------------------------------------------------------

OPERATOR_CASES = [
    ("/sym IN ('MSFT', 'IBM')", True),
    ("/sym in ('MSFT')", False),
    ("/sym NOT IN ('MSFT', 'IBM')", False),
    ("/sym not in ('MSFT')", True),
    ("/x IN (10, 11, 12)", True),
    ("/x IN (11.0)", True),
    ("/x IN ('11')", True),  # string item converts for a numeric field
    ("/num_str IN (47)", True),
    ("/num_str IN ('47.0')", False),
    ("/x IN (/qty + 7, 3)", True),  # non-literal list items
    ("/x IN (/qty, 3)", False),
    ("/x NOT IN (/qty, 3)", True),
    ("/x BETWEEN 10 AND 11", True),  # spec L84: inclusive
    ("/x BETWEEN 11 AND 11", True),
    ("/x BETWEEN 12 AND 20", False),
    ("/x NOT BETWEEN 12 AND 20", True),
    ("/x BETWEEN '10' AND '20'", True),
    ("/x BETWEEN 1 AND 20 AND /sym = 'IBM'", True),  # BETWEEN's AND is not the logical AND
    ("/sym BETWEEN 'A' AND 'J'", True),
    ("/name LIKE 'Gy'", True),  # spec L110: unanchored search
    ("/name LIKE '^Gy'", True),
    ("/name LIKE 'ro$'", True),
    ("/name LIKE '^yro'", False),
    ("/name LIKE 'gyro'", False),  # case-sensitive
    ("/name LIKE '(?i)gyro'", True),  # spec L106
    ("/name NOT LIKE 'xyz'", True),
    ("/name not like 'Gy'", False),
    ("/name LIKE 'G.o'", False),
    ("/name LIKE 'G.r|yr'", True),
    ('/name LIKE "^Gyro$"', True),
    ("/name LIKE '%'", False),  # spec L112: % has no special meaning
    ("/name LIKE 'y{1}r'", True),
    ("/unicode LIKE '^h\\w'", False),  # spec L106: not Unicode-aware (\\w is ASCII)
    ("/x LIKE '^1'", True),  # numbers are matched on their text
    ("'aa' LIKE '(.)\\1'", True),  # back-references (backslash kept verbatim)
    ("'ab' LIKE '(.)\\1'", False),
    ("'90.5' LIKE '^90\\..*'", True),
    ("'905' LIKE '^90\\..*'", False),
    ("/name LIKE ''", False),  # '' is a NULL pattern
    ("/sym BEGINS WITH ('I')", True),  # spec L89
    ("/sym BEGINS WITH ('X', 'IB')", True),
    ("/sym begins with 'IB'", True),
    ("/sym BEGINS WITH ('i')", False),  # case-sensitive
    ("/sym NOT BEGINS WITH ('I')", False),
    ("/sym ENDS WITH ('BM')", True),
    ("/sym ENDS WITH ('X', 'Y')", False),
    ("/sym NOT ENDS WITH ('X', 'Y')", True),
    ("/x ENDS WITH (1)", True),
    ("/x IS NULL", False),
]


@pytest.mark.parametrize(("expression", "expected"), OPERATOR_CASES)
def test_operators(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


# ---------------------------------------------------------------------------
# Arithmetic (spec 1.5 L95-97) and literals (spec 1.3)
# ---------------------------------------------------------------------------

VALUE_CASES: list[tuple[str, Any]] = [
    ("/qty * /price", 10.0),
    ("1 + 2 * 3", 7),
    ("(1 + 2) * 3", 9),
    ("10 - 2 - 3", 5),  # left associative
    ("-/x", -11),
    ("-2 * 3", -6),
    ("- -2", 2),
    ("/x - -1", 12),
    ("/x - 1", 10),
    ("/x / 2", 5.5),  # documented choice: true division
    ("/qty / 2", 2.0),
    ("/qty / /qty", 1.0),  # spec L97: spaces keep '/' an operator
    ("-5 % 3", -2),  # spec L96: sign of the left operand
    ("5 % -3", 2),
    ("-5 MOD 3", -2),
    ("/x mod 4", 3),
    ("-5.5 % 2", -1.5),
    ("/x + 0.5", 11.5),  # int + float is float
    ("/num_str + 1", 48),  # numeric strings are numbers in arithmetic
    ("/sym + 1", None),  # non-numeric string: NULL
    ("/nested + 1", None),
    ("/flag + 1", 2),
    ("/nums + 1", 2),  # spec L121: arithmetic uses the first element
    ("/no_items + 1", None),  # spec L122
    ("42", 42),
    ("91.0", 91.0),
    ("1e3", 1000.0),
    (".5", 0.5),
    ("18446744073709551615", 2**64 - 1),  # spec L47: unsigned above LONG_MAX
    ("'it\\'s'", "it's"),  # spec L45 (UNCONFIRMED): \' \" \\ escapes
    ('"say \\"hi\\""', 'say "hi"'),
    ("'a\\\\b'", "a\\b"),
    ("'it''s'", "it's"),  # doubled quote (SQL style) also accepted
    ("'\\x41\\x01'", "A\x01"),  # spec L44: hex byte escape
    ("'\\d'", "\\d"),  # other escapes kept verbatim (for regular expressions)
    ("''", None),
    ("NULL", None),
    ("TRUE", True),
    ("FALSE", False),
    ("/x > 10", True),
    ("/missing > 10", None),
    ("/x", 11),
    ("/data", ["ant", "bee", "cat", "zebra"]),
    ("/missing", None),
]


@pytest.mark.parametrize(("expression", "expected"), VALUE_CASES)
def test_values(expression: str, expected: Any) -> None:
    result = value(expression)
    assert result == expected
    assert type(result) is type(expected)


# ---------------------------------------------------------------------------
# Functions (spec 1.9)
# ---------------------------------------------------------------------------

FUNCTION_CASES: list[tuple[str, Any]] = [
    ("UPPER('abc')", "ABC"),
    ("upper(/sym)", "IBM"),
    ("LOWER(/sym)", "ibm"),
    ("UPPER(/unicode)", "H\u00e9LLO"),  # spec L128: ASCII only
    ("UPPER(/missing)", None),
    ("UPPER(/data)", "ANT"),  # spec L121: functions use the first element
    ("INSTR(/sym, 'B')", 2),  # 1-based
    ("INSTR(/sym, 'X')", 0),
    ("INSTR(/sym, 'b')", 0),
    ("INSTR_I(/sym, 'b')", 2),
    ("INSTR(/missing, 'b')", None),
    ("STREQUAL_I('aBc', 'ABC')", 1),  # spec L130: returns 1/0
    ("STREQUAL_I('abc', 'abd')", 0),
    ("SUBSTR('fandango', 5)", "ango"),
    ("REVERSE(SUBSTR('fandango', 5))", "ogna"),  # spec L132
    ("SUBSTR('fandango', 2, 3)", "and"),
    ("SUBSTR('fandango', -3)", "ngo"),
    ("SUBSTR('fandango', 0)", None),
    ("SUBSTR('fandango', 20)", None),
    ("CONCAT(/sym, '-', /x)", "IBM-11"),
    ("CONCAT(/missing, 'a')", "a"),
    ("CONCAT(/missing)", None),
    ("COALESCE(/missing, /nul, /empty, /x)", 11),  # spec L135: first non-NULL
    ("COALESCE(/missing, NULL)", None),
    ("LENGTH('abc')", 3),
    ("LENGTH(/unicode)", 6),  # spec L136: byte length
    ("LEN(/sym)", 3),
    ("LENGTH(/missing)", None),
    ("ABS(/neg)", 5),
    ("ABS(-2.5)", 2.5),
    ("ABS('x')", None),
    ("ROUND(2.5)", 3.0),  # half away from zero, not banker's rounding
    ("ROUND(-2.5)", -3.0),
    ("ROUND(2.675, 2)", 2.68),
    ("ROUND(1234, -2)", 1200),
    ("ROUND(1250, -2)", 1300),
    ("ROUND(7)", 7),
    ("IF(/x > 5, 'big', 'small')", "big"),  # spec L127
    ("IF(/x > 50, 'big', 'small')", "small"),
    ("IF(/missing > 5, 'big', 'small')", "small"),  # NULL condition takes the else branch
    ("TRUE_VALUE()", True),
    ("FALSE_VALUE()", False),
    ("CHAR_VALUE(65)", "A"),
    ("CHAR_VALUE(-1)", None),
]


@pytest.mark.parametrize(("expression", "expected"), FUNCTION_CASES)
def test_functions(expression: str, expected: Any) -> None:
    result = value(expression)
    assert result == expected
    assert type(result) is type(expected)


def test_function_predicates() -> None:
    assert matches("UPPER(/name) = 'GYRO'")
    assert matches("INSTR(/name, 'yr') > 0")
    assert matches("STREQUAL_I(/name, 'gYRO') == 1")
    assert matches("length(/sym) = 3 AND lower(/sym) = 'ibm'")


def test_nan_and_timestamp() -> None:
    assert math.isnan(value("NAN_VALUE()"))
    assert not matches("NAN_VALUE() = NAN_VALUE()")
    assert matches("UNIX_TIMESTAMP() > 1600000000")
    first = value("UNIX_TIMESTAMP()")
    assert isinstance(first, float)
    assert value("UNIX_TIMESTAMP()") >= first  # evaluated each time, not folded


# ---------------------------------------------------------------------------
# Identifiers and arrays (spec 1.2, 1.8)
# ---------------------------------------------------------------------------

ARRAY_CASES = [
    ("/data = 'zebra'", True),  # spec L120: any element
    ("/data != 'zebra'", True),  # spec L120: true if some element differs
    ("/data = 'yak'", False),
    ("/data[3] = 'zebra'", True),  # spec L40: zero-based subscript
    ("/data[0] = 'ant'", True),
    ("/data[4] IS NULL", True),
    ("/data LIKE '^ze'", True),
    ("/data IN ('cat', 'dog')", True),
    ("/data NOT IN ('cat', 'dog')", False),  # documented choice: negation of any-match
    ("/nums > 8", True),
    ("/nums BETWEEN 2 AND 4", False),
    ("/nums BETWEEN 4 AND 6", True),
    ("/nums NOT BETWEEN 4 AND 6", False),
    ("/no_items = 1", False),  # spec L122: empty array is NULL
    ("/no_items != 1", False),
    ("NOT (/no_items = 1)", False),
    ("/nested/a/b = 3", True),  # spec L35
    ("/nested/list[1] = 20", True),
    ("/nested/list = 20", True),
    ("/nested/a/b/c IS NULL", True),
    ("/orders/qty = 7", True),  # stepping through an array of objects collects values
    ("/orders/tag = 't2'", True),
    ("/orders[1]/qty = 7", True),
    ("/orders[0]/qty = 7", False),
    ("[/sp ace] = 'yes'", True),  # spec L38: bracketed names
    ("/dash-name = 1", True),  # XPath step names may contain '-'
    ("/dash-name - 1 = 0", True),
    ("/55 = 'fix'", True),  # spec L36: numeric (FIX tag) steps
    ("/@attr = 'at'", True),
    ("/raw = 'bytes!'", True),  # msgpack bin values read as UTF-8 text
    ("/x[0] = 11", True),  # a single value is a one-element sequence
    ("/x[1] IS NULL", True),
]


@pytest.mark.parametrize(("expression", "expected"), ARRAY_CASES)
def test_identifiers_and_arrays(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


def test_get_path() -> None:
    assert get_path(DOC, "/x") == 11
    assert get_path(DOC, "/nested/a/b") == 3
    assert get_path(DOC, "/nested/a") == {"b": 3}
    assert get_path(DOC, "/data[1]") == "bee"
    assert get_path(DOC, "/orders/qty") == [5, 7]
    assert get_path(DOC, "/empty") == ""  # raw value, not NULL-normalised
    assert get_path(DOC, "/missing/deeper") is None
    assert get_path(DOC, "[/sp ace]") == "yes"
    assert get_path([{"a": 1}, {"a": 2}], "/a") == [1, 2]
    assert get_path("scalar", "/a") is None
    for bad in ("x", "/x = 1", "", "/"):
        with pytest.raises(FilterError):
            get_path(DOC, bad)


@pytest.mark.parametrize("doc", [None, 5, "text", [1, 2], [], {}, b"raw", 1.5, True])
def test_non_dict_documents(doc: Any) -> None:
    assert compile_filter("/x > 10 AND /sym = 'IBM'")(doc) is False
    assert compile_filter("/x IS NULL")(doc) is True
    assert compile_filter("1 = 1")(doc) is True


def test_json_and_msgpack_payloads() -> None:
    msgpack = pytest.importorskip("msgpack")
    payload = {"x": 42, "sym": "IBM", "tags": ["a", "b"], "sub": {"v": 1.5}}
    f = compile_filter("/x > 10 AND /sym = 'IBM' AND /tags = 'b' AND /sub/v < 2")
    assert f(json.loads(json.dumps(payload)))
    assert f(msgpack.unpackb(msgpack.packb(payload)))


def test_compile_is_cached() -> None:
    assert compile_filter("/x = 1") is compile_filter("/x = 1")
    assert compile_expression("/x + 1") is compile_expression("/x + 1")


def test_long_flat_chains_compile() -> None:
    # AND/OR chains are flattened, so a long list of alternatives is not "deep".
    misses = " OR ".join(f"/x = {i}" for i in range(12, 1012))
    assert not matches(misses)
    assert matches(misses + " OR /x = 11")
    assert matches(" AND ".join(["/x = 11"] * 500))


# ---------------------------------------------------------------------------
# Bad filters
# ---------------------------------------------------------------------------

BAD_FILTERS = [
    "",
    "   ",
    "(/x = 1",  # unbalanced parentheses
    "/x = 1)",
    "((/x = 1)",
    "/x =",  # dangling operators
    "/x = 1 AND",
    "OR /x = 1",
    "NOT",
    "/x +",
    "* 2",
    "/x = = 1",
    "/x 1",
    "'abc",  # unterminated strings
    "/x = 'abc",
    '/x = "abc',
    "/x = 'it\\'",
    "FOO(1)",  # unknown function
    "NOW()",
    "UPPER(1, 2)",  # wrong arity
    "SUBSTR('a')",
    "IF(1, 2)",
    "TRUE_VALUE(1)",
    "UPPER",
    "sym = 1",  # bare word instead of a path
    "/",
    "/ = 1",
    "/x[a] = 1",  # bad subscript
    "/x[] = 1",
    "/x[0 = 1",
    "[/unterminated = 1",
    "[x] = 1",
    "/x IN ()",
    "/x IN 1",
    "/x IN (1,)",
    "/x BETWEEN 1",
    "/x BETWEEN 1 OR 2",
    "/x LIKE /y",  # spec L105: the pattern must be a literal
    "/x LIKE '('",  # invalid regular expression
    "/x LIKE '[a-'",
    "/x IS 1",
    "/x IS NOT",
    "/x BEGINS ('a')",
    "/x BEGINS WITH (/y)",
    "/x NOT 1",
    "1abc",
    "1.2.3",
    "18446744073709551616",  # does not fit in 64 bits
    "/x = 1 ; DROP",
    "/x # 1",
    "/x = 1 /y = 2",
    "()",
    "/x, /y",
]


@pytest.mark.parametrize("expression", BAD_FILTERS)
def test_bad_filters(expression: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(expression)
    assert isinstance(info.value, ValueError)
    assert str(info.value)  # a human-readable detail


def test_bad_filter_reports_position() -> None:
    with pytest.raises(FilterError) as info:
        compile_filter("/x = 1 AND )")
    assert info.value.position == 11
    assert "')'" in str(info.value)


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 5000 + "1" + ")" * 5000,
        "(" * 101 + "1" + ")" * 101,
        "NOT " * 5000 + "TRUE",
        "-" * 5000 + "1",
        "1" + " + 1" * 5000,  # a left-deep tree
        "UPPER(" * 300 + "'a'" + ")" * 300,
    ],
)
def test_pathological_nesting_is_a_filter_error(expression: str) -> None:
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filter(expression)


def test_reasonable_nesting_is_fine() -> None:
    assert matches("(" * 50 + "/x = 11" + ")" * 50)
    assert matches("1" + " + 1" * 100 + " = 101")


# ---------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------

FAST = settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

PROPERTY = settings(FAST, max_examples=120)

FILTER_ALPHABET = st.sampled_from(
    [
        *"/abxyz019.,()'\"\\=<>!+-*%[]@ _\t",
        *(" AND ", " OR ", " NOT ", " IN ", " LIKE ", " BETWEEN ", " IS ", " NULL ", " TRUE "),
        *(" BEGINS WITH ", "UPPER(", "COALESCE(", "IF(", " MOD ", "\\x4", "é", "\x00"),
    ]
)


def _check_arbitrary(text: str) -> None:
    try:
        predicate = compile_filter(text)
    except FilterError as exc:
        assert str(exc)
        return
    assert callable(predicate)
    for doc in (DOC, {}, None, [1, "a"], "s"):
        assert predicate(doc) in (True, False)


@FAST
@given(st.text(max_size=80))
def test_arbitrary_text_parses_or_raises_filter_error(text: str) -> None:
    _check_arbitrary(text)


@FAST
@given(st.lists(FILTER_ALPHABET, max_size=25).map("".join))
def test_filter_like_text_parses_or_raises_filter_error(text: str) -> None:
    _check_arbitrary(text)


def _quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


PATHS = st.sampled_from(
    [
        "/a",
        "/b",
        "/c",
        "/n/x",
        "/n/y",
        "/arr",
        "/arr[0]",
        "/arr[2]",
        "/missing",
        "/objs/v",
        "[/sp ace]",
    ]
)
LITERALS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.text(alphabet="abcXYZ 019.-'\"\\%_", max_size=5).map(_quote),
    st.sampled_from(["TRUE", "FALSE", "NULL", "true", "null", "NAN_VALUE()"]),
)
ATOMS = st.one_of(PATHS, LITERALS)


def _values(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(children, st.sampled_from(["+", "-", "*", " / ", "%", " MOD "]), children)
    unary_fn = st.sampled_from(
        ["UPPER", "LOWER", "LENGTH", "LEN", "ABS", "REVERSE", "ROUND", "CHAR_VALUE"]
    )
    binary_fn = st.sampled_from(
        ["COALESCE", "CONCAT", "INSTR", "INSTR_I", "STREQUAL_I", "SUBSTR", "ROUND"]
    )
    return st.one_of(
        binary.map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda v: f"-({v})"),
        st.tuples(unary_fn, children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(binary_fn, children, children).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(children, children, children).map(lambda t: f"SUBSTR({t[0]}, {t[1]}, {t[2]})"),
    )


VALUES = st.recursive(ATOMS, _values, max_leaves=6)
CMP = st.sampled_from(["=", "==", "!=", "<>", "<", "<=", ">", ">="])
PATTERNS = st.sampled_from(["a", "^a", "b$", "(?i)x", "[0-9]+", "(.)\\1", "^$", ".", "\\d"])


def _base_predicates() -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(VALUES, CMP, VALUES).map(" ".join),
        st.tuples(VALUES, st.lists(VALUES, min_size=1, max_size=3), st.booleans()).map(
            lambda t: f"{t[0]} {'NOT ' if t[2] else ''}IN ({', '.join(t[1])})"
        ),
        st.tuples(VALUES, VALUES, VALUES, st.booleans()).map(
            lambda t: f"{t[0]} {'NOT ' if t[3] else ''}BETWEEN {t[1]} AND {t[2]}"
        ),
        st.tuples(VALUES, PATTERNS, st.booleans()).map(
            lambda t: f"{t[0]} {'NOT ' if t[2] else ''}LIKE {_quote(t[1])}"
        ),
        st.tuples(VALUES, st.booleans()).map(lambda t: f"{t[0]} IS {'NOT ' if t[1] else ''}NULL"),
        st.tuples(VALUES, st.sampled_from(["BEGINS", "ENDS"]), st.text("ab1", max_size=2)).map(
            lambda t: f"{t[0]} {t[1]} WITH ({_quote(t[2])}, 'x')"
        ),
        VALUES,
    )


def _compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        children.map(lambda p: f"NOT ({p})"),
        st.tuples(children, st.sampled_from(["AND", "OR", "and", "or"]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        st.tuples(children, VALUES, VALUES).map(lambda t: f"IF({t[0]}, {t[1]}, {t[2]}) = {t[1]}"),
    )


PREDICATES = st.recursive(_base_predicates(), _compound, max_leaves=5)

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),  # NaN and infinities included: json.loads accepts them
    st.text(alphabet="abcXYZ 019.-", max_size=5),
    st.sampled_from(["", "47", "2.0", "1e400", "x"]),
    st.binary(max_size=3),
)
KEYS = st.sampled_from(["a", "b", "c", "n", "x", "y", "arr", "objs", "v", "sp ace"])
JSON = st.recursive(
    JSON_SCALARS,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(KEYS, c, max_size=3)),
    max_leaves=10,
)
DOCS = st.one_of(st.dictionaries(KEYS, JSON, max_size=6), JSON)


@PROPERTY
@given(PREDICATES, DOCS)
def test_random_valid_filters_evaluate_without_raising(expression: str, doc: Any) -> None:
    predicate = compile_filter(expression)
    negated = compile_filter(f"NOT ({expression})")
    result = predicate(doc)
    assert result is True or result is False
    assert not (result and negated(doc))  # a filter and its negation never both match
    # The fast two-valued path agrees with the three-valued evaluator.
    assert result is (compile_expression(f"NOT NOT ({expression})")(doc) is True)


@PROPERTY
@given(VALUES, DOCS)
def test_random_value_expressions_evaluate_without_raising(expression: str, doc: Any) -> None:
    result = compile_expression(expression)(doc)
    assert result is None or isinstance(result, bool | int | float | str | list | dict | bytes)


@PROPERTY
@given(st.one_of(PATHS, VALUES), st.lists(st.one_of(ATOMS, VALUES), min_size=1, max_size=4), DOCS)
def test_in_is_a_disjunction_of_equalities(operand: str, items: list[str], doc: Any) -> None:
    # spec L86: x IN (v1, v2, ...) is x = v1 OR x = v2 OR ... (three-valued, too)
    in_value = compile_expression(f"{operand} IN ({', '.join(items)})")(doc)
    or_value = compile_expression(" OR ".join(f"{operand} = {item}" for item in items))(doc)
    assert in_value is or_value


SCALAR_DOCS = st.dictionaries(KEYS, JSON_SCALARS, max_size=6)


@PROPERTY
@given(ATOMS, ATOMS, ATOMS, SCALAR_DOCS)
def test_between_is_inclusive_range(x: str, low: str, high: str, doc: Any) -> None:
    # spec L84: x BETWEEN a AND b is x >= a AND x <= b (for scalar values)
    between = compile_expression(f"{x} BETWEEN {low} AND {high}")(doc)
    explicit = compile_expression(f"{x} >= {low} AND {x} <= {high}")(doc)
    assert between is explicit
