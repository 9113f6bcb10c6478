"""Arrow record batches of the metadata columns, built from raw delivery payloads in bulk.

The fast path of a read: the payloads of a chunk (see :mod:`._feed`) become one
``pyarrow.RecordBatch`` without per-row Python. First choice: the headers and bodies are cut
in one pass by :func:`ampsclient.protocol.columns.delivery_columns` (the C speedups', or its
Python twin when they are not built, which is then slower than the next path) into Arrow
buffers, wrapped as arrays without a copy. A chunk it calls irregular (or without the C
speedups) goes the JSON-reader path, with a handful of whole-column operations:

* each payload's header ends at its first ``}`` (one ``bytes.find`` per row); the headers are
  joined into newline-delimited JSON and parsed by pyarrow's JSON reader into string columns
  (``bm``, ``ts``, ``t``, ``k``, ``x``: only those the schema needs). A ``}`` inside a header
  string cuts that header inside the string, which the reader rejects, so a wrong cut is
  never silently accepted;
* ``publisher_id``/``sequence`` are the bookmark split at ``|`` and cast; ``timestamp`` is the
  ``YYYYmmddTHHMMSS`` part parsed by ``strptime`` plus the microseconds;
* ``data`` is the bodies (one slice per row) as a binary array, cast to UTF-8 for text types.

Any irregular chunk (long key names, a missing bookmark or time, an unusual time format, a
value of another JSON type) is converted by the row-by-row reference path instead, which
decodes every header with the client's decoder: both paths give the same batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from .. import _accel
from ..exceptions import AMPSError
from ..protocol.header import KEY_ALIASES
from ..protocol.message import Message
from ._core import server_micros
from ._jsonfields import KINDS, json_fields, payload_fields

__all__ = ["MetadataBatches", "PayloadBatches"]

_HEADER_KEYS: Final[Mapping[str, str]] = {
    "topic": "t",
    "bookmark": "bm",
    "publisher_id": "bm",
    "sequence": "bm",
    "timestamp": "ts",
    "sow_key": "k",
    "correlation_id": "x",
}
"""Column -> the header key it comes from (``data`` is the body)."""


class _Irregular(AMPSError):
    """This chunk is not in the shape the bulk path handles (caught here: the general path
    takes it)."""


class MetadataBatches:
    """Turns lists of delivery payloads into record batches of ``schema`` (metadata columns).

    Args:
        schema: the Arrow schema of the batches (names from the default columns).
        text: the payload is text (``data`` is a UTF-8 string column, else binary).
    """

    def __init__(self, schema: pa.Schema, *, text: bool) -> None:
        self.schema = schema
        self.names: list[str] = list(schema.names)
        self.text = text
        keys = sorted({_HEADER_KEYS[n] for n in self.names if n in _HEADER_KEYS} | {"bm"})
        self.keys = keys
        self.aliases = frozenset(a for a, k in KEY_ALIASES.items() if k in keys)
        self.long_names = tuple(
            a.encode() for a, k in KEY_ALIASES.items() if k in ("t", "bm", "k", "x", "ts")
        )
        """Long key names of the wanted keys: a chunk that uses one goes the row path."""
        self.parse_options = pa_json.ParseOptions(
            explicit_schema=pa.schema([(k, pa.string()) for k in keys]),
            unexpected_field_behavior="infer",  # other keys become columns: aliases show
        )
        self.fallbacks = 0
        """Chunks converted by the row-by-row path."""
        self.one_pass = 0
        """Chunks converted by the one-pass cut (C)."""
        self._slow = _RowColumns(self.names, text)

    def batch(self, payloads: list[bytes]) -> pa.RecordBatch:
        """One record batch with a row per payload, in order."""
        if _COLUMNS is not None:
            cut = _COLUMNS(payloads, self.long_names)
            if cut is not None:
                try:
                    batch = self._assemble(self._buffers(len(payloads), cut))
                except pa.ArrowInvalid:  # a header value or body that is not UTF-8
                    pass
                else:
                    self.one_pass += 1
                    return batch
        try:
            columns = self._bulk(payloads)
        except (_Irregular, pa.ArrowException, ValueError):
            self.fallbacks += 1
            return self.reference_batch(payloads)
        return self._assemble(columns)

    def reference_batch(self, payloads: list[bytes]) -> pa.RecordBatch:
        """:meth:`batch` by the row-by-row path (the reference the bulk path must match)."""
        return self._assemble(self._slow.columns(payloads))

    def _assemble(self, columns: Mapping[str, Any]) -> pa.RecordBatch:
        arrays = [
            pa.array(columns[n], type=f.type) if isinstance(columns[n], list) else columns[n]
            for n, f in zip(self.names, self.schema, strict=True)
        ]
        arrays = [
            a if a.type == f.type else a.cast(f.type)
            for a, f in zip(arrays, self.schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    # -- the one-pass path -----------------------------------------------------------------

    def _buffers(self, n: int, cut: tuple[Any, ...]) -> dict[str, pa.Array]:
        """Arrays on the buffers of :func:`~ampsclient.protocol.columns.delivery_columns`."""
        out: dict[str, pa.Array] = {}

        def strings(at: int) -> pa.Array:
            offsets, data, valid = cut[at : at + 3]
            array = pa.Array.from_buffers(
                pa.binary(), n, [_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
            )
            return array.cast(pa.string())  # validates: a non-UTF-8 value raises

        bm_valid = cut[5]
        for name in self.names:
            if name == "data":
                body = pa.Array.from_buffers(
                    pa.binary(), n, [None, pa.py_buffer(cut[16]), pa.py_buffer(cut[17])]
                )
                out[name] = body.cast(pa.string()) if self.text else body
            elif name == "publisher_id":
                out[name] = pa.Array.from_buffers(
                    pa.decimal128(20, 0), n, [_buffer(bm_valid), pa.py_buffer(cut[12])]
                )
            elif name == "sequence":
                out[name] = pa.Array.from_buffers(
                    pa.int64(), n, [_buffer(bm_valid), pa.py_buffer(cut[13])]
                )
            elif name == "timestamp":
                out[name] = pa.Array.from_buffers(
                    pa.timestamp("us", tz="UTC"), n, [_buffer(cut[15]), pa.py_buffer(cut[14])]
                )
            else:
                out[name] = strings(3 * _STRING_COLUMNS.index(_HEADER_KEYS[name]))
        return out

    # -- the bulk path ---------------------------------------------------------------------

    def _bulk(self, payloads: list[bytes]) -> dict[str, Any]:
        ends = [p.find(b"}") + 1 for p in payloads]
        if 0 in ends:
            raise _Irregular("a payload without a header")
        blob = b"\n".join([p[:e] for p, e in zip(payloads, ends, strict=True)])
        read = pa_json.ReadOptions(use_threads=False, block_size=len(blob) + 1)
        table = pa_json.read_json(
            pa.BufferReader(blob), parse_options=self.parse_options, read_options=read
        )
        if table.num_rows != len(payloads):
            raise _Irregular("header count")
        if not self.aliases.isdisjoint(table.column_names):
            raise _Irregular("long key names")
        hdr = {k: table.column(k).combine_chunks() for k in self.keys}
        out: dict[str, Any] = {}
        for name in self.names:
            if name == "data":
                out[name] = self._bodies(payloads, ends)
            elif name in ("publisher_id", "sequence"):
                out.update(_split_bookmarks(hdr["bm"]))
            elif name == "timestamp":
                out[name] = _micros(hdr["ts"])
            else:
                out[name] = hdr[_HEADER_KEYS[name]]
        if out.get("bookmark", hdr["bm"]).null_count:
            raise _Irregular("a delivery without a bookmark")
        return out

    def _bodies(self, payloads: list[bytes], ends: list[int]) -> pa.Array:
        bodies = [p[e:] for p, e in zip(payloads, ends, strict=True)]
        binary = pa.array(bodies, type=pa.binary())
        if not self.text:
            return binary
        try:
            return binary.cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: decode with replacement, as get_data() does
            return pa.array([b.decode("utf-8", "replace") for b in bodies], type=pa.string())


class PayloadBatches:
    """``parse=json``: record batches of metadata columns and payload fields, the metadata
    from the one-pass cut (see :class:`MetadataBatches`) and the fields by
    :func:`~._jsonfields.json_fields` (C) on the bodies, back to back as they are in the
    cut's buffer: one pass that reads only the wanted top-level keys of each body. Without
    metadata columns there is no cut: :func:`~._jsonfields.payload_fields` reads the bodies
    of the payloads after their headers.

    The rows it cannot convert exactly as the row-by-row path does (a malformed body, a
    value Python coerces in forms the C code does not read: see :mod:`._jsonfields`) come
    back in its ``redo`` list; those rows alone are converted by ``redo`` (the row path:
    its warnings, its ``mode=FAILFAST`` error) and put in place. A chunk whose headers the
    cut does not take (irregular, not UTF-8) gives ``None``: the caller converts it row by
    row. The payload fields must be of the types :data:`~._jsonfields.KINDS` names (BIGINT,
    INT, SMALLINT, TINYINT, DOUBLE, STRING, BOOLEAN).

    Args:
        schema: the Arrow schema of the batches.
        fields: the names of the payload fields in it (the others are metadata columns).
        text: the payload is text.
        redo: a payload's values of ``fields``, in that order, by the row path.
        strict: ``mode=FAILFAST``: a value that does not fit goes ``redo`` (which fails).
    """

    def __init__(
        self,
        schema: pa.Schema,
        fields: list[str],
        *,
        text: bool,
        redo: Callable[[bytes], Sequence[Any]],
        strict: bool = False,
    ) -> None:
        self.schema = schema
        self.fields = list(fields)
        meta = [f for f in schema if f.name not in set(fields)]
        self.meta = MetadataBatches(pa.schema(meta), text=text)
        self.names = tuple(n.encode() for n in fields)
        self.types = [schema.field(n).type for n in fields]
        self.kinds = b"".join(KINDS[str(t)] for t in self.types)
        self.redo = redo
        self.strict = strict
        self.taken = 0
        """Chunks converted here (the others went row by row)."""
        self.redone = 0
        """Rows of those chunks converted by ``redo``."""

    def batch(self, payloads: list[bytes]) -> pa.RecordBatch | None:
        """One record batch with a row per payload, or ``None`` (convert it row by row)."""
        if _COLUMNS is None or _FIELDS is None or _PAYLOAD_FIELDS is None:
            return None
        n = len(payloads)
        meta: dict[str, pa.Array] = {}
        if not self.meta.names:  # no metadata column: the bodies alone, after each header
            columns, redo = _PAYLOAD_FIELDS(payloads, self.names, self.kinds, self.strict)
        else:
            cut = _COLUMNS(payloads, self.meta.long_names)
            if cut is None:
                return None
            try:
                meta = self.meta._buffers(n, cut)
            except pa.ArrowException:  # a header value or body that is not UTF-8
                return None
            columns, redo = _FIELDS(cut[16], cut[17], n, self.names, self.kinds, self.strict)
        parsed = {
            name: _array(t, n, buffers)
            for name, t, buffers in zip(self.fields, self.types, columns, strict=True)
        }
        if redo:
            self._patch(parsed, payloads, redo)
        arrays = []
        for f in self.schema:
            a = parsed[f.name] if f.name in parsed else meta[f.name]
            arrays.append(a if a.type == f.type else a.cast(f.type))
        self.taken += 1
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _patch(self, parsed: dict[str, pa.Array], payloads: list[bytes], redo: list[int]) -> None:
        """The ``redo`` rows' values, by the row path, put in place."""
        rows = [self.redo(payloads[i]) for i in redo]
        flags = [False] * len(payloads)
        for i in redo:
            flags[i] = True
        mask = pa.array(flags, type=pa.bool_())
        for j, (name, t) in enumerate(zip(self.fields, self.types, strict=True)):
            values = pa.array([row[j] for row in rows], type=t)
            parsed[name] = pc.replace_with_mask(parsed[name], mask, values)
        self.redone += len(redo)


