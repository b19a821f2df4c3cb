"""A refused overwrite leaves the store as it was: the rows (and every other argument) are checked
before the plan reserves shard ids with a shard-map commit (issue 37, hole 6: a wrong key type,
wrong column names or string values were refused after a map version was committed)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from slatedb_core.errors import InvalidArgument
from slatedb_core.options import MAX_KEY_BYTES, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.overwrite import overwrite_table
from spark_jobs.datasource import SlateDBDataSource
from tests.table.conftest import OPTS, fill


def _objects(store: ObjectStore) -> dict[str, bytes]:
    """Every object of the store, byte for byte."""
    return {m.path: bytes(store.get(m.path).data) for m in store.list("")}


def _table(mem: ObjectStore) -> Table:
    t = Table.create("t", mem, [b"m"], options=OPTS)
    fill(t, {b"a": b"1", b"x": b"2"}, flush=True)
    return t


def _batch(**cols: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(cols)


BAD_ROWS: dict[str, list[pa.RecordBatch]] = {
    "key_type": [_batch(key=pa.array([1, 2]), value=pa.array([b"1", b"2"]))],
    "column_names": [_batch(k=pa.array([b"a"]), v=pa.array([b"1"]))],
    "string_values": [_batch(key=pa.array([b"a"]), value=pa.array(["1"]))],
    "string_keys": [_batch(key=pa.array(["a"]), value=pa.array([b"1"]))],
    "null_key": [_batch(key=pa.array([b"a", None]), value=pa.array([b"1", b"2"]))],
    "empty_key": [_batch(key=pa.array([b""]), value=pa.array([b"1"]))],
    "long_key": [_batch(key=pa.array([b"k" * (MAX_KEY_BYTES + 1)]), value=pa.array([b"1"]))],
    "empty_batch_bad_schema": [
        _batch(key=pa.array([b"a"]), value=pa.array([b"1"])),
        _batch(key=pa.array([], pa.int64()), value=pa.array([], pa.binary())),
    ],
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_refused_table_overwrite_leaves_the_store_byte_identical(
    mem: ObjectStore, case: str
) -> None:
    with _table(mem) as t:
        before = _objects(mem)
        with pytest.raises(InvalidArgument):
            t.overwrite(BAD_ROWS[case])
        assert _objects(mem) == before


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_refused_overwrite_table_call_leaves_the_store_byte_identical(
    mem: ObjectStore, case: str
) -> None:
    _table(mem).close()
    before = _objects(mem)
    with pytest.raises(InvalidArgument):
        overwrite_table("t", mem, BAD_ROWS[case], options=DbOptions())
    assert _objects(mem) == before


OTHER_BAD: dict[str, Callable[[ObjectStore, list[pa.RecordBatch]], object]] = {
    "value_encoding": lambda s, rows: overwrite_table(
        "t",
        s,
        rows,
        value_encoding="json",  # type: ignore[arg-type]
    ),
    "txn": lambda s, rows: overwrite_table("t", s, rows, txn=("app", 1)),  # type: ignore[arg-type]
    "options": lambda s, rows: overwrite_table("t", s, rows, options={}),  # type: ignore[arg-type]
    "not_a_batch": lambda s, rows: overwrite_table("t", s, [*rows, {"key": b"a"}]),
}


@pytest.mark.parametrize("case", sorted(OTHER_BAD))
def test_other_bad_arguments_of_an_overwrite_are_refused_before_any_write(
    mem: ObjectStore, case: str
) -> None:
    _table(mem).close()
    before = _objects(mem)
    good = [_batch(key=pa.array([b"a"]), value=pa.array([b"1"]))]
    with pytest.raises(InvalidArgument):
        OTHER_BAD[case](mem, good)
    assert _objects(mem) == before


SCHEMAS = {
    "key_type": StructType([StructField("k", IntegerType()), StructField("v", BinaryType())]),
    "value_type": StructType([StructField("k", StringType()), StructField("v", IntegerType())]),
    "no_key_column": StructType([StructField("x", StringType()), StructField("v", BinaryType())]),
}


@pytest.mark.parametrize("case", sorted(SCHEMAS))
def test_a_refused_spark_overwrite_plan_leaves_the_store_byte_identical(
    tmp_path: object, case: str
) -> None:
    """The data source's writer (what Spark calls on the driver for ``mode("overwrite")``)
    checks the DataFrame's schema before it plans (plan_overwrite commits a map version)."""
    from slatedb_core.store.url import open_store

    url = f"file://{tmp_path}"
    store = open_store(url)
    _table(store).close()
    before = _objects(store)
    source = SlateDBDataSource({"url": url, "path": "t", "key": "k", "value": "v"})
    with pytest.raises(InvalidArgument):
        source.writer(SCHEMAS[case], True)
    assert _objects(store) == before
