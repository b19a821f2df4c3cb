"""Which value encoding a write brings, checked against (and recorded by) the table before any
task runs: both Spark write paths (``format("slatedb")`` and :func:`spark_jobs.ingest.ingest`)
encode columns into values the same way (docs/spark.md "Value columns"), so both record them,
and a reader of the table sees the columns whichever path wrote it."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql.types import StructType

from slatedb_core import Table, ValueEncoding
from slatedb_core.errors import InvalidArgument
from slatedb_core.store.objectstore import ObjectStore


def payload_schema(schema: StructType, payload: Sequence[str]) -> str:
    """The StructType of the columns encoded into each value, as the table records it."""
    return json.dumps(StructType([schema[c] for c in payload]).jsonValue(), sort_keys=True)


def value_encoding_of(
    schema: StructType, fmt: str | None, columns: Sequence[str]
) -> ValueEncoding | None:
    """The encoding of values holding ``columns`` of ``schema`` as ``fmt`` (``json``,
    ``arrow``); None for plain values."""
    return None if fmt is None else ValueEncoding(fmt, payload_schema(schema, columns))


def check_table_encoding(
    store: ObjectStore, table_path: str, encoding: ValueEncoding | None, *, value_option: str
) -> None:
    """:func:`check_value_encoding` against the table at ``table_path`` as it is now."""
    with Table.open(table_path, store) as table:
        check_value_encoding(table, encoding, created=False, value_option=value_option)


def check_value_encoding(
    table: Table, encoding: ValueEncoding | None, *, created: bool, value_option: str
) -> None:
    """A write must bring what ``table`` holds: its recorded columns, or plain values. The first
    write of either kind records it (:meth:`Table.record_value_encoding`, one shard-map commit),
    so a plain and an encoded write racing on an empty table cannot both pass; an encoded write
    is also refused by a table that holds plain values written before plain writes recorded
    them. ``value_option`` names the caller's setting for plain values in the messages
    (``'value'``, ``value_column``)."""
    if encoding is not None:
        if table.value_encoding is None and not created and _holds_rows(table):
            raise _holds_plain(table, value_option)
        try:
            table.record_value_encoding(encoding)  # InvalidArgument if others are recorded
        except InvalidArgument:
            if table.maps.read_latest().plain_values:
                raise _holds_plain(table, value_option) from None
            raise
        return
    enc = table.value_encoding
    if enc is None:
        try:
            table.record_value_encoding(None)
            return
        except InvalidArgument:  # columns recorded since this handle read the map
            enc = table.maps.read_latest().value_encoding
            if enc is None:
                raise
    raise InvalidArgument(
        f"{value_option}: table {table.path!r} holds {enc.format}-encoded columns "
        f"{enc.schema}; write those columns (without {value_option}), or overwrite"
    )


def _holds_plain(table: Table, value_option: str) -> InvalidArgument:
    return InvalidArgument(
        f"{value_option} is missing: table {table.path!r} holds plain values, not "
        f"encoded columns; give {value_option}, or overwrite (a table whose values "
        "are these columns already, written before ingests recorded them, takes "
        "Table.record_value_encoding once)"
    )


def _holds_rows(table: Table) -> bool:
    """Whether any shard of ``table`` serves a row (a live read of the first one)."""
    return next(iter(table.scan()), None) is not None
