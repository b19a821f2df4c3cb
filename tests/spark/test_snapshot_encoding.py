"""A read at a snapshot decodes with the value encoding of the snapshot's own shard-map version,
not today's (issue 37, hole 3: after an overwrite that changed the JSON columns, a read of a
snapshot taken before it returned its rows with today's columns, all null).

Most tests drive the reader's API (``read_schema``, ``SlateDBReader.partitions`` and ``read``:
what Spark calls, without a JVM); one reads through ``spark.read.format("slatedb")``."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from slatedb_core import open_store
from slatedb_core.errors import InvalidArgument
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, TableSnapshot, ValueEncoding
from slatedb_core.table.named_snapshots import NamedSnapshotRecords, read_named
from slatedb_core.table.shardmap import ShardMapStore
from slatedb_core.table.snapshot import snapshot_value_encoding
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_read import SlateDBReader, read_schema

pytestmark = pytest.mark.spark

TABLE = "t"
OLD = StructType([StructField("n", LongType()), StructField("s", StringType())])
NEW = StructType([StructField("m", DoubleType())])


def encoding(columns: StructType) -> ValueEncoding:
    return ValueEncoding("json", json.dumps(columns.jsonValue(), sort_keys=True))


def rows(n: int, value: Any) -> pa.RecordBatch:
    keys = [b"k%02d" % i for i in range(n)]
    values = [json.dumps(value(i)).encode() for i in range(n)]
    return pa.record_batch(
        [pa.array(keys, pa.binary()), pa.array(values, pa.binary())], ["key", "value"]
    )


def old_row(i: int) -> dict[str, Any]:
    return {"n": i, "s": f"s{i}"}


def new_row(i: int) -> dict[str, Any]:
    return {"m": i * 0.5}


@pytest.fixture
def url() -> str:
    """A store of its own, shared by every open_store of this process (the reader's API runs
    here; Spark's executors are other processes: its test takes a directory)."""
    return f"memory://snapshot-encoding-{uuid.uuid4().hex}"


def old_table_then_snapshot_then_overwrite(store: ObjectStore) -> TableSnapshot:
    """A table of OLD columns, the snapshot 'before', then an overwrite with NEW columns."""
    with Table.create(TABLE, store, [b"k05"]) as t:
        t.overwrite([rows(10, old_row)], value_encoding=encoding(OLD))
        snap = t.snapshot(timedelta(hours=1), name="before")
        t.overwrite([rows(10, new_row)], value_encoding=encoding(NEW))
    return snap


def read_rows(url: str, **options: str) -> tuple[StructType, dict[bytes, dict[str, Any]]]:
    """What a query of the table returns: its schema and rows by key (the reader's API)."""
    opts = {"url": url, "path": TABLE, **options}
    schema = read_schema(opts)
    reader = SlateDBReader(opts, schema)
    out: dict[bytes, dict[str, Any]] = {}
    for p in reader.partitions():
        for b in reader.read(p):
            for r in pa.Table.from_batches([b]).to_pylist():
                out[r.pop("key")] = r
    return schema, out


def expected(n: int, row: Any) -> dict[bytes, dict[str, Any]]:
    return {b"k%02d" % i: row(i) for i in range(n)}


def test_a_named_snapshot_reads_with_the_columns_it_was_taken_with(url: str) -> None:
    old_table_then_snapshot_then_overwrite(open_store(url))
    schema, got = read_rows(url, checkpoint="before")
    assert schema.fieldNames() == ["key", "n", "s"]
    assert got == expected(10, old_row)
    schema, got = read_rows(url)  # the latest reads today's columns
    assert schema.fieldNames() == ["key", "m"]
    assert got == expected(10, new_row)


def test_a_snapshot_carries_its_encoding_past_the_gc_of_its_map_version(url: str) -> None:
    store = open_store(url)
    snap = old_table_then_snapshot_then_overwrite(store)
    with Table.open(TABLE, store) as t:
        t.collect_garbage(min_age=timedelta(0))
    maps = ShardMapStore(store, TABLE)
    assert [e.id for e in maps.seq.list()] == [maps.read_latest().id]  # its version is gone
    assert snapshot_value_encoding(maps, snap) == encoding(OLD)
    recorded = read_named(store, TABLE, "before")
    assert recorded is not None and snapshot_value_encoding(maps, recorded) == encoding(OLD)
    schema, got = read_rows(url, checkpoint="before")
    assert schema.fieldNames() == ["key", "n", "s"]
    assert got == expected(10, old_row)


def record_as_before_this_fix(store: ObjectStore, snap: TableSnapshot) -> None:
    """Record ``snap`` under its name as records were written before snapshots carried their
    encoding (no ``value_encoding`` key)."""
    old = dataclasses.replace(snap, value_encoding=None, carries_encoding=False)
    assert "value_encoding" not in old.to_dict()
    assert snap.name is not None
    NamedSnapshotRecords(store, TABLE, snap.name, 3).update(old)
    found = read_named(store, TABLE, snap.name)
    assert found is not None and not found.carries_encoding


def test_an_old_record_finds_the_encoding_in_its_map_version(url: str) -> None:
    store = open_store(url)
    record_as_before_this_fix(store, old_table_then_snapshot_then_overwrite(store))
    schema, got = read_rows(url, checkpoint="before")
    assert schema.fieldNames() == ["key", "n", "s"]
    assert got == expected(10, old_row)


def test_an_old_record_whose_map_version_was_collected_after_splits_still_decodes(
    url: str,
) -> None:
    """No overwrite since the snapshot: a later surviving map version that still names one of
    its shards has its encoding (only an overwrite changes it, and it replaces every shard)."""
    store = open_store(url)
    with Table.create(TABLE, store, [b"k05"]) as t:
        t.overwrite([rows(10, old_row)], value_encoding=encoding(OLD))
        snap = t.snapshot(timedelta(hours=1), name="before")
        t.split(1, at=b"k07")
        t.collect_garbage(min_age=timedelta(0))
    record_as_before_this_fix(store, snap)
    schema, got = read_rows(url, checkpoint="before")
    assert schema.fieldNames() == ["key", "n", "s"]
    assert got == expected(10, old_row)


def test_an_old_record_whose_encoding_is_lost_fails_naming_the_option(url: str) -> None:
    """Its map version collected and the table overwritten since: nothing tells its encoding,
    so the read refuses (saying what to do) rather than return nulls."""
    store = open_store(url)
    record_as_before_this_fix(store, old_table_then_snapshot_then_overwrite(store))
    with Table.open(TABLE, store) as t:
        t.collect_garbage(min_age=timedelta(0))
    with pytest.raises(InvalidArgument, match=r"option 'checkpoint'.*key binary, value binary"):
        read_rows(url, checkpoint="before")
    raw = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    opts = {"url": url, "path": TABLE, "checkpoint": "before"}
    reader = SlateDBReader(opts, raw)  # its raw values still read
    values = {
        r["key"]: json.loads(r["value"])
        for p in reader.partitions()
        for b in reader.read(p)
        for r in b.to_pylist()
    }
    assert values == expected(10, old_row)


def test_a_query_planned_before_an_overwrite_that_changed_the_columns_fails(url: str) -> None:
    """The schema is read when the query is planned, its snapshot taken later (partitions):
    an overwrite in between gave the snapshot other columns, which read as nulls."""
    store = open_store(url)
    with Table.create(TABLE, store, [b"k05"]) as t:
        t.overwrite([rows(10, old_row)], value_encoding=encoding(OLD))
    opts = {"url": url, "path": TABLE}
    reader = SlateDBReader(opts, read_schema(opts))
    with Table.open(TABLE, store) as t:
        t.overwrite([rows(10, new_row)], value_encoding=encoding(NEW))
    with pytest.raises(InvalidArgument, match="run the query again"):
        reader.partitions()


def test_spark_reads_a_named_snapshot_with_its_own_columns(
    spark: SparkSession, tmp_path: Path
) -> None:
    spark.dataSource.register(SlateDBDataSource)
    url = (tmp_path / "store").as_uri()
    old_table_then_snapshot_then_overwrite(open_store(url))
    df = (
        spark.read.format("slatedb")
        .option("url", url)
        .option("path", TABLE)
        .option("checkpoint", "before")
        .load()
    )
    assert df.schema.fieldNames() == ["key", "n", "s"]
    got = {bytes(r["key"]): {"n": r["n"], "s": r["s"]} for r in df.collect()}
    assert got == expected(10, old_row)
