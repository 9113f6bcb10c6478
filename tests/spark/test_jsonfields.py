"""``parse=json``'s field pass (``ampsclient.spark._jsonfields``): the C ``json_fields`` and
``payload_fields`` and their Python twins give the same buffers on every case, and a parsed
batch (the pass, its ``redo`` rows by the row path) is the batch of the row-by-row path
(``RowBuilder.row``: ``json.loads`` and the converters), which is the specification. No
server, no Spark session: deliveries are built here."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from ampsclient import _accel
from ampsclient.protocol.message import Message
from ampsclient.spark import AMPSSparkError
from ampsclient.spark._arrow import PayloadBatches
from ampsclient.spark._convert import RowBuilder, default_schema
from ampsclient.spark._core import ReadOptions
from ampsclient.spark._jsonfields import (
    implementations,
    json_fields,
    py_json_fields,
    py_payload_fields,
)

IMPLS = implementations()
needs_c = pytest.mark.skipif(
    "c" not in IMPLS or _accel.delivery_columns is None, reason="no C speedups"
)

FIELDS = [
    ("id", LongType(), b"q"),
    ("sym", StringType(), b"s"),
    ("qty", IntegerType(), b"i"),
    ("px", DoubleType(), b"d"),
    ("ok", BooleanType(), b"?"),
    ("small", ShortType(), b"h"),
    ("tiny", ByteType(), b"b"),
]
NAMES = tuple(n.encode() for n, _, _ in FIELDS)
KINDS = b"".join(k for _, _, k in FIELDS)

DEEP = 70  # past the pass's 64 levels
CASES: list[bytes] = [
    # the usual shape, and whitespace everywhere JSON allows it
    b'{"id":1,"sym":"S1","qty":3,"px":1.5,"ok":true,"small":-7,"tiny":127}',
    b' \n{ "id" : 1 ,\t"sym" : "x" , "ok"\r:false } \r\n',
    b"{}",
    b'{"other":1}',
    b'{"id":null,"sym":null,"ok":null}',
    # escapes and unicode
    b'{"sym":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"}',
    b'{"sym":"\\u00e9\\u20AC\\ud83d\\ude00 \\u0000"}',
    '{"sym":"é€😀\x7f"}'.encode(),
    b'{"s\\u0079m":"escaped key","i\\u0064":4}',
    b'{"' + b"\\u0061" * 60 + b'":1,"id":2}',  # a long escaped key (decoded on the heap)
    # nested values skipped, or for a wanted field
    b'{"x":{"a":[1,{"b":[[],{}]}],"c":"}],"},"id":5,"y":[true,false,null,-1.5e-3]}',
    b'{"sym":{"a":1}}',
    b'{"sym":[1, 2]}',
    b'{"id":[1]}',
    b'{"ok":{}}',
    b'{"x":' + b"[" * DEEP + b"]" * DEEP + b',"id":1}',
    b'{"x":' + b"[" * 62 + b"]" * 62 + b',"id":1}',
    b'{"x":' + b"[" * 63 + b"]" * 63 + b',"id":1}',
    b'{"x":' + b"[" * 64 + b"]" * 64 + b',"id":1}',
    # integers
    b'{"id":true}',
    b'{"id":"12","qty":"+7","small":"-0","tiny":"0000000000000000000000001"}',
    b'{"id":" 12"}',
    b'{"id":"1_000"}',
    b'{"id":"abc"}',
    b'{"id":""}',
    b'{"id":"\\u0031\\u0032"}',
    b'{"id":"\\u0661"}',  # an Arabic-Indic digit: int() takes it
    b'{"qty":3000000000,"small":32768,"tiny":-129}',
    b'{"qty":-2147483648,"small":-32768,"tiny":-128}',
    b'{"id":9223372036854775807}',
    b'{"id":9223372036854775808}',
    b'{"id":-9223372036854775808}',
    b'{"id":-9223372036854775809}',
    b'{"id":123456789012345678901234567890}',
    b'{"id":"99999999999999999999"}',
    b'{"id":1.0,"qty":1e3,"small":1E-2,"tiny":-0.0}',
    b'{"id":1.5}',
    b'{"id":9.3e18}',
    b'{"id":9.2e18}',
    b'{"id":9223372036854775807.0}',
    b'{"id":-9223372036854775808.0}',
    b'{"id":1e400}',
    b'{"id":12345678901234567.0}',
    # doubles
    b'{"px":1}',
    b'{"px":-0}',
    b'{"px":-0.0}',
    b'{"px":0.1}',
    b'{"px":"1.5"}',
    b'{"px":"-1e5"}',
    b'{"px":" 1.5"}',
    b'{"px":"nan"}',
    b'{"px":"1."}',
    b'{"px":1e400}',
    b'{"px":"1e400"}',
    b'{"px":12345678901234567890123}',
    b'{"px":' + b"9" * 400 + b"}",
    b'{"px":true}',
    b'{"px":[1]}',
    # booleans
    b'{"ok":"TRUE"}',
    b'{"ok":"False"}',
    b'{"ok":"yes"}',
    b'{"ok":1}',
    b'{"ok":"tru\\u0065"}',
    b'{"ok":"\\u00e9"}',
    # strings from other types
    b'{"sym":5}',
    b'{"sym":-0}',
    b'{"sym":1.50}',
    b'{"sym":1e20}',
    b'{"sym":1e400}',
    b'{"sym":-1.5e-7}',
    b'{"sym":true}',
    b'{"sym":false}',
    b'{"sym":12345678901234567890}',
    # equal keys: the last wins
    b'{"id":1,"id":2}',
    b'{"sym":"a","sym":5}',
    b'{"sym":5,"sym":"a"}',
    # malformed, or not what the pass reads
    b"",
    b"{",
    b'{"id":1',
    b'{"id":1}{"id":2}',
    b'{"id":1} x',
    b"[1,2]",
    b'"str"',
    b"not json",
    b'{"id":01}',
    b'{"id":1.}',
    b'{"id":.5}',
    b'{"id":+1}',
    b'{"id":1e}',
    b'{"id":-}',
    b'{"id":NaN}',
    b'{"px":Infinity}',
    b'{"px":-Infinity}',
    b'{"id":1,}',
    b"{,}",
    b'{"a" 1}',
    b"{'a':1}",
    b'{"ok":tru}',
    b'{"ok":nul}',
    b'{"sym":"\x01"}',
    b'{"sym":"\xff"}',
    b'{"sym":"\xed\xa0\x80"}',
    b'{"sym":"\xc0\xaf"}',
    b'{"sym":"\xf4\x90\x80\x80"}',
    b'{"sym":"\\ud800"}',
    b'{"sym":"\\udc00x"}',
    b'{"sym":"\\ud800\\u0041"}',
    b'{"sym":"\\x"}',
    b'{"sym":"\\u12"}',
    b'{"x":"\\ud800","id":1}',
    b'\xef\xbb\xbf{"id":1}',
    b'{"id":1}\x00',
    b'{\x00"id":1}',
    b'{"x":' + b"1" * 700 + b',"id":2}',
    b'{"x":' + b"1" * 5000 + b"}",
]


def _buffers(bodies: list[bytes]) -> tuple[bytes, bytes]:
    ends = [0]
    for body in bodies:
        ends.append(ends[-1] + len(body))
    return struct.pack(f"<{len(ends)}i", *ends), b"".join(bodies)


def _mutations(seed: int, count: int) -> list[bytes]:
    """Bodies from the cases with bytes flipped, inserted or cut (malformed on purpose)."""
    rng = random.Random(seed)
    alphabet = b'{}[]":,\\ u0123456789.eE+-tfnal"\xc3\xa9\xff'
    out = []
    for _ in range(count):
        body = bytearray(rng.choice(CASES[:75]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(body))
            op = rng.random()
            if op < 0.4 and body:
                body[min(at, len(body) - 1)] = rng.choice(alphabet)
            elif op < 0.7:
                body[at:at] = bytes([rng.choice(alphabet)])
            else:
                del body[at : at + rng.randint(1, 4)]
        out.append(bytes(body))
    return out


def _random_docs(seed: int, count: int) -> list[bytes]:
    """Valid documents with values of every type under the wanted keys."""
    rng = random.Random(seed)
    values: list[Any] = [
        None, True, False, 0, -1, 7, 2**31, -(2**63), 2**63, 1.5, -0.25, 1e300, 3.0,
        "", "x", "12", "-3", "1.5e3", "true", "FALSE", "é", "a\"b", "\u20ac\U0001f600",
        [1, "a"], {"k": [None]},
    ]  # fmt: skip
    keys = [n for n, _, _ in FIELDS] + ["other"]
    out = []
    for _ in range(count):
        doc = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, len(keys)))}
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
        out.append(text.encode())
    return out


ALL = CASES + _mutations(20261129, 400) + _random_docs(7, 300)


@needs_c
@pytest.mark.parametrize("strict", [False, True])
def test_c_and_python_give_the_same_buffers(strict: bool) -> None:
    offsets, data = _buffers(ALL)
    c = IMPLS["c"][0](offsets, data, len(ALL), NAMES, KINDS, strict)
    py = py_json_fields(offsets, data, len(ALL), NAMES, KINDS, strict)
    assert c[1] == py[1]  # the same rows left to the caller
    for name, got, want in zip(NAMES, c[0], py[0], strict=True):
        assert got == want, name
    # one body at a time too (offsets of one row, bitmaps of one byte)
    for body in ALL:
        offsets, data = _buffers([body])
        assert IMPLS["c"][0](offsets, data, 1, NAMES, KINDS, strict) == py_json_fields(
            offsets, data, 1, NAMES, KINDS, strict
        ), body


ODD_HEADERS = [
    b'{"c":"p","t":"a}b","bm":"1|2|"}{"id":1}',  # a brace inside a header string
    b'{"c":"p","t":"a\\"b","bm":"1|2|"}{"id":1}',  # an escape in the header: redone
    b'{"c":"p","t":"x"',  # no end of header
    b'{"c":"p"}',  # no body
    b"",
]


@needs_c
@pytest.mark.parametrize("strict", [False, True])
def test_payload_fields_reads_the_bodies_after_the_headers(strict: bool) -> None:
    payloads = [_delivery(i + 1, body) for i, body in enumerate(ALL)] + ODD_HEADERS
    c = IMPLS["c"][1](payloads, NAMES, KINDS, strict)
    assert c == py_payload_fields(payloads, NAMES, KINDS, strict)
    # the same as json_fields of the bodies, but for the odd headers (redone)
    offsets, data = _buffers(ALL)
    _, redo = py_json_fields(offsets, data, len(ALL), NAMES, KINDS, strict)
    assert c[1] == redo + [len(ALL) + k for k in (1, 2, 3, 4)]
    _, fields_redo = py_payload_fields([_delivery(1, b'{"id":1}'), ODD_HEADERS[0]], NAMES,
                                       KINDS, strict)  # fmt: skip
    assert fields_redo == []
    with pytest.raises(TypeError):
        IMPLS["c"][1]([b'{}{"id":1}', "text"], NAMES, KINDS, strict)


def test_no_field_and_no_row() -> None:
    for impl, payload_impl in IMPLS.values():
        offsets, data = _buffers([b'{"a":1}', b"x"])
        assert impl(offsets, data, 2, (), b"", False) == ((), [1])
        assert impl(struct.pack("<i", 0), b"", 0, NAMES, KINDS, False)[1] == []
        assert payload_impl([], NAMES, KINDS, False)[1] == []
        with pytest.raises(ValueError):
            impl(offsets, data, 3, NAMES, KINDS, False)  # offsets of 2 rows
        with pytest.raises(ValueError):
            impl(struct.pack("<3i", 0, 9, 7), data, 2, NAMES, KINDS, False)  # backwards
        with pytest.raises(ValueError):
            payload_impl([], NAMES, b"q", False)  # a kind per name


def test_the_usual_bodies_are_not_redone() -> None:
    bodies = [
        json.dumps(
            {"id": i, "sym": f"S{i % 50}", "qty": i % 100, "px": i / 8, "ok": i % 2 == 0}
        ).encode()
        for i in range(1000)
    ]
    offsets, data = _buffers(bodies)
    payloads = [_delivery(i + 1, body) for i, body in enumerate(bodies)]
    for impl, payload_impl in IMPLS.values():
        for columns, redo in (
            impl(offsets, data, len(bodies), NAMES, KINDS, True),
            payload_impl(payloads, NAMES, KINDS, True),
        ):
            assert redo == []
            ids = struct.unpack("<1000q", columns[0][0])
            assert list(ids) == list(range(1000)) and columns[0][1] is None


# ------------------------------------------------------------- against the row path


def _delivery(seq: int, body: bytes) -> bytes:
    return (
        b'{"c":"p","t":"orders","sids":"s1","bm":"1234567890123456789|%d|",'
        b'"ts":"20261129T060000.%06dZ"}' % (seq, seq % 1_000_000)
    ) + body


def _builder(meta: str, *, fail_fast: bool = False) -> tuple[RowBuilder, Any]:
    options = {
        "uri": "tcp://127.0.0.1:9/amps/json",
        "topic": "orders",
        "parse": "json",
        "schema": ", ".join(f"{n} {t.simpleString()}" for n, t, _ in FIELDS),
        "metadatacolumns": meta,
        "mode": "FAILFAST" if fail_fast else "PERMISSIVE",
    }
    opts = ReadOptions.parse_options(options)
    names = [m for m in meta.split(",") if m]
    schema = StructType(
        [default_schema("json")[m] for m in names] + [StructField(n, t) for n, t, _ in FIELDS]
    )
    return RowBuilder(schema, opts), to_arrow_schema(schema, timezone="UTC")


@needs_c
@pytest.mark.parametrize("meta", ["", "bookmark,timestamp", "sequence,data,bookmark"])
def test_parsed_batches_are_the_row_paths(meta: str) -> None:
    fast, schema = _builder(meta)
    assert fast.payload_arrow
    slow, _ = _builder(meta)
    payloads = [_delivery(i + 1, body) for i, body in enumerate(ALL)]
    if not meta:  # no header cut: odd headers are the pass's
        payloads += [
            b'{"c":"p","t":"a}b","bm":"1|2|"}{"id":1}',
            b'{"c":"p","t":"a\\"b","bm":"1|3|"}{"id":2,"sym":"\\u00e9"}',
        ]
    (batch,) = fast.arrow_batches([payloads])
    want = slow._row_batch(schema, payloads)
    assert batch.schema == want.schema
    # by repr: -0.0 is not 0.0, and NaN (float("nan") of a string) is NaN
    for i, (got, ref) in enumerate(zip(batch.to_pylist(), want.to_pylist(), strict=True)):
        assert repr(got) == repr(ref), payloads[i]
    assert fast.decode_errors == slow.decode_errors > 50  # warned the same way


@needs_c
def test_a_redone_row_is_converted_alone() -> None:
    builder, schema = _builder("bookmark")
    at = [i for i, k in enumerate(builder.kinds) if k == "payload"]
    calls: list[bytes] = []

    def redo(payload: bytes) -> list[Any]:
        calls.append(payload)
        row = builder.row(Message(payload))
        return [row[i] for i in at]

    parsed = PayloadBatches(schema, [n for n, _, _ in FIELDS], text=True, redo=redo)
    bodies = [b'{"id":%d,"sym":"s"}' % i for i in range(20)]
    bodies[3] = b'{"id":" 12 ","sym":{"a":[1, 2]}}'
    bodies[11] = b"not json"
    payloads = [_delivery(i + 1, b) for i, b in enumerate(bodies)]
    batch = parsed.batch(payloads)
    assert batch is not None
    assert calls == [payloads[3], payloads[11]] and parsed.redone == 2
    rows = batch.to_pylist()
    assert rows[3]["id"] == 12 and rows[3]["sym"] == '{"a":[1,2]}'
    assert rows[11]["id"] is None and rows[11]["sym"] is None
    assert [r["id"] for r in rows[:3]] == [0, 1, 2] and rows[19]["id"] == 19
    assert rows[5]["bookmark"] == "1234567890123456789|6|"


@needs_c
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"id":true}', "field 'id'=True does not fit bigint"),
        (b'{"qty":3000000000}', "field 'qty'=3000000000 does not fit int"),
        (b'{"ok":"yes"}', "field 'ok'='yes' does not fit boolean"),
        (b'{"id":1', "payload is not json"),
    ],
)
def test_failfast_fails_with_the_row_paths_error(body: bytes, message: str) -> None:
    builder, _ = _builder("", fail_fast=True)
    payloads = [_delivery(1, b'{"id":1}'), _delivery(2, body)]
    with pytest.raises(AMPSSparkError, match="FAILFAST") as caught:
        list(builder.arrow_batches([payloads]))
    assert message in str(caught.value)
    assert "1234567890123456789|2|" in str(caught.value)


def test_purepython_reads_row_by_row() -> None:
    """``AMPSCLIENT_PUREPYTHON=1``: no C pass, ``parse=json`` goes the row path, same rows."""
    code = (
        "from ampsclient.spark import _jsonfields\n"
        "from ampsclient.spark._convert import RowBuilder\n"
        "import tests.spark.test_jsonfields as t\n"
        "assert _jsonfields.json_fields is None\n"
        "b, schema = t._builder('')\n"
        "assert not b.payload_arrow\n"
        "rows = [b.row(t.Message(t._delivery(1, p))) for p in (b'{\"id\":3,\"sym\":5}', b'x')]\n"
        "assert rows[0][:2] == (3, '5') and rows[1] == (None,) * 7, rows\n"
        "print('ok')\n"
    )
    env = dict(os.environ, AMPSCLIENT_PUREPYTHON="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_module_picks_c_when_built() -> None:
    if os.environ.get("AMPSCLIENT_PUREPYTHON"):
        assert json_fields is None
    else:
        assert (json_fields is not None) == ("c" in IMPLS)
