"""Values that hold columns, decoded a batch at a time (the encodings are
:mod:`spark_jobs.ingest`'s ``value_format``; a table records its own as
:class:`~slatedb_core.table.ValueEncoding`).

* ``json`` (Spark's ``to_json(struct(...))``): the batch's values joined by newlines are one
  newline-delimited JSON document (``to_json`` escapes newlines inside strings), parsed by
  ``pyarrow.json`` with the columns' schema given. Binary columns arrive as base64 text (Spark's
  ``to_json``) and are decoded; fields a value omits (Spark omits nulls) are null.
* ``arrow``: each value is a one-row Arrow IPC stream (schema, one record batch, end-of-stream
  marker: :func:`spark_jobs.write_tasks.encode_arrow_rows`). Values written by one ingest batch
  share their schema message byte for byte, so each run of such values becomes one stream (the
  schema once, then every value's record batch) read in one call, not a stream per value.
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from slatedb_core.errors import InvalidArgument
from slatedb_core.table import ValueEncoding

__all__ = ["decode_values", "value_schema"]

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def value_schema(encoding: ValueEncoding) -> StructType:
    """The value columns ``encoding`` records."""
    schema = StructType.fromJson(json.loads(encoding.schema))
    if not isinstance(schema, StructType):
        raise InvalidArgument(f"the table's value schema is not a struct: {encoding.schema}")
    return schema


def decode_values(values: pa.Array, fmt: str, columns: StructType) -> pa.Table:
    """The columns ``values`` hold, of Spark's Arrow types for ``columns``, one row per value."""
    target = to_arrow_schema(columns, timezone="UTC")
    if fmt == "json":
        table = _decode_json(values, target)
    elif fmt == "arrow":
        table = _decode_arrow(values)
    else:
        raise InvalidArgument(f"unknown value encoding {fmt!r}")
    if len(table) != len(values):
        raise InvalidArgument(f"{len(values)} values decoded into {len(table)} rows")
    return _conform(table, target)


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """``table``'s columns named by ``target``, cast to its types (missing ones null)."""
    cols = []
    for f in target:
        if f.name in table.column_names:
            col = table.column(f.name)
            cols.append(col if col.type == f.type else col.cast(f.type))
        else:
            cols.append(pa.nulls(len(table), f.type))
    return pa.Table.from_arrays(cols, schema=target).combine_chunks()


# ---- json ------------------------------------------------------------------------------------------
def _json_type(t: pa.DataType) -> pa.DataType:
    """What pyarrow.json parses a column of type ``t`` as: base64 binary as text."""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.string()
    return t


def _decode_json(values: pa.Array, target: pa.Schema) -> pa.Table:
    if len(values) == 0:
        return target.empty_table()
    if values.null_count:
        raise InvalidArgument("a json-encoded value is missing (null)")
    parse_schema = pa.schema([pa.field(f.name, _json_type(f.type)) for f in target])
    doc = _join_lines(values)
    table = pj.read_json(
        io.BytesIO(doc),
        read_options=pj.ReadOptions(block_size=max(1 << 20, len(doc) + 1)),
        parse_options=pj.ParseOptions(
            explicit_schema=parse_schema, unexpected_field_behavior="ignore"
        ),
    )
    cols = []
    for f in target:
        col = table.column(f.name)
        if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            col = pa.chunked_array(
                [
                    pa.array(
                        [None if s is None else base64.b64decode(s) for s in col.to_pylist()],
                        f.type,
                    )
                ]
            )
        cols.append(col)
    return pa.Table.from_arrays(cols, names=target.names)


def _join_lines(values: pa.Array) -> bytes:
    """The values' bytes, each followed by a newline, in one buffer (numpy, no per-value
    Python)."""
    arr = values.cast(pa.binary())
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    data = (
        np.frombuffer(arr.buffers()[2], np.uint8)
        if arr.buffers()[2] is not None
        else np.zeros(0, np.uint8)
    )
    start, stop = int(offsets[0]), int(offsets[-1])
    body = data[start:stop]
    lens = np.diff(offsets)
    out = np.empty(len(body) + len(arr), np.uint8)
    ends = np.cumsum(lens + 1) - 1  # where each value's newline goes
    mask = np.ones(len(out), bool)
    mask[ends] = False
    out[mask] = body
    out[ends] = ord("\n")
    return out.tobytes()


# ---- arrow -----------------------------------------------------------------------------------------
def _decode_arrow(values: pa.Array) -> pa.Table:
    if len(values) == 0:
        return pa.table({})
    if values.null_count:
        raise InvalidArgument("an arrow-encoded value is missing (null)")
    arr = values.cast(pa.binary())
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4).astype(
        np.int64
    )
    data = np.frombuffer(arr.buffers()[2], np.uint8)
    first = arr[0].as_py()
    head = _schema_message(first)
    h = len(head)
    lens = np.diff(offsets)
    starts = offsets[:-1]
    # a value belongs to the shared stream if it starts with the same schema message and ends
    # with the end-of-stream marker
    ok = lens >= h + len(_EOS)
    if ok.any():
        idx = starts[ok, None] + np.arange(h)
        ok[ok] = (data[idx] == np.frombuffer(head, np.uint8)).all(axis=1)
    if ok.any():
        tail = offsets[1:][ok, None] - len(_EOS) + np.arange(len(_EOS))
        ok[ok] = (data[tail] == np.frombuffer(_EOS, np.uint8)).all(axis=1)
    if not ok.all():
        return pa.concat_tables(
            [_read_stream(v) for v in arr.to_pylist()], promote_options="permissive"
        )
    keep = np.zeros(len(data) + 1, np.int32)
    np.add.at(keep, starts + h, 1)
    np.add.at(keep, offsets[1:] - len(_EOS), -1)
    mask = np.cumsum(keep[:-1]) > 0
    stream = head + data[mask].tobytes() + _EOS
    table = pa.ipc.open_stream(stream).read_all()
    if len(table) != len(arr):
        raise InvalidArgument(f"arrow-encoded values hold {len(table)} rows, not {len(arr)}")
    return table


def _schema_message(value: bytes) -> bytes:
    """The leading schema message of an IPC stream (its bytes as written)."""
    buf = io.BytesIO(value)
    reader = pa.ipc.open_stream(buf)
    schema_bytes: bytes = reader.schema.serialize().to_pybytes()
    if value.startswith(schema_bytes):
        return schema_bytes
    raise InvalidArgument("an arrow-encoded value does not start with its schema message")


def _read_stream(value: bytes) -> pa.Table:
    table = pa.ipc.open_stream(value).read_all()
    if len(table) != 1:
        raise InvalidArgument(f"an arrow-encoded value holds one row, this one {len(table)}")
    return table
