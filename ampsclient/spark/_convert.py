"""Messages to Spark rows (and Spark rows to payloads): schemas and converters.

Two read paths:

* metadata columns only (the default schema, or a projection of it): rows are built column by
  column into ``pyarrow.RecordBatch`` objects, the fast path of Python data sources;
* parsed payloads (``parse=json``/``msgpack``): each message becomes a tuple in schema order,
  payload values coerced to the field types (a value that does not fit becomes ``NULL``, or
  fails the task with ``mode=FAILFAST``).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..protocol.message import Message
from ._core import (
    METADATA_COLUMNS,
    REPLAY_OPTIONS,
    TEXT_TYPES,
    UNTIMED_REPLAY_OPTIONS,
    AMPSSparkError,
    ReadOptions,
    micros_datetime,
    point_from_option,
    server_micros,
)

__all__ = [
    "RowBuilder",
    "default_schema",
    "encode_row",
    "output_schema",
]

log = logging.getLogger("ampsclient.spark")

_PARSED_DEFAULT_METADATA: Final = ("bookmark", "timestamp")


def _metadata_type(name: str, message_type: str) -> DataType:
    if name == "publisher_id":
        return DecimalType(20, 0)  # an unsigned 64-bit number does not fit a BIGINT
    if name == "sequence":
        return LongType()
    if name == "timestamp":
        return TimestampType()
    if name == "data":
        return StringType() if message_type in TEXT_TYPES else BinaryType()
    return StringType()


def default_schema(message_type: str) -> StructType:
    """``topic, bookmark, publisher_id, sequence, timestamp, sow_key, correlation_id, data``.

    ``data`` is a STRING for text message types (json, xml, fix, nvfix) and BINARY otherwise.
    """
    return StructType(
        [StructField(n, _metadata_type(n, message_type), True) for n in METADATA_COLUMNS]
    )


def _metadata_set(opts: ReadOptions) -> tuple[str, ...]:
    if opts.metadata_columns is not None:
        return opts.metadata_columns
    return METADATA_COLUMNS if opts.parse == "none" else _PARSED_DEFAULT_METADATA


def _ddl_field_names(ddl: str) -> list[str]:
    """The top-level field names of a DDL schema string (no JVM needed)."""
    names: list[str] = []
    depth = 0
    quoted = False
    item: list[str] = []
    for ch in ddl + ",":
        if ch == "`":
            quoted = not quoted
        elif quoted:
            pass
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            text = "".join(item).strip()
            item = []
            if not text:
                continue
            if text.startswith("`"):
                end = text.find("`", 1)
                names.append(text[1:end] if end > 0 else text[1:])
            else:
                names.append(text.replace(":", " ").split()[0])
            continue
        item.append(ch)
    return names


def output_schema(opts: ReadOptions) -> StructType | str:
    """The schema of a read when the user gave none with ``.schema()``.

    With ``parse``, a DDL string (the metadata columns, then the payload's ``schema`` option):
    ``DataSource.schema()`` runs in a Python worker with no SparkSession to parse DDL.
    """
    if opts.parse == "none":
        if opts.metadata_columns is None:
            return default_schema(opts.message_type)
        return StructType(
            [
                StructField(n, _metadata_type(n, opts.message_type), True)
                for n in opts.metadata_columns
            ]
        )
    if not opts.payload_schema:
        raise AMPSSparkError(
            f"parse={opts.parse} needs the payload's schema: "
            '.option("schema", "id BIGINT, symbol STRING, ...") or .schema(...)'
        )
    meta = _metadata_set(opts)
    clash = [n for n in _ddl_field_names(opts.payload_schema) if n in meta]
    if clash:
        raise AMPSSparkError(
            f"payload field(s) {clash} have the names of metadata columns; choose the metadata "
            'columns with .option("metadataColumns", "bookmark") (or "" for none)'
        )
    columns = [f"`{n}` {_metadata_type(n, opts.message_type).simpleString()}" for n in meta]
    return ", ".join([*columns, opts.payload_schema])


# ------------------------------------------------------------------------------ converters

Converter = Callable[[Any], Any]


def _to_int(lo: int, hi: int) -> Converter:
    def convert(v: Any) -> int:
        if isinstance(v, bool):
            raise TypeError("a boolean is not a number")
        if isinstance(v, int):
            out = v
        elif isinstance(v, float):
            if not v.is_integer():
                raise ValueError(f"{v} is not an integer")
            out = int(v)
        elif isinstance(v, str):
            out = int(v.strip())
        else:
            raise TypeError(f"{type(v).__name__} is not a number")
        if not lo <= out <= hi:
            raise ValueError(f"{out} is out of range")
        return out

    return convert


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(v, int | float | str | Decimal):
        return float(v)
    raise TypeError(f"{type(v).__name__} is not a number")


def _to_decimal(v: Any) -> Decimal:
    if isinstance(v, bool):
        raise TypeError("a boolean is not a number")
    try:
        return Decimal(str(v))
    except InvalidOperation:
        raise ValueError(f"{v!r} is not a decimal") from None


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise TypeError(f"{v!r} is not a boolean")


def _to_str(v: Any) -> str:
    if isinstance(v, str):
        if not v.isascii():
            try:
                v.encode()
            except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800"): no UTF-8 text
                raise ValueError("a string with a lone surrogate is not UTF-8 text") from None
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict | list):
        return json.dumps(v, separators=(",", ":"), default=str)
    return str(v)


def _to_bytes(v: Any) -> bytes:
    if isinstance(v, bytes | bytearray):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"{type(v).__name__} is not binary")


def _to_timestamp(v: Any) -> datetime:
    if isinstance(v, datetime):
        return v
    if isinstance(v, bool):
        raise TypeError("a boolean is not a time")
    if isinstance(v, int | float):
        bound = point_from_option(str(v), "timestamp")
    elif isinstance(v, str):
        bound = point_from_option(v, "timestamp")
    else:
        raise TypeError(f"{type(v).__name__} is not a time")
    if bound.micros is None:
        raise ValueError(f"{v!r} is not a time")
    return micros_datetime(bound.micros)


def _to_naive_timestamp(v: Any) -> datetime:
    if isinstance(v, str):
        return datetime.fromisoformat(v).replace(tzinfo=None)
    return _to_timestamp(v).replace(tzinfo=None)


def _to_date(v: Any) -> date:
    if isinstance(v, datetime):
        return v.date()
    if isinstance(v, date):
        return v
    if isinstance(v, str):
        return date.fromisoformat(v[:10])
    raise TypeError(f"{type(v).__name__} is not a date")


def converter(data_type: DataType) -> Converter:
    """A function coercing a decoded JSON/msgpack value to what Spark expects for the type
    (raising ``TypeError``/``ValueError`` when the value does not fit). ``None`` stays ``None``."""
    inner: Converter
    if isinstance(data_type, StringType):
        inner = _to_str
    elif isinstance(data_type, LongType):
        inner = _to_int(-(2**63), 2**63 - 1)
    elif isinstance(data_type, IntegerType):
        inner = _to_int(-(2**31), 2**31 - 1)
    elif isinstance(data_type, ShortType):
        inner = _to_int(-(2**15), 2**15 - 1)
    elif isinstance(data_type, ByteType):
        inner = _to_int(-128, 127)
    elif isinstance(data_type, DoubleType | FloatType):
        inner = _to_float
    elif isinstance(data_type, DecimalType):
        inner = _to_decimal
    elif isinstance(data_type, BooleanType):
        inner = _to_bool
    elif isinstance(data_type, BinaryType):
        inner = _to_bytes
    elif isinstance(data_type, TimestampType):
        inner = _to_timestamp
    elif isinstance(data_type, TimestampNTZType):
        inner = _to_naive_timestamp
    elif isinstance(data_type, DateType):
        inner = _to_date
    elif isinstance(data_type, ArrayType):
        element = converter(data_type.elementType)

        def inner(v: Any) -> list[Any]:
            if not isinstance(v, list | tuple):
                raise TypeError(f"{type(v).__name__} is not an array")
            return [element(x) for x in v]

    elif isinstance(data_type, MapType):
        key_c = converter(data_type.keyType)
        value_c = converter(data_type.valueType)

        def inner(v: Any) -> dict[Any, Any]:
            if not isinstance(v, dict):
                raise TypeError(f"{type(v).__name__} is not a map")
            return {key_c(k): value_c(x) for k, x in v.items()}

    elif isinstance(data_type, StructType):
        names = data_type.fieldNames()
        convs = [converter(f.dataType) for f in data_type.fields]

        def inner(v: Any) -> tuple[Any, ...]:
            if not isinstance(v, dict):
                raise TypeError(f"{type(v).__name__} is not an object")
            return tuple(c(v.get(n)) for n, c in zip(names, convs, strict=True))

    else:

        def inner(v: Any) -> Any:
            return v

    def convert(v: Any) -> Any:
        return None if v is None else inner(v)

    return convert


# ------------------------------------------------------------------------------ row builder


def _split_bookmark(bm: str | None) -> tuple[int | None, int | None]:
    if not bm:
        return None, None
    parts = bm.split("|")
    if len(parts) < 2:
        return None, None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None, None


class RowBuilder:
    """Turns replayed messages into rows of a given schema (built on the executor)."""

    def __init__(self, schema: StructType, opts: ReadOptions) -> None:
        self.schema = schema
        self.opts = opts
        self.text = opts.message_type in TEXT_TYPES
        meta = _metadata_set(opts) if opts.parse != "none" else METADATA_COLUMNS
        self.kinds: list[str] = []
        for field in schema.fields:
            if field.name in meta:
                self.kinds.append("meta")
            elif opts.parse != "none":
                self.kinds.append("payload")
            else:
                raise AMPSSparkError(
                    f"column {field.name!r} is not an AMPS metadata column "
                    f"({', '.join(METADATA_COLUMNS)}); to read payload fields set "
                    'option("parse", "json") (or msgpack)'
                )
        # a metadata column declared with another type (say publisher_id STRING) is converted
        self.retyped = [
            kind == "meta" and field.dataType != _metadata_type(field.name, opts.message_type)
            for field, kind in zip(schema.fields, self.kinds, strict=True)
        ]
        self.payload_arrow = (
            opts.parse == "json"
            and not any(self.retyped)
            and _json_arrow(
                [f for f, k in zip(schema.fields, self.kinds, strict=True) if k == "payload"]
            )
        )
        """``parse=json`` with payload fields the JSON reader takes (:func:`_json_arrow`):
        chunks become record batches by :class:`._arrow.PayloadBatches` (row by row for a
        chunk it does not take)."""
        self.arrow = (
            all(k == "meta" for k in self.kinds) and not any(self.retyped)
        ) or self.payload_arrow
        wants_time = any(
            f.name == "timestamp" and k == "meta"
            for f, k in zip(schema.fields, self.kinds, strict=True)
        )
        self.replay_options = REPLAY_OPTIONS if wants_time else UNTIMED_REPLAY_OPTIONS
        """The subscription options of the replay: server times only when a column needs
        them (the ``timestamp`` option costs the server a lot per message)."""
        self._converters = [converter(f.dataType) for f in schema.fields]
        self.decode_errors = 0

    # -- metadata ------------------------------------------------------------------------

    def _meta(self, name: str, m: Message) -> Any:
        if name == "topic":
            return m.topic
        if name == "bookmark":
            return m.bookmark
        if name == "publisher_id":
            pid = _split_bookmark(m.bookmark)[0]
            return None if pid is None else Decimal(pid)
        if name == "sequence":
            return _split_bookmark(m.bookmark)[1]
        if name == "timestamp":
            ts = m.timestamp
            return None if ts is None else micros_datetime(server_micros(ts))
        if name == "sow_key":
            return m.sow_key
        if name == "correlation_id":
            return m.correlation_id
        if name == "data":
            return m.get_data() if self.text else m.data
        raise AssertionError(name)

    # -- tuples (parsed payloads) ---------------------------------------------------------

    def _decode(self, m: Message) -> dict[str, Any] | None:
        try:
            doc = m.json() if self.opts.parse == "json" else m.unpack()
        except Exception as exc:
            self._bad(m, f"payload is not {self.opts.parse}: {exc}")
            return None
        if not isinstance(doc, dict):
            self._bad(m, f"payload is a {type(doc).__name__}, not an object")
            return None
        return doc

    def _bad(self, m: Message, why: str) -> None:
        if self.opts.fail_fast:
            raise AMPSSparkError(f"message {m.bookmark}: {why} (mode=FAILFAST)")
        self.decode_errors += 1
        if self.decode_errors <= 5:
            log.warning("message %s: %s; its payload columns are NULL", m.bookmark, why)

    def row(self, m: Message) -> tuple[Any, ...]:
        """One message as a tuple in schema order."""
        doc = self._decode(m) if "payload" in self.kinds else None
        out: list[Any] = []
        fields = zip(self.schema.fields, self.kinds, self._converters, self.retyped, strict=True)
        for field, kind, conv, retyped in fields:
            if kind == "meta":
                value = self._meta(field.name, m)
                if retyped:
                    try:
                        value = conv(value)
                    except (TypeError, ValueError, ArithmeticError) as exc:
                        raise AMPSSparkError(
                            f"column {field.name!r} cannot be read as "
                            f"{field.dataType.simpleString()}: {exc}"
                        ) from None
                out.append(value)
                continue
            if doc is None:
                out.append(None)
                continue
            value = doc.get(field.name)
            try:
                out.append(conv(value))
            except (TypeError, ValueError, ArithmeticError) as exc:
                if self.opts.fail_fast:
                    raise AMPSSparkError(
                        f"message {m.bookmark}: field {field.name!r}={value!r} does not fit "
                        f"{field.dataType.simpleString()}: {exc} (mode=FAILFAST)"
                    ) from None
                out.append(None)
        return tuple(out)

    # -- arrow (metadata only) ------------------------------------------------------------

    def arrow_batches(self, chunks: Iterable[list[bytes]]) -> Iterator[Any]:
        """One Arrow record batch per chunk of delivery payloads (metadata columns, or
        ``parse=json`` payload fields of :attr:`payload_arrow`; see :mod:`._arrow`)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        from ._arrow import MetadataBatches, PayloadBatches

        schema = to_arrow_schema(self.schema, timezone="UTC")
        if self.payload_arrow:
            at = [i for i, k in enumerate(self.kinds) if k == "payload"]
            row = self.row

            def redo(payload: bytes) -> list[Any]:
                values = row(Message(payload))
                return [values[i] for i in at]

            parsed = PayloadBatches(
                schema,
                [self.schema.fields[i].name for i in at],
                text=self.text,
                redo=redo,
                strict=self.opts.fail_fast,
            )
            for chunk in chunks:
                batch = parsed.batch(chunk)
                yield batch if batch is not None else self._row_batch(schema, chunk)
            if parsed.redone:
                log.info("%d row(s) of parsed chunks converted row by row", parsed.redone)
            return
        batches = MetadataBatches(schema, text=self.text)
        for chunk in chunks:
            yield batches.batch(chunk)
        if batches.fallbacks:
            log.info("%d chunk(s) converted row by row", batches.fallbacks)

    def _row_batch(self, schema: Any, chunk: list[bytes]) -> Any:
        """A chunk converted row by row (:meth:`row`), as a record batch of ``schema``."""
        import pyarrow as pa

        rows = [self.row(Message(p)) for p in chunk]
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
        arrays = [pa.array(list(c), type=f.type) for c, f in zip(columns, schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def rows(self, chunks: Iterable[list[bytes]]) -> Iterator[tuple[Any, ...]]:
        """One tuple per delivery payload, in schema order."""
        row = self.row
        for chunk in chunks:
            for payload in chunk:
                yield row(Message(payload))


def _json_arrow(fields: list[StructField]) -> bool:
    """Are these payload fields all of types the C pass reads (:mod:`._jsonfields`), and
    are the C speedups (the header cut and that pass) built?"""
    from .. import _accel
    from ._jsonfields import json_fields

    if _accel.delivery_columns is None or json_fields is None or not fields:
        return False
    simple = (LongType, IntegerType, ShortType, ByteType, DoubleType, StringType, BooleanType)
    return all(type(f.dataType) in simple for f in fields)


# ------------------------------------------------------------------------------- writing


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_row(row: dict[str, Any], message_type: str) -> bytes:
    """A row without a ``data`` column, as a JSON (or msgpack) document."""
    if message_type == "msgpack":
        import msgpack

        def pack_default(value: Any) -> Any:
            if isinstance(value, Decimal):
                return float(value)
            if isinstance(value, datetime | date):
                return value.isoformat()
            raise TypeError(f"{type(value).__name__} is not msgpack serializable")

        packed: bytes = msgpack.packb(row, use_bin_type=True, default=pack_default)
        return packed
    return json.dumps(row, separators=(",", ":"), default=_json_default).encode()
