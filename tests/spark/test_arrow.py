"""``parse=json`` chunks to Arrow (``_arrow.PayloadBatches``): the same batches as the
row-by-row path (``RowBuilder.row``), and every row it cannot read exactly goes that path
(replayed from a server; ``test_jsonfields.py`` has the field pass's cases)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ampsclient import _accel
from ampsclient.protocol.message import Message
from ampsclient.spark._arrow import PayloadBatches
from ampsclient.spark._convert import RowBuilder, default_schema
from ampsclient.spark._core import REPLAY_OPTIONS, ReadOptions
from ampsclient.spark._feed import replay_payloads
from ampsclient.spark._jsonfields import json_fields
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import HAClient

pytestmark = pytest.mark.skipif(
    _accel.delivery_columns is None or json_fields is None, reason="no C speedups"
)

FIELDS = "id BIGINT, sym STRING, qty INT, px DOUBLE, ok BOOLEAN"


def _publish(uri: str, topic: str, bodies: list[bytes]) -> None:
    with HAClient(f"pub-{uuid.uuid4().hex[:8]}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        for body in bodies:
            client.publish(topic, body)
        client.publish_flush(30_000)


def _chunks(uri: str, topic: str) -> list[list[bytes]]:
    return list(
        replay_payloads(
            [uri], "payload-test", 10_000, topic=topic, filter=None, bookmark="[0:0|1|]",
            options=REPLAY_OPTIONS, chunk=8,
        )
    )  # fmt: skip


def _builder(uri: str, topic: str, metadata: str | None = None) -> tuple[RowBuilder, Any]:
    options = {"uri": uri, "topic": topic, "parse": "json", "schema": FIELDS}
    if metadata is not None:
        options["metadatacolumns"] = metadata
    opts = ReadOptions.parse_options(options)
    meta = ["bookmark", "timestamp"] if metadata is None else [m for m in metadata.split(",") if m]
    payload = [("id", LongType()), ("sym", StringType()), ("qty", IntegerType())]
    payload += [("px", DoubleType()), ("ok", BooleanType())]
    schema = StructType(
        [default_schema("json")[m] for m in meta] + [StructField(n, t) for n, t in payload]
    )
    return RowBuilder(schema, opts), to_arrow_schema(schema, timezone="UTC")


def _parsed(builder: RowBuilder, schema: Any, fields: list[str]) -> PayloadBatches:
    at = [builder.schema.names.index(n) for n in fields]

    def redo(payload: bytes) -> list[Any]:
        row = builder.row(Message(payload))
        return [row[i] for i in at]

    return PayloadBatches(schema, fields, text=True, redo=redo)


def _good(i: int) -> bytes:
    return b'{"id":%d,"sym":"S%d","qty":%d,"px":%d.5,"ok":%s,"extra":[1]}' % (
        i, i % 3, i % 7, i, b"true" if i % 2 else b"false",
    )  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize("metadata", [None, "", "bookmark,sequence,timestamp,data"])
def test_regular_chunks_equal_the_row_path(uri: str, topic: str, metadata: str | None) -> None:
    _publish(uri, topic, [_good(i) for i in range(30)] + [b'{"id":99}', b"{}"])
    builder, schema = _builder(uri, topic, metadata)
    assert builder.payload_arrow and builder.arrow
    fields = [f.name for f, k in zip(builder.schema.fields, builder.kinds, strict=True)]
    parsed = _parsed(builder, schema, [n for n in fields if n in ("id", "sym", "qty", "px", "ok")])
    chunks = _chunks(uri, topic)
    for chunk in chunks:
        batch = parsed.batch(chunk)
        assert batch is not None
        assert batch.equals(builder._row_batch(schema, chunk))
    assert parsed.taken == len(chunks) and parsed.redone == 0
    rows = [r for c in chunks for r in builder._row_batch(schema, c).to_pylist()]
    assert [r["id"] for r in rows] == [*range(30), 99, None]
    assert rows[3]["sym"] == "S0" and rows[3]["ok"] is True and rows[3]["px"] == 3.5


@pytest.mark.integration
@pytest.mark.parametrize(
    ("odd", "redone"),
    [
        (b'{"id":"7"}', 0),  # a number as a string: coerced, as the row path does
        (b'{"qty":3000000000}', 0),  # out of INT's range: NULL, as in the row path
        (b'{"id":1.0}', 0),  # an integral float for BIGINT
        (b'{"sym":5}', 0),  # a number for STRING: "5"
        (b' {"id":1}', 0),  # whitespace before the object
        (b'{"id":" 7"}', 1),  # int(" 7"): the row path's
        (b'{"sym":{"a":1}}', 1),  # an object for STRING: json.dumps of it
        (b"", 1),  # an empty body: no object
        (b'{"id":1}{"id":2}', 1),  # two objects in one body
        (b"[1, 2]", 1),
        (b"not json", 1),
    ],
)
def test_an_odd_row_goes_the_row_path_alone(uri: str, topic: str, odd: bytes, redone: int) -> None:
    bodies = [_good(i) for i in range(8)]
    bodies[3] = odd
    _publish(uri, topic, bodies)
    builder, schema = _builder(uri, topic)
    (chunk,) = _chunks(uri, topic)
    parsed = _parsed(builder, schema, ["id", "sym", "qty", "px", "ok"])
    batch = parsed.batch(chunk)
    assert batch is not None and parsed.redone == redone
    assert batch.equals(builder._row_batch(schema, chunk))
    # the source's own conversion: the same rows as the row path
    (batch,) = builder.arrow_batches([chunk])
    assert batch.equals(builder._row_batch(schema, chunk))
    assert batch.to_pylist()[4]["id"] == 4