def _array(t: pa.DataType, n: int, buffers: tuple[bytes | None, ...]) -> pa.Array:
    """An array of type ``t`` on the buffers of :func:`~._jsonfields.json_fields`."""
    if len(buffers) == 3:  # strings: offsets, data, validity (UTF-8 checked by the pass)
        offsets, data, valid = buffers
        return pa.Array.from_buffers(
            t, n, [_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
        )
    values, valid = buffers
    return pa.Array.from_buffers(t, n, [_buffer(valid), pa.py_buffer(values)])


_COLUMNS: Final = _accel.delivery_columns
"""The one-pass cut in C (``None`` without the speedups: its Python twin is slower than the
JSON-reader path, so it is not used here)."""
_FIELDS: Final = json_fields
_PAYLOAD_FIELDS: Final = payload_fields
"""The payload fields' pass in C (``None`` without it: ``parse=json`` then goes row by row;
its Python twin, :func:`~._jsonfields.py_json_fields`, is the reference, not a fast path)."""
_STRING_COLUMNS: Final = ("t", "bm", "k", "x")
"""The header keys of the string columns, in the order of the cut's result."""


def _buffer(bits: bytes | None) -> pa.Buffer | None:
    return None if bits is None else pa.py_buffer(bits)


def _split_bookmarks(bm: pa.Array) -> dict[str, pa.Array]:
    """``publisherId|sequence|`` -> DECIMAL(20,0) publisher ids and BIGINT sequences."""
    parts = pc.split_pattern(bm, "|", max_splits=2)
    if pc.min(pc.list_value_length(parts)).as_py() != 3:
        raise _Irregular("a bookmark that is not publisherId|sequence|")
    return {
        "publisher_id": _per_distinct(pc.list_element(parts, 0), _to_decimal),
        "sequence": pc.list_element(parts, 1).cast(pa.int64()),
    }


def _to_decimal(ids: pa.Array) -> pa.Array:
    return ids.cast(pa.decimal128(20, 0))


def _to_seconds(prefixes: pa.Array) -> pa.Array:
    return pc.strptime(prefixes, format="%Y%m%dT%H%M%S", unit="s").cast(pa.int64())


def _per_distinct(values: pa.Array, convert: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """``convert`` applied once per distinct value (publisher ids and seconds repeat)."""
    encoded = values.dictionary_encode()
    return pc.take(convert(encoded.dictionary), encoded.indices)


def _only(values: pa.Array, expected: str) -> bool:
    return bool(values.dictionary_encode().dictionary.to_pylist() == [expected])


def _micros(ts: pa.Array) -> pa.Array:
    """``YYYYmmddTHHMMSS.ffffffZ`` strings -> UTC timestamps in microseconds."""
    lengths = pc.utf8_length(ts)
    if ts.null_count or pc.min_max(lengths).as_py() != {"min": 23, "max": 23}:
        raise _Irregular("a time of another format")
    dot = pc.utf8_slice_codeunits(ts, 15, 16)
    zone = pc.utf8_slice_codeunits(ts, 22, 23)
    if not (_only(dot, ".") and _only(zone, "Z")):
        raise _Irregular("a time of another format")
    seconds = _per_distinct(pc.utf8_slice_codeunits(ts, 0, 15), _to_seconds)
    fraction = pc.utf8_slice_codeunits(ts, 16, 22).cast(pa.int64())
    micros = pc.add(pc.multiply(seconds, 1_000_000), fraction)
    return micros.cast(pa.timestamp("us", tz="UTC"))


# ------------------------------------------------------------------- the reference path


class _RowColumns:
    """The row-by-row path: every header decoded by the client's decoder (any key names,
    any time format); times and publisher ids go through small caches (they repeat)."""

    def __init__(self, names: list[str], text: bool) -> None:
        self.names = names
        self.text = text
        self.seconds: dict[str, int] = {}
        self.pids: dict[str, Decimal] = {}

    def columns(self, payloads: Iterable[bytes]) -> dict[str, list[Any]]:
        messages = [Message(p) for p in payloads]
        headers = [m.header for m in messages]
        cols: dict[str, list[Any]] = {}
        for name in self.names:
            if name == "data":
                cols[name] = [m.get_data() if self.text else m.data for m in messages]
            elif name in ("publisher_id", "sequence"):
                pairs = [self._split(h.get("bm")) for h in headers]
                cols["publisher_id"] = [p for p, _ in pairs]
                cols["sequence"] = [q for _, q in pairs]
            elif name == "timestamp":
                cols[name] = [self._micros(h.get("ts")) for h in headers]
            else:
                cols[name] = _strings(headers, _HEADER_KEYS[name])
        return cols

    def _micros(self, ts: Any) -> int | None:
        if ts is None:
            return None
        ts = str(ts)
        if len(ts) == 23 and ts[15] == ".":
            secs = self.seconds.get(ts[:15])
            if secs is None:
                if len(self.seconds) > 4096:
                    self.seconds.clear()
                secs = self.seconds[ts[:15]] = server_micros(ts[:15] + ".000000Z")
            return secs + int(ts[16:22])
        return server_micros(ts)

    def _split(self, bm: Any) -> tuple[Decimal | None, int | None]:
        if bm is None:
            return None, None
        text = str(bm)
        i = text.find("|")
        j = text.find("|", i + 1)
        if i <= 0 or j <= i:
            return None, None
        head = text[:i]
        pid = self.pids.get(head)
        if pid is None:
            pid = self.pids[head] = Decimal(head)
        return pid, int(text[i + 1 : j])


def _strings(headers: list[dict[str, Any]], key: str) -> list[str | None]:
    return [None if (v := h.get(key)) is None else str(v) for h in headers]
